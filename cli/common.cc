#include "cli/common.h"

#include <algorithm>
#include <cmath>
#include <string_view>
#include <vector>

#include <fmt/format.h>

#include "core/hardware_profile.h"
#include "core/local_machine.h"
#include "core/model_catalog.h"
#include "core/text.h"
#include "simulator/workload.h"

namespace dsplan {

int Fail(const Status& s) {
  // One line always: whatever a message carries (a value with newlines, raw bytes, a huge key)
  // is escaped and cut here. A failing stderr cannot be reported anywhere; the exit code stays.
  std::string line = "dsplan: error: " + OneLine(s.message()) + "\n";
  std::fwrite(line.data(), 1, line.size(), stderr);
  std::fflush(stderr);
  return FailExitCode(s);
}

namespace {

// The option named |name| in |app| or any of its subcommands.
const CLI::Option* FindOption(const CLI::App& app, const std::string& name) {
  if (const CLI::Option* o = app.get_option_no_throw(name)) return o;
  for (const CLI::App* sub : app.get_subcommands([](const CLI::App*) { return true; })) {
    if (const CLI::Option* o = FindOption(*sub, name)) return o;
  }
  return nullptr;
}

// A hint for a stray first argument of the planner's own line (no command given): a command's
// name mistyped ("chek"), or a DeepSpeed config given where only `check`, `simulate` and
// `validate` read one. Empty when neither fits.
std::string StrayArgumentHint(const CLI::App& app, const std::string& first) {
  if (!app.get_subcommands().empty()) return {};  // a command was given: its own options apply
  const std::vector<const CLI::App*> commands =
      app.get_subcommands([](const CLI::App*) { return true; });
  std::string nearest;
  size_t best = 3;  // at most two edits away
  for (const CLI::App* c : commands) {
    const size_t d = EditDistance(first, c->get_name(), /*ignore_case=*/true);
    if (d < best) {
      best = d;
      nearest = c->get_name();
    }
  }
  if (!nearest.empty()) return fmt::format(" (did you mean the command '{}'?)", nearest);
  if (first.size() > 5 && first.compare(first.size() - 5, 5, ".json") == 0) {
    return fmt::format(" (to judge a DeepSpeed config: dsplan check {} --model M --gpus N)",
                       Quote(first, 60));
  }
  return {};
}

std::string TypeWords(const CLI::Option* o) {
  if (o == nullptr) return "a valid value";
  const std::string t = o->get_type_name();
  if (t.find("UINT") != std::string::npos) return "a non-negative integer";
  if (t.find("INT") != std::string::npos) return "an integer";
  if (t.find("FLOAT") != std::string::npos || t.find("NUMBER") != std::string::npos) {
    return "a number";
  }
  return "a valid value";
}

bool StartsWith(std::string_view s, std::string_view p) { return s.substr(0, p.size()) == p; }

}  // namespace

std::string CliErrorMessage(const CLI::ParseError& e, const CLI::App& app, int argc,
                            const char* const* argv) {
  const std::string what = e.what();
  const std::string help = "; run 'dsplan --help' for the options";
  // A transform's own message (CountFlag) names the flag already: CLI11 makes it
  // "--gpus: --gpus must be ...", and the first "--gpus: " goes.
  if (dynamic_cast<const CLI::ValidationError*>(&e) != nullptr) {
    const size_t colon = what.find(": ");
    if (colon != std::string::npos && colon > 0 &&
        StartsWith(std::string_view(what).substr(colon + 2), what.substr(0, colon) + " ")) {
      return what.substr(colon + 2);
    }
  }
  // "Could not convert: --gpus = abc"
  if (StartsWith(what, "Could not convert: ")) {
    const std::string rest = what.substr(19);
    const size_t eq = rest.find(" = ");
    const std::string name = eq == std::string::npos ? rest : rest.substr(0, eq);
    const std::string value = eq == std::string::npos ? "" : rest.substr(eq + 3);
    const CLI::Option* o = FindOption(app, name);
    std::string msg = fmt::format("{} needs {}, got {}", Escape(name), TypeWords(o), Quote(value));
    if (StartsWith(value, "-") && value.size() > 1 && !std::isdigit((unsigned char)value[1])) {
      msg += fmt::format(" (is the value of {} missing?)", Escape(name));
    }
    return msg + help;
  }
  // "--gpus: At Most 1 required but received 2", "--gpus: At least 1 required but received 0",
  // "--gpus: 1 required INT missing"
  for (const char* marker : {": At Most ", ": At least ", " required "}) {
    const size_t at = what.find(marker);
    const size_t colon = what.find(": ");
    if (at == std::string::npos || !StartsWith(what, "-") || colon == std::string::npos) continue;
    const std::string name = what.substr(0, colon);
    if (std::string(marker) == ": At Most ") {
      return fmt::format("{} was given more than once or with more than one value; give it one "
                         "value{}",
                         Escape(name), help);
    }
    const CLI::Option* o = FindOption(app, name);
    return fmt::format("{} needs {} after it{}", Escape(name), TypeWords(o), help);
  }
  // "The following arguments were not expected: c b a" (CLI11 lists them last first).
  if (what.find("not expected: ") != std::string::npos) {
    const std::string list = what.substr(what.find("not expected: ") + 14);
    std::vector<std::string> stray;
    size_t pos = 0;
    while (pos <= list.size()) {
      size_t sp = list.find(' ', pos);
      if (sp == std::string::npos) sp = list.size();
      if (sp > pos) stray.push_back(list.substr(pos, sp - pos));
      pos = sp + 1;
    }
    // Back in command-line order (an argument with spaces inside came through whole in argv).
    std::vector<std::string> ordered;
    for (int i = 1; i < argc && ordered.size() < 5; ++i) {
      const std::string a = argv[i];
      if (what.find(a) != std::string::npos && !a.empty() &&
          std::find(ordered.begin(), ordered.end(), a) == ordered.end() &&
          std::find(stray.begin(), stray.end(), a) != stray.end()) {
        ordered.push_back(a);
      }
    }
    if (ordered.empty()) {
      std::reverse(stray.begin(), stray.end());
      ordered = stray;
    }
    if (ordered.empty()) {
      // Only empty arguments were left over (CLI11 lists them as nothing): an empty string on
      // the command line, often an unset shell variable in quotes.
      return "unexpected empty argument \"\" on the command line (an unset shell variable in "
             "quotes?); remove it" +
             help;
    }
    std::string shown;
    for (size_t i = 0; i < ordered.size() && i < 5; ++i) {
      shown += (i ? ", " : "") + Quote(ordered[i], 40);
    }
    if (ordered.size() > 5) shown += fmt::format(" and {} more", ordered.size() - 5);
    return fmt::format("unexpected argument{} {}{}{}", ordered.size() > 1 ? "s" : "", shown,
                       StrayArgumentHint(app, ordered.front()), help);
  }
  if (StartsWith(what, "Requires at most 1 subcommands") || what.find("subcommand") !=
                                                                std::string::npos) {
    return "give at most one command (models, model, profile, simulate, check, estimate, "
           "validate, accuracy)" + help;
  }
  std::string msg = what;
  std::replace(msg.begin(), msg.end(), '\n', ' ');
  return Escape(msg, 300) + help;
}

CLI::Validator CountFlag(const std::string& flag, int64_t lo, int64_t hi) {
  auto op = [flag, lo, hi](std::string& value) -> std::string {
    const auto digit = [](char c) { return c >= '0' && c <= '9'; };
    const std::string_view v = value;
    size_t i = 0;
    bool negative = false;
    if (i < v.size() && (v[i] == '+' || v[i] == '-')) negative = v[i++] == '-';
    std::string digits;  // the mantissa's digits, integer part then fraction
    size_t frac_digits = 0;
    while (i < v.size() && digit(v[i])) digits += v[i++];
    bool point = false;
    if (i < v.size() && v[i] == '.') {
      point = true;
      ++i;
      while (i < v.size() && digit(v[i])) {
        digits += v[i++];
        ++frac_digits;
      }
    }
    bool has_exp = false;
    bool exp_negative = false;
    int64_t exp = 0;  // saturates: beyond 10^6 the answer is the same
    size_t exp_digits = 0;
    if (i < v.size() && (v[i] == 'e' || v[i] == 'E')) {
      has_exp = true;
      ++i;
      if (i < v.size() && (v[i] == '+' || v[i] == '-')) exp_negative = v[i++] == '-';
      while (i < v.size() && digit(v[i])) {
        exp = std::min<int64_t>(exp * 10 + (v[i++] - '0'), 1'000'000);
        ++exp_digits;
      }
    }
    // Not a decimal number (hex, words, empty): CLI11's conversion decides and words the error.
    if (i != v.size() || digits.empty() || (has_exp && exp_digits == 0)) return "";
    if (!has_exp) {
      // "1.0": CLI11 refuses it as not an integer. "010": decimal ten, not octal eight.
      if (!point && digits.size() > 1 && digits[0] == '0') {
        const size_t nz = std::min(digits.find_first_not_of('0'), digits.size() - 1);
        value = (negative ? "-" : "") + digits.substr(nz);
      }
      return "";
    }
    const std::string range =
        fmt::format("{} must be an integer from {} to {}, got {}", flag, lo, hi, Quote(v));
    int64_t scale = (exp_negative ? -exp : exp) - static_cast<int64_t>(frac_digits);
    const size_t first = digits.find_first_not_of('0');
    digits = first == std::string::npos ? "" : digits.substr(first);
    if (!digits.empty() && scale < 0) {
      const size_t drop = static_cast<size_t>(-scale);
      if (drop >= digits.size() ||
          digits.find_first_not_of('0', digits.size() - drop) != std::string::npos) {
        return range + " (not a whole number)";
      }
      digits.resize(digits.size() - drop);
      scale = 0;
    }
    if (digits.empty()) scale = 0;
    if (static_cast<int64_t>(digits.size()) + scale > 18) return range;  // beyond 10^18
    int64_t n = 0;
    for (char c : digits) n = n * 10 + (c - '0');
    for (int64_t k = 0; k < scale; ++k) n *= 10;
    if (negative) n = -n;
    if (n < lo || n > hi) return range;
    value = std::to_string(n);
    return "";
  };
  return CLI::Validator(op, "", "count");
}

Status CheckNoEmptyValues(const CLI::App& app) {
  std::vector<const CLI::App*> apps = {&app};
  for (const CLI::App* sub : app.get_subcommands()) apps.push_back(sub);
  for (const CLI::App* a : apps) {
    for (const CLI::Option* o : a->get_options()) {
      if (o->get_type_size_min() == 0 || o->count() == 0) continue;  // a flag, or not given
      for (const std::string& v : o->results()) {
        if (!v.empty()) continue;
        const std::string name = o->get_lnames().empty()
                                     ? fmt::format("the {} argument", o->get_name())
                                     : "--" + o->get_lnames()[0];
        return Status::InvalidArgument(fmt::format(
            "{} was given an empty value (an unset shell variable in quotes?); give it a value "
            "or leave it out; run 'dsplan{} --help' for what it takes",
            name, a == &app ? "" : " " + a->get_name()));
      }
    }
  }
  return Status();
}

Status CheckNumberFlag(const char* flag, double v, double lo, double hi, bool lo_open) {
  const bool ok = std::isfinite(v) && (lo_open ? v > lo : v >= lo) && v <= hi;
  if (ok) return Status();
  return Status::InvalidArgument(fmt::format("{} must be a number in {}{}, {}], got {}", flag,
                                             lo_open ? "(" : "[", lo, hi, v));
}

Status CheckIntFlag(const char* flag, int64_t v, int64_t lo, int64_t hi) {
  if (v >= lo && v <= hi) return Status();
  return Status::InvalidArgument(
      fmt::format("{} must be an integer from {} to {}, got {}", flag, lo, hi, v));
}

Status CheckCluster(int64_t gpus_per_node, int64_t nodes) {
  if (gpus_per_node < 1 || nodes < 1) {
    return Status::InvalidArgument(fmt::format(
        "--gpus and --nodes must be positive integers (got --gpus {} --nodes {})", gpus_per_node,
        nodes));
  }
  if (gpus_per_node > kMaxWorldSize || nodes > kMaxWorldSize ||
      gpus_per_node * nodes > kMaxWorldSize) {
    return Status::InvalidArgument(fmt::format(
        "--gpus {} x --nodes {} is more than the {} GPUs dsplan plans for", gpus_per_node, nodes,
        kMaxWorldSize));
  }
  return Status();
}

Status CheckLengthFlags(std::optional<int64_t> seq_len, std::optional<int64_t> target_len) {
  if (seq_len) DSPLAN_RETURN_IF_ERROR(CheckIntFlag("--seq-len", *seq_len, 1, kMaxSeqLen));
  if (target_len) DSPLAN_RETURN_IF_ERROR(CheckIntFlag("--target-len", *target_len, 1, kMaxSeqLen));
  return Status();
}

Status SplitGpusIntoNodes(int profile_gpus_per_node, const std::string& profile_name,
                          bool nodes_given, int* gpus, int* nodes) {
  const int per_node = profile_gpus_per_node;
  if (per_node < 1 || *gpus <= per_node) return Status();
  if (!nodes_given && *nodes == 1 && *gpus % per_node == 0) {
    *nodes = *gpus / per_node;
    *gpus = per_node;
    return Status();
  }
  const int whole = (*gpus + per_node - 1) / per_node;
  return Status::InvalidArgument(fmt::format(
      "--gpus {} is GPUs per node, but a node of profile {} has {}; give --nodes {} --gpus {}, "
      "or a profile with larger nodes",
      *gpus, Quote(profile_name), per_node, nodes_given ? whole * *nodes : whole, per_node));
}

Status CheckHostName(const std::string& host) {
  bool ok = !host.empty() && host.size() <= 253;
  for (char c : host) {
    ok = ok && (std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '-' || c == '_' ||
                c == ':');
  }
  if (ok && host[0] == '-') ok = false;
  if (ok) return Status();
  return Status::InvalidArgument(fmt::format(
      "--host {} is not a host name (letters, digits, '.', '-', '_' and ':' only)", Quote(host)));
}

int FailExitCode(const Status& s) { return s.code() == Status::Code::kInternal ? 1 : 2; }

std::string DefaultHardwareName() {
  auto names = ListHardwareProfiles(DataDir());
  if (names.ok()) {
    for (const std::string& n : *names) {
      if (n == "h200-measured") return n;
    }
  }
  return "h200-sxm";
}

std::vector<std::string> MachineAdvice::Lines() const {
  std::vector<std::string> out;
  if (gpu) out.push_back(*gpu);
  if (host) out.push_back(*host);
  return out;
}

MachineAdvice LocalMachineAdvice(const std::string& hardware, const std::string& node,
                                 bool host_memory_given, bool host_cores_given,
                                 const HardwareProfile& profile) {
  MachineAdvice a;
  if (!node.empty()) return a;  // a node profile describes the host the user chose
  const std::optional<LocalGpu> local = DetectLocalGpu();
  if (!local) return a;
  if (!ProfileDescribesGpu(profile, *local)) {
    if (hardware.empty()) a.gpu = LocalGpuAdvice(profile, *local, ShippedProfileGpus(DataDir()));
    return a;
  }
  if (const std::optional<LocalHost> host = DetectLocalHost()) {
    a.host = LocalHostAdvice(profile, *host, host_memory_given, host_cores_given);
  }
  return a;
}

Result<HardwareProfile> LoadMachine(const std::string& hardware, const std::string& node,
                                    int host_cores) {
  DSPLAN_ASSIGN_OR_RETURN(
      HardwareProfile p,
      FindHardwareProfile(hardware.empty() ? DefaultHardwareName() : hardware, DataDir()));
  if (!node.empty()) {
    DSPLAN_ASSIGN_OR_RETURN(NodeProfile n, FindNodeProfile(node, DataDir()));
    p = ApplyNodeProfile(p, n);
  }
  if (host_cores != -1 && (host_cores < 1 || host_cores > 1'000'000)) {
    return Status::InvalidArgument(
        fmt::format("--host-cores must be an integer from 1 to 1000000, got {}", host_cores));
  }
  if (host_cores != -1) p.host.cores = host_cores;
  return p;
}

Status ResolveLengthFlags(const ModelSpec& spec, std::optional<int64_t> seq_len,
                          std::optional<int64_t> target_len, RunShape* shape) {
  DSPLAN_RETURN_IF_ERROR(CheckLengthFlags(seq_len, target_len));
  ResolveRunLengths(spec, seq_len, target_len, shape);
  return Status();
}

CLI::Option* AddGpusAndNodesFlags(CLI::App* cmd, int& gpus, int& nodes) {
  cmd->add_option("--gpus", gpus, "GPUs per node")
      ->capture_default_str()
      ->transform(CountFlag("--gpus", 1, kMaxWorldSize));
  return cmd->add_option("--nodes", nodes, "Nodes")
      ->capture_default_str()
      ->transform(CountFlag("--nodes", 1, kMaxWorldSize));
}

}  // namespace dsplan
