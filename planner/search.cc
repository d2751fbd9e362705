#include "planner/search.h"

#include "core/checked_math.h"
#include "core/text.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <atomic>
#include <limits>
#include <chrono>
#include <map>
#include <memory>
#include <mutex>
#include <thread>

#include <fmt/format.h>

#include "core/checked_math.h"
#include "core/units.h"
#include "planner/check.h"
#include "simulator/workload.h"

namespace dsplan {

const char* ObjectiveName(Objective o) {
  switch (o) {
    case Objective::kThroughput: return "throughput";
    case Objective::kMemory: return "memory";
    case Objective::kCost: return "cost";
  }
  return "?";
}

Result<Objective> ParseObjective(const std::string& s) {
  if (s == "throughput") return Objective::kThroughput;
  if (s == "memory") return Objective::kMemory;
  if (s == "cost") return Objective::kCost;
  return Status::InvalidArgument(
      fmt::format("--objective {} is not known; use throughput, memory or cost", Quote(s)));
}

std::string ChoiceSummary(const Plan& p) {
  std::string off = "no offload";
  if (p.OffloadsOptimizer() || p.OffloadsParams()) {
    off = "offload";
    if (p.OffloadsOptimizer()) off += fmt::format(" optimizer->{}", OffloadDeviceName(p.zero.offload_optimizer.device));
    if (p.OffloadsParams()) off += fmt::format(" params->{}", OffloadDeviceName(p.zero.offload_param.device));
  }
  std::string s = fmt::format("stage {}, {}, {}", p.zero.stage, off,
                              p.gradient_checkpointing ? "checkpointing" : "no checkpointing");
  if (p.CheckpointsOnHost()) s += " (checkpoints in host memory)";
  if (p.linear_tiles > 1) s += fmt::format(", Linears in {} tiles", p.linear_tiles);
  if (p.torch_adam) s += ", PyTorch AdamW";
  return s;
}

std::string PlanSummary(const Plan& p) {
  std::string s = ChoiceSummary(p);
  if (p.zero.stage > 0) {
    s += fmt::format(", bucket {:.0e}", static_cast<double>(p.zero.reduce_bucket_size));
    if (p.zero.stage < 3 && p.zero.OverlapComm()) s += ", overlap_comm";
  }
  return s;
}

namespace {

constexpr double kDefaultLearningRate = 5e-5;       // TrainingArguments.learning_rate default
constexpr int64_t kDefaultWarmupSteps = 100;
constexpr int64_t kMaxMicroBatch = 4096;
// zero_optimization.sub_group_size of the plans with the optimizer on NVMe (the search's choice,
// not a default: DeepSpeed's is ZeroConfig{}.sub_group_size).
constexpr int64_t kNvmeSubGroupSize = 100'000'000;

struct Family {
  Plan plan;  // everything but micro_batch / grad_accum
  /// The family with DeepSpeed's default bucket and overlap for its choice: all its candidate
  /// micro-batches are simulated. The bucket/overlap variants of the choice are tuned at the
  /// micro-batches that matter: their own largest, and the primary's best ones.
  bool primary = true;
  int primary_index = -1;  // for a variant: its choice's primary family
};

// How "rounded" a micro-batch is: small ones all count as round; above 8, multiples of 8 beat
// multiples of 4 beat multiples of 2 beat odd numbers.
int Roundness(int64_t mb) {
  if (mb <= 8) return 3;
  int r = 0;
  while (r < 3 && mb % (int64_t{2} << r) == 0) ++r;
  return r;
}

}  // namespace

std::vector<ScoredPlan> PickRecommendations(const std::vector<ScoredPlan>& ranked,
                                            bool batch_free) {
  std::map<std::string, std::vector<const ScoredPlan*>> by_choice;
  std::vector<std::string> order;
  for (const ScoredPlan& s : ranked) {
    auto [it, inserted] = by_choice.try_emplace(ChoiceSummary(s.plan));
    if (inserted) order.push_back(it->first);
    it->second.push_back(&s);
  }
  std::vector<ScoredPlan> picks;
  for (const std::string& key : order) {
    const std::vector<const ScoredPlan*>& plans = by_choice[key];
    double best = 0;
    for (const ScoredPlan* p : plans) best = std::max(best, p->prediction.tokens_per_s);
    const double tol = batch_free ? kBatchTolerance : kTieTolerance;
    std::vector<const ScoredPlan*> near;
    for (const ScoredPlan* p : plans) {
      if (p->prediction.tokens_per_s >= (1 - tol) * best) near.push_back(p);
    }
    // The smallest global batch, then the least memory, then the fastest.
    std::stable_sort(near.begin(), near.end(), [](const ScoredPlan* a, const ScoredPlan* b) {
      if (a->plan.train_batch() != b->plan.train_batch()) {
        return a->plan.train_batch() < b->plan.train_batch();
      }
      if (a->prediction.gpu_total_bytes != b->prediction.gpu_total_bytes) {
        return a->prediction.gpu_total_bytes < b->prediction.gpu_total_bytes;
      }
      return a->prediction.tokens_per_s > b->prediction.tokens_per_s;
    });
    const ScoredPlan* pick = near.front();
    // A rounder micro-batch is shown instead when its speed is within kRoundTolerance of every
    // plan of the choice with a smaller global batch (the roundest, then the smallest global
    // batch): rounding never hides a measurably faster smaller batch.
    for (const ScoredPlan* p : near) {
      if (Roundness(p->plan.micro_batch) <= Roundness(pick->plan.micro_batch)) continue;
      const double t = p->prediction.tokens_per_s;
      const bool close = std::all_of(near.begin(), near.end(), [&](const ScoredPlan* q) {
        if (q->plan.train_batch() >= p->plan.train_batch()) return true;
        const double tq = q->prediction.tokens_per_s;
        return std::abs(t - tq) <= kRoundTolerance * tq;
      });
      if (close) pick = p;
    }
    picks.push_back(*pick);
  }
  // Fastest first; choices within kChoiceTieTolerance of each other by the more certain
  // prediction (the lower upper end of the step-time band: a ZeRO-3 step's is higher, its
  // GPU-bound runs measured up to 1.20x against 1.15x for stages 0-2; fresh-1204g/ ran phi-2's
  // stage-3 rank 1 16 % slower than its equally fast stage-1 alternative's prediction), then by
  // less memory.
  std::stable_sort(picks.begin(), picks.end(), [](const ScoredPlan& a, const ScoredPlan& b) {
    return a.prediction.tokens_per_s > b.prediction.tokens_per_s;
  });
  for (size_t i = 0; i < picks.size();) {
    size_t j = i + 1;
    while (j < picks.size() && picks[j].prediction.tokens_per_s >=
                                   (1 - kChoiceTieTolerance) * picks[i].prediction.tokens_per_s) {
      ++j;
    }
    std::stable_sort(picks.begin() + static_cast<std::ptrdiff_t>(i),
                     picks.begin() + static_cast<std::ptrdiff_t>(j),
                     [](const ScoredPlan& a, const ScoredPlan& b) {
                       const double ha = a.prediction.time_band.high;
                       const double hb = b.prediction.time_band.high;
                       if (std::abs(ha - hb) > kBandTieTolerance) return ha < hb;
                       return a.prediction.gpu_total_bytes < b.prediction.gpu_total_bytes;
                     });
    i = j;
  }
  // Choices whose picks are the same plan in all but the stage (stage 1 and 2 often are: same
  // speed, same peak) are one row: the lower stage, naming the others.
  std::vector<ScoredPlan> merged;
  for (ScoredPlan& s : picks) {
    bool folded = false;
    for (ScoredPlan& m : merged) {
      const Plan& a = m.plan;
      const Plan& b = s.plan;
      const bool same = a.micro_batch == b.micro_batch && a.grad_accum == b.grad_accum &&
                        a.gradient_checkpointing == b.gradient_checkpointing &&
                        a.linear_tiles == b.linear_tiles &&
                        a.CheckpointsOnHost() == b.CheckpointsOnHost() &&
                        a.zero.offload_optimizer.device == b.zero.offload_optimizer.device &&
                        a.zero.offload_param.device == b.zero.offload_param.device &&
                        std::abs(m.prediction.tokens_per_s - s.prediction.tokens_per_s) <=
                            1e-3 * m.prediction.tokens_per_s &&
                        std::llabs(m.prediction.gpu_total_bytes - s.prediction.gpu_total_bytes) <=
                            m.prediction.gpu_total_bytes / 1000;
      if (same) {
        m.same_as_stages.push_back(b.zero.stage);
        folded = true;
        break;
      }
    }
    if (!folded) merged.push_back(std::move(s));
  }
  return merged;
}

namespace {

class Search {
 public:
  explicit Search(const PlannerRequest& r) : r_(r) {}
  Result<PlannerResult> Run();

 private:
  Status Validate();
  std::vector<Family> Families() const;
  // Simulates |family| at |mb| (GAS from the request); nullopt when the global batch cannot be
  // split into that micro-batch.
  std::optional<ScoredPlan> Evaluate(const Family& f, int64_t mb, bool for_memory_bound,
                                     std::string* error);
  void RunFamily(const Family& f, const std::vector<int64_t>& preferred,
                 std::vector<ScoredPlan>* fitting, RejectedFamily* rejected, std::string* error);

  const PlannerRequest& r_;
  Precision precision_ = Precision::kBf16;
  int world_ = 1;
  // The request's Simulator, or one of our own: workloads by run shape, contexts by threshold.
  std::unique_ptr<Simulator> own_sim_;
  Simulator* sim_ = nullptr;
  std::atomic<int64_t> simulated_{0};
  std::atomic<int64_t> considered_{0};
  int64_t nvme_param_buffer_size_ = OffloadParamConfig{}.buffer_size;
  // Memory-centric tiling: the tile count proposed for stage 3 with parameter offload, or 1
  // when a block can be gathered whole (ProposedLinearTiles).
  int64_t tiles_ = 1;
};

Status Search::Validate() {
  if (r_.profile == nullptr) return Status::Internal("RunPlanner: no hardware profile");
  if (r_.nodes < 1 || r_.gpus_per_node < 1) {
    return Status::InvalidArgument(fmt::format(
        "--gpus and --nodes must be positive integers (got {} GPU(s) x {} node(s))",
        r_.gpus_per_node, r_.nodes));
  }
  if (r_.nodes > kMaxWorldSize || r_.gpus_per_node > kMaxWorldSize ||
      int64_t{r_.nodes} * r_.gpus_per_node > kMaxWorldSize) {
    return Status::InvalidArgument(
        fmt::format("{} node(s) x {} GPU(s) is more than the {} GPUs dsplan plans for", r_.nodes,
                    r_.gpus_per_node, kMaxWorldSize));
  }
  world_ = r_.nodes * r_.gpus_per_node;
  // The pinned batch values must make a triple (micro-batch x accumulation x GPUs = global).
  DSPLAN_RETURN_IF_ERROR(
      ResolveBatch(world_, r_.PinnedMicroBatch(), r_.grad_accum, r_.global_batch).status());
  if (r_.stage && (*r_.stage < 0 || *r_.stage > 3)) {
    return Status::InvalidArgument(fmt::format("--stage must be 0, 1, 2 or 3, got {}", *r_.stage));
  }
  const bool off_pinned = (r_.offload_optimizer && *r_.offload_optimizer != OffloadDevice::kNone) ||
                          (r_.offload_param && *r_.offload_param != OffloadDevice::kNone);
  if (r_.no_offload && off_pinned) {
    return Status::InvalidArgument("--no-offload contradicts --offload-optimizer/--offload-param");
  }
  if (r_.offload_param && *r_.offload_param != OffloadDevice::kNone && r_.stage && *r_.stage != 3) {
    return Status::InvalidArgument(fmt::format(
        "--offload-param needs ZeRO stage 3 (--stage {} was given)", *r_.stage));
  }
  if (r_.offload_optimizer && *r_.offload_optimizer != OffloadDevice::kNone && r_.stage &&
      *r_.stage == 0) {
    return Status::InvalidArgument("--offload-optimizer needs ZeRO stage 1, 2 or 3 (--stage 0 was given)");
  }
  const bool nvme_pinned = (r_.offload_optimizer && *r_.offload_optimizer == OffloadDevice::kNvme) ||
                           (r_.offload_param && *r_.offload_param == OffloadDevice::kNvme);
  if (nvme_pinned && r_.nvme_bytes <= 0) {
    return Status::InvalidArgument(
        "NVMe offload was asked for but no NVMe space was given; pass --nvme SIZE (per node)");
  }
  if (r_.headroom.bytes < 0 && !(r_.headroom.fraction >= 0 && r_.headroom.fraction < 1)) {
    return Status::InvalidArgument(fmt::format(
        "--headroom must be a percentage in [0, 100), got {}%", 100 * r_.headroom.fraction));
  }
  if (r_.shape_pins.precision) {
    precision_ = r_.shape.precision;
    if (precision_ == Precision::kBf16 && r_.profile->gpu.peak_flops_bf16.value <= 0) {
      return Status::InvalidArgument(fmt::format(
          "--precision bf16: {} has no bf16 support (profile {}); use fp16", r_.profile->gpu.name,
          r_.profile->name));
    }
  } else {
    precision_ = r_.profile->gpu.peak_flops_bf16.value > 0 ? Precision::kBf16 : Precision::kFp16;
  }
  return Status();
}

std::vector<Family> Search::Families() const {
  Plan base;
  base.zero_init = r_.zero_init;
  base.malloc_heap = r_.malloc_heap;
  base.nodes = r_.nodes;
  base.gpus_per_node = r_.gpus_per_node;
  base.precision = precision_;
  base.optimizer = OptimizerType::kAdamW;
  base.gradient_clipping = 1.0;
  // A complete training config: the HF Trainer's default AdamW hyperparameters (so the
  // Trainer's arguments match the file) and a linear warm-up to that learning rate.
  base.optimizer_params.lr = kDefaultLearningRate;
  base.optimizer_params.beta1 = 0.9;
  base.optimizer_params.beta2 = 0.999;
  base.optimizer_params.eps = 1e-8;
  base.optimizer_params.weight_decay = 0.0;
  base.scheduler = "WarmupLR";
  base.scheduler_params.warmup_min_lr = 0.0;
  base.scheduler_params.warmup_max_lr = kDefaultLearningRate;
  base.scheduler_params.warmup_num_steps = kDefaultWarmupSteps;
  base.scheduler_params.warmup_type = "linear";

  base.seq_len = r_.shape.seq_len;
  base.target_len = r_.shape.target_len;
  base.attention = r_.shape.attention;
  std::vector<int> stages = {0, 1, 2, 3};
  if (r_.stage) stages = {*r_.stage};
  std::vector<bool> gcs = {false, true};
  if (r_.shape_pins.gradient_checkpointing) gcs = {r_.shape.gradient_checkpointing};
  // The bucket sizes tried: two smaller ones and DeepSpeed's default.
  std::vector<int64_t> buckets = {50'000'000, 200'000'000, ZeroConfig{}.reduce_bucket_size};
  if (r_.reduce_bucket_size) buckets = {*r_.reduce_bucket_size};
  const bool nvme = r_.nvme_bytes > 0;
  struct Off {
    OffloadDevice opt, par;
  };
  std::vector<Family> out;
  for (int stage : stages) {
    std::vector<Off> offs = {{OffloadDevice::kNone, OffloadDevice::kNone}};
    if (stage >= 1 && stage <= 2) offs.push_back({OffloadDevice::kCpu, OffloadDevice::kNone});
    if (stage == 3) {
      offs.push_back({OffloadDevice::kCpu, OffloadDevice::kNone});
      offs.push_back({OffloadDevice::kCpu, OffloadDevice::kCpu});
      if (nvme) {
        offs.push_back({OffloadDevice::kNvme, OffloadDevice::kCpu});
        offs.push_back({OffloadDevice::kNvme, OffloadDevice::kNvme});
      }
    }
    for (const Off& o : offs) {
      if (r_.no_offload && (o.opt != OffloadDevice::kNone || o.par != OffloadDevice::kNone)) continue;
      if (r_.offload_optimizer && *r_.offload_optimizer != o.opt) continue;
      if (r_.offload_param && *r_.offload_param != o.par) continue;
      for (bool gc : gcs) {
        const std::vector<int64_t> bs = stage == 0 ? std::vector<int64_t>{ZeroConfig{}.reduce_bucket_size} : buckets;
        for (int64_t b : bs) {
          std::vector<std::optional<bool>> overlaps = {std::nullopt};
          if (stage == 1 || stage == 2) overlaps.push_back(true);
          for (const auto& ov : overlaps) {
            Family f;
            f.plan = base;
            f.plan.zero.stage = stage;
            // The HF Trainer saves no weights from a ZeRO-3 run without this.
            f.plan.zero.gather_16bit_weights_on_model_save = stage == 3;
            f.plan.gradient_checkpointing = gc;
            f.plan.zero.reduce_bucket_size = b;
            f.plan.zero.overlap_comm = ov;
            f.plan.zero.offload_optimizer.device = o.opt;
            f.plan.zero.offload_param.device = o.par;
            if (o.opt != OffloadDevice::kNone) f.plan.zero.offload_optimizer.pin_memory = true;
            if (o.par != OffloadDevice::kNone) f.plan.zero.offload_param.pin_memory = true;
            if (o.opt == OffloadDevice::kNvme) {
              f.plan.zero.offload_optimizer.nvme_path = r_.nvme_path;
              // Sub-groups small enough that the pinned swap pool stays modest (a tenth of
              // DeepSpeed's default, ZeroConfig{}.sub_group_size = 1e9).
              f.plan.zero.sub_group_size = kNvmeSubGroupSize;
            }
            if (o.par == OffloadDevice::kNvme) {
              f.plan.zero.offload_param.nvme_path = r_.nvme_path;
              // DeepSpeed refuses a swap buffer not larger than a parameter partition.
              f.plan.zero.offload_param.buffer_size = nvme_param_buffer_size_;
            }
            // ZeRO-Infinity's tools, when a block is too large to gather whole (tiles_ > 1):
            // memory-centric tiling at the proposed tile count and half and twice it, each
            // with the checkpoints on the GPU and in host memory (DeepSpeed's checkpoint
            // function with cpu_checkpointing).
            if (stage == 3 && o.par != OffloadDevice::kNone && gc && tiles_ > 1) {
              for (int64_t t : {tiles_ / 2, tiles_, tiles_ * 2}) {
                if (t < 1 || t > kMaxLinearTiles) continue;
                for (bool host : {false, true}) {
                  if (t == 1 && !host) continue;  // the family itself
                  Family v = f;
                  v.plan.linear_tiles = t;
                  if (host) {
                    v.plan.activation_checkpointing.present = true;
                    v.plan.activation_checkpointing.cpu_checkpointing = true;
                  }
                  out.push_back(std::move(v));
                }
              }
            }
            out.push_back(std::move(f));
          }
        }
      }
    }
  }
  // One primary per choice: DeepSpeed's default bucket (or the pinned one) with overlap_comm
  // left to DeepSpeed; the other families of the choice are its variants.
  std::map<std::string, int> primary_of;
  for (size_t i = 0; i < out.size(); ++i) {
    const Plan& p = out[i].plan;
    const bool default_knobs = !p.zero.overlap_comm.has_value() &&
                               (p.zero.reduce_bucket_size == ZeroConfig{}.reduce_bucket_size || buckets.size() == 1 ||
                                p.zero.stage == 0);
    if (default_knobs) primary_of.emplace(ChoiceSummary(p), static_cast<int>(i));
  }
  for (size_t i = 0; i < out.size(); ++i) {
    auto it = primary_of.find(ChoiceSummary(out[i].plan));
    if (it == primary_of.end() || it->second == static_cast<int>(i)) continue;
    out[i].primary = false;
    out[i].primary_index = it->second;
  }
  return out;
}

std::optional<ScoredPlan> Search::Evaluate(const Family& f, int64_t mb, bool for_memory_bound,
                                           std::string* error) {
  // The batch triple at this micro-batch. With a global batch, the accumulation follows from
  // it (a pinned --grad-accum was checked against it in Validate).
  const auto batch = ResolveBatch(world_, mb, r_.global_batch ? std::nullopt : r_.grad_accum,
                                  r_.global_batch);
  int64_t gas = 1;  // memory barely depends on the accumulation count
  if (batch.ok()) {
    gas = batch->grad_accum;
  } else if (!for_memory_bound) {
    return std::nullopt;
  }
  ScoredPlan s;
  s.plan = f.plan;
  s.plan.micro_batch = mb;
  s.plan.grad_accum = gas;
  SimulateOptions o;
  o.headroom = r_.headroom;
  o.host_memory_bytes = r_.host_memory_bytes;
  // NVMe: only the space the user declared counts.
  o.nvme_bytes = r_.nvme_bytes;
  auto pred = sim_->Simulate(s.plan, o);
  ++simulated_;
  if (!pred.ok()) {
    *error = pred.status().message();
    return std::nullopt;
  }
  if (pred->facts.FusedAdamSkipsUpdate() && !s.plan.torch_adam) {
    // DeepSpeed 0.14.5's FusedAdam never updates a flat tensor of more than 2^31 - 1 elements
    // (StepFacts::FusedAdamSkipsUpdate): the plan would run but not train. PyTorch's AdamW
    // (optimizer.params.torch_adam) has no such limit; it trains at this size and costs what the
    // step prices (docs/validation/deepspeed/torchadam-1205: phi-2 and gemma-2b at stage 2,
    // optimizer phase within 5-11 %). So the plan steps with it, and says why.
    s.plan.torch_adam = true;
    pred = sim_->Simulate(s.plan, o);
    ++simulated_;
    if (!pred.ok()) {
      *error = pred.status().message();
      return std::nullopt;
    }
  }
  s.prediction = std::move(*pred);
  if (s.prediction.tokens_per_s > 0) {
    s.gpu_hours_per_million_tokens = world_ / (s.prediction.tokens_per_s * 3600.0) * 1e6;
  }
  return s;
}

void Search::RunFamily(const Family& f, const std::vector<int64_t>& preferred,
                       std::vector<ScoredPlan>* fitting, RejectedFamily* rejected,
                       std::string* error) {
  rejected->family = PlanSummary(f.plan);
  const int64_t cap = r_.global_batch ? std::min(kMaxMicroBatch, *r_.global_batch / world_)
                                      : kMaxMicroBatch;
  std::vector<int64_t> candidates;
  if (r_.shape_pins.micro_batch) {
    candidates = {r_.shape.micro_batch};
  } else {
    // The largest micro-batch that fits: doubling, then bisection (peak memory grows with it).
    // Peak reserved is not quite monotonic, though: a larger micro-batch's freed buffers can
    // serve a block for which a smaller one reserves a segment of its own (measured: bloom-3b
    // at stage 3 with checkpointing on an H100 reserved 4.9 GiB more at micro-batch 1 than at 2,
    // docs/validation/deepspeed/nonmono-1206c; bloom-7b1's stage-3 plan on one H200 lost its
    // micro-batch 2, which ran four times, to its at-risk micro-batch 1). So a first
    // micro-batch that is only at risk (it fits the device, not the band and headroom: where one
    // block's placement can decide) is confirmed by the next doubling before the doubling stops.
    int64_t good = 0, bad = 0;
    std::string bad_reason;
    for (int64_t mb = 1; mb <= cap; mb *= 2) {
      auto s = Evaluate(f, mb, true, error);
      if (!s) return;
      if (!s->prediction.fits) {
        if (bad == 0) {
          bad = mb;
          bad_reason = s->prediction.reason;
          if (s->prediction.verdict == MemoryVerdict::kAtRisk) continue;
        }
        break;
      }
      good = mb;
      bad = 0;
      bad_reason.clear();
    }
    if (good == 0) {
      rejected->reason = fmt::format("micro-batch 1: {}", bad_reason);
      considered_ += cap;
      return;
    }
    if (bad == 0 && good < cap) {
      auto s = Evaluate(f, cap, true, error);
      if (!s) return;
      if (s->prediction.fits) {
        good = cap;
      } else {
        bad = cap;
        bad_reason = s->prediction.reason;
      }
    }
    while (bad > good + 1) {
      const int64_t mid = good + (bad - good) / 2;
      auto s = Evaluate(f, mid, true, error);
      if (!s) return;
      if (s->prediction.fits) {
        good = mid;
      } else {
        bad = mid;
        bad_reason = s->prediction.reason;
      }
    }
    if (bad > 0) rejected->reason = fmt::format("micro-batch {}: {}", bad, bad_reason);
    if (f.primary) {
      // Every micro-batch up to 32; above, steps of about 1/8 (throughput changes slowly
      // there); always the largest that fits.
      for (int64_t mb = 1; mb < good;) {
        candidates.push_back(mb);
        mb = mb < 32 ? mb + 1 : mb + std::max<int64_t>(1, mb / 8);
      }
      candidates.push_back(good);
    } else {
      // A bucket/overlap variant: its largest micro-batch and the primary's best ones.
      for (int64_t mb : preferred) {
        if (mb < good) candidates.push_back(mb);
      }
      candidates.push_back(good);
    }
    considered_ += cap;
  }
  for (int64_t mb : candidates) {
    if (r_.cancel != nullptr && r_.cancel->load(std::memory_order_relaxed)) return;  // Run says so
    auto s = Evaluate(f, mb, false, error);
    if (!error->empty()) return;
    if (!s) continue;
    if (s->prediction.fits) {
      rejected->best_tokens_per_s = std::max(rejected->best_tokens_per_s, s->prediction.tokens_per_s);
      fitting->push_back(std::move(*s));
    } else if (rejected->reason.empty()) {
      rejected->reason = fmt::format("micro-batch {}: {}", mb, s->prediction.reason);
    }
  }
  if (r_.shape_pins.micro_batch) ++considered_;
}

Result<PlannerResult> Search::Run() {
  const auto t0 = std::chrono::steady_clock::now();
  DSPLAN_RETURN_IF_ERROR(Validate());
  {
    // Build the micro-batch-1 workload first (threads would race to build it) and size the
    // NVMe parameter swap buffers from its largest parameter.
    if (r_.simulator != nullptr) {
      sim_ = r_.simulator;
    } else {
      own_sim_ = std::make_unique<Simulator>(r_.spec, *r_.profile);
      sim_ = own_sim_.get();
    }
    Plan p;
    p.nodes = r_.nodes;
    p.gpus_per_node = r_.gpus_per_node;
    p.precision = precision_;
    p.seq_len = r_.shape.seq_len;
    p.target_len = r_.shape.target_len;
    p.attention = r_.shape.attention;
    auto w = sim_->WorkloadFor(p.shape());
    if (!w.ok()) return Status::InvalidArgument(w.status().message());
    nvme_param_buffer_size_ = NvmeParamBufferSize(**w, p);
    tiles_ = ProposedLinearTiles(**w, precision_, r_.profile->gpu.memory_bytes.value);
  }
  const std::vector<Family> families = Families();
  if (families.empty()) {
    return Status::InvalidArgument(
        "the pins leave nothing to search (e.g. --offload-param with a stage below 3)");
  }
  std::vector<std::vector<ScoredPlan>> fitting(families.size());
  std::vector<RejectedFamily> rejected(families.size());
  std::vector<std::string> errors(families.size());
  std::atomic<size_t> done{0};
  // Phase 1: the primary families; phase 2: their bucket/overlap variants, at the primaries'
  // best micro-batches.
  auto run_phase = [&](bool primary) {
    std::vector<size_t> todo;
    for (size_t i = 0; i < families.size(); ++i) {
      if (families[i].primary == primary) todo.push_back(i);
    }
    std::atomic<size_t> next{0};
    auto worker = [&] {
      for (size_t k = next++; k < todo.size(); k = next++) {
        if (r_.cancel != nullptr && r_.cancel->load(std::memory_order_relaxed)) break;
        const size_t i = todo[k];
        std::vector<int64_t> preferred;
        if (!primary) {
          // The three fastest micro-batches of the primary.
          std::vector<const ScoredPlan*> best;
          for (const ScoredPlan& p : fitting[families[i].primary_index]) best.push_back(&p);
          std::sort(best.begin(), best.end(), [](const ScoredPlan* a, const ScoredPlan* b) {
            return a->prediction.tokens_per_s > b->prediction.tokens_per_s;
          });
          for (size_t j = 0; j < best.size() && j < 3; ++j) preferred.push_back(best[j]->plan.micro_batch);
        }
        RunFamily(families[i], preferred, &fitting[i], &rejected[i], &errors[i]);
        const size_t d = ++done;
        if (r_.progress) r_.progress(static_cast<double>(d) / families.size());
      }
    };
    const int threads = std::max(1, std::min<int>(r_.threads, static_cast<int>(todo.size())));
    std::vector<std::thread> pool;
    for (int t = 1; t < threads; ++t) pool.emplace_back(worker);
    worker();
    for (std::thread& t : pool) t.join();
  };
  auto cancelled = [&] { return r_.cancel != nullptr && r_.cancel->load(std::memory_order_relaxed); };
  run_phase(true);
  if (cancelled()) return Status::InvalidArgument(kCancelledMessage);
  run_phase(false);
  if (cancelled()) return Status::InvalidArgument(kCancelledMessage);
  for (const std::string& e : errors) {
    if (!e.empty()) return Status::InvalidArgument(e);
  }

  PlannerResult out;
  for (size_t i = 0; i < families.size(); ++i) {
    for (ScoredPlan& s : fitting[i]) out.ranked.push_back(std::move(s));
    if (!rejected[i].reason.empty()) out.rejected.push_back(rejected[i]);
  }
  auto faster = [](const ScoredPlan& a, const ScoredPlan& b) {
    return a.prediction.tokens_per_s > b.prediction.tokens_per_s;
  };
  switch (r_.objective) {
    case Objective::kThroughput:
    case Objective::kCost:  // GPU-hours per token on a fixed cluster: the same order
      std::stable_sort(out.ranked.begin(), out.ranked.end(), faster);
      break;
    case Objective::kMemory:
      std::stable_sort(out.ranked.begin(), out.ranked.end(), [&](const ScoredPlan& a, const ScoredPlan& b) {
        if (a.prediction.gpu_total_bytes != b.prediction.gpu_total_bytes) {
          return a.prediction.gpu_total_bytes < b.prediction.gpu_total_bytes;
        }
        return faster(a, b);
      });
      break;
  }
  // Pareto front of throughput vs peak GPU memory.
  std::vector<const ScoredPlan*> by_speed;
  for (const ScoredPlan& s : out.ranked) by_speed.push_back(&s);
  std::stable_sort(by_speed.begin(), by_speed.end(),
                   [&](const ScoredPlan* a, const ScoredPlan* b) { return faster(*a, *b); });
  double kept_mem = std::numeric_limits<double>::infinity();
  for (const ScoredPlan* s : by_speed) {
    if (s->prediction.gpu_total_bytes < 0.9 * kept_mem) {
      kept_mem = static_cast<double>(s->prediction.gpu_total_bytes);
      out.pareto.push_back(*s);
    }
  }
  // One recommendation per (stage, offload, checkpointing) choice.
  if (r_.objective == Objective::kMemory) {
    std::map<std::string, size_t> seen;
    for (const ScoredPlan& s : out.ranked) {
      if (seen.emplace(ChoiceSummary(s.plan), out.recommendations.size()).second) {
        out.recommendations.push_back(s);
      }
    }
  } else {
    out.recommendations = PickRecommendations(out.ranked, !r_.global_batch.has_value());
  }
  // The best plan leads |ranked| too (what is emitted and what check compares with).
  if (!out.recommendations.empty()) {
    auto it = std::find_if(out.ranked.begin(), out.ranked.end(), [&](const ScoredPlan& s) {
      return s.plan == out.recommendations.front().plan;
    });
    if (it != out.ranked.end()) std::rotate(out.ranked.begin(), it, it + 1);
  }
  out.batch_tolerance = r_.global_batch ? 0.0 : kBatchTolerance;
  // Rejections per choice: keep the best variant's limit, or one reason when nothing fitted.
  std::map<std::string, RejectedFamily> by_choice;
  for (size_t i = 0; i < families.size(); ++i) {
    if (rejected[i].reason.empty()) continue;
    RejectedFamily r = rejected[i];
    r.family = ChoiceSummary(families[i].plan);
    auto it = by_choice.find(r.family);
    if (it == by_choice.end() || r.best_tokens_per_s > it->second.best_tokens_per_s) {
      by_choice[r.family] = r;
    }
  }
  out.rejected.clear();
  for (auto& [k, r] : by_choice) out.rejected.push_back(r);
  std::stable_sort(out.rejected.begin(), out.rejected.end(),
                   [](const RejectedFamily& a, const RejectedFamily& b) {
                     return a.best_tokens_per_s > b.best_tokens_per_s;
                   });
  out.plans_simulated = simulated_;
  out.plans_considered = considered_;
  out.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return out;
}

}  // namespace

Result<PlannerResult> RunPlanner(const PlannerRequest& request) {
  Search s(request);
  return s.Run();
}

std::optional<FitSuggestion> SuggestFit(const PlannerRequest& request_in, int max_gpus) {
  // One Simulator for every search below: the workloads do not depend on the cluster.
  PlannerRequest request = request_in;
  std::unique_ptr<Simulator> own;
  if (request.simulator == nullptr && request.profile != nullptr) {
    own = std::make_unique<Simulator>(request.spec, *request.profile);
    request.simulator = own.get();
  }
  auto best_of = [](const PlannerRequest& r) -> std::optional<ScoredPlan> {
    auto res = RunPlanner(r);
    if (!res.ok() || res->ranked.empty()) return std::nullopt;
    return res->ranked.front();
  };
  // More host RAM (offload plans that only lacked RAM).
  {
    PlannerRequest r = request;
    r.progress = nullptr;
    r.host_memory_bytes = int64_t{1} << 50;
    // The plan that needs the least host RAM (the fastest one may keep everything in RAM when
    // an NVMe plan would need far less).
    auto res = RunPlanner(r);
    if (res.ok() && !res->ranked.empty()) {
      const ScoredPlan* p = &res->ranked.front();
      for (const ScoredPlan& s : res->ranked) {
        if (s.prediction.host_peak_bytes_per_node < p->prediction.host_peak_bytes_per_node) p = &s;
      }
      // The plan's peak plus the host headroom the fit rule keeps free; 0.5 % more so that the
      // three digits printed are not rounded below what is needed.
      const double need = 1.005 * static_cast<double>(p->prediction.host_peak_bytes_per_node) /
                          (1.0 - kHostHeadroom);
      return FitSuggestion{fmt::format("--host-memory {} (per node)", FormatBytes(need)), *p};
    }
  }
  // NVMe space (ZeRO-Infinity), when the request did not allow it.
  if (request.nvme_bytes <= 0 && request.stage.value_or(3) == 3 && !request.no_offload) {
    PlannerRequest r = request;
    r.progress = nullptr;
    r.nvme_bytes = int64_t{1} << 50;
    if (auto p = best_of(r)) {
      const double need = 1.005 * static_cast<double>(p->prediction.nvme_bytes_per_node);
      return FitSuggestion{fmt::format("--nvme {} (per node)", FormatBytes(need)), *p};
    }
  }
  // Larger clusters: GPUs per node up to the profile's node, then more nodes.
  const int node_size = std::max(request.gpus_per_node,
                                 request.profile ? request.profile->gpus_per_node : 8);
  int nodes = request.nodes, gpus = request.gpus_per_node;
  while (nodes * gpus < max_gpus) {
    if (gpus < node_size) {
      gpus = std::min(node_size, gpus * 2);
    } else {
      nodes *= 2;
    }
    if (request.global_batch && *request.global_batch % (nodes * gpus) != 0) continue;
    PlannerRequest r = request;
    r.progress = nullptr;
    r.nodes = nodes;
    r.gpus_per_node = gpus;
    if (auto p = best_of(r)) {
      return FitSuggestion{fmt::format("{} node(s) x {} GPU(s)", nodes, gpus), *p};
    }
  }
  return std::nullopt;
}

}  // namespace dsplan
