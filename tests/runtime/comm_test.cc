// The thread Comm (runtime/comm.h): the exact sums in rank order that make a run on threads
// and one on MPI processes give the same bits, in place and out of place; Gather, Broadcast
// and the status agreement the executors use to fail together.
#include "runtime/comm.h"

#include <gtest/gtest.h>

#include <cstring>
#include <functional>
#include <thread>

namespace dsplan {
namespace {

// Runs |body(comm)| on |n| threads, one per rank.
void OnRanks(int n, const std::function<void(Comm&)>& body) {
  std::vector<std::unique_ptr<Comm>> comms = MakeThreadComms(n);
  std::vector<std::thread> th;
  for (int r = 0; r < n; ++r) th.emplace_back([&, r] { body(*comms[r]); });
  for (std::thread& t : th) t.join();
}

TEST(ThreadCommTest, AllReduceSumsInRankOrderThenScales) {
  // In fp32 1e8 + 1 rounds to 1e8: rank order ((0 + 1e8) - 1e8) + 1 gives 1, while adding
  // ranks 1 and 2 first (a tree) would give 1e8 + (-1e8 + 1) = 0.
  const float v[3] = {1e8f, -1e8f, 1.0f};
  std::vector<std::vector<float>> out(3);
  OnRanks(3, [&](Comm& c) {
    std::vector<float> x = {v[c.rank()], static_cast<float>(c.rank() + 1)};
    c.AllReduce(x.data(), 2, 0.5f);
    out[c.rank()] = x;
  });
  for (int r = 0; r < 3; ++r) {
    EXPECT_EQ(out[r][0], 0.5f) << r;
    EXPECT_EQ(out[r][1], 3.0f);  // (1 + 2 + 3) / 2
  }
}

TEST(ThreadCommTest, ReduceScatterGivesEachRankItsSummedChunk) {
  std::vector<std::vector<float>> out(4);
  OnRanks(4, [&](Comm& c) {
    std::vector<float> in(8);  // 4 chunks of 2
    for (int i = 0; i < 8; ++i) in[i] = static_cast<float>(100 * c.rank() + i);
    std::vector<float> mine(2);
    c.ReduceScatter(in.data(), mine.data(), 2, 0.25f);
    out[c.rank()] = mine;
  });
  for (int r = 0; r < 4; ++r) {
    // sum over q of (100 q + 2r + i) = 600 + 4 (2r + i), then / 4.
    EXPECT_EQ(out[r][0], (600.0f + 8.0f * r) / 4) << r;
    EXPECT_EQ(out[r][1], (600.0f + 8.0f * r + 4.0f) / 4) << r;
  }
}

TEST(ThreadCommTest, AllGatherInPlaceAndOutOfPlace) {
  std::vector<std::vector<uint16_t>> in_place(3), apart(3);
  OnRanks(3, [&](Comm& c) {
    std::vector<uint16_t> buf(6, 0);
    buf[2 * c.rank()] = static_cast<uint16_t>(10 + c.rank());
    buf[2 * c.rank() + 1] = static_cast<uint16_t>(20 + c.rank());
    c.AllGather(buf.data() + 2 * c.rank(), buf.data(), 4);
    in_place[c.rank()] = buf;
    const uint16_t mine[2] = {static_cast<uint16_t>(c.rank()), 7};
    std::vector<uint16_t> out(6, 0);
    c.AllGather(mine, out.data(), 4);
    apart[c.rank()] = out;
  });
  for (int r = 0; r < 3; ++r) {
    EXPECT_EQ(in_place[r], (std::vector<uint16_t>{10, 20, 11, 21, 12, 22})) << r;
    EXPECT_EQ(apart[r], (std::vector<uint16_t>{0, 7, 1, 7, 2, 7})) << r;
  }
}

TEST(ThreadCommTest, ScalarGatherBroadcast) {
  std::vector<double> sums(4);
  std::vector<std::vector<std::string>> gathered(4);
  std::vector<std::string> got(4);
  OnRanks(4, [&](Comm& c) {
    sums[c.rank()] = c.AllReduceScalar(0.5 * (c.rank() + 1));
    gathered[c.rank()] = c.Gather(std::string(c.rank() + 1, static_cast<char>('a' + c.rank())), 2);
    std::string s = c.rank() == 1 ? std::string("from one\0with a zero", 20) : "";
    c.Broadcast(&s, 1);
    got[c.rank()] = s;
  });
  for (int r = 0; r < 4; ++r) {
    EXPECT_EQ(sums[r], 5.0);
    EXPECT_EQ(got[r], std::string("from one\0with a zero", 20));
    if (r == 2) {
      EXPECT_EQ(gathered[r], (std::vector<std::string>{"a", "bb", "ccc", "dddd"}));
    } else {
      EXPECT_TRUE(gathered[r].empty()) << r;
    }
  }
}

TEST(ThreadCommTest, RanksAgreeOnTheFirstFailure) {
  std::vector<Status> agreed(4), none(4);
  OnRanks(4, [&](Comm& c) {
    Status mine;
    if (c.rank() == 2) mine = Status::IoError("disk full");
    if (c.rank() == 3) mine = Status::InvalidArgument("bad");
    agreed[c.rank()] = AgreeOnStatus(c, mine);
    none[c.rank()] = AgreeOnStatus(c, Status());
  });
  for (int r = 0; r < 4; ++r) {
    EXPECT_EQ(agreed[r], Status::IoError("rank 2: disk full")) << r;
    EXPECT_TRUE(none[r].ok());
  }
}

TEST(ThreadCommTest, StatusRoundTripsAsBytes) {
  for (const Status& s : {Status(), Status::InvalidArgument("x"), Status::NcclError("y: z"),
                          Status::Internal(std::string("a\0b", 3))}) {
    EXPECT_EQ(DecodeStatus(EncodeStatus(s)), s);
  }
  EXPECT_EQ(DecodeStatus("").code(), Status::Code::kInternal);
}

TEST(ThreadCommTest, OneRankNeedsNoPartner) {
  std::vector<std::unique_ptr<Comm>> one = MakeThreadComms(1);
  float x[2] = {3, 4};
  one[0]->AllReduce(x, 2, 0.5f);
  EXPECT_EQ(x[0], 1.5f);
  EXPECT_EQ(one[0]->AllReduceScalar(2.5), 2.5);
  EXPECT_EQ(one[0]->Gather("q", 0), std::vector<std::string>{"q"});
  EXPECT_STREQ(one[0]->kind(), "threads");
}

}  // namespace
}  // namespace dsplan
