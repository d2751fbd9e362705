// The host executor (runtime/reference_trainers/host_executor.h): gradients against finite differences,
// ZeRO stages x world sizes x gradient accumulation x offload against unpartitioned single-rank
// training, and the bytes per memory category against the simulator's StepGraph.
#include "runtime/reference_trainers/host_executor.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <map>
#include <tuple>
#include <unistd.h>
#include <string>

#include <fmt/format.h>

#include "core/hf_config.h"
#include "core/model_spec.h"
#include "simulator/step_builder.h"

namespace dsplan {
namespace {

constexpr int64_t kSeq = 16;

// GPT-2 with 2 layers, 32 hidden, 2 heads, vocab 64, 32 positions, dropout off: 28,544 params.
Workload Tiny(int64_t micro_batch) {
  auto cfg = HfConfig::Parse(
      R"({"model_type":"gpt2","vocab_size":64,"n_embd":32,"n_head":2,"n_layer":2,
          "n_positions":32,"resid_pdrop":0,"embd_pdrop":0,"attn_pdrop":0})",
      "tiny");
  EXPECT_TRUE(cfg.ok()) << cfg.status().ToString();
  auto spec = ModelSpecFromHf(*cfg, "tiny");
  EXPECT_TRUE(spec.ok()) << spec.status().ToString();
  RunShape o;
  o.micro_batch = micro_batch;
  o.seq_len = kSeq;
  o.precision = Precision::kFp32;
  auto w = BuildWorkload(*spec, o);
  EXPECT_TRUE(w.ok()) << w.status().ToString();
  return *w;
}

Plan MakePlan(int stage, int world, int64_t mb, int64_t gas, Precision prec) {
  Plan p;
  p.gpus_per_node = world;
  p.micro_batch = mb;
  p.grad_accum = gas;
  p.precision = prec;
  p.seq_len = kSeq;
  p.zero.stage = stage;
  p.zero.reduce_bucket_size = 3000;           // several buckets; c_fc/c_proj (4096) alone
  p.zero.stage3_param_persistence_threshold = 100;  // biases and norms persist, matrices gather
  p.zero.stage3_prefetch_bucket_size = 0;     // no prefetch, and release right after use,
  p.zero.stage3_max_reuse_distance = 0;       // as the executor does
  p.optimizer_params.lr = 1e-3;
  p.optimizer_params.weight_decay = 0.01;
  return p;
}

HostRun Train(const Plan& p, int steps = 5, const std::string& nvme = "") {
  HostRunOptions o;
  o.steps = steps;
  o.seed = 7;
  o.nvme_dir = nvme;
  auto r = RunHostTraining(Tiny(p.micro_batch), p, o);
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  return r.ok() ? *r : HostRun{};
}

double MaxDiff(const HostRun& a, const HostRun& b) {
  double d = 0;
  if (a.params.size() != b.params.size()) return 1e9;
  for (size_t t = 0; t < a.params.size(); ++t) {
    for (size_t i = 0; i < a.params[t].size(); ++i) {
      d = std::max(d, std::fabs(static_cast<double>(a.params[t][i]) - b.params[t][i]));
    }
  }
  return d;
}

TEST(HostExecutorTest, GradientsMatchFiniteDifferences) {
  Workload w = Tiny(2);
  auto base = HostForwardBackward(w, 7);
  ASSERT_TRUE(base.ok()) << base.status().ToString();
  EXPECT_NEAR(base->loss, std::log(64.0), 0.2);
  // A few elements of several tensors, by central differences in fp32 (h = 1e-2 on weights of
  // size ~0.02: the loss is smooth enough; relative agreement 2% or 2e-4 absolute).
  int checked = 0;
  for (size_t t = 0; t < w.tensors.size() && w.tensors[t].category == TensorCategory::kParameter;
       t += 3) {
    for (int64_t i : {int64_t{0}, w.tensors[t].numel / 2 + 1}) {
      const double h = 1e-2;
      auto plus = HostForwardBackward(w, 7, static_cast<int>(t), i, h);
      auto minus = HostForwardBackward(w, 7, static_cast<int>(t), i, -h);
      ASSERT_TRUE(plus.ok() && minus.ok());
      const double fd = (plus->loss - minus->loss) / (2 * h);
      const double an = base->grads[t][i];
      EXPECT_NEAR(an, fd, 2e-4 + 0.02 * std::fabs(fd)) << w.tensors[t].name << "[" << i << "]";
      ++checked;
    }
  }
  EXPECT_GE(checked, 10);
}

TEST(HostExecutorTest, LossFallsOnTheSyntheticTask) {
  Plan p = MakePlan(2, 2, 2, 1, Precision::kFp32);
  p.optimizer_params.lr = 1e-2;
  HostRun r = Train(p, 40);
  ASSERT_EQ(r.losses.size(), 40u);
  EXPECT_GT(r.losses.front(), 3.8);
  EXPECT_LT(r.losses.back(), 0.5 * r.losses.front());
}

// --- ZeRO stages against unpartitioned training ------------------------------------------------
//
// Tolerances. fp32: the partitioned runs sum the same per-token gradients in a different order
// (per micro-batch, then across ranks in rank order, scaled by 1/GAS and 1/N instead of one mean),
// so gradients differ by fp32 rounding (~1e-7 relative); Adam divides by sqrt(v), which turns
// those into update differences of up to ~1e-3 of one step (lr 1e-3) for near-zero gradients.
// Measured max |difference| over 5 steps: 2.4e-6; the bound is 1e-5 (1% of one step).
// bf16: the 16-bit parameters are the fp32 master rounded to bf16; a master that differs by
// rounding can land on the neighbouring bf16 value (one ulp, 2^-7 relative at most: 3.9e-3 on
// LayerNorm weights near 0.5-1). Gradients pass through bf16 buckets and partitions (2^-9
// relative each rounding, in a different order than the reference's), and Adam turns a sign
// change of a near-zero gradient into a 2 x lr update difference. So: at most 1% of the elements
// (measured 0.14-0.17%) beyond one ulp + 1e-4, by at most 4 x lr (measured 2.0e-3).

constexpr double kFp32Tol = 1e-5;

const HostRun& CachedReference(const Plan& p) {
  static std::map<std::string, HostRun> cache;
  Plan ref = p;
  ref.zero = ZeroConfig{};
  ref.gpus_per_node = 1;
  ref.nodes = 1;
  ref.micro_batch = p.micro_batch * p.grad_accum * p.world_size();
  ref.grad_accum = 1;
  const std::string key = fmt::format("{}/{}/{}", ref.micro_batch, PrecisionName(p.precision),
                                      p.gradient_clipping);
  auto it = cache.find(key);
  if (it == cache.end()) it = cache.emplace(key, Train(ref)).first;
  return it->second;
}

// How far |a| is from |b| in bf16 terms: the largest |a - b| beyond one bf16 ulp of |b|, and
// the fraction of elements beyond it.
struct Bf16Diff {
  double excess = 0;
  double fraction = 0;
};
Bf16Diff Bf16Compare(const HostRun& a, const HostRun& b) {
  Bf16Diff out;
  if (a.params.size() != b.params.size()) return {1e9, 1};
  int64_t n = 0, beyond = 0;
  for (size_t t = 0; t < a.params.size(); ++t) {
    for (size_t i = 0; i < a.params[t].size(); ++i) {
      const double ulp = std::ldexp(std::fabs(b.params[t][i]), -7);
      const double d = std::fabs(static_cast<double>(a.params[t][i]) - b.params[t][i]);
      out.excess = std::max(out.excess, d - ulp - 1e-4);
      beyond += d > ulp + 1e-4;
      ++n;
    }
  }
  out.excess = std::max(out.excess, 0.0);
  out.fraction = n ? static_cast<double>(beyond) / n : 0;
  return out;
}

struct GraphMemory {
  SpaceCategoryBytes initial{};
  SpaceCategoryBytes peak{};
};

GraphMemory Graph(const Plan& p) {
  Workload w = Tiny(p.micro_batch);
  const int64_t threshold = p.zero.stage == 3 ? p.zero.stage3_param_persistence_threshold : 0;
  auto built = BuildStepGraph(w, ComputeLayerParams(w, threshold), p, 0);
  EXPECT_TRUE(built.ok()) << built.status().ToString();
  if (!built.ok()) return {};
  return {built->graph.initial, GraphCategoryPeaks(built->graph)};
}

using MatrixParam = std::tuple<int, int, int, OffloadDevice>;  // stage, world, GAS, offload

class HostMatrixTest : public ::testing::TestWithParam<MatrixParam> {};

TEST_P(HostMatrixTest, Fp32EqualsUnpartitionedTraining) {
  const auto [stage, world, gas, off] = GetParam();
  Plan p = MakePlan(stage, world, 2, gas, Precision::kFp32);
  p.zero.offload_optimizer.device = off;
  HostRun run = Train(p);
  const HostRun& ref = CachedReference(p);
  ASSERT_EQ(run.losses.size(), ref.losses.size());
  EXPECT_LT(MaxDiff(run, ref), kFp32Tol);
  // The first step's loss is computed before any update: the same data, the same mean.
  EXPECT_NEAR(run.losses[0], ref.losses[0], 1e-5);
}

std::vector<MatrixParam> Matrix() {
  std::vector<MatrixParam> out;
  for (int stage : {0, 1, 2, 3})
    for (int world : {1, 2, 4})
      for (int gas : {1, 2})
        for (OffloadDevice off : {OffloadDevice::kNone, OffloadDevice::kCpu})
          if (stage > 0 || off == OffloadDevice::kNone) out.emplace_back(stage, world, gas, off);
  return out;
}

INSTANTIATE_TEST_SUITE_P(AllStages, HostMatrixTest, ::testing::ValuesIn(Matrix()),
                         [](const ::testing::TestParamInfo<MatrixParam>& i) {
                           return fmt::format("stage{}_world{}_gas{}_{}", std::get<0>(i.param),
                                              std::get<1>(i.param), std::get<2>(i.param),
                                              OffloadDeviceName(std::get<3>(i.param)));
                         });

TEST(HostExecutorTest, Bf16EqualsUnpartitionedTrainingWithinOneUlp) {
  for (int stage : {0, 1, 2, 3}) {
    for (OffloadDevice off : {OffloadDevice::kNone, OffloadDevice::kCpu}) {
      if (stage == 0 && off != OffloadDevice::kNone) continue;
      Plan p = MakePlan(stage, 2, 2, 2, Precision::kBf16);
      p.zero.offload_optimizer.device = off;
      HostRun run = Train(p);
      const Bf16Diff d = Bf16Compare(run, CachedReference(p));
      EXPECT_LE(d.excess, 4e-3) << "stage " << stage << " offload " << OffloadDeviceName(off);
      EXPECT_LE(d.fraction, 0.01) << "stage " << stage << " offload " << OffloadDeviceName(off);
    }
  }
}

TEST(HostExecutorTest, NvmeOffloadSwapsThroughFilesAndEqualsCpuOffload) {
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / fmt::format("dsplan_host_nvme_{}", ::getpid());
  std::filesystem::create_directories(dir);
  Plan p = MakePlan(3, 2, 2, 2, Precision::kFp32);
  p.zero.offload_optimizer.device = OffloadDevice::kNvme;
  p.zero.offload_optimizer.nvme_path = dir.string();
  p.zero.sub_group_size = 5000;  // three sub-groups per rank, swapped one after the other
  HostRun nvme = Train(p, 5, dir.string());
  EXPECT_LT(MaxDiff(nvme, CachedReference(p)), kFp32Tol);
  Plan cpu = p;
  cpu.zero.offload_optimizer.device = OffloadDevice::kCpu;
  EXPECT_EQ(MaxDiff(nvme, Train(cpu)), 0.0);  // the same math, only the storage differs
  for (int r = 0; r < 2; ++r) {
    for (const char* f : {"master", "exp_avg", "exp_avg_sq", "grad"}) {
      const auto path = dir / "zero_stage_3" / "optimizer" / fmt::format("rank{}", r) /
                        fmt::format("{}.swp", f);
      ASSERT_TRUE(std::filesystem::exists(path)) << path;
      EXPECT_EQ(std::filesystem::file_size(path), 4u * nvme.partition_numel) << path;
    }
  }
  // The NVMe space holds master, states and fp32 gradients: 16 bytes per partition element.
  int64_t nvme_bytes = 0;
  for (int64_t b : nvme.rank_memory[0].at_last_step_start[static_cast<int>(MemSpace::kNvme)]) {
    nvme_bytes += b;
  }
  EXPECT_EQ(nvme_bytes, 16 * nvme.partition_numel);
  // Against the graph: DeepSpeed cuts sub-groups at tensor boundaries (a sub-group ends with
  // the partition that reaches sub_group_size), so the pinned pool is 4 x buffer_count x that
  // largest sub-group, and swapped sub-groups share one pageable fp32 gradient buffer of the
  // largest sub-group (initialize_optimizer_states); the graph has both.
  const GraphMemory g = Graph(p);
  const HostRankMemory& m = nvme.rank_memory[0];
  const int pinned = static_cast<int>(MemSpace::kPinnedHost);
  const int pageable = static_cast<int>(MemSpace::kPageableHost);
  const int comm = static_cast<int>(MemCategory::kCommBuffers);
  const int grads = static_cast<int>(MemCategory::kGradients);
  const int64_t largest = nvme.largest_subgroup_numel;
  EXPECT_GT(largest, 5000);
  EXPECT_EQ(m.at_last_step_start[pinned][comm], g.initial[pinned][comm]);
  EXPECT_EQ(m.at_last_step_start[pinned][comm], 4 * 4 * largest);  // buffer_count 4
  EXPECT_EQ(m.at_last_step_start[pageable][grads], g.initial[pageable][grads]);
  std::filesystem::remove_all(dir);
}

TEST(HostExecutorTest, Stage1WithOverlapCommReducesInHooksAtTheBoundary) {
  Plan p = MakePlan(1, 2, 2, 2, Precision::kFp32);
  p.zero.overlap_comm = true;
  HostRun run = Train(p);
  EXPECT_LT(MaxDiff(run, CachedReference(p)), kFp32Tol);
  // The hooks free each gradient as it is bucketed; the gradient peak of the worst rank (the
  // whole tensors overlapping its partition in grads_in_partition) equals the graph's, and so do
  // the two ipg buffers with the bucket's flatten copy.
  Plan bf = MakePlan(1, 2, 2, 2, Precision::kBf16);
  bf.zero.overlap_comm = true;
  HostRun r = Train(bf, 2);
  const GraphMemory g = Graph(bf);
  const int gpu = static_cast<int>(MemSpace::kGpu);
  const int grads = static_cast<int>(MemCategory::kGradients);
  const int comm = static_cast<int>(MemCategory::kCommBuffers);
  int64_t grad_peak = 0, comm_peak = 0;
  for (const HostRankMemory& m : r.rank_memory) {
    grad_peak = std::max(grad_peak, m.peak_last_step[gpu][grads]);
    comm_peak = std::max(comm_peak, m.peak_last_step[gpu][comm]);
  }
  EXPECT_EQ(grad_peak, g.peak[gpu][grads]);
  EXPECT_EQ(comm_peak, g.peak[gpu][comm]);
}

// Stage 2 with GAS > 1: from the second micro-step on, DeepSpeed holds the first micro-step's
// grads_in_partition (as averaged_gradients) and a new one; the graph has both.
TEST(HostExecutorTest, Stage2AccumulationHoldsTwoPartitionBuffers) {
  Plan p = MakePlan(2, 2, 2, 2, Precision::kBf16);
  HostRun r = Train(p, 2);
  Workload w = Tiny(2);
  const std::vector<LayerParams> lp = ComputeLayerParams(w, 0);
  auto built = BuildStepGraph(w, lp, p, 0);
  ASSERT_TRUE(built.ok());
  const SpaceCategoryBytes g = GraphCategoryPeaks(built->graph, true);
  const int gpu = static_cast<int>(MemSpace::kGpu);
  const int grads = static_cast<int>(MemCategory::kGradients);
  // The graph's rank class is the rank with the largest grads_in_partition.
  EXPECT_EQ(r.grads_in_partition_numel, GradsInPartitionNumel(lp, w.params, 2, 0));
  const int64_t worst = MaxGradsInPartitionNumel(lp, w.params, 2);
  EXPECT_EQ(built->facts.grads_in_partition_numel, worst);
  EXPECT_EQ(worst, GradsInPartitionNumel(lp, w.params, 2, 1));
  int64_t exec = 0;
  for (const HostRankMemory& m : r.rank_memory) {
    exec = std::max(exec, m.peak_last_micro_steps[gpu][grads]);
  }
  EXPECT_GE(exec, 2 * 2 * worst);
  EXPECT_GE(g[gpu][grads], 2 * 2 * worst);
  // Beyond the two buffers the graph holds one whole block's param.grad, the executor one
  // parameter's at a time (measured: 90,880 B against 92,992 B).
  EXPECT_LE(exec, g[gpu][grads]);
  EXPECT_LE(g[gpu][grads] - exec, 2 * 12704);
  // GAS 1 has one buffer in both.
  Plan one = MakePlan(2, 2, 2, 1, Precision::kBf16);
  HostRun r1 = Train(one, 2);
  EXPECT_LT(r1.rank_memory[1].peak_last_micro_steps[gpu][grads], 2 * 2 * worst);
}

TEST(HostExecutorTest, GradientClippingUsesTheGlobalNorm) {
  for (int stage : {0, 2, 3}) {
    Plan p = MakePlan(stage, 2, 2, 2, Precision::kFp32);
    p.gradient_clipping = 0.05;  // below the gradient norm of these steps: clipping is active
    HostRun run = Train(p);
    EXPECT_LT(MaxDiff(run, CachedReference(p)), kFp32Tol) << "stage " << stage;
    Plan unclipped = p;
    unclipped.gradient_clipping = 0;
    EXPECT_GT(MaxDiff(run, CachedReference(unclipped)), 1e-4) << "clipping had no effect";
  }
  Plan offload = MakePlan(2, 2, 2, 2, Precision::kFp32);
  offload.gradient_clipping = 0.05;
  offload.zero.offload_optimizer.device = OffloadDevice::kCpu;
  EXPECT_LT(MaxDiff(Train(offload), CachedReference(offload)), kFp32Tol);
}

// --- Memory per category against the simulator's StepGraph ------------------------------------

constexpr MemCategory kModelStates[] = {MemCategory::kParams16, MemCategory::kGatheredParams,
                                        MemCategory::kGradients, MemCategory::kMaster,
                                        MemCategory::kOptimizerStates, MemCategory::kCommBuffers};

struct MemCase {
  int stage;
  int world;
  int gas;
  OffloadDevice off;
};

// Model-state bytes at the start of the last step and their peaks during it, against
// graph.initial and the graph's per-category peaks. The graph stands for the worst rank (ranks
// differ only in ZeRO 1/2's grads_in_partition, which holds the whole tensors overlapping the
// rank's partition), so the executor's largest value over the ranks must equal it. One
// difference remains, a simplification of the graph (docs/runtime-host.md, "Memory against the
// graph"): the graph allocates a whole layer's param.grad at the end of its backward, while
// DeepSpeed's hooks move each parameter's gradient into the bucket as autograd produces it, so
// where that gradient is the peak's top (stage 2 with GAS > 1, and ZeRO 2/3 with offload, whose
// GPU gradients are only these transients) the executor's peak is lower (checked as <=).
TEST(HostExecutorTest, ModelStateBytesEqualTheStepGraph) {
  const MemCase cases[] = {
      {0, 2, 1, OffloadDevice::kNone}, {1, 2, 2, OffloadDevice::kNone},
      {2, 2, 1, OffloadDevice::kNone}, {2, 4, 2, OffloadDevice::kNone},
      {2, 4, 1, OffloadDevice::kNone}, {3, 2, 2, OffloadDevice::kNone},
      {3, 4, 1, OffloadDevice::kNone}, {1, 2, 2, OffloadDevice::kCpu},
      {2, 4, 2, OffloadDevice::kCpu},  {3, 2, 2, OffloadDevice::kCpu},
      {3, 2, 1, OffloadDevice::kNvme}};
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / fmt::format("dsplan_host_mem_{}", ::getpid());
  std::filesystem::create_directories(dir);
  for (const MemCase& c : cases) {
    Plan p = MakePlan(c.stage, c.world, 2, c.gas, Precision::kBf16);
    p.zero.offload_optimizer.device = c.off;
    p.zero.offload_optimizer.nvme_path = dir.string();
    HostRun run = Train(p, 2, dir.string());
    ASSERT_EQ(run.rank_memory.size(), static_cast<size_t>(c.world));
    const GraphMemory g = Graph(p);
    const std::string what = fmt::format("stage {} world {} gas {} offload {}", c.stage, c.world,
                                         c.gas, OffloadDeviceName(c.off));
    for (int s = 0; s < kNumMemSpaces; ++s) {
      for (MemCategory cat : kModelStates) {
        const int k = static_cast<int>(cat);
        const std::string where =
            what + fmt::format(": {} {}", MemSpaceName(MemSpace(s)), MemCategoryKey(cat));
        int64_t start = 0, peak = 0;
        for (const HostRankMemory& m : run.rank_memory) {
          start = std::max(start, m.at_last_step_start[s][k]);
          peak = std::max(peak, m.peak_last_step[s][k]);
        }
        const bool gpu = s == static_cast<int>(MemSpace::kGpu);
        const bool layer_grads_on_top =
            cat == MemCategory::kGradients && gpu &&
            ((c.stage == 2 && c.gas > 1) || (c.stage >= 2 && c.off != OffloadDevice::kNone));
        EXPECT_EQ(start, g.initial[s][k]) << where;
        if (layer_grads_on_top) {
          EXPECT_LE(peak, g.peak[s][k]) << where;
        } else {
          EXPECT_EQ(peak, g.peak[s][k]) << where;
        }
      }
    }
  }
  std::filesystem::remove_all(dir);
}

// --- One step graph, two executors: the order of work -----------------------------------------

// The host executor's layers' forward and backward passes and its optimizer step, in the order it
// ran them, equal the StepGraph's tasks of those kinds in program order, for every ZeRO stage,
// world size, accumulation and optimizer offload it implements. A change to either side that
// reorders, adds or drops work fails here.
TEST(HostExecutorTest, RunsTheStepGraphsTasksInItsOrder) {
  int compared = 0;
  for (int stage : {0, 1, 2, 3}) {
    for (int world : {1, 2}) {
      for (int gas : {1, 3}) {
        for (OffloadDevice off : {OffloadDevice::kNone, OffloadDevice::kCpu}) {
          if (stage == 0 && off != OffloadDevice::kNone) continue;
          Plan p = MakePlan(stage, world, 2, gas, Precision::kBf16);
          p.zero.offload_optimizer.device = off;
          const std::string what = fmt::format("stage {} world {} gas {} offload {}", stage, world,
                                               gas, OffloadDeviceName(off));
          HostRun run = Train(p, 2);
          Workload w = Tiny(p.micro_batch);
          const int64_t threshold = stage == 3 ? p.zero.stage3_param_persistence_threshold : 0;
          auto built = BuildStepGraph(w, ComputeLayerParams(w, threshold), p, 0,
                                      StepGraphForm::kUnrolled);
          ASSERT_TRUE(built.ok()) << built.status().ToString();
          const std::vector<HostOp> graph = GraphHostOps(built->graph);
          // Every layer forward and backward in every micro-step, and the step.
          ASSERT_EQ(graph.size(), 2 * w.layers.size() * gas + 1) << what;
          EXPECT_EQ(graph.back().kind, off == OffloadDevice::kNone ? TaskKind::kGpuOptimizer
                                                                   : TaskKind::kCpuOptimizer)
              << what;
          EXPECT_EQ(HostOpsText(run.last_step_ops), HostOpsText(graph)) << what;
          EXPECT_TRUE(run.last_step_ops == graph) << what;
          ++compared;
        }
      }
    }
  }
  EXPECT_EQ(compared, 28);
}

// --- Errors ------------------------------------------------------------------------------------

TEST(HostExecutorTest, RejectsWhatItDoesNotImplement) {
  Plan p = MakePlan(2, 2, 2, 1, Precision::kFp32);
  auto cfg = HfConfig::Parse(
      R"({"model_type":"llama","vocab_size":64,"hidden_size":32,"num_attention_heads":2,
          "intermediate_size":64,"num_hidden_layers":1})",
      "tiny-llama");
  ASSERT_TRUE(cfg.ok());
  auto spec = ModelSpecFromHf(*cfg, "tiny-llama");
  ASSERT_TRUE(spec.ok());
  RunShape o;
  o.micro_batch = 2;
  o.seq_len = kSeq;
  auto llama = BuildWorkload(*spec, o);
  ASSERT_TRUE(llama.ok());
  auto r = RunHostTraining(*llama, p, HostRunOptions{});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Status::Code::kUnsupported);
  EXPECT_NE(r.status().message().find("llama"), std::string::npos) << r.status().message();
  EXPECT_NE(r.status().message().find("gpt2"), std::string::npos) << r.status().message();

  Plan big = MakePlan(2, 65, 2, 1, Precision::kFp32);
  big.gpus_per_node = 65;
  auto r2 = RunHostTraining(Tiny(2), big, HostRunOptions{});
  ASSERT_FALSE(r2.ok());
  EXPECT_NE(r2.status().message().find("64"), std::string::npos) << r2.status().message();

  Plan nvme = MakePlan(3, 2, 2, 1, Precision::kFp32);
  nvme.zero.offload_optimizer.device = OffloadDevice::kNvme;
  nvme.zero.offload_optimizer.nvme_path = "/nonexistent/dsplan-nvme";
  auto r3 = RunHostTraining(Tiny(2), nvme, HostRunOptions{});
  ASSERT_FALSE(r3.ok());
  EXPECT_NE(r3.status().message().find("/nonexistent/dsplan-nvme"), std::string::npos)
      << r3.status().message();

  Plan fp16 = MakePlan(1, 2, 2, 1, Precision::kFp16);
  auto r4 = RunHostTraining(Tiny(2), fp16, HostRunOptions{});
  ASSERT_FALSE(r4.ok());
  EXPECT_EQ(r4.status().code(), Status::Code::kUnsupported);

  Plan mb = MakePlan(1, 2, 4, 1, Precision::kFp32);
  EXPECT_FALSE(RunHostTraining(Tiny(2), mb, HostRunOptions{}).ok());
}

}  // namespace
}  // namespace dsplan
