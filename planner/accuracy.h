// Accuracy against real DeepSpeed runs: replays each run of a calibration file
// (../shared/calibration/README.md describes the format; a copy lives in
// tests/fixtures/calibration/) through the simulator and compares memory and time.
//
// `dsplan accuracy` prints the table and writes docs/accuracy.md; the calibration test asserts
// the targets on the same rows, so the document and the test cannot drift apart.
#ifndef DSPLAN_PLANNER_ACCURACY_H_
#define DSPLAN_PLANNER_ACCURACY_H_

#include <array>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/hardware_profile.h"
#include "core/status.h"

namespace dsplan {

struct CalibrationRun {
  std::string id;
  std::string file;  // the record file it came from, as named on the command line
  std::string model;
  nlohmann::json model_config;
  nlohmann::json ds_config;
  std::string attention = "sdpa";
  int64_t micro_batch = 1;
  int64_t seq_len = 0;        // decoder-only: tokens per sample; T5: encoder length
  int64_t target_len = 0;     // T5: decoder length
  bool gradient_checkpointing = false;
  std::string optimizer_wrapper;  // what DeepSpeed chose
  std::string family;             // model_config's model_type
  bool oom = false;               // the run ran out of GPU memory (status "oom")
  /// False when the run's memory is not usable (it shared a process with an earlier engine
  /// that left memory behind); its step time still is.
  bool memory_valid = true;
  /// False when the run's step time is not timing data: the harness instrumented its steps
  /// (DSBENCH_MEMHIST records every allocator event, which slows the host). Its memory still is.
  bool timing_valid = true;
  /// How the step was timed: true (the harnesses' default) with a synchronize after each phase
  /// (forward, backward, engine.step()), false with one per step as a training loop does
  /// (DSBENCH_PHASE_SYNC=0). At ZeRO-3 the per-phase synchronizations cost real time
  /// (timeline-1204: phi-2 0.667 s against 0.611 s).
  bool phase_sync = true;
  /// The harness built the model inside deepspeed.zero.Init (record key "zero_init"; absent:
  /// false, as every harness so far built it outside: Plan::zero_init).
  bool zero_init = false;
  bool malloc_heap = false;  // the run had kMallocHeapEnv in its environment (Plan::malloc_heap)
  /// The data-parallel world size the run was configured for (record key "world_size"; absent:
  /// 1). A run on one GPU under a fake process group (record key "emulated": the harness's
  /// DSBENCH emulate_world_size) allocates what one rank of that many allocates, but its
  /// collectives move nothing, so its step time is not timing data (timing_valid false).
  int world_size = 1;
  /// The run stood for one rank of |world_size| under a fake process group (record key
  /// "emulated"); |emulated_rank| is which (record key "emulated_rank"; absent: 0, the harness's
  /// default), and dsplan predicts that rank. Its step is still a step of that rank whose
  /// collectives crossed no link: the GPU computed the rank's share (and the fake backend's local
  /// all-gather copies) and the host ran DeepSpeed's code for that many ranks.
  /// |step_without_communication| (record key of that name; absent: true) says whether that step
  /// is timing data of that kind (false when the harness instrumented the steps).
  bool emulated = false;
  int emulated_rank = 0;
  bool step_without_communication = false;
  // Measured (MiB = 2^20 B; seconds).
  double after_init_alloc_mib = 0;
  double peak_alloc_mib = 0;
  double peak_reserved_mib = 0;
  double step_s = 0;
  double host_rss_mib = 0;
  double pinned_peak_mib = 0;
  /// The host's speed at the run: the mean of the harness's Linear-forward loop readings
  /// before and after it (record keys host_speed_before / host_speed_after, "linear_fwd_us":
  /// tools/probes/probe_util.py host_speed), microseconds per call; 0: not recorded.
  double host_loop_us = 0;
};

/// Reads a calibration JSONL file (one run per line; "record_type" lines are skipped).
Result<std::vector<CalibrationRun>> LoadCalibration(const std::string& path);

struct AccuracyRow {
  CalibrationRun run;
  std::string wrapper;             // the wrapper dsplan modeled
  bool fits = false;               // dsplan's verdict
  /// A run that ran was not said not to fit (fits, or at risk: the band and headroom); a run
  /// that ran out of memory was not said to fit.
  bool verdict_right = false;
  std::string verdict;             // MemoryVerdictName: fits, at_risk, does_not_fit
  bool has_memory = false;         // measured memory to compare with
  bool has_time = false;           // measured step time to compare with
  double peak_alloc_mib = 0;
  double peak_reserved_mib = 0;
  /// Model states in the predicted peak's breakdown (16-bit parameters, gradients, fp32 master,
  /// optimizer states: sizes the configuration fixes) and the memory band's absolute part (the
  /// step's largest transient block).
  double state_mib = 0;
  double band_block_mib = 0;
  double band_cached_block_mib = 0;  // MemoryBand::cached_block_bytes
  /// The band's relative part (MemoryBand::upper), and whether the measured peak reserved of a
  /// run of 2 GiB and more lies inside it: at most predicted x (1 + upper) + the block.
  double band_upper = 0;
  bool reserved_band_row = false;
  bool reserved_in_band = false;
  double step_s = 0;
  double host_peak_mib = 0;
  double pinned_mib = 0;
  std::string peak_at;
  int rank = 0;  // the rank predicted (Prediction::facts.rank; an emulated run's own)
  double alloc_error = 0;          // (predicted - measured) / measured
  double reserved_error = 0;
  double step_error = 0;
  /// The same run predicted as for a family whose blocks were never measured (leave one family
  /// out: Simulator with family_measured false); set with AccuracySummary::has_unseen.
  double step_error_unseen = 0;
  /// An emulated run (CalibrationRun::emulated) with a step of its own: predicted again as the
  /// emulation ran (SimulateOptions::fake_process_group: no link crossed, all-gathers copied on
  /// the GPU), and compared with that step. Kept out of the step-time
  /// means: it checks the computation and host work of one rank of a larger world, not its
  /// communication.
  bool has_step_without_communication = false;
  double step_without_communication_s = 0;
  double step_without_communication_error = 0;
  /// The prediction's share of host-bound time (Prediction::host_bound_share) and its band
  /// (StepTimeBand: measured expected within low-high x predicted); |in_band|: it was.
  double host_bound_share = 0;
  /// The plan offloads the optimizer to the CPU: its step is CPU Adam, host copies and page
  /// faults, which the host-bound share does not count (its own class in by_host).
  bool optimizer_offloaded = false;
  double band_low = 1, band_high = 1;
  bool in_band = false;
  /// The run's config makes DeepSpeed's FusedAdam skip its flat partition
  /// (StepFacts::FusedAdamSkipsUpdate): it ran but did not train, and its step is the broken one.
  bool did_not_train = false;
  /// What was run, as the simulator parsed it (model, shape, plan): runs with the same key are
  /// repeats of one configuration (RepeatGroups).
  std::string config_key;
};

/// Timed runs of one configuration measured more than once (in different processes, calls or
/// days). Their spread is a floor under any prediction's error: no single predicted time can be
/// closer than |floor_abs| to all of them.
struct RepeatGroup {
  std::string config;              // AccuracyRow::config_key
  std::vector<size_t> rows;        // indices into AccuracySummary::rows, timed runs only
  double min_s = 0, max_s = 0;     // measured step
  /// The least worst |error| any one prediction p can have over the group: at
  /// p = 2 min max / (min + max), |p - x| / x is (max - min) / (max + min) at both ends.
  double floor_abs = 0;
  double worst_abs = 0, worst_unseen_abs = 0;  // dsplan's, in-sample and family held out
  /// The least mean |error| any one prediction p can have over the group: min over p of
  /// mean_i |p - x_i| / x_i, reached at one of the measured times (the mean is piecewise linear
  /// in p with its corners there). The noise part of a mean error: what a prediction that knew
  /// every run afterwards, but could give only one number per configuration, would score.
  double mean_floor_abs = 0;
  double mean_abs = 0, mean_unseen_abs = 0;  // dsplan's mean |error| over the group's runs
};

struct AccuracySummary {
  std::vector<AccuracyRow> rows;
  double alloc_mean_abs = 0, alloc_max_abs = 0;
  double reserved_mean_abs = 0, reserved_max_abs = 0;
  double step_mean_abs = 0, step_max_abs = 0;
  /// Leave-one-family-out step time over the same rows (EvaluateCalibration computes it beside
  /// the in-sample figures unless it was asked for the unseen-family prediction alone).
  bool has_unseen = false;
  double unseen_step_mean_abs = 0, unseen_step_max_abs = 0;
  int verdicts_right = 0;
  int oom_runs = 0, oom_rejected = 0;  // runs that ran out of memory; of them, not said to fit
  int ran_at_risk = 0;                 // runs that ran but were judged at risk (conservative)
  int memory_rows = 0, time_rows = 0;  // rows each mean is over
  int time_in_band = 0;                // rows with a time whose measured step was in the band
  /// Emulated runs compared without communication (AccuracyRow::has_step_without_communication).
  int no_comm_rows = 0;
  double no_comm_step_mean_abs = 0, no_comm_step_max_abs = 0;
  /// Runs of 2 GiB and more with a measured peak reserved (the memory band's record), how many
  /// lie inside their band, and the largest excess beyond the band's block as a fraction of the
  /// predicted reserved (negative: the block alone covers every run) with its run.
  int reserved_band_rows = 0, reserved_in_band = 0;
  double reserved_excess_max = 0;
  std::string reserved_excess_max_id;
  /// Step time by how host-bound the prediction is (AccuracyRow::host_bound_share): the host
  /// CPU's own speed varies by up to 1.7x between days (docs/validation/deepspeed/rep-1204b),
  /// so the classes have different floors. [lo, hi) share bounds. Runs whose optimizer is
  /// offloaded to the CPU are a class apart (|offloaded|), whatever their share: their step is
  /// the host's CPU Adam and copies, a different mechanism and spread.
  struct HostClass {
    const char* name;
    double lo, hi;
    bool offloaded = false;
    int runs = 0;
    double mean_abs = 0, unseen_mean_abs = 0;
    int over_12 = 0, unseen_over_12 = 0;  // runs more than 12 % off
  };
  std::array<HostClass, 4> by_host = {{{"GPU-bound", 0.0, 0.1},
                                       {"partly host-bound", 0.1, 0.6},
                                       {"host-bound", 0.6, 1.01},
                                       {"optimizer on the CPU", 0.0, 1.01, true}}};
  /// The same classes split by the host's speed at the run (CalibrationRun::host_loop_us):
  /// a timed run whose loop read more than kSlowHostLoop times the median of the timed runs
  /// with a reading is "slow", the others "normal"; runs without a reading are left out. Not a
  /// correction (a run's loop does not predict its step: docs/stack-costs.md 4c), a report of
  /// where the errors are: the hosts of the device pool run in a fast and a slow state.
  struct HostSpeedPart {
    int runs = 0;
    double signed_mean = 0, mean_abs = 0, unseen_mean_abs = 0;
  };
  static constexpr double kSlowHostLoop = 1.3;
  int host_loop_runs = 0;                                       // timed runs with a reading
  double host_loop_median_us = 0;                               // their median reading
  std::array<std::array<HostSpeedPart, 2>, 4> by_host_speed{};  // [by_host class][normal, slow]
};

/// One record file's part of a summary (rows in file order of first appearance).
struct FileAccuracy {
  std::string file;
  int runs = 0, memory_rows = 0, time_rows = 0, time_in_band = 0, verdicts_right = 0;
  double alloc_mean_abs = 0, alloc_max_abs = 0;
  double step_mean_abs = 0, step_max_abs = 0, unseen_step_mean_abs = 0;
};
std::vector<FileAccuracy> AccuracyByFile(const AccuracySummary& s);
/// Groups of at least two timed runs, widest spread first.
std::vector<RepeatGroup> RepeatGroups(const AccuracySummary& s);

/// Simulates every run with |profile|.
/// |unseen_families|: predict every run as for a model family whose blocks the software-stack
/// measurement never saw (leave-one-family-out; simulator/stack_costs.h).
/// |host_pipeline|: the experimental host pipeline (SimulateOptions::host_pipeline), each run
/// synchronized after every phase when its record says it was timed so (phase_sync).
Result<AccuracySummary> EvaluateCalibration(const std::vector<CalibrationRun>& runs,
                                            const HardwareProfile& profile,
                                            bool unseen_families = false,
                                            bool host_pipeline = false);

/// The report as Markdown (docs/accuracy.md), naming the profile, its sources and the command
/// (with |hardware_arg| as --hardware's value when not empty: a profile file's path, so that the
/// command line it prints runs again).
std::string AccuracyMarkdown(const AccuracySummary& s, const HardwareProfile& profile,
                             const std::string& calibration_path,
                             const std::string& hardware_arg = "");

}  // namespace dsplan

#endif  // DSPLAN_PLANNER_ACCURACY_H_
