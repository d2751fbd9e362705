#include "cli/plan_command.h"

#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <optional>
#include <string>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cli/common.h"
#include "core/hardware_profile.h"
#include "core/model_catalog.h"
#include "core/text.h"
#include "core/units.h"
#include "planner/ds_config.h"
#include "planner/launcher.h"
#include "planner/search.h"
#include "simulator/prediction_report.h"
#include "simulator/workload.h"


namespace dsplan {
namespace {

struct PlanFlags {
  std::string model;
  int gpus = 0;
  int nodes = 1;
  std::string hardware;
  std::optional<int64_t> seq_len, target_len;
  std::string attention = "auto";
  std::optional<int> stage;
  std::optional<int64_t> micro_batch, grad_accum, global_batch;
  bool no_offload = false;
  std::string offload_optimizer, offload_param;
  bool gradient_checkpointing = false, no_gradient_checkpointing = false;
  std::string precision;
  std::optional<int64_t> reduce_bucket_size;
  std::string host_memory, nvme;
  std::string nvme_path = "/local_nvme";
  double max_gpu_memory_fraction = 1.0;
  std::string objective = "throughput";
  double price_per_gpu_hour = 0;
  int top = 5;
  bool explain = false;
  std::string emit = "ds_config.json";
  bool no_emit = false;
  bool hf_auto = false;
  std::vector<std::string> hosts;
  bool json = false;
  bool quiet = false;
} g;
CLI::Option* g_nodes_option = nullptr;  // whether --nodes was given

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

void PrintRow(int rank, const ScoredPlan& s) {
  const Plan& p = s.plan;
  const Prediction& d = s.prediction;
  fmt::print("{:>2}  {:>5}  {:<16} {:>4} x {:<4} {:<5} {:>7}  {:>9} ({})  {:>9}  {:>7.3f}  {:>9.0f}  {:>6.1f}  {:>5.1f}%  {}\n",
             rank, p.zero.stage, OffloadCell(p), p.micro_batch, p.grad_accum,
             p.gradient_checkpointing ? "on" : "off",
             p.zero.stage > 0 ? fmt::format("{:.0e}", static_cast<double>(p.zero.reduce_bucket_size))
                              : "-",
             FormatBytes(static_cast<double>(d.gpu_total_bytes)), LargestParts(d),
             FormatBytes(static_cast<double>(d.host_peak_bytes_per_node)), d.step_time_s,
             d.tokens_per_s, d.tflops_per_gpu, 100 * d.mfu, d.bottleneck);
}

void PrintHeader() {
  fmt::print("{:>2}  {:>5}  {:<16} {:>11} {:<5} {:>7}  {:<40}  {:>9}  {:>7}  {:>9}  {:>6}  {:>6}  {}\n",
             "#", "stage", "offload", "mb x accum", "ckpt", "bucket", "peak GPU (largest parts)",
             "host RAM", "step s", "tokens/s", "TFLOP/s", "MFU", "bottleneck");
}

}  // namespace

void AddPlanFlags(CLI::App& app) {
  app.add_option("--model", g.model, "Catalog name (dsplan models) or path to a HF config.json");
  app.add_option("--gpus", g.gpus, "GPUs per node");
  g_nodes_option = app.add_option("--nodes", g.nodes, "Nodes")->capture_default_str();
  app.add_option("--hardware", g.hardware,
                 "Hardware profile name (profiles/) or YAML path. Default: h200-measured when "
                 "present, else h200-sxm");
  app.add_option("--seq-len", g.seq_len,
                 "Tokens per sample (T5: encoder length). Default: 512 for T5 and BERT, else 1024");
  app.add_option("--target-len", g.target_len, "T5 decoder length (default 128)");
  app.add_option("--attention", g.attention, "eager, sdpa, or auto")->capture_default_str();
  app.add_option("--stage", g.stage, "Pin the ZeRO stage (0-3)");
  app.add_option("--micro-batch,--mb", g.micro_batch, "Pin the micro-batch per GPU");
  app.add_option("--grad-accum", g.grad_accum, "Pin gradient accumulation steps");
  app.add_option("--global-batch", g.global_batch,
                 "Samples per optimizer step over all GPUs (micro-batch x accumulation x GPUs)");
  app.add_flag("--no-offload", g.no_offload, "Search only plans without offload");
  app.add_option("--offload-optimizer", g.offload_optimizer, "Pin optimizer offload: none, cpu, nvme");
  app.add_option("--offload-param", g.offload_param, "Pin parameter offload: none, cpu, nvme");
  app.add_flag("--gradient-checkpointing", g.gradient_checkpointing, "Pin checkpointing on");
  app.add_flag("--no-gradient-checkpointing", g.no_gradient_checkpointing, "Pin checkpointing off");
  app.add_option("--precision", g.precision, "Pin bf16, fp16 or fp32 (default: bf16 if the GPU has it)");
  app.add_option("--reduce-bucket-size", g.reduce_bucket_size, "Pin reduce_bucket_size (elements)");
  app.add_option("--host-memory", g.host_memory, "Host RAM per node, e.g. 512GiB (default: the profile's)");
  app.add_option("--nvme", g.nvme, "NVMe space per node for ZeRO-Infinity, e.g. 28TB (default: none)");
  app.add_option("--nvme-path", g.nvme_path, "nvme_path written into the config")->capture_default_str();
  app.add_option("--max-gpu-memory-fraction", g.max_gpu_memory_fraction,
                 "Fraction of each GPU's memory a plan may use")
      ->capture_default_str();
  app.add_option("--objective", g.objective, "throughput, memory or cost")->capture_default_str();
  app.add_option("--price-per-gpu-hour", g.price_per_gpu_hour, "For --objective cost: price of one GPU-hour");
  app.add_option("--top", g.top, "Plans to list")->capture_default_str();
  app.add_flag("--explain", g.explain, "Say why the other families were rejected, in numbers");
  app.add_option("--emit", g.emit, "Write the best plan's ds_config.json here")->capture_default_str();
  app.add_flag("--no-emit", g.no_emit, "Do not write a ds_config.json");
  app.add_flag("--hf-auto", g.hf_auto, "Write the HF Trainer form (\"auto\" where the Trainer fills values)");
  app.add_option("--host", g.hosts, "Host names for the hostfile (one per node)");
  app.add_flag("--json", g.json, "Machine-readable output");
  app.add_flag("--quiet", g.quiet, "Only the best plan, one line");
}

int RunPlanCommand() {
  if (g.model.empty()) {
    return Fail(Status::InvalidArgument(
        "--model is required (a catalog name from 'dsplan models' or a path to a HuggingFace "
        "config.json), e.g. dsplan --model t5-3b --gpus 4"));
  }
  if (g.gpus <= 0) {
    return Fail(Status::InvalidArgument(fmt::format(
        "--gpus must be a positive integer (GPUs per node), got {}", g.gpus)));
  }
  // Flag values: each refused with its flag named rather than clamped, wrapped or ignored.
  for (Status s : {CheckCluster(g.gpus, g.nodes), CheckIntFlag("--top", g.top, 1, 10000),
                   CheckLengthFlags(g.seq_len, g.target_len),
                   CheckNumberFlag("--max-gpu-memory-fraction", g.max_gpu_memory_fraction, 0, 1,
                                   true),
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
  auto profile = FindHardwareProfile(g.hardware.empty() ? DefaultHardwareName() : g.hardware, DataDir());
  if (!profile.ok()) return Fail(profile.status());
  // --gpus is per node: more than the profile's node holds become nodes when --nodes is not
  // given and they fill whole nodes; otherwise they are refused (never one impossible node).
  if (Status s = SplitGpusIntoNodes(profile->gpus_per_node, profile->name,
                                    g_nodes_option != nullptr && g_nodes_option->count() > 0,
                                    &g.gpus, &g.nodes);
      !s.ok()) {
    return Fail(s);
  }
  if (!g.hosts.empty() && static_cast<int>(g.hosts.size()) != g.nodes) {
    return Fail(Status::InvalidArgument(fmt::format(
        "--host was given {} time(s) for {} node(s); give one host name per node",
        g.hosts.size(), g.nodes)));
  }
  PlannerRequest r;
  r.spec = *spec;
  r.nodes = g.nodes;
  r.gpus_per_node = g.gpus;
  r.profile = &*profile;
  const Lengths len = ResolveLengths(*spec, g.seq_len, g.target_len);
  r.seq_len = len.seq_len;
  r.target_len = len.target_len;
  auto attn = ParseAttentionImpl(g.attention);
  if (!attn.ok()) return Fail(attn.status());
  r.attention = *attn;
  r.stage = g.stage;
  r.micro_batch = g.micro_batch;
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
  if (g.gradient_checkpointing) r.gradient_checkpointing = true;
  if (g.no_gradient_checkpointing) r.gradient_checkpointing = false;
  if (!g.precision.empty()) {
    auto p = ParsePrecision(g.precision);
    if (!p.ok()) return Fail(p.status());
    r.precision = *p;
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
  r.max_gpu_memory_fraction = g.max_gpu_memory_fraction;
  auto obj = ParseObjective(g.objective);
  if (!obj.ok()) return Fail(obj.status());
  r.objective = *obj;
  r.price_per_gpu_hour = g.price_per_gpu_hour;
  const bool tty = isatty(fileno(stderr)) && !g.json && !g.quiet;
  if (tty) {
    r.progress = [](double f) { fmt::print(stderr, "\rsearching... {:3.0f}%", 100 * f); };
  }
  auto result = RunPlanner(r);
  if (tty) fmt::print(stderr, "\r{:20}\r", "");
  if (!result.ok()) return Fail(result.status());
  const PlannerResult& res = *result;
  const bool any = !res.ranked.empty();
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

  // The chosen plan's config.
  nlohmann::json best_cfg;
  std::string emitted;
  if (any) {
    best_cfg = EmitDsConfig(res.ranked.front().plan, g.hf_auto ? EmitStyle::kHfAuto : EmitStyle::kExplicit);
    if (!g.no_emit && !g.emit.empty()) {
      std::ofstream out(g.emit);
      if (!out || !(out << best_cfg.dump(2) << "\n")) {
        return Fail(Status::IoError(fmt::format("{}: cannot write the ds_config.json", g.emit)));
      }
      emitted = g.emit;
    }
  }
  const int top = std::min<int>(g.top, static_cast<int>(res.recommendations.size()));

  if (g.json) {
    nlohmann::json recs = nlohmann::json::array();
    for (int i = 0; i < top; ++i) {
      const ScoredPlan& s = res.recommendations[i];
      WorkloadOptions o = WorkloadOptionsForPlan(s.plan);
      auto w = BuildWorkload(*spec, o);
      if (!w.ok()) return Fail(w.status());
      nlohmann::json j = PredictionToJson(s.prediction, *w);
      j["rank"] = i + 1;
      j["summary"] = PlanSummary(s.plan);
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
                        {"tokens_per_s", s.prediction.tokens_per_s},
                        {"peak_total_bytes", s.prediction.gpu_total_bytes}});
    }
    nlohmann::json rejected = nlohmann::json::array();
    for (const RejectedFamily& f : res.rejected) {
      rejected.push_back({{"family", f.family}, {"reason", f.reason}, {"best_tokens_per_s", f.best_tokens_per_s}});
    }
    nlohmann::json out = {{"model", {{"name", spec->name}, {"seq_len", r.seq_len}, {"target_len", r.target_len}}},
                          {"cluster", {{"nodes", g.nodes}, {"gpus_per_node", g.gpus}}},
                          {"hardware", {{"profile", profile->name}, {"sources", profile->SourceSummary()}}},
                          {"objective", ObjectiveName(r.objective)},
                          {"recommendations", recs},
                          {"pareto", pareto},
                          {"rejected", rejected},
                          {"ranked_count", res.ranked.size()},
                          {"emitted", emitted},
                          {"fits", any},
                          {"search", {{"plans_considered", res.plans_considered},
                                      {"plans_simulated", res.plans_simulated},
                                      {"seconds", res.seconds}}}};
    if (any) {
      LaunchSpec ls = LaunchSpecForPlan(res.ranked.front().plan, g.hosts);
      if (!emitted.empty()) ls.ds_config_path = emitted;
      out["launch"] = LaunchCommand(ls);
      if (g.nodes > 1) out["hostfile"] = HostfileText(ls);
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
    const ScoredPlan& b = res.ranked.front();
    fmt::print("{}, micro-batch {} x {}: {:.0f} tokens/s, peak {}{}\n", PlanSummary(b.plan),
               b.plan.micro_batch, b.plan.grad_accum, b.prediction.tokens_per_s,
               FormatBytes(static_cast<double>(b.prediction.gpu_total_bytes)),
               emitted.empty() ? "" : ", wrote " + emitted);
    return 0;
  }
  fmt::print("dsplan {}: {} ({} parameters) on {} node(s) x {} GPU(s)\n", DSPLAN_VERSION,
             spec->name, FormatCount(static_cast<double>(params)), g.nodes, g.gpus);
  fmt::print("hardware {} ({})\n", profile->name, profile->SourceSummary());
  fmt::print("limits   GPU {} x {:.0f}%, host RAM {} per node{}, NVMe {}\n",
             FormatBytes(profile->gpu.memory_bytes.value), 100 * g.max_gpu_memory_fraction,
             FormatBytes(r.host_memory_bytes > 0 ? static_cast<double>(r.host_memory_bytes)
                                                 : profile->host.ram_bytes.value),
             r.host_memory_bytes > 0 ? "" : " (the profile's; --host-memory to change)",
             r.nvme_bytes > 0 ? FormatBytes(static_cast<double>(r.nvme_bytes)) + " per node"
                              : "none (--nvme SIZE to allow ZeRO-Infinity)");
  fmt::print("sequence {}{}, objective {}; {} plans considered, {} simulated in {:.2f} s\n\n",
             r.seq_len, r.target_len ? fmt::format(" + target {}", r.target_len) : "",
             ObjectiveName(r.objective), res.plans_considered, res.plans_simulated, res.seconds);
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
  PrintHeader();
  for (int i = 0; i < top; ++i) PrintRow(i + 1, res.recommendations[i]);
  fmt::print("\nPareto front (throughput vs peak GPU memory; points at least 10% apart in memory):\n");
  for (const ScoredPlan& s : res.pareto) {
    fmt::print("  {:>9.0f} tokens/s  {:>9}  {}, micro-batch {} x {}\n", s.prediction.tokens_per_s,
               FormatBytes(static_cast<double>(s.prediction.gpu_total_bytes)), PlanSummary(s.plan),
               s.plan.micro_batch, s.plan.grad_accum);
  }
  if (g.explain) {
    fmt::print("\nWhy not more (per choice: the limit of its best variant, fastest first):\n");
    for (const RejectedFamily& f : res.rejected) {
      if (f.best_tokens_per_s > 0) {
        fmt::print("  {} (best {:.0f} tokens/s): {}\n", f.family, f.best_tokens_per_s, f.reason);
      } else {
        fmt::print("  {}: nothing fits; {}\n", f.family, f.reason);
      }
    }
  }
  const ScoredPlan& best = res.ranked.front();
  fmt::print("\nbest: {}, micro-batch {} x accumulation {}\n", PlanSummary(best.plan),
             best.plan.micro_batch, best.plan.grad_accum);
  for (const std::string& w : best.prediction.warnings) fmt::print("warning: {}\n", w);
  if (!emitted.empty()) fmt::print("wrote {}{}\n", emitted, g.hf_auto ? " (HF Trainer form)" : "");
  LaunchSpec ls = LaunchSpecForPlan(best.plan, g.hosts);
  if (!emitted.empty()) ls.ds_config_path = emitted;
  fmt::print("launch: {}\n", LaunchCommand(ls));
  if (g.hf_auto) {
    std::string args;
    for (const std::string& a : HfTrainerArgs(best.plan)) args += " " + a;
    fmt::print("Trainer arguments:{}\n", args);
  }
  if (g.nodes > 1) {
    fmt::print("hostfile ({}):\n{}", ls.hostfile_path, HostfileText(ls));
  }
  return 0;
}

}  // namespace dsplan
