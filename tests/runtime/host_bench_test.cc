#include <sys/statfs.h>

#include <cstdlib>
#include <filesystem>

#include <gtest/gtest.h>

#include "core/units.h"
#include "runtime/profiler/host_bench.h"

namespace dsplan {
namespace {

namespace fs = std::filesystem;

constexpr long kTmpfsMagic = 0x01021994;

TEST(HostBenchTest, CoresRamAndSmallTimingsArePositive) {
  EXPECT_GE(PhysicalCores(), 1);
  auto ram = HostRamBytes();
  ASSERT_TRUE(ram.ok());
  EXPECT_GT(*ram, 64 * kMiB);
  auto adam = TimeCpuAdam(1 << 16, 2, Repeats{1, 3});
  ASSERT_TRUE(adam.ok());
  EXPECT_EQ(adam->repeats, 3);
  EXPECT_GT(adam->median_s, 0);
  EXPECT_LE(adam->min_s, adam->median_s);
  auto mc = TimeMemcpy(4 * kMiB, 2, Repeats{1, 3});
  ASSERT_TRUE(mc.ok());
  EXPECT_GT(mc->median_s, 0);
  auto al = TimePageableAlloc(4 * kMiB, Repeats{0, 2});
  ASSERT_TRUE(al.ok());
  EXPECT_GT(al->median_s, 0);
  auto par = TimePageableAlloc(4 * kMiB + 100, Repeats{0, 2}, 3);  // pages not a multiple of 3
  ASSERT_TRUE(par.ok());
  EXPECT_EQ(par->repeats, 2);
  EXPECT_GT(par->median_s, 0);
  EXPECT_FALSE(TimePageableAlloc(4 * kMiB, Repeats{0, 1}, 0).ok());
}

TEST(HostBenchTest, NvmeOnADiskFolderWritesReadsAndCleansUp) {
  fs::path dir = fs::current_path() / "nvme_test_dir";
  fs::create_directories(dir);
  NvmeOptions o;
  o.file_bytes = 4 * kMiB;
  o.block_sizes = {kMiB};
  o.queue_depths = {1, 4};
  auto r = MeasureNvme(dir.string(), o);
  struct statfs sfs;
  if (!r.ok() && statfs(dir.c_str(), &sfs) == 0 && sfs.f_type == kTmpfsMagic) {
    GTEST_SKIP() << "the build folder is on tmpfs: " << r.status().message();
  }
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_GT(r->capacity_bytes, 0);
  ASSERT_FALSE(r->points.empty());
  for (const NvmePoint& p : r->points) {
    EXPECT_GT(p.read_bytes_per_s, 0);
    EXPECT_GT(p.write_bytes_per_s, 0);
    EXPECT_EQ(p.block_size, kMiB);
  }
  EXPECT_FALSE(r->method.empty());
  EXPECT_TRUE(fs::is_empty(dir)) << "the test file was left behind";
  fs::remove_all(dir);
}

TEST(HostBenchTest, NvmeErrorsSayWhatIsWrong) {
  NvmeOptions o;
  o.file_bytes = 4 * kMiB;
  auto missing = MeasureNvme("/nonexistent-dsplan-dir", o);
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("/nonexistent-dsplan-dir"), std::string::npos);

  o.file_bytes = int64_t{1} << 60;  // more than any disk
  auto space = MeasureNvme(fs::current_path().string(), o);
  ASSERT_FALSE(space.ok());
  EXPECT_NE(space.status().message().find("free"), std::string::npos) << space.status().message();

  struct statfs sfs;
  if (statfs("/dev/shm", &sfs) == 0 && sfs.f_type == kTmpfsMagic) {
    o.file_bytes = 4 * kMiB;
    auto tmpfs = MeasureNvme("/dev/shm", o);
    ASSERT_FALSE(tmpfs.ok());
    EXPECT_NE(tmpfs.status().message().find("tmpfs"), std::string::npos)
        << tmpfs.status().message();
  }
}

}  // namespace
}  // namespace dsplan
