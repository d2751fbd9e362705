#include <gtest/gtest.h>

#include "core/units.h"

namespace dsplan {
namespace {

TEST(UnitsTest, FormatsBinaryMemoryAndDecimalFlops) {
  EXPECT_EQ(FormatBytes(512), "512 B");
  EXPECT_EQ(FormatBytes(1.5 * kGiB), "1.50 GiB");
  EXPECT_EQ(FormatBytes(300.0 * kMiB), "300 MiB");
  EXPECT_EQ(FormatFlops(1.234e12), "1.23 TFLOP");
  EXPECT_EQ(FormatCount(6738415616.0), "6.74 B");
}

TEST(UnitsTest, ParsesSizesWithUnits) {
  EXPECT_EQ(*ParseSize("512GiB", "--host-memory"), 512 * kGiB);
  EXPECT_EQ(*ParseSize("1.5TB", "--nvme"), 1500000000000);
  EXPECT_EQ(*ParseSize("80 GB", "x"), 80000000000);
  EXPECT_EQ(*ParseSize("4096", "x"), 4096);
  EXPECT_EQ(*ParseSize("2e9", "x"), 2000000000);
  auto bad = ParseSize("12 parsecs", "--nvme");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("--nvme"), std::string::npos);
  EXPECT_NE(bad.status().message().find("parsecs"), std::string::npos);
  EXPECT_FALSE(ParseSize("-3GB", "x").ok());
  EXPECT_FALSE(ParseSize("GiB", "x").ok());
}

}  // namespace
}  // namespace dsplan
