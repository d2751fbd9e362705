#include "cli/config_run.h"

#include <fmt/format.h>

#include "cli/common.h"
#include "core/model_catalog.h"
#include "core/units.h"
#include "planner/check.h"

namespace dsplan {

void AddClusterAndWorkloadFlags(CLI::App* cmd, SimulateFlags& f, bool required) {
  cmd->add_option("--model", f.model, "Catalog name (dsplan models) or path to a HF config.json")
      ->required(required);
  AddGpusAndNodesFlags(cmd, f.gpus, f.nodes);
  cmd->add_option("--seq-len", f.seq_len,
                  "Tokens per sample (T5: encoder length). Default: 512 for T5 and BERT, else "
                  "1024 (capped at a learned position table)");
  cmd->add_option("--target-len", f.target_len, "T5 decoder length (default 128)");
  cmd->add_flag("--gradient-checkpointing", f.gradient_checkpointing,
                "Activation checkpointing of every block (HF, use_reentrant=False)");
  cmd->add_option("--attention", f.attention, "eager, sdpa, or auto (transformers' default)")
      ->capture_default_str();
  cmd->add_option("--hardware", f.hardware,
                  "Hardware profile name (profiles/) or YAML path. Default: h200-measured when "
                  "present, else h200-sxm");
  cmd->add_flag("--json", f.json, "Machine-readable output");
  cmd->add_flag("--quiet", f.quiet, "One line: verdict, peak GPU memory, step time, tokens/s");
}

void AddDsConfigFlags(CLI::App* cmd, SimulateFlags& f, bool required) {
  // The config is the subject of every command that reads one (check, simulate, validate): it
  // may also come first without its flag, as users type it: 'dsplan check ds_config.json --model
  // M --gpus N'.
  cmd->add_option("--ds-config,ds_config", f.ds_config,
                  "DeepSpeed config file (also accepted as the first argument without the flag)")
      ->required(required);
  cmd->add_option("--micro-batch", f.micro_batch,
                  "per_device_train_batch_size, for \"auto\" batch keys")
      ->transform(CountFlag("--micro-batch", 1, 1 << 20));
  cmd->add_option("--grad-accum", f.grad_accum, "gradient_accumulation_steps, for \"auto\"")
      ->transform(CountFlag("--grad-accum", 1, 1 << 20));
  cmd->add_option("--global-batch", f.global_batch, "train_batch_size, for \"auto\"")
      ->transform(CountFlag("--global-batch", 1, int64_t{1} << 40));
  cmd->add_option("--precision", f.precision, "bf16, fp16 or fp32, for \"auto\" precision");
  cmd->add_option("--node", f.node,
                  "Node profile the GPUs are built into (profiles/nodes: dgx-2, dgx-a100, "
                  "dgx-h100, dgx-h200, or a file)");
  cmd->add_option("--host-cores", f.host_cores, "CPU cores per node (default: the profile's)")
      ->transform(CountFlag("--host-cores", 1, 1'000'000));
  cmd->add_option("--host-memory", f.host_memory, "Host RAM per node, e.g. 1.5TB (default: the profile's)");
  cmd->add_option("--nvme", f.nvme, "NVMe space per node, e.g. 28TB (default: the profile's)");
  cmd->add_option("--tiles", f.tiles,
                  "Memory-centric tiling: the model's block Linears are "
                  "deepspeed.zero.TiledLinear with this many out_splits (default 1: none)")
      ->transform(CountFlag("--tiles", 1, kMaxLinearTiles));
  cmd->add_option("--headroom", f.headroom,
                  "GPU memory a plan must leave free beyond its predicted peak, the peak's error "
                  "band, the CUDA context and NCCL: a size (4GiB) or a percentage of the GPU "
                  "(default 3%)");
  cmd->add_flag("--no-zero-init", f.no_zero_init, kNoZeroInitHelp);
  cmd->add_flag("--malloc-heap", f.malloc_heap, kMallocHeapHelp);
}

void AddRankFlag(CLI::App* cmd, SimulateFlags& f) {
  cmd->add_option("--rank", f.rank,
                  "Predict this data-parallel rank, 0 to N-1 (default: the rank that needs the "
                  "most memory; ranks differ only at ZeRO stages 1-2)");
}

Result<ConfigRun> SimulateConfig(const SimulateFlags& f, bool keep_graph, SoftwareStack stack) {
  DSPLAN_RETURN_IF_ERROR(CheckCluster(f.gpus, f.nodes));
  DSPLAN_RETURN_IF_ERROR(CheckLengthFlags(f.seq_len, f.target_len));
  if (f.micro_batch) DSPLAN_RETURN_IF_ERROR(CheckIntFlag("--micro-batch", *f.micro_batch, 1, 1 << 20));
  if (f.grad_accum) DSPLAN_RETURN_IF_ERROR(CheckIntFlag("--grad-accum", *f.grad_accum, 1, 1 << 20));
  if (f.global_batch) {
    DSPLAN_RETURN_IF_ERROR(CheckIntFlag("--global-batch", *f.global_batch, 1, int64_t{1} << 40));
  }
  ConfigRun run;
  DSPLAN_ASSIGN_OR_RETURN(run.spec, LoadModel(f.model, DataDir()));
  DsConfigContext ctx;
  ctx.nodes = f.nodes;
  ctx.gpus_per_node = f.gpus;
  if (f.micro_batch) ctx.PinMicroBatch(*f.micro_batch);
  ctx.grad_accum = f.grad_accum;
  ctx.global_batch = f.global_batch;
  ctx.hidden_size = run.spec.hidden_size;
  if (!f.precision.empty()) {
    DSPLAN_ASSIGN_OR_RETURN(const Precision p, ParsePrecision(f.precision));
    ctx.PinPrecision(p);
  }
  DSPLAN_RETURN_IF_ERROR(ResolveLengthFlags(run.spec, f.seq_len, f.target_len, &ctx.shape));
  if (f.gradient_checkpointing) ctx.PinGradientCheckpointing(true);
  DSPLAN_ASSIGN_OR_RETURN(ctx.shape.attention, ParseAttentionImpl(f.attention));
  DSPLAN_ASSIGN_OR_RETURN(run.parsed, ParseDsConfigFile(f.ds_config, ctx));
  if (f.tiles < 1 || f.tiles > kMaxLinearTiles) {
    return Status::InvalidArgument(fmt::format("--tiles must be an integer from 1 to {}, got {}",
                                               kMaxLinearTiles, f.tiles));
  }
  run.parsed.plan.zero_init = !f.no_zero_init;
  run.parsed.plan.malloc_heap = f.malloc_heap;
  if (f.tiles > 1) {
    run.parsed.plan.linear_tiles = f.tiles;
    DSPLAN_RETURN_IF_ERROR(ValidatePlan(run.parsed.plan));
  }
  if (stack == SoftwareStack::kDsplanRuntime &&
      (run.parsed.plan.linear_tiles > 1 || run.parsed.plan.CheckpointsOnHost())) {
    return Status::Unsupported(
        "dsplan's runtime does not run tiled Linears or activation checkpoints in host memory "
        "(ZeRO-Infinity's model-code changes); drop --tiles / dsplan.linear_tiles and "
        "activation_checkpointing.cpu_checkpointing for --stack dsplan-runtime and validate");
  }
  const Plan& plan = run.parsed.plan;
  DSPLAN_RETURN_IF_ERROR(CheckRunShape(run.spec, plan.shape()));
  DSPLAN_ASSIGN_OR_RETURN(HardwareProfile hw, LoadMachine(f.hardware, f.node, f.host_cores));
  run.simulator = std::make_unique<Simulator>(
      run.spec, std::make_shared<const HardwareProfile>(std::move(hw)), stack);
  run.profile = &run.simulator->profile();
  DSPLAN_ASSIGN_OR_RETURN(run.workload, run.simulator->WorkloadFor(plan.shape()));
  SimulateOptions so;
  so.keep_graph = keep_graph;
  if (f.host_pipeline && stack != SoftwareStack::kPyTorchDeepSpeed) {
    return Status::InvalidArgument(
        "--host-pipeline models PyTorch's Python thread running ahead of the GPU; dsplan's "
        "runtime issues its kernels from C++ (--stack dsplan-runtime): drop one of the two");
  }
  so.host_pipeline = f.host_pipeline;
  if (f.fake_process_group && stack != SoftwareStack::kPyTorchDeepSpeed) {
    return Status::InvalidArgument(
        "--fake-process-group prices collectives as PyTorch's fake backend runs them; dsplan's "
        "runtime (--stack dsplan-runtime) has no such backend: drop one of the two");
  }
  so.fake_process_group = f.fake_process_group;
  so.record_segments = f.segments;
  if (f.rank && (*f.rank < 0 || *f.rank >= plan.dp_size())) {
    return Status::InvalidArgument(fmt::format(
        "--rank {}: the plan has {} data-parallel ranks (--gpus x --nodes); valid: 0 to {}",
        *f.rank, plan.dp_size(), plan.dp_size() - 1));
  }
  so.rank = f.rank;
  if (!f.headroom.empty()) {
    DSPLAN_ASSIGN_OR_RETURN(so.headroom, ParseHeadroom(f.headroom));
  }
  if (!f.host_memory.empty()) {
    DSPLAN_ASSIGN_OR_RETURN(so.host_memory_bytes, ParseSize(f.host_memory, "--host-memory"));
    if (so.host_memory_bytes <= 0) {
      return Status::InvalidArgument("--host-memory must be more than 0 bytes");
    }
  }
  if (!f.nvme.empty()) {
    DSPLAN_ASSIGN_OR_RETURN(so.nvme_bytes, ParseSize(f.nvme, "--nvme"));
  }
  DSPLAN_ASSIGN_OR_RETURN(run.prediction, run.simulator->Simulate(plan, so));
  // What DeepSpeed itself refuses at start-up does not fit, whatever the memory says.
  if (const std::string e = NvmeParamBufferError(*run.workload, plan); !e.empty()) {
    run.prediction.fits = false;
    run.prediction.verdict = MemoryVerdict::kDoesNotFit;
    run.prediction.reason = "DeepSpeed rejects it at start-up: " + e;
  }
  run.prediction.warnings.insert(run.prediction.warnings.begin(), run.parsed.warnings.begin(),
                                 run.parsed.warnings.end());
  const std::vector<std::string> advice =
      LocalMachineAdvice(f.hardware, f.node, !f.host_memory.empty(), f.host_cores != -1,
                         *run.profile)
          .Lines();
  run.prediction.warnings.insert(run.prediction.warnings.begin(), advice.begin(), advice.end());
  return run;
}

}  // namespace dsplan
