// BuildStepGraph on a small catalog model (gpt2) with plans built in code: where ZeRO puts the
// model states per stage and offload option (the initial state, against byte counts derived from
// the parameter count Psi), and which tasks each stage issues per micro-step.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <string>
#include <vector>

#include "core/hardware_profile.h"
#include "core/model_catalog.h"
#include "simulator/cost_model.h"
#include "simulator/step_builder.h"
#include "simulator/workload.h"

namespace dsplan {
namespace {

constexpr int kGpu = static_cast<int>(MemSpace::kGpu);
constexpr int kPinned = static_cast<int>(MemSpace::kPinnedHost);
constexpr int kPageable = static_cast<int>(MemSpace::kPageableHost);
constexpr int kNvme = static_cast<int>(MemSpace::kNvme);
int C(MemCategory c) { return static_cast<int>(c); }
int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

class StepBuilderTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    auto spec = LoadModel("gpt2", DSPLAN_TEST_DATA_DIR);
    ASSERT_TRUE(spec.ok()) << spec.status().ToString();
    auto psi = CountParameters(*spec);
    ASSERT_TRUE(psi.ok());
    psi_ = *psi;
    for (bool gc : {false, true}) {
      RunShape o;
      o.micro_batch = 1;
      o.seq_len = 128;
      o.gradient_checkpointing = gc;
      auto w = BuildWorkload(*spec, o);
      ASSERT_TRUE(w.ok()) << w.status().ToString();
      (gc ? w_gc_ : w_) = new Workload(std::move(*w));
    }
  }
  static void TearDownTestSuite() {
    delete w_;
    delete w_gc_;
    w_ = w_gc_ = nullptr;
  }

  static Plan MakePlan(int stage, int gpus, Precision precision = Precision::kBf16) {
    Plan p;
    p.gpus_per_node = gpus;
    p.micro_batch = 1;
    p.grad_accum = 1;
    p.precision = precision;
    p.optimizer = OptimizerType::kAdamW;
    p.zero.stage = stage;
    p.seq_len = 128;
    return p;
  }

  static BuiltStep Build(const Plan& plan, bool gc = false, int rank = kRankClass) {
    const Workload& w = gc ? *w_gc_ : *w_;
    const int64_t threshold =
        plan.zero.stage == 3 ? plan.zero.stage3_param_persistence_threshold : 0;
    auto built =
        BuildStepGraph(w, ComputeLayerParams(w, threshold), plan, 0, StepGraphForm::kCompact, rank);
    EXPECT_TRUE(built.ok()) << built.status().ToString();
    return built.ok() ? std::move(*built) : BuiltStep{};
  }

  static int64_t Init(const BuiltStep& b, int space, MemCategory c) {
    return b.graph.initial[space][C(c)];
  }
  static int64_t InitTotal(const BuiltStep& b, int space) {
    int64_t t = 0;
    for (int64_t x : b.graph.initial[space]) t += x;
    return t;
  }
  // Tasks of |kind| in |micro| (-2: any).
  static int Count(const BuiltStep& b, TaskKind kind, int micro = -2) {
    int n = 0;
    for (const Task& t : b.graph.tasks()) {
      if (t.kind == kind && (micro == -2 || t.micro_step == micro)) ++n;
    }
    return n;
  }
  static double SumBytes(const BuiltStep& b, TaskKind kind, int micro) {
    double s = 0;
    for (const Task& t : b.graph.tasks()) {
      if (t.kind == kind && t.micro_step == micro) s += t.bytes;
    }
    return s;
  }

  // Peak of |c| in |space| in program order (each task's start effects, then its end
  // effects), from the initial state; only tasks of micro-step |micro| when >= 0 (the running
  // sum still follows every task).
  static int64_t CategoryPeak(const BuiltStep& b, int space, MemCategory c, int micro = -1) {
    int64_t now = b.graph.initial[space][C(c)], peak = micro < 0 ? now : 0;
    for (TaskId id = 0; id < static_cast<TaskId>(b.graph.tasks().size()); ++id) {
      const bool counted = micro < 0 || b.graph.tasks()[id].micro_step == micro;
      for (bool end : {false, true}) {
        for (const MemEffect* e = b.graph.effects_begin(id); e != b.graph.effects_end(id); ++e) {
          if (e->at_end != end || static_cast<int>(e->space) != space || e->category != c) {
            continue;
          }
          now += e->bytes;
          if (counted) peak = std::max(peak, now);
        }
      }
    }
    return peak;
  }
  // Per-rank grads_in_partition from the tensor table directly: the whole numel of every
  // parameter tensor that overlaps the rank's slice of the flat buffer (padded to 2 x ranks).
  static int64_t OverlapNumel(int ranks, int rank) {
    const int64_t size = CeilDiv(psi_, 2 * ranks) * 2;
    const int64_t first = size * rank, end = std::min(size * (rank + 1), psi_);
    int64_t at = 0, sum = 0;
    for (const TensorSpec& t : w_->tensors) {
      if (t.category != TensorCategory::kParameter) continue;
      if (at < end && at + t.numel > first) sum += t.numel;
      at += t.numel;
    }
    return sum;
  }

  static inline int64_t psi_ = 0;
  static inline Workload* w_ = nullptr;
  static inline Workload* w_gc_ = nullptr;
};

// ZeRO-3's gather calls follow DeepSpeed's prefetch bucket: without prefetch (bucket 0) every
// gathered tensor is fetched by its own call (gpt2's modules each own one weight above the
// persistence threshold, plus the tied head's table); with a bucket larger than the model the
// first fetch starts one call that takes everything.
TEST_F(StepBuilderTest, GatherCallsFollowThePrefetchBucket) {
  int64_t gathered = 0;
  Plan plan = MakePlan(3, 1);
  for (const TensorSpec& t : w_->tensors) {
    if (t.category == TensorCategory::kParameter &&
        t.numel > plan.zero.stage3_param_persistence_threshold) {
      ++gathered;
    }
  }
  ASSERT_GT(gathered, 40);  // 4 weights per block, 12 blocks, the embeddings
  auto forward_calls = [&](int64_t bucket) {
    plan.zero.stage3_prefetch_bucket_size = bucket;
    const BuiltStep b = Build(plan);
    int64_t n = 0;
    for (const Task& t : b.graph.tasks()) {
      if (t.kind == TaskKind::kForward && t.micro_step == 0) n += t.gather_calls;
    }
    return n;
  };
  EXPECT_EQ(forward_calls(0), gathered + 1);  // + the tied head's table
  EXPECT_EQ(forward_calls(1'000'000'000'000), 1);
  // A bucket of one block's weights: about one call per block.
  const int64_t mid = forward_calls(7'000'000);
  EXPECT_GT(mid, 6);
  EXPECT_LT(mid, 20);
}

// ZeRO-3 flushes the reduce bucket inside the gradient hook of the backward that would overfill
// it; the builder counts those flushes on that backward task (its host work), not the one the
// epilogue runs at the end of the backward, and not stage 2's (its hooks are not priced so).
TEST_F(StepBuilderTest, Stage3BucketFlushesAreChargedToTheHookThatRunsThem) {
  auto flushes = [&](int stage, int64_t bucket) {
    Plan plan = MakePlan(stage, 1);
    plan.zero.reduce_bucket_size = bucket;
    const BuiltStep b = Build(plan);
    int64_t hooks = 0, reductions = 0;
    for (const Task& t : b.graph.tasks()) {
      hooks += t.bucket_flushes;
      if (t.bucket_flushes > 0) EXPECT_EQ(t.kind, TaskKind::kBackward);
      if (t.kind == TaskKind::kReduceScatter || t.kind == TaskKind::kAllReduce) ++reductions;
    }
    return std::make_pair(hooks, reductions);
  };
  // A bucket that holds every gradient: the epilogue's flush only.
  EXPECT_EQ(flushes(3, 1'000'000'000'000), std::make_pair(int64_t{0}, int64_t{1}));
  // GPT-2 small (124 M parameters) in 10 M-element buckets: the 38.6 M-element token embedding
  // is a bucket of its own, the other 85.8 M fill at least 9 more; every reduction but the
  // epilogue's runs in a hook.
  const auto small = flushes(3, 10'000'000);
  EXPECT_GE(small.second, 10);
  EXPECT_EQ(small.first, small.second - 1);
  EXPECT_EQ(flushes(2, 10'000'000).first, 0);
}

TEST_F(StepBuilderTest, ParameterCountIsGpt2s) {
  EXPECT_EQ(psi_, 124'439'808);  // transformers' count for openai-community/gpt2
  EXPECT_EQ(w_->params, psi_);
  EXPECT_EQ(Build(MakePlan(2, 4)).facts.params, psi_);
  EXPECT_EQ(Build(MakePlan(2, 4)).facts.partition_numel, CeilDiv(psi_, 4));
}

// Stages 1-3: per-GPU fp32 master (4 B) and Adam states (8 B) fall as 1/N; stages 1 and 2 keep
// the full 16-bit parameters, stage 3 keeps 2 B x Psi/N.
TEST_F(StepBuilderTest, OptimizerStatesAndMasterPartitionOneOverN) {
  for (int stage : {1, 2, 3}) {
    SCOPED_TRACE(stage);
    for (int n : {1, 4}) {
      SCOPED_TRACE(n);
      const BuiltStep b = Build(MakePlan(stage, n));
      const int64_t part = CeilDiv(psi_, n);
      EXPECT_EQ(Init(b, kGpu, MemCategory::kOptimizerStates), 8 * part);
      EXPECT_EQ(Init(b, kGpu, MemCategory::kMaster), 4 * part);
      EXPECT_EQ(Init(b, kGpu, MemCategory::kParams16), stage == 3 ? 2 * part : 2 * psi_);
      EXPECT_EQ(InitTotal(b, kPinned) + InitTotal(b, kPageable) + InitTotal(b, kNvme), 0);
    }
    const BuiltStep one = Build(MakePlan(stage, 1));
    const BuiltStep four = Build(MakePlan(stage, 4));
    // Psi = 124439808 is a multiple of 4, so the 1/N is exact.
    ASSERT_EQ(psi_ % 4, 0);
    EXPECT_EQ(4 * Init(four, kGpu, MemCategory::kOptimizerStates),
              Init(one, kGpu, MemCategory::kOptimizerStates));
    EXPECT_EQ(4 * Init(four, kGpu, MemCategory::kMaster), Init(one, kGpu, MemCategory::kMaster));
  }
}

// Stage 0 does not partition: FP16_Optimizer (fp16) keeps the full fp32 master and Adam states
// on every GPU. (bf16 at stage 0 is BF16_Optimizer, which does shard its fp32 states, but keeps
// the full 16-bit parameters and fp32 gradients.)
TEST_F(StepBuilderTest, StageZeroDoesNotPartition) {
  for (int n : {1, 4}) {
    const BuiltStep b = Build(MakePlan(0, n, Precision::kFp16));
    EXPECT_EQ(b.facts.wrapper, OptimizerWrapper::kFp16Optimizer);
    EXPECT_EQ(Init(b, kGpu, MemCategory::kParams16), 2 * psi_);
    EXPECT_EQ(Init(b, kGpu, MemCategory::kMaster), 4 * psi_);
    EXPECT_EQ(Init(b, kGpu, MemCategory::kOptimizerStates), 8 * psi_);
  }
  const BuiltStep bf = Build(MakePlan(0, 4));
  EXPECT_EQ(bf.facts.wrapper, OptimizerWrapper::kBf16Optimizer);
  EXPECT_EQ(Init(bf, kGpu, MemCategory::kParams16), 2 * psi_);
  // fp32 gradient accumulation buffer (4 Psi) + the previous step's bf16 grads (2 Psi).
  EXPECT_EQ(Init(bf, kGpu, MemCategory::kGradients), 6 * psi_);
}

// offload_optimizer = cpu: no master or optimizer states on the GPU; stage 1/2 keep the fp32
// master pinned and the Adam states pageable, stage 3 both pageable (without pin_memory).
TEST_F(StepBuilderTest, CpuOffloadMovesMasterAndStatesToTheHost) {
  for (int stage : {1, 2, 3}) {
    SCOPED_TRACE(stage);
    Plan p = MakePlan(stage, 4);
    p.zero.offload_optimizer.device = OffloadDevice::kCpu;
    const BuiltStep b = Build(p);
    const int64_t part = CeilDiv(psi_, 4);
    EXPECT_EQ(Init(b, kGpu, MemCategory::kMaster), 0);
    EXPECT_EQ(Init(b, kGpu, MemCategory::kOptimizerStates), 0);
    EXPECT_EQ(Init(b, kPageable, MemCategory::kOptimizerStates), 8 * part);
    if (stage < 3) {
      EXPECT_EQ(Init(b, kPinned, MemCategory::kMaster), 4 * part);
      EXPECT_EQ(Init(b, kPageable, MemCategory::kMaster), 0);
      EXPECT_EQ(Init(b, kGpu, MemCategory::kParams16), 2 * psi_);
    } else {
      EXPECT_EQ(Init(b, kPageable, MemCategory::kMaster), 4 * part);
      EXPECT_EQ(Init(b, kGpu, MemCategory::kParams16), 2 * part);
    }
    EXPECT_EQ(InitTotal(b, kNvme), 0);
  }
}

// PyTorch's CachingHostAllocator rounds every pinned buffer up to a power of two; the graph
// keeps exact sizes and records what the rounding adds, buffer by buffer (stage 1/2 with
// pin_memory: the fp32 master, the fp32 gradient partition, the largest parameter's buffer).
TEST_F(StepBuilderTest, PinnedBuffersRecordThePowerOfTwoRoundingOfEachBuffer) {
  auto pow2 = [](int64_t b) {
    int64_t p = 1;
    while (p < b) p <<= 1;
    return p;
  };
  Plan p = MakePlan(2, 1);
  p.zero.offload_optimizer.device = OffloadDevice::kCpu;
  p.zero.offload_optimizer.pin_memory = true;
  const BuiltStep b = Build(p);
  const int64_t part = b.facts.partition_numel;
  const int64_t master = 4 * part, grads = 4 * part;
  const int64_t pinned = Init(b, kPinned, MemCategory::kMaster) +
                         Init(b, kPinned, MemCategory::kGradients) +
                         Init(b, kPinned, MemCategory::kCommBuffers);
  EXPECT_EQ(Init(b, kPinned, MemCategory::kMaster), master);
  EXPECT_EQ(Init(b, kPinned, MemCategory::kGradients), grads);
  const int64_t largest = Init(b, kPinned, MemCategory::kCommBuffers);
  EXPECT_GT(largest, 0);
  EXPECT_EQ(b.graph.pinned_rounding_bytes,
            pow2(master) - master + pow2(grads) - grads + pow2(largest) - largest);
  EXPECT_EQ(pinned, master + grads + largest);
  // Without pin_memory the gradients and the buffer are pageable; the fp32 master is pinned
  // whatever pin_memory says (stage 1/2 offload).
  p.zero.offload_optimizer.pin_memory = false;
  const BuiltStep u = Build(p);
  EXPECT_EQ(u.graph.pinned_rounding_bytes, pow2(master) - master);
}

// ZeRO-3's step (docs/deepspeed-facts.md "Stage 3"): the gradient norm's fp64 copy of the
// largest owned gradient partition (GPT-2's embedding) is a transient of the norm task, before
// the sub-groups; each sub-group's task then makes its fp32 gradient, and Adam's lazy states for
// that sub-group come right after it. With the optimizer offloaded neither is on the GPU.
TEST_F(StepBuilderTest, Zero3NormCopyAndLazyStatesPerSubGroup) {
  Plan p = MakePlan(3, 4);
  p.zero.sub_group_size = 10'000'000;  // several sub-groups of GPT-2's 31M-element partition
  const BuiltStep b = Build(p);
  ASSERT_GT(b.facts.subgroups, 1);
  std::vector<TaskId> opt;
  for (TaskId id = 0; id < static_cast<TaskId>(b.graph.size()); ++id) {
    if (b.graph.task(id).kind == TaskKind::kGpuOptimizer) opt.push_back(id);
  }
  ASSERT_EQ(static_cast<int64_t>(opt.size()), 1 + b.facts.subgroups);  // the norm, then each
  const int64_t fp64 = 8 * CeilDiv(50257LL * 768, 4);
  const MemEffect* e = b.graph.effects_begin(opt[0]);
  ASSERT_EQ(b.graph.effects_end(opt[0]) - e, 2);
  EXPECT_EQ(e[0].bytes, fp64);
  EXPECT_EQ(e[0].category, MemCategory::kTemporaries);
  EXPECT_EQ(e[1].bytes, -fp64);
  ASSERT_EQ(static_cast<int64_t>(b.graph.lazy_gpu_states.size()), 2 * b.facts.subgroups);
  for (size_t i = 0; i < b.graph.lazy_gpu_states.size(); ++i) {
    const StepGraph::LazyState& l = b.graph.lazy_gpu_states[i];
    EXPECT_EQ(l.task, opt[1 + i / 2]) << i;
    // After the sub-group's 16-bit flat copy, its fp32 gradient and the copy's free.
    EXPECT_EQ(l.after, 3) << i;
    const MemEffect* f = b.graph.effects_begin(l.task);
    EXPECT_EQ(f[1].category, MemCategory::kGradients);
    EXPECT_EQ(f[1].bytes, l.bytes);  // the fp32 gradient is the state's size: 4 B per element
  }
  Plan off = p;
  off.zero.offload_optimizer.device = OffloadDevice::kCpu;
  const BuiltStep o = Build(off);
  EXPECT_TRUE(o.graph.lazy_gpu_states.empty());
  for (TaskId id = 0; id < static_cast<TaskId>(o.graph.size()); ++id) {
    if (o.graph.task(id).kind != TaskKind::kGpuOptimizer) continue;
    for (const MemEffect* f = o.graph.effects_begin(id); f != o.graph.effects_end(id); ++f) {
      EXPECT_FALSE(f->space == MemSpace::kGpu && f->bytes == fp64) << "fp64 copy with offload";
    }
    break;  // the norm task
  }
}

// ZeRO-3's step walks every parameter on every rank (each rank holds a shard of each): the norm
// loop's host count is the model's tensor count at any N, while its kernels' bytes shrink with
// N. Stages 1-2 walk the rank's partition only.
TEST_F(StepBuilderTest, StageThreeStepWalksEveryParameterOnEveryRank) {
  int tensors = 0;
  for (const LayerParams& l : ComputeLayerParams(*w_, 0)) tensors += l.tensors;
  auto norm_task = [](const BuiltStep& b) {
    for (const Task& t : b.graph.tasks()) {
      if (t.kind == TaskKind::kGpuOptimizer && t.step_param_tensors > 0) return t;
    }
    return Task{};
  };
  const Task one = norm_task(Build(MakePlan(3, 1))), four = norm_task(Build(MakePlan(3, 4)));
  EXPECT_EQ(one.step_param_tensors, tensors);
  EXPECT_EQ(four.step_param_tensors, tensors);
  EXPECT_EQ(four.kernels, one.kernels);
  EXPECT_LT(four.bytes, 0.3 * one.bytes);
  const Task z2 = norm_task(Build(MakePlan(2, 4)));
  EXPECT_EQ(z2.step_param_tensors, CeilDiv(tensors, 4));
}

// PyTorch's foreach Adam/AdamW (torch_adam) moves 72 bytes per element, plus its weight decay's
// pass when it decays: AdamW by torch.optim's default 0.01 when the config gives none, Adam by
// none. The stage-2 step's bytes follow it, 8 B per partition element between decaying and not.
TEST_F(StepBuilderTest, TorchAdamPricesItsWeightDecayPass) {
  Plan p = MakePlan(2, 4);
  p.torch_adam = true;
  EXPECT_EQ(TorchAdamBytesPerElement(p), 80.0);  // AdamW, no weight_decay: torch's 0.01
  p.optimizer_params.weight_decay = 0.0;
  EXPECT_EQ(TorchAdamBytesPerElement(p), 72.0);
  p.optimizer_params.weight_decay = 0.1;
  EXPECT_EQ(TorchAdamBytesPerElement(p), 80.0);
  Plan adam = p;
  adam.optimizer = OptimizerType::kAdam;
  adam.adam_w_mode = false;  // torch.optim.Adam: coupled decay, a new gradient (12 B)
  EXPECT_EQ(TorchAdamBytesPerElement(adam), 84.0);
  adam.optimizer_params.weight_decay.reset();  // torch.optim.Adam's default: no decay
  EXPECT_EQ(TorchAdamBytesPerElement(adam), 72.0);
  adam.adam_w_mode = true;  // DeepSpeed builds torch.optim.AdamW
  EXPECT_EQ(TorchAdamBytesPerElement(adam), 80.0);

  auto step_bytes = [](const BuiltStep& b) {
    double s = 0;
    for (const Task& t : b.graph.tasks()) {
      if (t.kind == TaskKind::kGpuOptimizer) s += t.bytes;
    }
    return s;
  };
  Plan decays = MakePlan(2, 4), none = decays;
  decays.torch_adam = none.torch_adam = true;
  none.optimizer_params.weight_decay = 0.0;
  const BuiltStep a = Build(decays), b = Build(none);
  EXPECT_DOUBLE_EQ(step_bytes(a) - step_bytes(b), 8.0 * a.facts.partition_numel);
  // FusedAdam decays inside its one kernel: the same bytes either way.
  Plan fused = MakePlan(2, 4), fused0 = fused;
  fused0.optimizer_params.weight_decay = 0.0;
  EXPECT_DOUBLE_EQ(step_bytes(Build(fused)), step_bytes(Build(fused0)));
}

// Adam's two states per flat fp32 partition are created by the first step(), not before it:
// the graph lists them (for the allocator replay) and still counts them in the steady state.
TEST_F(StepBuilderTest, LazyStatesAreAdamsTwoTensorsPerPartition) {
  const BuiltStep b = Build(MakePlan(2, 4));
  const int64_t part = b.facts.partition_numel;
  ASSERT_EQ(b.graph.lazy_gpu_states.size(), 2u);
  for (const StepGraph::LazyState& l : b.graph.lazy_gpu_states) {
    EXPECT_EQ(l.bytes, 4 * part);
    // Created in the optimizer task's step(), after the norm's fp64 temporary, the flat fp32
    // gradient and the freed 16-bit gradients: six GPU effects.
    ASSERT_GE(l.task, 0);
    EXPECT_EQ(b.graph.task(l.task).kind, TaskKind::kGpuOptimizer);
    EXPECT_EQ(l.after, 6);
  }
  EXPECT_EQ(Init(b, kGpu, MemCategory::kOptimizerStates), 8 * part);
  Plan off = MakePlan(2, 4);
  off.zero.offload_optimizer.device = OffloadDevice::kCpu;
  EXPECT_TRUE(Build(off).graph.lazy_gpu_states.empty());  // CPU Adam's states are on the host
  Plan adagrad = MakePlan(2, 4);
  adagrad.optimizer = OptimizerType::kAdagrad;  // DeepSpeed builds Adagrad's states eagerly
  EXPECT_TRUE(Build(adagrad).graph.lazy_gpu_states.empty());
}

// ZeRO-3 with optimizer offload copies each owned gradient into the CPU fp32 partition with a
// blocking copy_ from the 16-bit buffer: PyTorch copies 2 B/element into a pageable temporary and
// converts on the host (Copy.cu). Stages 1-2 cast on the GPU and copy fp32 into pinned memory.
// At a non-boundary micro-step ZeRO-3 makes no fp32 copy (partition_grads, 0.14.5).
TEST_F(StepBuilderTest, ZeroThreeOffloadGradientCopiesConvertOnTheHost) {
  auto copies = [&](const Plan& p, double* bytes, double* convert, int* pageable, int* micro1) {
    const BuiltStep b = Build(p);
    *bytes = *convert = 0;
    *pageable = *micro1 = 0;
    for (const Task& t : b.graph.tasks()) {
      if (t.kind != TaskKind::kCopyD2H || t.host_convert_bytes == 0) continue;
      *bytes += t.bytes;
      *convert += t.host_convert_bytes;
      *pageable += !t.pinned;
      *micro1 += t.micro_step == 0 && p.grad_accum > 1;
    }
    return b.facts.partition_numel;
  };
  Plan p = MakePlan(3, 2);
  p.zero.offload_optimizer.device = OffloadDevice::kCpu;
  p.zero.offload_optimizer.pin_memory = true;
  double bytes = 0, convert = 0;
  int pageable = 0, early = 0;
  const int64_t part = copies(p, &bytes, &convert, &pageable, &early);
  EXPECT_GT(pageable, 0);
  EXPECT_DOUBLE_EQ(bytes, 2.0 * part);            // bf16 over PCIe
  EXPECT_DOUBLE_EQ(convert, (2.0 + 4.0) * part);  // read bf16, write fp32 on the host
  // Two micro-steps: only the boundary's copies.
  p.grad_accum = 2;
  copies(p, &bytes, &convert, &pageable, &early);
  EXPECT_DOUBLE_EQ(bytes, 2.0 * part);
  EXPECT_EQ(early, 0);
  // Stage 2 keeps the GPU cast and the pinned fp32 copy.
  Plan s2 = MakePlan(2, 2);
  s2.zero.offload_optimizer.device = OffloadDevice::kCpu;
  copies(s2, &bytes, &convert, &pageable, &early);
  EXPECT_DOUBLE_EQ(convert, 0);
}

// The pageable temporary of each blocking cross-dtype copy is an mmap of its own from 32 MiB
// (glibc's largest mmap threshold), so its pages are faulted in on every copy. gpt2's word
// embeddings are 50257 x 768 = 38,597,376 elements: a 16-bit partition of 77.2 MB on one rank and
// 38.6 MB on two (both at least 32 MiB = 33,554,432 B), 19.3 MB on four (below). Every other gpt2
// tensor is below 2.4 M elements.
TEST_F(StepBuilderTest, ZeroThreeOffloadFaultsInFreshTemporariesFrom32MiB) {
  auto faults = [&](const Plan& p, bool h2d) {
    double bytes = 0;
    for (const Task& t : Build(p).graph.tasks()) {
      if (t.kind == (h2d ? TaskKind::kCopyH2D : TaskKind::kCopyD2H)) bytes += t.host_fault_bytes;
    }
    return bytes;
  };
  const int64_t wte = int64_t{50257} * 768;
  for (int gpus : {1, 2, 4}) {
    Plan p = MakePlan(3, gpus);
    p.zero.offload_optimizer.device = OffloadDevice::kCpu;
    p.zero.offload_param.device = OffloadDevice::kCpu;
    const double expected = gpus < 4 ? 2.0 * ((wte + gpus - 1) / gpus) : 0.0;
    EXPECT_DOUBLE_EQ(faults(p, false), expected) << gpus << " GPUs";
    // With the parameters offloaded too the step updates them on the host: no H2D copy back.
    EXPECT_DOUBLE_EQ(faults(p, true), 0.0) << gpus << " GPUs";
    // Without, the updated 16-bit partition goes back through a host cast into a pageable
    // temporary as large as the sub-group (the whole partition here, under 1e9 elements),
    // copied from pageable memory; its pages are faulted in by the cast's threads, at a rate
    // not measured, so not priced.
    p.zero.offload_param.device = OffloadDevice::kNone;
    const BuiltStep b = Build(p);
    int back = 0;
    for (TaskId id = 0; id < static_cast<TaskId>(b.graph.size()); ++id) {
      const Task& t = b.graph.task(id);
      if (t.kind != TaskKind::kCopyH2D || t.micro_step != -1) continue;
      EXPECT_FALSE(t.pinned);
      EXPECT_DOUBLE_EQ(t.host_fault_bytes, 0.0);
      ++back;
      int64_t temp = 0;
      for (const MemEffect* e = b.graph.effects_begin(id); e != b.graph.effects_end(id); ++e) {
        if (e->space == MemSpace::kPageableHost && e->category == MemCategory::kTemporaries) {
          temp = std::max(temp, e->bytes);
        }
      }
      EXPECT_EQ(temp, 2 * b.facts.partition_numel) << gpus << " GPUs";
    }
    EXPECT_EQ(back, 1) << gpus << " GPUs";
  }
  // Stages 1-2 cast on the GPU and copy into pinned memory: no temporary.
  Plan s2 = MakePlan(2, 1);
  s2.zero.offload_optimizer.device = OffloadDevice::kCpu;
  EXPECT_DOUBLE_EQ(faults(s2, false), 0.0);
  EXPECT_DOUBLE_EQ(faults(s2, true), 0.0);
}

// Each owned gradient is one blocking cast copy, priced by its size class (below 1 MiB of 16-bit
// bytes, from 1 MiB, or from 32 MiB, where the copy's temporary is a fresh mapping). gpt2 has
// 148 tensors: per block 4 weights of 0.59-2.36 M elements and 8 biases and norm vectors; the
// word (38.6 M) and position (786 k) embeddings; the final norm's 2. On one rank the 50 weights
// and embeddings are 1.2-77 MB each, the word embedding's 77.2 MB the only one from 32 MiB; on
// four, c_attn's (442 k elements, 885 kB), attn c_proj's and the position table's partitions
// fall below 1 MiB, and the word embedding's (19.3 MB) below 32 MiB.
TEST_F(StepBuilderTest, ZeroThreeOffloadCountsOneCastCopyPerOwnedTensor) {
  for (int gpus : {1, 4}) {
    Plan p = MakePlan(3, gpus);
    p.zero.offload_optimizer.device = OffloadDevice::kCpu;
    p.zero.offload_param.device = OffloadDevice::kCpu;
    const BuiltStep b = Build(p);
    std::array<int, Task::kCastCopyClasses> n{};
    std::array<double, Task::kCastCopyClasses> bytes{};
    double faults = 0;
    for (const Task& t : b.graph.tasks()) {
      if (t.kind != TaskKind::kCopyD2H) continue;
      for (int k = 0; k < Task::kCastCopyClasses; ++k) {
        n[k] += t.cast_copies[k];
        bytes[k] += t.cast_copy_bytes[k];
      }
      faults += t.host_fault_bytes;
    }
    EXPECT_EQ(n[0] + n[1] + n[2], 148) << gpus << " GPUs";
    EXPECT_EQ(n[1], gpus == 1 ? 49 : 25) << gpus << " GPUs";
    EXPECT_EQ(n[2], gpus == 1 ? 1 : 0) << gpus << " GPUs";
    // Every owned element once, 2 bytes each (partitions rounded up per tensor).
    const double all = bytes[0] + bytes[1] + bytes[2];
    EXPECT_GE(all, 2.0 * b.facts.partition_numel);
    EXPECT_LE(all, 2.0 * (b.facts.partition_numel + 148));
    EXPECT_LT(bytes[0] / n[0], 1 << 20);
    EXPECT_GE(bytes[1] / n[1], 1 << 20);
    EXPECT_LT(bytes[1] / n[1], 32 << 20);
    // The fresh class's bytes are the temporaries faulted in.
    EXPECT_DOUBLE_EQ(bytes[2], gpus == 1 ? 2.0 * 50257 * 768 : 0.0);
    EXPECT_DOUBLE_EQ(faults, bytes[2]);
  }
}

// With malloc held to its heap (Plan::malloc_heap, kMallocHeapEnv) the word embedding's 77 MB
// copy at one GPU is in the heap class of large copies, not the fresh one, and faults nothing;
// the sub-groups' fp32 -> 16-bit cast before the copy back to the GPU (parameters not
// offloaded) faults nothing either.
TEST_F(StepBuilderTest, MallocOnItsHeapFaultsNoTemporaryIn) {
  for (bool heap : {false, true}) {
    Plan p = MakePlan(3, 1);
    p.zero.offload_optimizer.device = OffloadDevice::kCpu;
    p.malloc_heap = heap;
    const BuiltStep b = Build(p);
    std::array<int, Task::kCastCopyClasses> n{};
    double faults = 0, cpu_faults = 0;
    for (const Task& t : b.graph.tasks()) {
      if (t.kind == TaskKind::kCpuOptimizer) cpu_faults += t.host_fault_bytes;
      if (t.kind != TaskKind::kCopyD2H) continue;
      for (int k = 0; k < Task::kCastCopyClasses; ++k) n[k] += t.cast_copies[k];
      faults += t.host_fault_bytes;
    }
    EXPECT_EQ(n[0] + n[1] + n[2] + n[3], 148) << heap;
    EXPECT_EQ(n[Task::kFreshCastCopyClass], heap ? 0 : 1) << heap;
    EXPECT_EQ(n[Task::kHeapLargeCastCopyClass], heap ? 1 : 0) << heap;
    EXPECT_DOUBLE_EQ(faults, heap ? 0.0 : 2.0 * 50257 * 768) << heap;
    if (heap) {
      EXPECT_DOUBLE_EQ(cpu_faults, 0.0);
    } else {
      EXPECT_DOUBLE_EQ(cpu_faults, 2.0 * b.facts.partition_numel);  // one 16-bit temporary
    }
  }
}

// At an offloaded boundary the per-parameter loop is one task per bucket that knows its tensors
// by size class (the cost model pays each tensor's longer side, host ops or queued work). Stages
// 1-2: each rank's loop takes the whole tensors of its partition (gpt2's 148, 50 of them from
// 1 MiB, halved at two ranks), copying 4 bytes per owned element; ZeRO-3: every tensor's
// partition, copied to the host buffer and back in the accumulation dtype (at two ranks the
// halves of attn.c_proj, 590 k elements, and of the position table, 786 k, fall below 1 MiB:
// 12 x 3 + 1 from 1 MiB, the word embedding's half of 38.6 MB among them and from 32 MiB, as its
// whole at one rank). Stages 1-2 have no fresh class (their copy casts on the GPU). Only the
// boundary's buckets loop; without offload there is no loop.
TEST_F(StepBuilderTest, AnOffloadedBoundaryLoopsOverTheOwnedTensorsByClass) {
  for (int stage : {2, 3}) {
    for (int gpus : {1, 2}) {
      Plan p = MakePlan(stage, gpus);
      p.zero.offload_optimizer.device = OffloadDevice::kCpu;
      const BuiltStep b = Build(p);
      std::array<int, Task::kCastCopyClasses> n{};
      double bytes = 0, d2h = 0, h2d = 0;
      int loops = 0;
      for (const Task& t : b.graph.tasks()) {
        if (t.host_loop == HostLoop::kNone) continue;
        ++loops;
        EXPECT_EQ(t.kind, TaskKind::kGradCopy);
        EXPECT_EQ(t.host_loop, stage == 3 ? HostLoop::kZero3PartitionGrads
                                          : HostLoop::kZero12OverflowCheck);
        for (int k = 0; k < Task::kCastCopyClasses; ++k) {
          n[k] += t.cast_copies[k];
          bytes += t.cast_copy_bytes[k];
        }
        d2h += t.loop_d2h_bytes;
        h2d += t.loop_h2d_bytes;
      }
      const std::string at = "stage " + std::to_string(stage) + ", " + std::to_string(gpus) + " GPUs";
      EXPECT_GE(loops, 1) << at;
      const double owned = static_cast<double>(b.facts.partition_numel);
      if (stage == 2) {
        // CeilDiv per bucket: at most one tensor per class and bucket above the exact half.
        EXPECT_EQ(n[2], 0) << at;
        EXPECT_GE(n[0] + n[1], 148 / gpus) << at;
        EXPECT_LE(n[0] + n[1], 148 / gpus + 2 * loops) << at;
        EXPECT_GE(n[1], 50 / gpus) << at;
        EXPECT_LE(n[1], 50 / gpus + loops) << at;
        EXPECT_NEAR(bytes, 2.0 * psi_ / gpus, 1.0) << at;
        EXPECT_NEAR(d2h, 4.0 * owned, 4.0 * loops) << at;
        EXPECT_DOUBLE_EQ(h2d, 0.0) << at;
      } else {
        EXPECT_EQ(n[0] + n[1] + n[2], 148) << at;
        EXPECT_EQ(n[1] + n[2], gpus == 1 ? 50 : 37) << at;
        EXPECT_EQ(n[2], 1) << at;
        EXPECT_GE(bytes, 2.0 * owned) << at;
        EXPECT_LE(bytes, 2.0 * (owned + 148)) << at;
        EXPECT_NEAR(d2h, 2.0 * owned, 2.0 * gpus * loops) << at;
        EXPECT_DOUBLE_EQ(h2d, d2h) << at;
      }
    }
  }
  for (const Task& t : Build(MakePlan(2, 1)).graph.tasks()) {
    EXPECT_EQ(t.host_loop, HostLoop::kNone);
  }
}

// A flush runs in the hook of the gradient that overfills the bucket; for a layer's first
// gradient that is before the rest of the layer's backward is issued, so the flush is issued
// before the layer's backward, with the optimizer offloaded or not (session 28: before, a
// flush that nothing waits for was issued after that backward, which put what it allocates
// after the layer's working memory). With the optimizer offloaded the host also waits in that
// hook, at the boundary, until the bucket's copies to the host are done: the layer's backward
// waits for the flush's join; without offload nothing waits. With a bucket smaller than any
// gpt2 tensor, every layer's first gradient overfills it (and every later one flushes the
// layer's own previous gradients).
TEST_F(StepBuilderTest, AFlushTheHostWaitsForIsIssuedBeforeTheLayersBackward) {
  // Flushes (their reduction task) issued after a backward that came after the bucket's last
  // gradient copy; and backward tasks that wait for a flush's join.
  auto count = [&](const Plan& p, int* late, int* waiting) {
    const BuiltStep b = Build(p);
    const StepGraph& g = b.graph;
    *late = *waiting = 0;
    for (TaskId id = 0; id < static_cast<TaskId>(g.size()); ++id) {
      const Task& t = g.task(id);
      if (t.kind == TaskKind::kAllReduce || t.kind == TaskKind::kReduceScatter) {
        TaskId last = -1;  // the bucket's last gradient copy
        for (const TaskId* d = g.deps_begin(id); d != g.deps_end(id); ++d) {
          if (g.task(*d).kind == TaskKind::kGradCopy) last = std::max(last, *d);
        }
        for (TaskId k = last + 1; k < id; ++k) *late += g.task(k).kind == TaskKind::kBackward;
      }
      if (t.kind != TaskKind::kBackward) continue;
      for (const TaskId* d = g.deps_begin(id); d != g.deps_end(id); ++d) {
        const Task& j = g.task(*d);
        if (j.kind != TaskKind::kGradCopy || j.kernels != 0) continue;
        for (const TaskId* e = g.deps_begin(*d); e != g.deps_end(*d); ++e) {
          *waiting += g.task(*e).kind == TaskKind::kCopyD2H;
        }
      }
    }
  };
  for (int stage : {2, 3}) {
    Plan p = MakePlan(stage, 1);
    p.zero.reduce_bucket_size = 512;
    p.zero.offload_optimizer.device = OffloadDevice::kCpu;
    int late = 0, waiting = 0;
    count(p, &late, &waiting);
    EXPECT_EQ(late, 0) << "stage " << stage;
    EXPECT_GE(waiting, 11) << "stage " << stage;
    p.zero.offload_optimizer.device = OffloadDevice::kNone;
    count(p, &late, &waiting);
    EXPECT_EQ(late, 0) << "stage " << stage;
    EXPECT_EQ(waiting, 0) << "stage " << stage;
  }
}

// Stage 3 offload_param = cpu: the 16-bit partitions live in pinned host memory; only the
// persistent parameters (at most the threshold each) keep a GPU partition.
TEST_F(StepBuilderTest, ParamOffloadMovesPartitionsToPinnedHost) {
  Plan p = MakePlan(3, 4);
  p.zero.offload_optimizer.device = OffloadDevice::kCpu;
  p.zero.offload_param.device = OffloadDevice::kCpu;
  const BuiltStep b = Build(p);
  const int64_t part = CeilDiv(psi_, 4);
  EXPECT_EQ(Init(b, kPinned, MemCategory::kParams16), 2 * part);
  EXPECT_EQ(Init(b, kGpu, MemCategory::kParams16), 2 * CeilDiv(b.facts.persistent_numel, 4));
  EXPECT_LT(Init(b, kGpu, MemCategory::kParams16), 2 * part / 10);
}

// NVMe (ZeRO-Infinity): fp32 master, Adam states and fp32 gradients of the partition on the
// drive: (4 + 8 + 4) Psi/N; with offload_param = nvme the partitions beyond max_in_cpu too.
TEST_F(StepBuilderTest, NvmeOffloadPutsSixteenBytesPerPartitionElementOnTheDrive) {
  Plan p = MakePlan(3, 4);
  p.zero.offload_optimizer.device = OffloadDevice::kNvme;
  p.zero.offload_optimizer.nvme_path = "/local_nvme";
  const int64_t part = CeilDiv(psi_, 4);
  BuiltStep b = Build(p);
  EXPECT_EQ(InitTotal(b, kNvme), 16 * part);
  EXPECT_EQ(Init(b, kNvme, MemCategory::kOptimizerStates), 8 * part);
  EXPECT_EQ(Init(b, kNvme, MemCategory::kMaster), 4 * part);
  EXPECT_EQ(Init(b, kGpu, MemCategory::kMaster), 0);
  EXPECT_EQ(Init(b, kPageable, MemCategory::kMaster), 0);

  // DeepSpeed gives a sub-group's 16-bit partitions host memory only when the whole sub-group
  // fits the max_in_cpu buffer after the sub-groups before it (stage3.py,
  // _create_fp16_partitions_with_defragmentation): one sub-group larger than max_in_cpu puts
  // every partition on the drive.
  p.zero.offload_param.device = OffloadDevice::kNvme;
  p.zero.offload_param.nvme_path = "/local_nvme";
  p.zero.offload_param.max_in_cpu = 1'000'000;
  b = Build(p);
  EXPECT_EQ(Init(b, kNvme, MemCategory::kParams16), 2 * part);
  EXPECT_EQ(Init(b, kPinned, MemCategory::kParams16), 0);
  EXPECT_EQ(InitTotal(b, kNvme), 16 * part + 2 * part);
  // The pinned parameter buffer pool: buffer_count x buffer_size 16-bit elements.
  EXPECT_GE(Init(b, kPinned, MemCategory::kCommBuffers),
            2 * p.zero.offload_param.buffer_count * p.zero.offload_param.buffer_size);
  // Sub-groups of about 4 M elements and a 10 M buffer: the leading sub-groups that fit stay in
  // host memory (gpt2's tensors walked by hand, each rank's partition ceil(numel / 4)).
  p.zero.sub_group_size = 4'000'000;
  p.zero.offload_param.max_in_cpu = 10'000'000;
  b = Build(p);
  std::vector<int64_t> groups;
  int64_t run = 0;
  for (const TensorSpec& t : w_->tensors) {
    if (t.category != TensorCategory::kParameter) continue;
    run += CeilDiv(t.numel, 4);
    if (run >= 4'000'000) {
      groups.push_back(run);
      run = 0;
    }
  }
  if (run > 0) groups.push_back(run);
  int64_t cpu = 0;
  for (int64_t g : groups) {
    if (cpu + g > 10'000'000) break;
    cpu += g;
  }
  ASSERT_GT(cpu, 0);
  ASSERT_LT(cpu, 10'000'000);
  EXPECT_EQ(Init(b, kPinned, MemCategory::kParams16), 2 * cpu);
  EXPECT_EQ(Init(b, kNvme, MemCategory::kParams16), 2 * (part - cpu));
}

// ZeRO-3 with the optimizer on NVMe: at the boundary partition_grads casts each owned gradient
// to fp32 on the GPU and swap_out_gradients writes them to the drive (4 bytes per element in
// all), instead of the blocking cast copies into host memory; each bucket's writes wait for the
// previous bucket's, and the step's reads of the sub-groups (master, states and those
// gradients: 16 bytes per element) come after the last.
TEST_F(StepBuilderTest, NvmeOptimizerSwapsTheGradientsOutInTheBackward) {
  Plan p = MakePlan(3, 1);
  p.zero.offload_optimizer.device = OffloadDevice::kNvme;
  p.zero.offload_optimizer.nvme_path = "/local_nvme";
  p.zero.reduce_bucket_size = 20'000'000;  // several buckets
  const BuiltStep b = Build(p);
  const StepGraph& g = b.graph;
  const double part = static_cast<double>(b.facts.partition_numel);
  double grad_writes = 0, step_reads = 0;
  TaskId last_write = -1;
  int writes = 0;
  for (TaskId id = 0; id < static_cast<TaskId>(g.size()); ++id) {
    const Task& t = g.task(id);
    EXPECT_EQ(t.cast_copies[0] + t.cast_copies[1], 0) << "task " << id;
    EXPECT_EQ(t.host_loop, HostLoop::kNone) << "task " << id;
    if (t.kind == TaskKind::kNvmeWrite && t.micro_step >= 0) {
      grad_writes += t.bytes;
      ++writes;
      if (last_write >= 0) {
        // This bucket's copies into the swap buffers waited for the previous bucket's writes.
        const TaskId copy = *g.deps_begin(id);
        EXPECT_EQ(g.task(copy).kind, TaskKind::kCopyD2H);
        EXPECT_NE(std::find(g.deps_begin(copy), g.deps_end(copy), last_write), g.deps_end(copy));
      }
      last_write = id;
    }
    if (t.kind == TaskKind::kNvmeRead) {
      step_reads += t.bytes;
      EXPECT_NE(std::find(g.deps_begin(id), g.deps_end(id), last_write), g.deps_end(id));
    }
  }
  EXPECT_GE(writes, 3);
  EXPECT_NEAR(grad_writes, 4.0 * part, 4.0 * writes);
  EXPECT_DOUBLE_EQ(step_reads, 16.0 * part);
}

// ZeRO-Infinity with the parameters on NVMe: every gather (forward, backward) first reads the
// layer's partition from the drive into the swapper's pinned buffers, then copies it to the GPU;
// after the optimizer step each sub-group on the drive writes its updated 16-bit partition back.
// With max_in_cpu covering the partition nothing is read or written for the parameters.
TEST_F(StepBuilderTest, NvmeParametersAreReadAtEveryGatherAndWrittenAfterTheStep) {
  Plan p = MakePlan(3, 1);
  p.zero.offload_optimizer.device = OffloadDevice::kCpu;
  p.zero.offload_param.device = OffloadDevice::kNvme;
  p.zero.offload_param.nvme_path = "/local_nvme";
  p.zero.offload_param.max_in_cpu = 0;
  p.zero.offload_param.buffer_size = 50'000'000;
  // No reuse window and no prefetch (whose marks would keep the layers gathered into the
  // backward): every layer is gathered again for its backward.
  p.zero.stage3_max_reuse_distance = 0;
  p.zero.stage3_prefetch_bucket_size = 0;
  auto sums = [&](const BuiltStep& b, double* read, double* h2d, double* written, int* reads) {
    *read = *h2d = *written = 0;
    *reads = 0;
    const StepGraph& g = b.graph;
    for (TaskId id = 0; id < static_cast<TaskId>(g.size()); ++id) {
      const Task& t = g.task(id);
      if (t.kind == TaskKind::kNvmeRead) {
        *read += t.bytes;
        ++*reads;
      } else if (t.kind == TaskKind::kNvmeWrite) {
        *written += t.bytes;
      } else if (t.kind == TaskKind::kCopyH2D && t.layer >= 0) {
        *h2d += t.bytes;
        // The copy to the GPU waits for its read.
        bool after_read = false;
        for (const TaskId* d = g.deps_begin(id); d != g.deps_end(id); ++d) {
          after_read |= g.task(*d).kind == TaskKind::kNvmeRead && g.task(*d).bytes == t.bytes;
        }
        if (p.zero.offload_param.max_in_cpu == 0) EXPECT_TRUE(after_read) << "H2D task " << id;
      }
    }
  };
  double read, h2d, written;
  int reads;
  const BuiltStep b = Build(p);
  sums(b, &read, &h2d, &written, &reads);
  // gpt2's embeddings, 12 blocks and tied head, each gathered for its forward and backward.
  EXPECT_EQ(reads, 2 * 14);
  EXPECT_DOUBLE_EQ(read, h2d);
  EXPECT_DOUBLE_EQ(written, 2.0 * b.facts.partition_numel);
  EXPECT_EQ(Init(b, kNvme, MemCategory::kParams16), 2 * b.facts.partition_numel);

  p.zero.offload_param.max_in_cpu = 1'000'000'000;
  const BuiltStep c = Build(p);
  sums(c, &read, &h2d, &written, &reads);
  EXPECT_EQ(reads, 0);
  EXPECT_DOUBLE_EQ(written, 0.0);
  EXPECT_GT(h2d, 0.0);
  EXPECT_EQ(Init(c, kNvme, MemCategory::kParams16), 0);
}

// Gradient accumulation: GAS = 4 gives four micro-steps, each with a forward of every layer,
// and one optimizer step.
TEST_F(StepBuilderTest, GradientAccumulationRepeatsMicroSteps) {
  Plan p = MakePlan(2, 4);
  p.grad_accum = 4;
  const BuiltStep b = Build(p);
  const int layers = static_cast<int>(w_->layers.size());
  EXPECT_EQ(Count(b, TaskKind::kForward), 4 * layers);
  EXPECT_EQ(Count(b, TaskKind::kBackward), 4 * layers);
  for (int m = 0; m < 4; ++m) EXPECT_EQ(Count(b, TaskKind::kForward, m), layers) << m;
  EXPECT_EQ(Count(b, TaskKind::kForward, 4), 0);
  EXPECT_EQ(Count(b, TaskKind::kGpuOptimizer), 1);
}

// Stage 2 reduces in the backward hooks every micro-step; stage 1 without overlap_comm reduces
// only at the accumulation boundary. Either way each reduction pass covers every gradient once:
// 2 bytes x Psi (bf16) in all-reduce messages.
TEST_F(StepBuilderTest, StageTwoReducesEveryMicroStepStageOneOnlyAtTheBoundary) {
  for (int stage : {1, 2}) {
    Plan p = MakePlan(stage, 4);
    p.grad_accum = 4;
    ASSERT_FALSE(p.zero.OverlapComm());
    const BuiltStep b = Build(p);
    for (int m = 0; m < 4; ++m) {
      SCOPED_TRACE(testing::Message() << "stage " << stage << " micro " << m);
      const bool reduces = stage == 2 || m == 3;
      if (reduces) {
        EXPECT_GT(Count(b, TaskKind::kAllReduce, m), 0);
        EXPECT_DOUBLE_EQ(SumBytes(b, TaskKind::kAllReduce, m), 2.0 * psi_);
      } else {
        EXPECT_EQ(Count(b, TaskKind::kAllReduce, m), 0);
      }
    }
    // No reduce-scatter below stage 3; the post-step all-gather of the 16-bit partitions.
    EXPECT_EQ(Count(b, TaskKind::kReduceScatter), 0);
    EXPECT_EQ(Count(b, TaskKind::kAllGather), 1);
  }
}

// The passes over each bucket besides the collective (docs/deepspeed-facts.md, "The passes
// over each bucket"), with one rank too. Stages 1-2: the hook's copy into the ipg bucket on the
// compute stream whatever overlap_comm says; average_tensor's divide of the whole bucket
// (reduce_scatter) and copy_grads_in_partition's copy of every gradient, on the reduction
// stream under overlap_comm. ZeRO-3: the hook's copy, reduce_scatter_coalesced's cat and divide,
// and partition_grads' copy, on the side stream. 2-byte gradients: 4 bytes per element a pass.
TEST_F(StepBuilderTest, BucketPassesWithOneRank) {
  for (int stage : {1, 2, 3}) {
    for (bool overlap : {false, true}) {
      SCOPED_TRACE(testing::Message() << "stage " << stage << " overlap " << overlap);
      Plan p = MakePlan(stage, 1);
      p.zero.overlap_comm = overlap;
      const BuiltStep b = Build(p);
      double hook_copy = 0, hook_copy_side = 0, post = 0, post_compute = 0;
      int post_kernels = 0;
      for (const Task& t : b.graph.tasks()) {
        if (t.kind != TaskKind::kGradCopy) continue;
        if (t.layer >= 0) {  // the hook's copy of a layer's gradients
          hook_copy += t.bytes;
          if (t.resource != Resource::kCompute) hook_copy_side += t.bytes;
        } else if (t.index >= 0) {  // a bucket's passes after its collective
          post += t.bytes;
          post_kernels += t.kernels;
          if (t.resource == Resource::kCompute) post_compute += t.bytes;
        }
      }
      EXPECT_DOUBLE_EQ(hook_copy, 4.0 * psi_);
      const bool side = stage == 3 ? p.zero.OverlapComm() : false;
      EXPECT_DOUBLE_EQ(hook_copy_side, side ? 4.0 * psi_ : 0.0);
      // Divide and partition copy (stages 1-2); cat, divide and copy (stage 3, gpt2's buckets
      // hold several tensors).
      EXPECT_DOUBLE_EQ(post, (stage == 3 ? 12.0 : 8.0) * psi_);
      EXPECT_GT(post_kernels, 0);
      EXPECT_DOUBLE_EQ(post_compute, p.zero.OverlapComm() ? 0.0 : post);
    }
  }
}

// ZeRO 1/2 grads_in_partition holds the whole tensors that overlap the rank's partition
// (stage_1_and_2.copy_grads_in_partition sums the numel of params_in_partition); the graph takes
// the largest rank. gpt2's wte (38.6M of 124M elements) makes the overhang large at 8 ranks.
TEST_F(StepBuilderTest, GradsInPartitionHoldsTheWholeEdgeTensorsOfTheLargestRank) {
  const std::vector<LayerParams> lp = ComputeLayerParams(*w_, 0);
  for (int n : {1, 2, 3, 8}) {
    SCOPED_TRACE(testing::Message() << n << " ranks");
    int64_t worst = 0;
    for (int r = 0; r < n; ++r) {
      const int64_t expect = OverlapNumel(n, r);
      EXPECT_EQ(GradsInPartitionNumel(lp, psi_, n, r), expect) << "rank " << r;
      worst = std::max(worst, expect);
    }
    EXPECT_EQ(MaxGradsInPartitionNumel(lp, psi_, n), worst);
    if (n > 1) {
      EXPECT_GT(worst, CeilDiv(psi_, n));
    }
    const BuiltStep b = Build(MakePlan(2, n));
    EXPECT_EQ(b.facts.grads_in_partition_numel, worst);
    Plan off = MakePlan(2, n);
    off.grad_accum = 2;
    off.zero.offload_optimizer.device = OffloadDevice::kCpu;
    // accumulated_grads_in_cpu: one whole buffer per owned parameter, 16-bit.
    EXPECT_EQ(Init(Build(off), kPageable, MemCategory::kGradients), 4 * CeilDiv(psi_, n) + 2 * worst);
  }
}

// Stage 2 with GAS > 1: the first micro-step's grads_in_partition stays as averaged_gradients
// until the step; every later micro-step allocates a second one, added into the first and freed
// at its epilogue. Stage 1 reduces once, so it has one.
TEST_F(StepBuilderTest, StageTwoAccumulationHoldsTwoPartitionBuffers) {
  for (int stage : {1, 2}) {
    SCOPED_TRACE(testing::Message() << "stage " << stage);
    Plan p = MakePlan(stage, 2);
    p.grad_accum = 3;
    const BuiltStep b = Build(p);
    const int64_t buffer = 2 * b.facts.grads_in_partition_numel;
    int allocs = 0;
    for (TaskId id = 0; id < static_cast<TaskId>(b.graph.tasks().size()); ++id) {
      for (const MemEffect* e = b.graph.effects_begin(id); e != b.graph.effects_end(id); ++e) {
        allocs += e->category == MemCategory::kGradients && e->bytes == buffer;
      }
    }
    EXPECT_EQ(allocs, stage == 2 ? 3 : 1);
    // At the end of micro-step 0 one buffer is held; in micro-steps 1 and 2 two.
    const int64_t largest_layer_grads = 2 * [&] {
      int64_t m = 0;
      for (const Layer& l : w_->layers) m = std::max(m, l.params);
      return m;
    }();
    if (stage == 2) {
      EXPECT_GE(CategoryPeak(b, kGpu, MemCategory::kGradients, 1), 2 * buffer);
      EXPECT_LE(CategoryPeak(b, kGpu, MemCategory::kGradients, 0), buffer + largest_layer_grads);
    }
    // The step frees the first; nothing is left.
    int64_t left = 0;
    for (TaskId id = 0; id < static_cast<TaskId>(b.graph.tasks().size()); ++id) {
      for (const MemEffect* e = b.graph.effects_begin(id); e != b.graph.effects_end(id); ++e) {
        if (e->category == MemCategory::kGradients && e->space == MemSpace::kGpu) left += e->bytes;
      }
    }
    EXPECT_EQ(left, 0);
  }
}

// allreduce_bucket flattens the bucket: a copy when the bucket's slices belong to more than one
// rank (it crosses a partition edge), none at one rank; a bucket never exceeds
// reduce_bucket_size unless one tensor does (DeepSpeed buckets per parameter).
TEST_F(StepBuilderTest, BucketFlattenCopyOnlyAcrossPartitionEdges) {
  for (int n : {1, 2}) {
    SCOPED_TRACE(testing::Message() << n << " ranks");
    Plan p = MakePlan(1, n);
    p.zero.reduce_bucket_size = 10'000'000;
    const BuiltStep b = Build(p);
    const int64_t ipg = 2 * p.zero.reduce_bucket_size;
    const int64_t peak = CategoryPeak(b, kGpu, MemCategory::kCommBuffers);
    int64_t largest = 0;
    for (const LayerParams& l : ComputeLayerParams(*w_, 0)) largest = std::max(largest, l.largest);
    if (n == 1) {
      EXPECT_EQ(peak, ipg);
    } else {
      EXPECT_GT(peak, ipg);
      EXPECT_LE(peak, ipg + 2 * std::max(p.zero.reduce_bucket_size, largest));
    }
    double reduced = 0;
    for (const Task& t : b.graph.tasks()) {
      if (t.kind != TaskKind::kAllReduce) continue;
      reduced += t.bytes;
      EXPECT_LE(t.bytes, 2.0 * std::max(p.zero.reduce_bucket_size, largest));
    }
    EXPECT_DOUBLE_EQ(reduced, 2.0 * psi_);
  }
}

// Stage 1 with overlap_comm registers the hooks, but they reduce only at the accumulation
// boundary; before it the gradients accumulate in param.grad, allocated once (2 bytes x psi).
TEST_F(StepBuilderTest, StageOneWithOverlapStillReducesOnlyAtTheBoundary) {
  Plan p = MakePlan(1, 4);
  p.grad_accum = 3;
  p.zero.overlap_comm = true;
  const BuiltStep b = Build(p);
  EXPECT_EQ(Count(b, TaskKind::kAllReduce, 0), 0);
  EXPECT_EQ(Count(b, TaskKind::kAllReduce, 1), 0);
  EXPECT_DOUBLE_EQ(SumBytes(b, TaskKind::kAllReduce, 2), 2.0 * psi_);
  int64_t grads_allocated = 0;
  for (TaskId id = 0; id < b.graph.size(); ++id) {
    if (b.graph.task(id).kind != TaskKind::kBackward) continue;
    for (const MemEffect* e = b.graph.effects_begin(id); e != b.graph.effects_end(id); ++e) {
      if (e->category == MemCategory::kGradients && e->bytes > 0) grads_allocated += e->bytes;
    }
  }
  EXPECT_EQ(grads_allocated, 2 * psi_);
}

// Stage 1 keeps the gradient of a parameter larger than the bucket when the parameter lies
// outside the rank's partition: the hook does not copy it into the bucket
// (extra_large_param_to_reduce) and reduce_ipg_grads clears no gradient at stage 1, so it stays
// until the epilogue's zero_grad (DeepSpeed 0.14.5 stage_1_and_2.py; t5-11b's 8-rank plan,
// docs/validation/deepspeed/emu13-1207). Stage 2 clears it after the reduction. The graph keeps
// rank 0's (its partition's gradients come last). A 1.5M-element bucket makes gpt2's c_attn
// (1.77M) and MLP weights (2.36M) and its word embeddings larger than it.
TEST_F(StepBuilderTest, StageOneKeepsExtraLargeGradientsOutsideItsPartitionUntilTheEpilogue) {
  const int64_t rbs = 1'500'000;
  for (int ranks : {1, 4}) {
    SCOPED_TRACE(testing::Message() << ranks << " ranks");
    // Expected, from the tensor table: rank 0's partition is the flat buffer's first
    // ceil(psi / 2N) * 2 elements; tensors above the bucket that start at or after its end.
    const int64_t part = CeilDiv(psi_, 2 * ranks) * 2;
    int64_t at = 0, expect = 0;
    for (const TensorSpec& t : w_->tensors) {
      if (t.category != TensorCategory::kParameter) continue;
      if (ranks > 1 && t.numel > rbs && at >= part) expect += t.numel;
      at += t.numel;
    }
    if (ranks > 1) EXPECT_GT(expect, 10 * rbs);
    Plan p1 = MakePlan(1, ranks);
    p1.zero.overlap_comm = true;  // the hooks reduce during the backward
    p1.zero.reduce_bucket_size = rbs;
    const std::vector<LayerParams> lp = ComputeLayerParams(*w_, 0);
    int64_t listed = 0;
    for (int64_t n : RetainedGradNumels(lp, p1.zero, ranks, part)) listed += n;
    EXPECT_EQ(listed, expect);
    // Gradient bytes alive when the epilogue starts (the task that frees the two ipg buffers),
    // and after it.
    auto at_epilogue = [&](const Plan& p, int64_t* after) {
      const BuiltStep b = Build(p);
      int64_t live = Init(b, kGpu, MemCategory::kGradients);
      int64_t before = -1;
      for (TaskId id = 0; id < b.graph.size(); ++id) {
        bool epilogue = false;
        int64_t delta = 0;
        for (const MemEffect* e = b.graph.effects_begin(id); e != b.graph.effects_end(id); ++e) {
          if (e->space != MemSpace::kGpu) continue;
          if (e->category == MemCategory::kCommBuffers && e->bytes == -2 * 2 * rbs) epilogue = true;
          if (e->category == MemCategory::kGradients) delta += e->bytes;
        }
        if (epilogue && before < 0) {
          before = live;
          *after = live + delta;
        }
        live += delta;
      }
      EXPECT_GE(before, 0) << "no epilogue";
      return before;
    };
    Plan p2 = p1;
    p2.zero.stage = 2;
    int64_t after1 = 0, after2 = 0;
    const int64_t kept1 = at_epilogue(p1, &after1);
    const int64_t kept2 = at_epilogue(p2, &after2);
    EXPECT_EQ(kept1 - kept2, 2 * expect);  // bf16 gradients
    EXPECT_EQ(after1, after2);
  }
}

// Ranks of stages 1-2 differ in when grads_in_partition comes: copy_grads_in_partition
// allocates it at the first bucket that holds one of the rank's gradients. gpt2 on 4 ranks:
// the last rank's partition is the model's last blocks and ln_f, whose gradients fill the
// backward's first bucket; rank 0's lies inside wte (38.6 M of 124 M elements), whose gradient
// the tied head and the embedding complete last, so its buffer comes at the last bucket. The
// rank class allocates the largest rank's buffer at the first bucket, so its peak bounds every
// rank's. Each rank's buffer is its own size (the tensors overlapping its partition).
TEST_F(StepBuilderTest, EachRankAllocatesItsGradientPartitionAtItsFirstBucket) {
  const int ranks = 4;
  Plan p = MakePlan(2, ranks);
  p.zero.overlap_comm = true;
  p.zero.reduce_bucket_size = 3'000'000;  // several buckets per micro-step
  // Which reduction of micro-step 0 allocates the buffer (a 16-bit gradients block of
  // |numel| elements), and how many reductions there are.
  auto allocating_flush = [&](const BuiltStep& b, int64_t numel, int* flushes) {
    int at = -1, n = 0;
    for (TaskId id = 0; id < b.graph.size(); ++id) {
      const Task& t = b.graph.task(id);
      if (t.kind != TaskKind::kAllReduce || t.micro_step != 0) continue;
      for (const MemEffect* e = b.graph.effects_begin(id); e != b.graph.effects_end(id); ++e) {
        if (e->space == MemSpace::kGpu && e->category == MemCategory::kGradients &&
            e->bytes == 2 * numel) {
          EXPECT_EQ(at, -1) << "allocated twice";
          at = n;
        }
      }
      ++n;
    }
    *flushes = n;
    return at;
  };
  int64_t widest = 0;
  for (int r = 0; r < ranks; ++r) widest = std::max(widest, OverlapNumel(ranks, r));
  int flushes = 0;
  const BuiltStep cls = Build(p);
  EXPECT_EQ(cls.facts.rank, kRankClass);
  EXPECT_EQ(cls.facts.grads_in_partition_numel, widest);
  EXPECT_EQ(allocating_flush(cls, widest, &flushes), 0);
  ASSERT_GE(flushes, 4);
  const int64_t class_peak = CategoryPeak(cls, kGpu, MemCategory::kGradients);
  for (int r : {0, 1, ranks - 1}) {
    SCOPED_TRACE(testing::Message() << "rank " << r);
    const BuiltStep b = Build(p, false, r);
    EXPECT_EQ(b.facts.rank, r);
    const int64_t own = OverlapNumel(ranks, r);
    EXPECT_EQ(b.facts.grads_in_partition_numel, own);
    int n = 0;
    const int at = allocating_flush(b, own, &n);
    EXPECT_EQ(n, flushes);
    if (r == 0) EXPECT_EQ(at, flushes - 1);
    if (r == ranks - 1) EXPECT_EQ(at, 0);
    if (r == 1) {
      EXPECT_GT(at, 0);
      EXPECT_LT(at, flushes - 1);
    }
    EXPECT_LE(CategoryPeak(b, kGpu, MemCategory::kGradients), class_peak);
  }
  // A rank outside the data-parallel group is an internal error, not a graph.
  const Workload& w = *w_;
  EXPECT_FALSE(
      BuildStepGraph(w, ComputeLayerParams(w, 0), p, 0, StepGraphForm::kCompact, ranks).ok());
}

// Stage 1's kept extra-large gradients are each rank's own: those that do not overlap its
// partition (the same count from the tensor table for the first, a middle and the last rank).
TEST_F(StepBuilderTest, StageOneKeptGradientsArePerRank) {
  const int ranks = 4;
  const int64_t rbs = 1'500'000;
  Plan p = MakePlan(1, ranks);
  p.zero.overlap_comm = true;
  p.zero.reduce_bucket_size = rbs;
  const int64_t part = CeilDiv(psi_, 2 * ranks) * 2;
  std::vector<int64_t> kept;
  for (int r : {0, 2, ranks - 1}) {
    SCOPED_TRACE(testing::Message() << "rank " << r);
    int64_t at = 0, expect = 0;
    for (const TensorSpec& t : w_->tensors) {
      if (t.category != TensorCategory::kParameter) continue;
      const bool mine = at < part * (r + 1) && at + t.numel > part * r;
      if (t.numel > rbs && !mine) expect += t.numel;
      at += t.numel;
    }
    EXPECT_EQ(Build(p, false, r).facts.kept_grad_numel, expect);
    kept.push_back(expect);
  }
  // Rank 0 owns wte (the only tensor its partition touches) and keeps every block's; the others
  // own some blocks' and keep wte's among the rest.
  EXPECT_NE(kept[0], kept[1]);
  EXPECT_NE(kept[1], kept[2]);
  EXPECT_EQ(Build(p).facts.kept_grad_numel, kept[0]);  // the rank class keeps rank 0's
}

// offload_optimizer.ratio < 1 (stage 3): sub-groups i < int(ratio * count) step on the CPU, the
// others keep fp32 master, Adam states and fp32 gradients on the GPU.
TEST_F(StepBuilderTest, PartialOptimizerOffloadSplitsSubGroups) {
  Plan p = MakePlan(3, 2);
  p.zero.offload_optimizer.device = OffloadDevice::kCpu;
  const int64_t part = CeilDiv(psi_, 2);
  p.zero.sub_group_size = CeilDiv(part, 4);  // four sub-groups
  p.zero.offload_optimizer.ratio = 0.5;      // the first two on the CPU
  const BuiltStep b = Build(p);
  // _create_fp16_sub_groups: a sub-group ends with the tensor whose partition (ceil(numel / 2))
  // brings it to sub_group_size or beyond.
  std::vector<int64_t> sizes;
  int64_t run = 0;
  for (const TensorSpec& t : w_->tensors) {
    if (t.category != TensorCategory::kParameter) continue;
    run += CeilDiv(t.numel, 2);
    if (run >= p.zero.sub_group_size) {
      sizes.push_back(run);
      run = 0;
    }
  }
  if (run > 0) sizes.push_back(run);
  ASSERT_EQ(b.facts.subgroups, static_cast<int64_t>(sizes.size()));
  ASSERT_EQ(b.facts.subgroups, 4);
  EXPECT_EQ(b.facts.largest_subgroup, *std::max_element(sizes.begin(), sizes.end()));
  EXPECT_GT(b.facts.largest_subgroup, p.zero.sub_group_size);  // wte's partition alone
  const int64_t off = sizes[0] + sizes[1], on = part - off;
  EXPECT_EQ(Init(b, kPageable, MemCategory::kMaster), 4 * off);
  EXPECT_EQ(Init(b, kPageable, MemCategory::kOptimizerStates), 8 * off);
  EXPECT_EQ(Init(b, kGpu, MemCategory::kMaster), 4 * on);
  EXPECT_EQ(Init(b, kGpu, MemCategory::kOptimizerStates), 8 * on);
  EXPECT_EQ(Count(b, TaskKind::kCpuOptimizer), 2);
  // The two GPU sub-groups step on the GPU (after the gradient-norm pass).
  int gpu_steps = 0;
  for (TaskId id = 0; id < b.graph.size(); ++id) {
    const Task& t = b.graph.task(id);
    if (t.kind == TaskKind::kGpuOptimizer && t.elements > 0) ++gpu_steps;
  }
  EXPECT_EQ(gpu_steps, 2);
}

// Stage 3 with the optimizer on the CPU and the parameters on the GPU: each sub-group's
// updated fp32 partition goes back through a host cast into a fresh pageable temporary, whose
// 16-bit bytes the cast's threads fault in (the CPU task carries them); with the parameters on
// the CPU the cast writes the pinned 16-bit partition and faults nothing.
TEST_F(StepBuilderTest, Stage3SubGroupCastsFaultInTheirTemporaryOnlyWithParametersOnTheGpu) {
  Plan p = MakePlan(3, 2);
  p.zero.offload_optimizer.device = OffloadDevice::kCpu;
  p.zero.sub_group_size = CeilDiv(CeilDiv(psi_, 2), 3);
  auto faults = [](const BuiltStep& b) {
    double cpu = 0, other = 0;
    for (const Task& t : b.graph.tasks()) {
      (t.kind == TaskKind::kCpuOptimizer ? cpu : other) += t.host_fault_bytes;
    }
    return std::make_pair(cpu, other);
  };
  const BuiltStep gpu_params = Build(p);
  double elements = 0;
  for (const Task& t : gpu_params.graph.tasks()) {
    if (t.kind == TaskKind::kCpuOptimizer) {
      elements += t.elements;
      EXPECT_EQ(t.host_fault_bytes, 2 * t.elements);  // bf16: one fresh temporary per sub-group
    }
  }
  EXPECT_EQ(elements, static_cast<double>(CeilDiv(psi_, 2)));
  EXPECT_EQ(faults(gpu_params).first, 2 * elements);
  p.zero.offload_param.device = OffloadDevice::kCpu;
  EXPECT_EQ(faults(Build(p)).first, 0);
  // Priced at the profile's parallel page-fault rate, on top of Adam and the host passes.
  HardwareProfile hw = *FindHardwareProfile("h200-sxm", DSPLAN_TEST_DATA_DIR);
  hw.host.parallel_alloc_bytes_per_s.value = 8e9;
  CostModel cm(hw, Precision::kBf16);
  Task t;
  t.kind = TaskKind::kCpuOptimizer;
  t.resource = Resource::kCpu;
  t.elements = 1e8;
  t.bytes = 14e8;
  const double plain = cm.TaskSeconds(t, {}, 16);
  t.host_fault_bytes = 2e8;
  EXPECT_NEAR(cm.TaskSeconds(t, {}, 16) - plain, 2e8 / 8e9, 1e-12);
}

// stage3_max_live_parameters caps prefetching: with 0 no module is gathered before the previous
// module's forward has been issued; with the defaults gpt2's small blocks are prefetched, all of
// them before the first forward.
TEST_F(StepBuilderTest, MaxLiveParametersCapsPrefetch) {
  auto prefetched = [](const BuiltStep& b) {
    int n = 0;
    TaskId last_forward = -1;
    int last_forward_layer = -1;
    for (TaskId id = 0; id < b.graph.size(); ++id) {
      const Task& t = b.graph.task(id);
      if (t.micro_step != 0) continue;
      if (t.kind == TaskKind::kForward) {
        last_forward = id;
        last_forward_layer = t.layer;
      }
      // A gather for a layer beyond the next one to run, issued before that one's forward.
      if (t.kind == TaskKind::kAllGather && t.layer > last_forward_layer + 1 && last_forward >= -1) ++n;
    }
    return n;
  };
  Plan p = MakePlan(3, 4);
  EXPECT_GT(prefetched(Build(p)), 0);
  // DeepSpeed's prefetcher runs at every module's hook, so it keeps about max live gathered
  // ahead (tools/dev/zero3_coordinator_emu.py): gpt2's 124 M parameters are all gathered
  // before the first layer's forward; with max live 60 M only until 60 M are (the embeddings'
  // 39 M and three 7 M blocks).
  auto before_first_forward = [](const BuiltStep& b) {
    int n = 0;
    for (const Task& t : b.graph.tasks()) {
      if (t.micro_step != 0) continue;
      if (t.kind == TaskKind::kForward) break;
      n += t.kind == TaskKind::kAllGather;
    }
    return n;
  };
  int gathered_layers = 0;
  for (const LayerParams& l : ComputeLayerParams(*w_, 100'000)) {
    gathered_layers += l.numel - l.persistent_numel + l.tied_numel > 0;
  }
  EXPECT_EQ(before_first_forward(Build(p)), gathered_layers);
  p.zero.stage3_max_live_parameters = 60'000'000;
  EXPECT_EQ(before_first_forward(Build(p)), 4);
  p.zero.stage3_max_live_parameters = 0;
  EXPECT_EQ(prefetched(Build(p)), 0);
}

// One GPU: nothing to reduce across ranks at stage 0.
TEST_F(StepBuilderTest, StageZeroOnOneGpuHasNoCollectives) {
  const BuiltStep b = Build(MakePlan(0, 1, Precision::kFp16));
  EXPECT_EQ(Count(b, TaskKind::kAllReduce) + Count(b, TaskKind::kAllGather) +
                Count(b, TaskKind::kReduceScatter),
            0);
}

// Stage 3 gathers parameters per layer in forward and backward and reduce-scatters gradients
// (2 B x Psi per micro-step in messages).
TEST_F(StepBuilderTest, StageThreeGathersAndReduceScatters) {
  Plan p = MakePlan(3, 4);
  p.grad_accum = 2;
  const BuiltStep b = Build(p);
  for (int m = 0; m < 2; ++m) {
    EXPECT_GT(Count(b, TaskKind::kAllGather, m), 0);
    EXPECT_GT(Count(b, TaskKind::kReduceScatter, m), 0);
    EXPECT_DOUBLE_EQ(SumBytes(b, TaskKind::kReduceScatter, m), 2.0 * psi_);
  }
  // Every gathered layer is gathered at least once in forward and once in backward.
  int gathered_layers = 0;
  for (const Layer& l : w_->layers) gathered_layers += l.params > 0;
  EXPECT_GE(Count(b, TaskKind::kAllGather, 0), gathered_layers / 2);
  EXPECT_EQ(b.facts.wrapper, OptimizerWrapper::kZero3);
}

// gpt2 ties lm_head to wte: the head module's fetch hook gathers wte (the head owns no
// parameter of its own). With stage3_max_reuse_distance 0 nothing is kept, so wte is gathered
// for the embedding and for the head, in forward and in backward.
TEST_F(StepBuilderTest, TiedHeadGathersTheWordEmbeddingsUnderStageThree) {
  const std::vector<LayerParams> lp = ComputeLayerParams(*w_, 100'000);
  int head = -1;
  for (size_t l = 0; l < w_->layers.size(); ++l) {
    if (w_->layers[l].kind == LayerKind::kHead) head = static_cast<int>(l);
  }
  ASSERT_GE(head, 0);
  EXPECT_EQ(w_->layers[head].params, 0);
  const int64_t wte = w_->spec.vocab_size * w_->spec.hidden_size;
  EXPECT_EQ(lp[head].tied_numel, wte);
  Plan p = MakePlan(3, 2);
  p.zero.stage3_max_reuse_distance = 0;
  p.zero.stage3_prefetch_bucket_size = 0;
  const BuiltStep b = Build(p);
  int head_gathers = 0;
  for (const Task& t : b.graph.tasks()) {
    if (t.kind == TaskKind::kAllGather && t.layer == head) {
      ++head_gathers;
      EXPECT_DOUBLE_EQ(t.bytes, 2.0 * wte);
    }
  }
  EXPECT_EQ(head_gathers, 2);
  // Untied, nothing is gathered for the head.
  Workload untied = *w_;
  untied.spec.tie_word_embeddings = false;
  EXPECT_EQ(ComputeLayerParams(untied, 100'000)[head].tied_numel, 0);
}

// A flush that a layer's first gradient triggers runs in that gradient's hook, early in the
// layer's backward: its effects (the first flush allocates grads_in_partition) come before the
// layer's working memory, not after the whole layer (falcon-7b's last rank of 8 peaks in its
// last block's attention backward with the partition buffer already there: tiedmh-1206d).
// Stage 2, two ranks, a bucket that holds the final norm (1,536 elements) and no block: the
// first reduce comes before the backward of the second layer with parameters (in backward
// order, the last block), whose first gradient overfills the bucket the norm left.
TEST_F(StepBuilderTest, AFlushAtALayersFirstGradientComesBeforeItsBackward) {
  Plan p = MakePlan(2, 2);
  p.zero.reduce_bucket_size = 2'000;
  const BuiltStep b = Build(p);
  TaskId first_reduce = -1;
  std::vector<TaskId> param_backwards;  // backward tasks of layers with parameters, in id order
  for (TaskId id = 0; id < b.graph.size(); ++id) {
    const Task& t = b.graph.task(id);
    if (t.micro_step != 0) continue;
    if (first_reduce < 0 &&
        (t.kind == TaskKind::kReduceScatter || t.kind == TaskKind::kAllReduce)) {
      first_reduce = id;
    }
    if (t.kind == TaskKind::kBackward && w_->layers[t.layer].params > 0) {
      param_backwards.push_back(id);
    }
  }
  ASSERT_GE(first_reduce, 0);
  ASSERT_GE(param_backwards.size(), 2u);
  EXPECT_GT(first_reduce, param_backwards[0]);
  EXPECT_LT(first_reduce, param_backwards[1]);
  // The partition buffer is the first flush's allocation.
  const int64_t part = 2 * b.facts.grads_in_partition_numel;
  bool allocates_partition = false;
  for (const MemEffect* e = b.graph.effects_begin(first_reduce);
       e != b.graph.effects_end(first_reduce); ++e) {
    allocates_partition |= e->category == MemCategory::kGradients && e->bytes == part;
  }
  EXPECT_TRUE(allocates_partition);
}

// gpt2 ties lm_head to wte, one leaf used twice: autograd runs its AccumulateGrad (and ZeRO's
// hook) once, at the embedding's backward, and holds the head's gradient of the whole table
// until then; the embedding's own gradient and the out-of-place sum come on top of it there
// (allocator histories of qwen2-0.5b, bloom-1b7, gemma-2b). Walks the gradient bytes alive
// through micro-step 0's backward, tied against untied, at stages 1-3.
TEST_F(StepBuilderTest, TiedHeadGradientIsHeldUntilTheEmbeddingBackward) {
  const int64_t table_bytes = 2 * w_->spec.vocab_size * w_->spec.hidden_size;
  int head = -1, embedding = -1;
  for (size_t l = 0; l < w_->layers.size(); ++l) {
    if (w_->layers[l].kind == LayerKind::kHead) head = static_cast<int>(l);
    if (w_->layers[l].kind == LayerKind::kEmbedding && embedding < 0 && w_->layers[l].params > 0) {
      embedding = static_cast<int>(l);
    }
  }
  ASSERT_GE(head, 0);
  ASSERT_GE(embedding, 0);
  Workload untied = *w_;
  untied.spec.tie_word_embeddings = false;
  for (int stage : {1, 2, 3}) {
    SCOPED_TRACE(stage);
    // Gradient and temporary bytes alive after each backward task of micro-step 0 (by layer),
    // and the most alive inside the embedding's backward.
    auto walk = [&](const Workload& w, std::map<int, int64_t>* after, int64_t* inside_embedding) {
      const Plan plan = MakePlan(stage, 2);
      const int64_t threshold = stage == 3 ? plan.zero.stage3_param_persistence_threshold : 0;
      Result<BuiltStep> built = BuildStepGraph(w, ComputeLayerParams(w, threshold), plan);
      ASSERT_TRUE(built.ok()) << built.status().ToString();
      const StepGraph& g = built->graph;
      int64_t live = 0;
      *inside_embedding = 0;
      for (TaskId id = 0; id < g.size(); ++id) {
        const Task& t = g.task(id);
        for (const MemEffect* e = g.effects_begin(id); e != g.effects_end(id); ++e) {
          // The held buffers are autograd's (temporaries), the sum param.grad (gradients).
          if (e->space != MemSpace::kGpu || (e->category != MemCategory::kGradients &&
                                             e->category != MemCategory::kTemporaries)) {
            continue;
          }
          live += e->bytes;
          if (t.kind == TaskKind::kBackward && t.micro_step == 0 && t.layer == embedding) {
            *inside_embedding = std::max(*inside_embedding, live);
          }
        }
        if (t.kind == TaskKind::kBackward && t.micro_step == 0) (*after)[t.layer] = live;
      }
    };
    std::map<int, int64_t> tied_after, untied_after;
    int64_t tied_inside = 0, untied_inside = 0;
    walk(*w_, &tied_after, &tied_inside);
    walk(untied, &untied_after, &untied_inside);
    // From the head's backward to the embedding's, one table more (the untied head's own
    // weight gradient is a parameter of its own there: subtract it).
    const int64_t untied_head_grad = 2 * untied.layers[head].params;
    EXPECT_EQ(tied_after[head] - (untied_after[head] - untied_head_grad), table_bytes);
    for (int l = embedding + 1; l < head; ++l) {
      if (!tied_after.count(l)) continue;
      EXPECT_EQ(tied_after[l] - (untied_after[l] - untied_head_grad), table_bytes) << l;
    }
    // Inside the embedding's backward: its own gradient and the sum on top of the held one.
    EXPECT_EQ(tied_inside - (untied_inside - untied_head_grad), 2 * table_bytes);
    // After it, only the sum, as param.grad (what the untied model has for wte).
    EXPECT_EQ(tied_after[embedding], untied_after[embedding] - untied_head_grad);
  }
}

// What is gathered when the backward starts (DeepSpeed 0.14.5's coordinator, replayed by
// tools/dev/zero3_coordinator_emu.py): a layer stays gathered after its forward when twice the
// gathered elements of the layers after it are under stage3_max_reuse_distance; in the
// forward's last modules the prefetcher gathers again, last layer first, what the backward needs
// until stage3_max_live_parameters are gathered; without prefetching nothing is gathered again
// before the backward. gpt2 at two ranks: the window keeps a layer when 2 x after < reuse.
TEST_F(StepBuilderTest, TheBackwardStartsWithTheLayersTheCoordinatorKeeps) {
  const int L = static_cast<int>(w_->layers.size());
  std::vector<int64_t> gathered(L, 0);  // gathered elements per layer (persistence 1e5)
  const std::vector<LayerParams> lp = ComputeLayerParams(*w_, 100'000);
  for (int l = 0; l < L; ++l) gathered[l] = lp[l].numel - lp[l].persistent_numel + lp[l].tied_numel;
  // Gathers issued after micro-step 0's last forward task and before its first backward task
  // (in order), and gathers during its backward.
  auto count = [&](const Plan& p, std::vector<int>* at_end, int* in_backward) {
    const BuiltStep b = Build(p);
    int last_fwd = -1;
    for (const Task& t : b.graph.tasks()) {
      if (t.micro_step == 0 && t.kind == TaskKind::kForward) last_fwd = std::max(last_fwd, t.layer);
    }
    at_end->clear();
    *in_backward = 0;
    bool forward_done = false, backward = false;
    for (const Task& t : b.graph.tasks()) {
      if (t.micro_step != 0) continue;
      if (t.kind == TaskKind::kBackward) backward = true;
      if (t.kind == TaskKind::kAllGather) {
        if (backward) ++*in_backward;
        else if (forward_done) at_end->push_back(t.layer);
      }
      if (t.kind == TaskKind::kForward && t.layer == last_fwd) forward_done = true;
    }
  };
  Plan p = MakePlan(3, 2);
  std::vector<int> at_end;
  int in_backward = 0;
  // Defaults (1e9 each): gpt2's 124 M parameters are all kept; nothing is gathered again.
  count(p, &at_end, &in_backward);
  EXPECT_TRUE(at_end.empty());
  EXPECT_EQ(in_backward, 0);
  // No reuse window: the prefetcher's marks for the backward keep every layer gathered after
  // its forward (124 M < max live), so nothing is gathered at the forward's end or in the
  // backward (tools/dev/zero3_coordinator_emu.py: no gather there either).
  p.zero.stage3_max_reuse_distance = 0;
  count(p, &at_end, &in_backward);
  std::vector<int> all;
  for (int l = L - 1; l >= 0; --l) {
    if (gathered[l] > 0) all.push_back(l);
  }
  EXPECT_TRUE(at_end.empty());
  EXPECT_EQ(in_backward, 0);
  // Max live 30 M: the prefetcher's marks reach only the tied head's 38.6 M table, which is
  // kept; every other gathered layer is released and gathered again in the backward.
  p.zero.stage3_max_live_parameters = 30'000'000;
  count(p, &at_end, &in_backward);
  EXPECT_TRUE(at_end.empty());
  EXPECT_EQ(in_backward, static_cast<int>(all.size()) - 1);
  // Without prefetching nothing is gathered again before the backward.
  p.zero.stage3_max_live_parameters = 1'000'000'000;
  p.zero.stage3_prefetch_bucket_size = 0;
  count(p, &at_end, &in_backward);
  EXPECT_TRUE(at_end.empty());
  EXPECT_EQ(in_backward, static_cast<int>(all.size()));
  // The window: reuse 2 x (the last block and the head's table) + 1 keeps exactly those two.
  int last_block = -1;
  for (int l = 0; l < L; ++l) {
    if (w_->layers[l].kind == LayerKind::kDecoderBlock) last_block = l;
  }
  int64_t after_last_block = 0;
  for (int l = last_block + 1; l < L; ++l) after_last_block += gathered[l];
  p.zero.stage3_max_reuse_distance = 2 * after_last_block + 1;
  count(p, &at_end, &in_backward);
  EXPECT_TRUE(at_end.empty());
  // Kept: the head and the last block; every other gathered layer is gathered in the backward.
  EXPECT_EQ(in_backward, static_cast<int>(all.size()) - 2);
}

// Gradient checkpointing: one recompute per checkpointed layer per micro-step, none without.
TEST_F(StepBuilderTest, CheckpointingAddsRecomputeTasks) {
  Plan p = MakePlan(2, 4);
  p.grad_accum = 2;
  EXPECT_EQ(Count(Build(p), TaskKind::kRecompute), 0);
  p.gradient_checkpointing = true;
  int checkpointed = 0;
  for (const Layer& l : w_gc_->layers) checkpointed += l.checkpointed;
  EXPECT_EQ(checkpointed, 12);  // gpt2's 12 blocks
  const BuiltStep b = Build(p, true);
  EXPECT_EQ(Count(b, TaskKind::kRecompute), 2 * checkpointed);
  EXPECT_EQ(Count(b, TaskKind::kRecompute, 0), checkpointed);
}

// Program order: every dependency points to an earlier task.
TEST_F(StepBuilderTest, DependenciesPointBackwards) {
  for (int stage : {0, 1, 2, 3}) {
    Plan p = MakePlan(stage, 4);
    p.grad_accum = 2;
    const BuiltStep b = Build(p);
    for (TaskId id = 0; id < b.graph.size(); ++id) {
      for (const TaskId* d = b.graph.deps_begin(id); d != b.graph.deps_end(id); ++d) {
        EXPECT_LT(*d, id) << "stage " << stage << " task " << id;
      }
    }
  }
}

// A steady-state step ends where it started on the GPU: everything allocated during the step
// is freed by its end (no leak in the effects).
TEST_F(StepBuilderTest, StepEndsWhereItStarted) {
  for (int stage : {1, 2, 3}) {
    for (int gas : {1, 3}) {
      SCOPED_TRACE(testing::Message() << "stage " << stage << " gas " << gas);
      Plan p = MakePlan(stage, 4);
      p.grad_accum = gas;
      const BuiltStep b = Build(p);
      int64_t delta = 0;
      for (TaskId id = 0; id < b.graph.size(); ++id) {
        for (const MemEffect* e = b.graph.effects_begin(id); e != b.graph.effects_end(id); ++e) {
          if (e->space == MemSpace::kGpu) delta += e->bytes;
        }
      }
      EXPECT_EQ(delta, 0);
    }
  }
}

}  // namespace
}  // namespace dsplan

namespace dsplan {
namespace {

// Stage 0 with bf16 is DeepSpeed's BF16_Optimizer (docs/stack-costs.md section 6): every
// engine.backward() ends with update_hp_grads (a widening copy and an fp32 add per parameter
// tensor), the boundary with the all-reduce's casts; the step keeps the norm, clip, Adam, copy
// back and fill, with Adam, the copy back and the fill after the host's last synchronisation.
TEST_F(StepBuilderTest, Bf16OptimizerUpdatesHpGradsInEachBackward) {
  Plan p = MakePlan(0, 1);
  p.grad_accum = 3;
  p.gradient_clipping = 1.0;
  const BuiltStep b = Build(p);
  ASSERT_EQ(b.facts.wrapper, OptimizerWrapper::kBf16Optimizer);
  const double P = static_cast<double>(psi_);
  auto unrolled = Unroll(b.graph, 1'000'000);
  ASSERT_TRUE(unrolled.ok()) << unrolled.status().ToString();
  int update = 0, casts = 0;
  for (const Task& t : unrolled->tasks()) {
    if (t.kind != TaskKind::kGradCopy || t.cast_up_bytes <= 0) continue;
    if (t.cast_down_bytes > 0) {
      // fp32 -> bf16 and back: 6 bytes per element each way, at the boundary only.
      ++casts;
      EXPECT_EQ(t.micro_step, 2);
      EXPECT_DOUBLE_EQ(t.cast_down_bytes, 6 * P);
      EXPECT_DOUBLE_EQ(t.cast_up_bytes, 6 * P);
    } else {
      // bf16 -> fp32 (6 B) plus the fp32 add (12 B) per element.
      ++update;
      EXPECT_DOUBLE_EQ(t.cast_up_bytes, 6 * P);
      EXPECT_DOUBLE_EQ(t.bytes, 18 * P);
    }
  }
  EXPECT_EQ(update, 3);  // one per micro-step
  EXPECT_EQ(casts, 1);
  int steps = 0;
  for (const Task& t : b.graph.tasks()) {
    if (t.kind != TaskKind::kGpuOptimizer) continue;
    ++steps;
    EXPECT_EQ(t.step_stage, 0);
    EXPECT_TRUE(t.step_clip);
    // FusedAdam 28 B, the copy back 6 B and the fill 4 B per element after the last sync; the
    // norm's read (4) and the clip's mul_ (8) before it.
    EXPECT_DOUBLE_EQ(t.after_sync_bytes, 38 * P);
    EXPECT_DOUBLE_EQ(t.bytes, 50 * P);
  }
  EXPECT_EQ(steps, 1);
  // Without clipping the step has no clip pass.
  p.gradient_clipping = 0;
  for (const Task& t : Build(p).graph.tasks()) {
    if (t.kind == TaskKind::kGpuOptimizer) {
      EXPECT_FALSE(t.step_clip);
      EXPECT_DOUBLE_EQ(t.bytes, 42 * P);
    }
  }
}

}  // namespace
}  // namespace dsplan

namespace dsplan {
namespace {

// The backward's working memory (BackwardWorkingSets) of a checkpointed t5-3b encoder block.
// An op's backward holds the gradient of the tensor it made and of its input, two buffers of
// that size (three for a saved softmax output), on top of what is still saved: everything the
// ops after it saved is freed by then. In this block the highest such moment is the FF's
// dropout: its output [b, s, d_ff] is saved only by the next op (wo), so it is gone, with the
// final dropout's bool mask [b, s, d_model]; the fp32 attention probabilities' three buffers
// come later, when the whole feed-forward half is freed, and stay lower. Until 2026-12-05
// dsplan counted the largest buffers with everything alive: 3 x probabilities on top of the
// whole recompute.
TEST(BackwardWorkingSets, LaterSavedTensorsAreFreedFirst) {
  auto spec = LoadModel("t5-3b", DSPLAN_TEST_DATA_DIR);
  ASSERT_TRUE(spec.ok()) << spec.status().ToString();
  RunShape o;
  o.micro_batch = 8;
  o.seq_len = 512;
  o.target_len = 128;
  o.gradient_checkpointing = true;
  auto w = BuildWorkload(*spec, o);
  ASSERT_TRUE(w.ok()) << w.status().ToString();
  const std::vector<LayerParams> lp = ComputeLayerParams(*w, 100'000);
  int block = -1;
  for (size_t i = 0; i < w->layers.size(); ++i) {
    if (w->layers[i].name == "encoder.block.5") block = static_cast<int>(i);
  }
  ASSERT_GE(block, 0);
  const Layer& layer = w->layers[block];
  ASSERT_TRUE(layer.checkpointed);
  const LayerParams& p = lp[block];
  const int64_t b = 8, h = spec->num_heads, s = 512;
  const int64_t probs_fp32 = b * h * s * s * 4;
  const int64_t ff_bf16 = b * s * spec->intermediate_size * 2;
  const int64_t last_mask = b * s * spec->hidden_size;  // bool
  // The highest working set is the FF dropout's, its output and the last mask freed (in
  // forward order, as the allocator replay frees them last first).
  EXPECT_EQ(p.largest_saved_bytes, ff_bf16);
  EXPECT_EQ(p.backward_work_buffers, 2);
  EXPECT_EQ(p.backward_early_free_bytes, ff_bf16 + last_mask);
  ASSERT_EQ(p.early_free_blocks.size(), 2u);
  EXPECT_EQ(p.early_free_blocks[0], ff_bf16);
  EXPECT_EQ(p.early_free_blocks[1], last_mask);
  // It is below the old count by 644 MiB here (9.6 GiB at t5-3b's micro-batch 122).
  EXPECT_EQ(3 * probs_fp32 - (2 * ff_bf16 - (ff_bf16 + last_mask)), int64_t{644} << 20);
  // Early frees never exceed what the recompute made.
  EXPECT_LT(p.backward_early_free_bytes, layer.recompute_bytes);
  // Without checkpointing the block's saved tensors are the same ones.
  o.gradient_checkpointing = false;
  auto plain = BuildWorkload(*spec, o);
  ASSERT_TRUE(plain.ok());
  const std::vector<LayerParams> lp0 = ComputeLayerParams(*plain, 100'000);
  EXPECT_EQ(lp0[block].largest_saved_bytes, ff_bf16);
  EXPECT_EQ(lp0[block].backward_early_free_bytes, ff_bf16 + last_mask);
  EXPECT_LE(lp0[block].backward_early_free_bytes, plain->layers[block].activation_bytes);
}

// How autograd keeps each weight for backward, as the tracer marks it (WeightSave): nn.Linear
// through torch.nn.functional.linear, GPT-2's Conv1D (addmm with the Parameter itself),
// Falcon's FalconLinear (input @ weight.T), and a tied table marked by its head's use.
TEST(LinearWeightViews, TheTracerMarksHowEachModuleKeepsItsWeight) {
  auto save_of = [](const char* model, const std::string& name) {
    auto spec = LoadModel(model, DSPLAN_TEST_DATA_DIR);
    EXPECT_TRUE(spec.ok()) << spec.status().ToString();
    RunShape o;
    o.seq_len = 64;
    auto w = BuildWorkload(*spec, o);
    EXPECT_TRUE(w.ok()) << w.status().ToString();
    for (const TensorSpec& t : w->tensors) {
      if (t.category == TensorCategory::kParameter && t.name == name) return t.weight_save;
    }
    ADD_FAILURE() << model << " has no parameter " << name;
    return WeightSave::kParameter;
  };
  struct Case {
    const char* model;
    const char* param;
    WeightSave save;
  };
  const Case cases[] = {
      {"qwen2-0.5b", "model.layers.3.self_attn.q_proj.weight", WeightSave::kFunctionalLinear},
      {"qwen2-0.5b", "model.layers.3.mlp.down_proj.weight", WeightSave::kFunctionalLinear},
      {"qwen2-0.5b", "model.layers.3.input_layernorm.weight", WeightSave::kParameter},
      // Tied: the embedding's table is the head's nn.Linear weight.
      {"qwen2-0.5b", "model.embed_tokens.weight", WeightSave::kFunctionalLinear},
      {"gpt2", "transformer.h.0.attn.c_attn.weight", WeightSave::kParameter},
      {"gpt2", "transformer.h.0.mlp.c_fc.weight", WeightSave::kParameter},
      {"gpt2", "transformer.wte.weight", WeightSave::kFunctionalLinear},
      {"gpt2", "transformer.wpe.weight", WeightSave::kParameter},
      {"falcon-7b", "transformer.h.0.self_attention.query_key_value.weight",
       WeightSave::kTransposedMatmul},
      {"falcon-7b", "transformer.h.0.mlp.dense_4h_to_h.weight", WeightSave::kTransposedMatmul},
      // falcon-7b ties its head (an nn.Linear) to the word embeddings.
      {"falcon-7b", "transformer.word_embeddings.weight", WeightSave::kFunctionalLinear},
  };
  for (const Case& c : cases) {
    EXPECT_EQ(save_of(c.model, c.param), c.save) << c.model << " " << c.param;
  }
}

// A model built outside deepspeed.zero.Init (Plan::zero_init false): the views PyTorch's linear
// saves keep each released layer's Linear weights until its backward. qwen2-0.5b at ZeRO-3 on
// one GPU with its parameters offloaded (so a gather copies), no reuse window and no prefetch
// (every layer is released after its forward): at the first backward task the gathered bytes
// exceed zero.Init's by every block's seven projections and the tied head's table, by hand from
// the config (hidden 896, 14 heads and 2 key/value heads of 64, MLP 4864, 24 layers, vocabulary
// 151936).
TEST(LinearWeightViews, ReleasedLinearWeightsStayUntilTheirBackwardOutsideZeroInit) {
  auto spec = LoadModel("qwen2-0.5b", DSPLAN_TEST_DATA_DIR);
  ASSERT_TRUE(spec.ok()) << spec.status().ToString();
  RunShape o;
  o.seq_len = 64;
  auto w = BuildWorkload(*spec, o);
  ASSERT_TRUE(w.ok()) << w.status().ToString();
  Plan p;
  p.seq_len = 64;
  p.zero.stage = 3;
  p.zero.offload_param.device = OffloadDevice::kCpu;
  p.zero.offload_optimizer.device = OffloadDevice::kCpu;
  p.zero.stage3_max_reuse_distance = 0;
  p.zero.stage3_prefetch_bucket_size = 0;
  const std::vector<LayerParams> lp =
      ComputeLayerParams(*w, p.zero.stage3_param_persistence_threshold);
  // Gathered GPU bytes before micro-step 0's first backward task, and at the step's end.
  auto gathered = [&](bool zero_init, int64_t* at_end) {
    p.zero_init = zero_init;
    auto b = BuildStepGraph(*w, lp, p);
    EXPECT_TRUE(b.ok()) << b.status().ToString();
    int64_t live = 0, before_backward = -1;
    for (TaskId id = 0; id < static_cast<TaskId>(b->graph.size()); ++id) {
      const Task& t = b->graph.task(id);
      if (t.kind == TaskKind::kBackward && before_backward < 0) before_backward = live;
      for (const MemEffect* e = b->graph.effects_begin(id); e != b->graph.effects_end(id); ++e) {
        if (e->space == MemSpace::kGpu && e->category == MemCategory::kGatheredParams) {
          live += e->bytes;
        }
      }
    }
    *at_end = live;
    return before_backward;
  };
  int64_t end_inside = 0, end_outside = 0;
  const int64_t inside = gathered(true, &end_inside);
  const int64_t outside = gathered(false, &end_outside);
  const int64_t per_layer = 896 * (896 + 128 + 128 + 896) + 3 * 4864 * 896;
  EXPECT_EQ(per_layer, 14'909'440);
  EXPECT_EQ(outside - inside, 2 * (24 * per_layer + 151'936 * 896));
  // Every held view is gone when the backward is over.
  EXPECT_EQ(end_outside, end_inside);
}

}  // namespace
}  // namespace dsplan
