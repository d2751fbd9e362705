// The advice when the default hardware profile is not this machine's GPU (core/local_gpu.h).
// The GPUs are given by name and memory as NVML reports them, so no driver is needed.
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "core/local_gpu.h"
#include "core/profile_yaml.h"

namespace dsplan {
namespace {

class LocalGpuTest : public ::testing::Test {
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
std::vector<ProfileGpu>* LocalGpuTest::shipped_ = nullptr;
HardwareProfile* LocalGpuTest::default_ = nullptr;

TEST_F(LocalGpuTest, ShippedProfilesAreListedWithTheirGpus) {
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

TEST_F(LocalGpuTest, AnH100UnderTheDefaultH200ProfileIsToldToPassH100Measured) {
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

TEST_F(LocalGpuTest, AnH200SaysNothing) {
  // NVML's total for an H200 (143,771 MiB), 0.4 % above the profile's.
  const LocalGpu h200{"NVIDIA H200", 150755409920, 1};
  EXPECT_FALSE(LocalGpuAdvice(*default_, h200, *shipped_).has_value());
}

TEST_F(LocalGpuTest, AGpuWithoutAShippedProfileIsToldToMeasureIt) {
  const LocalGpu rtx{"NVIDIA GeForce RTX 4090", 25757220864, 1};
  auto advice = LocalGpuAdvice(*default_, rtx, *shipped_);
  ASSERT_TRUE(advice.has_value());
  EXPECT_NE(advice->find("dsplan profile"), std::string::npos) << *advice;
  EXPECT_EQ(advice->find("--hardware h"), std::string::npos) << *advice;
}

TEST_F(LocalGpuTest, AnotherFormOfTheSameCardFindsItsProfile) {
  // The PCIe A100 80GB has another driver name than the SXM profile's and 7 % more memory than
  // its datasheet 80 GB; the H100 profiles hold as much memory but are another card.
  const LocalGpu a100{"NVIDIA A100 80GB PCIe", 85899345920, 4};
  auto advice = LocalGpuAdvice(*default_, a100, *shipped_);
  ASSERT_TRUE(advice.has_value());
  EXPECT_NE(advice->find("--hardware a100-80gb"), std::string::npos) << *advice;
}

}  // namespace
}  // namespace dsplan
