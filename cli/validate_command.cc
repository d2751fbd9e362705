#include "cli/validate_command.h"

#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <thread>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cli/common.h"
#include "cli/config_run.h"
#include "core/output_file.h"
#include "core/text.h"
#include "core/units.h"
#include "planner/search.h"
#include "runtime/comm.h"
#include "runtime/reference_trainers/copy_task.h"
#include "runtime/executor.h"
#include "runtime/reference_trainers/host_validation.h"
#include "runtime/launch.h"
#include "runtime/mpi/mpi_session.h"
#include "runtime/validation.h"


namespace dsplan {
namespace {

// Exit code of a run whose measurement misses the thresholds (or that ran out of memory when
// the prediction said it fits).
constexpr int kExitValidationFailed = 4;
// Bounds of --executor host (CPU training): ranks, total FLOPs (about 10 minutes of naive fp32
// on a few cores) and bytes of model state across ranks and the reference.
constexpr int kMaxHostRanks = 64;
constexpr double kMaxHostFlops = 5e12;
constexpr double kMaxHostBytes = 8.0 * (int64_t{1} << 30);

struct ValidateFlags {
  SimulateFlags sim;
  int steps = 5;
  int warmup = 2;
  int cpu_threads = 0;
  std::string nvme_path;
  std::string calibrate;
  std::string json_out;
  double time_threshold = 0.10;
  double memory_threshold = 0.05;
  bool no_op_profile = false;
  std::string executor = "gpu";
  bool copy_task = false;
  bool dry_run = false;      // replay the prediction instead of running (MakeDryRunExecutor)
  bool steps_given = false;  // --steps was on the line (--copy-task has its own default)
};

// A private folder for the NVMe swap files of one validation, under the folder the user or the
// plan named, removed with everything in it when the run ends (the executors create files and
// DeepSpeed-style subfolders there). Inactive when the plan has no NVMe offload or the folder
// cannot be made (the executor then reports the folder itself).
class SwapScratch {
 public:
  SwapScratch(const Plan& plan, const std::string& flag_path) {
    const bool nvme = plan.zero.offload_optimizer.device == OffloadDevice::kNvme ||
                      plan.zero.offload_param.device == OffloadDevice::kNvme;
    if (!nvme) return;
    const std::string base = !flag_path.empty() ? flag_path
                             : !plan.zero.offload_optimizer.nvme_path.empty()
                                 ? plan.zero.offload_optimizer.nvme_path
                                 : plan.zero.offload_param.nvme_path;
    if (base.empty()) return;
    std::string tmpl = base + "/dsplan-validate-XXXXXX";
    if (::mkdtemp(tmpl.data()) != nullptr) path_ = tmpl;
  }
  ~SwapScratch() {
    if (path_.empty()) return;
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  SwapScratch(const SwapScratch&) = delete;
  SwapScratch& operator=(const SwapScratch&) = delete;
  /// The folder to pass to the executor: the scratch folder, else |fallback|.
  std::string Or(const std::string& fallback) const { return path_.empty() ? fallback : path_; }

 private:
  std::string path_;
};

Status CheckFlags(const ValidateFlags& f) {
  if (f.steps < 1 || f.steps > 1000) {
    return Status::InvalidArgument(
        fmt::format("--steps must be between 1 and 1000 (got {})", f.steps));
  }
  if (f.warmup < 0 || f.warmup > 100) {
    return Status::InvalidArgument(
        fmt::format("--warmup must be between 0 and 100 (got {})", f.warmup));
  }
  if (!(f.time_threshold > 0 && f.time_threshold < 10) ||
      !(f.memory_threshold > 0 && f.memory_threshold < 10)) {
    return Status::InvalidArgument(fmt::format(
        "--time-threshold and --memory-threshold are fractions such as 0.10 (got {} and {})",
        f.time_threshold, f.memory_threshold));
  }
  if (f.executor == "host" && !f.nvme_path.empty() &&
      (!IsValidUtf8(f.nvme_path) || Escape(f.nvme_path, 4096) != f.nvme_path)) {
    return Status::InvalidArgument(fmt::format(
        "--nvme-path {} must be a path without control bytes, in UTF-8", Quote(f.nvme_path)));
  }
  if (f.cpu_threads < 0) {
    return Status::InvalidArgument(
        fmt::format("--cpu-threads must be 0 (automatic) or positive (got {})", f.cpu_threads));
  }
  if (f.dry_run && (f.copy_task || f.executor != "gpu")) {
    return Status::InvalidArgument(
        "--dry-run replays the prediction in place of the GPU run; it does not combine with "
        "--copy-task or --executor host");
  }
  if (f.dry_run && !f.calibrate.empty()) {
    return Status::InvalidArgument(
        "--calibrate needs measured task times; --dry-run measures nothing (its \"measured\" "
        "column is the prediction): drop one of them");
  }
  if (!f.calibrate.empty() && !f.sim.hardware.empty() && SamePath(f.calibrate, f.sim.hardware)) {
    return Status::InvalidArgument(fmt::format(
        "--calibrate {} is the --hardware profile this run reads; dsplan never overwrites its "
        "inputs: write the calibrated profile to another file",
        f.calibrate));
  }
  if (!f.calibrate.empty()) {
    // An existing file only with --force (core/output_file.h).
    if (Status s = CheckOutputPath(f.calibrate, OutputPolicy{{f.sim.hardware}, f.sim.force,
                                                              "--calibrate"});
        !s.ok()) {
      return s;
    }
    // Fail before the run, not after it, and create nothing: the folder must exist and be
    // writable (and the file, when it exists).
    const std::filesystem::path path(f.calibrate);
    const std::filesystem::path dir = path.has_parent_path() ? path.parent_path() : ".";
    const bool file_ok = !std::filesystem::exists(path) || access(path.c_str(), W_OK) == 0;
    if (!std::filesystem::is_directory(dir) || access(dir.c_str(), W_OK) != 0 || !file_ok) {
      return Status::IoError(fmt::format(
          "--calibrate {}: cannot write there (the folder must exist and be writable)",
          f.calibrate));
    }
  }
  return Status();
}

std::string Header(const ConfigRun& run, const Prediction& ds_pred, const Execution& e,
                   int threads, bool dry_run) {
  const Plan& plan = run.parsed.plan;
  const Workload& w = *run.workload;
  std::string out;
  out += "# dsplan validate\n";
  out += fmt::format("# model     {} ({} parameters), micro-batch {} x accumulation {}, {} tokens "
                     "per micro-batch\n",
                     run.spec.name, FormatCount(static_cast<double>(w.params)), plan.micro_batch,
                     plan.grad_accum, w.tokens);
  out += fmt::format("# plan      {} on {} GPU(s)\n", PlanSummary(plan), plan.world_size());
  out += fmt::format("# device    {}, {}; {}\n", e.device_name,
                     FormatBytes(static_cast<double>(e.device_total_bytes)), e.driver);
  if (dry_run) {
    out += "# dry run   nothing ran: the \"measured\" column replays the simulator's schedule "
           "(each task at its predicted start and duration, the predicted memory peaks)\n";
  }
  out += fmt::format("# libraries {}\n", e.libraries);
  out += fmt::format("# attention {}\n", e.attention_path);
  out += fmt::format("# build     dsplan {} ({}), CPU optimizer threads {}\n", DSPLAN_VERSION,
                     DSPLAN_GIT_HASH, threads);
  out += fmt::format("# predicted with profile {} [{}], software stack {}\n",
                     run.prediction.profile_name, run.prediction.profile_sources,
                     SoftwareStackName(SoftwareStack::kDsplanRuntime));
  out += fmt::format("# the same plan under PyTorch + DeepSpeed is predicted at {:.4f} s per step\n",
                     ds_pred.step_time_s);
  // What simulate and check would warn about (the config's keys, the default profile against
  // this machine's GPU): the comparison below is only as good as the prediction it checks.
  for (const std::string& warning : run.prediction.warnings) {
    out += fmt::format("# warning   {}\n", warning);
  }
  if (!e.step_s.empty()) {
    const auto [mn, mx] = std::minmax_element(e.step_s.begin(), e.step_s.end());
    out += fmt::format("# steps     {} measured (min {:.4f} s, max {:.4f} s)\n", e.step_s.size(),
                       *mn, *mx);
  }
  return out;
}

// The ranks of this `dsplan validate`: one process (comm == nullptr), or the processes of an MPI
// job (mpirun, srun). Under MPI an error is agreed on by every rank before it is reported, only
// rank 0 prints, and every rank exits with rank 0's code (the launcher's exit status is then
// dsplan's).
struct Ranks {
  Comm* comm = nullptr;
  int local_rank = 0;
  bool root() const { return comm == nullptr || comm->rank() == 0; }
  Status Agree(const Status& s) const { return comm != nullptr ? AgreeOnStatus(*comm, s) : s; }
  /// REQUIRES: every rank has |s| (after Agree, or from a call that agrees itself).
  int Fail(const Status& s) const { return root() ? dsplan::Fail(s) : FailExitCode(s); }
  /// Every rank returns rank 0's |code|.
  int Exit(int code) const {
    if (comm == nullptr) return code;
    std::string c = std::to_string(code);
    comm->Broadcast(&c, 0);
    return std::stoi(c);
  }
  const char* kind() const { return comm != nullptr ? comm->kind() : "threads"; }
};

// --copy-task: the CUDA GPT-2 trainer learns a copy task (runtime/reference_trainers/copy_task.h).
int RunCopyTaskValidation(const ValidateFlags& f) {
  CopyTaskOptions o;
  if (f.steps_given) o.steps = f.steps;
  auto r = RunCopyTask(o);
  if (!r.ok()) return Fail(r.status());
  if (f.sim.json) {
    nlohmann::json j = {{"device", r->device},          {"params", r->params},
                        {"steps", r->loss.size()},      {"initial_loss", r->initial_loss},
                        {"final_loss", r->final_loss},  {"chance_loss", r->chance_loss},
                        {"first_step_below", r->first_step_below},
                        {"learned", r->learned},        {"seconds", r->seconds},
                        {"tokens_per_s", r->tokens_per_s}, {"loss", r->loss}};
    fmt::print("{}\n", JsonText(j));
    return r->learned ? 0 : kExitValidationFailed;
  }
  fmt::print("# dsplan validate --copy-task: a GPT-2 written in CUDA (forward, backward, AdamW) "
             "learns to copy {} tokens\n", o.copy_len);
  fmt::print("# model     {} layers, hidden {}, {} heads, vocab {}, {} parameters; micro-batch {}, "
             "{}\n", o.spec.num_layers, o.spec.hidden_size, o.spec.num_heads, o.spec.vocab_size,
             FormatCount(static_cast<double>(r->params)), o.micro_batch,
             o.bf16 ? "bf16 with fp32 master weights" : "fp32");
  fmt::print("# device    {}\n", r->device);
  fmt::print("#  {:>6} {:>10}\n", "step", "loss");
  const size_t n = r->loss.size();
  for (size_t i = 0; i < n; i += std::max<size_t>(1, n / 10)) {
    fmt::print("   {:>6} {:>10.4f}\n", i + 1, r->loss[i]);
  }
  fmt::print("   {:>6} {:>10.4f}\n", n, r->loss.back());
  const std::string what = fmt::format(
      "loss {:.3f} at step 1 (chance {:.3f}) -> {:.4f} (mean of the last 10) after {} steps; "
      "below {:.2f} from step {}; {:.2f} s, {:.0f} tokens/s",
      r->initial_loss, r->chance_loss, r->final_loss, n, o.learned_loss, r->first_step_below + 1,
      r->seconds, r->tokens_per_s);
  fmt::print("{}: {}\n", r->learned ? "PASS" : "FAIL", what);
  return r->learned ? 0 : kExitValidationFailed;
}

// --executor host: the plan trained on CPU threads against unpartitioned training and the graph.
int RunHostValidation(const ValidateFlags& f, const Ranks& ranks) {
  auto run = SimulateConfig(f.sim, true, SoftwareStack::kDsplanRuntime);
  if (Status s = ranks.Agree(run.status()); !s.ok()) return ranks.Fail(s);
  const Plan& plan = run->parsed.plan;
  // The host executor trains in fp32 on CPU threads, plus the unpartitioned reference: refuse
  // what would take hours or exhaust memory rather than start it.
  {
    const double params = static_cast<double>(run->workload->params);
    const double tokens = static_cast<double>(run->workload->tokens) * plan.grad_accum *
                          plan.world_size();
    const double flops = 2 * 6 * params * tokens * f.steps;  // the run and the reference
    const double bytes = params * 20.0 * (plan.world_size() + 1);
    Status s;
    if (plan.world_size() > kMaxHostRanks) {
      s = Status::InvalidArgument(fmt::format(
          "--executor host runs one CPU thread or process per rank; {} ranks is more than {}",
          plan.world_size(), kMaxHostRanks));
    } else if (flops > kMaxHostFlops || bytes > kMaxHostBytes) {
      s = Status::InvalidArgument(fmt::format(
          "--executor host trains on the CPU: {} ({} parameters, {} tokens per step, {} steps) "
          "needs about {:.1e} FLOPs and {} (limits {:.0e} FLOPs, {}); use a smaller model, "
          "--seq-len or --steps (examples/host/gpt2-tiny.json)",
          run->spec.name, FormatCount(params), static_cast<int64_t>(tokens), f.steps, flops,
          FormatBytes(bytes), kMaxHostFlops, FormatBytes(kMaxHostBytes)));
    }
    if (Status agreed = ranks.Agree(s); !agreed.ok()) return ranks.Fail(agreed);
  }
  HostRunOptions o;
  o.steps = f.steps;
  const SwapScratch scratch(plan, f.nvme_path);
  o.nvme_dir = scratch.Or(f.nvme_path);
  o.comm = ranks.comm;
  auto v = ValidateOnHost(*run->workload, plan, run->prediction.graph, o);
  if (!v.ok()) return ranks.Fail(v.status());  // agreed by ValidateOnHost
  const int code = v->pass ? 0 : kExitValidationFailed;
  if (!ranks.root()) return code;  // the same verdict on every rank
  if (f.sim.json) {
    nlohmann::json mem = nlohmann::json::array();
    for (const HostMemoryRow& r : v->memory) {
      mem.push_back({{"space", MemSpaceName(r.space)}, {"category", MemCategoryKey(r.category)},
                     {"executor_bytes", r.executor}, {"graph_bytes", r.graph}});
    }
    nlohmann::json j = {{"model", run->spec.name},   {"plan", PlanSummary(plan)},
                        {"ranks", plan.world_size()}, {"ranks_are", ranks.kind()},
                        {"steps", f.steps},
                        {"losses", v->run.losses},    {"reference_losses", v->reference.losses},
                        {"max_abs_diff", v->max_abs_diff},
                        {"fraction_beyond_bf16_ulp", v->fraction_beyond_ulp},
                        {"fraction_beyond_tolerance", v->fraction_beyond_ulp},
                        {"params_step", v->run.params_step},
                        {"max_loss_rel_diff", v->max_loss_rel_diff},
                        {"non_finite", v->non_finite},
                        {"tolerance", v->tolerance}, {"params_match", v->params_match},
                        {"memory", mem},             {"memory_match", v->memory_match},
                        {"pass", v->pass}};
    fmt::print("{}\n", JsonText(j));
  } else {
    fmt::print("# dsplan validate --executor host: the plan trained for real on the CPU\n");
    fmt::print("# model     {} ({} parameters), micro-batch {} x accumulation {}, seq {}\n",
               run->spec.name, FormatCount(static_cast<double>(run->workload->params)),
               plan.micro_batch, plan.grad_accum, plan.seq_len);
    fmt::print("# plan      {} on {} rank(s) ({}), {} steps\n", PlanSummary(plan),
               plan.world_size(), ranks.kind(), f.steps);
    fmt::print("{}", HostValidationText(*v));
  }
  return code;
}

// Rank 0's report of a GPU validation; returns the exit code.
int ReportGpuValidation(const ValidateFlags& f, const ConfigRun& run, const ConfigRun& ds_run,
                        const Execution& exec, int cpu_threads) {
  const Plan& plan = run.parsed.plan;
  const Prediction& pred = run.prediction;
  const Workload& w = *run.workload;

  ValidationThresholds th;
  th.time = f.time_threshold;
  th.memory = f.memory_threshold;
  const std::vector<LayerCost> layer_costs =
      CostModel(*run.profile, plan.precision, SoftwareStack::kDsplanRuntime).Layers(w);
  const ValidationReport report = CompareExecution(pred, w, layer_costs, exec, th);

  const std::vector<std::string> inputs = {f.sim.ds_config, f.sim.model,
                                           f.sim.model + "/config.json", f.sim.hardware};
  if (!f.sim.trace.empty() && !exec.out_of_memory) {
    const OutputPolicy policy{inputs, f.sim.force, "--trace"};
    if (Status s = WriteOutputFile(f.sim.trace, JsonText(ValidationTrace(pred, w, exec), -1),
                                   policy);
        !s.ok()) {
      return Fail(s);
    }
  }
  if (!f.calibrate.empty()) {
    const std::string method = fmt::format(
        "dsplan validate: {} {} micro-batch {}, {} steps on {}, {}", run.spec.name,
        PlanSummary(plan), plan.micro_batch, f.steps, exec.device_name, DSPLAN_VERSION);
    auto cal = CalibratedProfile(*run.profile, report, method);
    if (!cal.ok()) return Fail(cal.status());
    if (Status s = WriteHardwareProfile(*cal, f.calibrate); !s.ok()) return Fail(s);
  }

  // Throughput and MFU of the measured step; MFU counts the model's forward and backward FLOPs,
  // not the recomputation, against the dtype's dense peak.
  const double step = report.measured_step_s;
  const double tokens_per_s = step > 0 ? static_cast<double>(plan.grad_accum) * w.tokens / step : 0;
  const double tflops = step > 0 ? (w.fwd_flops + w.bwd_flops) * plan.grad_accum / step / 1e12 : 0;
  const double peak = CostModel(*run.profile, plan.precision).PeakFlops(plan.precision);
  const double mfu = peak > 0 ? tflops * 1e12 / peak : 0;

  nlohmann::json j = ValidationToJson(report, exec);
  {
    j["seq_len"] = plan.seq_len;
    j["target_len"] = plan.target_len;
    j["gradient_checkpointing"] = plan.gradient_checkpointing;
    j["measured_tokens_per_s_per_gpu"] = tokens_per_s;
    j["measured_tflops_per_gpu"] = tflops;
    j["mfu"] = mfu;
    j["model"] = run.spec.name;
    j["plan"] = PlanSummary(plan);
    j["micro_batch"] = plan.micro_batch;
    j["grad_accum"] = plan.grad_accum;
    j["profile"] = pred.profile_name;
    j["software_stack"] = SoftwareStackName(SoftwareStack::kDsplanRuntime);
    j["predicted_fits"] = pred.fits;
    j["warnings"] = pred.warnings;
    j["deepspeed_predicted_step_s"] = ds_run.prediction.step_time_s;
    if (f.dry_run) j["dry_run"] = true;
  }
  if (!f.json_out.empty()) {
    const OutputPolicy policy{inputs, f.sim.force, "--json-out"};
    if (Status s = WriteOutputFile(f.json_out, JsonText(j) + "\n", policy); !s.ok()) {
      return Fail(s);
    }
  }
  if (f.sim.json) {
    fmt::print("{}\n", JsonText(j));
  } else if (f.sim.quiet) {
    fmt::print("{}\n", report.verdict);
  } else {
    fmt::print("{}", Header(run, ds_run.prediction, exec, cpu_threads, f.dry_run));
    if (!exec.out_of_memory && report.measured_step_s > 0) {
      fmt::print("# measured  {:.0f} tokens/s per GPU, {:.0f} TFLOP/s per GPU, MFU {:.1f}% of {:.0f} "
                 "TFLOP/s ({})\n",
                 tokens_per_s, tflops, 100 * mfu, peak / 1e12,
                 SourceKindName(run.profile->gpu.peak_flops_bf16.source.kind));
    }
    fmt::print("{}", ValidationTable(report));
    if (!f.sim.trace.empty() && !exec.out_of_memory) {
      fmt::print("trace      {} (open in https://ui.perfetto.dev)\n", f.sim.trace);
    }
    if (!f.calibrate.empty()) fmt::print("calibrated profile written to {}\n", f.calibrate);
  }
  return report.pass ? 0 : kExitValidationFailed;
}

// The plan on this machine's GPU(s), against the prediction. Under MPI every rank runs its GPU
// and rank 0 reports what the executor gathered.
int RunGpuValidation(const ValidateFlags& f, const Ranks& ranks) {
  auto run = SimulateConfig(f.sim, true, SoftwareStack::kDsplanRuntime);
  if (Status s = ranks.Agree(run.status()); !s.ok()) return ranks.Fail(s);
  auto ds_run = SimulateConfig(f.sim, false, SoftwareStack::kPyTorchDeepSpeed);
  if (Status s = ranks.Agree(ds_run.status()); !s.ok()) return ranks.Fail(s);
  const Plan& plan = run->parsed.plan;
  const Prediction& pred = run->prediction;
  const Workload& w = *run->workload;
  // --dry-run: the prediction replayed (runtime/executor.h), on any machine.
  const std::unique_ptr<Executor> executor =
      f.dry_run ? MakeDryRunExecutor(
                      pred, CostModel(*run->profile, plan.precision, SoftwareStack::kDsplanRuntime)
                                .Layers(w))
                : MakeGpuExecutor();
  if (!executor->available()) {
    return ranks.Fail(Status::Unsupported(
        "this dsplan was built without CUDA, so it cannot run the plan: install the CUDA toolkit "
        "(nvcc) and rebuild with scripts/setup.sh. `dsplan simulate` gives the prediction "
        "without a GPU."));
  }
  ExecuteOptions eo;
  eo.steps = f.steps;
  eo.warmup_steps = f.warmup;
  const SwapScratch scratch(plan, f.nvme_path);
  eo.nvme_path = scratch.Or(f.nvme_path);
  eo.profile_ops = !f.no_op_profile;
  eo.comm = ranks.comm;
  eo.local_rank = ranks.local_rank;
  // The CPU optimizer gets the threads the prediction assumed, unless told otherwise.
  const int hw_threads = std::max(1, run->profile->host.cores / std::max(1, plan.gpus_per_node));
  eo.cpu_threads = f.cpu_threads > 0 ? f.cpu_threads : hw_threads;
  auto exec = executor->Run(pred.graph, w, plan, eo);
  if (!exec.ok()) return ranks.Fail(exec.status());  // agreed by the executor's ranks
  if (!ranks.root()) return ranks.Exit(0);
  return ranks.Exit(ReportGpuValidation(f, *run, *ds_run, *exec, eo.cpu_threads));
}

int RunValidate(const ValidateFlags& f);

}  // namespace

DeclaredCommand AddValidateCommand(CLI::App& app) {
  auto flags = std::make_shared<ValidateFlags>();
  ValidateFlags& f = *flags;
  CLI::App* cmd = app.add_subcommand(
      "validate",
      "Run the plan's training step on this machine's GPU(s) and compare with the prediction, "
      "task class by task class (exit 0 pass, 4 fail). Started by mpirun or srun, each process "
      "is one rank and rank 0 reports");
  AddClusterAndWorkloadFlags(cmd, f.sim, false);
  AddDsConfigFlags(cmd, f.sim, false);
  CLI::Option* steps_option =
      cmd->add_option("--steps", f.steps,
                      "Measured steps after the warm-up (--executor host: steps trained; "
                      "--copy-task: steps trained, default 400)")
          ->capture_default_str();
  cmd->add_option("--executor", f.executor,
                  "gpu: run on this machine's GPU(s) and time it; host: train the plan for real "
                  "on the CPU, ranks as threads (or as processes under mpirun/srun), GPT-2 family, "
                  "small shapes, and check parameters and model-state bytes against unpartitioned "
                  "training and the graph")
      ->check(CLI::IsMember({"gpu", "host"}))
      ->capture_default_str();
  cmd->add_flag("--copy-task", f.copy_task,
                "Real math on the GPU: train a tiny GPT-2 written in CUDA on a copy task and check "
                "that the loss falls (needs no --model or --ds-config)");
  cmd->add_flag("--dry-run", f.dry_run,
                "Run nothing: replay the prediction as the measurement (the simulator's schedule, "
                "task by task, and its memory peaks) and print the same report, predicted and "
                "\"measured\" equal; needs no GPU. For trying validate's output and for tests");
  cmd->add_option("--warmup", f.warmup, "Warm-up steps, not measured")->capture_default_str();
  cmd->add_option("--trace", f.sim.trace,
                  "Write measured and predicted timelines as a Chrome trace (Perfetto)");
  cmd->add_option("--calibrate", f.calibrate,
                  "Write a hardware profile corrected from the measured task times to this YAML");
  cmd->add_option("--time-threshold", f.time_threshold,
                  "Largest step-time error that passes, as a fraction")
      ->capture_default_str();
  cmd->add_option("--memory-threshold", f.memory_threshold,
                  "Largest peak-memory error that passes, as a fraction")
      ->capture_default_str();
  cmd->add_option("--cpu-threads", f.cpu_threads,
                  "CPU optimizer threads per rank (default: the profile's cores per GPU, as "
                  "predicted)");
  cmd->add_option("--nvme-path", f.nvme_path,
                  "Folder for NVMe swap files (default: the ds_config's nvme_path)");
  cmd->add_flag("--force", f.sim.force, "Replace existing --trace / --json-out files");
  cmd->add_option("--json-out", f.json_out,
                  "Also write the JSON report to this file (the text report still prints)");
  cmd->add_flag("--no-op-profile", f.no_op_profile,
                "Skip the extra step that times each op (no GEMM/attention/memory split)");
  return {cmd, [flags, steps_option] {
            flags->steps_given = steps_option->count() > 0;
            return RunValidate(*flags);
          }};
}

namespace {

int RunValidate(const ValidateFlags& f) {
  // A launcher (mpirun, srun) starts one dsplan per rank. Until MPI is up, errors that every
  // rank meets alike are printed by the launcher's rank 0 only.
  auto launch = DetectLaunch();
  if (!launch.ok()) return Fail(launch.status());
  auto fail_early = [&](const Status& s) { return launch->rank == 0 ? Fail(s) : FailExitCode(s); };
  if (Status s = CheckFlags(f); !s.ok()) return fail_early(s);
  if (f.copy_task) {
    if (launch->distributed()) {
      return fail_early(Status::InvalidArgument(fmt::format(
          "--copy-task trains on one GPU in one process; run it without {} ({})",
          launch->launcher, launch->evidence)));
    }
    return RunCopyTaskValidation(f);
  }
  if (f.sim.model.empty() || f.sim.ds_config.empty()) {
    return fail_early(Status::InvalidArgument(
        "validate needs --model and --ds-config (or --copy-task, which needs neither)"));
  }
  if (f.dry_run && launch->distributed()) {
    return fail_early(Status::InvalidArgument(fmt::format(
        "--dry-run runs nothing and needs one process; run it without {} ({})", launch->launcher,
        launch->evidence)));
  }
  // Ranks as MPI processes. The session lives until this function returns (MPI_Finalize).
  std::unique_ptr<MpiSession> mpi;
  Ranks ranks;
  if (launch->distributed()) {
    auto started = MpiSession::Start(*launch);
    if (!started.ok()) return fail_early(started.status());
    mpi = std::move(*started);
    if (mpi->size() > 1) {
      ranks.comm = &mpi->comm();
      ranks.local_rank = mpi->local_rank();
    }
  }
  if (f.executor == "host") return RunHostValidation(f, ranks);
  return RunGpuValidation(f, ranks);
}

}  // namespace
}  // namespace dsplan
