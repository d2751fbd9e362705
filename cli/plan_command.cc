#include "cli/plan_command.h"
#include "planner/check.h"

#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <limits>
#include <memory>
#include <optional>
#include <string>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cli/common.h"
#include "core/output_file.h"
#include "simulator/cost_model.h"
#include "core/hardware_profile.h"
#include "core/model_catalog.h"
#include "core/text.h"
#include "core/units.h"
#include "cli/config_run.h"
#include "planner/ds_config.h"
#include "planner/launcher.h"
#include "planner/search.h"
#include "simulator/workload.h"
#include "simulator/prediction_report.h"
#include "simulator/workload.h"


namespace dsplan {
namespace {

// --gpus not given (0 given is a bad value, not a missing flag).
constexpr int kGpusNotGiven = std::numeric_limits<int>::min();

struct PlanFlags {
  std::string model;
  int gpus = kGpusNotGiven;
  int nodes = 1;
  std::string hardware;
  std::optional<int64_t> seq_len, target_len;
  std::string attention = "auto";
  std::optional<int> stage;
  std::optional<int64_t> micro_batch, grad_accum, global_batch;
  bool no_offload = false;
  std::string offload_optimizer, offload_param;
  bool gradient_checkpointing = false, no_gradient_checkpointing = false;
  bool no_zero_init = false;
  bool malloc_heap = false;
  std::string precision;
  std::optional<int64_t> reduce_bucket_size;
  std::string host_memory, nvme;
  std::string node;
  int host_cores = -1;  // -1: not given
  std::string nvme_path = "/local_nvme";
  std::optional<double> max_gpu_memory_fraction;
  std::string headroom;
  std::string objective = "throughput";
  double price_per_gpu_hour = 0;
  int top = 5;
  bool explain = false;
  std::string emit = "ds_config.json";
  bool emit_given = false;  // --emit was on the line
  std::string hostfile = "hostfile";
  bool hostfile_given = false;  // --hostfile was on the line
  std::string script = "train.py";
  bool force = false;
  bool no_emit = false;
  bool hf_auto = false;
  std::vector<std::string> hosts;
  bool json = false;
  bool quiet = false;
  bool nodes_given = false;  // --nodes was on the line
};

Result<OffloadDevice> ParseOffload(const std::string& s, const char* flag) {
  if (s == "none") return OffloadDevice::kNone;
  if (s == "cpu") return OffloadDevice::kCpu;
  if (s == "nvme") return OffloadDevice::kNvme;
  return Status::InvalidArgument(fmt::format("{} {} is not known; use none, cpu or nvme", flag, Quote(s)));
}

std::string OffloadCell(const Plan& p) {
  if (!p.OffloadsOptimizer() && !p.OffloadsParams()) return "none";
  std::string s = fmt::format("opt:{}", OffloadDeviceName(p.zero.offload_optimizer.device));
  if (p.OffloadsParams()) s += fmt::format(" par:{}", OffloadDeviceName(p.zero.offload_param.device));
  return s;
}

std::string LargestParts(const Prediction& p) {
  // The two largest categories at the peak.
  int a = -1, b = -1;
  for (int c = 0; c < kNumMemCategories; ++c) {
    const int64_t v = p.gpu_breakdown_at_peak[c];
    if (a < 0 || v > p.gpu_breakdown_at_peak[a]) {
      b = a;
      a = c;
    } else if (b < 0 || v > p.gpu_breakdown_at_peak[b]) {
      b = c;
    }
  }
  return fmt::format("{} {}, {} {}", MemCategoryKey(static_cast<MemCategory>(a)),
                     FormatBytes(static_cast<double>(p.gpu_breakdown_at_peak[a])),
                     MemCategoryKey(static_cast<MemCategory>(b)),
                     FormatBytes(static_cast<double>(p.gpu_breakdown_at_peak[b])));
}

std::string Bytes(int64_t b) { return FormatBytes(static_cast<double>(b)); }

// A table whose columns are as wide as their widest cell (numbers right-aligned).
class Table {
 public:
  explicit Table(std::vector<std::pair<std::string, bool>> header) : header_(std::move(header)) {}
  void Add(std::vector<std::string> row) { rows_.push_back(std::move(row)); }
  std::string Text() const {
    std::vector<size_t> w(header_.size());
    for (size_t c = 0; c < header_.size(); ++c) w[c] = header_[c].first.size();
    for (const auto& r : rows_) {
      for (size_t c = 0; c < r.size() && c < w.size(); ++c) w[c] = std::max(w[c], r[c].size());
    }
    auto line = [&](const std::vector<std::string>& cells) {
      std::string out;
      for (size_t c = 0; c < header_.size(); ++c) {
        const std::string& v = c < cells.size() ? cells[c] : std::string();
        const bool right = header_[c].second;
        const bool last = c + 1 == header_.size();
        out += right ? fmt::format("{:>{}}", v, w[c])
                     : (last ? v : fmt::format("{:<{}}", v, w[c]));
        if (!last) out += "  ";
      }
      return out + "\n";
    };
    std::vector<std::string> names;
    for (const auto& h : header_) names.push_back(h.first);
    std::string out = line(names);
    for (const auto& r : rows_) out += line(r);
    return out;
  }

 private:
  std::vector<std::pair<std::string, bool>> header_;
  std::vector<std::vector<std::string>> rows_;
};

std::string RecommendationTable(const std::vector<ScoredPlan>& plans, int top, bool cost,
                                double price) {
  std::vector<std::pair<std::string, bool>> h = {
      {"#", true},          {"stage", true},      {"offload", false},   {"micro x accum", true},
      {"global", true},     {"ckpt", false},      {"bucket", true},     {"peak GPU", true},
      {"largest parts", false}, {"spare", true},  {"host RAM", true},   {"step s", true}, {"range", true},
      {"tokens/s", true},   {"TFLOP/s", true},    {"MFU", true}};
  if (cost) h.push_back({"GPU-h/Mtok", true});
  if (cost && price > 0) h.push_back({"cost/Mtok", true});
  h.push_back({"bottleneck", false});
  Table t(h);
  for (int i = 0; i < top; ++i) {
    const Plan& p = plans[i].plan;
    const Prediction& d = plans[i].prediction;
    std::vector<std::string> r = {
        std::to_string(i + 1),
        [&] {
          std::string st = std::to_string(p.zero.stage);
          for (int o : plans[i].same_as_stages) st += "=" + std::to_string(o);
          return st;
        }(),
        OffloadCell(p),
        fmt::format("{} x {}", p.micro_batch, p.grad_accum),
        std::to_string(p.train_batch()),
        p.gradient_checkpointing ? "on" : "off",
        p.zero.stage > 0 ? fmt::format("{:.0e}", static_cast<double>(p.zero.reduce_bucket_size)) : "-",
        Bytes(d.gpu_total_bytes + d.gpu_nccl_bytes),
        LargestParts(d),
        Bytes(d.gpu_spare_bytes),
        Bytes(d.host_peak_bytes_per_node),
        fmt::format("{:.3f}", d.step_time_s),
        fmt::format("{:.2f}-{:.2f}", d.time_band.low * d.step_time_s,
                    d.time_band.high * d.step_time_s),
        fmt::format("{:.0f}", d.tokens_per_s),
        fmt::format("{:.1f}", d.tflops_per_gpu),
        fmt::format("{:.1f}%", 100 * d.mfu)};
    if (cost) r.push_back(fmt::format("{:.3f}", plans[i].gpu_hours_per_million_tokens));
    if (cost && price > 0) r.push_back(fmt::format("{:.2f}", plans[i].gpu_hours_per_million_tokens * price));
    r.push_back(d.bottleneck);
    t.Add(std::move(r));
  }
  return t.Text();
}

// Why the GPU limit is what it is, in one line per term.
std::string HeadroomText(const Prediction& d, const Headroom& h) {
  return fmt::format(
      "GPU {} per GPU; a plan fits when its predicted peak reserved x (1 + band) + its largest "
      "transient block + CUDA context {} + NCCL {} + headroom {} fit in it\n"
      "         band +{:.0f}% of reserved ({}); NCCL: {}; headroom: --headroom (fragmentation "
      "spikes, library workspaces and other processes the prediction does not see)\n",
      Bytes(d.gpu_capacity_bytes), Bytes(d.gpu_context_bytes), Bytes(d.gpu_nccl_bytes),
      h.Describe(d.gpu_capacity_bytes), 100 * d.memory_band.upper, d.memory_band.basis,
      d.gpu_nccl_bytes > 0 ? "estimated buffers of two communicators (not measured)"
                           : "none on one GPU") +
         fmt::format("Step times: each row's range is where the measured step should fall "
                     "({}; plan 1 is {:.0f}% host-bound: {:.2f}-{:.2f}x{})\n",
                     d.time_band.basis, 100 * d.host_bound_share, d.time_band.low,
                     d.time_band.high, UnvalidatedCommNote(d.time_band, d.plan.world_size()));
}

nlohmann::json HeadroomJson(const Prediction& d, const Headroom& h) {
  return {{"headroom_bytes", h.Bytes(d.gpu_capacity_bytes)},
          {"headroom", h.Describe(d.gpu_capacity_bytes)},
          {"band_upper", d.memory_band.upper},
          {"band_upper_bytes", d.memory_band.upper_bytes},
          {"band_lower", d.memory_band.lower},
          {"band_provisional", d.memory_band.provisional},
          {"band_basis", d.memory_band.basis},
          {"nccl_bytes", d.gpu_nccl_bytes},
          {"context_bytes", d.gpu_context_bytes}};
}

int RunPlan(PlanFlags g);

}  // namespace

DeclaredCommand AddPlanFlags(CLI::App& app) {
  auto flags = std::make_shared<PlanFlags>();
  PlanFlags& g = *flags;
  app.add_option("--model", g.model, "Catalog name (dsplan models) or path to a HF config.json");
  app.add_option("--gpus", g.gpus, "GPUs per node")
      ->transform(CountFlag("--gpus", 1, kMaxWorldSize));
  CLI::Option* nodes_option = app.add_option("--nodes", g.nodes, "Nodes")
                       ->capture_default_str()
                       ->transform(CountFlag("--nodes", 1, kMaxWorldSize));
  app.add_option("--hardware", g.hardware,
                 "Hardware profile name (profiles/) or YAML path. Default: h200-measured when "
                 "present, else h200-sxm");
  app.add_option("--seq-len", g.seq_len,
                 "Tokens per sample (T5: encoder length). Default: 512 for T5 and BERT, else 1024");
  app.add_option("--target-len", g.target_len, "T5 decoder length (default 128)");
  app.add_option("--attention", g.attention, "eager, sdpa, or auto")->capture_default_str();
  app.add_option("--stage", g.stage, "Pin the ZeRO stage (0-3)");
  app.add_option("--micro-batch,--mb", g.micro_batch, "Pin the micro-batch per GPU")
      ->transform(CountFlag("--micro-batch", 1, 1 << 20));
  app.add_option("--grad-accum", g.grad_accum, "Pin gradient accumulation steps")
      ->transform(CountFlag("--grad-accum", 1, 1 << 20));
  app.add_option("--global-batch", g.global_batch,
                 "Samples per optimizer step over all GPUs (micro-batch x accumulation x GPUs)")
      ->transform(CountFlag("--global-batch", 1, int64_t{1} << 40));
  app.add_flag("--no-offload", g.no_offload, "Search only plans without offload");
  app.add_flag("--no-zero-init", g.no_zero_init, kNoZeroInitHelp);
  app.add_flag("--malloc-heap", g.malloc_heap,
               std::string(kMallocHeapHelp) +
                   "; the launch lines then set them (on one node; with several, .deepspeed_env)");
  app.add_option("--offload-optimizer", g.offload_optimizer, "Pin optimizer offload: none, cpu, nvme");
  app.add_option("--offload-param", g.offload_param, "Pin parameter offload: none, cpu, nvme");
  app.add_flag("--gradient-checkpointing", g.gradient_checkpointing, "Pin checkpointing on");
  app.add_flag("--no-gradient-checkpointing", g.no_gradient_checkpointing, "Pin checkpointing off");
  app.add_option("--precision", g.precision, "Pin bf16, fp16 or fp32 (default: bf16 if the GPU has it)");
  app.add_option("--reduce-bucket-size", g.reduce_bucket_size, "Pin reduce_bucket_size (elements)");
  app.add_option("--node", g.node,
                 "Node profile the GPUs are built into (profiles/nodes: dgx-2, dgx-a100, "
                 "dgx-h100, dgx-h200, or a file)");
  app.add_option("--host-cores", g.host_cores, "CPU cores per node (default: the profile's)")
      ->transform(CountFlag("--host-cores", 1, 1'000'000));
  app.add_option("--host-memory", g.host_memory, "Host RAM per node, e.g. 512GiB (default: the profile's)");
  app.add_option("--nvme", g.nvme, "NVMe space per node for ZeRO-Infinity, e.g. 28TB (default: none)");
  app.add_option("--nvme-path", g.nvme_path, "nvme_path written into the config")->capture_default_str();
  app.add_option("--headroom", g.headroom,
                 "GPU memory each plan leaves free beyond its predicted peak, the peak's error "
                 "band, the CUDA context and NCCL: a size (4GiB) or a percentage of the GPU "
                 "(default 3%)");
  app.add_option("--max-gpu-memory-fraction", g.max_gpu_memory_fraction,
                 "Same as --headroom (1-F)x100%: the fraction of each GPU a plan may use before "
                 "the band, context and NCCL");
  app.add_option("--objective", g.objective, "throughput, memory or cost")->capture_default_str();
  app.add_option("--price-per-gpu-hour", g.price_per_gpu_hour, "For --objective cost: price of one GPU-hour");
  app.add_option("--top", g.top, "Plans to list")->capture_default_str();
  app.add_flag("--explain", g.explain, "Say why the other families were rejected, in numbers");
  CLI::Option* emit_option = app.add_option("--emit", g.emit,
                              "Write the best plan's ds_config.json here (default: ds_config.json "
                              "in text mode, next to an existing one; no file with --json or "
                              "--quiet unless given)");
  CLI::Option* hostfile_option = app.add_option("--hostfile", g.hostfile,
                                  "Several nodes: write the DeepSpeed hostfile here (default: "
                                  "hostfile, written with the config)");
  app.add_option("--script", g.script, "The training script the launch commands name")
      ->capture_default_str();
  app.add_flag("--force", g.force, "Replace existing output files");
  app.add_flag("--no-emit", g.no_emit, "Do not write a ds_config.json");
  app.add_flag("--hf-auto", g.hf_auto, "Write the HF Trainer form (\"auto\" where the Trainer fills values)");
  app.add_option("--host", g.hosts, "Host names for the hostfile (one per node)");
  app.add_flag("--json", g.json, "Machine-readable output");
  app.add_flag("--quiet", g.quiet, "Only the best plan, one line");
  return {&app, [flags, nodes_option, emit_option, hostfile_option] {
            PlanFlags f = *flags;
            f.nodes_given = nodes_option->count() > 0;
            f.emit_given = emit_option->count() > 0;
            f.hostfile_given = hostfile_option->count() > 0;
            return RunPlan(std::move(f));
          }};
}

namespace {

// The files a plan run writes: where, and whether the name was the user's.
struct OutputPlan {
  std::string config;     // "" = none
  std::string hostfile;   // "" = none
  std::vector<std::string> notes;  // "ds_config.json exists: wrote ds_config-1.json next to it"
};

// Decides the output paths before the search (so a refusal costs nothing): never an input,
// never an existing file without --force; default names move aside to a free name.
Result<OutputPlan> PlanOutputs(const PlanFlags& g, const std::vector<std::string>& inputs,
                               bool multi_node) {
  OutputPlan o;
  const bool emit_given = g.emit_given;
  const bool hostfile_given = g.hostfile_given;
  if (g.no_emit && emit_given) {
    return Status::InvalidArgument("--emit and --no-emit contradict each other");
  }
  // A JSON or one-line query writes nothing unless a file is named.
  const bool write = !g.no_emit && (emit_given || (!g.json && !g.quiet));
  if (!write) return o;
  OutputPolicy policy{inputs, g.force, "--emit"};
  auto place = [&](const std::string& path, bool given, const char* flag,
                   std::string* out) -> Status {
    policy.flag = flag;
    if (given || g.force) {
      DSPLAN_RETURN_IF_ERROR(CheckOutputPath(path, policy));
      *out = path;
      return Status();
    }
    *out = FreeOutputPath(path, policy);
    DSPLAN_RETURN_IF_ERROR(CheckOutputPath(*out, policy));
    if (*out != path) {
      o.notes.push_back(fmt::format("{} exists: wrote {} next to it (--force replaces it)", path,
                                    *out));
    }
    return Status();
  };
  DSPLAN_RETURN_IF_ERROR(place(g.emit, emit_given, "--emit", &o.config));
  if (multi_node) {
    DSPLAN_RETURN_IF_ERROR(place(g.hostfile, hostfile_given, "--hostfile", &o.hostfile));
    if (SamePath(o.hostfile, o.config)) {
      return Status::InvalidArgument(
          fmt::format("--hostfile {} is the same file as the config; choose another name",
                      o.hostfile));
    }
  }
  return o;
}

struct Launches {
  std::string hf_trainer, deepspeed_script, torchrun, srun;
  std::vector<std::string> trainer_args;
};

Launches MakeLaunches(const PlanFlags& g, const Plan& plan, const std::string& config,
                      const std::string& hostfile) {
  Launches l;
  l.trainer_args = HfTrainerArgs(plan);
  LaunchSpec hf = LaunchSpecForPlan(plan, g.hosts);
  hf.script = g.script;
  hf.script_args = l.trainer_args;
  if (!config.empty()) hf.ds_config_path = config;
  if (!hostfile.empty()) hf.hostfile_path = hostfile;
  l.hf_trainer = LaunchCommand(hf);
  l.torchrun = TorchrunCommand(hf);
  l.srun = SrunCommand(hf);
  LaunchSpec ds = hf;
  ds.kind = ScriptKind::kDeepSpeed;
  ds.script_args.clear();
  l.deepspeed_script = LaunchCommand(ds);
  if (plan.malloc_heap) {
    // Environment variables before a command reach every rank it starts on this node (the
    // deepspeed launcher copies its environment, torchrun and srun pass theirs); the deepspeed
    // launcher takes others to the other nodes only from .deepspeed_env (MallocHeapNote).
    const std::string env = std::string(kMallocHeapEnv) + " ";
    if (plan.nodes == 1) {
      l.hf_trainer = env + l.hf_trainer;
      l.deepspeed_script = env + l.deepspeed_script;
    }
    l.torchrun = env + l.torchrun;
    l.srun = env + l.srun;
  }
  return l;
}

int RunPlan(PlanFlags g) {
  if (g.model.empty()) {
    return Fail(Status::InvalidArgument(
        "--model is required (a catalog name from 'dsplan models' or a path to a HuggingFace "
        "config.json), e.g. dsplan --model t5-3b --gpus 4"));
  }
  if (g.gpus == kGpusNotGiven) {
    return Fail(
        Status::InvalidArgument("--gpus is required: the number of GPUs per node, e.g. --gpus 8"));
  }
  if (g.gpus <= 0) {
    return Fail(Status::InvalidArgument(
        fmt::format("--gpus must be a positive integer (GPUs per node), got {}", g.gpus)));
  }
  if (g.nodes <= 0) {
    return Fail(Status::InvalidArgument(
        fmt::format("--nodes must be a positive integer, got {}", g.nodes)));
  }
  // Flag values: each refused with its flag named rather than clamped, wrapped or ignored.
  for (Status s : {CheckCluster(g.gpus, g.nodes), CheckIntFlag("--top", g.top, 1, 10000),
                   CheckLengthFlags(g.seq_len, g.target_len),
                   CheckNumberFlag("--price-per-gpu-hour", g.price_per_gpu_hour, 0, 1e6, false)}) {
    if (!s.ok()) return Fail(s);
  }
  if (g.micro_batch) {
    if (Status s = CheckIntFlag("--micro-batch", *g.micro_batch, 1, 1 << 20); !s.ok()) return Fail(s);
  }
  if (g.grad_accum) {
    if (Status s = CheckIntFlag("--grad-accum", *g.grad_accum, 1, 1 << 20); !s.ok()) return Fail(s);
  }
  if (g.global_batch) {
    if (Status s = CheckIntFlag("--global-batch", *g.global_batch, 1, int64_t{1} << 40); !s.ok()) {
      return Fail(s);
    }
  }
  if (g.reduce_bucket_size) {
    if (Status s = CheckIntFlag("--reduce-bucket-size", *g.reduce_bucket_size, 1,
                                int64_t{1} << 40);
        !s.ok()) {
      return Fail(s);
    }
  }
  for (const std::string& h : g.hosts) {
    if (Status s = CheckHostName(h); !s.ok()) return Fail(s);
  }
  if (!IsValidUtf8(g.nvme_path) || Escape(g.nvme_path, 4096) != g.nvme_path || g.nvme_path.empty()) {
    return Fail(Status::InvalidArgument(fmt::format(
        "--nvme-path {} must be a non-empty path without control bytes, in UTF-8",
        Quote(g.nvme_path))));
  }
  if (g.gradient_checkpointing && g.no_gradient_checkpointing) {
    return Fail(Status::InvalidArgument(
        "--gradient-checkpointing and --no-gradient-checkpointing contradict each other"));
  }
  auto spec = LoadModel(g.model, DataDir());
  if (!spec.ok()) return Fail(spec.status());
  auto profile = LoadMachine(g.hardware, g.node, g.host_cores);
  if (!profile.ok()) return Fail(profile.status());
  const MachineAdvice machine_advice =
      LocalMachineAdvice(g.hardware, g.node, !g.host_memory.empty(), g.host_cores != -1, *profile);
  // --gpus is per node: more than the profile's node holds become nodes when --nodes is not
  // given and they fill whole nodes; otherwise they are refused (never one impossible node).
  if (Status s = SplitGpusIntoNodes(profile->gpus_per_node, profile->name,
                                    g.nodes_given,
                                    &g.gpus, &g.nodes);
      !s.ok()) {
    return Fail(s);
  }
  if (!g.hosts.empty() && static_cast<int>(g.hosts.size()) != g.nodes) {
    return Fail(Status::InvalidArgument(fmt::format(
        "--host was given {} time(s) for {} node(s); give one host name per node",
        g.hosts.size(), g.nodes)));
  }
  // GPU headroom: --headroom, or its old spelling --max-gpu-memory-fraction.
  Headroom headroom;
  if (!g.headroom.empty() && g.max_gpu_memory_fraction) {
    return Fail(Status::InvalidArgument(
        "--headroom and --max-gpu-memory-fraction set the same thing; give one"));
  }
  if (!g.headroom.empty()) {
    auto h = ParseHeadroom(g.headroom);
    if (!h.ok()) return Fail(h.status());
    headroom = *h;
  } else if (g.max_gpu_memory_fraction) {
    const double f = *g.max_gpu_memory_fraction;
    if (!(f > 0 && f <= 1)) {
      return Fail(Status::InvalidArgument(
          fmt::format("--max-gpu-memory-fraction must be in (0, 1], got {}", f)));
    }
    headroom.fraction = 1 - f;
  }
  // What this command reads, never to be written.
  std::vector<std::string> inputs = {g.model, g.model + "/config.json"};
  if (!g.hardware.empty()) inputs.push_back(g.hardware);
  auto outputs = PlanOutputs(g, inputs, g.nodes > 1);
  if (!outputs.ok()) return Fail(outputs.status());
  PlannerRequest r;
  r.spec = *spec;
  r.nodes = g.nodes;
  r.gpus_per_node = g.gpus;
  r.profile = &*profile;
  if (Status s = ResolveLengthFlags(*spec, g.seq_len, g.target_len, &r.shape); !s.ok()) {
    return Fail(s);
  }
  auto attn = ParseAttentionImpl(g.attention);
  if (!attn.ok()) return Fail(attn.status());
  r.shape.attention = *attn;
  r.stage = g.stage;
  r.zero_init = !g.no_zero_init;
  r.malloc_heap = g.malloc_heap;
  if (g.micro_batch) r.PinMicroBatch(*g.micro_batch);
  r.grad_accum = g.grad_accum;
  r.global_batch = g.global_batch;
  r.no_offload = g.no_offload;
  if (!g.offload_optimizer.empty()) {
    auto d = ParseOffload(g.offload_optimizer, "--offload-optimizer");
    if (!d.ok()) return Fail(d.status());
    r.offload_optimizer = *d;
  }
  if (!g.offload_param.empty()) {
    auto d = ParseOffload(g.offload_param, "--offload-param");
    if (!d.ok()) return Fail(d.status());
    r.offload_param = *d;
  }
  if (g.gradient_checkpointing) r.PinGradientCheckpointing(true);
  if (g.no_gradient_checkpointing) r.PinGradientCheckpointing(false);
  if (!g.precision.empty()) {
    auto p = ParsePrecision(g.precision);
    if (!p.ok()) return Fail(p.status());
    r.PinPrecision(*p);
  }
  if (g.reduce_bucket_size && *g.reduce_bucket_size <= 0) {
    return Fail(Status::InvalidArgument("--reduce-bucket-size must be a positive number of elements"));
  }
  r.reduce_bucket_size = g.reduce_bucket_size;
  if (!g.host_memory.empty()) {
    auto b = ParseSize(g.host_memory, "--host-memory");
    if (!b.ok()) return Fail(b.status());
    if (*b <= 0) {
      return Fail(Status::InvalidArgument(
          "--host-memory must be more than 0 bytes (leave it out to use the profile's value)"));
    }
    r.host_memory_bytes = *b;
  }
  if (!g.nvme.empty()) {
    auto b = ParseSize(g.nvme, "--nvme");
    if (!b.ok()) return Fail(b.status());
    r.nvme_bytes = *b;
  }
  r.nvme_path = g.nvme_path;
  r.headroom = headroom;
  auto obj = ParseObjective(g.objective);
  if (!obj.ok()) return Fail(obj.status());
  r.objective = *obj;
  if (g.price_per_gpu_hour < 0) {
    return Fail(Status::InvalidArgument("--price-per-gpu-hour must not be negative"));
  }
  r.price_per_gpu_hour = g.price_per_gpu_hour;
  const bool tty = isatty(fileno(stderr)) && !g.json && !g.quiet;
  if (tty) {
    r.progress = [](double f) { fmt::print(stderr, "\rsearching... {:3.0f}%", 100 * f); };
  }
  // One Simulator for the search, the fit suggestions and the report: each run shape's
  // workload is built once.
  Simulator sim(*spec, *profile);
  r.simulator = &sim;
  auto result = RunPlanner(r);
  if (tty) fmt::print(stderr, "\r{:20}\r", "");
  if (!result.ok()) return Fail(result.status());
  const PlannerResult& res = *result;
  const bool any = !res.recommendations.empty();
  auto counted = CountParameters(*spec);
  if (!counted.ok()) return Fail(counted.status());
  const int64_t params = *counted;
  // Nothing fits: find what would (exit code 3).
  std::optional<FitSuggestion> suggestion;
  if (!any) {
    if (tty) fmt::print(stderr, "nothing fits; looking for what would...");
    suggestion = SuggestFit(r);
    if (tty) fmt::print(stderr, "\r{:45}\r", "");
  }
  const int rc = any ? 0 : 3;
  const bool cost = r.objective == Objective::kCost;
  const double peak_flops = CostModel(*profile, any ? res.recommendations.front().plan.precision
                                                    : Precision::kBf16)
                                .PeakFlops(any ? res.recommendations.front().plan.precision
                                               : Precision::kBf16);
  const Precision mfu_dtype = any ? res.recommendations.front().plan.precision : Precision::kBf16;
  const std::string mfu_text = fmt::format(
      "MFU = model FLOPs (forward + backward, no recompute) / the dense {} peak of one {}, {:.0f} "
      "TFLOP/s ({})",
      PrecisionName(mfu_dtype), profile->gpu.name, peak_flops / 1e12,
      SourceKindName(mfu_dtype == Precision::kFp32   ? profile->gpu.peak_flops_fp32.source.kind
                     : mfu_dtype == Precision::kFp16 ? profile->gpu.peak_flops_fp16.source.kind
                                                     : profile->gpu.peak_flops_bf16.source.kind));

  // The chosen plan's config and hostfile.
  const ScoredPlan* best = any ? &res.recommendations.front() : nullptr;
  nlohmann::json best_cfg;
  std::string emitted, hostfile_written;
  if (any) {
    best_cfg = EmitDsConfig(best->plan, g.hf_auto ? EmitStyle::kHfAuto : EmitStyle::kExplicit);
    if (!outputs->config.empty()) {
      if (Status st = WriteOutputFile(outputs->config, best_cfg.dump(2) + "\n"); !st.ok()) {
        return Fail(st);
      }
      emitted = outputs->config;
    }
    if (!outputs->hostfile.empty()) {
      LaunchSpec ls = LaunchSpecForPlan(best->plan, g.hosts);
      if (Status st = WriteOutputFile(outputs->hostfile, HostfileText(ls)); !st.ok()) {
        return Fail(st);
      }
      hostfile_written = outputs->hostfile;
    }
  }
  const std::string config_name = emitted.empty() ? g.emit : emitted;
  const std::string hostfile_name = hostfile_written.empty() ? g.hostfile : hostfile_written;
  const int top = std::min<int>(g.top, static_cast<int>(res.recommendations.size()));
  const std::string batch_text =
      r.global_batch
          ? fmt::format("global batch {} (pinned)", *r.global_batch)
          : fmt::format("global batch not pinned (--global-batch N pins it): each row is the "
                        "smallest global batch within {:.0f}% of its choice's fastest, then the "
                        "least memory",
                        100 * kBatchTolerance);

  if (g.json) {
    nlohmann::json recs = nlohmann::json::array();
    for (int i = 0; i < top; ++i) {
      const ScoredPlan& s = res.recommendations[i];
      auto w = sim.WorkloadFor(s.plan.shape());
      if (!w.ok()) return Fail(w.status());
      nlohmann::json j = PredictionToJson(s.prediction, **w);
      j["rank"] = i + 1;
      j["summary"] = PlanSummary(s.plan);
      j["global_batch"] = s.plan.train_batch();
      j["same_as_stages"] = s.same_as_stages;
      const KeptOutput kept = KeptOutputBytes(**w, s.plan);
      j["kept_output_bytes"] = {{"logits", kept.logits_bytes},
                                {"kv_cache_with_use_cache", kept.kv_cache_bytes},
                                {"kv_cache_in_step_with_use_cache", kept.kv_cache_in_step_bytes},
                                {"encoder_output", kept.encoder_output_bytes}};
      auto outside = ZeroInitOutsideExtraBytes(sim, s.plan, s.prediction);
      if (!outside.ok()) return Fail(outside.status());
      j["model_construction"] = {{"assumes_zero_init", s.plan.zero_init},
                                 {"extra_bytes_built_outside_zero_init", *outside}};
      {
        // The same plan with glibc's malloc held to its heap (MallocHeapNote).
        auto heap = MallocHeapStepSeconds(sim, s.plan);
        if (!heap.ok()) return Fail(heap.status());
        if (*heap) j["malloc_heap"] = {{"env", kMallocHeapEnv}, {"step_s", **heap}};
      }
      j["gpu_hours_per_million_tokens"] = s.gpu_hours_per_million_tokens;
      if (g.price_per_gpu_hour > 0) j["cost_per_million_tokens"] = s.gpu_hours_per_million_tokens * g.price_per_gpu_hour;
      j["ds_config"] = EmitDsConfig(s.plan, g.hf_auto ? EmitStyle::kHfAuto : EmitStyle::kExplicit);
      recs.push_back(std::move(j));
    }
    nlohmann::json pareto = nlohmann::json::array();
    for (const ScoredPlan& s : res.pareto) {
      pareto.push_back({{"summary", PlanSummary(s.plan)},
                        {"micro_batch", s.plan.micro_batch},
                        {"grad_accum", s.plan.grad_accum},
                        {"global_batch", s.plan.train_batch()},
                        {"tokens_per_s", s.prediction.tokens_per_s},
                        {"peak_total_bytes", s.prediction.gpu_total_bytes}});
    }
    nlohmann::json rejected = nlohmann::json::array();
    for (const RejectedFamily& f : res.rejected) {
      rejected.push_back({{"family", f.family}, {"reason", f.reason}, {"best_tokens_per_s", f.best_tokens_per_s}});
    }
    nlohmann::json out = {{"schema", "dsplan/plan"},
                          {"schema_version", 1},
                          {"dsplan_version", DSPLAN_VERSION},
                          {"model", {{"name", spec->name}, {"seq_len", r.shape.seq_len}, {"target_len", r.shape.target_len}}},
                          {"cluster", {{"nodes", g.nodes}, {"gpus_per_node", g.gpus}}},
                          {"hardware", {{"profile", profile->name}, {"sources", profile->SourceSummary()}}},
                          {"objective", ObjectiveName(r.objective)},
                          {"batch", {{"global_batch_pinned", r.global_batch.has_value()},
                                     {"tolerance", res.batch_tolerance},
                                     {"explanation", batch_text}}},
                          {"mfu_reference", {{"dtype", PrecisionName(mfu_dtype)},
                                             {"peak_flops", peak_flops},
                                             {"explanation", mfu_text}}},
                          {"recommendations", recs},
                          {"pareto", pareto},
                          {"rejected", rejected},
                          {"ranked_count", res.ranked.size()},
                          {"emitted", emitted},
                          {"hostfile_written", hostfile_written},
                          {"notes", outputs->notes},
                          {"fits", any},
                          {"order", {{"choice_tie_tolerance", kChoiceTieTolerance},
                                     {"explanation",
                                      "fastest first; choices within the tolerance of each other's "
                                      "tokens/s go by the narrower step-time band, then less memory"}}},
                          {"search", {{"plans_considered", res.plans_considered},
                                      {"plans_simulated", res.plans_simulated},
                                      {"seconds", res.seconds}}}};
    if (machine_advice.gpu) out["hardware"]["advice"] = *machine_advice.gpu;
    if (machine_advice.host) out["hardware"]["host_advice"] = *machine_advice.host;
    if (any) {
      out["memory"] = HeadroomJson(best->prediction, headroom);
      const Launches l = MakeLaunches(g, best->plan, config_name, hostfile_name);
      out["launch"] = {{"hf_trainer", l.hf_trainer},
                       {"deepspeed_script", l.deepspeed_script},
                       {"torchrun", l.torchrun},
                       {"trainer_args", l.trainer_args}};
      if (g.nodes > 1) {
        out["launch"]["srun"] = l.srun;
        out["hostfile"] = HostfileText(LaunchSpecForPlan(best->plan, g.hosts));
      }
    }
    if (!any) {
      out["suggestion"] = nullptr;
      if (suggestion) {
        out["suggestion"] = {{"what", suggestion->what},
                             {"summary", PlanSummary(suggestion->plan.plan)},
                             {"micro_batch", suggestion->plan.plan.micro_batch},
                             {"grad_accum", suggestion->plan.plan.grad_accum},
                             {"tokens_per_s", suggestion->plan.prediction.tokens_per_s}};
      }
    }
    fmt::print("{}\n", JsonText(out));
    return rc;
  }
  if (g.quiet) {
    if (!any) {
      fmt::print("no plan fits{}\n",
                 suggestion ? "; it would with " + suggestion->what : "");
      return rc;
    }
    fmt::print("{}, micro-batch {} x {} (global batch {}): {:.0f} tokens/s, peak {} ({} spare){}\n",
               PlanSummary(best->plan), best->plan.micro_batch, best->plan.grad_accum,
               best->plan.train_batch(), best->prediction.tokens_per_s,
               Bytes(best->prediction.gpu_total_bytes + best->prediction.gpu_nccl_bytes),
               Bytes(best->prediction.gpu_spare_bytes),
               emitted.empty() ? "" : ", wrote " + emitted);
    return 0;
  }
  fmt::print("dsplan {}: {} ({} parameters) on {} node(s) x {} GPU(s)\n", DSPLAN_VERSION,
             spec->name, FormatCount(static_cast<double>(params)), g.nodes, g.gpus);
  fmt::print("hardware {} ({})\n", profile->name, profile->SourceSummary());
  for (const std::string& line : machine_advice.Lines()) fmt::print("warning: {}\n", line);
  if (any) {
    fmt::print("memory   {}", HeadroomText(best->prediction, headroom));
  } else {
    fmt::print("memory   GPU {} per GPU, headroom {}\n",
               FormatBytes(profile->gpu.memory_bytes.value),
               headroom.Describe(static_cast<int64_t>(profile->gpu.memory_bytes.value)));
  }
  fmt::print("limits   host RAM {} per node{}, NVMe {}\n",
             FormatBytes(r.host_memory_bytes > 0 ? static_cast<double>(r.host_memory_bytes)
                                                 : profile->host.ram_bytes.value),
             r.host_memory_bytes > 0 ? "" : " (the profile's; --host-memory to change)",
             r.nvme_bytes > 0 ? FormatBytes(static_cast<double>(r.nvme_bytes)) + " per node"
                              : "none (--nvme SIZE to allow ZeRO-Infinity)");
  fmt::print("batch    {}\n", batch_text);
  fmt::print("order    fastest first; choices within {:.0f}% of each other's tokens/s are equally fast "
             "as far as dsplan can tell (two plans of one model measured the same day differ that "
             "much from their predictions): the narrower step-time range goes first, then less "
             "memory\n",
             100 * kChoiceTieTolerance);
  fmt::print("MFU      {}\n", mfu_text);
  fmt::print("sequence {}{}, objective {}{}; {} plans considered, {} simulated in {:.2f} s\n\n",
             r.shape.seq_len,
             r.shape.target_len ? fmt::format(" + target {}", r.shape.target_len) : "",
             ObjectiveName(r.objective),
             cost ? (g.price_per_gpu_hour > 0
                         ? fmt::format(" (GPU-hours and cost per million tokens at {:g} per GPU-hour)",
                                       g.price_per_gpu_hour)
                         : std::string(" (GPU-hours per million tokens; --price-per-gpu-hour for money)"))
                  : std::string(),
             res.plans_considered, res.plans_simulated, res.seconds);
  if (!any) {
    fmt::print("No plan fits. Why, per choice:\n");
    for (const RejectedFamily& f : res.rejected) fmt::print("  {}: {}\n", f.family, f.reason);
    if (suggestion) {
      const ScoredPlan& s = suggestion->plan;
      fmt::print("\nIt would fit with {}: {}, micro-batch {} x {}, {:.0f} tokens/s, peak {} per "
                 "GPU.\n",
                 suggestion->what, PlanSummary(s.plan), s.plan.micro_batch, s.plan.grad_accum,
                 s.prediction.tokens_per_s,
                 FormatBytes(static_cast<double>(s.prediction.gpu_total_bytes)));
    } else {
      fmt::print("\nNothing up to 4096 GPUs, unlimited host RAM or NVMe fits with these pins; "
                 "try a shorter --seq-len or fewer pins.\n");
    }
    return rc;
  }
  fmt::print("{}", RecommendationTable(res.recommendations, top, cost, g.price_per_gpu_hour));
  fmt::print("(peak GPU = predicted reserved + context + NCCL; spare = what that leaves of the "
             "GPU, before the band and headroom; stage \"1=2\": stage 2 gives the same plan)\n");
  fmt::print("\nPareto front (throughput vs peak GPU memory; points at least 10% apart in memory):\n");
  for (const ScoredPlan& s : res.pareto) {
    fmt::print("  {:>9.0f} tokens/s  {:>9}  {}, micro-batch {} x {} (global {})\n",
               s.prediction.tokens_per_s, Bytes(s.prediction.gpu_total_bytes),
               PlanSummary(s.plan), s.plan.micro_batch, s.plan.grad_accum, s.plan.train_batch());
  }
  if (g.explain) {
    fmt::print("\nWhy not more (per choice: the limit of its best variant, fastest first):\n");
    for (const RejectedFamily& f : res.rejected) {
      if (f.best_tokens_per_s > 0) {
        fmt::print("  {} (best {:.0f} tokens/s): {}\n", f.family, f.best_tokens_per_s, f.reason);
      } else {
        fmt::print("  {}: no plan; {}\n", f.family, f.reason);
      }
    }
  }
  fmt::print("\nbest: {}, micro-batch {} x accumulation {} x {} GPU(s) = global batch {}\n",
             PlanSummary(best->plan), best->plan.micro_batch, best->plan.grad_accum,
             best->plan.world_size(), best->plan.train_batch());
  for (const std::string& w : best->prediction.warnings) fmt::print("warning: {}\n", w);
  for (const std::string& n : outputs->notes) fmt::print("note: {}\n", n);
  if (!emitted.empty()) {
    fmt::print("wrote {}{}\n", emitted, g.hf_auto ? " (HF Trainer form)" : "");
  } else {
    fmt::print("no config written{}\n", g.no_emit ? " (--no-emit)" : "");
  }
  if (!hostfile_written.empty()) {
    fmt::print("wrote {}{}\n", hostfile_written,
               UsesPlaceholderHosts(LaunchSpecForPlan(best->plan, g.hosts))
                   ? " (PLACEHOLDER host names node1..: replace them, or pass --host per node)"
                   : "");
  }
  if (g.nodes > 1) {
    fmt::print("hostfile {}:\n{}",
               hostfile_written.empty() ? std::string("(not written)") : hostfile_written,
               HostfileText(LaunchSpecForPlan(best->plan, g.hosts)));
  }
  const Launches l = MakeLaunches(g, best->plan, config_name, hostfile_name);
  fmt::print("\nlaunch, HF Trainer script (these Trainer arguments must match the config):\n  {}\n",
             l.hf_trainer);
  fmt::print("launch, plain DeepSpeed script (deepspeed.add_config_arguments):\n  {}\n",
             l.deepspeed_script);
  auto best_w = sim.WorkloadFor(best->plan.shape());
  if (!best_w.ok()) return Fail(best_w.status());
  fmt::print("  {}\n", KeptOutputNote(**best_w, best->plan, best->prediction));
  {
    auto note = ZeroInitNote(sim, best->plan, best->prediction, config_name);
    if (!note.ok()) return Fail(note.status());
    if (!note->empty()) fmt::print("  {}\n", *note);
  }
  {
    auto note = MallocHeapNote(sim, best->plan, best->prediction);
    if (!note.ok()) return Fail(note.status());
    if (!note->empty()) fmt::print("  {}\n", *note);
  }
  if (best->plan.gradient_checkpointing || best->plan.linear_tiles > 1) {
    fmt::print("model code changes the plan needs:\n");
    for (const std::string& c : ModelCodeChanges(best->plan)) fmt::print("  - {}\n", c);
  }
  fmt::print("the same under torchrun{}:\n  {}\n", g.nodes > 1 ? " (run on every node)" : "",
             l.torchrun);
  if (g.nodes > 1) fmt::print("under Slurm (inside an allocation of {} nodes):\n  {}\n", g.nodes,
                              [&] {
                                std::string s = l.srun;
                                for (size_t p = s.find('\n'); p != std::string::npos;
                                     p = s.find('\n', p + 4)) {
                                  s.replace(p, 1, "\n  ");
                                }
                                return s;
                              }());
  fmt::print("optimizer AdamW at the HF Trainer's default lr {:g}, warmed up linearly over {} "
             "steps (WarmupLR): to change it, edit optimizer.params.lr and "
             "scheduler.params.warmup_max_lr together, and --learning_rate with them\n",
             best->plan.optimizer_params.lr.value_or(0),
             best->plan.scheduler_params.warmup_num_steps.value_or(0));
  return 0;
}

}  // namespace
}  // namespace dsplan
