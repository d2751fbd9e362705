#include <gtest/gtest.h>

#include "core/collectives.h"

namespace dsplan {
namespace {

TEST(CollectivesTest, BusFactorsFollowNcclTests) {
  EXPECT_DOUBLE_EQ(BusFactor(Collective::kAllReduce, 8), 2.0 * 7 / 8);
  EXPECT_DOUBLE_EQ(BusFactor(Collective::kReduceScatter, 8), 7.0 / 8);
  EXPECT_DOUBLE_EQ(BusFactor(Collective::kAllGather, 4), 3.0 / 4);
  EXPECT_DOUBLE_EQ(BusFactor(Collective::kAllToAll, 2), 0.5);
  EXPECT_DOUBLE_EQ(BusFactor(Collective::kBroadcast, 8), 1.0);
  EXPECT_DOUBLE_EQ(BusFactor(Collective::kSendRecv, 2), 1.0);
  EXPECT_DOUBLE_EQ(BusFactor(Collective::kAllReduce, 1), 0.0);
}

TEST(CollectivesTest, TimeAndBandwidthInvert) {
  // 1 GiB all-reduce on 8 ranks at 400 GB/s busbw and 20 us latency.
  const double s = CollectiveSeconds(Collective::kAllReduce, 8, 1 << 30, 20e-6, 400e9);
  EXPECT_NEAR(s, 20e-6 + (1 << 30) * 1.75 / 400e9, 1e-12);
  EXPECT_NEAR(BusBandwidth(Collective::kAllReduce, 8, 1 << 30, s - 20e-6), 400e9, 1e-3);
  EXPECT_EQ(CollectiveSeconds(Collective::kAllGather, 1, 1 << 20, 20e-6, 400e9), 0.0);
}

}  // namespace
}  // namespace dsplan
