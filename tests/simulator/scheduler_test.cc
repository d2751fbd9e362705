// The scheduler and the memory timeline on hand-built StepGraphs: exact start/end times, FIFO
// per resource in id order, overlap that emerges from the graph, the critical path, and memory
// effects applied in listed order (start effects before end effects) from the initial state.
#include <gtest/gtest.h>

#include <vector>

#include "simulator/scheduler.h"
#include "simulator/step_graph.h"

namespace dsplan {
namespace {

Task On(Resource r, TaskKind k = TaskKind::kForward) {
  Task t;
  t.kind = k;
  t.resource = r;
  return t;
}

MemEffect Alloc(int64_t bytes, MemCategory c, bool at_end = false,
                MemSpace s = MemSpace::kGpu) {
  return MemEffect{bytes, s, c, at_end};
}
MemEffect Free(int64_t bytes, MemCategory c, bool at_end = false, MemSpace s = MemSpace::kGpu) {
  return MemEffect{-bytes, s, c, at_end};
}

// id resource duration deps      expected [start, end]
//  0 compute  2.0     -          [0, 2]
//  1 compute  3.0     -          [2, 5]     FIFO behind 0
//  2 comm     4.0     0          [2, 6]     waits for 0 although comm is idle
//  3 comm     1.0     -          [6, 7]     no deps, but comm runs in id order behind 2
//  4 compute  1.0     2          [6, 7]     compute is free at 5, the dependency ends at 6
//  5 d2h      0.5     3          [7, 7.5]
//  6 compute  2.0     5          [7.5, 9.5]
//  7 cpu      1.0     -          [0, 1]     a later id on an idle resource starts at 0
class SchedulerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    g_.Add(On(Resource::kCompute), {});
    g_.Add(On(Resource::kCompute), {});
    g_.Add(On(Resource::kComm, TaskKind::kAllReduce), {0});
    g_.Add(On(Resource::kComm, TaskKind::kAllGather), {});
    g_.Add(On(Resource::kCompute, TaskKind::kBackward), {2});
    g_.Add(On(Resource::kD2H, TaskKind::kCopyD2H), {3});
    g_.Add(On(Resource::kCompute, TaskKind::kBackward), {5});
    g_.Add(On(Resource::kCpu, TaskKind::kCpuOptimizer), {});
    durations_ = {2.0, 3.0, 4.0, 1.0, 1.0, 0.5, 2.0, 1.0};
  }
  StepGraph g_;
  std::vector<double> durations_;
};

TEST_F(SchedulerTest, ExactStartAndEndTimes) {
  const Schedule s = ScheduleGraph(g_, durations_);
  const std::vector<double> start = {0, 2, 2, 6, 6, 7, 7.5, 0};
  const std::vector<double> end = {2, 5, 6, 7, 7, 7.5, 9.5, 1};
  ASSERT_EQ(s.start_s.size(), start.size());
  for (size_t i = 0; i < start.size(); ++i) {
    EXPECT_DOUBLE_EQ(s.start_s[i], start[i]) << "task " << i;
    EXPECT_DOUBLE_EQ(s.end_s[i], end[i]) << "task " << i;
  }
  EXPECT_DOUBLE_EQ(s.makespan_s, 9.5);
}

TEST_F(SchedulerTest, OverlapEmergesFromTheGraph) {
  const Schedule s = ScheduleGraph(g_, durations_);
  double sum = 0;
  for (double d : durations_) sum += d;
  EXPECT_DOUBLE_EQ(sum, 14.5);
  EXPECT_LT(s.makespan_s, sum);
  // Compute task 1 and the all-reduce 2 run at the same time.
  EXPECT_LT(s.start_s[2], s.end_s[1]);
  EXPECT_LT(s.start_s[1], s.end_s[2]);
  // Busy time per resource is the sum of its tasks' durations.
  EXPECT_DOUBLE_EQ(s.busy_s[static_cast<int>(Resource::kCompute)], 8.0);
  EXPECT_DOUBLE_EQ(s.busy_s[static_cast<int>(Resource::kComm)], 5.0);
  EXPECT_DOUBLE_EQ(s.busy_s[static_cast<int>(Resource::kD2H)], 0.5);
  EXPECT_DOUBLE_EQ(s.busy_s[static_cast<int>(Resource::kCpu)], 1.0);
  EXPECT_DOUBLE_EQ(s.busy_s[static_cast<int>(Resource::kH2D)], 0.0);
}

TEST_F(SchedulerTest, ResourcesRunOneTaskAtATimeInIdOrder) {
  const Schedule s = ScheduleGraph(g_, durations_);
  for (TaskId a = 0; a < g_.size(); ++a) {
    for (TaskId b = a + 1; b < g_.size(); ++b) {
      if (g_.task(a).resource != g_.task(b).resource) continue;
      EXPECT_LE(s.end_s[a], s.start_s[b]) << a << " before " << b;
    }
  }
}

// From the last task back, whichever predecessor set each start: 6 waited for 5 (dependency),
// 5 for 3 (dependency), 3 for 2 (comm FIFO), 2 for 0 (dependency).
TEST_F(SchedulerTest, CriticalPath) {
  const Schedule s = ScheduleGraph(g_, durations_);
  EXPECT_EQ(s.critical_path, (std::vector<TaskId>{0, 2, 3, 5, 6}));
  double on_path = 0;
  for (TaskId id : s.critical_path) on_path += durations_[id];
  EXPECT_DOUBLE_EQ(on_path, s.makespan_s);  // the path is contiguous
}

TEST_F(SchedulerTest, NoCriticalPathWhenNotAsked) {
  const Schedule with = ScheduleGraph(g_, durations_, true);
  const Schedule without = ScheduleGraph(g_, durations_, false);
  EXPECT_TRUE(without.critical_path.empty());
  EXPECT_EQ(with.start_s, without.start_s);
  EXPECT_EQ(with.end_s, without.end_s);
}

TEST_F(SchedulerTest, Deterministic) {
  const Schedule a = ScheduleGraph(g_, durations_);
  const Schedule b = ScheduleGraph(g_, durations_);
  EXPECT_EQ(a.start_s, b.start_s);
  EXPECT_EQ(a.end_s, b.end_s);
  EXPECT_EQ(a.critical_path, b.critical_path);
  EXPECT_EQ(a.busy_s, b.busy_s);
}

// Ties: when the resource frees exactly as a dependency ends, the resource predecessor is on the
// critical path; when two tasks end last together, the later id ends the path.
TEST(SchedulerTieTest, TiesBreakDeterministically) {
  StepGraph g;
  g.Add(On(Resource::kCompute), {});     // 0 [0,1]
  g.Add(On(Resource::kComm), {});        // 1 [0,1]
  g.Add(On(Resource::kCompute), {1});    // 2 [1,2]: compute frees at 1, dep ends at 1
  g.Add(On(Resource::kComm), {});        // 3 [1,2]
  const Schedule s = ScheduleGraph(g, {1.0, 1.0, 1.0, 1.0});
  EXPECT_DOUBLE_EQ(s.start_s[2], 1.0);
  EXPECT_DOUBLE_EQ(s.end_s[3], 2.0);
  EXPECT_EQ(s.critical_path, (std::vector<TaskId>{1, 3}));  // 3 ends last (later id than 2)
  StepGraph g2;
  g2.Add(On(Resource::kCompute), {});
  g2.Add(On(Resource::kComm), {});
  g2.Add(On(Resource::kCompute), {1});
  const Schedule s2 = ScheduleGraph(g2, {1.0, 1.0, 1.0});
  EXPECT_EQ(s2.critical_path, (std::vector<TaskId>{0, 2}));  // the resource predecessor wins
}

TEST(SchedulerEmptyTest, EmptyGraph) {
  StepGraph g;
  const Schedule s = ScheduleGraph(g, {});
  EXPECT_DOUBLE_EQ(s.makespan_s, 0);
  EXPECT_TRUE(s.critical_path.empty());
}

// --- memory timeline ---

constexpr int kGpu = static_cast<int>(MemSpace::kGpu);
constexpr int kPinned = static_cast<int>(MemSpace::kPinnedHost);
constexpr int kPageable = static_cast<int>(MemSpace::kPageableHost);
constexpr int kNvme = static_cast<int>(MemSpace::kNvme);
int C(MemCategory c) { return static_cast<int>(c); }

// A task that allocates A, frees A and allocates B peaks at max(A, B), not A + B.
TEST(MemoryTimelineTest, EffectsApplyInListedOrder) {
  StepGraph g;
  g.Add(On(Resource::kCompute), {},
        {Alloc(100, MemCategory::kTemporaries), Free(100, MemCategory::kTemporaries),
         Alloc(60, MemCategory::kActivations)});
  const MemoryTimeline m = ComputeMemory(g);
  EXPECT_EQ(m.peak[kGpu].bytes, 100);
  EXPECT_EQ(m.peak[kGpu].task, 0);
  EXPECT_FALSE(m.peak[kGpu].at_end);
  EXPECT_EQ(m.peak[kGpu].breakdown[C(MemCategory::kTemporaries)], 100);
  EXPECT_EQ(m.peak[kGpu].breakdown[C(MemCategory::kActivations)], 0);
  EXPECT_EQ(m.final_bytes[kGpu], 60);

  // The other order: B first stays, then A on top peaks at A + B.
  StepGraph h;
  h.Add(On(Resource::kCompute), {},
        {Alloc(60, MemCategory::kActivations), Alloc(100, MemCategory::kTemporaries),
         Free(100, MemCategory::kTemporaries)});
  EXPECT_EQ(ComputeMemory(h).peak[kGpu].bytes, 160);
}

// End effects apply after all start effects, whatever their position in the list.
TEST(MemoryTimelineTest, EndEffectsAfterStartEffects) {
  StepGraph g;
  g.initial[kGpu][C(MemCategory::kActivations)] = 40;
  g.Add(On(Resource::kCompute, TaskKind::kBackward), {},
        {Free(40, MemCategory::kActivations, /*at_end=*/true),
         Alloc(70, MemCategory::kTemporaries), Free(70, MemCategory::kTemporaries, true),
         Alloc(25, MemCategory::kGradients, true)});
  const MemoryTimeline m = ComputeMemory(g, /*record_curve=*/true);
  // Start: 40 + 70 = 110 (the peak); end: -40, -70, +25 -> 25.
  EXPECT_EQ(m.peak[kGpu].bytes, 110);
  EXPECT_FALSE(m.peak[kGpu].at_end);
  EXPECT_EQ(m.peak[kGpu].breakdown[C(MemCategory::kActivations)], 40);
  EXPECT_EQ(m.peak[kGpu].breakdown[C(MemCategory::kTemporaries)], 70);
  EXPECT_EQ(m.final_bytes[kGpu], 25);
  ASSERT_EQ(m.gpu_curve.size(), 1u);
  EXPECT_EQ(m.gpu_curve[0].task, 0);
  EXPECT_EQ(m.gpu_curve[0].after_start, 110);
  EXPECT_EQ(m.gpu_curve[0].after_end, 25);
}

// A peak reached by end effects is marked so, with the breakdown at that instant.
TEST(MemoryTimelineTest, PeakTaskAndBreakdown) {
  StepGraph g;
  g.initial[kGpu][C(MemCategory::kParams16)] = 1000;
  g.initial[kGpu][C(MemCategory::kOptimizerStates)] = 500;
  // 0: forward saves 300 of activations (end).          1500 -> 1800
  g.Add(On(Resource::kCompute), {}, {Alloc(300, MemCategory::kActivations, true)});
  // 1: forward saves 200 more; a 50 temporary inside.    1800 -> 1850 (transient) -> 2000
  g.Add(On(Resource::kCompute), {0},
        {Alloc(50, MemCategory::kTemporaries), Free(50, MemCategory::kTemporaries),
         Alloc(200, MemCategory::kActivations, true)});
  // 2: backward frees 200 of activations, makes 150 of gradients (end): 2000 -> 1950 (no peak)
  g.Add(On(Resource::kCompute, TaskKind::kBackward), {1},
        {Free(200, MemCategory::kActivations, true), Alloc(150, MemCategory::kGradients, true)});
  // 3: a comm task with a 400 bucket, freed at its end: 1950 -> 2350 -> 1950 (the peak)
  g.Add(On(Resource::kComm, TaskKind::kAllReduce), {2},
        {Alloc(400, MemCategory::kCommBuffers), Free(400, MemCategory::kCommBuffers, true)});
  const MemoryTimeline m = ComputeMemory(g);
  EXPECT_EQ(m.peak[kGpu].bytes, 2350);
  EXPECT_EQ(m.peak[kGpu].task, 3);
  EXPECT_FALSE(m.peak[kGpu].at_end);
  const CategoryBytes& b = m.peak[kGpu].breakdown;
  EXPECT_EQ(b[C(MemCategory::kParams16)], 1000);
  EXPECT_EQ(b[C(MemCategory::kOptimizerStates)], 500);
  EXPECT_EQ(b[C(MemCategory::kActivations)], 300);
  EXPECT_EQ(b[C(MemCategory::kGradients)], 150);
  EXPECT_EQ(b[C(MemCategory::kCommBuffers)], 400);
  EXPECT_EQ(b[C(MemCategory::kTemporaries)], 0);
  int64_t sum = 0;
  for (int64_t x : b) sum += x;
  EXPECT_EQ(sum, m.peak[kGpu].bytes);
  EXPECT_EQ(m.final_bytes[kGpu], 1950);

  // Without task 3 the peak is task 1's end effects.
  StepGraph g2;
  g2.initial = g.initial;
  g2.Add(On(Resource::kCompute), {}, {Alloc(300, MemCategory::kActivations, true)});
  g2.Add(On(Resource::kCompute), {0},
         {Alloc(50, MemCategory::kTemporaries), Free(50, MemCategory::kTemporaries),
          Alloc(200, MemCategory::kActivations, true)});
  const MemoryTimeline m2 = ComputeMemory(g2);
  EXPECT_EQ(m2.peak[kGpu].bytes, 2000);
  EXPECT_EQ(m2.peak[kGpu].task, 1);
  EXPECT_TRUE(m2.peak[kGpu].at_end);
  EXPECT_EQ(m2.peak[kGpu].breakdown[C(MemCategory::kActivations)], 500);
}

// The initial state counts: a step that only frees peaks at rest (task -1), and each space keeps
// its own peak.
TEST(MemoryTimelineTest, InitialStateCounted) {
  StepGraph g;
  g.initial[kGpu][C(MemCategory::kParams16)] = 800;
  g.initial[kGpu][C(MemCategory::kGradients)] = 200;
  g.initial[kPinned][C(MemCategory::kMaster)] = 4000;
  g.initial[kPageable][C(MemCategory::kOptimizerStates)] = 8000;
  g.initial[kNvme][C(MemCategory::kOptimizerStates)] = 123;
  g.Add(On(Resource::kCompute), {}, {Free(200, MemCategory::kGradients)});
  g.Add(On(Resource::kD2H, TaskKind::kCopyD2H), {0},
        {Alloc(100, MemCategory::kCommBuffers, false, MemSpace::kPinnedHost),
         Free(100, MemCategory::kCommBuffers, true, MemSpace::kPinnedHost)});
  g.Add(On(Resource::kCompute), {1}, {Alloc(150, MemCategory::kTemporaries)});
  const MemoryTimeline m = ComputeMemory(g);
  EXPECT_EQ(m.peak[kGpu].bytes, 1000);
  EXPECT_EQ(m.peak[kGpu].task, -1);
  EXPECT_EQ(m.peak[kGpu].breakdown[C(MemCategory::kGradients)], 200);
  EXPECT_EQ(m.final_bytes[kGpu], 950);
  EXPECT_EQ(m.peak[kPinned].bytes, 4100);
  EXPECT_EQ(m.peak[kPinned].task, 1);
  EXPECT_EQ(m.peak[kPinned].breakdown[C(MemCategory::kCommBuffers)], 100);
  EXPECT_EQ(m.final_bytes[kPinned], 4000);
  EXPECT_EQ(m.peak[kPageable].bytes, 8000);
  EXPECT_EQ(m.peak[kPageable].task, -1);
  EXPECT_EQ(m.peak[kNvme].bytes, 123);
}

// Memory is program order, independent of the schedule: the same effects give the same peak
// whatever the durations, and ComputeMemory is deterministic.
TEST(MemoryTimelineTest, Deterministic) {
  StepGraph g;
  for (int i = 0; i < 20; ++i) {
    g.Add(On(i % 2 ? Resource::kComm : Resource::kCompute), {},
          {Alloc(10 * (i + 1), MemCategory::kActivations, i % 3 == 0),
           Free(5 * i, MemCategory::kActivations, true)});
  }
  const MemoryTimeline a = ComputeMemory(g, true);
  const MemoryTimeline b = ComputeMemory(g, true);
  EXPECT_EQ(a.peak[kGpu].bytes, b.peak[kGpu].bytes);
  EXPECT_EQ(a.peak[kGpu].task, b.peak[kGpu].task);
  EXPECT_EQ(a.final_bytes, b.final_bytes);
  ASSERT_EQ(a.gpu_curve.size(), b.gpu_curve.size());
  // Sum over i = 0..19 of 10(i+1) - 5i = 2100 - 950 = 1150.
  EXPECT_EQ(a.final_bytes[kGpu], 1150);
}

// The host as a pipeline stage (HostPipeline): it queues a layer's kernels in its host time and
// runs ahead of the GPU until it waits. Hand-computed:
//   0 forward  kernels 3, host 1: host [0, 1], GPU [0, 3]
//   1 forward  kernels 1, host 3: host [1, 4], GPU from 3 (stream) to max(3 + 1, 4) = 4
// The per-layer longer-of rule would give 3 + 3 = 6.
HostPipeline Pipeline(std::vector<double> host) {
  HostPipeline hp;
  hp.sync.assign(host.size(), 0);
  hp.waits_for.assign(host.size(), -1);
  hp.host_s = std::move(host);
  return hp;
}

double CriticalSum(const Schedule& s) {
  double sum = 0;
  for (double x : s.critical_s) sum += x;
  return sum;
}

TEST(HostPipelineScheduleTest, TheHostsLeadHidesALaterLayersHostWork) {
  StepGraph g;
  g.Add(On(Resource::kCompute), {});
  g.Add(On(Resource::kCompute), {});
  const HostPipeline hp = Pipeline({1.0, 3.0});
  const Schedule s = ScheduleGraph(g, {3.0, 1.0}, &hp, true);
  EXPECT_DOUBLE_EQ(s.start_s[1], 3.0);
  EXPECT_DOUBLE_EQ(s.end_s[1], 4.0);
  EXPECT_DOUBLE_EQ(s.makespan_s, 4.0);
  EXPECT_DOUBLE_EQ(CriticalSum(s), s.makespan_s);
  EXPECT_EQ(s.critical_path, (std::vector<TaskId>{0, 1}));
  // Without the pipeline each task's duration is the longer of the two: 3 + 3.
  EXPECT_DOUBLE_EQ(ScheduleGraph(g, {3.0, 3.0}).makespan_s, 6.0);
  // Host-bound throughout, the host sets the pace: host [0, 3], [3, 6].
  const HostPipeline slow = Pipeline({3.0, 3.0});
  const Schedule h = ScheduleGraph(g, {1.0, 1.0}, &slow, true);
  EXPECT_DOUBLE_EQ(h.end_s[0], 3.0);
  EXPECT_DOUBLE_EQ(h.start_s[1], 3.0);
  EXPECT_DOUBLE_EQ(h.makespan_s, 6.0);
  EXPECT_DOUBLE_EQ(CriticalSum(h), 6.0);
}

TEST(HostPipelineScheduleTest, ASynchronizationSpendsTheLead) {
  StepGraph g;
  g.Add(On(Resource::kCompute), {});
  g.Add(On(Resource::kCompute), {});
  HostPipeline hp = Pipeline({1.0, 3.0});
  hp.sync[1] = 1;  // the host waits for the GPU to drain (3), then issues for 3 s
  const Schedule s = ScheduleGraph(g, {3.0, 1.0}, &hp, true);
  EXPECT_DOUBLE_EQ(s.end_s[1], 6.0);
  EXPECT_DOUBLE_EQ(CriticalSum(s), 6.0);
}

//   0 forward   kernels 1, host 0.1       GPU [0, 1]
//   1 comm      5, after 0                [1, 6]
//   2 forward   kernels 1, host 1         waits for 1's event: host [6, 7], GPU [6, 7]
// Without the wait: host [0.1, 1.1], GPU [1, 2].
TEST(HostPipelineScheduleTest, AnEventWaitHoldsTheHost) {
  StepGraph g;
  g.Add(On(Resource::kCompute), {});
  g.Add(On(Resource::kComm, TaskKind::kReduceScatter), {0});
  g.Add(On(Resource::kCompute, TaskKind::kBackward), {});
  HostPipeline hp = Pipeline({0.1, -1.0, 1.0});
  const std::vector<double> d = {1.0, 5.0, 1.0};
  EXPECT_DOUBLE_EQ(ScheduleGraph(g, d, &hp, true).end_s[2], 2.0);
  hp.waits_for[2] = 1;
  const Schedule s = ScheduleGraph(g, d, &hp, true);
  EXPECT_DOUBLE_EQ(s.start_s[2], 6.0);
  EXPECT_DOUBLE_EQ(s.end_s[2], 7.0);
  EXPECT_DOUBLE_EQ(CriticalSum(s), s.makespan_s);
}

// A dependency on a copy engine blocks the host (a blocking copy_); one on the comm stream is
// a stream wait only.
//   0 forward   kernels 1, host 0.5    GPU [0, 1]
//   1 d2h/comm  2, after 0             [1, 3]
//   2 backward  kernels 1, host 3, after 1
// d2h: host [3, 6], end 6. comm: host [0.5, 3.5], GPU [3, 4], end max(4, 3.5) = 4.
TEST(HostPipelineScheduleTest, BlockingCopiesHoldTheHostStreamWaitsDoNot) {
  for (Resource r : {Resource::kD2H, Resource::kComm}) {
    StepGraph g;
    g.Add(On(Resource::kCompute), {});
    g.Add(On(r, r == Resource::kD2H ? TaskKind::kCopyD2H : TaskKind::kAllReduce), {0});
    g.Add(On(Resource::kCompute, TaskKind::kBackward), {1});
    const HostPipeline hp = Pipeline({0.5, -1.0, 3.0});
    const Schedule s = ScheduleGraph(g, {1.0, 2.0, 1.0}, &hp, true);
    EXPECT_DOUBLE_EQ(s.end_s[2], r == Resource::kD2H ? 6.0 : 4.0) << ResourceName(r);
    EXPECT_DOUBLE_EQ(CriticalSum(s), s.makespan_s) << ResourceName(r);
  }
}

// Tasks outside the pipeline (host_s < 0) schedule as without it.
TEST_F(SchedulerTest, APipelineOfNoTasksIsThePlainSchedule) {
  const HostPipeline hp = Pipeline(std::vector<double>(durations_.size(), -1.0));
  const Schedule a = ScheduleGraph(g_, durations_);
  const Schedule b = ScheduleGraph(g_, durations_, &hp, true);
  EXPECT_EQ(a.start_s, b.start_s);
  EXPECT_EQ(a.end_s, b.end_s);
  EXPECT_EQ(a.critical_path, b.critical_path);
  EXPECT_EQ(a.critical_s, b.critical_s);
}

}  // namespace
}  // namespace dsplan
