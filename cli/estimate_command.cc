#include "cli/estimate_command.h"

#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cli/common.h"
#include "core/text.h"

#include "core/hardware_profile.h"
#include "core/model_catalog.h"
#include "core/plan.h"
#include "core/status.h"
#include "core/units.h"
#include "simulator/estimator.h"
#include "simulator/simulate.h"
#include "simulator/workload.h"

namespace dsplan {
namespace {

struct EstimateFlags {
  std::string model;
  std::optional<int64_t> params;
  std::optional<int64_t> largest_layer_params;
  int gpus = 1;
  int nodes = 1;
  std::string hardware;
  std::optional<int64_t> seq_len;
  int64_t micro_batch = 1;
  bool json = false;
};


// The rows: every stage with the offload options DeepSpeed's estimators cover (stage 1 has no
// DeepSpeed estimator; stage 3 offload_param needs offload_optimizer in the estimator).
struct RowSpec {
  int stage;
  OffloadDevice offload_optimizer;
  OffloadDevice offload_param;
};
constexpr RowSpec kRows[] = {
    {0, OffloadDevice::kNone, OffloadDevice::kNone},
    {1, OffloadDevice::kNone, OffloadDevice::kNone},
    {1, OffloadDevice::kCpu, OffloadDevice::kNone},
    {2, OffloadDevice::kNone, OffloadDevice::kNone},
    {2, OffloadDevice::kCpu, OffloadDevice::kNone},
    {3, OffloadDevice::kNone, OffloadDevice::kNone},
    {3, OffloadDevice::kCpu, OffloadDevice::kNone},
    {3, OffloadDevice::kCpu, OffloadDevice::kCpu},
};

struct Row {
  RowSpec spec;
  int64_t paper = 0;
  std::optional<DeepSpeedEstimate> ds;  // none: DeepSpeed has no estimator for the row
  // dsplan's prediction (with a model).
  bool simulated = false;
  int64_t peak_bytes = 0;        // reserved + context (what nvidia-smi shows)
  int64_t peak_allocated = 0;    // torch.cuda.max_memory_allocated
  int64_t host_bytes_per_node = 0;
  bool fits = true;
};

std::optional<DeepSpeedEstimate> DeepSpeedRow(const RowSpec& r, int64_t params, int64_t largest,
                                              int gpus, int nodes) {
  const bool off_opt = r.offload_optimizer != OffloadDevice::kNone;
  const bool off_par = r.offload_param != OffloadDevice::kNone;
  if (r.stage == 2) return EstimateZero2ModelStates(params, gpus, nodes, off_opt);
  if (r.stage == 3) {
    return EstimateZero3ModelStates(params, largest, gpus, nodes, off_opt, off_par,
                                    /*zero_init=*/true);
  }
  return std::nullopt;
}

// The default configuration dsplan simulates for a row: DeepSpeed's code defaults with bf16,
// AdamW (DeepSpeedCPUAdam when offloaded), micro-batch |micro|, no accumulation.
Plan RowPlan(const RowSpec& r, const EstimateFlags& f, const RunShape& shape) {
  Plan p;
  static_cast<RunShape&>(p) = shape;
  p.nodes = f.nodes;
  p.gpus_per_node = f.gpus;
  p.grad_accum = 1;
  p.optimizer = OptimizerType::kAdamW;
  p.zero.stage = r.stage;
  p.zero.offload_optimizer.device = r.offload_optimizer;
  p.zero.offload_param.device = r.offload_param;
  return p;
}

std::string Gib(int64_t bytes) { return fmt::format("{:.2f}", bytes / double(int64_t{1} << 30)); }

}  // namespace

namespace {
int RunEstimate(const EstimateFlags& f);
}  // namespace

DeclaredCommand AddEstimateCommand(CLI::App& app) {
  auto flags = std::make_shared<EstimateFlags>();
  EstimateFlags& f = *flags;
  CLI::App* cmd = app.add_subcommand(
      "estimate",
      "Model-state memory per ZeRO stage and offload: the ZeRO paper, DeepSpeed's estimator, "
      "and dsplan's full prediction");
  cmd->add_option("--model", f.model, "Catalog name (dsplan models) or path to a HF config.json");
  cmd->add_option("--params", f.params, "A bare parameter count instead of a model");
  cmd->add_option("--largest-layer-params", f.largest_layer_params,
                  "With --params: the largest module's own parameters (DeepSpeed's ZeRO-3 "
                  "estimator term; default 0)");
  AddGpusAndNodesFlags(cmd, f.gpus, f.nodes);
  cmd->add_option("--hardware", f.hardware,
                  "Hardware profile for dsplan's prediction (name or YAML). Default: "
                  "h200-measured when present, else h200-sxm");
  cmd->add_option("--seq-len", f.seq_len,
                  "Tokens per sample for dsplan's prediction (default: 512 for T5 and BERT, "
                  "else 1024 capped at a learned position table)");
  cmd->add_option("--micro-batch", f.micro_batch, "Micro-batch for dsplan's prediction")
      ->capture_default_str()
      ->transform(CountFlag("--micro-batch", 1, 1 << 20));
  cmd->add_flag("--json", f.json, "Machine-readable output");
  return {cmd, [flags] { return RunEstimate(*flags); }};
}

namespace {

int RunEstimate(const EstimateFlags& f) {
  for (Status s : {CheckCluster(f.gpus, f.nodes), CheckLengthFlags(f.seq_len, std::nullopt),
                   CheckIntFlag("--micro-batch", f.micro_batch, 1, 1 << 20)}) {
    if (!s.ok()) return Fail(s);
  }
  // A bare count: the byte products below (16 bytes per parameter and more) must not overflow.
  constexpr int64_t kMaxParams = 100'000'000'000'000;  // 1e14, as for a model config
  if (f.params) {
    if (Status s = CheckIntFlag("--params", *f.params, 1, kMaxParams); !s.ok()) return Fail(s);
  }
  if (f.largest_layer_params && f.params && *f.largest_layer_params > *f.params) {
    return Fail(Status::InvalidArgument(fmt::format(
        "--largest-layer-params {} exceeds --params {}", *f.largest_layer_params, *f.params)));
  }
  if (f.model.empty() == !f.params.has_value()) {
    return Fail(Status::InvalidArgument(
        "give either --model (a catalog name or HF config.json) or --params (a parameter "
        "count), not both or neither"));
  }
  if (f.params && *f.params <= 0) {
    return Fail(Status::InvalidArgument(
        fmt::format("--params must be a positive parameter count, got {}", *f.params)));
  }
  if (f.largest_layer_params && (*f.largest_layer_params < 0 || !f.params)) {
    return Fail(Status::InvalidArgument(
        "--largest-layer-params needs --params and must be >= 0 (with --model it is derived)"));
  }
  if (f.micro_batch < 1) {
    return Fail(Status::InvalidArgument(
        fmt::format("--micro-batch must be a positive integer, got {}", f.micro_batch)));
  }
  const int total_gpus = f.gpus * f.nodes;

  int64_t params = f.params.value_or(0);
  int64_t largest = f.largest_layer_params.value_or(0);
  std::unique_ptr<Simulator> sim;
  const Workload* w = nullptr;
  // The shape every row's plan has (RowPlan); its lengths only with --model.
  RunShape shape;
  shape.micro_batch = f.micro_batch;
  shape.seq_len = 0;
  shape.target_len = 0;
  shape.precision = Precision::kBf16;
  if (!f.model.empty()) {
    auto spec = LoadModel(f.model, DataDir());
    if (!spec.ok()) return Fail(spec.status());
    if (Status s = ResolveLengthFlags(*spec, f.seq_len, std::nullopt, &shape); !s.ok()) {
      return Fail(s);
    }
    if (Status s = CheckRunShape(*spec, shape); !s.ok()) return Fail(s);
    const std::string hw = f.hardware.empty() ? DefaultHardwareName() : f.hardware;
    auto p = FindHardwareProfile(hw, DataDir());
    if (!p.ok()) return Fail(p.status());
    sim = std::make_unique<Simulator>(*spec, std::make_shared<const HardwareProfile>(std::move(*p)));
    auto built = sim->WorkloadFor(shape);
    if (!built.ok()) return Fail(built.status());
    w = *built;
    params = w->params;
    largest = LargestModuleParams(*w);
  }

  const HardwareProfile* profile = sim ? &sim->profile() : nullptr;
  std::vector<Row> rows;
  for (const RowSpec& rs : kRows) {
    Row r;
    r.spec = rs;
    r.paper = ZeroPaperBytesPerGpu(rs.stage, params, total_gpus, rs.offload_optimizer,
                                   rs.offload_param);
    r.ds = DeepSpeedRow(rs, params, largest, f.gpus, f.nodes);
    if (sim) {
      auto pred = sim->Simulate(RowPlan(rs, f, shape));
      if (!pred.ok()) return Fail(pred.status());
      r.simulated = true;
      r.peak_bytes = pred->gpu_total_bytes;
      r.peak_allocated = pred->gpu_peak_allocated_bytes;
      r.host_bytes_per_node = pred->host_peak_bytes_per_node;
      r.fits = pred->fits;
    }
    rows.push_back(r);
  }

  if (f.json) {
    nlohmann::json out;
    out["schema"] = "dsplan/estimate";  // docs/schema/estimate.schema.json
    out["schema_version"] = 1;
    out["dsplan_version"] = DSPLAN_VERSION;
    if (!f.model.empty()) out["model"] = f.model;
    out["params"] = params;
    out["largest_layer_params"] = largest;
    out["gpus"] = f.gpus;
    out["nodes"] = f.nodes;
    out["total_gpus"] = total_gpus;
    if (profile) {
      out["hardware"] = profile->name;
      out["hardware_sources"] = profile->SourceSummary();
      out["dsplan_config"] = {{"precision", "bf16"},   {"optimizer", "adamw"},
                              {"micro_batch", f.micro_batch}, {"grad_accum", 1},
                              {"seq_len", shape.seq_len}, {"target_len", shape.target_len}};
    }
    nlohmann::json jrows = nlohmann::json::array();
    for (const Row& r : rows) {
      nlohmann::json j = {{"stage", r.spec.stage},
                          {"offload_optimizer", OffloadDeviceName(r.spec.offload_optimizer)},
                          {"offload_param", OffloadDeviceName(r.spec.offload_param)},
                          {"paper_bytes_per_gpu", r.paper}};
      // null: DeepSpeed has no estimator for stages 0 and 1.
      j["deepspeed_estimator_gpu_bytes"] =
          r.ds ? nlohmann::json(r.ds->gpu_bytes) : nlohmann::json(nullptr);
      j["deepspeed_estimator_cpu_bytes"] =
          r.ds ? nlohmann::json(r.ds->cpu_bytes) : nlohmann::json(nullptr);
      if (r.simulated) {
        j["dsplan_peak_bytes_per_gpu"] = r.peak_bytes;
        j["dsplan_peak_allocated_bytes_per_gpu"] = r.peak_allocated;
        j["dsplan_host_bytes_per_node"] = r.host_bytes_per_node;
        j["dsplan_fits"] = r.fits;
      }
      jrows.push_back(std::move(j));
    }
    out["rows"] = std::move(jrows);
    fmt::print("{}\n", JsonText(out));
    return 0;
  }

  fmt::print("Model states for {} on {} node(s) x {} GPU(s)\n",
             f.model.empty() ? fmt::format("{} parameters", params)
                             : fmt::format("{} ({} parameters)", f.model, params),
             f.nodes, f.gpus);
  fmt::print("largest layer: {} parameters{}\n", largest,
             f.model.empty() && !f.largest_layer_params ? " (unknown: pass --largest-layer-params)"
                                                        : "");
  if (profile) {
    fmt::print("dsplan: bf16, AdamW, micro-batch {}, seq {}{}, DeepSpeed's code defaults; "
               "profile {} ({})\n",
               f.micro_batch, shape.seq_len,
               shape.target_len ? fmt::format(" + target {}", shape.target_len) : "",
               profile->name, profile->SourceSummary());
  }
  fmt::print("\n{:>5} {:>9} {:>9} | {:>11} | {:>11} {:>12} |", "stage", "off_opt", "off_param",
             "paper", "DS est GPU", "DS est CPU");
  if (profile) fmt::print(" {:>11} {:>11}  {}", "dsplan peak", "allocated", "fits");
  fmt::print("\n{:>5} {:>9} {:>9} | {:>11} | {:>11} {:>12} |", "", "", "", "GiB/GPU", "GiB/GPU",
             "GiB/node");
  if (profile) fmt::print(" {:>11} {:>11}", "GiB/GPU", "GiB/GPU");
  fmt::print("\n");
  for (const Row& r : rows) {
    fmt::print("{:>5} {:>9} {:>9} | {:>11} | {:>11} {:>12} |", r.spec.stage,
               OffloadDeviceName(r.spec.offload_optimizer),
               OffloadDeviceName(r.spec.offload_param), Gib(r.paper),
               r.ds ? Gib(r.ds->gpu_bytes) : "n/a", r.ds ? Gib(r.ds->cpu_bytes) : "n/a");
    if (r.simulated) {
      fmt::print(" {:>11} {:>11}  {}", Gib(r.peak_bytes), Gib(r.peak_allocated),
                 r.fits ? "yes" : "no");
    }
    fmt::print("\n");
  }
  fmt::print(
      "\npaper: 16-bit params + grads + K=12 B Adam state per parameter, partitioned per stage "
      "(offloaded terms removed).\nDS est: DeepSpeed's estimate_zero2/zero3_model_states_mem_needs "
      "(zero_init=1; CPU x1.5 buffer factor); none exists for stages 0 and 1.\n");
  if (profile) {
    fmt::print(
        "dsplan peak: reserved + CUDA context at the step's peak, incl. activations, buckets, "
        "gathered parameters and allocator overhead, which the estimators leave out.\n");
  }
  return 0;
}

}  // namespace
}  // namespace dsplan
