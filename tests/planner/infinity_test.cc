// ZeRO-Infinity's tools (docs/zero-infinity.md): memory-centric tiling and activation
// checkpoints in host memory in the step graph, against closed forms of the model's shape; the
// NVMe rules `check` applies; node profiles; and the planner's answer for a trillion-parameter
// llama on one DGX-2.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <string>
#include <vector>

#include "core/hardware_profile.h"
#include "core/model_catalog.h"
#include "planner/check.h"
#include "planner/ds_config.h"
#include "planner/search.h"
#include "simulator/simulate.h"
#include "simulator/step_builder.h"
#include "simulator/workload.h"

namespace dsplan {
namespace {

int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

// The llama-shaped trillion-parameter config of the paper reproduction
// (examples/zero-infinity/llama-1t): h = 25600, intermediate 68352, 128 blocks, vocab 32000.
constexpr int64_t kH = 25600, kI = 68352, kVocab = 32000, kBlocks = 128;

class InfinityTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    auto spec = LoadModel(std::string(DSPLAN_TEST_DATA_DIR) + "/examples/zero-infinity/llama-1t",
                          DSPLAN_TEST_DATA_DIR);
    ASSERT_TRUE(spec.ok()) << spec.status().ToString();
    spec_ = new ModelSpec(*spec);
    RunShape o;
    o.micro_batch = 1;
    o.seq_len = 1024;
    o.precision = Precision::kFp16;
    o.gradient_checkpointing = true;
    auto w = BuildWorkload(*spec, o);
    ASSERT_TRUE(w.ok()) << w.status().ToString();
    w_ = new Workload(std::move(*w));
  }
  static void TearDownTestSuite() {
    delete w_;
    delete spec_;
    w_ = nullptr;
    spec_ = nullptr;
  }

  // Stage 3 with everything offloaded to the CPU on 16 GPUs; no prefetch and no reuse, so each
  // gather lives exactly around its compute.
  static Plan InfinityPlan(int64_t tiles, bool host_checkpoints) {
    Plan p;
    p.gpus_per_node = 16;
    p.precision = Precision::kFp16;
    p.seq_len = 1024;
    p.gradient_checkpointing = true;
    p.zero.stage = 3;
    p.zero.offload_optimizer.device = OffloadDevice::kCpu;
    p.zero.offload_param.device = OffloadDevice::kCpu;
    p.zero.stage3_prefetch_bucket_size = 0;
    p.zero.stage3_max_reuse_distance = 0;
    p.zero.reduce_bucket_size = 10'000'000;
    p.linear_tiles = tiles;
    p.activation_checkpointing.present = host_checkpoints;
    p.activation_checkpointing.cpu_checkpointing = host_checkpoints;
    return p;
  }

  static BuiltStep Build(const Plan& p) {
    auto b = BuildStepGraph(*w_, ComputeLayerParams(*w_, p.zero.stage3_param_persistence_threshold), p);
    EXPECT_TRUE(b.ok()) << b.status().ToString();
    return b.ok() ? std::move(*b) : BuiltStep{};
  }

  // The largest value one category of one memory space reaches, effects applied in program
  // order (each task's start effects, then its end effects).
  static int64_t PeakOf(const BuiltStep& b, MemSpace space, MemCategory cat) {
    int64_t now = b.graph.initial[static_cast<int>(space)][static_cast<int>(cat)];
    int64_t peak = now;
    for (TaskId id = 0; id < b.graph.size(); ++id) {
      for (bool end : {false, true}) {
        for (const MemEffect* e = b.graph.effects_begin(id); e != b.graph.effects_end(id); ++e) {
          if (e->at_end != end || e->space != space || e->category != cat) continue;
          now += e->bytes;
          peak = std::max(peak, now);
        }
      }
    }
    return peak;
  }

  static ModelSpec* spec_;
  static Workload* w_;
};
ModelSpec* InfinityTest::spec_ = nullptr;
Workload* InfinityTest::w_ = nullptr;

TEST_F(InfinityTest, ModelIsOneTrillionParameters) {
  // 4 h^2 attention + 3 h i MLP + 2 h norms per block, two vocab x h tables, the final norm.
  const int64_t block = 4 * kH * kH + 3 * kH * kI + 2 * kH;
  EXPECT_EQ(w_->params, kBlocks * block + 2 * kVocab * kH + kH);
  EXPECT_GT(w_->params, 1'000'000'000'000);
}

// Memory-centric tiling: the gathered 16-bit parameters on the GPU peak at one block's
// non-persistent weights (the norms, 25600 elements each, stay below the persistence threshold
// and are held whole), split into T tiles: 2 bytes x ceil(ceil(G / T) / N) x N.
TEST_F(InfinityTest, TilingDividesTheGatheredBlockByTheTileCount) {
  const int64_t n = 16, e = 2;
  const int64_t gathered = 4 * kH * kH + 3 * kH * kI;  // per block, non-persistent
  // Persistent parameters (every norm weight) are held whole on every rank.
  const int64_t persistent = e * (2 * kH * kBlocks + kH);
  for (int64_t t : {int64_t{1}, int64_t{2}, int64_t{4}}) {
    const BuiltStep b = Build(InfinityPlan(t, false));
    const int64_t piece = t == 1 ? gathered : CeilDiv(gathered, t);
    const int64_t expect = persistent + e * CeilDiv(piece, n) * n;
    EXPECT_EQ(PeakOf(b, MemSpace::kGpu, MemCategory::kGatheredParams), expect) << "T=" << t;
    EXPECT_EQ(b.facts.linear_tiles, t);
    if (t > 1) EXPECT_EQ(b.facts.largest_tile_gather_bytes, e * CeilDiv(piece, n) * n);
  }
  // The block's parameter gradients appear tile by tile as well (1/T of the block at a time).
  const int64_t block_params = 4 * kH * kH + 3 * kH * kI + 2 * kH;
  EXPECT_EQ(PeakOf(Build(InfinityPlan(1, false)), MemSpace::kGpu, MemCategory::kGradients),
            e * block_params);
  EXPECT_EQ(PeakOf(Build(InfinityPlan(4, false)), MemSpace::kGpu, MemCategory::kGradients),
            e * CeilDiv(block_params, 4));
}

TEST_F(InfinityTest, TilingIssuesOneGatherPerTilePerUse) {
  const auto block_gathers = [](const BuiltStep& b) {
    return std::count_if(b.graph.tasks().begin(), b.graph.tasks().end(), [](const Task& t) {
      return t.kind == TaskKind::kAllGather && t.layer >= 0 &&
             w_->layers[t.layer].kind == LayerKind::kDecoderBlock;
    });
  };
  // Without reuse a tiled block gathers each tile for forward, recompute and backward: 3 T per
  // block. An untiled block's recompute and backward share one gather (the graph gathers the
  // whole block once before its recompute): 2 per block.
  EXPECT_EQ(block_gathers(Build(InfinityPlan(4, false))), 3 * 4 * kBlocks);
  EXPECT_EQ(block_gathers(Build(InfinityPlan(1, false))), 2 * kBlocks);
}

// Activation checkpoints in host memory: each checkpointed block's kept inputs move to pageable
// host memory after its forward and back before its recomputation. With micro-batch 1 and
// sequence 1024 the kept inputs of a llama block under HF checkpointing are its fp16 hidden
// states, b x s x h x 2 bytes; the first block also holds the rotary cos and sin tables
// (b x s x head_dim x 2 bytes each) that all blocks share.
TEST_F(InfinityTest, HostCheckpointsMoveTheBlockInputsToPageableMemory) {
  const int64_t e = 2, s = 1024, d = kH / 160;
  const int64_t hidden = e * s * kH, rotary = 2 * e * s * d;
  int64_t checkpointed = 0, total = 0, largest = 0;
  for (const Layer& l : w_->layers) {
    if (!l.checkpointed) continue;
    ++checkpointed;
    total += l.activation_bytes;
    largest = std::max(largest, l.activation_bytes);
  }
  ASSERT_EQ(checkpointed, kBlocks);
  EXPECT_EQ(total, kBlocks * hidden + rotary);
  Plan gpu_plan = InfinityPlan(4, false), host_plan = InfinityPlan(4, true);
  // Pinned optimizer buffers: the only pageable copies left are the checkpoints' and ZeRO-3's
  // gradient copies into the fp32 partition (a blocking copy_ with a dtype change goes through
  // a pageable temporary and converts on the host: Task::host_convert_bytes).
  gpu_plan.zero.offload_optimizer.pin_memory = host_plan.zero.offload_optimizer.pin_memory = true;
  const BuiltStep gpu = Build(gpu_plan);
  const BuiltStep host = Build(host_plan);
  EXPECT_EQ(host.facts.host_checkpoint_bytes, kBlocks * hidden + rotary);
  EXPECT_EQ(PeakOf(gpu, MemSpace::kPageableHost, MemCategory::kActivations), 0);
  EXPECT_EQ(PeakOf(host, MemSpace::kPageableHost, MemCategory::kActivations),
            kBlocks * hidden + rotary);
  // On the GPU the checkpoints are gone but for the one being brought back: the peak (in the
  // backward of the first blocks, where the others' checkpoints are already freed either way)
  // differs by the checkpoints still kept at the GPU run's peak.
  const int64_t gpu_peak = PeakOf(gpu, MemSpace::kGpu, MemCategory::kActivations);
  const int64_t host_peak = PeakOf(host, MemSpace::kGpu, MemCategory::kActivations);
  EXPECT_EQ(gpu_peak - host_peak, kBlocks * hidden + rotary - largest);
  // One D2H and one H2D per checkpointed block, both pageable, of the block's kept bytes.
  int d2h = 0, h2d = 0;
  double d2h_bytes = 0;
  for (const Task& t : host.graph.tasks()) {
    if (t.kind == TaskKind::kCopyD2H && !t.pinned && t.host_convert_bytes == 0) {
      ++d2h;
      d2h_bytes += t.bytes;
    }
    if (t.kind == TaskKind::kCopyH2D && !t.pinned) ++h2d;
  }
  EXPECT_EQ(d2h, kBlocks);
  EXPECT_EQ(h2d, kBlocks);
  EXPECT_EQ(d2h_bytes, static_cast<double>(kBlocks * hidden + rotary));
  int converted = 0;
  for (const Task& t : gpu.graph.tasks()) {
    if (t.host_convert_bytes > 0) {
      ++converted;
      continue;
    }
    EXPECT_FALSE((t.kind == TaskKind::kCopyD2H || t.kind == TaskKind::kCopyH2D) && !t.pinned);
  }
  EXPECT_GT(converted, 0);  // the gradient copies, one per reduce bucket
}

TEST_F(InfinityTest, CheckRejectsABufferSizeBelowTheLargestPartition) {
  Plan p = InfinityPlan(1, false);
  p.zero.offload_param.device = OffloadDevice::kNvme;
  p.zero.offload_param.nvme_path = "/local_nvme";
  p.zero.offload_param.buffer_size = 100'000'000;
  // The largest tensor is an MLP matrix, h x i elements; its partition over 16 ranks is larger
  // than the default buffer of 1e8 elements.
  const int64_t part = CeilDiv(kH * kI, 16);
  ASSERT_GT(part, 100'000'000);
  EXPECT_EQ(LargestParamPartitionNumel(*w_, p), part);
  const std::string err = NvmeParamBufferError(*w_, p);
  EXPECT_NE(err.find("buffer_size"), std::string::npos) << err;
  EXPECT_NE(err.find("More elements"), std::string::npos) << err;
  EXPECT_NE(err.find("3506"), std::string::npos) << err;
  EXPECT_NE(err.find(std::to_string(part + 1)), std::string::npos) << err;
  // Tiled in 2, a tile's weight is half the matrix: its partition fits the default buffer.
  p.linear_tiles = 2;
  EXPECT_EQ(LargestParamPartitionNumel(*w_, p), CeilDiv(CeilDiv(kH * kI, 2), 16));
  EXPECT_EQ(NvmeParamBufferError(*w_, p), "");
}

TEST_F(InfinityTest, ProposedTilesKeepATileUnderASixteenthOfTheGpu) {
  // One block is 7.87e9 fp16 elements = 15.7 GB; 32 GB / 16 = 2 GB: 8 tiles.
  EXPECT_EQ(ProposedLinearTiles(*w_, Precision::kFp16, 32e9), 8);
  EXPECT_EQ(ProposedLinearTiles(*w_, Precision::kFp16, 1e15), 1);
}

// The trillion-parameter llama on one DGX-2 (16 V100-32GB, 1.5 TB): tiling and NVMe make the
// GPUs fit, but DeepSpeed 0.14.5 keeps the 16-bit gradient partitions of every rank in host
// memory (stage3.py: grad_partitions_flat_buffer on the optimizer's device, "cpu" for CPU and
// NVMe offload alike), 2 bytes x 1e12 = 2 TB per node, more than the node's 1.5 TB
// (docs/validation/papers.md). With 3 TB the plan fits, tiled and on NVMe (2.5 TB no longer
// does: PyTorch's pinned allocator rounds each rank's gradient buffer up to a power of two,
// 2.27 TiB per node, and 5 % of the RAM is kept free).
TEST_F(InfinityTest, OneTrillionParametersOnOneDgx2) {
  auto profile = FindHardwareProfile("dgx-2", DSPLAN_TEST_DATA_DIR);
  ASSERT_TRUE(profile.ok()) << profile.status().ToString();
  PlannerRequest r;
  r.spec = *spec_;
  r.nodes = 1;
  r.gpus_per_node = 16;
  r.profile = &*profile;
  r.shape.seq_len = 1024;
  r.stage = 3;
  r.PinGradientCheckpointing(true);
  r.PinMicroBatch(1);
  r.host_memory_bytes = 1'500'000'000'000;
  r.nvme_bytes = 28'000'000'000'000;
  auto res = RunPlanner(r);
  ASSERT_TRUE(res.ok()) << res.status().ToString();
  EXPECT_TRUE(res->recommendations.empty());
  bool host_limited_tiled = false;
  for (const RejectedFamily& f : res->rejected) {
    if (f.family.find("params->nvme") != std::string::npos &&
        f.family.find("tiles") != std::string::npos) {
      EXPECT_NE(f.reason.find("host RAM"), std::string::npos) << f.family << ": " << f.reason;
      host_limited_tiled = true;
    }
  }
  EXPECT_TRUE(host_limited_tiled);

  r.host_memory_bytes = 3'000'000'000'000;
  res = RunPlanner(r);
  ASSERT_TRUE(res.ok()) << res.status().ToString();
  ASSERT_FALSE(res->recommendations.empty());
  const ScoredPlan& best = res->recommendations.front();
  EXPECT_GT(best.plan.linear_tiles, 1);
  EXPECT_EQ(best.plan.zero.offload_param.device, OffloadDevice::kNvme);
  EXPECT_TRUE(best.prediction.fits);
  // The model-code changes name TiledLinear.
  const std::vector<std::string> changes = ModelCodeChanges(best.plan);
  ASSERT_FALSE(changes.empty());
  EXPECT_NE(changes.front().find("deepspeed.zero.TiledLinear"), std::string::npos);
}

// The node's NVMe drives serve all its ranks at once: two ranks on one node take twice as long
// per byte as two ranks on two nodes, which swap the same bytes each.
TEST(NvmeSharingTest, RanksOfANodeShareItsDrives) {
  auto spec = LoadModel("gpt2", DSPLAN_TEST_DATA_DIR);
  ASSERT_TRUE(spec.ok());
  auto hw = FindHardwareProfile("v100-32gb", DSPLAN_TEST_DATA_DIR);
  ASSERT_TRUE(hw.ok());
  RunShape o;
  o.seq_len = 256;
  o.precision = Precision::kFp16;
  auto w = BuildWorkload(*spec, o);
  ASSERT_TRUE(w.ok());
  Plan p;
  p.precision = Precision::kFp16;
  p.seq_len = 256;
  p.zero.stage = 3;
  p.zero.offload_optimizer.device = OffloadDevice::kNvme;
  p.zero.offload_optimizer.nvme_path = "/nvme";
  const SimulationContext ctx =
      MakeSimulationContext(*w, *hw, p.precision, p.zero.stage3_param_persistence_threshold);
  SimulateOptions so;
  so.nvme_bytes = int64_t{1} << 40;
  p.nodes = 1;
  p.gpus_per_node = 2;
  auto shared = Simulate(ctx, p, so);
  p.nodes = 2;
  p.gpus_per_node = 1;
  auto alone = Simulate(ctx, p, so);
  ASSERT_TRUE(shared.ok() && alone.ok());
  const int nvme = static_cast<int>(Resource::kNvme);
  ASSERT_GT(alone->busy_s[nvme], 0);
  EXPECT_NEAR(shared->busy_s[nvme], 2 * alone->busy_s[nvme], 1e-9 * alone->busy_s[nvme]);
}

// NVMe time follows the config's aio block size and queue depth through the profile's measured
// points (h200-measured: io_uring O_DIRECT at 128 KiB / 1 MiB / 8 MiB and depths 1 / 8 / 32).
TEST(NvmeSharingTest, AioSettingsPickTheMeasuredPoint) {
  auto hw = FindHardwareProfile("h200-measured", DSPLAN_TEST_DATA_DIR);
  ASSERT_TRUE(hw.ok());
  ASSERT_FALSE(hw->nvme.points.empty());
  const auto point = [&](int64_t bs, int qd) {
    for (const NvmePoint& p : hw->nvme.points) {
      if (p.block_size == bs && p.queue_depth == qd) return p;
    }
    ADD_FAILURE() << "no point " << bs << " " << qd;
    return NvmePoint{};
  };
  AioConfig a;  // DeepSpeed's defaults: 1 MiB blocks, depth 8, one thread
  EXPECT_EQ(NvmeAioRate(hw->nvme, a, true), point(1 << 20, 8).read_bytes_per_s);
  EXPECT_EQ(NvmeAioRate(hw->nvme, a, false), point(1 << 20, 8).write_bytes_per_s);
  a.intra_op_parallelism = 4;  // 4 threads x depth 8 = 32 in flight
  EXPECT_EQ(NvmeAioRate(hw->nvme, a, true), point(1 << 20, 32).read_bytes_per_s);
  a = AioConfig{};
  a.block_size = 6 << 20;  // nearest measured block (log scale): 8 MiB
  a.queue_depth = 4;       // largest measured depth not above 4: 1
  EXPECT_EQ(NvmeAioRate(hw->nvme, a, true), point(8 << 20, 1).read_bytes_per_s);
  NvmeProfile none = hw->nvme;
  none.points.clear();
  EXPECT_EQ(NvmeAioRate(none, a, true), none.read_bytes_per_s.value);
}

// --- ds_config: the activation_checkpointing block and the dsplan block's tiles ---

DsConfigContext Ctx() {
  DsConfigContext c;
  c.gpus_per_node = 16;
  c.shape.seq_len = 1024;
  c.PinGradientCheckpointing(true);
  return c;
}

TEST(InfinityConfigTest, ContiguousCheckpointsNeedPartitionedActivations) {
  const auto parsed = ParseDsConfigText(
      R"({"train_micro_batch_size_per_gpu": 1, "fp16": {"enabled": true},
          "zero_optimization": {"stage": 3},
          "activation_checkpointing": {"contiguous_memory_optimization": true,
                                       "number_checkpoints": 128}})",
      Ctx());
  ASSERT_FALSE(parsed.ok());
  EXPECT_NE(parsed.status().message().find("partition_activations"), std::string::npos);
  EXPECT_NE(parsed.status().message().find("Contiguous Checkpointing is only available"),
            std::string::npos);
}

TEST(InfinityConfigTest, CpuCheckpointingAndTilesRoundTrip) {
  const auto parsed = ParseDsConfigText(
      R"({"train_micro_batch_size_per_gpu": 1, "fp16": {"enabled": true},
          "zero_optimization": {"stage": 3},
          "activation_checkpointing": {"cpu_checkpointing": true, "partition_activations": true},
          "dsplan": {"linear_tiles": 8}})",
      Ctx());
  ASSERT_TRUE(parsed.ok()) << parsed.status().ToString();
  const Plan& p = parsed->plan;
  EXPECT_TRUE(p.activation_checkpointing.cpu_checkpointing);
  EXPECT_TRUE(p.CheckpointsOnHost());
  EXPECT_EQ(p.linear_tiles, 8);
  bool api_warning = false;
  for (const std::string& w : parsed->warnings) {
    if (w.find("deepspeed.checkpointing.checkpoint") != std::string::npos) api_warning = true;
  }
  EXPECT_TRUE(api_warning);
  // Emitted and read back: the same tiles and checkpoint placement.
  const auto again = ParseDsConfigText(EmitDsConfig(p, EmitStyle::kExplicit).dump(), ContextForPlan(p));
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_EQ(again->plan.linear_tiles, 8);
  EXPECT_EQ(again->plan.activation_checkpointing, p.activation_checkpointing);
}

TEST(InfinityConfigTest, TilesBelowStageThreeAreRefused) {
  Plan p;
  p.zero.stage = 2;
  p.linear_tiles = 4;
  const Status s = ValidatePlan(p);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("stage 3"), std::string::npos);
}

// --- node profiles ---

constexpr const char* kNode = R"(name: test-node
description: "a node"
gpu_profile: v100-32gb
gpus_per_node: {value: 16, datasheet: "sheet"}
host:
  cores: {value: 48, datasheet: "sheet"}
  ram_bytes: {value: 1.5TB, datasheet: "sheet"}
  cpu_adam_per_core: {value: 2.5e8, assumption: "guess"}
  memory_bytes_per_s: {value: 140GB/s, assumption: "guess"}
nvme:
  drives: {value: 8, datasheet: "sheet"}
  drive_capacity_bytes: {value: 3.84TB, datasheet: "sheet"}
  drive_read_bytes_per_s: {value: 3GB/s, assumption: "guess"}
  drive_write_bytes_per_s: {value: 2GB/s, assumption: "guess"}
)";

TEST(NodeProfileTest, AppliesHostNvmeAndGpuCount) {
  auto node = ParseNodeProfile(kNode, "test.yaml");
  ASSERT_TRUE(node.ok()) << node.status().ToString();
  auto gpu = FindHardwareProfile("v100-32gb", DSPLAN_TEST_DATA_DIR);
  ASSERT_TRUE(gpu.ok());
  const HardwareProfile p = ApplyNodeProfile(*gpu, *node);
  EXPECT_EQ(p.gpus_per_node, 16);
  EXPECT_EQ(p.host.cores, 48);
  EXPECT_DOUBLE_EQ(p.host.ram_bytes.value, 1.5e12);
  EXPECT_TRUE(p.nvme.present);
  EXPECT_DOUBLE_EQ(p.nvme.capacity_bytes.value, 8 * 3.84e12);
  EXPECT_DOUBLE_EQ(p.nvme.read_bytes_per_s.value, 8 * 3e9);
  EXPECT_DOUBLE_EQ(p.nvme.write_bytes_per_s.value, 8 * 2e9);
  // CPU Adam: min(threads x 2.5e8, 140e9 / 28 = 5e9), ending at the node's 48 cores.
  ASSERT_FALSE(p.host.cpu_adam.empty());
  EXPECT_EQ(p.host.cpu_adam.front().threads, 1);
  EXPECT_DOUBLE_EQ(p.host.cpu_adam.front().elements_per_s, 2.5e8);
  EXPECT_EQ(p.host.cpu_adam.back().threads, 48);
  EXPECT_DOUBLE_EQ(p.host.cpu_adam.back().elements_per_s, 5e9);
  EXPECT_EQ(p.host.cpu_adam_source.kind, SourceKind::kAssumption);
  EXPECT_EQ(p.name, "v100-32gb@test-node");
}

TEST(NodeProfileTest, ShippedNodesLoadWithTheirGpu) {
  for (const char* n : {"dgx-2", "dgx-a100", "dgx-h100", "dgx-h200"}) {
    auto p = FindHardwareProfile(n, DSPLAN_TEST_DATA_DIR);
    ASSERT_TRUE(p.ok()) << n << ": " << p.status().ToString();
    EXPECT_GE(p->gpus_per_node, 8) << n;
    EXPECT_TRUE(p->nvme.present) << n;
  }
  auto dgx2 = FindHardwareProfile("dgx-2", DSPLAN_TEST_DATA_DIR);
  ASSERT_TRUE(dgx2.ok());
  EXPECT_EQ(dgx2->gpus_per_node, 16);
  EXPECT_EQ(dgx2->host.cores, 48);
  EXPECT_EQ(dgx2->gpu.name, "Tesla V100-SXM2-32GB");
}

TEST(NodeProfileTest, ParseErrorsNameTheKey) {
  struct Case {
    std::string edit_from, edit_to, expect;
  };
  const std::vector<Case> cases = {
      {"gpu_profile: v100-32gb\n", "", "gpu_profile"},
      {"{value: 16, datasheet", "{value: 16.5, datasheet", "gpus_per_node"},
      {"  memory_bytes_per_s: {value: 140GB/s, assumption: \"guess\"}\n", "",
       "memory_bytes_per_s go together"},
      {"nvme:\n", "nvme:\n  raid: 0\n", "raid"},
      {"{value: 3GB/s, assumption", "{value: fast, assumption", "drive_read_bytes_per_s"},
      {"  cores: {value: 48", "  cores: {value: 0", "host.cores"},
  };
  for (const Case& c : cases) {
    std::string text = kNode;
    const size_t at = text.find(c.edit_from);
    ASSERT_NE(at, std::string::npos) << c.edit_from;
    text.replace(at, c.edit_from.size(), c.edit_to);
    auto node = ParseNodeProfile(text, "bad.yaml");
    ASSERT_FALSE(node.ok()) << c.expect;
    EXPECT_NE(node.status().message().find("bad.yaml"), std::string::npos)
        << node.status().message();
    EXPECT_NE(node.status().message().find(c.expect), std::string::npos)
        << node.status().message();
  }
  EXPECT_FALSE(FindNodeProfile("dgx-3", DSPLAN_TEST_DATA_DIR).ok());
  EXPECT_NE(FindNodeProfile("dgx-3", DSPLAN_TEST_DATA_DIR).status().message().find("dgx-2"),
            std::string::npos);
}

}  // namespace
}  // namespace dsplan
