// A ds_config.json simulated for a model and cluster: the flags and the run that simulate,
// check and validate share.
#ifndef DSPLAN_CLI_CONFIG_RUN_H_
#define DSPLAN_CLI_CONFIG_RUN_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include <CLI/CLI.hpp>

#include "core/hardware_profile.h"
#include "core/model_spec.h"
#include "core/status.h"
#include "planner/ds_config.h"
#include "simulator/cost_model.h"
#include "simulator/simulate.h"
#include "simulator/workload.h"

namespace dsplan {

/// The help of --no-zero-init (simulate, check, plan).
inline constexpr const char* kNoZeroInitHelp =
    "ZeRO-3: the training script builds the model outside deepspeed.zero.Init and passes it to "
    "deepspeed.initialize (HF Trainer and accelerate build it inside). DeepSpeed 0.14.5 then "
    "keeps every nn.Linear weight gathered in the forward until its backward";

/// The help of --malloc-heap (simulate, check).
inline constexpr const char* kMallocHeapHelp =
    "The training processes run with MALLOC_ARENA_MAX=1 MALLOC_MMAP_MAX_=0 "
    "MALLOC_TRIM_THRESHOLD_=68719476736 in their environment (glibc's malloc held to its heap): "
    "ZeRO-3's offloaded gradient copies then reuse their host temporaries' pages instead of "
    "faulting them in every step (docs/deepspeed-facts.md, \"glibc's malloc\")";

struct SimulateFlags {
  std::string model;
  int gpus = 1;
  int nodes = 1;
  std::string ds_config;
  std::optional<int64_t> seq_len;
  std::optional<int64_t> target_len;
  bool gradient_checkpointing = false;
  std::string attention = "auto";
  std::string hardware;
  bool json = false;
  bool quiet = false;
  std::string trace;
  bool force = false;  // --force: replace an existing --trace / --json-out file
  std::optional<int64_t> micro_batch;
  std::optional<int64_t> grad_accum;
  std::optional<int64_t> global_batch;
  std::string precision;
  /// --headroom: GPU memory kept free beyond the band, context and NCCL ("" = the default).
  std::string headroom;
  /// --node: the node profile the GPU is built into; --host-cores: cores per node (-1 = the
  /// profile's); --host-memory / --nvme: host RAM and NVMe space per node ("" = the profile's);
  /// --tiles: memory-centric tiling of the blocks' Linears (1 = none).
  std::string node;
  int host_cores = -1;  // -1: not given
  std::string host_memory;
  std::string nvme;
  int64_t tiles = 1;
  /// --no-zero-init: the script builds the model outside deepspeed.zero.Init (Plan::zero_init).
  bool no_zero_init = false;
  bool malloc_heap = false;
  /// --rank: the data-parallel rank to predict (none: the rank that decides the fit).
  std::optional<int> rank;
  bool host_pipeline = false;  // simulate --host-pipeline (experimental)
  /// simulate --fake-process-group: the rank as emulated on one GPU under torch.distributed's
  /// fake backend (SimulateOptions::fake_process_group).
  bool fake_process_group = false;
  bool segments = false;       // simulate --segments: the allocator replay's new segments
};

/// --model, --gpus, --nodes, lengths, checkpointing, attention, --hardware, --json, --quiet.
/// |required|: --model must be given (validate checks it itself, since --copy-task needs none).
void AddClusterAndWorkloadFlags(CLI::App* cmd, SimulateFlags& f, bool required = true);
/// --rank (simulate, check): SimulateFlags::rank.
void AddRankFlag(CLI::App* cmd, SimulateFlags& f);
/// --ds-config (required) and the values that resolve its "auto" keys.
void AddDsConfigFlags(CLI::App* cmd, SimulateFlags& f, bool required = true);

struct ConfigRun {
  ModelSpec spec;
  ParsedDsConfig parsed;
  /// Owns the profile; holds the plan's workload and context.
  std::unique_ptr<Simulator> simulator;
  const Workload* workload = nullptr;       // the plan's, owned by |simulator|
  const HardwareProfile* profile = nullptr;  // owned by |simulator|
  Prediction prediction;
};

/// Loads the model, parses the config, builds the workload and simulates it with |stack|.
Result<ConfigRun> SimulateConfig(const SimulateFlags& f, bool keep_graph,
                                 SoftwareStack stack = SoftwareStack::kPyTorchDeepSpeed);

}  // namespace dsplan

#endif  // DSPLAN_CLI_CONFIG_RUN_H_
