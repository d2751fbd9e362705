// The advice when the hardware profile is not this machine (core/local_machine.h): its GPU, and
// its host's RAM and cores. The GPUs are given by name and memory as NVML reports them, and the
// hosts by value, so no driver is needed.
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "core/local_machine.h"
#include "core/profile_yaml.h"

namespace dsplan {
namespace {

class LocalMachineTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    shipped_ = new std::vector<ProfileGpu>(ShippedProfileGpus(DSPLAN_TEST_DATA_DIR));
    auto p = FindHardwareProfile("h200-measured", DSPLAN_TEST_DATA_DIR);
    ASSERT_TRUE(p.ok()) << p.status().ToString();
    default_ = new HardwareProfile(*p);
  }
  static void TearDownTestSuite() {
    delete shipped_;
    delete default_;
  }
  static std::vector<ProfileGpu>* shipped_;
  static HardwareProfile* default_;
};
std::vector<ProfileGpu>* LocalMachineTest::shipped_ = nullptr;
HardwareProfile* LocalMachineTest::default_ = nullptr;

TEST_F(LocalMachineTest, ShippedProfilesAreListedWithTheirGpus) {
  bool h100 = false;
  for (const ProfileGpu& p : *shipped_) {
    if (p.profile == "h100-measured") {
      h100 = true;
      EXPECT_EQ(p.gpu_name, "NVIDIA H100 80GB HBM3");
      EXPECT_GT(p.memory_bytes, 80e9);
    }
  }
  EXPECT_TRUE(h100);
}

TEST_F(LocalMachineTest, AnH100UnderTheDefaultH200ProfileIsToldToPassH100Measured) {
  // NVML's total for an H100 80GB HBM3 (81,559 MiB): 0.6 % above the profile's CUDA total.
  const LocalGpu h100{"NVIDIA H100 80GB HBM3", 85520809984, 8};
  auto advice = LocalGpuAdvice(*default_, h100, *shipped_);
  ASSERT_TRUE(advice.has_value());
  // The measured profile of the same GPU, not the datasheet one (h100-sxm has the same name).
  EXPECT_NE(advice->find("--hardware h100-measured"), std::string::npos) << *advice;
  EXPECT_EQ(advice->find("h100-sxm"), std::string::npos) << *advice;
  EXPECT_NE(advice->find("NVIDIA H100 80GB HBM3"), std::string::npos) << *advice;
  EXPECT_NE(advice->find("h200-measured"), std::string::npos) << *advice;
}

TEST_F(LocalMachineTest, AnH200SaysNothing) {
  // NVML's total for an H200 (143,771 MiB), 0.4 % above the profile's.
  const LocalGpu h200{"NVIDIA H200", 150755409920, 1};
  EXPECT_FALSE(LocalGpuAdvice(*default_, h200, *shipped_).has_value());
  EXPECT_TRUE(ProfileDescribesGpu(*default_, h200));
  EXPECT_FALSE(ProfileDescribesGpu(*default_, LocalGpu{"NVIDIA H100 80GB HBM3", 85520809984, 8}));
}

TEST_F(LocalMachineTest, AGpuWithoutAShippedProfileIsToldToMeasureIt) {
  const LocalGpu rtx{"NVIDIA GeForce RTX 4090", 25757220864, 1};
  auto advice = LocalGpuAdvice(*default_, rtx, *shipped_);
  ASSERT_TRUE(advice.has_value());
  EXPECT_NE(advice->find("dsplan profile"), std::string::npos) << *advice;
  EXPECT_EQ(advice->find("--hardware h"), std::string::npos) << *advice;
}

TEST_F(LocalMachineTest, AnotherFormOfTheSameCardFindsItsProfile) {
  // The PCIe A100 80GB has another driver name than the SXM profile's and 7 % more memory than
  // its datasheet 80 GB; the H100 profiles hold as much memory but are another card.
  const LocalGpu a100{"NVIDIA A100 80GB PCIe", 85899345920, 4};
  auto advice = LocalGpuAdvice(*default_, a100, *shipped_);
  ASSERT_TRUE(advice.has_value());
  EXPECT_NE(advice->find("--hardware a100-80gb"), std::string::npos) << *advice;
}

// The default profile's host is the machine it was measured on: 16 cores, 126 GiB (MemTotal).
TEST_F(LocalMachineTest, ABigTrainingNodeIsToldItsRamAndCores) {
  const LocalHost node{int64_t{2048} << 30, 96};
  auto advice = LocalHostAdvice(*default_, node, false, false);
  ASSERT_TRUE(advice.has_value());
  EXPECT_NE(advice->find("--host-memory 2048GiB"), std::string::npos) << *advice;
  EXPECT_NE(advice->find("--host-cores 96"), std::string::npos) << *advice;
  EXPECT_NE(advice->find("h200-measured"), std::string::npos) << *advice;
  EXPECT_NE(advice->find("16 cores"), std::string::npos) << *advice;
}

TEST_F(LocalMachineTest, HostFlagsTheUserGaveAreNotAdvised) {
  const LocalHost node{int64_t{2048} << 30, 96};
  auto ram_only = LocalHostAdvice(*default_, node, false, true);
  ASSERT_TRUE(ram_only.has_value());
  EXPECT_NE(ram_only->find("--host-memory"), std::string::npos) << *ram_only;
  EXPECT_EQ(ram_only->find("--host-cores"), std::string::npos) << *ram_only;
  auto cores_only = LocalHostAdvice(*default_, node, true, false);
  ASSERT_TRUE(cores_only.has_value());
  EXPECT_EQ(cores_only->find("--host-memory"), std::string::npos) << *cores_only;
  EXPECT_NE(cores_only->find("--host-cores 96"), std::string::npos) << *cores_only;
  EXPECT_FALSE(LocalHostAdvice(*default_, node, true, true).has_value());
}

TEST_F(LocalMachineTest, AHostLikeTheProfilesSaysNothing) {
  // The measuring machine itself (MemTotal 135,128,870,912 bytes, 16 cores), and one within 10 %.
  EXPECT_FALSE(LocalHostAdvice(*default_, LocalHost{135128870912, 16}, false, false).has_value());
  EXPECT_FALSE(
      LocalHostAdvice(*default_, LocalHost{int64_t{130} << 30, 17}, false, false).has_value());
  // A smaller host is as wrong as a larger one: offload plans would not fit its RAM.
  auto small = LocalHostAdvice(*default_, LocalHost{int64_t{64} << 30, 16}, false, false);
  ASSERT_TRUE(small.has_value());
  EXPECT_NE(small->find("--host-memory 64GiB"), std::string::npos) << *small;
  EXPECT_EQ(small->find("--host-cores"), std::string::npos) << *small;
}

TEST_F(LocalMachineTest, ThisHostIsRead) {
  // /proc is there on every machine dsplan builds on; the values are this machine's.
  auto host = DetectLocalHost();
  ASSERT_TRUE(host.has_value());
  EXPECT_GT(host->ram_bytes, int64_t{256} << 20);
  EXPECT_GE(host->cores, 1);
}

}  // namespace
}  // namespace dsplan
