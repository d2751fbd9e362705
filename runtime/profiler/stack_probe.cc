#include "runtime/profiler/stack_probe.h"

#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "core/output_file.h"
#include "core/text.h"

namespace dsplan {
namespace {

using nlohmann::json;
namespace fs = std::filesystem;

// A measured number at |obj|[|key|]: finite; negative host-time differences (noise around 0)
// are allowed where |clamp| and read as 0.
Result<double> Num(const json& obj, const std::string& where, const char* key, bool clamp = false) {
  if (!obj.is_object() || !obj.contains(key)) {
    return Status::InvalidArgument(fmt::format("{}.{}: missing", where, key));
  }
  const json& v = obj.at(key);
  if (!v.is_number() || !std::isfinite(v.get<double>())) {
    return Status::InvalidArgument(fmt::format("{}.{}: expected a number", where, key));
  }
  const double x = v.get<double>();
  if (x < 0 && !clamp) {
    return Status::InvalidArgument(fmt::format("{}.{}: {} is negative", where, key, x));
  }
  return x < 0 ? 0.0 : x;
}

Result<double> Positive(const json& obj, const std::string& where, const char* key) {
  DSPLAN_ASSIGN_OR_RETURN(double x, Num(obj, where, key));
  if (x <= 0) return Status::InvalidArgument(fmt::format("{}.{}: must be positive", where, key));
  return x;
}

// A host time per call from a difference of measurements: positive and within [lo, hi] seconds
// (beyond that the measurement was disturbed or the mechanism did not happen).
Result<double> PlausibleSeconds(const json& obj, const std::string& where, const char* key,
                                double lo, double hi) {
  DSPLAN_ASSIGN_OR_RETURN(double x, Positive(obj, where, key));
  if (x < lo || x > hi) {
    return Status::InvalidArgument(fmt::format(
        "{}.{}: {} s is not plausible (expected {} to {} s)", where, key, x, lo, hi));
  }
  return x;
}

std::string Str(const json& obj, const char* key) {
  if (!obj.is_object() || !obj.contains(key) || !obj.at(key).is_string()) return "";
  return obj.at(key).get<std::string>();
}

// Least squares t = a + b * x over |pts| (x, t); false when the x do not vary.
bool FitLine(const std::vector<std::pair<double, double>>& pts, double* a, double* b) {
  const double n = static_cast<double>(pts.size());
  double sx = 0, sy = 0, sxx = 0, sxy = 0;
  for (const auto& [x, y] : pts) {
    sx += x;
    sy += y;
    sxx += x * x;
    sxy += x * y;
  }
  const double det = n * sxx - sx * sx;
  if (pts.size() < 2 || !(std::abs(det) > 1e-12 * std::max(1.0, sxx * n))) return false;
  *b = (n * sxy - sx * sy) / det;
  *a = (sy - *b * sx) / n;
  return true;
}

// The optimizer step's host costs from the zero3 grid: each row's parameter tensors
// ("params") and its stage-2 and stage-3 engine.step() seconds ("s2"/"s3" "step_s").
Status StepFromGrid(const json& grid, const std::string& where, StackProfile* s) {
  if (!grid.is_array() || grid.empty() || grid.size() > 1000) {
    return Status::InvalidArgument(where + ": expected a list of 1 to 1000 rows");
  }
  std::vector<std::pair<double, double>> s2, s3;
  for (size_t i = 0; i < grid.size(); ++i) {
    const std::string row = fmt::format("{}[{}]", where, i);
    DSPLAN_ASSIGN_OR_RETURN(double params, Positive(grid[i], row, "params"));
    if (!grid[i].is_object() || !grid[i].contains("s2") || !grid[i].contains("s3")) {
      return Status::InvalidArgument(row + ": s2 and s3 are required");
    }
    DSPLAN_ASSIGN_OR_RETURN(double t2, Positive(grid[i]["s2"], row + ".s2", "step_s"));
    DSPLAN_ASSIGN_OR_RETURN(double t3, Positive(grid[i]["s3"], row + ".s3", "step_s"));
    s2.emplace_back(params, t2);
    s3.emplace_back(params, t3);
  }
  double a2 = 0, b2 = 0, a3 = 0, b3 = 0;
  if (!FitLine(s2, &a2, &b2) || !FitLine(s3, &a3, &b3)) {
    return Status::InvalidArgument(where + ": the rows need at least two parameter counts");
  }
  // A fit that goes negative (noise on too few rows) is not a cost: clamp at 0.
  s->z12_step_s = std::max(0.0, a2);
  s->z12_step_per_param_s = std::max(0.0, b2);
  s->z3_step_s = std::max(0.0, a3);
  s->z3_step_per_param_s = std::max(0.0, b3);
  s->optimizer_step = true;
  return Status();
}

// Stage 0's BF16_Optimizer.step() on the host (docs/stack-costs.md 6) from stack_costs.py's
// bf16_step rows: each row's parameter tensors ("tensors"), its gradient_clipping (0: no clip
// loop; above 0: the clip loop forced) and its engine.step() seconds ("step_s"). Least squares
// t = a + b * tensors per setting; each setting needs two tensor counts.
Status Bf16StepFromRows(const json& section, const std::string& where, StackProfile* s) {
  if (!section.is_object() || !section.contains("rows")) {
    return Status::InvalidArgument(where + ": expected an object with rows");
  }
  const json& rows = section["rows"];
  if (!rows.is_array() || rows.empty() || rows.size() > 1000) {
    return Status::InvalidArgument(where + ".rows: expected a list of 1 to 1000 rows");
  }
  const std::string wrapper = Str(section, "wrapper");
  if (!wrapper.empty() && wrapper != "BF16_Optimizer") {
    return Status::InvalidArgument(fmt::format(
        "{}.wrapper: DeepSpeed chose {}, not BF16_Optimizer: the rows do not measure stage 0's "
        "bf16 step",
        where, Escape(wrapper, 80)));
  }
  std::vector<std::pair<double, double>> plain, clip;
  for (size_t i = 0; i < rows.size(); ++i) {
    const std::string row = fmt::format("{}.rows[{}]", where, i);
    DSPLAN_ASSIGN_OR_RETURN(double tensors, Positive(rows[i], row, "tensors"));
    DSPLAN_ASSIGN_OR_RETURN(double clipping, Num(rows[i], row, "gradient_clipping"));
    DSPLAN_ASSIGN_OR_RETURN(double t, Positive(rows[i], row, "step_s"));
    (clipping > 0 ? clip : plain).emplace_back(tensors, t);
  }
  double a0 = 0, b0 = 0, a1 = 0, b1 = 0;
  if (!FitLine(plain, &a0, &b0) || !FitLine(clip, &a1, &b1)) {
    return Status::InvalidArgument(
        where + ".rows: each gradient_clipping setting (0 and above 0) needs at least two "
                "tensor counts");
  }
  // A fit that goes negative (noise on too few rows) is not a cost: clamp at 0.
  s->bf16_step_s = std::max(0.0, a0);
  s->bf16_step_per_param_s = std::max(0.0, b0);
  s->bf16_clip_step_s = std::max(0.0, a1);
  s->bf16_clip_step_per_param_s = std::max(0.0, b1);
  if (s->bf16_step_per_param_s > 10e-3 || s->bf16_clip_step_per_param_s > 10e-3 ||
      s->bf16_step_s > 1.0 || s->bf16_clip_step_s > 1.0) {
    return Status::InvalidArgument(fmt::format(
        "{}: the fit ({:.3g} s + {:.3g} s per tensor; clipping {:.3g} s + {:.3g} s) is not "
        "plausible (expected at most 1 s and 10 ms per tensor)",
        where, s->bf16_step_s, s->bf16_step_per_param_s, s->bf16_clip_step_s,
        s->bf16_clip_step_per_param_s));
  }
  s->bf16_step = true;
  return Status();
}

// The last line of a Python traceback (the exception), for a one-line note.
std::string LastLine(const std::string& text) {
  std::string t = text;
  while (!t.empty() && (t.back() == '\n' || t.back() == ' ')) t.pop_back();
  const size_t nl = t.rfind('\n');
  return Escape(nl == std::string::npos ? t : t.substr(nl + 1), 200);
}

Result<json> ParseJson(const std::string& text, const std::string& source, const char* schema) {
  json doc;
  try {
    doc = json::parse(text);
  } catch (const json::parse_error& e) {
    // "[json.exception.parse_error.101] parse error at line 5, column 12: ...": where and why
    // (a cut-off file, Python's NaN).
    std::string why = e.what();
    if (const size_t at = why.find("] "); at != std::string::npos) why = why.substr(at + 2);
    return Status::InvalidArgument(
        fmt::format("{}: not valid JSON ({})", Escape(source), Escape(why, 200)));
  }
  if (!doc.is_object()) {
    return Status::InvalidArgument(fmt::format("{}: not a JSON object", Escape(source)));
  }
  if (Str(doc, "schema") != schema) {
    return Status::InvalidArgument(fmt::format("{}: schema is {}, expected {}", Escape(source),
                                               Quote(Str(doc, "schema")), schema));
  }
  return doc;
}

// A probe document's header and rows: the |required| string keys present (errors list them
// all), a "rows" array of |lo| to |hi| entries. Errors name |file|.
Result<const json*> ProbeRows(const json& doc, const std::string& file,
                              std::initializer_list<const char*> required, size_t lo, size_t hi) {
  const std::vector<std::string> keys(required.begin(), required.end());
  for (const std::string& k : keys) {
    if (Str(doc, k.c_str()).empty()) {
      // "torch, device and date are required"
      std::string names = keys.front();
      for (size_t i = 1; i < keys.size(); ++i) {
        names += (i + 1 == keys.size() ? " and " : ", ") + keys[i];
      }
      return Status::InvalidArgument(fmt::format("{}: {} are required", file, names));
    }
  }
  if (!doc.contains("rows") || !doc["rows"].is_array()) {
    return Status::InvalidArgument(file + ": rows missing");
  }
  const json& rows = doc["rows"];
  if (rows.size() < lo || rows.size() > hi) {
    return Status::InvalidArgument(
        fmt::format("{}: rows: {} rows; expected {} to {}", file, rows.size(), lo, hi));
  }
  return &rows;
}

}  // namespace

const char* DefaultStackModels() {
  return "gpt2-xl,t5-3b,llama-2-7b,opt-2.7b,pythia-1.4b,qwen2-1.5b,bloom-3b,gemma-2b,phi-2,"
         "falcon-7b,gpt-j-6b,mistral-7b,bert-large-uncased,mixtral-8x7b";
}

Result<StackProfile> StackProfileFromJson(const std::string& json_text, const std::string& source,
                                          double reference_stream_bytes_per_s,
                                          const std::string& tool,
                                          std::vector<std::string>* notes) {
  DSPLAN_ASSIGN_OR_RETURN(json doc, ParseJson(json_text, source, "dsplan-stack-costs/1"));
  const std::string file = Escape(source);
  auto note = [&](std::string n) {
    if (notes) notes->push_back(std::move(n));
  };
  if (doc.contains("errors") && doc["errors"].is_object()) {
    for (const auto& [section, trace] : doc["errors"].items()) {
      note(fmt::format("stack {} failed: {}", Escape(section, 60),
                       trace.is_string() ? LastLine(trace.get<std::string>()) : "?"));
    }
  }
  if (!(reference_stream_bytes_per_s > 0) || !std::isfinite(reference_stream_bytes_per_s)) {
    return Status::InvalidArgument("the profile's streaming rate must be positive");
  }
  StackProfile s;
  s.present = true;
  s.reference_stream_bytes_per_s = reference_stream_bytes_per_s;
  const json versions = doc.value("versions", json::object());
  s.versions.torch = Str(versions, "torch");
  s.versions.cuda = Str(versions, "cuda");
  s.versions.transformers = Str(versions, "transformers");
  s.versions.deepspeed = Str(versions, "deepspeed");
  s.versions.python = Str(versions, "python");
  s.gpu = Str(versions, "gpu");
  s.date = Str(doc, "date");
  if (s.versions.torch.empty() || s.gpu.empty() || s.date.empty()) {
    return Status::InvalidArgument(
        fmt::format("{}: versions.torch, versions.gpu and date are required", file));
  }

  // PyTorch's memory-bound kernels (docs/stack-costs.md §1): the classes the cost model prices
  // and the kernel each was timed with. stream, the casts and reduce use their forward rate both
  // ways (their backward runs another class's kernel).
  if (!doc.contains("kernels") || !doc["kernels"].is_object()) {
    return Status::InvalidArgument(fmt::format(
        "{}: kernels missing (PyTorch's kernel rates were not measured); the stack section needs "
        "them",
        file));
  }
  const json& k = doc["kernels"];
  struct KernelSource {
    const char* name;   // StackKernelClassName order
    const char* timed;  // stack_costs.py's kernel
    bool both_fwd;
  };
  static constexpr KernelSource kKernels[kStackKernelClasses] = {
      {"stream", "elementwise", true},       {"cast_up", "cast_fp32", true},
      {"cast_down", "cast_fp32_to_bf16", true}, {"reduce", "reduce_fp32_lastdim", true},
      {"norm", "norm", false},               {"activation", "activation", false},
      {"dropout", "dropout", false},         {"softmax", "softmax", false},
      {"log_softmax", "log_softmax_vocab", false}};
  for (int i = 0; i < kStackKernelClasses; ++i) {
    const KernelSource& ks = kKernels[i];
    const std::string where = fmt::format("{}: kernels.{}", file, ks.timed);
    if (!k.contains(ks.timed)) {
      return Status::InvalidArgument(fmt::format("{}: missing", where));
    }
    DSPLAN_ASSIGN_OR_RETURN(double f, Positive(k[ks.timed], where, "fwd_bytes_per_s"));
    double b = f;
    if (!ks.both_fwd) {
      DSPLAN_ASSIGN_OR_RETURN(b, Positive(k[ks.timed], where, "bwd_bytes_per_s"));
    }
    s.kernel_fwd_bytes_per_s[i] = f;
    s.kernel_bwd_bytes_per_s[i] = b;
  }

  // Host time per op kind (§3): embedding is a module call with one kernel (Linear's forward,
  // LayerNorm's backward), the loss a softmax-class kernel pair; one more plain tensor op costs
  // an elementwise op.
  if (!doc.contains("op_kinds") || !doc["op_kinds"].is_object()) {
    return Status::InvalidArgument(fmt::format(
        "{}: op_kinds missing (the per-op host times were not measured); the stack section needs "
        "them",
        file));
  }
  const json& ops = doc["op_kinds"];
  auto op = [&](const char* kind, bool bwd) -> Result<double> {
    const std::string where = fmt::format("{}: op_kinds.{}", file, kind);
    if (!ops.contains(kind)) return Status::InvalidArgument(fmt::format("{}: missing", where));
    return Num(ops[kind], where, bwd ? "bwd_s" : "fwd_s");
  };
  static constexpr const char* kOpFrom[kStackOpKinds][2] = {
      {"gemm", "gemm"},       {"batched_gemm", "batched_gemm"}, {"attention", "attention"},
      {"norm", "norm"},       {"activation", "activation"},     {"dropout", "dropout"},
      {"elementwise", "elementwise"}, {"gemm", "norm"},         {"softmax", "softmax"},
      {"softmax", "softmax"}};
  for (int i = 0; i < kStackOpKinds; ++i) {
    DSPLAN_ASSIGN_OR_RETURN(s.op_fwd_s[i], op(kOpFrom[i][0], false));
    DSPLAN_ASSIGN_OR_RETURN(s.op_bwd_s[i], op(kOpFrom[i][1], true));
  }
  DSPLAN_ASSIGN_OR_RETURN(s.kernel_fwd_s, op("elementwise", false));
  DSPLAN_ASSIGN_OR_RETURN(s.kernel_bwd_s, op("elementwise", true));

  // Families (§3): one block (T5: an encoder and a decoder block) and the rest of the model.
  int families = 0;
  if (doc.contains("families") && doc["families"].is_object()) {
    for (const auto& item : doc["families"].items()) {
      // Named copies, not a structured binding: lambdas may not capture those before C++20's
      // P1091 (clang 14, which the fuzz build uses, refuses them).
      const std::string& model_type = item.key();
      const nlohmann::json& f = item.value();
      const std::string where = fmt::format("{}: families.{}", file, Escape(model_type, 60));
      if (!f.is_object()) return Status::InvalidArgument(where + ": expected an object");
      auto block = [&](const std::string& prefix, bool encoder) -> Status {
        StackBlockPoint b;
        b.model_type = model_type;
        b.encoder = encoder;
        DSPLAN_ASSIGN_OR_RETURN(b.fwd_s, Num(f, where, (prefix + "block_fwd_s").c_str(), true));
        DSPLAN_ASSIGN_OR_RETURN(b.bwd_s, Num(f, where, (prefix + "block_bwd_s").c_str(), true));
        DSPLAN_ASSIGN_OR_RETURN(b.ckpt_fwd_s,
                                Num(f, where, (prefix + "ckpt_block_fwd_s").c_str(), true));
        DSPLAN_ASSIGN_OR_RETURN(b.ckpt_bwd_s,
                                Num(f, where, (prefix + "ckpt_block_bwd_s").c_str(), true));
        DSPLAN_ASSIGN_OR_RETURN(double modules,
                                Num(f, where, (prefix + "modules_per_block").c_str()));
        DSPLAN_ASSIGN_OR_RETURN(double params,
                                Num(f, where, (prefix + "params_per_block").c_str()));
        if (modules > 1e6 || params > 1e6) {
          return Status::InvalidArgument(where + ": implausible module or parameter count");
        }
        b.modules = static_cast<int32_t>(std::lround(modules));
        b.param_tensors = static_cast<int32_t>(std::lround(params));
        s.blocks.push_back(b);
        return Status();
      };
      StackRestPoint rest;
      rest.model_type = model_type;
      if (model_type == "t5") {
        DSPLAN_RETURN_IF_ERROR(block("encoder_", true));
        DSPLAN_RETURN_IF_ERROR(block("decoder_", false));
        // The decoder series' rest holds its 2 encoder blocks: less those.
        const StackBlockPoint& enc = s.blocks[s.blocks.size() - 2];
        DSPLAN_ASSIGN_OR_RETURN(double rf, Num(f, where, "decoder_rest_fwd_s", true));
        DSPLAN_ASSIGN_OR_RETURN(double rb, Num(f, where, "decoder_rest_bwd_s", true));
        rest.fwd_s = std::max(0.0, rf - 2 * enc.fwd_s);
        rest.bwd_s = std::max(0.0, rb - 2 * enc.bwd_s);
      } else {
        // Encoder-only families (BERT) time their encoder block; the script says so from now
        // on (block_kind), older outputs by the family.
        std::string kind = Str(f, "block_kind");
        if (kind.empty()) kind = model_type == "bert" ? "encoder" : "decoder";
        if (kind != "encoder" && kind != "decoder") {
          return Status::InvalidArgument(where + ": block_kind must be encoder or decoder");
        }
        DSPLAN_RETURN_IF_ERROR(block("", kind == "encoder"));
        DSPLAN_ASSIGN_OR_RETURN(rest.fwd_s, Num(f, where, "rest_fwd_s", true));
        DSPLAN_ASSIGN_OR_RETURN(rest.bwd_s, Num(f, where, "rest_bwd_s", true));
      }
      s.rests.push_back(rest);
      ++families;
    }
  }
  if (families == 0) {
    note("stack families not measured: every family's host time is priced per op");
  }

  // ZeRO-3's hooks (§4): the least-squares fit over the synthetic stacks.
  if (doc.contains("zero3") && doc["zero3"].is_object() &&
      doc["zero3"].contains("fit_stage3_minus_stage2")) {
    const json& fit = doc["zero3"]["fit_stage3_minus_stage2"];
    const std::string where = file + ": zero3.fit_stage3_minus_stage2";
    if (!fit.contains("fwd_s") || !fit.contains("bwd_s")) {
      return Status::InvalidArgument(where + ": fwd_s and bwd_s are required");
    }
    DSPLAN_ASSIGN_OR_RETURN(s.z3_fwd_per_module_s, Num(fit["fwd_s"], where + ".fwd_s", "per_module_s"));
    DSPLAN_ASSIGN_OR_RETURN(s.z3_fwd_per_param_s, Num(fit["fwd_s"], where + ".fwd_s", "per_param_s"));
    DSPLAN_ASSIGN_OR_RETURN(s.z3_bwd_per_module_s, Num(fit["bwd_s"], where + ".bwd_s", "per_module_s"));
    DSPLAN_ASSIGN_OR_RETURN(s.z3_bwd_per_param_s, Num(fit["bwd_s"], where + ".bwd_s", "per_param_s"));
    s.zero3 = true;
  } else {
    note(fmt::format("stack ZeRO-3 hooks not measured ({}): plans use the built-in ones ({})",
                     s.versions.deepspeed.empty() ? "DeepSpeed not importable" : "no zero3 result",
                     kBuiltInStackCosts));
  }
  // DeepSpeed's optimizer step on the host (§5): the same stacks' engine.step() at stage 2 and
  // stage 3, t = a + b * parameter tensors by least squares.
  if (doc.contains("zero3") && doc["zero3"].is_object() && doc["zero3"].contains("grid")) {
    DSPLAN_RETURN_IF_ERROR(StepFromGrid(doc["zero3"]["grid"], file + ": zero3.grid", &s));
  } else if (s.zero3) {
    note(fmt::format("stack optimizer step not measured (no zero3.grid): plans use the built-in "
                     "one ({})",
                     kBuiltInStackCosts));
  }

  // Stage 0's BF16_Optimizer step (§6).
  if (doc.contains("bf16_step")) {
    DSPLAN_RETURN_IF_ERROR(Bf16StepFromRows(doc["bf16_step"], file + ": bf16_step", &s));
  } else if (!s.versions.deepspeed.empty()) {
    note(fmt::format("stack BF16_Optimizer step not measured (no bf16_step result): plans use "
                     "the built-in one ({})",
                     kBuiltInStackCosts));
  }

  // The optimizer step's kernels on flat tensors (§5: optimizer_kernels.py through stack_costs.py's
  // optimizer_kernels section), bytes read + written per second: each kernel measured on its own
  // (FusedAdam only where DeepSpeed imported); a kernel that failed is left to the streaming
  // class. 10 GB/s to 100 TB/s: a GPU's memory-bound kernel.
  if (doc.contains("optimizer_kernels")) {
    const std::string where = file + ": optimizer_kernels";
    const json& ok = doc["optimizer_kernels"];
    if (!ok.is_object() || !ok.contains("kernels") || !ok["kernels"].is_object()) {
      return Status::InvalidArgument(where + ": expected an object with \"kernels\"");
    }
    const json& k = ok["kernels"];
    const auto rate = [&](const char* name) -> Result<double> {
      if (!k.contains(name) || !k[name].is_object() || !k[name].contains("bytes_per_s")) return 0.0;
      const json& v = k[name]["bytes_per_s"];
      if (!v.is_number() || !(v.get<double>() >= 1e10 && v.get<double>() <= 1e14)) {
        return Status::InvalidArgument(fmt::format(
            "{}: kernels.{}.bytes_per_s: expected 1e10 to 1e14 bytes per second", where, name));
      }
      return v.get<double>();
    };
    DSPLAN_ASSIGN_OR_RETURN(s.fp64_cast_bytes_per_s, rate("fp64_cast"));
    DSPLAN_ASSIGN_OR_RETURN(s.fp64_norm_bytes_per_s, rate("fp64_norm"));
    // The flat passes: the median of flatten, unscale and the copy back that were measured.
    std::vector<double> flat;
    for (const char* name : {"flatten", "unscale", "copy_back"}) {
      DSPLAN_ASSIGN_OR_RETURN(double r, rate(name));
      if (r > 0) flat.push_back(r);
    }
    std::sort(flat.begin(), flat.end());
    s.step_flat_bytes_per_s = flat.empty() ? 0.0 : flat[flat.size() / 2];
    DSPLAN_ASSIGN_OR_RETURN(s.fused_adam_bytes_per_s, rate("fused_adam"));
    DSPLAN_ASSIGN_OR_RETURN(s.torch_adam_bytes_per_s, rate("torch_adamw"));
    s.optimizer_kernels = s.fp64_cast_bytes_per_s > 0 || s.fp64_norm_bytes_per_s > 0 ||
                          s.step_flat_bytes_per_s > 0 || s.fused_adam_bytes_per_s > 0 ||
                          s.torch_adam_bytes_per_s > 0;
    if (!s.optimizer_kernels) {
      note(
          "stack optimizer kernels: no rate measured (every kernel failed): plans use the "
          "built-in ones");
    } else if (s.fused_adam_bytes_per_s == 0) {
      note(
          "stack optimizer kernels: FusedAdam not measured (DeepSpeed's op did not load): "
          "priced at the streaming class");
    }
  } else {
    note(
        fmt::format("stack optimizer kernels not measured (no optimizer_kernels result): plans "
                    "use the built-in ones ({})",
                    kBuiltInStackCosts));
  }

  // ZeRO-3's host time per gather call and per reduce-bucket flush (§4c): zero3_gather_calls.py's
  // stacks, run by stack_costs.py's zero3_calls section. 1 us to 10 ms: DeepSpeed's Python path
  // of one call (built-in: 69 and 370 us).
  if (doc.contains("zero3_calls")) {
    const json& zc = doc["zero3_calls"];
    const std::string where = file + ": zero3_calls";
    if (!zc.is_object()) return Status::InvalidArgument(where + ": expected an object");
    DSPLAN_ASSIGN_OR_RETURN(s.z3_per_gather_call_s,
                            PlausibleSeconds(zc, where, "per_gather_call_s", 1e-6, 10e-3));
    DSPLAN_ASSIGN_OR_RETURN(s.z3_per_bucket_flush_s,
                            PlausibleSeconds(zc, where, "per_bucket_flush_s", 1e-6, 10e-3));
  } else if (!s.versions.deepspeed.empty()) {
    // (Without DeepSpeed the hooks' note above says that ZeRO-3 was not measured.)
    note(fmt::format("stack ZeRO-3 cost per gather call and per reduce-bucket flush not measured "
                     "(no zero3_calls result): plans use the built-in ones ({})",
                     kBuiltInStackCosts));
  }

  // PyTorch's blocking 16-bit CUDA -> fp32 CPU copy by size (stack_costs.py's cast_copy; the
  // offloaded ZeRO-3 gradient copy): points [bytes, seconds], bytes ascending, 1 kB to 1 GiB,
  // each 1 us to 10 s (built-in: 41 us at 32 kB to 1.8 ms at 16.8 MB from the heap; 20 ms at
  // 32 MiB to 187 ms at 256 MiB through a fresh mapping, whose page faults the copy pays).
  // "points_heap" (since 2026-12-06): the same copies in a child process started with malloc
  // held to its heap (kMallocHeapEnv), which `--malloc-heap` prices.
  auto curve = [&](const json& cc, const char* key,
                   std::vector<std::pair<double, double>>* out) -> Status {
    const std::string where = fmt::format("{}: cast_copy.{}", file, key);
    if (!cc.contains(key) || !cc[key].is_array() || cc[key].size() < 2 || cc[key].size() > 64) {
      return Status::InvalidArgument(where + ": expected 2 to 64 [bytes, seconds] points");
    }
    for (size_t i = 0; i < cc[key].size(); ++i) {
      const json& pt = cc[key][i];
      if (!pt.is_array() || pt.size() != 2 || !pt[0].is_number() || !pt[1].is_number()) {
        return Status::InvalidArgument(
            fmt::format("{}[{}]: expected [bytes, seconds] numbers", where, i));
      }
      const double bytes = pt[0].get<double>();
      const double sec = pt[1].get<double>();
      if (!(bytes >= 1e3 && bytes <= 1073741824.0) || !(sec >= 1e-6 && sec <= 10.0) ||
          (!out->empty() && bytes <= out->back().first)) {
        return Status::InvalidArgument(fmt::format(
            "{}[{}]: [{}, {}] is not plausible (bytes ascending, 1 kB to 1 GiB; 1 us to 10 s)",
            where, i, bytes, sec));
      }
      out->emplace_back(bytes, sec);
    }
    return Status();
  };
  if (doc.contains("cast_copy")) {
    const json& cc = doc["cast_copy"];
    if (!cc.is_object()) {
      return Status::InvalidArgument(file + ": cast_copy: expected an object with points");
    }
    if (cc.contains("malloc_env")) {
      return Status::InvalidArgument(
          file +
          ": cast_copy.malloc_env: the probe ran with MALLOC_* tunables set, so its "
          "points are not the default regime; run stack_costs.py without them");
    }
    DSPLAN_RETURN_IF_ERROR(curve(cc, "points", &s.cast_copy_d2h));
    if (cc.contains("points_heap")) {
      DSPLAN_RETURN_IF_ERROR(curve(cc, "points_heap", &s.cast_copy_d2h_heap));
    } else {
      note(
          fmt::format("stack cast copy with malloc held to its heap not measured ({}): "
                      "--malloc-heap prices copies from 32 MiB along the default curve's heap "
                      "points",
                      cc.contains("heap_error") && cc["heap_error"].is_string()
                          ? Escape(cc["heap_error"].get<std::string>(), 200)
                          : std::string("no points_heap")));
    }
  } else {
    note(fmt::format("stack cast copy not measured (no cast_copy result): plans use the "
                     "built-in one ({})",
                     kBuiltInCastCopy));
  }

  std::string what = "op_kinds, kernels";
  if (families > 0) what += fmt::format(", {} families", families);
  if (s.zero3) what += ", zero3";
  if (s.optimizer_step) what += ", optimizer step";
  if (s.bf16_step) what += ", bf16 step";
  if (s.optimizer_kernels) what += ", optimizer kernels";
  if (s.z3_per_gather_call_s) what += ", zero3 calls";
  if (!s.cast_copy_d2h.empty()) what += ", cast copy";
  if (!s.cast_copy_d2h_heap.empty()) what += " (also with malloc held to its heap)";
  std::string vers = "PyTorch " + s.versions.torch;
  if (!s.versions.cuda.empty()) vers += ", CUDA " + s.versions.cuda;
  if (!s.versions.transformers.empty()) vers += ", transformers " + s.versions.transformers;
  vers += ", DeepSpeed " + (s.versions.deepspeed.empty() ? std::string("not installed")
                                                        : s.versions.deepspeed);
  if (!s.versions.python.empty()) vers += ", Python " + s.versions.python;
  const std::string cpu = Str(versions, "cpu");
  const std::string cpus = versions.contains("cpus") && versions["cpus"].is_number_integer()
                               ? fmt::format("{} CPUs", versions["cpus"].get<int64_t>())
                               : std::string("? CPUs");
  // The CPU's model name (stack_costs.py's cpu_model): host costs differ between CPU models.
  const std::string model = Str(versions, "cpu_model");
  s.source = Source{SourceKind::kMeasured,
                    fmt::format("{} ({}) on {} ({}{}{}); {}; {}", tool, what, s.gpu, cpus,
                                cpu.empty() ? "" : ", " + cpu,
                                model.empty() ? "" : ", " + Escape(model, 80), vers, s.date)};
  return s;
}

Status AddTorchGemmFromJson(const std::string& json_text, const std::string& source,
                            StackProfile* stack) {
  DSPLAN_ASSIGN_OR_RETURN(json doc, ParseJson(json_text, source, "dsplan-torch-gemm/1"));
  const std::string file = Escape(source);
  if (!doc.contains("rows") || !doc["rows"].is_array()) {
    return Status::InvalidArgument(file + ": rows missing");
  }
  std::vector<GemmPoint> rows;
  const json& r = doc["rows"];
  for (size_t i = 0; i < r.size(); ++i) {
    const json& row = r[i];
    const std::string where = fmt::format("{}: rows[{}]", file, i);
    if (!row.is_array() || row.size() < 6 || row.size() > 7) {
      return Status::InvalidArgument(
          where + ": expected [dtype, m, n, k, flops_per_s, layout] or [..., batch]");
    }
    GemmPoint pt;
    if (!row[0].is_string() || !row[5].is_string()) {
      return Status::InvalidArgument(where + ": dtype and layout must be strings");
    }
    auto prec = ParsePrecision(row[0].get<std::string>());
    if (!prec.ok()) return prec.status().WithPrefix(where);
    pt.dtype = *prec;
    auto layout = ParseGemmLayout(row[5].get<std::string>());
    if (!layout.ok()) return layout.status().WithPrefix(where);
    pt.layout = *layout;
    int64_t* dims[] = {&pt.m, &pt.n, &pt.k};
    for (int d = 0; d < 3; ++d) {
      if (!row[1 + d].is_number_integer() || row[1 + d].get<int64_t>() < 1 ||
          row[1 + d].get<int64_t>() > (int64_t{1} << 40)) {
        return Status::InvalidArgument(where + ": m, n and k must be integers from 1 to 2^40");
      }
      *dims[d] = row[1 + d].get<int64_t>();
    }
    if (!row[4].is_number() || !std::isfinite(row[4].get<double>()) || row[4].get<double>() <= 0) {
      return Status::InvalidArgument(where + ": flops_per_s must be a positive number");
    }
    pt.flops_per_s = row[4].get<double>();
    if (row.size() == 7) {
      if (!row[6].is_number_integer() || row[6].get<int64_t>() < 1 ||
          row[6].get<int64_t>() > (int64_t{1} << 40)) {
        return Status::InvalidArgument(where + ": batch must be an integer of at least 1");
      }
      pt.batch = row[6].get<int64_t>();
    }
    rows.push_back(pt);
  }
  if (rows.empty()) return Status::InvalidArgument(file + ": no rows");
  std::string vers = "PyTorch " + Str(doc, "torch");
  if (!Str(doc, "cuda").empty()) vers += ", CUDA " + Str(doc, "cuda");
  stack->gemm = std::move(rows);
  stack->gemm_source =
      Source{SourceKind::kMeasured,
             fmt::format("tools/probes/torch_gemm.py: {}; {}; {}; cuBLAS workspace: {}; {}",
                         Str(doc, "method"), Str(doc, "device"), vers,
                         Str(doc, "cublas_workspace"), Str(doc, "date"))};
  return Status();
}

Result<SustainedGemmCurve> SustainedGemmFromJson(const std::string& json_text,
                                                 const std::string& source, const std::string& tool,
                                                 const std::string& dsplan_version) {
  DSPLAN_ASSIGN_OR_RETURN(json doc, ParseJson(json_text, source, "dsplan-gemm-duty/1"));
  const std::string file = Escape(source);
  DSPLAN_ASSIGN_OR_RETURN(const json* rows_at,
                          ProbeRows(doc, file, {"torch", "device", "date"}, 2,
                                    kMaxSustainedGemmPoints));
  const json& rows = *rows_at;
  const std::string torch = Str(doc, "torch"), device = Str(doc, "device"), date = Str(doc, "date");
  // An optional measured number (nvidia-smi's samples are null without nvidia-smi).
  auto optional = [](const json& obj, const char* key) -> std::optional<double> {
    if (!obj.is_object() || !obj.contains(key) || !obj.at(key).is_number()) return std::nullopt;
    const double x = obj.at(key).get<double>();
    if (!std::isfinite(x) || x <= 0) return std::nullopt;
    return x;
  };
  struct Row {
    size_t index;
    DutyPoint pt;
    std::optional<double> sm_mhz, power_w, evict_mib;
  };
  std::vector<Row> pts;
  for (size_t i = 0; i < rows.size(); ++i) {
    const std::string where = fmt::format("{}: rows[{}]", file, i);
    const json& row = rows[i];
    if (!row.is_object() || !row.contains("sustained") || !row["sustained"].is_object()) {
      return Status::InvalidArgument(where + ".sustained: missing");
    }
    const json& sus = row["sustained"];
    Row r{i, {}, optional(sus, "sm_mhz"), optional(sus, "power_w"), std::nullopt};
    DSPLAN_ASSIGN_OR_RETURN(r.pt.duty, Num(sus, where + ".sustained", "duty"));
    if (!(r.pt.duty > 0 && r.pt.duty <= 1)) {
      return Status::InvalidArgument(
          fmt::format("{}.sustained.duty: {} is not in (0, 1]", where, r.pt.duty));
    }
    DSPLAN_ASSIGN_OR_RETURN(r.pt.time_ratio, Num(row, where, "sustained_over_alone"));
    if (r.pt.time_ratio < 0.95 || r.pt.time_ratio > 4) {
      return Status::InvalidArgument(fmt::format(
          "{}.sustained_over_alone: {} is not in [0.95, 4] (the GEMM's sustained time over its "
          "time alone)",
          where, r.pt.time_ratio));
    }
    if (row.contains("evict_mib") && row["evict_mib"].is_number()) {
      r.evict_mib = row["evict_mib"].get<double>();
    }
    pts.push_back(r);
  }
  std::stable_sort(pts.begin(), pts.end(),
                   [](const Row& a, const Row& b) { return a.pt.duty < b.pt.duty; });
  for (size_t j = 1; j < pts.size(); ++j) {
    if (pts[j].pt.duty == pts[j - 1].pt.duty) {
      return Status::InvalidArgument(
          fmt::format("{}: rows[{}] and rows[{}]: the same duty {} twice", file, pts[j - 1].index,
                      pts[j].index, pts[j].pt.duty));
    }
  }

  // Where the clock holds (the H200 at duty 0.40: 1980 MHz) the two committed sweeps measured
  // 1.012 and 1.007, run-to-run noise of about 0.5 %. A GPU that never slows down would measure
  // about 1 at every duty, some points a little below: noise, read as 1 and said. Below 0.95 the
  // measurement is broken (sustained cannot be much faster than alone): an error above.
  SustainedGemmCurve c;
  int below = 0;
  double lowest = 1;
  for (const Row& r : pts) {
    DutyPoint pt = r.pt;
    if (pt.time_ratio < 1) {
      ++below;
      lowest = std::min(lowest, pt.time_ratio);
      pt.time_ratio = 1;
    }
    c.points.push_back(pt);
  }

  std::string shape = Escape(Str(doc, "shape"), 60);
  if (shape.empty()) shape = "one GEMM";
  auto dim = [&](const char* key) -> int64_t {
    return doc.contains(key) && doc[key].is_number_integer() ? doc[key].get<int64_t>() : 0;
  };
  if (dim("m") > 0 && dim("k") > 0 && dim("n") > 0) {
    shape += fmt::format(" (F.linear {} x {} -> {} bf16)", dim("m"), dim("k"), dim("n"));
  }
  std::string run = "back to back";
  if (auto secs = optional(doc, "seconds")) run += fmt::format(" for {:g} s per point", *secs);
  double lo_mib = 1e300, hi_mib = -1;
  bool all_mib = true;
  for (const Row& r : pts) {
    all_mib = all_mib && r.evict_mib.has_value();
    if (r.evict_mib) {
      lo_mib = std::min(lo_mib, *r.evict_mib);
      hi_mib = std::max(hi_mib, *r.evict_mib);
    }
  }
  run += all_mib ? fmt::format(" with a memory-bound pass of {:g}-{:g} MiB between calls", lo_mib,
                               hi_mib)
                 : " with memory-bound passes between calls";
  const Row& low = pts.front();
  const Row& high = pts.back();
  std::string clocks =
      low.sm_mhz && high.sm_mhz
          ? fmt::format("SM clock {:g} MHz at duty {:.3f}, {:g} MHz at duty {:.3f}", *low.sm_mhz,
                        low.pt.duty, *high.sm_mhz, high.pt.duty)
          : std::string("SM clock not sampled (nvidia-smi)");
  double lo_w = 1e300, hi_w = -1;
  for (const Row& r : pts) {
    if (r.power_w) {
      lo_w = std::min(lo_w, *r.power_w);
      hi_w = std::max(hi_w, *r.power_w);
    }
  }
  if (hi_w > 0) clocks += fmt::format(", {:.0f}-{:.0f} W", lo_w, hi_w);
  if (doc.contains("idle_smi") && doc["idle_smi"].is_array() && doc["idle_smi"].size() >= 2) {
    const json& idle = doc["idle_smi"];  // [SM MHz, W, C]
    if (idle[0].is_number() && idle[1].is_number()) {
      const double mhz = idle[0].get<double>(), w = idle[1].get<double>();
      if (std::isfinite(mhz) && std::isfinite(w)) {
        clocks += fmt::format("; before the sweep {:g} MHz, {:.0f} W", mhz, w);
      }
    }
  }
  if (auto limit = optional(doc, "power_limit_w")) {
    clocks += fmt::format("; power limit {:.0f} W", *limit);
  }
  std::string clamped;
  if (below > 0) {
    clamped = fmt::format("; {} ratio{} below 1 (lowest {:.4f}) read as 1", below,
                          below == 1 ? "" : "s", lowest);
  }
  c.source = Source{
      SourceKind::kMeasured,
      fmt::format("{}: {} {}, {} points; duty = GEMM time / (GEMM + pass time), CUDA events, "
                  "median of the last half; ratio = that time over the same call alone after a "
                  "busy-wait (as the GEMM table){}; {}; {}; PyTorch {}; {}{}",
                  tool, shape, run, pts.size(), clamped, clocks, Escape(device, 60),
                  Escape(torch, 40), Escape(date, 20),
                  dsplan_version.empty() ? "" : "; dsplan " + dsplan_version)};
  return c;
}

namespace {

// Runs |argv| (argv[0] looked up on PATH) with stdout to |out_path| and stderr to |err_path|
// (empty: inherited); the exit status, 127 when it could not start, or -1 when it could not be
// waited for.
int RunProcess(const std::vector<std::string>& argv, const std::string& out_path,
               const std::string& err_path) {
  std::vector<char*> args;
  std::vector<std::string> copy = argv;
  for (std::string& a : copy) args.push_back(a.data());
  args.push_back(nullptr);
  std::fflush(stdout);
  std::fflush(stderr);
  const pid_t pid = fork();
  if (pid < 0) return -1;
  if (pid == 0) {
    const int out = open(out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (out < 0 || dup2(out, STDOUT_FILENO) < 0) _exit(126);
    if (!err_path.empty()) {
      const int err = open(err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      if (err < 0 || dup2(err, STDERR_FILENO) < 0) _exit(126);
    }
    execvp(args[0], args.data());
    _exit(127);
  }
  int status = 0;
  while (waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR) return -1;
  }
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  return -1;
}

std::string ReadAll(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace

Result<SdpaTable> SdpaTableFromJson(const std::string& json_text, const std::string& source,
                                    const std::string& dsplan_version) {
  DSPLAN_ASSIGN_OR_RETURN(json doc, ParseJson(json_text, source, "dsplan-torch-sdpa/1"));
  const std::string file = Escape(source);
  // torch_sdpa.py's checks (a sliding-window mask, grouped-query K/V) time other calls than the
  // table's: their rows would price every model's attention as masked or grouped.
  for (const char* key : {"mask_window", "gqa"}) {
    const int64_t none = std::string_view(key) == "gqa" ? 1 : 0;
    if (doc.contains(key) && !(doc[key].is_number_integer() && doc[key].get<int64_t>() == none)) {
      return Status::InvalidArgument(fmt::format(
          "{}: made with torch_sdpa.py --{} (a check of another call, not the profile's table); "
          "measure the table without it",
          file, std::string_view(key) == "gqa" ? "gqa" : "mask-window"));
    }
  }
  DSPLAN_ASSIGN_OR_RETURN(const json* rows_at,
                          ProbeRows(doc, file, {"torch", "gpu", "date"}, 1, kMaxSdpaRows));
  const json& rows = *rows_at;
  const std::string torch = Str(doc, "torch"), gpu = Str(doc, "gpu"), date = Str(doc, "date");
  SdpaTable t;
  for (size_t i = 0; i < rows.size(); ++i) {
    const std::string where = fmt::format("{}: rows[{}]", file, i);
    const json& r = rows[i];
    if (!r.is_array() || r.size() != 7) {
      return Status::InvalidArgument(
          where + ": expected [dtype, head_dim, causal, seq, batch_heads, fwd_flops_per_s, "
                  "bwd_flops_per_s]");
    }
    AttentionPoint pt;
    const std::string dtype = r[0].is_string() ? r[0].get<std::string>() : "";
    if (dtype == "bf16") {
      pt.dtype = Precision::kBf16;
    } else if (dtype == "fp16") {
      pt.dtype = Precision::kFp16;
    } else {
      return Status::InvalidArgument(where + "[0]: expected bf16 or fp16");
    }
    auto integer = [&](int k, int64_t lo, int64_t hi, int64_t* out) -> Status {
      if (!r[k].is_number_integer() || r[k].get<int64_t>() < lo || r[k].get<int64_t>() > hi) {
        return Status::InvalidArgument(
            fmt::format("{}[{}]: expected an integer from {} to {}", where, k, lo, hi));
      }
      *out = r[k].get<int64_t>();
      return Status();
    };
    DSPLAN_RETURN_IF_ERROR(integer(1, 1, 1024, &pt.head_dim));
    if (!r[2].is_boolean()) return Status::InvalidArgument(where + "[2]: expected true or false");
    pt.causal = r[2].get<bool>();
    DSPLAN_RETURN_IF_ERROR(integer(3, 1, int64_t{1} << 24, &pt.seq));
    DSPLAN_RETURN_IF_ERROR(integer(4, 1, int64_t{1} << 24, &pt.batch_heads));
    for (int k : {5, 6}) {
      const double x = r[k].is_number() ? r[k].get<double>() : -1;
      if (!std::isfinite(x) || x <= 0 || x > 1e17) {
        return Status::InvalidArgument(
            fmt::format("{}[{}]: expected a rate in (0, 1e17] FLOP/s", where, k));
      }
      (k == 5 ? pt.fwd_flops_per_s : pt.bwd_flops_per_s) = x;
    }
    for (const AttentionPoint& q : t.rows) {
      if (q.dtype == pt.dtype && q.head_dim == pt.head_dim && q.causal == pt.causal &&
          q.seq == pt.seq && q.batch_heads == pt.batch_heads) {
        return Status::InvalidArgument(
            where + ": repeats an earlier row's dtype, head_dim, causal, seq and batch_heads");
      }
    }
    t.rows.push_back(pt);
  }
  std::string kernels;
  if (doc.contains("kernels") && doc["kernels"].is_array()) {
    for (const json& k : doc["kernels"]) {
      if (k.is_string() && kernels.size() < 200) {
        kernels += (kernels.empty() ? "" : ", ") + Escape(k.get<std::string>(), 60);
      }
    }
  }
  std::string vers = "PyTorch " + Escape(torch, 40);
  if (!Str(doc, "cudnn").empty()) vers += ", cuDNN " + Escape(Str(doc, "cudnn"), 20);
  if (doc.contains("cudnn") && doc["cudnn"].is_number_integer()) {
    vers += fmt::format(", cuDNN {}", doc["cudnn"].get<int64_t>());
  }
  t.source = Source{
      SourceKind::kMeasured,
      fmt::format("tools/probes/torch_sdpa.py: {}; kernels: {}; {}; {}; {}{}",
                  Escape(Str(doc, "method"), 400), kernels.empty() ? "not listed" : kernels,
                  Escape(gpu, 60), vers, Escape(date, 20),
                  dsplan_version.empty() ? "" : "; dsplan " + dsplan_version)};
  return t;
}

namespace {

const char* kNoSection =
    "the profile keeps no stack section (plans use the built-in stack costs)";

const char* kNoCurve = "GEMM sustained-load curve not measured";
const char* kNoCurveEffect = "GEMMs priced at the table's rate (no gpu.sustained_gemm)";

// Steps 2 and 3 of MeasureStack: the stack section (stack_costs.py, then torch_gemm.py), into
// |res|; what fails becomes a note.
void MeasureStackSection(const HardwareProfile& profile, const StackProbeOptions& o,
                         StackProbeResult& res) {
  const fs::path work(o.work_dir);
  // 2. The stack's costs.
  const double stream =
      profile.gpu.hbm_bytes_per_s.value * profile.gpu.memory_bound_efficiency.value;
  const std::string stack_json = (work / "stack-costs.json").string();
  const std::string script = (fs::path(o.tools_dir) / "stack_costs.py").string();
  const int src = RunProcess({o.python, script, "--models", o.models, "--catalog", o.catalog_dir,
                              "--out", stack_json},
                             (work / "stack-costs.stdout").string(), "");
  const std::string stack_text = ReadAll(stack_json);
  if (src != 0 && stack_text.empty()) {
    res.notes.push_back(fmt::format("stack not measured: {} exited with {}; {}", script, src,
                                    kNoSection));
    return;
  }
  auto stack = StackProfileFromJson(stack_text, stack_json, stream,
                                    "tools/probes/stack_costs.py", &res.notes);
  if (!stack.ok()) {
    res.notes.push_back(fmt::format("stack not measured: {}; {}", stack.status().message(),
                                    kNoSection));
    return;
  }
  if (!o.dsplan_version.empty()) {
    stack->source.detail += fmt::format("; dsplan {}", o.dsplan_version);
  }

  // 3. The profile's GEMM rows through PyTorch.
  if (!o.gemm) {
    res.notes.push_back("stack GEMMs not measured through PyTorch (not asked)");
  } else if (profile.gpu.gemm.empty()) {
    res.notes.push_back(
        "stack GEMMs not measured through PyTorch: the profile has no GEMM rows to measure "
        "(measure gemm too)");
  } else {
    const std::string rows_yaml = (work / "gemm-rows.yaml").string();
    const std::string gemm_json = (work / "torch-gemm.json").string();
    const std::string gemm_script = (fs::path(o.tools_dir) / "torch_gemm.py").string();
    HardwareProfile rows_only = profile;
    rows_only.stack = StackProfile{};
    Status w = WriteHardwareProfile(rows_only, rows_yaml);
    int grc = -1;
    if (w.ok()) {
      grc = RunProcess({o.python, gemm_script, "--profile", rows_yaml, "--dtypes", o.gemm_dtypes,
                        "--out", gemm_json},
                       (work / "torch-gemm.stdout").string(), "");
    }
    Status g = !w.ok()  ? w
               : grc != 0 ? Status::Internal(fmt::format("{} exited with {}", gemm_script, grc))
                          : AddTorchGemmFromJson(ReadAll(gemm_json), gemm_json, &*stack);
    if (!g.ok()) {
      res.notes.push_back(fmt::format(
          "stack GEMMs not measured through PyTorch ({}): plans price the PyTorch stack's GEMMs "
          "from gpu.gemm",
          g.message()));
    }
  }
  res.stack = std::move(*stack);
}

// Steps 4 and 5 run one probe script each and read its JSON output: `python3 SCRIPT ARGS --out
// WORK/NAME.json`, then |parse|(text, path). Not asked, a failed run or an output |parse| refuses:
// nothing, and a note "WHAT (why): EFFECT".
template <typename T, typename Parse>
std::optional<T> RunProbeScript(const StackProbeOptions& o, bool asked, const char* what,
                                const char* effect, const char* script_name,
                                std::vector<std::string> args, const char* name, Parse parse,
                                StackProbeResult& res) {
  if (!asked) {
    res.notes.push_back(fmt::format("{} (not asked): {}", what, effect));
    return std::nullopt;
  }
  const fs::path work(o.work_dir);
  const std::string out = (work / (std::string(name) + ".json")).string();
  const std::string script = (fs::path(o.tools_dir) / script_name).string();
  args.insert(args.begin(), {o.python, script});
  args.insert(args.end(), {"--out", out});
  const int rc = RunProcess(args, (work / (std::string(name) + ".stdout")).string(), "");
  Result<T> got = rc != 0 ? Result<T>(Status::Internal(fmt::format("{} exited with {}", script, rc)))
                          : parse(ReadAll(out), out);
  if (!got.ok()) {
    res.notes.push_back(fmt::format("{} ({}): {}", what, got.status().message(), effect));
    return std::nullopt;
  }
  return std::move(*got);
}

const char* kNoSdpa = "PyTorch's fused attention not measured";
const char* kNoSdpaEffect = "plans price SDPA at gpu.attention_efficiency (no gpu.sdpa)";

// Step 4: the GEMM sustained-load curve (gpu.sustained_gemm) from gemm_sustained.py
// --duty-sweep, into |res|.
void MeasureSustainedGemm(const StackProbeOptions& o, StackProbeResult& res) {
  auto curve = RunProbeScript<SustainedGemmCurve>(
      o, o.sustained_gemm, kNoCurve, kNoCurveEffect, "gemm_sustained.py", {"--duty-sweep"},
      "gemm-duty",
      [&](const std::string& text, const std::string& path) {
        return SustainedGemmFromJson(text, path, "tools/probes/gemm_sustained.py --duty-sweep",
                                     o.dsplan_version);
      },
      res);
  if (curve) res.sustained_gemm = std::move(*curve);
}

// Step 5: PyTorch's fused attention (gpu.sdpa) from torch_sdpa.py, into |res|.
void MeasureSdpa(const StackProbeOptions& o, StackProbeResult& res) {
  auto table = RunProbeScript<SdpaTable>(
      o, o.sdpa, kNoSdpa, kNoSdpaEffect, "torch_sdpa.py", {"--dtypes", o.gemm_dtypes},
      "torch-sdpa",
      [&](const std::string& text, const std::string& path) {
        return SdpaTableFromJson(text, path, o.dsplan_version);
      },
      res);
  if (table) res.sdpa = std::move(*table);
}

}  // namespace

StackProbeResult MeasureStack(const HardwareProfile& profile, const StackProbeOptions& o) {
  StackProbeResult res;
  const fs::path work(o.work_dir);
  const std::string out = (work / "stack-probe.out").string();
  const std::string err = (work / "stack-probe.err").string();

  // 1. python3 with torch and a CUDA GPU.
  const int rc =
      RunProcess({o.python, "-c",
                  "import torch; print(torch.__version__); "
                  "print(1 if torch.cuda.is_available() and torch.cuda.device_count() > 0 else 0)"},
                 out, err);
  if (rc == 127) {
    res.notes.push_back(fmt::format("stack not measured: {} not found (give --python); {}",
                                    Quote(o.python, 400), kNoSection));
    res.notes.push_back(fmt::format("{} (needs python with torch): {}", kNoCurve, kNoCurveEffect));
    res.notes.push_back(fmt::format("{} (needs python with torch): {}", kNoSdpa, kNoSdpaEffect));
    return res;
  }
  if (rc != 0) {
    res.notes.push_back(fmt::format("stack not measured: {} cannot import torch ({}); {}",
                                    Quote(o.python, 400), LastLine(ReadAll(err)), kNoSection));
    res.notes.push_back(fmt::format("{} (needs python with torch): {}", kNoCurve, kNoCurveEffect));
    res.notes.push_back(fmt::format("{} (needs python with torch): {}", kNoSdpa, kNoSdpaEffect));
    return res;
  }
  std::istringstream probe(ReadAll(out));
  std::string torch_version, gpu;
  std::getline(probe, torch_version);
  std::getline(probe, gpu);
  if (gpu != "1") {
    res.notes.push_back(fmt::format("stack not measured: torch {} sees no CUDA GPU; {}",
                                    Escape(torch_version, 60), kNoSection));
    res.notes.push_back(fmt::format("{} (needs a CUDA GPU): {}", kNoCurve, kNoCurveEffect));
    res.notes.push_back(fmt::format("{} (needs a CUDA GPU): {}", kNoSdpa, kNoSdpaEffect));
    return res;
  }

  MeasureStackSection(profile, o, res);
  MeasureSustainedGemm(o, res);
  MeasureSdpa(o, res);
  return res;
}

}  // namespace dsplan
