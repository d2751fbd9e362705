// The host executor with ranks as MPI processes: run under `mpirun -np 2` or `-np 4`
// (tests/runtime/CMakeLists.txt). For each plan every rank trains its part; rank 0 then checks
//   * the parameters against unpartitioned single-rank training (ValidateOnHost's tolerances,
//     the ones host_executor_test.cc explains) and the model-state bytes at rest against the
//     StepGraph, category by category;
//   * that the MPI run gives the same bits as the same plan on threads in one process: final
//     parameters, losses, and every rank's bytes per (space, category) at rest and at the peaks.
// Assertions run on rank 0 only, after the collectives, so a failure never leaves a rank waiting.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>

#include <fmt/format.h>

#include "core/hf_config.h"
#include "core/model_spec.h"
#include "runtime/reference_trainers/host_executor.h"
#include "runtime/reference_trainers/host_validation.h"
#include "runtime/launch.h"
#include "runtime/mpi/mpi_session.h"
#include "simulator/step_builder.h"

namespace dsplan {
namespace {

MpiSession* g_mpi = nullptr;

constexpr int64_t kSeq = 16;

Workload Tiny(int64_t micro_batch) {
  auto cfg = HfConfig::Parse(
      R"({"model_type":"gpt2","vocab_size":64,"n_embd":32,"n_head":2,"n_layer":2,
          "n_positions":32,"resid_pdrop":0,"embd_pdrop":0,"attn_pdrop":0})",
      "tiny");
  auto spec = ModelSpecFromHf(*cfg, "tiny");
  RunShape o;
  o.micro_batch = micro_batch;
  o.seq_len = kSeq;
  o.precision = Precision::kFp32;
  return *BuildWorkload(*spec, o);
}

struct Case {
  int stage = 0;
  Precision precision = Precision::kFp32;
  int64_t gas = 1;
  OffloadDevice offload = OffloadDevice::kNone;
  double clip = 0;
};

Plan MakePlan(const Case& c, int world) {
  Plan p;
  p.gpus_per_node = world;
  p.micro_batch = 2;
  p.grad_accum = c.gas;
  p.precision = c.precision;
  p.seq_len = kSeq;
  p.zero.stage = c.stage;
  p.zero.reduce_bucket_size = 3000;
  p.zero.stage3_param_persistence_threshold = 100;
  p.zero.stage3_prefetch_bucket_size = 0;
  p.zero.stage3_max_reuse_distance = 0;
  p.zero.offload_optimizer.device = c.offload;
  p.zero.sub_group_size = 5000;  // NVMe: several sub-groups swapped one after the other
  p.gradient_clipping = c.clip;
  p.optimizer_params.lr = 1e-3;
  p.optimizer_params.weight_decay = 0.01;
  return p;
}

// A folder every rank of this job agrees on (rank 0 creates it), for NVMe swap files.
std::string SharedTempDir(Comm& comm) {
  std::string dir;
  if (comm.rank() == 0) {
    dir = (std::filesystem::temp_directory_path() /
           fmt::format("dsplan_mpi_nvme_{}", ::getpid())).string();
    std::filesystem::create_directories(dir);
  }
  comm.Broadcast(&dir, 0);
  return dir;
}

class HostMpiTest : public ::testing::TestWithParam<Case> {};

TEST_P(HostMpiTest, EqualsUnpartitionedTrainingAndTheThreadRunBitForBit) {
  Comm& comm = g_mpi->comm();
  const int N = comm.size();
  const Case c = GetParam();
  Plan plan = MakePlan(c, N);
  std::string nvme;
  if (c.offload == OffloadDevice::kNvme) {
    nvme = SharedTempDir(comm);
    plan.zero.offload_optimizer.nvme_path = nvme;
  }
  Workload w = Tiny(plan.micro_batch);
  const int64_t threshold = c.stage == 3 ? plan.zero.stage3_param_persistence_threshold : 0;
  auto built = BuildStepGraph(w, ComputeLayerParams(w, threshold), plan, 0);
  ASSERT_TRUE(built.ok()) << built.status().ToString();  // the same on every rank
  HostRunOptions o;
  o.steps = 5;
  o.seed = 7;
  o.comm = &comm;
  auto v = ValidateOnHost(w, plan, built->graph, o);
  ASSERT_TRUE(v.ok()) << v.status().ToString();  // agreed: every rank returns here alike
  EXPECT_TRUE(v->pass);                            // the verdict reaches every rank
  if (comm.rank() == 0) {
    EXPECT_TRUE(v->params_match) << "max |difference| " << v->max_abs_diff << "; "
                                 << v->tolerance;
    EXPECT_TRUE(v->memory_match);
    EXPECT_FALSE(v->memory.empty());
    for (const HostMemoryRow& r : v->memory) {
      EXPECT_EQ(r.executor, r.graph) << MemSpaceName(r.space) << " " << MemCategoryKey(r.category);
    }
    if (c.precision == Precision::kFp32) {
      EXPECT_LT(v->max_abs_diff, 1e-5);
    }
    ASSERT_EQ(v->run.rank_memory.size(), static_cast<size_t>(N));
    ASSERT_EQ(v->run.losses.size(), 5u);
    EXPECT_NEAR(v->run.losses[0], v->reference.losses[0], c.precision == Precision::kFp32 ? 1e-5 : 2e-3);
    fmt::print(stderr, "[ mpi np{} ] stage {} {} gas {} {}{}: max |param - reference| {:.3g}\n", N,
               c.stage, PrecisionName(c.precision), c.gas, OffloadDeviceName(c.offload),
               c.clip > 0 ? " clip" : "", v->max_abs_diff);
    if (c.precision == Precision::kBf16) {
      fmt::print(stderr, "[ mpi np{} ]   bf16: {:.3f}% of the elements beyond one ulp + 1e-4\n", N,
                 100 * v->fraction_beyond_ulp);
    }

    // The same plan on N threads of this process (the other ranks wait at the barrier below).
    HostRunOptions to = o;
    to.comm = nullptr;
    to.params_after_step = v->run.params_step;  // ValidateOnHost compares after that step
    if (!nvme.empty()) {
      to.nvme_dir = nvme + "/threads";
      std::filesystem::create_directories(to.nvme_dir);
    }
    auto threads = RunHostTraining(w, plan, to);
    ASSERT_TRUE(threads.ok()) << threads.status().ToString();
    EXPECT_EQ(v->run.losses, threads->losses);
    ASSERT_EQ(v->run.params.size(), threads->params.size());
    for (size_t t = 0; t < threads->params.size(); ++t) {
      EXPECT_EQ(v->run.params[t], threads->params[t]) << threads->param_names[t];
    }
    for (int r = 0; r < N; ++r) {
      const HostRankMemory& a = v->run.rank_memory[r];
      const HostRankMemory& b = threads->rank_memory[r];
      EXPECT_EQ(a.at_last_step_start, b.at_last_step_start) << "rank " << r;
      EXPECT_EQ(a.peak_last_step, b.peak_last_step) << "rank " << r;
      EXPECT_EQ(a.peak_last_micro_steps, b.peak_last_micro_steps) << "rank " << r;
      EXPECT_EQ(a.peak_run, b.peak_run) << "rank " << r;
    }
    EXPECT_EQ(v->run.partition_numel, threads->partition_numel);
    if (!nvme.empty()) {
      // Each process wrote its own rank's swap files.
      for (int r = 0; r < N; ++r) {
        for (const char* f : {"master", "exp_avg", "exp_avg_sq", "grad"}) {
          const auto path = std::filesystem::path(nvme) / "zero_stage_3" / "optimizer" /
                            fmt::format("rank{}", r) / fmt::format("{}.swp", f);
          EXPECT_TRUE(std::filesystem::exists(path)) << path;
        }
      }
    }
  }
  comm.Barrier();
  if (comm.rank() == 0 && !nvme.empty()) std::filesystem::remove_all(nvme);
}

INSTANTIATE_TEST_SUITE_P(
    Plans, HostMpiTest,
    ::testing::Values(Case{0, Precision::kBf16, 2, OffloadDevice::kNone},
                      Case{1, Precision::kFp32, 2, OffloadDevice::kCpu},
                      Case{2, Precision::kBf16, 2, OffloadDevice::kNone},
                      Case{2, Precision::kFp32, 1, OffloadDevice::kCpu, 0.05},
                      Case{3, Precision::kFp32, 2, OffloadDevice::kNvme},
                      Case{3, Precision::kBf16, 1, OffloadDevice::kCpu}),
    [](const ::testing::TestParamInfo<Case>& i) {
      return fmt::format("stage{}_{}_gas{}_{}{}", i.param.stage, PrecisionName(i.param.precision),
                         i.param.gas, OffloadDeviceName(i.param.offload),
                         i.param.clip > 0 ? "_clip" : "");
    });

TEST(HostMpiErrorTest, WorldSizeMismatchNamesBothNumbersOnEveryRank) {
  Comm& comm = g_mpi->comm();
  const int N = comm.size();
  Plan plan = MakePlan(Case{2, Precision::kFp32, 1}, 2 * N);
  HostRunOptions o;
  o.comm = &comm;
  auto r = RunHostTraining(Tiny(plan.micro_batch), plan, o);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Status::Code::kInvalidArgument);
  EXPECT_NE(r.status().message().find(fmt::format("the plan has {} ranks", 2 * N)),
            std::string::npos) << r.status().message();
  EXPECT_NE(r.status().message().find(fmt::format("the MPI job has {} processes", N)),
            std::string::npos) << r.status().message();
}

TEST(HostMpiErrorTest, ARankThatFailsAloneFailsTheJob) {
  // Rank 1 alone is given an NVMe folder that does not exist: every rank returns its error
  // instead of waiting in a collective for it.
  Comm& comm = g_mpi->comm();
  Plan plan = MakePlan(Case{3, Precision::kFp32, 1, OffloadDevice::kNvme}, comm.size());
  const std::string dir = SharedTempDir(comm);
  plan.zero.offload_optimizer.nvme_path = dir;
  HostRunOptions o;
  o.comm = &comm;
  o.nvme_dir = comm.rank() == 1 ? dir + "/missing" : dir;
  auto r = RunHostTraining(Tiny(plan.micro_batch), plan, o);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Status::Code::kInvalidArgument);
  EXPECT_NE(r.status().message().find("rank 1: host executor: NVMe directory"), std::string::npos)
      << r.status().message();
  EXPECT_NE(r.status().message().find("/missing"), std::string::npos);
  comm.Barrier();
  if (comm.rank() == 0) std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace dsplan

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  auto launch = dsplan::DetectLaunch();
  if (!launch.ok() || !launch->distributed()) {
    std::fprintf(stderr, "host_executor_mpi_test: run it under mpirun -np 2 (or 4)\n");
    return 2;
  }
  auto session = dsplan::MpiSession::Start(*launch);
  if (!session.ok()) {
    std::fprintf(stderr, "%s\n", session.status().ToString().c_str());
    return 2;
  }
  dsplan::g_mpi = session->get();
  dsplan::Comm& comm = dsplan::g_mpi->comm();
  if (comm.rank() != 0) {
    // One report: rank 0's. The other ranks run the same tests silently.
    auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
  }
  int rc = RUN_ALL_TESTS();
  // Every rank exits with rank 0's verdict.
  std::string code = std::to_string(rc);
  comm.Broadcast(&code, 0);
  rc = std::stoi(code);
  session->reset();  // MPI_Finalize
  return rc;
}
