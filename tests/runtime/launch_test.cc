// How dsplan finds that mpirun or srun started it (runtime/launch.h), and what a build without
// MPI says then (runtime/mpi/no_mpi_session.cc, linked into this test on its own).
#include "runtime/launch.h"

#include <gtest/gtest.h>

#include <map>
#include <string>

#include "runtime/mpi/mpi_session.h"

namespace dsplan {
namespace {

Result<LaunchInfo> Detect(const std::map<std::string, std::string>& env) {
  return DetectLaunch([&](const char* name) -> const char* {
    auto it = env.find(name);
    return it == env.end() ? nullptr : it->second.c_str();
  });
}

TEST(LaunchTest, AloneIsNotDistributed) {
  auto l = Detect({{"HOME", "/root"}});
  ASSERT_TRUE(l.ok());
  EXPECT_EQ(l->launcher, "");
  EXPECT_EQ(l->world_size, 1);
  EXPECT_FALSE(l->distributed());
}

TEST(LaunchTest, OpenMpiWinsOverItsOwnPmixVariables) {
  auto l = Detect({{"OMPI_COMM_WORLD_SIZE", "4"}, {"OMPI_COMM_WORLD_RANK", "3"},
                   {"OMPI_COMM_WORLD_LOCAL_RANK", "1"}, {"PMIX_RANK", "3"}});
  ASSERT_TRUE(l.ok()) << l.status().ToString();
  EXPECT_EQ(l->launcher, "mpirun");
  EXPECT_EQ(l->world_size, 4);
  EXPECT_EQ(l->rank, 3);
  EXPECT_EQ(l->local_rank, 1);
  EXPECT_EQ(l->evidence, "OMPI_COMM_WORLD_SIZE=4 OMPI_COMM_WORLD_RANK=3");
  EXPECT_TRUE(l->distributed());
}

TEST(LaunchTest, SrunStepButNotAnSbatchScript) {
  // srun: a job step with its task count.
  auto step = Detect({{"SLURM_STEP_NUM_TASKS", "8"}, {"SLURM_NTASKS", "8"},
                      {"SLURM_PROCID", "5"}, {"SLURM_LOCALID", "1"}});
  ASSERT_TRUE(step.ok());
  EXPECT_EQ(step->launcher, "srun");
  EXPECT_EQ(step->world_size, 8);
  EXPECT_EQ(step->rank, 5);
  EXPECT_EQ(step->local_rank, 1);
  // The batch script of `sbatch --ntasks 8` has SLURM_NTASKS and SLURM_PROCID=0 but is one
  // process: dsplan runs there as itself.
  auto batch = Detect({{"SLURM_NTASKS", "8"}, {"SLURM_PROCID", "0"}, {"SLURM_LOCALID", "0"}});
  ASSERT_TRUE(batch.ok());
  EXPECT_FALSE(batch->distributed());
}

TEST(LaunchTest, PmiAndPmix) {
  auto pmi = Detect({{"PMI_SIZE", "2"}, {"PMI_RANK", "1"}});
  ASSERT_TRUE(pmi.ok());
  EXPECT_EQ(pmi->launcher, "PMI");
  EXPECT_EQ(pmi->world_size, 2);
  EXPECT_EQ(pmi->local_rank, -1);  // MPI's shared-memory split tells
  auto pmix = Detect({{"PMIX_RANK", "0"}});
  ASSERT_TRUE(pmix.ok());
  EXPECT_EQ(pmix->launcher, "PMIx");
  EXPECT_EQ(pmix->world_size, 0);  // unknown until MPI is initialized
  EXPECT_TRUE(pmix->distributed());
}

TEST(LaunchTest, OneProcessJobRunsAlone) {
  auto l = Detect({{"OMPI_COMM_WORLD_SIZE", "1"}, {"OMPI_COMM_WORLD_RANK", "0"}});
  ASSERT_TRUE(l.ok());
  EXPECT_EQ(l->launcher, "mpirun");
  EXPECT_FALSE(l->distributed());
}

TEST(LaunchTest, BadValuesNameTheVariable) {
  auto word = Detect({{"OMPI_COMM_WORLD_SIZE", "four"}, {"OMPI_COMM_WORLD_RANK", "0"}});
  ASSERT_FALSE(word.ok());
  EXPECT_EQ(word.status().code(), Status::Code::kInvalidArgument);
  EXPECT_NE(word.status().message().find("OMPI_COMM_WORLD_SIZE='four'"), std::string::npos)
      << word.status().message();
  auto past = Detect({{"PMI_SIZE", "2"}, {"PMI_RANK", "2"}});
  ASSERT_FALSE(past.ok());
  EXPECT_NE(past.status().message().find("rank 2 of 2"), std::string::npos);
  auto zero = Detect({{"SLURM_STEP_NUM_TASKS", "0"}, {"SLURM_PROCID", "0"}});
  ASSERT_FALSE(zero.ok());
  EXPECT_NE(zero.status().message().find("SLURM_STEP_NUM_TASKS=0"), std::string::npos);
}

TEST(LaunchTest, BuildWithoutMpiRefusesToRunAsOneOfSeveralRanks) {
  EXPECT_FALSE(MpiBuilt());
  auto l = Detect({{"OMPI_COMM_WORLD_SIZE", "2"}, {"OMPI_COMM_WORLD_RANK", "0"}});
  ASSERT_TRUE(l.ok());
  auto s = MpiSession::Start(*l);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), Status::Code::kUnsupported);
  const std::string m = s.status().message();
  EXPECT_NE(m.find("mpirun started this process as one rank of 2 processes"), std::string::npos)
      << m;
  EXPECT_NE(m.find("OMPI_COMM_WORLD_SIZE=2"), std::string::npos) << m;
  EXPECT_NE(m.find("built without MPI"), std::string::npos) << m;
  EXPECT_NE(m.find("-DDSPLAN_WITH_MPI=ON"), std::string::npos) << m;
  EXPECT_NE(m.find("libopenmpi-dev"), std::string::npos) << m;
}

}  // namespace
}  // namespace dsplan
