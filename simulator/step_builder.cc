#include "simulator/step_builder.h"
#include "core/hardware_profile.h"

#include <algorithm>
#include <limits>
#include <array>
#include <bit>
#include <cmath>
#include <functional>
#include <utility>

#include <fmt/format.h>

namespace dsplan {

// The backward's working memory of each layer (LayerParams::largest_saved_bytes,
// backward_work_buffers, backward_early_free_bytes, early_free_blocks). The backward of the op
// that made a tensor holds buffers of its size: the gradient of that tensor and of the op's
// input, and softmax's temporary. By then the ops after it in the forward have run their
// backward, and autograd has freed what only they saved (the tensor itself too, when only later
// ops saved it). So for each tensor c of the layer the working set is (2 + extra) x its size on
// top of everything the layer holds less the tensors the layer frees that were first saved after
// c was made; the layer's working memory is the candidate that reaches the highest, the earlier
// frees it implies included. (Before 2026-12-05 the largest tensor's buffers were counted with
// everything still alive: checkpointed T5 blocks at micro-batch 122 came out 12.6-15 % high.)
void BackwardWorkingSets(const Workload& w, std::vector<LayerParams>* out) {
  struct Freed {
    int32_t first;
    int64_t bytes;
  };
  // Ties in |first| keep trace order (stable sort), so the blocks below are in forward order.
  std::vector<std::vector<Freed>> freed(out->size());
  std::vector<std::vector<const TensorSpec*>> candidates(out->size());
  for (const TensorSpec& t : w.tensors) {
    if (t.category == TensorCategory::kParameter || t.layer < 0 ||
        t.layer >= static_cast<int>(out->size())) {
      continue;
    }
    candidates[t.layer].push_back(&t);
    // What the layer's backward frees (Builder::Backward): without checkpointing the saved
    // tensors it keeps; with it, those its recompute made again (the checkpoint's own inputs
    // stay until the block's backward is over).
    const bool checkpointed = w.layers[t.layer].checkpointed;
    const bool frees = t.category == TensorCategory::kActivation &&
                       (checkpointed ? t.recomputed && t.produced_layer == t.layer : !t.recomputed);
    if (frees && t.save_first >= 0) freed[t.layer].push_back({t.save_first, t.bytes});
  }
  for (size_t l = 0; l < out->size(); ++l) {
    std::vector<Freed>& f = freed[l];
    std::stable_sort(f.begin(), f.end(),
                     [](const Freed& a, const Freed& b) { return a.first < b.first; });
    // after[i]: bytes of f[i..] (first saved at f[i].first or later).
    std::vector<int64_t> after(f.size() + 1, 0);
    for (size_t i = f.size(); i-- > 0;) after[i] = after[i + 1] + f[i].bytes;
    LayerParams& lp = (*out)[l];
    int64_t best_score = std::numeric_limits<int64_t>::min();
    size_t best_from = f.size();
    for (const TensorSpec* c : candidates[l]) {
      const int32_t buffers = 2 + c->backward_extra_buffers;
      const int64_t work = buffers * c->bytes;
      int64_t early = 0;
      size_t from = f.size();
      if (c->created >= 0) {
        const auto it = std::upper_bound(f.begin(), f.end(), c->created,
                                         [](int32_t v, const Freed& x) { return v < x.first; });
        from = static_cast<size_t>(it - f.begin());
        early = after[from];
      }
      const int64_t score = work - early;
      if (score > best_score || (score == best_score && work > buffers * lp.largest_saved_bytes)) {
        best_score = score;
        lp.largest_saved_bytes = c->bytes;
        lp.backward_work_buffers = buffers;
        lp.backward_early_free_bytes = early;
        best_from = from;
      }
    }
    // As blocks for the allocator replay: the largest three on their own (what decides whether
    // a later request fits a freed block), the smaller ones (masks, norm statistics) as one
    // block before them. Every one on its own is no faster to replay and moves reserved
    // memory by 0.02 points on average over the 238 runs, but it flips t5-small's rank 1 (a 2 %
    // tie) to a stage no run has measured; the registered fresh set 8 was made with this rule.
    lp.early_free_blocks.clear();
    std::vector<int64_t> sizes;
    for (size_t i = best_from; i < f.size(); ++i) sizes.push_back(f[i].bytes);
    constexpr size_t kOwnBlocks = 3;
    if (sizes.size() <= kOwnBlocks) {
      lp.early_free_blocks = std::move(sizes);
      continue;
    }
    std::vector<int64_t> sorted = sizes;
    std::nth_element(sorted.begin(), sorted.begin() + (kOwnBlocks - 1), sorted.end(),
                     std::greater<int64_t>());
    const int64_t cut = sorted[kOwnBlocks - 1];  // the third largest
    int64_t rest = 0;
    std::vector<int64_t> own;
    for (int64_t x : sizes) {
      if (x >= cut && own.size() < kOwnBlocks) {
        own.push_back(x);
      } else {
        rest += x;
      }
    }
    if (rest > 0) lp.early_free_blocks.push_back(rest);
    lp.early_free_blocks.insert(lp.early_free_blocks.end(), own.begin(), own.end());
  }
}

std::vector<LayerParams> ComputeLayerParams(const Workload& w, int64_t persistence_threshold) {
  std::vector<LayerParams> out(w.layers.size());
  int64_t offset = 0;
  for (size_t i = 0; i < w.layers.size(); ++i) {
    out[i].numel = w.layers[i].params;
    out[i].offset = offset;
    offset += w.layers[i].params;
  }
  for (const TensorSpec& t : w.tensors) {
    if (t.layer < 0 || t.layer >= static_cast<int>(out.size())) continue;
    LayerParams& lp = out[t.layer];
    if (t.category == TensorCategory::kParameter) {
      ++lp.tensors;
      lp.tensor_numels.push_back(t.numel);
      lp.largest = std::max(lp.largest, t.numel);
      if (t.numel <= persistence_threshold) {
        lp.persistent_numel += t.numel;
      } else {
        ++lp.gathered_tensors;
        if (t.weight_save == WeightSave::kFunctionalLinear) lp.linear_view_numel += t.numel;
        if (t.weight_save == WeightSave::kTransposedMatmul) lp.matmul_view_numel += t.numel;
      }
    } else if (t.category == TensorCategory::kOutput) {
      lp.output_bytes += t.bytes;
    }
  }
  BackwardWorkingSets(w, &out);
  // Tied word embeddings: the head uses the first embedding layer's table (its largest
  // tensor) without owning it.
  if (w.spec.tie_word_embeddings) {
    int64_t table = 0;
    size_t owner = 0;
    for (size_t i = 0; i < out.size(); ++i) {
      if (w.layers[i].kind == LayerKind::kEmbedding && out[i].numel > 0) {
        table = out[i].largest;
        owner = i;
        break;
      }
    }
    for (size_t i = 0; i < out.size(); ++i) {
      if (w.layers[i].kind != LayerKind::kHead || out[i].largest >= table || table == 0) continue;
      out[i].tied_grad_numel = table;
      out[owner].tied_grad_numel = table;
      out[owner].owns_tied_table = true;
      if (table > persistence_threshold) {
        out[i].tied_numel = table;
        ++out[i].gathered_tensors;
        // The head's nn.Linear keeps the view of the table, not the embedding's lookup.
        if (out[owner].linear_view_numel >= table) {
          out[owner].linear_view_numel -= table;
          out[i].linear_view_numel += table;
        }
      }
    }
  }
  return out;
}

namespace {

// engine.py's MEMORY_OPT_ALLREDUCE_SIZE: the bucket (elements) of engine.allreduce_gradients,
// stage 0's data-parallel all-reduce. A constant in DeepSpeed 0.14.5, not a config key.
constexpr int64_t kEngineAllReduceBucket = 500'000'000;

int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

// The sum of CeilDiv(n, parts) over |numels| (every tensor's partition: hundreds per model, for
// each plan built). When |parts| is a power of two, as data-parallel sizes mostly are, a shift
// gives each quotient instead of a 64-bit division, for the non-negative dividends it is exact
// on.
int64_t SumCeilDiv(const std::vector<int64_t>& numels, int64_t parts) {
  int64_t sum = 0;
  if (parts > 0 && (parts & (parts - 1)) == 0) {
    const int shift = std::countr_zero(static_cast<uint64_t>(parts));
    for (int64_t n : numels) {
      const int64_t a = n + parts - 1;
      sum += a >= 0 ? a >> shift : a / parts;
    }
    return sum;
  }
  for (int64_t n : numels) sum += CeilDiv(n, parts);
  return sum;
}

// [start, end) of the parameter tensor holding flat element |pos| (0 <= pos < Psi): a binary
// search over the layers, then a walk over one layer's tensors.
std::pair<int64_t, int64_t> TensorAt(const std::vector<LayerParams>& lp, int64_t pos) {
  auto it = std::upper_bound(lp.begin(), lp.end(), pos,
                             [](int64_t p, const LayerParams& l) { return p < l.offset; });
  // The last layer starting at or before pos that holds elements.
  while (it != lp.begin()) {
    --it;
    if (it->numel == 0) continue;
    if (pos >= it->offset + it->numel) break;
    int64_t start = it->offset;
    for (int64_t n : it->tensor_numels) {
      if (pos < start + n) return {start, start + n};
      start += n;
    }
    return {it->offset, it->offset + it->numel};  // tensors do not cover the layer
  }
  return {pos, pos + 1};
}

}  // namespace

double TorchAdamBytesPerElement(const Plan& plan) {
  // DeepSpeed 0.14.5 (_configure_basic_optimizer): type AdamW, or Adam with adam_w_mode (its
  // default), builds torch.optim.AdamW, else torch.optim.Adam, with the config's params.
  const bool decoupled = plan.optimizer == OptimizerType::kAdamW || plan.adam_w_mode;
  const std::optional<double>& wd = plan.optimizer_params.weight_decay;
  const bool decays = wd ? *wd != 0.0 : decoupled;
  if (!decays) return 72.0;
  return decoupled ? 80.0 : 84.0;
}

int64_t GradsInPartitionNumel(const std::vector<LayerParams>& lp, int64_t params, int ranks,
                              int rank) {
  if (ranks <= 1) return params;
  const int64_t size = CeilDiv(params, 2 * int64_t{ranks}) * 2;
  const int64_t first = size * rank;
  const int64_t last = std::min(size * (rank + 1), params) - 1;
  if (first > last) return 0;  // only padding
  return TensorAt(lp, last).second - TensorAt(lp, first).first;
}

std::vector<int64_t> RetainedGradNumels(const std::vector<LayerParams>& lp, const ZeroConfig& z,
                                        int ranks, int64_t partition, int rank) {
  std::vector<int64_t> out;
  if (z.stage != 1 || ranks <= 1 || !z.contiguous_gradients) return out;
  out.assign(lp.size(), 0);
  // get_partition_info: a parameter that overlaps [first, end) is in the rank's partition.
  const int64_t first = partition * rank;
  const int64_t end = first + partition;
  for (size_t l = 0; l < lp.size(); ++l) {
    int64_t offset = lp[l].offset;
    for (int64_t n : lp[l].tensor_numels) {
      const bool in_partition = offset < end && offset + n > first;
      if (n > z.reduce_bucket_size && !in_partition) out[l] += n;
      offset += n;
    }
  }
  return out;
}

int64_t MaxGradsInPartitionNumel(const std::vector<LayerParams>& lp, int64_t params, int ranks) {
  int64_t best = 0;
  for (int r = 0; r < ranks; ++r) best = std::max(best, GradsInPartitionNumel(lp, params, ranks, r));
  return best;
}

namespace {

// Pinned host memory comes from PyTorch's CachingHostAllocator (tensor.pin_memory(),
// torch.empty(..., pin_memory=True), which DeepSpeed's accelerator.pin_memory calls): it rounds
// every request up to the next power of two before cudaHostAlloc
// (ATen/core/CachingHostAllocator.h, allocate: PowerOf2Ceil). Measured: gpt2-xl with stage 2 CPU
// offload pinned 16,640 MiB for two 5,941 MiB fp32 buffers and a 245 MiB one (8 + 8 + 0.25 GiB);
// docs/simulator.md "Host memory". dsplan's own runtime pins exactly what it asks for, so the
// graph keeps exact sizes and the PyTorch stack's prediction adds the rounding.
int64_t PinnedBytes(int64_t bytes) {
  if (bytes <= 1) return bytes;
  int64_t p = 1;
  while (p < bytes && p <= (std::numeric_limits<int64_t>::max() >> 1)) p <<= 1;
  return p < bytes ? bytes : p;
}

MemEffect Alloc(int64_t bytes, MemCategory c, bool at_end = false,
                MemSpace s = MemSpace::kGpu) {
  return MemEffect{bytes, s, c, at_end};
}
MemEffect Free(int64_t bytes, MemCategory c, bool at_end = true, MemSpace s = MemSpace::kGpu) {
  return MemEffect{-bytes, s, c, at_end};
}
// A free in sequence with the task's start effects (a transient inside a multi-part task).
MemEffect FreeNow(int64_t bytes, MemCategory c) { return Free(bytes, c, false); }

// Builds one rank's step. Member functions follow DeepSpeed's phases: model states in place
// (Initial), micro-steps (Forward, Backward with the gradient hooks), the accumulation boundary
// (reduction epilogue), the optimizer step and the post-step parameter gather. The memory
// effects follow docs/research/deepspeed-memory-timeline.md (DeepSpeed 0.14.5, checked against
// the calibration runs).
class Builder {
 public:
  Builder(const Workload& w, const std::vector<LayerParams>& lp, const Plan& p, BuiltStep& out,
          int64_t workspace_bytes, StepGraphForm form, int rank)
      : w_(w),
        lp_(lp),
        p_(p),
        g_(out.graph),
        f_(out.facts),
        workspace_(workspace_bytes),
        form_(form),
        rank_(rank) {}

  Status Build();

 private:
  bool Stage3() const { return p_.zero.stage == 3; }
  bool Zero12() const { return f_.wrapper == OptimizerWrapper::kZero12; }
  bool Stage0Like() const { return !Zero12() && !Stage3(); }
  // stage_1_and_2 registers reduction hooks only for partitioned gradients (stage 2) or
  // overlap_comm; stage 3 always reduces in hooks.
  bool HooksDuringBackward() const {
    return Stage3() || (Zero12() && (p_.zero.stage == 2 || f_.overlap_comm));
  }
  // The host waits in the gradient hook that flushes a bucket until the bucket's copies to the
  // host are done (FlushBucket's join): optimizer offload at the accumulation boundary.
  bool FlushBlocksHost(int micro) const { return p_.OffloadsOptimizer() && micro == gas_ - 1; }
  // Whether the first gradient layer |l|'s backward produces (its last parameter tensor's:
  // autograd runs the layer backwards) overfills the bucket, so that its hook flushes before
  // the rest of the layer's backward is issued.
  bool FlushesAtFirstGradient(int l) const {
    const LayerParams& lp = lp_[l];
    if (bucket_elems_ == 0 || lp.numel == 0) return false;
    const bool whole = bucket_elems_ + lp.numel <= rbs_ || lp.tensor_numels.size() <= 1;
    return bucket_elems_ + (whole ? lp.numel : lp.tensor_numels.back()) > rbs_;
  }
  // Whether this micro-step's backward reduces gradients in the hooks: stage 2 and 3 every
  // micro-step; stage 1 (with overlap_comm) only at the accumulation boundary, its hooks
  // returning early before it (reduce_ready_partitions_and_remove_grads).
  bool ReducesInBackward(int micro) const {
    if (!HooksDuringBackward()) return false;
    return Stage3() || p_.zero.stage == 2 || micro == gas_ - 1;
  }
  // Whether param.grad accumulates in place across micro-steps (allocated in the first only):
  // stage 1 until its boundary reduction, FP16_Optimizer and the basic optimizer. Stage 2/3
  // hooks free each micro-step's grads; BF16_Optimizer frees them at each backward's start.
  bool GradsAccumulateInPlace() const {
    return (Zero12() && p_.zero.stage == 1) ||
           (Stage0Like() && f_.wrapper != OptimizerWrapper::kBf16Optimizer);
  }
  Resource CommStream() const { return f_.overlap_comm ? Resource::kComm : Resource::kCompute; }
  /// A copy of |bytes| between the GPU and host memory (|h2d|: to the GPU) on its copy engine.
  static Task HostCopy(bool h2d, int micro, int32_t index, double bytes, bool pinned) {
    Task t;
    t.kind = h2d ? TaskKind::kCopyH2D : TaskKind::kCopyD2H;
    t.resource = h2d ? Resource::kH2D : Resource::kD2H;
    t.micro_step = micro;
    t.index = index;
    t.bytes = bytes;
    t.pinned = pinned;
    return t;
  }
  /// |e| allocated under DeepSpeed's side stream when overlap_comm puts the work there.
  MemEffect OnSideStream(MemEffect e) const {
    e.side_stream = f_.overlap_comm;
    return e;
  }
  MemSpace HostSpace(bool pinned) const {
    return pinned ? MemSpace::kPinnedHost : MemSpace::kPageableHost;
  }
  // A blocking copy between this rank's 16-bit partition of a tensor and a host tensor of
  // another dtype goes through a pageable temporary of the partition's 16-bit size (Copy.cu).
  // glibc's malloc maps any request of at least its largest dynamic mmap threshold afresh
  // (DEFAULT_MMAP_THRESHOLD_MAX, 32 MiB on 64-bit), so each copy faults every page of such a
  // temporary in; smaller ones come from the heap, whose pages stay faulted in from the step
  // before (docs/deepspeed-facts.md, CPU offload): CastCopies::fresh.
  //
  // What a chunk of gradients adds to ZeRO-3's offloaded partition copy at the boundary: one
  // blocking cast copy per parameter tensor (Task::cast_copies), by class, and the elements of
  // the fresh temporaries among them.
  struct CastCopies {
    std::array<int32_t, Task::kCastCopyClasses> n{};
    std::array<double, Task::kCastCopyClasses> bytes{};
    int64_t fresh = 0;
    void Add(const CastCopies& o) {
      for (int k = 0; k < Task::kCastCopyClasses; ++k) {
        n[k] += o.n[k];
        bytes[k] += o.bytes[k];
      }
      fresh += o.fresh;
    }
  };
  // Only plans with the optimizer offloaded use them (ZeRO-3's cast copies, the boundary's
  // per-parameter loops); other plans skip the count (the planner builds thousands of graphs).
  bool CountsCastCopies() const { return p_.OffloadsOptimizer(); }
  // |count| tensors of |part| elements each: ZeRO-3, this rank's partition of a tensor; stages
  // 1-2, a whole tensor (the owner's loop takes it whole; FlushBucket divides by the ranks).
  CastCopies CastCopiesOf(int64_t part, int count = 1) const {
    CastCopies c;
    if (!CountsCastCopies() || part <= 0 || count <= 0) return c;
    const int64_t bytes = e_ * part;
    const bool large = Stage3() && static_cast<double>(bytes) >= kFreshMappingBytes;
    // With malloc held to its heap (Plan::malloc_heap) a large temporary's pages stay mapped.
    const bool fresh = large && !p_.malloc_heap;
    const int k = large ? (fresh ? Task::kFreshCastCopyClass : Task::kHeapLargeCastCopyClass)
                        : bytes >= (int64_t{1} << 20) ? 1 : 0;
    c.n[k] = count;
    c.bytes[k] = static_cast<double>(bytes) * count;
    c.fresh = fresh ? part * count : 0;
    return c;
  }
  CastCopies CastCopiesOf(const std::vector<int64_t>& numels) const {
    CastCopies c;
    if (!CountsCastCopies()) return c;
    for (int64_t n : numels) c.Add(CastCopiesOfTensor(n));
    return c;
  }
  CastCopies CastCopiesOfTensor(int64_t numel) const {
    return CastCopiesOf(Stage3() ? CeilDiv(numel, N_) : numel);
  }
  // One buffer of |bytes| in place before the step; a pinned one also records what PyTorch's
  // host allocator adds to it (StepGraph::pinned_rounding_bytes).
  void Init(MemSpace s, MemCategory c, int64_t bytes) {
    g_.initial[static_cast<int>(s)][static_cast<int>(c)] += bytes;
    if (s == MemSpace::kPinnedHost) g_.pinned_rounding_bytes += PinnedBytes(bytes) - bytes;
  }
  // Elements a ZeRO-3 fetch of layer |l| gathers: its non-persistent parameters, and the
  // word-embedding table for a tied head.
  int64_t Gathered(int l) const {
    return lp_[l].numel - lp_[l].persistent_numel + lp_[l].tied_numel;
  }
  // GPU bytes a ZeRO-3 gather of layer |l| adds: the full 16-bit tensors. With one rank and the
  // partitions on the GPU the partition is the parameter, so nothing is added.
  int64_t GatherBytes(int l) const {
    if (N_ == 1 && !p_.OffloadsParams()) return 0;
    return e_ * CeilDiv(Gathered(l), N_) * N_;
  }
  // What of layer |l|'s gather its forward's saved tensors keep after ZeRO-3 releases the
  // layer: the buffers of the weights autograd keeps as a transposed view (LayerParams::
  // linear_view_numel without zero.Init, matmul_view_numel always). They are freed when the
  // layer's backward has run, while the coordinator gathers the layer again for that backward.
  int64_t HeldByViewsBytes(int l) const {
    const int64_t gather = GatherBytes(l);
    if (gather == 0) return 0;
    const int64_t numel = lp_[l].matmul_view_numel + (p_.zero_init ? 0 : lp_[l].linear_view_numel);
    return std::min(gather, e_ * numel);
  }

  // Prefetch (partitioned_param_coordinator): the next module's parameters are fetched ahead
  // when they fit in min(stage3_max_live_parameters - gathered now, stage3_prefetch_bucket_size).
  bool CanPrefetch(int l) const {
    const int64_t budget = std::min(p_.zero.stage3_max_live_parameters - gathered_numel_,
                                    p_.zero.stage3_prefetch_bucket_size);
    return !Tiled(l) && Gathered(l) > 0 && Gathered(l) <= budget;
  }

  // Memory-centric tiling (Plan::linear_tiles): a ZeRO-3 block whose Linears are split into
  // tiles_ tiles is gathered, computed and released one tile at a time. Tile |i| of layer |l|
  // holds 1/tiles_ of the layer's gathered elements and of its parameters (the remainder goes
  // to the first tiles).
  bool Tiled(int l) const {
    const LayerKind k = w_.layers[l].kind;
    return tiles_ > 1 && Stage3() && Gathered(l) > 0 &&
           (k == LayerKind::kEncoderBlock || k == LayerKind::kDecoderBlock);
  }
  static int64_t Share(int64_t total, int64_t parts, int64_t i) {
    return total / parts + (i < total % parts ? 1 : 0);
  }
  int64_t TileNumel(int l, int64_t i) const { return Share(Gathered(l), tiles_, i); }
  // A tile is a Linear of one weight (and at most a bias): DeepSpeed's single-parameter gather
  // allocates the padded tensor only, without the coalesced gather's flat copy.
  int64_t TileGatherBytes(int l, int64_t i) const {
    if (N_ == 1 && !p_.OffloadsParams()) return 0;
    return e_ * CeilDiv(TileNumel(l, i), N_) * N_;
  }
  TaskId GatherTile(int micro, int l, int64_t i);
  void ReleaseTile(int l, int64_t i, EffectList* fx);
  Task TileTask(TaskKind kind, int micro, int l, int64_t i) const;
  TaskId PartitionToGpu(int micro, int l, int64_t index, int64_t numel);
  Task AllGatherTask(int micro, int l, int64_t index, int64_t numel) const;
  void ForwardTiled(int micro, int l);
  void BackwardTiled(int micro, int l);
  // cpu_checkpointing: the checkpoint of layer |l| goes to host memory after its forward
  // (D2H) and comes back before its recomputation (H2D); returns the copy's task.
  void CheckpointToHost(int micro, int l);
  TaskId CheckpointFromHost(int micro, int l);

  void Initial();
  void LazyStates();
  /// Lazy states [first, first + count) are created by task |t|'s step(), after its effects
  /// fx[0, k) (StepGraph::LazyState counts the non-zero GPU ones).
  void PlaceLazyStates(size_t first, size_t count, TaskId t, const EffectList& fx, size_t k);
  void Forward(int micro);
  void Backward(int micro);
  void AddToBucket(int micro, int l, TaskId produced);
  // |casts|: the chunk's tensors' CastCopies.
  void AddChunk(int micro, int l, int64_t first, int64_t elements, int tensors, TaskId produced,
                int64_t freed, const CastCopies& casts);
  // |hook|: the backward task whose gradient hook runs the flush (-1: the epilogue's).
  void FlushBucket(int micro, TaskId hook = -1);
  // |ops| tensor ops a flush issues from the gradient hook of |hook|'s layer (the backward task
  // being built; -1: a flush before that task exists or after the backward).
  void HookOps(TaskId hook, int32_t ops);
  // The backward's working memory of layer |l| (LayerParams::backward_work_buffers).
  void BackwardWorkingMemory(int l, EffectList* fx) const;
  // The layer's saved activations (|bytes|: the forward's kept bytes, or a recompute's) as the
  // allocator sees them: the early-freed tensors as blocks of their own.
  void SavedActivationAllocs(int l, int64_t bytes, EffectList* fx) const;
  // What a layer's forward keeps until its backward, as allocations (SavedActivationAllocs).
  void KeptActivationAllocs(int l, EffectList* fx) const;
  void EndOfBackward(int micro);
  void OptimizerStep();
  Task EngineAllReduce(int micro, int64_t bytes) const;
  TaskId Gather(int micro, int l);
  void CountGatherCalls();
  int32_t TakeGatherCalls();

  const Workload& w_;
  const std::vector<LayerParams>& lp_;
  const Plan& p_;
  StepGraph& g_;
  StepFacts& f_;
  int64_t workspace_;
  StepGraphForm form_;
  // The rank the graph stands for (kRankClass: all of them, each part at its worst).
  int rank_ = kRankClass;

  int N_ = 1;
  int64_t P_ = 0;            // trainable elements
  int64_t part_ = 0;         // partition elements per rank (with DeepSpeed's padding)
  int64_t flat_ = 0;         // the 16-bit flat buffer's elements (P_ plus padding)
  // ZeRO 1/2 grads_in_partition (and the CPU-offload accumulated_grads_in_cpu) elements: the
  // whole tensors overlapping the rank's partition; the rank class takes the rank where that is
  // largest (ranks differ in the edge tensors).
  int64_t grads_part_ = 0;
  // Flat-buffer range [first, end) of those tensors (a rank's graph): copy_grads_in_partition
  // allocates the buffer at the first bucket that holds one of their gradients.
  int64_t grads_part_first_ = 0;
  int64_t grads_part_end_ = 0;
  int64_t e_ = 2;            // model dtype bytes
  int64_t acc_ = 2;          // gradient accumulation dtype bytes
  int64_t comm_e_ = 2;       // communication dtype bytes
  int64_t state_bytes_ = 8;  // optimizer state bytes per element
  int64_t rbs_ = 0;
  int64_t largest_param_ = 0;
  int64_t output_bytes_ = 0; // logits the model output holds
  int param_tensors_ = 0;
  int gas_ = 1;
  // The backward task being built (its gradient hooks run the flushes AddToBucket triggers), or
  // -1 outside the backward; tensor ops of a flush that runs before that task exists (or after
  // the last one) wait here for it (Task::hook_kernels).
  TaskId current_backward_ = -1;
  int32_t pending_hook_kernels_ = 0;
  // ZeRO-3 partial optimizer offload (offload_optimizer.ratio): sub-groups [0, cpu_subgroups_)
  // are stepped on the CPU, the rest on the GPU; off_elems_ elements are on the host.
  int64_t cpu_subgroups_ = 0;
  int64_t off_elems_ = 0;
  std::vector<int64_t> subgroup_sizes_;  // ZeRO-3 optimizer sub-groups, elements each
  // ZeRO-3 with offload_param on NVMe: the leading sub-groups [0, param_cpu_subgroups_) keep
  // their 16-bit partitions in the pinned CPU buffer (param_cpu_elems_ elements), the rest live
  // on the drive; per layer, the share of its partition on the drive (read at every gather).
  int64_t param_cpu_subgroups_ = 0;
  int64_t param_cpu_elems_ = 0;
  std::vector<double> layer_nvme_share_;
  int tied_owner_ = -1;  // the layer that owns a tied head's word-embedding table
  // Bytes a gather of |numel| elements of layer |l| reads from NVMe: its own partitions' share
  // on the drive, and for a tied head the table's, which the embedding layer owns.
  double NvmeGatherBytes(int l, int64_t numel) const {
    if (layer_nvme_share_.empty()) return 0;
    const int64_t tied = std::min(numel, lp_[l].tied_numel);
    double b = static_cast<double>(e_ * CeilDiv(numel - tied, N_)) * layer_nvme_share_[l];
    if (tied > 0 && tied_owner_ >= 0) {
      b += static_cast<double>(e_ * CeilDiv(tied, N_)) * layer_nvme_share_[tied_owner_];
    }
    return b;
  }
  bool inter_node_ = false;

  TaskId last_compute_ = -1;
  TaskId last_reduce_ = -1;
  int64_t bucket_elems_ = 0;
  int bucket_tensors_ = 0;  // parameter tensors whose gradients are in the bucket
  // The bucket's blocking cast copies under ZeRO-3 with the optimizer offloaded (CastCopies).
  CastCopies bucket_casts_;
  int64_t bucket_first_ = 0;  // flat-buffer range [first, end) of the bucket's gradients
  int64_t bucket_end_ = 0;
  std::vector<TaskId> bucket_producers_;
  int bucket_index_ = 0;     // within the micro-step
  int64_t buckets_built_ = 0;  // over the built micro-steps
  bool partition_buffer_live_ = false;  // stage 1/2 grads_in_partition allocated this step
  int partition_buffer_micro_ = 0;        // the micro-step that allocated it
  bool second_partition_buffer_ = false;  // stage 2: this micro-step's new grads_in_partition
  // Stage 1 (contiguous_gradients): per layer, the elements of its parameters that are larger
  // than the bucket and lie outside the rank's partition. Their gradients are not copied into
  // the bucket (extra_large_param_to_reduce: reduced from their own tensor) and stage 1 never
  // clears a gradient outside the partition (reduce_ipg_grads), so they stay until the
  // epilogue's zero_grad. |retained_live_|: those of this micro-step's reduced layers so far.
  std::vector<int64_t> retained_numel_;
  int64_t retained_live_ = 0;
  std::vector<char> gathered_;
  int64_t gathered_numel_ = 0;   // ZeRO-3: non-persistent elements gathered now
  // ZeRO-3: gather calls that start in each layer (CountGatherCalls), and those issued since
  // the last layer task, which the next one takes (its host time pays for them).
  std::vector<int32_t> gather_calls_;
  int32_t pending_calls_ = 0;
  std::vector<TaskId> gather_task_;
  std::vector<char> retained_;
  // ZeRO-3: bytes of each layer's released gather that its forward's saved views still hold
  // (HeldByViewsBytes), freed with the layer's backward.
  std::vector<int64_t> held_by_views_;
  // ZeRO-3: layers the prefetcher has marked for their backward before their forward's
  // release, which therefore keeps them gathered into the backward (see where they are set).
  std::vector<char> kept_for_backward_;
  // Parameters of the layers after each layer (the reuse distance of its forward use).
  std::vector<int64_t> after_;
  int64_t tiles_ = 1;
  // Tiled layers: per tile, gathered now and the gather's task.
  std::vector<std::vector<char>> tile_gathered_;
  std::vector<std::vector<TaskId>> tile_task_;
  // The last fp32 gradient copy to the host: the CPU optimizer waits for it (the copies run
  // in order on the D2H engine, so the last one ends last).
  TaskId last_d2h_ = -1;
  // ZeRO-3 with the optimizer on NVMe: the last bucket's gradient writes (swap_out_gradients),
  // which the next bucket's swap-out and the step's reads wait for.
  TaskId last_grad_swap_ = -1;
};

Status Builder::Build() {
  const ZeroConfig& z = p_.zero;
  N_ = p_.dp_size();
  inter_node_ = p_.nodes > 1;
  P_ = w_.params;
  part_ = CeilDiv(P_, N_);
  e_ = PrecisionBytes(p_.precision);
  acc_ = PrecisionBytes(p_.GradAccumDtype());
  comm_e_ = PrecisionBytes(p_.CommDtype());
  state_bytes_ = 4 * OptimizerStatesPerElement(p_.optimizer, p_.sgd_momentum);
  rbs_ = z.reduce_bucket_size;
  gas_ = static_cast<int>(p_.grad_accum);
  for (const LayerParams& l : lp_) {
    largest_param_ = std::max(largest_param_, l.largest);
    output_bytes_ += l.output_bytes;
    param_tensors_ += l.tensors;
  }
  f_.wrapper = p_.Wrapper();
  f_.largest_param_numel = largest_param_;
  // Padding as DeepSpeed allocates it: the BF16_Optimizer and stage 1/2 flat buffer is aligned to
  // 2 x N elements (nccl_start_alignment_factor x dp size) and each rank owns 1/N of it; a stage 3
  // partition is ceil(numel / N) per tensor. The host executor allocates the same.
  flat_ = P_;
  if (Stage3()) {
    part_ = 0;
    for (const LayerParams& l : lp_) part_ += SumCeilDiv(l.tensor_numels, N_);
  } else if (Zero12() || f_.wrapper == OptimizerWrapper::kBf16Optimizer) {
    flat_ = CeilDiv(P_, 2 * int64_t{N_}) * 2 * N_;
    part_ = flat_ / N_;
  }
  f_.params = P_;
  f_.partition_numel = part_;
  if (rank_ != kRankClass && (rank_ < 0 || rank_ >= N_)) {
    return Status::Internal(
        fmt::format("BuildStepGraph: rank {} outside the {} data-parallel ranks", rank_, N_));
  }
  f_.rank = N_ > 1 ? rank_ : 0;
  if (Zero12()) {
    if (N_ <= 1) {
      grads_part_ = P_;
    } else if (rank_ == kRankClass) {
      grads_part_ = MaxGradsInPartitionNumel(lp_, P_, N_);
    } else {
      grads_part_ = GradsInPartitionNumel(lp_, P_, N_, rank_);
      const int64_t first = part_ * rank_;
      const int64_t last = std::min(first + part_, P_) - 1;
      if (first <= last) {
        grads_part_first_ = TensorAt(lp_, first).first;
        grads_part_end_ = TensorAt(lp_, last).second;
      }
    }
    f_.grads_in_partition_numel = grads_part_;
    // The rank class keeps rank 0's: the backward runs from the model's end, so the rank that
    // owns the flat buffer's start has kept the most at every point of it.
    retained_numel_ = RetainedGradNumels(lp_, p_.zero, N_, part_, rank_ == kRankClass ? 0 : rank_);
    for (int64_t n : retained_numel_) f_.kept_grad_numel += n;
  }
  f_.overlap_comm = z.OverlapComm();
  f_.largest_subgroup = part_;
  if (Stage3()) {
    // Sub-groups (_create_fp16_sub_groups): the parameters' partitions (ceil(numel / N) each)
    // are appended in order and a sub-group ends with the tensor that brings its running numel
    // to sub_group_size or beyond, so sub-groups end at tensor boundaries and can exceed
    // sub_group_size by up to one partition. The tensors are walked only when there is more
    // than one sub-group (sub_group_size below the partition; the default 1e9 rarely is).
    subgroup_sizes_.clear();
    if (z.sub_group_size >= part_ + param_tensors_) {
      subgroup_sizes_.push_back(part_);
    } else {
      int64_t run = 0, total = 0;
      for (const LayerParams& l : lp_) {
        for (int64_t n : l.tensor_numels) {
          run += CeilDiv(n, N_);
          if (run >= z.sub_group_size) {
            subgroup_sizes_.push_back(run);
            total += run;
            run = 0;
          }
        }
      }
      if (run > 0) subgroup_sizes_.push_back(run);
      total += run;
      if (subgroup_sizes_.size() <= 1 || z.sub_group_size >= total) {
        subgroup_sizes_.assign(1, part_);
      }
    }
    f_.subgroups = static_cast<int64_t>(subgroup_sizes_.size());
    f_.largest_subgroup = *std::max_element(subgroup_sizes_.begin(), subgroup_sizes_.end());
    param_cpu_subgroups_ = f_.subgroups;
    param_cpu_elems_ = part_;
    layer_nvme_share_.clear();
    if (p_.OffloadsParams() && z.offload_param.device == OffloadDevice::kNvme) {
      // _create_param_groups_fp16_flat_cpu_memory: a pinned CPU buffer of min(partition,
      // max_in_cpu) elements; _create_fp16_partitions_with_defragmentation gives a sub-group a
      // slice of it when it fits after the sub-groups before it, else none (its partitions stay
      // on NVMe), and the offset grows either way: a leading run of sub-groups is in host
      // memory, everything after the first that does not fit is on the drive.
      const int64_t buffer = std::min(part_, z.offload_param.max_in_cpu);
      int64_t offset = 0;
      param_cpu_subgroups_ = 0;
      for (int64_t n : subgroup_sizes_) {
        if (offset + n > buffer) break;
        offset += n;
        ++param_cpu_subgroups_;
      }
      param_cpu_elems_ = offset;
      layer_nvme_share_.assign(lp_.size(), 0.0);
      tied_owner_ = -1;
      for (size_t l = 0; l < lp_.size() && tied_owner_ < 0; ++l) {
        if (w_.layers[l].kind == LayerKind::kEmbedding && lp_[l].numel > 0) tied_owner_ = static_cast<int>(l);
      }
      int64_t pos = 0;
      for (size_t l = 0; l < lp_.size(); ++l) {
        const int64_t pl = SumCeilDiv(lp_[l].tensor_numels, N_);
        const int64_t on_drive = std::clamp<int64_t>(pos + pl - param_cpu_elems_, 0, pl);
        layer_nvme_share_[l] = pl > 0 ? static_cast<double>(on_drive) / static_cast<double>(pl) : 0.0;
        pos += pl;
      }
    }
    int64_t persistent = 0;
    for (const LayerParams& l : lp_) persistent += l.persistent_numel;
    f_.persistent_numel = std::min(persistent, z.stage3_model_persistence_threshold);
    if (p_.OffloadsOptimizer()) {
      // stage3.subgroup_to_device: sub-group i is on the CPU when i < int(ratio * count).
      cpu_subgroups_ = static_cast<int64_t>(z.offload_optimizer.ratio * f_.subgroups);
      for (int64_t sg = 0; sg < cpu_subgroups_; ++sg) off_elems_ += subgroup_sizes_[sg];
      off_elems_ = std::min(part_, off_elems_);
    }
  }
  if (p_.optimizer_from_config && !p_.OffloadsOptimizer() &&
      (p_.optimizer == OptimizerType::kAdam || p_.optimizer == OptimizerType::kAdamW)) {
    int64_t flat = 0;
    switch (f_.wrapper) {
      case OptimizerWrapper::kZero12:
      case OptimizerWrapper::kBf16Optimizer: flat = part_; break;
      case OptimizerWrapper::kFp16Optimizer: flat = P_; break;
      case OptimizerWrapper::kZero3: flat = f_.largest_subgroup; break;
      case OptimizerWrapper::kBasic: flat = largest_param_; break;
    }
    (p_.torch_adam ? f_.torch_adam_flat_numel : f_.fused_adam_flat_numel) = flat;
  }
  gathered_.assign(w_.layers.size(), 0);
  gather_task_.assign(w_.layers.size(), -1);
  CountGatherCalls();
  retained_.assign(w_.layers.size(), 0);
  held_by_views_.assign(w_.layers.size(), 0);
  kept_for_backward_.assign(w_.layers.size(), 0);
  after_.assign(w_.layers.size(), 0);
  tiles_ = Stage3() ? std::max<int64_t>(1, p_.linear_tiles) : 1;
  f_.linear_tiles = tiles_;
  tile_gathered_.assign(w_.layers.size(), {});
  tile_task_.assign(w_.layers.size(), {});
  for (size_t l = 0; l < w_.layers.size(); ++l) {
    if (!Tiled(static_cast<int>(l))) continue;
    tile_gathered_[l].assign(tiles_, 0);
    tile_task_[l].assign(tiles_, -1);
    f_.largest_tile_gather_bytes =
        std::max(f_.largest_tile_gather_bytes, TileGatherBytes(static_cast<int>(l), 0));
  }
  if (p_.CheckpointsOnHost()) {
    for (const Layer& layer : w_.layers) {
      if (layer.checkpointed) f_.host_checkpoint_bytes += layer.activation_bytes;
    }
  }
  g_.Clear();
  // Gradient accumulation (docs/simulator.md "Gradient accumulation"): micro-steps 1 to GAS - 2
  // are the same micro-step, each starting from the memory the one before left (every one
  // allocates what it frees) and depending on the one before in the same way. The compact
  // graph builds micro-steps 0, 1 and 2 and the last, and marks micro-step 2 as repeated
  // GAS - 3 times (StepGraph::repeat): it stands for the unrolled graph task for task, so the
  // simulation's cost does not grow with GAS. With GAS <= 4 both forms are the same graph.
  const bool compact = form_ == StepGraphForm::kCompact && gas_ > 4;
  const int64_t built = compact ? 4 : gas_;
  if (built > kMaxUnrolledMicroSteps) {
    return Status::InvalidArgument(fmt::format(
        "a trace or an executed step holds every micro-step, at most {}; "
        "gradient_accumulation_steps is {}",
        kMaxUnrolledMicroSteps, gas_));
  }
  g_.Reserve(w_.layers.size() * 4 * static_cast<size_t>(built) + 64);
  Initial();
  LazyStates();
  TaskId block_begin = 0, block_end = 0;
  int64_t block_buckets = 0;
  for (int micro = 0; micro < gas_; ++micro) {
    if (compact && micro == 3) micro = gas_ - 1;  // micro-steps 3 .. GAS - 2: copies of 2
    const int64_t buckets_before = buckets_built_;
    if (compact && micro == 2) block_begin = g_.size();
    Forward(micro);
    Backward(micro);
    if (compact && micro == 2) {
      block_end = g_.size();
      block_buckets = buckets_built_ - buckets_before;
    }
  }
  if (compact) {
    g_.repeat = {block_begin, block_end, gas_ - 3};
    DSPLAN_RETURN_IF_ERROR(g_.CheckRepeat());
    // Every copy must start from the memory the one before started from, or the peak would
    // depend on which copy it is in.
    std::array<CategoryBytes, kNumMemSpaces> net{};
    for (TaskId id = block_begin; id < block_end; ++id) {
      for (const MemEffect* e = g_.effects_begin(id); e != g_.effects_end(id); ++e) {
        net[static_cast<int>(e->space)][static_cast<int>(e->category)] += e->bytes;
      }
    }
    for (const CategoryBytes& space : net) {
      for (int64_t b : space) {
        if (b != 0) {
          return Status::Internal(
              "BuildStepGraph: the repeated micro-step does not free what it allocates");
        }
      }
    }
  }
  OptimizerStep();
  const int64_t buckets = buckets_built_ + (compact ? (gas_ - 4) * block_buckets : 0);
  f_.buckets_per_micro_step = gas_ > 0 ? buckets / gas_ : 0;
  return Status();
}

// The optimizer's GPU state tensors as its first step() creates them. DeepSpeed 0.14.5 builds
// the states eagerly only for Adagrad (stage_1_and_2.py and stage3.py
// initialize_optimizer_states; "other optimizers ... do lazy initialization of the state at the
// first call to step"); Adam, AdamW, Lamb and SGD create one fp32 tensor per state per flat
// partition (stage 3: per sub-group) when they first step it. Measured: a stage-1 llama-3.2-1b
// run's step-1 peak is 8 bytes per parameter below the later steps' (docs/simulator.md).
void Builder::LazyStates() {
  g_.lazy_gpu_states.clear();
  if (p_.optimizer == OptimizerType::kAdagrad || state_bytes_ <= 0 || state_bytes_ % 4 != 0) return;
  const int64_t per_element = state_bytes_ / 4;  // fp32 state tensors per partition
  std::vector<int64_t> partitions;
  switch (f_.wrapper) {
    case OptimizerWrapper::kZero12:
    case OptimizerWrapper::kBf16Optimizer:
      if (p_.OffloadsOptimizer()) return;
      partitions = {part_};
      break;
    case OptimizerWrapper::kFp16Optimizer:
      partitions = {P_};
      break;
    case OptimizerWrapper::kZero3:
      if (p_.OffloadsOptimizer()) return;
      partitions = subgroup_sizes_;
      break;
    case OptimizerWrapper::kBasic:
      // The optimizer steps the model's own tensors, one state per parameter tensor; kept in
      // the initial state (no per-tensor list here).
      return;
  }
  for (int64_t n : partitions) {
    for (int64_t k = 0; k < per_element; ++k) g_.lazy_gpu_states.push_back({4 * n, -1, 0});
  }
}

void Builder::PlaceLazyStates(size_t first, size_t count, TaskId t, const EffectList& fx,
                              size_t k) {
  int32_t after = 0;
  for (size_t i = 0; i < k && i < fx.size(); ++i) {
    const MemEffect& e = fx.begin()[i];
    after += e.space == MemSpace::kGpu && e.bytes != 0 && !e.at_end;
  }
  for (size_t i = first; i < first + count && i < g_.lazy_gpu_states.size(); ++i) {
    g_.lazy_gpu_states[i].task = t;
    g_.lazy_gpu_states[i].after = after;
  }
}

// Model states in place at the start of a steady-state step (after the first step, so the
// optimizer states exist).
void Builder::Initial() {
  const ZeroConfig& z = p_.zero;
  const int64_t states = state_bytes_;
  Init(MemSpace::kGpu, MemCategory::kContext, workspace_);
  switch (f_.wrapper) {
    case OptimizerWrapper::kBf16Optimizer:
      // bf16 flat params, fp32 master partition, the full fp32 gradient buffer, optimizer
      // states; and the previous step's bf16 grads, which clear_lp_grads frees only at the
      // start of the next backward.
      Init(MemSpace::kGpu, MemCategory::kParams16, e_ * flat_);
      Init(MemSpace::kGpu, MemCategory::kMaster, 4 * part_);
      Init(MemSpace::kGpu, MemCategory::kGradients, acc_ * flat_ + e_ * P_);
      Init(MemSpace::kGpu, MemCategory::kOptimizerStates, states * part_);
      break;
    case OptimizerWrapper::kFp16Optimizer:
      Init(MemSpace::kGpu, MemCategory::kParams16, e_ * P_);
      Init(MemSpace::kGpu, MemCategory::kMaster, 4 * P_);
      Init(MemSpace::kGpu, MemCategory::kOptimizerStates, states * P_);
      break;
    case OptimizerWrapper::kBasic:
      Init(MemSpace::kGpu, MemCategory::kParams16, e_ * P_);
      Init(MemSpace::kGpu, MemCategory::kOptimizerStates, states * e_ / 4 * P_);
      break;
    case OptimizerWrapper::kZero12: {
      Init(MemSpace::kGpu, MemCategory::kParams16, e_ * flat_);
      if (!p_.OffloadsOptimizer()) {
        Init(MemSpace::kGpu, MemCategory::kMaster, 4 * part_);
        Init(MemSpace::kGpu, MemCategory::kOptimizerStates, states * part_);
      } else {
        const bool pin = z.offload_optimizer.pin_memory;
        // fp32 master partition: always pinned in stage 1/2 offload; fp32 grads pinned with
        // pin_memory; Adam states pageable (CPU Adam creates them); a per-parameter temporary
        // gradient buffer on each side.
        Init(MemSpace::kPinnedHost, MemCategory::kMaster, 4 * part_);
        Init(HostSpace(pin), MemCategory::kGradients, 4 * part_);
        Init(MemSpace::kPageableHost, MemCategory::kOptimizerStates, states * part_);
        Init(HostSpace(pin), MemCategory::kCommBuffers, e_ * largest_param_);
        // accumulated_grads_in_cpu (GAS > 1): one buffer per owned parameter, whole tensors.
        // (Many per-parameter tensors: their sum is not rounded as one request; each tensor's
        // own power-of-two rounding is not modeled.)
        if (gas_ > 1) {
          g_.initial[static_cast<int>(HostSpace(pin))][static_cast<int>(MemCategory::kGradients)] +=
              e_ * grads_part_;
        }
        Init(MemSpace::kGpu, MemCategory::kCommBuffers, e_ * largest_param_);
      }
      break;
    }
    case OptimizerWrapper::kZero3: {
      const bool off_opt = p_.OffloadsOptimizer();
      const bool nvme_opt = z.offload_optimizer.device == OffloadDevice::kNvme;
      const bool off_par = p_.OffloadsParams();
      const bool nvme_par = z.offload_param.device == OffloadDevice::kNvme;
      const bool pin = z.offload_optimizer.pin_memory;
      const int64_t persistent_part = CeilDiv(f_.persistent_numel, N_);
      if (!off_par) {
        Init(MemSpace::kGpu, MemCategory::kParams16, e_ * part_);
      } else {
        // One pinned flat CPU buffer per group (always pinned); persistent parameters keep
        // their partition on the GPU; with NVMe, the sub-groups that do not fit max_in_cpu live
        // on the drive behind a pinned pool of buffer_count x buffer_size elements.
        Init(MemSpace::kGpu, MemCategory::kParams16, e_ * persistent_part);
        const int64_t in_cpu = nvme_par ? param_cpu_elems_ : part_;
        Init(MemSpace::kPinnedHost, MemCategory::kParams16, e_ * in_cpu);
        if (nvme_par) {
          Init(MemSpace::kNvme, MemCategory::kParams16, e_ * (part_ - in_cpu));
          Init(MemSpace::kPinnedHost, MemCategory::kCommBuffers,
               e_ * z.offload_param.buffer_count * z.offload_param.buffer_size);
        }
      }
      // Persistent parameters are held whole on every rank (beyond their partition).
      if (N_ > 1) Init(MemSpace::kGpu, MemCategory::kGatheredParams, e_ * f_.persistent_numel);
      // The ipg bucket: one flat buffer of reduce_bucket_size elements, allocated once.
      if (z.contiguous_gradients) Init(MemSpace::kGpu, MemCategory::kCommBuffers, e_ * rbs_);
      if (!off_opt) {
        Init(MemSpace::kGpu, MemCategory::kGradients, acc_ * part_);
        Init(MemSpace::kGpu, MemCategory::kMaster, 4 * part_);
        Init(MemSpace::kGpu, MemCategory::kOptimizerStates, states * part_);
      } else {
        // The 16-bit gradient partitions live on the host for every sub-group; the fp32
        // gradient, master and states of the offloaded sub-groups too, those of the GPU
        // sub-groups (offload_optimizer.ratio < 1) on the GPU.
        const int64_t off = off_elems_, on = part_ - off_elems_;
        Init(HostSpace(pin), MemCategory::kGradients, acc_ * part_);
        if (!nvme_opt) {
          Init(HostSpace(pin), MemCategory::kGradients, 4 * off);
        } else {
          // Swapped sub-groups share one pageable fp32 gradient buffer of the largest
          // sub-group (initialize_optimizer_states: gradient_buffer.narrow per sub-group).
          if (off > 0) {
            Init(MemSpace::kPageableHost, MemCategory::kGradients, 4 * f_.largest_subgroup);
          }
        }
        if (nvme_opt) {
          Init(MemSpace::kNvme, MemCategory::kMaster, 4 * off);
          Init(MemSpace::kNvme, MemCategory::kOptimizerStates, states * off);
          Init(MemSpace::kNvme, MemCategory::kGradients, 4 * off);
          Init(MemSpace::kPinnedHost, MemCategory::kCommBuffers,
               4 * z.offload_optimizer.buffer_count * f_.largest_subgroup);
        } else {
          Init(MemSpace::kPageableHost, MemCategory::kMaster, 4 * off);
          Init(MemSpace::kPageableHost, MemCategory::kOptimizerStates, states * off);
        }
        if (on > 0) {
          Init(MemSpace::kGpu, MemCategory::kGradients, 4 * on);
          Init(MemSpace::kGpu, MemCategory::kMaster, 4 * on);
          Init(MemSpace::kGpu, MemCategory::kOptimizerStates, states * on);
        }
      }
      // What is gathered when the backward starts (partitioned_param_coordinator.py, 0.14.5;
      // docs/deepspeed-facts.md "Release"; tools/dev/zero3_coordinator_emu.py replays it):
      // (1) after a layer's forward its parameters stay gathered when they are used again
      // within stage3_max_reuse_distance elements of the trace, which runs from there through
      // the rest of the forward and on into the backward down to the layer: the gathered
      // elements of the layers after it, twice. (2) The prefetcher's queue runs through the
      // whole trace, forward then backward, and an entry whose parameter is already gathered
      // costs it nothing: in the second part of the forward it reaches the backward's entries
      // and marks those layers as fetched for their backward use, so the release after their
      // forward keeps them (__params_to_release skips a parameter fetched for a later step).
      // Counted from the last layer, as the backward uses them, until
      // stage3_max_live_parameters are gathered: those layers stay gathered from their forward
      // into the backward (kept_for_backward_), and nothing is gathered at the forward's end
      // (the emulator: qwen2-1.5b keeps layers 12-27 and releases 0-11; the allocator's record
      // in offfresh-1205/memhist shows no gather there).
      const int L = static_cast<int>(w_.layers.size());
      int64_t after = 0, live = 0;
      for (int l = L - 1; l >= 0; --l) {
        retained_[l] = (Gathered(l) > 0 && 2 * after < z.stage3_max_reuse_distance) ? 1 : 0;
        if (retained_[l]) live += Gathered(l);
        after_[l] = after;
        after += Gathered(l);
      }
      if (z.stage3_prefetch_bucket_size > 0) {
        // In the backward's order; a tiled block's tiles are prefetched one module at a time,
        // which this layer-level fill does not follow: it stops there.
        for (int l = L - 1; l >= 0 && live < z.stage3_max_live_parameters; --l) {
          if (Tiled(l)) break;
          if (Gathered(l) <= 0 || retained_[l]) continue;
          kept_for_backward_[l] = 1;
          live += Gathered(l);
        }
      }
      break;
    }
  }
}

// With offload_param, the rank's partition of |numel| gathered elements (of layer |l|, tile
// |index|) is copied to the GPU before the all-gather; -1 when parameters stay on the GPU.
TaskId Builder::PartitionToGpu(int micro, int l, int64_t index, int64_t numel) {
  if (!p_.OffloadsParams()) return -1;
  Task copy;
  copy.kind = TaskKind::kCopyH2D;
  copy.resource = Resource::kH2D;
  copy.layer = l;
  copy.micro_step = micro;
  copy.index = static_cast<int32_t>(index);
  copy.bytes = static_cast<double>(e_ * CeilDiv(numel, N_));
  copy.param_fetch = true;
  TaskId read = -1;
  if (!layer_nvme_share_.empty() && NvmeGatherBytes(l, numel) > 0) {
    // Partitions on NVMe are read into the swapper's pinned buffers first
    // (Init._ensure_availability_of_partitioned_params: swap_in, or the coordinator's NVMe
    // prefetch ahead of it) at every gather, forward, backward and recompute; released
    // parameters are not written back (the drive keeps the partition until the step).
    Task r = copy;
    r.kind = TaskKind::kNvmeRead;
    r.resource = Resource::kNvme;
    r.bytes = NvmeGatherBytes(l, numel);
    read = g_.Add(r, {}, {});
  }
  return g_.Add(copy, {read}, {});
}

// The all-gather of |numel| elements of layer |l| (tile |index|): every rank's padded partition.
Task Builder::AllGatherTask(int micro, int l, int64_t index, int64_t numel) const {
  Task t;
  t.kind = TaskKind::kAllGather;
  t.resource = CommStream();
  t.layer = l;
  t.micro_step = micro;
  t.index = static_cast<int32_t>(index);
  t.bytes = static_cast<double>(e_ * CeilDiv(numel, N_) * N_);
  t.ranks = N_;
  t.inter_node = inter_node_;
  return t;
}

// DeepSpeed's coordinator (fetch_sub_module) prefetches parameters in trace order into one
// all_gather_coalesced call until the call holds stage3_prefetch_bucket_size elements or more;
// without prefetch (bucket 0) each module fetches its own. So a model smaller than the bucket is
// gathered in one call per step, a 7B model in about one per weight matrix. Counted here over
// the gathered tensors in layer order; each call is charged to the layer where it starts.
void Builder::CountGatherCalls() {
  gather_calls_.assign(w_.layers.size(), 0);
  pending_calls_ = 0;
  if (!Stage3()) return;
  const int64_t bucket = p_.zero.stage3_prefetch_bucket_size;
  const int64_t threshold = p_.zero.stage3_param_persistence_threshold;
  int64_t open = 0;  // elements in the call being filled (0: none open)
  auto add = [&](size_t l, int64_t numel) {
    if (open == 0) ++gather_calls_[l];
    open += numel;
    if (bucket <= 0 || open >= bucket) open = 0;
  };
  for (size_t l = 0; l < lp_.size(); ++l) {
    for (int64_t numel : lp_[l].tensor_numels) {
      if (numel > threshold) add(l, numel);  // as ComputeLayerParams counts gathered_tensors
    }
    if (lp_[l].tied_numel > 0) add(l, lp_[l].tied_numel);
  }
}

int32_t Builder::TakeGatherCalls() {
  const int32_t n = pending_calls_;
  pending_calls_ = 0;
  return n;
}

TaskId Builder::Gather(int micro, int l) {
  if (Gathered(l) <= 0) return -1;
  pending_calls_ += gather_calls_[l];
  const int64_t bytes = GatherBytes(l);
  const TaskId h2d = PartitionToGpu(micro, l, 0, Gathered(l));
  Task t = AllGatherTask(micro, l, 0, Gathered(l));
  t.kernels = 2;
  EffectList fx = {Alloc(bytes, MemCategory::kGatheredParams)};
  if (N_ > 1 && lp_[l].tensors > 1) {
    // A coalesced gather lands in one flat buffer that is then split into the parameters.
    fx.push_back(Alloc(bytes, MemCategory::kCommBuffers));
    fx.push_back(Free(bytes, MemCategory::kCommBuffers, true));
  }
  const TaskId id = g_.Add(t, {h2d}, fx);
  gathered_[l] = 1;
  gathered_numel_ += Gathered(l);
  gather_task_[l] = id;
  return id;
}

void Builder::Forward(int micro) {
  const int L = static_cast<int>(w_.layers.size());
  bucket_index_ = 0;
  for (int l = 0; l < L; ++l) {
    const Layer& layer = w_.layers[l];
    if (Tiled(l)) {
      if (l + 1 < L && !gathered_[l + 1] && CanPrefetch(l + 1)) Gather(micro, l + 1);
      ForwardTiled(micro, l);
      CheckpointToHost(micro, l);
      continue;
    }
    TaskId gather = -1;
    if (Stage3() && Gathered(l) > 0) {
      gather = gathered_[l] ? gather_task_[l] : Gather(micro, l);
      // Prefetch (steady state: the module trace is complete). DeepSpeed's prefetcher runs at
      // every module's hook, up to stage3_prefetch_bucket_size each time, so it keeps about
      // stage3_max_live_parameters gathered ahead in the trace's order
      // (tools/dev/zero3_coordinator_emu.py): the layers after this one are gathered before its
      // compute until that many are.
      for (int j = l + 1; j < L && p_.zero.stage3_prefetch_bucket_size > 0; ++j) {
        if (Tiled(j) || gathered_numel_ >= p_.zero.stage3_max_live_parameters) break;
        if (!gathered_[j] && Gathered(j) > 0) Gather(micro, j);
      }
    }
    Task t;
    t.kind = TaskKind::kForward;
    t.layer = l;
    t.micro_step = micro;
    t.zero3_hooks = Stage3();
    t.gathered_tensors = lp_[l].gathered_tensors;
    t.gather_calls = TakeGatherCalls();
    EffectList fx;
    // The forward's largest transient (Layer::fwd_transient_bytes) is alive when the layer's
    // kept bytes are all allocated: allocated at the start, freed after them at the end.
    if (layer.fwd_transient_bytes > 0) {
      fx.push_back(Alloc(layer.fwd_transient_bytes, MemCategory::kTemporaries));
    }
    KeptActivationAllocs(l, &fx);
    if (layer.fwd_transient_bytes > 0) {
      fx.push_back(Free(layer.fwd_transient_bytes, MemCategory::kTemporaries, true));
    }
    // The caller keeps each micro-step's output object until the next forward returns
    // (`out = engine(batch)` rebinds it then), so the previous micro-step's logits are freed
    // at the end of this forward, after its own are allocated. Micro-step 0 holds none: the
    // step's last output is dropped after the step (OptimizerStep).
    if (l == L - 1 && micro > 0 && output_bytes_ > 0) {
      fx.push_back(Free(output_bytes_, MemCategory::kActivations, true));
    }
    const bool release = Stage3() && gathered_[l] && !retained_[l] && !kept_for_backward_[l];
    // A checkpointed layer's forward keeps no saved tensors (they are recomputed), so no view.
    const int64_t held = release && !layer.checkpointed ? HeldByViewsBytes(l) : 0;
    if (release) fx.push_back(Free(GatherBytes(l) - held, MemCategory::kGatheredParams));
    held_by_views_[l] += held;
    last_compute_ = g_.Add(t, {last_compute_, gather}, fx);
    if (release) {
      gathered_[l] = 0;
      gathered_numel_ -= Gathered(l);
    }
    CheckpointToHost(micro, l);
  }
}

void Builder::Backward(int micro) {
  const ZeroConfig& z = p_.zero;
  const int L = static_cast<int>(w_.layers.size());
  current_backward_ = -1;
  pending_hook_kernels_ = 0;  // the last micro-step's epilogue flush ran after its backward
  {
    // Start of engine.backward(): BF16_Optimizer frees the previous bf16 grads; stage 1/2
    // allocates the ipg bucket (two with overlap_comm) when contiguous_gradients.
    EffectList fx;
    if (f_.wrapper == OptimizerWrapper::kBf16Optimizer) {
      fx.push_back(Free(e_ * P_, MemCategory::kGradients, false));
    }
    if (Zero12() && z.contiguous_gradients) {
      fx.push_back(Alloc((f_.overlap_comm ? 2 : 1) * e_ * rbs_, MemCategory::kCommBuffers));
    }
    if (!fx.empty()) {
      Task t;
      t.kind = TaskKind::kGradCopy;
      t.micro_step = micro;
      t.kernels = 1;
      last_compute_ = g_.Add(t, {last_compute_}, fx);
    }
  }
  bucket_elems_ = 0;
  bucket_tensors_ = 0;
  bucket_casts_ = {};
  bucket_producers_.clear();
  for (int l = L - 1; l >= 0; --l) {
    const Layer& layer = w_.layers[l];
    if (Tiled(l)) {
      if (l >= 1 && !gathered_[l - 1] && CanPrefetch(l - 1)) Gather(micro, l - 1);
      BackwardTiled(micro, l);
      continue;
    }
    TaskId gather = -1;
    if (Stage3() && Gathered(l) > 0) {
      gather = gathered_[l] ? gather_task_[l] : Gather(micro, l);
      if (l >= 1 && !gathered_[l - 1] && CanPrefetch(l - 1)) {
        Gather(micro, l - 1);
      }
    }
    TaskId recompute = -1;
    const TaskId reload = CheckpointFromHost(micro, l);
    if (layer.checkpointed) {
      Task r;
      r.kind = TaskKind::kRecompute;
      r.zero3_hooks = Stage3();
      r.gathered_tensors = lp_[l].gathered_tensors;
      r.gather_calls = TakeGatherCalls();
      r.layer = l;
      r.micro_step = micro;
      EffectList rfx;
      SavedActivationAllocs(l, layer.recompute_bytes, &rfx);
      recompute = last_compute_ = g_.Add(r, {last_compute_, gather, reload}, rfx);
    }
    Task t;
    t.kind = TaskKind::kBackward;
    t.layer = l;
    t.micro_step = micro;
    t.zero3_hooks = Stage3();
    t.gathered_tensors = lp_[l].gathered_tensors;
    t.gather_calls = TakeGatherCalls();
    EffectList fx;
    // Parameter gradients appear as param.grad in the model dtype.
    const int64_t grad_bytes = e_ * layer.params;
    const bool new_grads = !GradsAccumulateInPlace() || micro == 0;
    // Into an existing param.grad (accumulation in place, after the window's first micro-step)
    // autograd computes each parameter's gradient into a new tensor and AccumulateGrad adds it
    // in place and frees it: one tensor at a time, alive beside the backward's working memory
    // (a Linear's weight gradient is computed while its output's gradient is still held). A
    // tied table's sum is the temporaries below.
    const int64_t in_place_bytes =
        !new_grads && grad_bytes > 0 && lp_[l].tied_grad_numel == 0 ? e_ * lp_[l].largest : 0;
    if (in_place_bytes > 0) fx.push_back(Alloc(in_place_bytes, MemCategory::kTemporaries, true));
    // Working memory of the backward: the gradients of the layer's largest intermediate and of
    // its input, both alive at once. For the loss that is nll_loss's gradient (a dense tensor
    // shaped like the log-probabilities it saved) and log_softmax's gradient of its input, the
    // same size: 8 bytes per logit when the logits are upcast to fp32 (measured on the H200 for
    // 13 families: docs/validation/deepspeed/README.md).
    // Two allocations, as autograd makes them (the caching allocator places them separately).
    BackwardWorkingMemory(l, &fx);
    // Saved tensors go; the outputs (logits) stay with the caller's output object until the
    // step is over.
    fx.push_back(Free(layer.activation_bytes - lp_[l].output_bytes + layer.recompute_bytes -
                          lp_[l].backward_early_free_bytes,
                      MemCategory::kActivations));
    // Tied word embeddings: the table is one leaf used twice, so autograd's AccumulateGrad
    // node for it (and ZeRO's hook on that node) runs once, at the embedding's backward. Until
    // then the head's gradient of the whole table waits in that node's input buffer. At the
    // embedding the buffer adds the lookup's gradient out of place: three table-sized
    // gradients at once, then the sum alone goes on as param.grad (allocator histories of
    // qwen2-0.5b, bloom-1b7 and gemma-2b at stages 1-3: docs/simulator.md). The two autograd
    // buffers are temporaries (not yet param.grad); the sum is the table's gradient below.
    const int64_t tied_bytes = e_ * lp_[l].tied_grad_numel;
    const bool tied_sum = lp_[l].owns_tied_table && tied_bytes > 0;
    if (tied_bytes > 0 && !lp_[l].owns_tied_table) {
      fx.push_back(Alloc(tied_bytes, MemCategory::kTemporaries, true));
    }
    if (tied_sum) fx.push_back(Alloc(tied_bytes, MemCategory::kTemporaries, true));
    if (new_grads && grad_bytes > 0) fx.push_back(Alloc(grad_bytes, MemCategory::kGradients, true));
    if (tied_sum) {
      // Added into an existing param.grad (accumulation in place), the sum is a temporary too.
      if (!new_grads) fx.push_back(Alloc(tied_bytes, MemCategory::kTemporaries, true));
      fx.push_back(Free(tied_bytes, MemCategory::kTemporaries));
      fx.push_back(Free(tied_bytes, MemCategory::kTemporaries));
      if (!new_grads) fx.push_back(Free(tied_bytes, MemCategory::kTemporaries));
    }
    const bool release = Stage3() && gathered_[l];
    if (release) fx.push_back(Free(GatherBytes(l), MemCategory::kGatheredParams));
    if (held_by_views_[l] > 0) {
      fx.push_back(Free(held_by_views_[l], MemCategory::kGatheredParams));
      held_by_views_[l] = 0;
    }
    // A flush that the layer's first gradient triggers runs in that gradient's hook, before
    // most of the layer's backward kernels are issued (they are issued one autograd node at a
    // time), so what it allocates (the first flush's grads_in_partition) is there before the
    // layer's working memory: a decoder block's first gradient is its MLP's, its largest
    // working set the attention's (falcon-7b's last rank of 8: tiedmh-1206d's allocator
    // history). A flush the host waits for also holds the layer's backward back, instead of
    // running beside its copies (FlushBucket's join).
    const bool early_flush =
        ReducesInBackward(micro) && layer.params > 0 && FlushesAtFirstGradient(l);
    if (early_flush) FlushBucket(micro, -1);
    last_compute_ = g_.Add(t, {last_compute_, gather, recompute}, fx);
    current_backward_ = last_compute_;
    if (!new_grads && grad_bytes > 0) {
      // AccumulateGrad's in-place add of each parameter's new gradient (`variable_grad +=
      // new_grad`): read both, write one, a kernel per tensor (docs/simulator.md "Gradient
      // accumulation").
      Task add;
      add.kind = TaskKind::kGradCopy;
      add.layer = l;
      add.micro_step = micro;
      add.bytes = 3.0 * static_cast<double>(grad_bytes);
      add.kernels = std::max(1, lp_[l].tensors);
      EffectList afx;
      if (in_place_bytes > 0) afx.push_back(Free(in_place_bytes, MemCategory::kTemporaries));
      last_compute_ = g_.Add(add, {last_compute_}, afx);
    }
    if (early_flush && Stage3()) g_.AddBucketFlush(last_compute_);
    if (early_flush && pending_hook_kernels_ > 0)
      g_.AddHookKernels(last_compute_, pending_hook_kernels_);
    pending_hook_kernels_ = 0;
    if (release) {
      gathered_[l] = 0;
      gathered_numel_ -= Gathered(l);
    }
    if (ReducesInBackward(micro) && layer.params > 0) AddToBucket(micro, l, last_compute_);
  }
  EndOfBackward(micro);
}

TaskId Builder::GatherTile(int micro, int l, int64_t i) {
  const int64_t numel = TileNumel(l, i);
  const TaskId h2d = PartitionToGpu(micro, l, i, numel);
  Task t = AllGatherTask(micro, l, i, numel);
  // One gather per tile module: each of the block's tiled Linears is fetched on its own.
  t.kernels = 2 * std::max(1, lp_[l].gathered_tensors);
  const TaskId id = g_.Add(t, {h2d}, {Alloc(TileGatherBytes(l, i), MemCategory::kGatheredParams)});
  tile_gathered_[l][i] = 1;
  tile_task_[l][i] = id;
  gathered_numel_ += numel;
  return id;
}

void Builder::ReleaseTile(int l, int64_t i, EffectList* fx) {
  fx->push_back(Free(TileGatherBytes(l, i), MemCategory::kGatheredParams));
  tile_gathered_[l][i] = 0;
  gathered_numel_ -= TileNumel(l, i);
}

// One tile's share of layer |l|'s |kind| task: 1/parts of its kernels, the layer's hooks whole.
Task Builder::TileTask(TaskKind kind, int micro, int l, int64_t i) const {
  Task t;
  t.kind = kind;
  t.layer = l;
  t.micro_step = micro;
  t.index = static_cast<int32_t>(i);
  t.zero3_hooks = true;
  t.gathered_tensors = lp_[l].gathered_tensors;
  t.parts = static_cast<int32_t>(tiles_);
  return t;
}

void Builder::ForwardTiled(int micro, int l) {
  const int64_t reuse = p_.zero.stage3_max_reuse_distance;
  for (int64_t i = 0; i < tiles_; ++i) {
    const TaskId gather = tile_gathered_[l][i] ? tile_task_[l][i] : GatherTile(micro, l, i);
    const Task t = TileTask(TaskKind::kForward, micro, l, i);
    EffectList fx;
    if (i == tiles_ - 1) KeptActivationAllocs(l, &fx);
    // The tile's next use is its backward: the block's later tiles and the layers after it
    // come in between, in the forward and again in the backward (the module trace, as for
    // whole layers).
    const int64_t distance = after_[l] + (Gathered(l) - Gathered(l) / tiles_ * (i + 1));
    if (!(2 * distance < reuse)) ReleaseTile(l, i, &fx);
    last_compute_ = g_.Add(t, {last_compute_, gather}, fx);
  }
}

void Builder::BackwardTiled(int micro, int l) {
  const Layer& layer = w_.layers[l];
  const int64_t reuse = p_.zero.stage3_max_reuse_distance;
  const TaskId reload = CheckpointFromHost(micro, l);
  if (layer.checkpointed) {
    // The checkpoint function runs the block's forward again, tile by tile; a tile stays
    // gathered when its backward comes within the reuse distance (the later tiles' recompute
    // and backward in between, as for whole layers).
    for (int64_t i = 0; i < tiles_; ++i) {
      const TaskId gather = tile_gathered_[l][i] ? tile_task_[l][i] : GatherTile(micro, l, i);
      const Task r = TileTask(TaskKind::kRecompute, micro, l, i);
      EffectList fx;
      if (i == tiles_ - 1) SavedActivationAllocs(l, layer.recompute_bytes, &fx);
      const int64_t distance = (Gathered(l) / tiles_) * (tiles_ - 1 - i);
      if (!(2 * distance < reuse)) ReleaseTile(l, i, &fx);
      last_compute_ = g_.Add(r, {last_compute_, gather, reload}, fx);
    }
  }
  int64_t first = lp_[l].offset + layer.params;  // gradients appear from the last tile down
  for (int64_t i = tiles_ - 1; i >= 0; --i) {
    const TaskId gather = tile_gathered_[l][i] ? tile_task_[l][i] : GatherTile(micro, l, i);
    const Task t = TileTask(TaskKind::kBackward, micro, l, i);
    EffectList fx;
    if (i == tiles_ - 1) {
      // The block's backward working memory (as untiled: the outputs of a tiled Linear are
      // concatenated back to the whole intermediate, so its largest saved tensor is unchanged).
      BackwardWorkingMemory(l, &fx);
    }
    if (i == 0) {
      fx.push_back(Free(layer.activation_bytes - lp_[l].output_bytes + layer.recompute_bytes -
                            lp_[l].backward_early_free_bytes,
                        MemCategory::kActivations));
    }
    const int64_t params = Share(layer.params, tiles_, i);
    if (params > 0) fx.push_back(Alloc(e_ * params, MemCategory::kGradients, true));
    ReleaseTile(l, i, &fx);
    last_compute_ = g_.Add(t, {last_compute_, gather}, fx);
    first -= params;
    if (params > 0) {
      if (bucket_elems_ > 0 && bucket_elems_ + params > rbs_) FlushBucket(micro, last_compute_);
      // A tile's parameters are slices of the layer's tensors: counted as the layer's tensor
      // count of equal copies, none of them a fresh temporary.
      const int tensors = std::max(1, lp_[l].tensors);
      CastCopies casts = CastCopiesOf(CeilDiv(CeilDiv(params, tensors), N_), tensors);
      casts.fresh = 0;
      AddChunk(micro, l, first, params, tensors, last_compute_, params, casts);
    }
  }
}

void Builder::CheckpointToHost(int micro, int l) {
  const Layer& layer = w_.layers[l];
  if (!p_.CheckpointsOnHost() || !layer.checkpointed || layer.activation_bytes <= 0) return;
  // CheckpointFunction.forward with cpu_checkpointing: copy_to_device(args, cpu) is a blocking
  // .to('cpu') into pageable memory; the GPU inputs are then emptied (arg.data = empty), so
  // the host waits for the copy before the next layer.
  Task c;
  c.kind = TaskKind::kCopyD2H;
  c.resource = Resource::kD2H;
  c.layer = l;
  c.micro_step = micro;
  c.pinned = false;
  c.bytes = static_cast<double>(layer.activation_bytes);
  last_compute_ = g_.Add(
      c, {last_compute_},
      {Alloc(layer.activation_bytes, MemCategory::kActivations, false, MemSpace::kPageableHost),
       Free(layer.activation_bytes, MemCategory::kActivations)});
}

TaskId Builder::CheckpointFromHost(int micro, int l) {
  const Layer& layer = w_.layers[l];
  if (!p_.CheckpointsOnHost() || !layer.checkpointed || layer.activation_bytes <= 0) return -1;
  // CheckpointFunction.backward: move_to_device(saved, cuda) before the recomputation; the host
  // copy is dropped (saved_data = None).
  Task c;
  c.kind = TaskKind::kCopyH2D;
  c.resource = Resource::kH2D;
  c.layer = l;
  c.micro_step = micro;
  c.pinned = false;
  c.bytes = static_cast<double>(layer.activation_bytes);
  return last_compute_ = g_.Add(
             c, {last_compute_},
             {Alloc(layer.activation_bytes, MemCategory::kActivations),
              Free(layer.activation_bytes, MemCategory::kActivations, true,
                   MemSpace::kPageableHost)});
}

void Builder::SavedActivationAllocs(int l, int64_t bytes, EffectList* fx) const {
  // The tensors the backward frees before its working memory (LayerParams::early_free_blocks)
  // are blocks of their own, in forward order after the rest, so that the caching allocator
  // replay frees them as the separate tensors they are (a freed 2 GiB block cannot serve a
  // 4 GiB request).
  const int64_t rest = bytes - lp_[l].backward_early_free_bytes;
  if (rest > 0) fx->push_back(Alloc(rest, MemCategory::kActivations, true));
  for (int64_t b : lp_[l].early_free_blocks) fx->push_back(Alloc(b, MemCategory::kActivations, true));
}

void Builder::KeptActivationAllocs(int l, EffectList* fx) const {
  const Layer& layer = w_.layers[l];
  // A checkpointed block keeps only its inputs; its saved tensors come with the recompute.
  if (layer.checkpointed) {
    fx->push_back(Alloc(layer.activation_bytes, MemCategory::kActivations, true));
  } else {
    SavedActivationAllocs(l, layer.activation_bytes, fx);
  }
}

void Builder::BackwardWorkingMemory(int l, EffectList* fx) const {
  // Buffers the size of the layer's largest saved tensor, alive together, as autograd allocates
  // them (the caching allocator places them separately): two gradients, plus CUDA's
  // `grad * output` temporary when that tensor is a softmax output (backward_work_buffers 3).
  // The saved tensors that the ops after it in the forward alone held are gone by then, the
  // last one first (blocks of their own: SavedActivationAllocs).
  const std::vector<int64_t>& early = lp_[l].early_free_blocks;
  for (auto it = early.rbegin(); it != early.rend(); ++it) {
    fx->push_back(Free(*it, MemCategory::kActivations));
  }
  const int64_t work = lp_[l].largest_saved_bytes;
  for (int k = 0; k < lp_[l].backward_work_buffers; ++k) {
    fx->push_back(Alloc(work, MemCategory::kTemporaries));
  }
  for (int k = 0; k < lp_[l].backward_work_buffers; ++k) {
    fx->push_back(Free(work, MemCategory::kTemporaries));
  }
}

void Builder::AddToBucket(int micro, int l, TaskId produced) {
  const LayerParams& lp = lp_[l];
  // The gradients the hooks free: all but those stage 1 keeps until the epilogue.
  const int64_t retained = retained_numel_.empty() ? 0 : retained_numel_[l];
  retained_live_ += retained;
  if (bucket_elems_ + lp.numel <= rbs_ || lp.tensor_numels.size() <= 1) {
    if (bucket_elems_ > 0 && bucket_elems_ + lp.numel > rbs_) FlushBucket(micro, produced);
    AddChunk(micro, l, lp.offset, lp.numel, lp.tensors, produced, lp.numel - retained,
             CastCopiesOf(lp.tensor_numels));
    return;
  }
  // The layer does not fit in the bucket: DeepSpeed's hooks bucket per parameter
  // (reduce_independent_p_g_buckets_and_remove_grads flushes before a parameter that would
  // overfill it), so walk this layer's tensors in the order autograd produces their gradients
  // (last first). Only layers at a flush take this path.
  // The layer's gradients are one allocation in the graph; DeepSpeed holds at most one
  // parameter's autograd gradient at a time (each is copied into the bucket as it appears), so
  // the first part frees them all.
  int64_t end = lp.offset + lp.numel;
  int64_t chunk = 0;
  CastCopies chunk_casts;
  int chunk_tensors = 0;
  int64_t freed = lp.numel - retained;
  for (auto it = lp.tensor_numels.rbegin(); it != lp.tensor_numels.rend(); ++it) {
    if (bucket_elems_ + chunk > 0 && bucket_elems_ + chunk + *it > rbs_) {
      if (chunk > 0) {
        AddChunk(micro, l, end - chunk, chunk, chunk_tensors, produced, freed, chunk_casts);
        freed = 0;
      }
      end -= chunk;
      chunk = 0;
      chunk_casts = {};
      chunk_tensors = 0;
      FlushBucket(micro, produced);
    }
    chunk += *it;
    chunk_casts.Add(CastCopiesOfTensor(*it));
    ++chunk_tensors;
  }
  AddChunk(micro, l, end - chunk, chunk, chunk_tensors, produced, freed, chunk_casts);
}

void Builder::AddChunk(int micro, int l, int64_t first, int64_t elements, int tensors,
                       TaskId produced, int64_t freed, const CastCopies& casts) {
  // The hook copies the gradient into the bucket buffer and re-points param.grad at it; the
  // autograd-allocated gradient is freed.
  // The hook runs on autograd's thread with the backward's stream current (stage 1 without
  // overlap_comm: reduce_gradients on the main thread, the same stream), so the copy is on the
  // compute stream whatever overlap_comm says; only average_tensor and copy_grads_in_partition
  // move to reduction_stream.
  Task c;
  c.kind = TaskKind::kGradCopy;
  c.resource = Stage3() ? CommStream() : Resource::kCompute;
  c.layer = l;
  c.micro_step = micro;
  c.bytes = 2.0 * e_ * elements;
  c.kernels = std::max(1, tensors);
  const TaskId id =
      freed > 0 ? g_.Add(c, {produced}, {Free(e_ * freed, MemCategory::kGradients)})
                : g_.Add(c, {produced}, {});
  bucket_producers_.push_back(id);
  if (bucket_elems_ == 0) {
    bucket_first_ = first;
    bucket_end_ = first + elements;
  } else {
    bucket_first_ = std::min(bucket_first_, first);
    bucket_end_ = std::max(bucket_end_, first + elements);
  }
  bucket_elems_ += elements;
  bucket_tensors_ += tensors;
  bucket_casts_.Add(casts);
}

void Builder::HookOps(TaskId hook, int32_t ops) {
  if (hook >= 0 && current_backward_ >= 0) {
    g_.AddHookKernels(current_backward_, ops);
  } else {
    pending_hook_kernels_ += ops;
  }
}

void Builder::FlushBucket(int micro, TaskId hook) {
  if (bucket_elems_ == 0) return;
  // ZeRO-3 runs the flush inside the gradient hook of the backward that overfilled the bucket,
  // on the thread that issues the backward's kernels: host time of that task (CostModel).
  if (Stage3() && hook >= 0 && g_.task(hook).kind == TaskKind::kBackward) g_.AddBucketFlush(hook);
  const ZeroConfig& z = p_.zero;
  const bool boundary = micro == gas_ - 1;
  const int64_t owned = CeilDiv(bucket_elems_, N_);
  Task r;
  r.resource = CommStream();
  r.micro_step = micro;
  r.index = bucket_index_++;
  ++buckets_built_;
  r.ranks = N_;
  r.inter_node = inter_node_;
  r.bytes = static_cast<double>(comm_e_ * bucket_elems_);
  r.kernels = 2;
  EffectList fx;
  if (Stage3()) {
    // reduce_scatter_coalesced interleaves the ranks' chunks with torch.cat (a bucket-sized
    // copy), then partition_grads adds this rank's chunk into grad_partitions_flat_buffer.
    // At world size 1 too: only a bucket of one tensor whose numel the world size divides is
    // reduced in place (coalesced_collectives.reduce_scatter_coalesced). With overlap_comm the
    // copy is made on reduce_and_partition_stream, so it comes from that stream's pool.
    r.kind = z.reduce_scatter ? TaskKind::kReduceScatter : TaskKind::kAllReduce;
    if (N_ > 1 || bucket_tensors_ > 1) {
      fx.push_back(OnSideStream(Alloc(comm_e_ * bucket_elems_, MemCategory::kCommBuffers)));
      fx.push_back(Free(comm_e_ * bucket_elems_, MemCategory::kCommBuffers));
    }
  } else {
    // average_tensor: the slices of all owners are all-reduced together
    // (use_multi_rank_bucket_allreduce), each rank keeping its own.
    r.kind = TaskKind::kAllReduce;
    // allreduce_bucket flattens the slices it is given into one contiguous copy (a view when
    // there is one). average_tensor merges adjacent slices of one owner, so the ipg bucket is
    // one slice unless it crosses a partition edge; without contiguous_gradients
    // (buffered_reduce_fallback) the slices are the bucket's gradient tensors. A communication
    // dtype other than the gradients' adds a cast copy. Both live during the all-reduce and
    // are gone before copy_grads_in_partition runs.
    const int64_t psz = CeilDiv(P_, 2 * int64_t{N_}) * 2;
    const bool copies = z.contiguous_gradients
                            ? z.reduce_scatter && N_ > 1 &&
                                  bucket_first_ / psz != (bucket_end_ - 1) / psz
                            : bucket_tensors_ > 1;
    const int64_t flat = (copies ? e_ * bucket_elems_ : 0) +
                         (comm_e_ != e_ ? comm_e_ * bucket_elems_ : 0);
    // Under overlap_comm average_tensor and copy_grads_in_partition run on reduction_stream:
    // these buffers come from that stream's pool of the caching allocator.
    if (flat > 0) {
      fx.push_back(OnSideStream(Alloc(flat, MemCategory::kCommBuffers)));
      fx.push_back(FreeNow(flat, MemCategory::kCommBuffers));
    }
    // copy_grads_in_partition allocates grads_in_partition (16-bit, the whole tensors that
    // overlap this rank's partition) at the first bucket that holds one of them: the step's
    // first flush for the rank class (as on the last rank, whose gradients come first); with
    // optimizer offload the owned slices go to the host instead.
    const bool holds_own = rank_ == kRankClass || N_ <= 1 ||
                           (bucket_first_ < grads_part_end_ && bucket_end_ > grads_part_first_);
    if (!partition_buffer_live_ && !p_.OffloadsOptimizer() && holds_own) {
      fx.push_back(OnSideStream(Alloc(e_ * grads_part_, MemCategory::kGradients)));
      partition_buffer_live_ = true;
      partition_buffer_micro_ = micro;
    } else if (partition_buffer_live_ && micro > partition_buffer_micro_ &&
               !second_partition_buffer_ && !p_.OffloadsOptimizer() && z.contiguous_gradients &&
               holds_own) {
      // Stage 2 with GAS > 1: independent_gradient_partition_epilogue kept the first
      // micro-step's buffer as averaged_gradients (views) and _release_ipg_buffers dropped
      // only the reference, so copy_grads_in_partition allocates a new one in each later
      // micro-step; its gradients are add_-ed into averaged_gradients at the epilogue and it
      // is freed there (zero_grad).
      fx.push_back(OnSideStream(Alloc(e_ * grads_part_, MemCategory::kGradients)));
      second_partition_buffer_ = true;
    }
  }
  TaskId reduce = g_.Add(r, {}, fx);
  for (TaskId d : bucket_producers_) g_.AddDep(d);
  {
    // The passes over the bucket besides the collective, with one rank too (0.14.5;
    // docs/deepspeed-facts.md "The passes over each bucket"), on the stream the reduction runs
    // on. Stages 1-2 (stage_1_and_2.py): average_tensor's `tensor.div_(world_size)` over the
    // whole bucket (reduce_scatter; the predivide path skips its multiplies at factor 1), and
    // copy_grads_in_partition's copy of each of this rank's gradients into grads_in_partition;
    // allreduce_and_scatter's `buf.copy_(synced)` copies a view onto itself, which PyTorch
    // skips. ZeRO-3 (stage3.py, coalesced_collectives.py): reduce_scatter_coalesced's torch.cat
    // of the interleaved chunks (skipped for one tensor the world size divides) and its
    // `div_(world_sz)`, then partition_grads' copy of each owned chunk into the gradient
    // partition (an add_ in later micro-steps). With optimizer offload the partition copy is the
    // host copies below instead.
    const int owned_tensors = static_cast<int>(CeilDiv(bucket_tensors_, N_));
    const bool to_host = p_.OffloadsOptimizer();
    Task post;
    post.kind = TaskKind::kGradCopy;
    post.resource = CommStream();
    post.micro_step = micro;
    post.index = r.index;
    if (Stage3()) {
      const bool cat = N_ > 1 || bucket_tensors_ > 1;
      post.bytes = ((cat ? 2.0 : 0.0) + 2.0) * comm_e_ * bucket_elems_ +
                   (to_host ? 0.0 : (micro == 0 ? 2.0 : 3.0) * e_ * owned);
      post.kernels = (cat ? 1 : 0) + 1 + (to_host ? 0 : owned_tensors);
    } else {
      post.bytes = (z.reduce_scatter ? 2.0 * e_ * bucket_elems_ : 0.0) +
                   (to_host ? 0.0 : 2.0 * e_ * owned);
      post.kernels = (z.reduce_scatter ? 1 : 0) + (to_host ? 0 : owned_tensors);
    }
    if (post.kernels > 0) reduce = g_.Add(post, {reduce}, {});
  }
  if (Zero12() && p_.OffloadsOptimizer() && gas_ > 1) {
    // Stages 1-2 with the optimizer on the CPU and GAS > 1: copy_grads_in_partition runs
    // async_accumulate_grad_in_cpu_via_gpu for each owned parameter of every flush
    // (docs/deepspeed-facts.md, "Gradient accumulation with the optimizer on the CPU"): after
    // the first micro-step of the window it copies the parameter's 16-bit host accumulator
    // (accumulated_grads_in_cpu, pinned with pin_memory) into temp_grad_buffer_for_gpu_offload
    // and add_s it into the gradient; before the boundary it copies the sum back to the host.
    // All on the stream the flush runs on, one parameter after the other. Stage 1 flushes
    // only at the boundary, so it pays one copy in and one add_ per step (its accumulator
    // stays zero). Owned elements stand for the whole tensors that overlap the partition.
    const bool pin = z.offload_optimizer.pin_memory;
    const int owned_tensors = static_cast<int>(CeilDiv(bucket_tensors_, N_));
    // The host issues them in the gradient hook that runs the flush, on the thread that
    // issues the backward's kernels: that backward task's host time (the next one's for a
    // flush its first gradient triggers; the epilogue's flush is timed by the add's dispatch).
    const int32_t ops = owned_tensors * ((micro > 0 ? 2 : 0) + (boundary ? 0 : 1));
    HookOps(hook, ops);
    if (micro > 0) {
      const Task up = HostCopy(true, micro, r.index, static_cast<double>(e_ * owned), pin);
      Task add;
      add.kind = TaskKind::kGradCopy;
      add.resource = CommStream();
      add.micro_step = micro;
      add.index = r.index;
      add.bytes = 3.0 * e_ * owned;
      add.kernels = std::max(1, owned_tensors);
      reduce = g_.Add(add, {g_.Add(up, {reduce}, {})}, {});
    }
    if (!boundary) {
      reduce = g_.Add(HostCopy(false, micro, r.index, static_cast<double>(e_ * owned), pin),
                      {reduce}, {});
    }
  }
  last_reduce_ = reduce;
  if (p_.OffloadsOptimizer() && (boundary || Stage3())) {
    const bool pin = z.offload_optimizer.pin_memory;
    // ZeRO-3 with the optimizer on NVMe: partition_grads swaps each (swappable) sub-group's
    // fp32 gradients out to the drive at the boundary instead of copying them into host memory.
    const bool swap_grads = Stage3() && z.offload_optimizer.device == OffloadDevice::kNvme;
    const int owned_tensors = static_cast<int>(CeilDiv(bucket_tensors_, N_));
    TaskId before = reduce;
    if (Stage3()) {
      // partition_grads, per parameter: the 16-bit grad partition is copied into the host
      // grad_partitions_flat_buffer (non_blocking) and back to the GPU
      // (`grad_buffer.to(device, non_blocking=True)`) every micro-step.
      const double bytes = static_cast<double>(acc_ * owned);
      before = g_.Add(HostCopy(true, micro, r.index, bytes, pin),
                      {g_.Add(HostCopy(false, micro, r.index, bytes, pin), {reduce}, {})}, {});
    }
    TaskId check = -1;
    if (boundary) {
      // Per owned parameter on the reducing stream, issued by the host one parameter after the
      // other. Stage 1/2 (copy_grads_in_partition): set_norm_for_param_grad_in_gpu
      // (.double().norm(2)), update_overflow_tracker_for_param_grad (_has_inf_or_nan: .float(),
      // isnan, isinf, logical_or, .float(), .max(), then `if tensor:` reads it on the host) and
      // async_inplace_copy_grad_to_fp32_buffer_from_gpu (.float() and the copy): 11 host ops,
      // about 52 bytes of HBM traffic per element. Stage 3 (partition_grads): the copy into the
      // host gradient buffer and back, _constant_buffered_norm2 (.double().norm(2)**2, **0.5),
      // fp32_grad_tensor.copy_ and record_stream: 9 host ops, about 18 B/element (the copy's
      // fp32 cast runs on the host, below).
      // The host waits once per tensor (stage 1/2: the check's read, which also waits for the
      // previous tensor's copy on the same stream; stage 3: the blocking cast copy, which waits
      // for that tensor's copies and kernels), so this task is that loop: per tensor the longer
      // of its host ops and the work they queue (the copies the tasks below also carry, on
      // their engines), class by class (Task::host_loop).
      Task c;
      c.kind = TaskKind::kGradCopy;
      c.resource = CommStream();
      c.micro_step = micro;
      c.index = r.index;
      c.bytes = (Stage3() ? 18.0 : 52.0) * owned;
      c.kernels = (Stage3() ? 9 : 11) * std::max(1, owned_tensors);
      c.pinned = pin;
      c.cast_copies = bucket_casts_.n;
      c.cast_copy_bytes = bucket_casts_.bytes;
      if (Stage3() && swap_grads) {
        // The optimizer on NVMe (a swappable sub-group): instead of the blocking cast copy,
        // grad_buffer.float() on the GPU (a 4-byte copy of each owned gradient, kept in a list
        // until swap_out_gradients at the end of partition_grads). Nothing in the loop waits
        // for the GPU, so it is plain issued work.
        c.bytes = 24.0 * owned;
        c.cast_copies = {};
        c.cast_copy_bytes = {};
        check = g_.Add(c, {reduce}, {Alloc(4 * owned, MemCategory::kTemporaries)});
      } else if (Stage3()) {
        c.host_loop = HostLoop::kZero3PartitionGrads;
        c.loop_d2h_bytes = c.loop_h2d_bytes = static_cast<double>(acc_ * owned);
        c.host_fault_bytes = static_cast<double>(e_ * bucket_casts_.fresh);
      } else {
        // Each rank's loop takes the tensors of its own partition.
        c.host_loop = HostLoop::kZero12OverflowCheck;
        c.loop_d2h_bytes = 4.0 * owned;
        for (int k = 0; k < Task::kCastCopyClasses; ++k) {
          c.cast_copies[k] = static_cast<int32_t>(CeilDiv(c.cast_copies[k], N_));
          c.cast_copy_bytes[k] /= N_;
        }
      }
      if (check < 0) check = g_.Add(c, {reduce}, {});
    }
    // The owned slice goes to the host as fp32. Stages 1-2 (every boundary) cast it on the GPU
    // and copy it into the pinned fp32 buffer with non_blocking. ZeRO-3 (at the boundary only)
    // runs a blocking fp32_grad_tensor.copy_(grad_buffer) from the 16-bit GPU buffer into the
    // CPU fp32 partition, which PyTorch does as a same-dtype copy into a pageable temporary and
    // a conversion on the CPU (aten/src/ATen/native/cuda/Copy.cu: "type conversions are
    // performed on the CPU" unless non_blocking; docs/deepspeed-facts.md, CPU offload).
    TaskId d2h = before;
    if (Stage3() && boundary && swap_grads) {
      // swap_out_gradients: first it waits for the previous bucket's writes
      // (_flush_gradient_swapper), then each gradient is copied into the swapper's pinned
      // buffers (a blocking same-dtype copy_) and written to the drive asynchronously
      // (AsyncTensorSwapper); the fp32 GPU copies are dropped with the list.
      Task d;
      d.kind = TaskKind::kCopyD2H;
      d.resource = Resource::kD2H;
      d.micro_step = micro;
      d.index = r.index;
      d.bytes = 4.0 * owned;
      d.pinned = true;
      d2h = g_.Add(d, {before, check, last_grad_swap_},
                   {FreeNow(4 * owned, MemCategory::kTemporaries)});
      Task w = d;
      w.kind = TaskKind::kNvmeWrite;
      w.resource = Resource::kNvme;
      last_grad_swap_ = g_.Add(w, {d2h}, {});
    } else if (!Stage3() || boundary) {
      Task d;
      d.kind = TaskKind::kCopyD2H;
      d.resource = Resource::kD2H;
      d.micro_step = micro;
      d.index = r.index;
      EffectList fx;
      if (Stage3()) {
        d.bytes = static_cast<double>(e_ * owned);
        d.pinned = false;
        d.host_convert_bytes = static_cast<double>((e_ + 4) * owned);
        d.host_fault_bytes = static_cast<double>(e_ * bucket_casts_.fresh);
        d.cast_copies = bucket_casts_.n;
        d.cast_copy_bytes = bucket_casts_.bytes;
        fx = {Alloc(e_ * owned, MemCategory::kTemporaries, false, MemSpace::kPageableHost),
              Free(e_ * owned, MemCategory::kTemporaries, true, MemSpace::kPageableHost)};
      } else {
        d.bytes = 4.0 * owned;
        d.pinned = pin;
        fx = {Alloc(4 * owned, MemCategory::kTemporaries),
              Free(4 * owned, MemCategory::kTemporaries, true)};
      }
      d2h = g_.Add(d, {before}, fx);
    }
    last_d2h_ = d2h;
    if (boundary) {
      // The host waits for each parameter's copy before it goes on (stage 1/2: the overflow
      // check's `if tensor:`; stage 3: the blocking fp32_grad_tensor.copy_), so nothing after
      // this flush is issued before the copies are done: the next compute waits for them.
      // The host issues one parameter's kernels while the previous one's copy runs, so the
      // checks and the copies overlap each other (a zero-length join on the compute stream).
      Task join;
      join.kind = TaskKind::kGradCopy;
      join.micro_step = micro;
      join.kernels = 0;
      last_compute_ = g_.Add(join, {check, d2h, last_compute_}, {});
    }
  }
  bucket_elems_ = 0;
  bucket_tensors_ = 0;
  bucket_casts_ = {};
  bucket_producers_.clear();
}

void Builder::EndOfBackward(int micro) {
  current_backward_ = -1;
  const ZeroConfig& z = p_.zero;
  const int L = static_cast<int>(w_.layers.size());
  const bool boundary = micro == gas_ - 1;
  if (ReducesInBackward(micro)) FlushBucket(micro);
  if (Zero12() && !HooksDuringBackward() && boundary) {
    // Stage 1 without overlap_comm: after the last backward, reduce_gradients() walks every
    // parameter through the same bucket path.
    for (int l = L - 1; l >= 0; --l) {
      if (w_.layers[l].params > 0) AddToBucket(micro, l, last_compute_);
    }
    FlushBucket(micro);
  }
  if (Zero12() && z.contiguous_gradients) {
    // _release_ipg_buffers at the end of the epilogue; then zero_grad frees a later
    // micro-step's grads_in_partition (its gradients were added into the first one).
    Task t;
    t.kind = TaskKind::kGradCopy;
    t.micro_step = micro;
    t.kernels = 1;
    EffectList fx = {
        Free((f_.overlap_comm ? 2 : 1) * e_ * rbs_, MemCategory::kCommBuffers, false)};
    if (retained_live_ > 0) {
      fx.push_back(Free(e_ * retained_live_, MemCategory::kGradients));
      retained_live_ = 0;
    }
    if (second_partition_buffer_) {
      // Stage 2, a micro-step after the window's first: the epilogue adds this micro-step's
      // partition into averaged_gradients tensor by tensor (get_flat_partition's views, then
      // `accumulated_grad.add_(new_avg_grad)`: read both, write one, in the accumulation dtype).
      t.bytes = 3.0 * acc_ * part_;
      t.kernels += static_cast<int>(CeilDiv(param_tensors_, N_));
      fx.push_back(Free(e_ * grads_part_, MemCategory::kGradients, false));
      second_partition_buffer_ = false;
    }
    last_compute_ = g_.Add(t, {last_compute_, last_reduce_}, fx);
  }
  if (Stage0Like() && boundary && N_ > 1 && f_.wrapper != OptimizerWrapper::kBf16Optimizer) {
    // FP16_Optimizer / basic optimizer: engine.allreduce_gradients in buckets of flattened
    // 16-bit grads.
    const int64_t bucket = std::min<int64_t>(P_, kEngineAllReduceBucket);
    Task r = EngineAllReduce(micro, e_ * P_);
    r.kernels = 2 * param_tensors_;
    last_compute_ = g_.Add(r, {last_compute_},
                           {Alloc(e_ * bucket, MemCategory::kCommBuffers),
                            Free(e_ * bucket, MemCategory::kCommBuffers)});
  }
  if (f_.wrapper == OptimizerWrapper::kBf16Optimizer) {
    // BF16_Optimizer.backward() after autograd: update_hp_grads adds every 16-bit gradient into
    // its fp32 buffer, hp.add_(lp.grad.to(fp32)): per tensor a widening copy (a temporary of the
    // tensor's fp32 size) and an fp32 add (12 B/element). Each engine.backward() does it, so
    // every micro-step. Its host loop runs behind the backward's queued kernels, so the GPU's
    // passes are what it costs (docs/stack-costs.md section 6).
    Task u;
    u.kind = TaskKind::kGradCopy;
    u.micro_step = micro;
    u.cast_up_bytes = acc_ > e_ ? static_cast<double>(e_ + acc_) * P_ : 0.0;
    u.bytes = u.cast_up_bytes + 3.0 * acc_ * P_;
    u.kernels = 2 * param_tensors_;
    last_compute_ = g_.Add(u, {last_compute_},
                           {Alloc(acc_ * largest_param_, MemCategory::kTemporaries),
                            FreeNow(acc_ * largest_param_, MemCategory::kTemporaries)});
    if (boundary) {
      // engine.allreduce_gradients at the boundary (also with one rank): the fp32 flat buffer
      // is flattened (a view: one tensor per group), cast to the communication dtype,
      // all-reduced, and copied back with a widening copy.
      Task c;
      c.kind = TaskKind::kGradCopy;
      c.micro_step = micro;
      if (comm_e_ != acc_) {
        c.cast_down_bytes = static_cast<double>(acc_ + comm_e_) * P_;
        c.cast_up_bytes = static_cast<double>(comm_e_ + acc_) * P_;
        c.bytes = c.cast_down_bytes + c.cast_up_bytes;
      }
      c.kernels = 2;
      EffectList fx = {Alloc(comm_e_ * P_, MemCategory::kCommBuffers)};
      if (N_ > 1) {
        last_compute_ = g_.Add(EngineAllReduce(micro, comm_e_ * P_), {last_compute_}, {});
      }
      fx.push_back(FreeNow(comm_e_ * P_, MemCategory::kCommBuffers));
      last_compute_ = g_.Add(c, {last_compute_}, fx);
    }
  }
}

// engine.allreduce_gradients' all-reduce over the data-parallel ranks, |bytes| per rank
// (stage 0: the FP16/basic optimizer's 16-bit buckets, BF16_Optimizer's cast fp32 buffer).
Task Builder::EngineAllReduce(int micro, int64_t bytes) const {
  Task r;
  r.kind = TaskKind::kAllReduce;
  r.micro_step = micro;
  r.bytes = static_cast<double>(bytes);
  r.ranks = N_;
  r.inter_node = inter_node_;
  return r;
}

void Builder::OptimizerStep() {
  const ZeroConfig& z = p_.zero;
  // Bytes a GPU optimizer step moves per element: FusedAdam reads p, g, m, v and writes p, m, v
  // (28 B, its weight decay inside the kernel). torch's foreach Adam/AdamW (torch_adam;
  // _multi_tensor_adam in PyTorch 2.11): lerp_ of m toward g (12), mul_ and addcmul_ of v (8 +
  // 12), sqrt of v into an fp32 temporary of the parameter size (8), div_ and add_ on it (8 + 8),
  // addcdiv_ into p (16): 72 B; a weight decay adds AdamW's mul_ over p (8) or Adam's coupled
  // foreach_add into a new gradient (12), freed before the temporary. DeepSpeed passes the
  // config's params to torch.optim, whose AdamW decays by 0.01 when none is given; a
  // weight_decay the config leaves to the HF Trainer ("auto") is unknown here and priced as
  // torch's default (docs/deepspeed-facts.md, "torch_adam").
  const double adam_bytes = p_.torch_adam ? TorchAdamBytesPerElement(p_) : 28.0;
  // FusedAdam's kernel on a flat tensor of more than 2^31 - 1 elements does nothing in
  // DeepSpeed 0.14.5 (StepFacts::FusedAdamSkipsUpdate): no Adam traffic for it. Stages 0-2
  // step one such tensor; stage 3 one per sub-group (below).
  const auto adam_bytes_for = [&](int64_t flat_numel) {
    return f_.fused_adam_flat_numel > 0 && flat_numel > StepFacts::kFusedAdamMaxNumel ? 0.0
                                                                                      : adam_bytes;
  };
  const int64_t adam_temp = p_.torch_adam ? 4 : 0;
  const int64_t held = output_bytes_;  // the last micro-step's logits, dropped after the step
  Task t;
  t.kind = TaskKind::kGpuOptimizer;
  t.torch_adam = p_.torch_adam;
  EffectList fx;
  switch (f_.wrapper) {
    case OptimizerWrapper::kBf16Optimizer: {
      // BF16_Optimizer.step(): the per-tensor norm loop over the fp32 gradients (a read of
      // each, plus a few scalar kernels), the clip loop when gradient_clipping > 0 (t.mul_ on
      // every gradient: 8 B/element; counted as run, the planner's conservative case), then
      // FusedAdam on the fp32 partition, the copy back to 16 bits and clear_hp_grads' fill.
      // The step synchronises on the norm twice (the positive-norm assert and the clip test),
      // so Adam, the copy back and the fill run after the host's loops, not under them.
      // (update_hp_grads and the gradient all-reduce ran in the backward: EndOfBackward.)
      const bool clip = p_.gradient_clipping > 0;
      t.adam_bytes = adam_bytes_for(part_) * part_;
      t.after_sync_bytes = t.adam_bytes + (acc_ + e_) * part_ + acc_ * P_;
      t.bytes = acc_ * P_ + (clip ? 2.0 * acc_ * P_ : 0.0) + t.after_sync_bytes;
      t.elements = static_cast<double>(part_);
      t.kernels = (clip ? 5 : 4) * param_tensors_ + 30;
      t.step_param_tensors = static_cast<int32_t>(param_tensors_);
      t.step_stage = 0;
      t.step_clip = clip;
      fx = {Alloc(adam_temp * part_, MemCategory::kTemporaries),
            FreeNow(adam_temp * part_, MemCategory::kTemporaries)};
      last_compute_ = g_.Add(t, {last_compute_}, fx);
      break;
    }
    case OptimizerWrapper::kFp16Optimizer:
    case OptimizerWrapper::kBasic: {
      const bool mixed = f_.wrapper == OptimizerWrapper::kFp16Optimizer;
      t.adam_bytes = adam_bytes_for(mixed ? P_ : 0) * P_;
      t.bytes = (mixed ? (e_ + 8.0) * P_ : 0.0) + t.adam_bytes + e_ * P_;
      t.elements = static_cast<double>(P_);
      t.kernels = 2 * param_tensors_ + 30;
      if (mixed) fx.push_back(Alloc(4 * P_, MemCategory::kTemporaries));
      fx.push_back(Alloc(adam_temp * P_, MemCategory::kTemporaries));
      fx.push_back(FreeNow(adam_temp * P_, MemCategory::kTemporaries));
      if (mixed) fx.push_back(FreeNow(4 * P_, MemCategory::kTemporaries));
      fx.push_back(FreeNow(e_ * P_, MemCategory::kGradients));
      last_compute_ = g_.Add(t, {last_compute_}, fx);
      break;
    }
    case OptimizerWrapper::kZero12: {
      if (!p_.OffloadsOptimizer()) {
        // Norm per gradient (fp64 temporaries), then single_grad_partition =
        // flatten(averaged_gradients).to(fp32): a 16-bit flat copy and its fp32 cast;
        // grads_in_partition is freed; AdamW with its temporary; the fp32 grad is dropped;
        // fp32 -> 16-bit copy.
        // Per element: the norm's fp64 copy (e + 8) and its read (8); the flatten (2e) and the
        // cast to fp32 (e + 4, none in fp32); unscale_and_clip_grads' mul_ (8, always run);
        // Adam; the copy back (4 + e).
        const double cast32 = e_ < 4 ? e_ + 4.0 : 0.0;
        t.fp64_cast_bytes = (e_ + 8.0) * part_;
        t.fp64_norm_bytes = 8.0 * part_;
        t.cast_up_bytes = cast32 * part_;
        t.adam_bytes = adam_bytes_for(part_) * part_;
        t.bytes = t.fp64_cast_bytes + t.fp64_norm_bytes + t.cast_up_bytes + t.adam_bytes +
                  (2.0 * e_ + 8.0 + 4.0 + e_) * part_;
        t.elements = static_cast<double>(part_);
        t.kernels = 2 * param_tensors_ / N_ + 30;
        t.step_param_tensors = static_cast<int32_t>(CeilDiv(param_tensors_, N_));
        t.step_stage = static_cast<int8_t>(z.stage);
        fx = {Alloc(8 * largest_param_, MemCategory::kTemporaries),
              FreeNow(8 * largest_param_, MemCategory::kTemporaries),
              Alloc(e_ * part_, MemCategory::kTemporaries),
              Alloc(4 * part_, MemCategory::kGradients),
              FreeNow(e_ * part_, MemCategory::kTemporaries),
              FreeNow(e_ * grads_part_, MemCategory::kGradients),
              Alloc(adam_temp * part_, MemCategory::kTemporaries),
              FreeNow(adam_temp * part_, MemCategory::kTemporaries),
              FreeNow(4 * part_, MemCategory::kGradients)};
        last_compute_ = g_.Add(t, {last_compute_, last_reduce_}, fx);
        // _optimizer_step: Adam's lazy states come once the gradients are freed.
        PlaceLazyStates(0, g_.lazy_gpu_states.size(), last_compute_, fx, 6);
      } else {
        // scaled_global_norm -> complete_grad_norm_calculation_for_cpu_offload: one
        // `param_norm.item()` (a device read) per owned parameter, on the host.
        Task norm;
        norm.kind = TaskKind::kGpuOptimizer;
        norm.kernels = static_cast<int>(CeilDiv(param_tensors_, N_));
        const TaskId norms = g_.Add(norm, {last_compute_, last_reduce_}, {});
        // CPU Adam on the host partition once the gradient copies are in, after
        // unscale_and_clip_grads' mul_ over the fp32 grad partition on the host (8 bytes per
        // element read and written); the updated fp32 partition comes back to the GPU (a
        // transient fp32 copy) into the 16-bit params.
        Task c;
        c.kind = TaskKind::kCpuOptimizer;
        c.resource = Resource::kCpu;
        c.elements = static_cast<double>(part_);
        c.bytes = 8.0 * part_;
        c.kernels = 0;
        g_.Add(c, {norms, last_reduce_}, {});
        g_.AddDep(last_d2h_);
        const TaskId cpu = g_.size() - 1;
        Task h;
        h.kind = TaskKind::kCopyH2D;
        h.resource = Resource::kH2D;
        h.bytes = 4.0 * part_;
        const TaskId up = g_.Add(h, {cpu}, {Alloc(4 * part_, MemCategory::kTemporaries)});
        Task cast;
        cast.kind = TaskKind::kGpuOptimizer;
        cast.bytes = (4.0 + e_) * part_;
        cast.kernels = 2;
        last_compute_ =
            g_.Add(cast, {up, last_compute_}, {FreeNow(4 * part_, MemCategory::kTemporaries)});
      }
      partition_buffer_live_ = false;
      // all_gather_dp_groups: one all_gather_into_tensor of the 16-bit flat buffer.
      if (N_ > 1) {
        Task a;
        a.kind = TaskKind::kAllGather;
        a.bytes = static_cast<double>(e_ * part_ * N_);
        a.ranks = N_;
        a.inter_node = inter_node_;
        last_compute_ = g_.Add(a, {last_compute_}, {});
      }
      break;
    }
    case OptimizerWrapper::kZero3: {
      const bool off = p_.OffloadsOptimizer();
      const bool nvme = z.offload_optimizer.device == OffloadDevice::kNvme;
      // _get_norm_groups, per parameter on the host: get_grad_norm_direct (g.to(device),
      // .double(), .norm(2): 3 ops, 18 B/element) or, with optimizer offload,
      // complete_grad_norm_calculation_for_cpu_offload (`total_norm += param_norm**2`: 2 ops).
      // At stage 3 every rank holds a shard of every parameter, and the step's loops (these,
      // the sub-groups' and _post_step's) walk fp16_groups, all of them, on every rank: the
      // per-tensor host work does not shrink with N, only the shards' kernels do.
      Task norm;
      norm.kind = TaskKind::kGpuOptimizer;
      norm.kernels = (off ? 2 : 3) * param_tensors_;
      if (!off) {
        norm.fp64_cast_bytes = (acc_ + 8.0) * part_;
        norm.fp64_norm_bytes = 8.0 * part_;
        norm.bytes = norm.fp64_cast_bytes + norm.fp64_norm_bytes;
        norm.step_param_tensors = param_tensors_;
        norm.step_stage = 3;
      }
      // get_grad_norm_direct's `g.double().norm(2)` makes an fp64 copy of each owned gradient
      // partition, freed after its norm: the largest one (the embedding's, as a rule) is the
      // step's transient peak. 8 bytes per element; 8.2 GB for bloom-7b1's embedding at one GPU.
      EffectList norm_fx;
      if (!off) {
        const int64_t fp64 = 8 * CeilDiv(largest_param_, N_);
        norm_fx = {Alloc(fp64, MemCategory::kTemporaries),
                   FreeNow(fp64, MemCategory::kTemporaries)};
      }
      int64_t remaining = part_;
      TaskId prev = last_compute_ = g_.Add(norm, {last_compute_, last_reduce_}, norm_fx);
      for (int64_t sg = 0; sg < f_.subgroups; ++sg) {
        const int64_t n = std::min(remaining, subgroup_sizes_[sg]);
        remaining -= n;
        if (!off || sg >= cpu_subgroups_) {
          // flatten(grads).to(fp32): a 16-bit then an fp32 copy of the sub-group;
          // unscale_and_clip_grads' mul_ on the fp32 gradient (always run); AdamW; the fp32
          // master is copied into the 16-bit partition.
          Task s;
          s.kind = TaskKind::kGpuOptimizer;
          s.index = static_cast<int>(sg);
          s.cast_up_bytes = (acc_ < 4 ? acc_ + 4.0 : 0.0) * n;
          s.adam_bytes = adam_bytes_for(n) * n;
          s.torch_adam = p_.torch_adam;
          s.bytes = 2.0 * acc_ * n + s.cast_up_bytes + 8.0 * n + s.adam_bytes + (4.0 + e_) * n;
          s.elements = static_cast<double>(n);
          s.kernels = 30;
          // A GPU sub-group of a partial offload keeps its fp32 gradient buffer (Initial).
          const int64_t fp32_grad = off ? 0 : 4 * n;
          const EffectList sfx = {
              Alloc(acc_ * n, MemCategory::kTemporaries), Alloc(fp32_grad, MemCategory::kGradients),
              FreeNow(acc_ * n, MemCategory::kTemporaries),
              Alloc(adam_temp * n, MemCategory::kTemporaries),
              FreeNow(adam_temp * n, MemCategory::kTemporaries),
              FreeNow(fp32_grad, MemCategory::kGradients)};
          prev = last_compute_ = g_.Add(s, {prev, last_reduce_}, sfx);
          // Adam's lazy states for this sub-group come in its _optimizer_step, after the fp32
          // gradient is made (the optimizer steps one sub-group at a time).
          if (!off) {
            const size_t per = static_cast<size_t>(state_bytes_ / 4);
            PlaceLazyStates(static_cast<size_t>(sg) * per, per, last_compute_, sfx, 3);
          }
          continue;
        }
        TaskId read = -1;
        if (nvme) {
          // Swap in fp32 master, optimizer states and gradients of the sub-group.
          Task r;
          r.kind = TaskKind::kNvmeRead;
          r.resource = Resource::kNvme;
          r.index = static_cast<int>(sg);
          r.bytes = (8.0 + state_bytes_) * n;
          read = g_.Add(r, {prev, last_grad_swap_}, {});
        }
        // unscale_and_clip_grads: mul_ over the sub-group's fp32 grad on the host (8 B per
        // element); DeepSpeedCPUAdam; _reassign_or_swap_out_partitioned_parameters:
        // fp16_partitioned_groups_flat.copy_(fp32 flat), a host cast (4 B read, 2 B written;
        // PyTorch casts on the source's device before a cross-device copy).
        Task c;
        c.kind = TaskKind::kCpuOptimizer;
        c.resource = Resource::kCpu;
        c.index = static_cast<int>(sg);
        c.elements = static_cast<double>(n);
        c.bytes = (8.0 + 4.0 + e_) * n;
        c.kernels = 0;
        // With the parameters on the GPU the cast writes a fresh pageable temporary (below):
        // the cast's threads fault every page of it in.
        // With malloc held to its heap (Plan::malloc_heap) its pages stay mapped between steps.
        const bool fresh_cast = sg < param_cpu_subgroups_ && !p_.OffloadsParams();
        if (fresh_cast && !p_.malloc_heap) c.host_fault_bytes = static_cast<double>(e_ * n);
        g_.Add(c, {prev, read, last_reduce_}, {});
        g_.AddDep(last_d2h_);
        const TaskId cpu = g_.size() - 1;
        if (nvme) {
          Task wr;
          wr.kind = TaskKind::kNvmeWrite;
          wr.resource = Resource::kNvme;
          wr.index = static_cast<int>(sg);
          wr.bytes = (4.0 + state_bytes_) * n;
          g_.Add(wr, {cpu}, {});
        }
        if (sg >= param_cpu_subgroups_) {
          // A sub-group whose 16-bit partitions live on NVMe: _reassign_or_swap_out_partitioned_
          // parameters casts the updated fp32 into the swapper's buffers and writes them
          // (_partitioned_params_swap_out -> swap_out_and_release, blocking).
          Task wp;
          wp.kind = TaskKind::kNvmeWrite;
          wp.resource = Resource::kNvme;
          wp.index = static_cast<int>(sg);
          wp.bytes = static_cast<double>(e_ * n);
          prev = g_.Add(wp, {cpu}, {});
        } else if (fresh_cast) {
          // Updated 16-bit partition back to the GPU: the blocking copy_ from the fp32 host
          // partition into the GPU's 16-bit one casts on the host into a pageable temporary
          // (the cast and its page faults are in the CPU task) and copies that (Copy.cu). The
          // temporary is mapped afresh each step (a sub-group is far above 32 MiB).
          Task h;
          h.kind = TaskKind::kCopyH2D;
          h.resource = Resource::kH2D;
          h.index = static_cast<int>(sg);
          h.bytes = static_cast<double>(e_ * n);
          h.pinned = false;
          prev = g_.Add(h, {cpu}, {Alloc(e_ * n, MemCategory::kTemporaries, false,
                                         MemSpace::kPageableHost),
                                   Free(e_ * n, MemCategory::kTemporaries, true,
                                        MemSpace::kPageableHost)});
        } else {
          prev = cpu;
        }
      }
      last_compute_ = prev;
      // Persistent parameters are all-gathered again after the step.
      if (N_ > 1 && f_.persistent_numel > 0) {
        Task a;
        a.kind = TaskKind::kAllGather;
        a.bytes = static_cast<double>(e_ * f_.persistent_numel);
        a.ranks = N_;
        a.inter_node = inter_node_;
        a.kernels = 4;
        last_compute_ = g_.Add(a, {last_compute_}, {});
      }
      break;
    }
  }
  if (f_.wrapper == OptimizerWrapper::kBf16Optimizer && N_ > 1) {
    Task a;
    a.kind = TaskKind::kAllGather;
    a.bytes = static_cast<double>(e_ * part_ * N_);
    a.ranks = N_;
    a.inter_node = inter_node_;
    last_compute_ = g_.Add(a, {last_compute_}, {});
  }
  // The caller drops the model output (the logits) after the step.
  if (held > 0) {
    Task d;
    d.kind = TaskKind::kGradCopy;
    d.kernels = 0;
    last_compute_ = g_.Add(d, {last_compute_}, {Free(held, MemCategory::kActivations, false)});
  }
}

}  // namespace

Result<BuiltStep> BuildStepGraph(const Workload& w, const std::vector<LayerParams>& params,
                                 const Plan& plan, int64_t workspace_bytes, StepGraphForm form,
                                 int rank) {
  BuiltStep out;
  DSPLAN_RETURN_IF_ERROR(BuildStepGraphInto(w, params, plan, workspace_bytes, form, &out, rank));
  return out;
}

Status BuildStepGraphInto(const Workload& w, const std::vector<LayerParams>& params,
                          const Plan& plan, int64_t workspace_bytes, StepGraphForm form,
                          BuiltStep* out, int rank) {
  out->graph.Clear();
  out->facts = StepFacts{};
  DSPLAN_RETURN_IF_ERROR(ValidatePlan(plan));
  if (params.size() != w.layers.size()) {
    return Status::Internal("BuildStepGraph: layer parameter facts do not match the workload");
  }
  if (w.shape.micro_batch != plan.micro_batch) {
    return Status::Internal(fmt::format(
        "BuildStepGraph: workload micro-batch {} differs from the plan's {}",
        w.shape.micro_batch, plan.micro_batch));
  }
  Builder b(w, params, plan, *out, workspace_bytes, form, rank);
  return b.Build();
}

}  // namespace dsplan
