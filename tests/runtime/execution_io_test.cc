// An Execution survives the trip from an MPI rank to rank 0 (runtime/execution_io.h) exactly.
#include "runtime/execution_io.h"

#include <gtest/gtest.h>

#include <cmath>
#include <string>

namespace dsplan {
namespace {

TEST(ExecutionIoTest, EveryFieldRoundTripsExactly) {
  Execution e;
  e.device_name = "NVIDIA H200 \"quoted\"";
  e.driver = "CUDA driver API 13.0";
  e.libraries = "cuBLASLt 13.1.0, NCCL 2.28.3";
  e.attention_path = "fused kernel (runtime/cuda/flash_attention, bf16, head dim 64)";
  e.device_total_bytes = int64_t{150} << 30;
  e.world_size = 8;
  e.step_s = {0.1 + 0.2, 1.0 / 3.0, 5e-324};
  e.start_s = {0, std::nextafter(1.0, 2.0)};
  e.end_s = {1e-9, 123456.789};
  e.op_class = {{0.5, 0.25, 1.0 / 7.0}, {}};
  e.peak_allocated_bytes = 72'768'000'123;
  e.peak_reserved_bytes = 73'000'000'000;
  e.context_bytes = 548'000'000;
  e.device_used_peak_bytes = -1;
  e.scratch_bytes = 2 << 20;
  e.host_pinned_bytes = 11;
  e.host_pageable_bytes = 12;
  e.nvme_bytes = 13;
  e.out_of_memory = true;
  e.oom_task = 5;
  e.oom_request_bytes = 3'060'000'000;
  e.oom_allocated_bytes = 136'960'000'000;
  e.oom_message = "CUDA out of memory\nline two";
  auto back = ExecutionFromWire(ExecutionToWire(e));
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(*back, e);
  EXPECT_EQ(*ExecutionFromWire(ExecutionToWire(Execution{})), Execution{});
}

// A tripwire: a field added to Execution must be added to ExecutionToWire / ExecutionFromWire
// (and to EveryFieldRoundTripsExactly), or ranks under MPI drop it on the way to rank 0. The
// size is the x86-64 libstdc++ layout of the fields it carries (5 strings, 3 double vectors, an
// OpClassSeconds vector, 11 int64, an int, a bool, a TaskId).
TEST(ExecutionIoTest, KnowsEveryFieldOfExecution) {
  if (sizeof(void*) != 8 || sizeof(std::string) != 32) GTEST_SKIP() << "another ABI";
  EXPECT_EQ(sizeof(Execution), 360u)
      << "Execution has changed: carry the new field in runtime/execution_io.cc, add it to "
         "EveryFieldRoundTripsExactly, then update this size";
}

TEST(ExecutionIoTest, OtherBytesAreAnError) {
  auto bad = ExecutionFromWire("{\"device_name\": 3}");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), Status::Code::kInvalidArgument);
  EXPECT_FALSE(ExecutionFromWire("not json").ok());
}

}  // namespace
}  // namespace dsplan
