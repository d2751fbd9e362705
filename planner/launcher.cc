#include "planner/launcher.h"

#include <cctype>
#include <fstream>
#include <set>
#include <sstream>

#include <fmt/format.h>

namespace dsplan {
namespace {

std::string ShellQuote(const std::string& s) {
  if (s.empty()) return "''";
  bool safe = true;
  for (unsigned char c : s) {
    if (!(std::isalnum(c) || c == '_' || c == '-' || c == '.' || c == '/' || c == '=' ||
          c == ':' || c == ',' || c == '+' || c == '@')) {
      safe = false;
    }
  }
  if (safe) return s;
  std::string out = "'";
  for (char c : s) {
    if (c == '\'') out += "'\\''";
    else out += c;
  }
  return out + "'";
}

std::string_view Strip(std::string_view s) {
  // Python's str.strip(): ASCII whitespace.
  auto ws = [](char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; };
  while (!s.empty() && ws(s.front())) s.remove_prefix(1);
  while (!s.empty() && ws(s.back())) s.remove_suffix(1);
  return s;
}

bool IsSpace(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}

// " train.py ARGS --deepspeed FILE" (HF) or " train.py ARGS --deepspeed --deepspeed_config FILE".
std::string ScriptPart(const LaunchSpec& spec) {
  std::string cmd = " " + ShellQuote(spec.script);
  for (const std::string& a : spec.script_args) cmd += " " + ShellQuote(a);
  if (spec.kind == ScriptKind::kDeepSpeed) {
    cmd += " --deepspeed --deepspeed_config " + ShellQuote(spec.ds_config_path);
  } else {
    cmd += " --deepspeed " + ShellQuote(spec.ds_config_path);
  }
  return cmd;
}

}  // namespace

LaunchSpec LaunchSpecForPlan(const Plan& plan, std::vector<std::string> hosts) {
  LaunchSpec s;
  s.nodes = plan.nodes;
  s.gpus_per_node = plan.gpus_per_node;
  s.hosts = std::move(hosts);
  return s;
}

bool UsesPlaceholderHosts(const LaunchSpec& spec) {
  return spec.hosts.size() < static_cast<size_t>(spec.nodes);
}

std::string LaunchCommand(const LaunchSpec& spec) {
  std::string cmd = "deepspeed";
  if (spec.nodes > 1) {
    cmd += " --hostfile " + ShellQuote(spec.hostfile_path);
    cmd += fmt::format(" --num_nodes {}", spec.nodes);
  }
  cmd += fmt::format(" --num_gpus {}", spec.gpus_per_node);
  return cmd + ScriptPart(spec);
}

std::string TorchrunCommand(const LaunchSpec& spec) {
  std::string cmd = "torchrun";
  if (spec.nodes > 1) {
    cmd += fmt::format(" --nnodes {} --nproc_per_node {}", spec.nodes, spec.gpus_per_node);
    cmd += " --rdzv_backend c10d --rdzv_endpoint \"$MASTER_ADDR:29500\"";
  } else {
    cmd += fmt::format(" --nproc_per_node {}", spec.gpus_per_node);
  }
  return cmd + ScriptPart(spec);
}

std::string SrunCommand(const LaunchSpec& spec) {
  if (spec.nodes <= 1) return "";
  return fmt::format(
      "export MASTER_ADDR=$(scontrol show hostnames \"$SLURM_JOB_NODELIST\" | head -n 1)\n"
      "srun --nodes {} --ntasks-per-node 1 {}",
      spec.nodes, TorchrunCommand(spec));
}

std::string HostfileText(const LaunchSpec& spec) {
  if (spec.nodes <= 1) return "";
  std::string out;
  const bool placeholders = UsesPlaceholderHosts(spec);
  if (placeholders) {
    out +=
        "# PLACEHOLDER host names: replace node1..node" + std::to_string(spec.nodes) +
        " with your machines' names (reachable by passwordless ssh).\n"
        "# DeepSpeed format: one `hostname slots=<GPUs>` line per node; '#' lines are ignored.\n";
  }
  for (int i = 0; i < spec.nodes; ++i) {
    const std::string host =
        placeholders ? fmt::format("node{}", i + 1) : spec.hosts[static_cast<size_t>(i)];
    out += fmt::format("{} slots={}\n", host, spec.gpus_per_node);
  }
  return out;
}

std::vector<std::string> HfTrainerArgs(const Plan& plan) {
  std::vector<std::string> a = {"--per_device_train_batch_size", std::to_string(plan.micro_batch),
                                "--gradient_accumulation_steps", std::to_string(plan.grad_accum)};
  if (plan.precision == Precision::kBf16) a.push_back("--bf16");
  if (plan.precision == Precision::kFp16) a.push_back("--fp16");
  a.push_back("--max_grad_norm");
  a.push_back(fmt::format("{}", plan.gradient_clipping));
  // Explicit optimizer and scheduler values must equal the Trainer's (trainer_config_process
  // fill_match; a mismatch raises at deepspeed_init).
  const OptimizerHyperparams& hp = plan.optimizer_params;
  auto num = [&](const char* flag, double v) {
    a.push_back(flag);
    a.push_back(fmt::format("{}", v));
  };
  if (hp.lr) num("--learning_rate", *hp.lr);
  if (hp.beta1) num("--adam_beta1", *hp.beta1);
  if (hp.beta2) num("--adam_beta2", *hp.beta2);
  if (hp.eps) num("--adam_epsilon", *hp.eps);
  if (hp.weight_decay) num("--weight_decay", *hp.weight_decay);
  if (plan.scheduler_params.warmup_num_steps) {
    a.push_back("--warmup_steps");
    a.push_back(std::to_string(*plan.scheduler_params.warmup_num_steps));
  }
  if (plan.gradient_checkpointing) a.push_back("--gradient_checkpointing");
  return a;
}

Result<std::vector<HostSlots>> ParseHostfile(std::string_view text) {
  std::vector<HostSlots> pool;
  std::set<std::string> seen;
  size_t pos = 0;
  while (pos <= text.size()) {
    size_t nl = text.find('\n', pos);
    if (nl == std::string_view::npos) nl = text.size();
    const std::string_view line = Strip(text.substr(pos, nl - pos));
    pos = nl + 1;
    if (line.empty() || line.front() == '#') continue;
    // ^(\S+)\s+slots=(\d+)
    size_t i = 0;
    while (i < line.size() && !IsSpace(line[i])) ++i;
    const std::string host(line.substr(0, i));
    size_t j = i;
    while (j < line.size() && IsSpace(line[j])) ++j;
    bool ok = i > 0 && j > i && line.substr(j).starts_with("slots=");
    size_t k = j + 6;
    size_t digits_end = k;
    while (ok && digits_end < line.size() && std::isdigit((unsigned char)line[digits_end])) {
      ++digits_end;
    }
    ok = ok && digits_end > k;
    if (!ok) {
      return Status::InvalidArgument(fmt::format(
          "hostfile contains a bad entry: '{}'; each line must be 'hostname slots=<n>' (DeepSpeed "
          "refuses to launch)",
          line));
    }
    const std::string_view num = line.substr(k, digits_end - k);
    if (num.size() > 9) {
      return Status::InvalidArgument(fmt::format("hostfile: slots={} for {} is too large", num, host));
    }
    const int slots = std::stoi(std::string(num));
    if (!seen.insert(host).second) {
      return Status::InvalidArgument(fmt::format(
          "hostfile contains multiple entries for {}; DeepSpeed refuses to launch: keep one line "
          "per host",
          host));
    }
    pool.push_back({host, slots});
  }
  if (pool.empty()) {
    return Status::InvalidArgument(
        "hostfile is empty or not formatted correctly (no 'hostname slots=<n>' line); DeepSpeed "
        "refuses to launch");
  }
  return pool;
}

Result<std::vector<HostSlots>> ParseHostfileFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Status::NotFound(fmt::format("cannot open hostfile '{}'", path));
  std::stringstream ss;
  ss << in.rdbuf();
  auto r = ParseHostfile(ss.str());
  if (!r.ok()) return r.status().WithPrefix(path);
  return r;
}

}  // namespace dsplan
