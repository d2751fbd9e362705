// Replays a real PyTorch caching-allocator event trace through dsplan's CachingAllocator.
//
// The trace comes from the DeepSpeed harness with DSBENCH_MEMHIST=1
// (tools/device/dsbench/driver.py): torch.cuda.memory._record_memory_history over the measured
// steps, written as {"marks", "events": [[action, addr, size, stream, time_us]...],
// "segments_start", "segments_end"}. The question it answers: given PyTorch's own sequence of
// allocations and frees, does dsplan's allocator policy reserve what PyTorch reserved? If it
// does, a reserved-memory miss lies in the sequence dsplan's step graph produces; if it does
// not, in the policy. Each allocation is replayed on its own stream's pool, as PyTorch does.
//
// usage: alloc_trace_replay TRACE.json   (prints one JSON object)
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "simulator/caching_allocator.h"

namespace {

using dsplan::CachingAllocator;
using dsplan::CountingSegmentSource;

int Fail(const std::string& what) {
  std::cerr << "alloc_trace_replay: " << what << "\n";
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) return Fail("usage: alloc_trace_replay TRACE.json");
  std::ifstream in(argv[1]);
  if (!in) return Fail(std::string("cannot read ") + argv[1]);
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(in);
  } catch (const std::exception& e) {
    return Fail(std::string(argv[1]) + ": not JSON (" + e.what() + ")");
  }
  CountingSegmentSource source;
  CachingAllocator a(&source);
  std::map<uint64_t, int> live;  // real address -> our block
  int64_t real_reserved = 0, real_allocated = 0;
  std::set<int> streams;
  std::map<int64_t, int> stream_index;  // the trace's stream handle -> the allocator's stream
  auto stream_of = [&stream_index](int64_t handle) {
    if (handle == 0) return 0;
    auto [it, added] = stream_index.insert({handle, static_cast<int>(stream_index.size()) + 1});
    return it->second;
  };
  // The segments at the start: recreate each with one request of its size, then carve its
  // blocks in address order and free the free ones.
  try {
    for (const auto& seg : j.at("segments_start")) {
      const uint64_t base = seg.at(0).get<uint64_t>();
      const int64_t total = seg.at(1).get<int64_t>();
      streams.insert(seg.at(2).get<int>());
      const int stream = stream_of(seg.at(2).get<int64_t>());
      real_reserved += total;
      auto whole = a.Malloc(total, stream);
      if (!whole.ok() || *whole < 0) return Fail("could not recreate a start segment");
      a.Free(*whole);
      uint64_t addr = base;
      std::vector<int> to_free;
      for (const auto& b : seg.at(4)) {
        const int64_t size = b.at(0).get<int64_t>();
        const std::string state = b.at(1).get<std::string>();
        auto blk = a.Malloc(size, stream);
        if (!blk.ok() || *blk < 0) return Fail("could not recreate a start block");
        if (state == "active_allocated" || state == "active_pending_free") {
          live[addr] = *blk;
          real_allocated += size;
        } else {
          to_free.push_back(*blk);
        }
        addr += static_cast<uint64_t>(size);
      }
      for (int b : to_free) a.Free(b);
    }
  } catch (const std::exception& e) {
    return Fail(std::string(argv[1]) + ": segments_start: " + e.what());
  }
  a.ResetPeaks();
  const int64_t start_ours = a.reserved();
  const int64_t start_real = real_reserved;
  int64_t real_peak_reserved = real_reserved, real_peak_allocated = real_allocated;
  int64_t n_alloc = 0, n_free = 0, unknown_free = 0, segment_allocs = 0;
  // Peak reserved reached by each side between marks.
  const auto& marks = j.value("marks", nlohmann::json::array());
  size_t next_mark = 0;
  nlohmann::json phases = nlohmann::json::array();
  int64_t phase_ours = 0, phase_real = 0;
  std::string phase_name = "start";
  auto close_phase = [&] {
    phases.push_back({{"phase", phase_name},
                      {"ours_peak_reserved_mb", phase_ours / 1048576.0},
                      {"real_peak_reserved_mb", phase_real / 1048576.0}});
  };
  try {
    for (const auto& e : j.at("events")) {
      const std::string action = e.at(0).get<std::string>();
      const uint64_t addr = e.at(1).get<uint64_t>();
      const int64_t size = e.at(2).get<int64_t>();
      const int64_t t = e.size() > 4 ? e.at(4).get<int64_t>() : 0;
      while (next_mark < marks.size() && t >= marks[next_mark].at(1).get<int64_t>()) {
        close_phase();
        phase_name = marks[next_mark].at(0).get<std::string>();
        phase_ours = a.reserved();
        phase_real = real_reserved;
        ++next_mark;
      }
      streams.insert(e.at(3).get<int>());
      if (action == "alloc") {
        auto blk = a.Malloc(size, stream_of(e.at(3).get<int64_t>()));
        if (!blk.ok() || *blk < 0) return Fail("replay ran out of memory");
        live[addr] = *blk;
        real_allocated += size;
        ++n_alloc;
      } else if (action == "free_completed") {
        auto it = live.find(addr);
        if (it == live.end()) {
          ++unknown_free;
          continue;
        }
        a.Free(it->second);
        live.erase(it);
        real_allocated -= size;
        ++n_free;
      } else if (action == "segment_alloc" || action == "segment_map") {
        real_reserved += size;
        ++segment_allocs;
      } else if (action == "segment_free" || action == "segment_unmap") {
        real_reserved -= size;
      }
      real_peak_reserved = std::max(real_peak_reserved, real_reserved);
      real_peak_allocated = std::max(real_peak_allocated, real_allocated);
      phase_ours = std::max(phase_ours, a.reserved());
      phase_real = std::max(phase_real, real_reserved);
    }
  } catch (const std::exception& e) {
    return Fail(std::string(argv[1]) + ": events: " + e.what());
  }
  close_phase();
  const double MiB = 1048576.0;
  nlohmann::json out = {{"trace", argv[1]},
                        {"start_reserved_mb", {{"real", start_real / MiB}, {"ours", start_ours / MiB}}},
                        {"peak_reserved_mb", {{"real", real_peak_reserved / MiB}, {"ours", a.peak_reserved() / MiB}}},
                        {"peak_allocated_mb", {{"real", real_peak_allocated / MiB}, {"ours", a.peak_allocated() / MiB}}},
                        {"allocs", n_alloc},
                        {"frees", n_free},
                        {"frees_of_unknown_blocks", unknown_free},
                        {"real_segment_allocs", segment_allocs},
                        {"streams", std::vector<int>(streams.begin(), streams.end())},
                        {"phases", phases}};
  std::cout << out.dump(1) << "\n";
  return 0;
}
