#include "simulator/step_builder.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

namespace dsplan {

std::vector<LayerParams> ComputeLayerParams(const Workload& w, int64_t persistence_threshold) {
  std::vector<LayerParams> out(w.layers.size());
  for (size_t i = 0; i < w.layers.size(); ++i) out[i].numel = w.layers[i].params;
  for (const TensorSpec& t : w.tensors) {
    if (t.layer < 0 || t.layer >= static_cast<int>(out.size())) continue;
    LayerParams& lp = out[t.layer];
    if (t.category == TensorCategory::kParameter) {
      ++lp.tensors;
      lp.largest = std::max(lp.largest, t.numel);
      if (t.numel <= persistence_threshold) lp.persistent_numel += t.numel;
    } else {
      lp.largest_saved_bytes = std::max(lp.largest_saved_bytes, t.bytes);
    }
  }
  return out;
}

namespace {

int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

MemEffect Alloc(int64_t bytes, MemCategory c, bool at_end = false,
                MemSpace s = MemSpace::kGpu) {
  return MemEffect{bytes, s, c, at_end};
}
MemEffect Free(int64_t bytes, MemCategory c, bool at_end = true, MemSpace s = MemSpace::kGpu) {
  return MemEffect{-bytes, s, c, at_end};
}

// Builds one rank's step. Member functions follow DeepSpeed's phases: model states in place
// (Initial), micro-steps (Forward, Backward with the gradient hooks), the accumulation boundary
// (reduction epilogue), the optimizer step and the post-step parameter gather.
class Builder {
 public:
  Builder(const Workload& w, const std::vector<LayerParams>& lp, const Plan& p, BuiltStep& out)
      : w_(w), lp_(lp), p_(p), g_(out.graph), f_(out.facts) {}

  Status Build();

 private:
  // --- derived plan facts ---
  bool Stage3() const { return p_.zero.stage == 3; }
  bool Zero12() const { return f_.wrapper == OptimizerWrapper::kZero12; }
  bool HooksDuringBackward() const {
    // stage_1_and_2: hooks only for partitioned gradients (stage 2) or overlap_comm; stage 3
    // always reduces in hooks.
    return Stage3() || (Zero12() && (p_.zero.stage == 2 || f_.overlap_comm));
  }
  Resource CommStream() const { return f_.overlap_comm ? Resource::kComm : Resource::kCompute; }
  MemSpace HostSpace(bool pinned) const {
    return pinned ? MemSpace::kPinnedHost : MemSpace::kPageableHost;
  }
  void Init(MemSpace s, MemCategory c, int64_t bytes) {
    g_.initial[static_cast<int>(s)][static_cast<int>(c)] += bytes;
  }

  void Initial();
  void MicroStep(int micro);
  void Forward(int micro);
  void Backward(int micro);
  // Adds layer |l|'s gradients (|elements|) to the bucket; flushes it first when full.
  void AddToBucket(int micro, int l, int64_t elements, TaskId produced);
  void FlushBucket(int micro, bool last);
  void Boundary();
  void OptimizerStep();

  TaskId Gather(int micro, int l, bool backward);

  const Workload& w_;
  const std::vector<LayerParams>& lp_;
  const Plan& p_;
  StepGraph& g_;
  StepFacts& f_;

  int N_ = 1;
  int64_t P_ = 0;          // trainable elements
  int64_t part_ = 0;       // partition elements per rank
  int64_t e_ = 2;          // model dtype bytes
  int64_t acc_ = 2;        // gradient accumulation dtype bytes
  int64_t comm_e_ = 2;     // communication dtype bytes
  int64_t state_bytes_ = 8;  // optimizer state bytes per element
  int64_t rbs_ = 0;
  int gas_ = 1;
  bool inter_node_ = false;

  // Running state while building.
  TaskId last_compute_ = -1;     // the last task on the compute stream (program order)
  TaskId last_reduce_ = -1;      // the last gradient reduction
  int64_t bucket_elems_ = 0;     // elements in the open ipg bucket
  std::vector<TaskId> bucket_producers_;
  int bucket_index_ = 0;
  bool partition_buffer_live_ = false;  // stage 1/2 grads_in_partition allocated this step
  std::vector<char> gathered_;   // ZeRO-3: layer's params are gathered now
  std::vector<TaskId> gather_task_;
  std::vector<int64_t> retained_; // ZeRO-3: forward gathers kept for backward (reuse distance)
  std::vector<TaskId> d2h_tasks_;
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
  f_.wrapper = p_.Wrapper();
  f_.params = P_;
  f_.partition_numel = part_;
  f_.overlap_comm = z.OverlapComm();
  if (Stage3()) {
    // Sub-groups: partitions are appended until the running numel reaches sub_group_size.
    f_.subgroups = std::max<int64_t>(1, CeilDiv(part_, z.sub_group_size));
    f_.largest_subgroup = std::min(part_, z.sub_group_size);
    int64_t persistent = 0;
    for (const LayerParams& l : lp_) persistent += l.persistent_numel;
    f_.persistent_numel = std::min(persistent, z.stage3_model_persistence_threshold);
  } else {
    f_.largest_subgroup = part_;
  }
  gathered_.assign(w_.layers.size(), 0);
  gather_task_.assign(w_.layers.size(), -1);
  retained_.assign(w_.layers.size(), 0);
  g_.Clear();
  g_.Reserve(w_.layers.size() * 4 * gas_ + 64);
  Initial();
  for (int micro = 0; micro < gas_; ++micro) MicroStep(micro);
  OptimizerStep();
  return Status();
}

// Model states in place at the start of a steady-state step (after the first step, so the
// optimizer states exist).
void Builder::Initial() {
  const ZeroConfig& z = p_.zero;
  const int64_t states = state_bytes_;
  switch (f_.wrapper) {
    case OptimizerWrapper::kBf16Optimizer:
      // bf16 params, fp32 master partition, the full fp32 gradient accumulation buffer and the
      // optimizer states of the partition.
      Init(MemSpace::kGpu, MemCategory::kParams16, e_ * P_);
      Init(MemSpace::kGpu, MemCategory::kMaster, 4 * part_);
      Init(MemSpace::kGpu, MemCategory::kGradients, acc_ * P_);
      Init(MemSpace::kGpu, MemCategory::kOptimizerStates, states * part_);
      break;
    case OptimizerWrapper::kFp16Optimizer:
      Init(MemSpace::kGpu, MemCategory::kParams16, e_ * P_);
      Init(MemSpace::kGpu, MemCategory::kMaster, 4 * P_);
      Init(MemSpace::kGpu, MemCategory::kOptimizerStates, states * P_);
      break;
    case OptimizerWrapper::kBasic:
      Init(MemSpace::kGpu, MemCategory::kParams16, e_ * P_);
      Init(MemSpace::kGpu, MemCategory::kOptimizerStates,
           (p_.precision == Precision::kFp32 ? states : states / 2) * P_);
      break;
    case OptimizerWrapper::kZero12: {
      Init(MemSpace::kGpu, MemCategory::kParams16, e_ * P_);
      if (!p_.OffloadsOptimizer()) {
        Init(MemSpace::kGpu, MemCategory::kMaster, 4 * part_);
        Init(MemSpace::kGpu, MemCategory::kOptimizerStates, states * part_);
      } else {
        const bool pin = z.offload_optimizer.pin_memory;
        int64_t largest = 0;
        for (const LayerParams& l : lp_) largest = std::max(largest, l.largest);
        // fp32 master partition: always pinned in stage 1/2 offload.
        Init(MemSpace::kPinnedHost, MemCategory::kMaster, 4 * part_);
        Init(HostSpace(pin), MemCategory::kGradients, 4 * part_);
        Init(MemSpace::kPageableHost, MemCategory::kOptimizerStates, states * part_);
        Init(HostSpace(pin), MemCategory::kCommBuffers, e_ * largest);  // cpu temp grad buffer
        if (gas_ > 1) Init(HostSpace(pin), MemCategory::kGradients, e_ * part_);
        Init(MemSpace::kGpu, MemCategory::kCommBuffers, e_ * largest);  // gpu temp grad buffer
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
      // 16-bit partitions: GPU, or one pinned flat CPU buffer per group with param offload
      // (persistent params keep their partition on the GPU), or NVMe beyond max_in_cpu.
      if (!off_par) {
        Init(MemSpace::kGpu, MemCategory::kParams16, e_ * part_);
      } else {
        Init(MemSpace::kGpu, MemCategory::kParams16, e_ * persistent_part);
        const int64_t in_cpu = nvme_par ? std::min(part_, z.offload_param.max_in_cpu) : part_;
        Init(MemSpace::kPinnedHost, MemCategory::kParams16, e_ * in_cpu);
        if (nvme_par) {
          Init(MemSpace::kNvme, MemCategory::kParams16, e_ * (part_ - in_cpu));
          Init(MemSpace::kPinnedHost, MemCategory::kCommBuffers,
               e_ * z.offload_param.buffer_count * z.offload_param.buffer_size);
        }
      }
      // Persistent parameters are held whole on every rank.
      Init(MemSpace::kGpu, MemCategory::kGatheredParams, e_ * f_.persistent_numel);
      // The ipg bucket: one flat buffer of reduce_bucket_size elements, allocated once.
      if (z.contiguous_gradients) Init(MemSpace::kGpu, MemCategory::kCommBuffers, e_ * rbs_);
      // Reduced gradient partitions (grad_partitions_flat_buffer), in the accumulation dtype.
      if (!off_opt) {
        Init(MemSpace::kGpu, MemCategory::kGradients, acc_ * part_);
        Init(MemSpace::kGpu, MemCategory::kMaster, 4 * part_);
        Init(MemSpace::kGpu, MemCategory::kOptimizerStates, states * part_);
      } else {
        Init(HostSpace(pin), MemCategory::kGradients, acc_ * part_);
        // fp32 gradient per sub-group (pinned with pin_memory), master (pageable) and states
        // (pageable) on the host; with NVMe, master and states live on the drive and a pinned
        // pool of buffer_count sub-group buffers stages them.
        Init(HostSpace(pin), MemCategory::kGradients, 4 * part_);
        if (nvme_opt) {
          Init(MemSpace::kNvme, MemCategory::kMaster, 4 * part_);
          Init(MemSpace::kNvme, MemCategory::kOptimizerStates, states * part_);
          Init(MemSpace::kNvme, MemCategory::kGradients, 4 * part_);
          Init(MemSpace::kPinnedHost, MemCategory::kCommBuffers,
               4 * z.offload_optimizer.buffer_count * f_.largest_subgroup);
        } else {
          Init(MemSpace::kPageableHost, MemCategory::kMaster, 4 * part_);
          Init(MemSpace::kPageableHost, MemCategory::kOptimizerStates, states * part_);
        }
      }
      // Reuse distance: a layer's forward gather is kept for its backward when the parameters
      // fetched in between (the rest of forward and the backward down to it) are fewer than
      // stage3_max_reuse_distance.
      int64_t after = 0;
      for (int l = static_cast<int>(w_.layers.size()) - 1; l >= 0; --l) {
        const int64_t gathered = lp_[l].numel - lp_[l].persistent_numel;
        retained_[l] = (gathered > 0 && 2 * after < z.stage3_max_reuse_distance) ? 1 : 0;
        after += gathered;
      }
      break;
    }
  }
}

void Builder::MicroStep(int micro) {
  Forward(micro);
  Backward(micro);
  if (micro == gas_ - 1) Boundary();
}

TaskId Builder::Gather(int micro, int l, bool backward) {
  const ZeroConfig& z = p_.zero;
  const int64_t numel = lp_[l].numel - lp_[l].persistent_numel;
  if (numel <= 0) return -1;
  const int64_t bytes = e_ * CeilDiv(numel, N_) * N_;
  TaskId h2d = -1;
  if (p_.OffloadsParams()) {
    Task copy;
    copy.kind = TaskKind::kCopyH2D;
    copy.resource = Resource::kH2D;
    copy.layer = l;
    copy.micro_step = micro;
    copy.bytes = static_cast<double>(e_ * CeilDiv(numel, N_));
    copy.pinned = true;
    h2d = g_.Add(copy, {},
                 {Alloc(copy.bytes, MemCategory::kCommBuffers),
                  Free(copy.bytes, MemCategory::kCommBuffers, true)});
  }
  Task t;
  t.kind = TaskKind::kAllGather;
  t.resource = f_.overlap_comm ? Resource::kComm : Resource::kCompute;
  t.layer = l;
  t.micro_step = micro;
  t.bytes = static_cast<double>(bytes);
  t.ranks = N_;
  t.inter_node = inter_node_;
  // Host work per module fetch (hooks, coordinator bookkeeping, one cat per parameter).
  t.kernels = 2 + lp_[l].tensors;
  // The coalesced gather lands in a flat buffer and is then split into the parameters
  // (torch.cat per parameter), so it briefly needs twice the gathered size.
  const TaskId id = g_.Add(t, {h2d, backward ? -1 : -1},
                           {Alloc(bytes, MemCategory::kGatheredParams),
                            Alloc(bytes, MemCategory::kCommBuffers),
                            Free(bytes, MemCategory::kCommBuffers, true)});
  (void)z;
  gathered_[l] = 1;
  gather_task_[l] = id;
  return id;
}

void Builder::Forward(int micro) {
  const int L = static_cast<int>(w_.layers.size());
  for (int l = 0; l < L; ++l) {
    const Layer& layer = w_.layers[l];
    TaskId gather = -1;
    if (Stage3()) {
      // Prefetch (steady state: the module trace is complete) issues the next module's gather
      // while this one computes; in program order the gather comes before this layer's compute.
      if (!gathered_[l]) gather = Gather(micro, l, false);
      else gather = gather_task_[l];
      if (l + 1 < L && !gathered_[l + 1] &&
          lp_[l + 1].numel - lp_[l + 1].persistent_numel <= p_.zero.stage3_prefetch_bucket_size) {
        Gather(micro, l + 1, false);
      }
    }
    Task t;
    t.kind = TaskKind::kForward;
    t.resource = Resource::kCompute;
    t.layer = l;
    t.micro_step = micro;
    std::vector<MemEffect> fx;
    fx.push_back(Alloc(layer.activation_bytes, MemCategory::kActivations, true));
    if (layer.kind == LayerKind::kLoss) {
      // The loss upcasts the logits to fp32 before log_softmax; the copy is dropped when the
      // loss function returns.
      fx.push_back(Alloc(lp_[l].largest_saved_bytes, MemCategory::kTemporaries));
      fx.push_back(Free(lp_[l].largest_saved_bytes, MemCategory::kTemporaries));
    }
    if (Stage3() && gathered_[l] && !retained_[l]) {
      const int64_t numel = lp_[l].numel - lp_[l].persistent_numel;
      fx.push_back(Free(e_ * CeilDiv(numel, N_) * N_, MemCategory::kGatheredParams));
    }
    last_compute_ = g_.Add(t, {last_compute_, gather}, fx);
    if (Stage3() && gathered_[l] && !retained_[l]) gathered_[l] = 0;
  }
}

void Builder::Backward(int micro) {
  const ZeroConfig& z = p_.zero;
  const int L = static_cast<int>(w_.layers.size());
  // stage_1_and_2.backward(): with contiguous gradients, the ipg buffer (two with overlap_comm)
  // is allocated at the start of every backward and released in the reduction epilogue.
  const bool ipg_per_backward = Zero12() && z.contiguous_gradients &&
                                (HooksDuringBackward() || micro == gas_ - 1);
  if (ipg_per_backward) {
    const int buffers = f_.overlap_comm ? 2 : 1;
    g_.initial[0][static_cast<int>(MemCategory::kCommBuffers)] += 0;  // (allocated below)
    Task t;
    t.kind = TaskKind::kGradCopy;
    t.resource = Resource::kCompute;
    t.micro_step = micro;
    t.kernels = buffers;
    last_compute_ = g_.Add(t, {last_compute_}, {Alloc(buffers * e_ * rbs_, MemCategory::kCommBuffers)});
  }
  bucket_elems_ = 0;
  bucket_producers_.clear();
  for (int l = L - 1; l >= 0; --l) {
    const Layer& layer = w_.layers[l];
    TaskId gather = -1;
    if (Stage3()) {
      if (!gathered_[l]) gather = Gather(micro, l, true);
      if (l - 1 >= 0 && !gathered_[l - 1] && !retained_[l - 1] &&
          lp_[l - 1].numel - lp_[l - 1].persistent_numel <= z.stage3_prefetch_bucket_size) {
        Gather(micro, l - 1, true);
      }
      if (gather < 0) gather = gather_task_[l];
    }
    TaskId recompute = -1;
    if (layer.checkpointed) {
      Task r;
      r.kind = TaskKind::kRecompute;
      r.layer = l;
      r.micro_step = micro;
      recompute = last_compute_ = g_.Add(r, {last_compute_, gather},
                                         {Alloc(layer.recompute_bytes, MemCategory::kActivations, true)});
    }
    Task t;
    t.kind = TaskKind::kBackward;
    t.layer = l;
    t.micro_step = micro;
    std::vector<MemEffect> fx;
    // Gradients of the layer's largest intermediate and of its input coexist for a moment.
    const int64_t work = 2 * lp_[l].largest_saved_bytes;
    fx.push_back(Alloc(work, MemCategory::kTemporaries));
    fx.push_back(Free(work, MemCategory::kTemporaries));
    fx.push_back(Free(layer.activation_bytes + layer.recompute_bytes, MemCategory::kActivations));
    // Parameter gradients appear as param.grad in the model dtype. Without hooks they stay and
    // accumulate in place across micro-steps (allocated in the first one only).
    const int64_t grad_bytes = e_ * layer.params;
    const bool new_grads = HooksDuringBackward() || micro == 0;
    if (new_grads && grad_bytes > 0) fx.push_back(Alloc(grad_bytes, MemCategory::kGradients, true));
    if (Stage3() && gathered_[l]) {
      const int64_t numel = lp_[l].numel - lp_[l].persistent_numel;
      fx.push_back(Free(e_ * CeilDiv(numel, N_) * N_, MemCategory::kGatheredParams));
    }
    last_compute_ = g_.Add(t, {last_compute_, gather, recompute}, fx);
    if (Stage3()) gathered_[l] = 0;
    if (HooksDuringBackward() && layer.params > 0) AddToBucket(micro, l, layer.params, last_compute_);
  }
  if (HooksDuringBackward()) FlushBucket(micro, true);
}

void Builder::AddToBucket(int micro, int l, int64_t elements, TaskId produced) {
  if (bucket_elems_ > 0 && bucket_elems_ + elements > rbs_) FlushBucket(micro, false);
  // The hook copies the gradient into the bucket buffer and re-points param.grad at it; the
  // autograd-allocated gradient is freed.
  Task c;
  c.kind = TaskKind::kGradCopy;
  c.resource = CommStream();
  c.layer = l;
  c.micro_step = micro;
  c.bytes = 2.0 * e_ * elements;
  c.kernels = std::max(1, lp_[l].tensors);
  const TaskId id = g_.Add(c, {produced}, {Free(e_ * elements, MemCategory::kGradients)});
  bucket_producers_.push_back(id);
  bucket_elems_ += elements;
}

void Builder::FlushBucket(int micro, bool last) {
  if (bucket_elems_ == 0) return;
  const ZeroConfig& z = p_.zero;
  const bool boundary = micro == gas_ - 1;
  Task r;
  r.resource = CommStream();
  r.micro_step = micro;
  r.index = bucket_index_++;
  r.ranks = N_;
  r.inter_node = inter_node_;
  std::vector<MemEffect> fx;
  if (Stage3()) {
    r.kind = z.reduce_scatter ? TaskKind::kReduceScatter : TaskKind::kAllReduce;
    r.bytes = static_cast<double>(comm_e_ * bucket_elems_);
    // reduce_scatter_coalesced interleaves the ranks' chunks with torch.cat: a bucket-sized copy.
    if (N_ > 1) {
      fx.push_back(Alloc(comm_e_ * bucket_elems_, MemCategory::kCommBuffers));
      fx.push_back(Free(comm_e_ * bucket_elems_, MemCategory::kCommBuffers));
    }
  } else {
    // stage_1_and_2.average_tensor: the bucket slices of all owners are all-reduced together
    // (use_multi_rank_bucket_allreduce) or reduced to each owner.
    r.kind = TaskKind::kAllReduce;
    r.bytes = static_cast<double>(comm_e_ * bucket_elems_);
  }
  r.kernels = 2;
  TaskId reduce = g_.Add(r, {}, fx);
  for (TaskId d : bucket_producers_) g_.AddDep(d);
  last_reduce_ = reduce;
  // Partitioning of the reduced bucket.
  const int64_t owned = CeilDiv(bucket_elems_, N_);
  Task c;
  c.kind = TaskKind::kGradCopy;
  c.resource = CommStream();
  c.micro_step = micro;
  c.index = r.index;
  c.bytes = 2.0 * acc_ * owned;
  std::vector<MemEffect> cx;
  if (Zero12()) {
    if (!partition_buffer_live_) {
      // grads_in_partition: a buffer for this rank's partition, allocated at the first copy.
      cx.push_back(Alloc(e_ * part_, MemCategory::kGradients));
      partition_buffer_live_ = true;
    }
  }
  last_reduce_ = g_.Add(c, {reduce}, cx);
  if (p_.OffloadsOptimizer() && boundary) {
    // The owned slice goes to the host as fp32 (cast on the GPU, non-blocking copy).
    Task d;
    d.kind = TaskKind::kCopyD2H;
    d.resource = Resource::kD2H;
    d.micro_step = micro;
    d.index = r.index;
    d.bytes = 4.0 * owned;
    d.pinned = z.offload_optimizer.pin_memory;
    d2h_tasks_.push_back(g_.Add(d, {last_reduce_},
                                {Alloc(4 * owned, MemCategory::kTemporaries),
                                 Free(4 * owned, MemCategory::kTemporaries, true)}));
  }
  bucket_elems_ = 0;
  bucket_producers_.clear();
  (void)last;
}

void Builder::Boundary() {
  const ZeroConfig& z = p_.zero;
  const int L = static_cast<int>(w_.layers.size());
  if (Zero12() && !HooksDuringBackward()) {
    // Stage 1 without overlap_comm: reduce_gradients() after the last backward walks every
    // parameter through the bucket path.
    bucket_elems_ = 0;
    for (int l = L - 1; l >= 0; --l) {
      if (w_.layers[l].params > 0) AddToBucket(gas_ - 1, l, w_.layers[l].params, last_compute_);
    }
    FlushBucket(gas_ - 1, true);
  }
  if (Zero12() && z.contiguous_gradients) {
    // _release_ipg_buffers at the end of the epilogue.
    const int buffers = f_.overlap_comm ? 2 : 1;
    Task t;
    t.kind = TaskKind::kGradCopy;
    t.micro_step = gas_ - 1;
    t.kernels = 0;
    last_compute_ = g_.Add(t, {last_compute_, last_reduce_},
                           {Free(buffers * e_ * rbs_, MemCategory::kCommBuffers, false)});
  }
  if (f_.wrapper == OptimizerWrapper::kBf16Optimizer ||
      f_.wrapper == OptimizerWrapper::kFp16Optimizer || f_.wrapper == OptimizerWrapper::kBasic) {
    // Gradient all-reduce at the boundary (BF16_Optimizer: the fp32 buffer cast to the
    // communication dtype; FP16/basic: 5e8-element buckets of the 16-bit grads).
    if (N_ > 1) {
      Task r;
      r.kind = TaskKind::kAllReduce;
      r.resource = Resource::kCompute;
      r.micro_step = gas_ - 1;
      r.bytes = static_cast<double>(comm_e_ * P_);
      r.ranks = N_;
      r.inter_node = inter_node_;
      last_compute_ = g_.Add(r, {last_compute_},
                             {Alloc(comm_e_ * P_, MemCategory::kCommBuffers),
                              Free(comm_e_ * P_, MemCategory::kCommBuffers)});
    }
  }
}

void Builder::OptimizerStep() {
  const ZeroConfig& z = p_.zero;
  const bool torch_adam = p_.torch_adam;
  // Bytes a GPU optimizer step moves per element: FusedAdam reads p, g, m, v and writes p, m, v
  // (28 B); torch's foreach AdamW makes about ten passes (about 80 B) and one fp32 temporary
  // (sqrt of exp_avg_sq) of the partition.
  const double adam_bytes_per_elt = torch_adam ? 80.0 : 28.0;
  const int64_t adam_temp_per_elt = torch_adam ? 4 : 0;
  int param_tensors = 0;
  for (const LayerParams& l : lp_) param_tensors += l.tensors;
  std::vector<MemEffect> fx;
  Task t;
  t.kind = TaskKind::kGpuOptimizer;
  t.micro_step = -1;
  switch (f_.wrapper) {
    case OptimizerWrapper::kBf16Optimizer: {
      // update_hp_grads: each bf16 grad added into the fp32 buffer (one kernel per parameter);
      // then the lp grads are dropped; clip; Adam on the fp32 partition; copy back to bf16.
      t.bytes = (e_ + 2.0 * acc_) * P_ + 4.0 * P_ /*norm*/ + adam_bytes_per_elt * part_ +
                (4.0 + e_) * part_;
      t.elements = static_cast<double>(part_);
      t.kernels = 3 * param_tensors + 20;
      fx.push_back(Free(e_ * P_, MemCategory::kGradients, false));
      fx.push_back(Alloc(adam_temp_per_elt * part_, MemCategory::kTemporaries));
      fx.push_back(Free(adam_temp_per_elt * part_, MemCategory::kTemporaries));
      last_compute_ = g_.Add(t, {last_compute_}, fx);
      break;
    }
    case OptimizerWrapper::kFp16Optimizer:
    case OptimizerWrapper::kBasic: {
      const bool mixed = f_.wrapper == OptimizerWrapper::kFp16Optimizer;
      t.bytes = (mixed ? (e_ + 4.0 + 4.0) * P_ : 0.0) + adam_bytes_per_elt * P_ + e_ * P_;
      t.elements = static_cast<double>(P_);
      t.kernels = 2 * param_tensors + 20;
      if (mixed) {
        // fp32 flat grads of the group built from the 16-bit grads.
        fx.push_back(Alloc(4 * P_, MemCategory::kTemporaries));
      }
      fx.push_back(Alloc(adam_temp_per_elt * P_, MemCategory::kTemporaries));
      fx.push_back(Free(adam_temp_per_elt * P_, MemCategory::kTemporaries));
      if (mixed) fx.push_back(Free(4 * P_, MemCategory::kTemporaries));
      fx.push_back(Free(e_ * P_, MemCategory::kGradients));
      last_compute_ = g_.Add(t, {last_compute_}, fx);
      break;
    }
    case OptimizerWrapper::kZero12: {
      if (!p_.OffloadsOptimizer()) {
        // single_grad_partition = flatten(averaged_gradients).to(fp32): a 16-bit flat copy and
        // its fp32 cast; the partition grads are then freed; Adam; fp32 -> 16-bit copy.
        t.bytes = (2.0 * e_ + 4.0) * part_ + 4.0 * part_ + adam_bytes_per_elt * part_ +
                  (4.0 + e_) * part_;
        t.elements = static_cast<double>(part_);
        t.kernels = 30;
        fx.push_back(Alloc(e_ * part_, MemCategory::kTemporaries));
        fx.push_back(Alloc(4 * part_, MemCategory::kGradients));
        fx.push_back(Free(e_ * part_, MemCategory::kTemporaries));
        fx.push_back(Alloc(adam_temp_per_elt * part_, MemCategory::kTemporaries));
        fx.push_back(Free(adam_temp_per_elt * part_, MemCategory::kTemporaries));
        fx.push_back(Free(4 * part_, MemCategory::kGradients));
        fx.push_back(Free(e_ * part_, MemCategory::kGradients));
        last_compute_ = g_.Add(t, {last_compute_, last_reduce_}, fx);
      } else {
        // CPU Adam on the host partition after the gradient copies; then the updated fp32
        // partition comes back to the GPU (a transient fp32 copy) into the 16-bit params.
        Task c;
        c.kind = TaskKind::kCpuOptimizer;
        c.resource = Resource::kCpu;
        c.elements = static_cast<double>(part_);
        TaskId cpu = g_.Add(c, {last_compute_, last_reduce_}, {Free(e_ * part_, MemCategory::kGradients, false)});
        for (TaskId d : d2h_tasks_) g_.AddDep(d);
        Task h;
        h.kind = TaskKind::kCopyH2D;
        h.resource = Resource::kH2D;
        h.bytes = 4.0 * part_;
        h.pinned = true;
        TaskId up = g_.Add(h, {cpu}, {Alloc(4 * part_, MemCategory::kTemporaries)});
        Task cast;
        cast.kind = TaskKind::kGpuOptimizer;
        cast.bytes = (4.0 + e_) * part_;
        cast.kernels = 2;
        last_compute_ = g_.Add(cast, {up, last_compute_},
                               {Free(4 * part_, MemCategory::kTemporaries)});
      }
      // all_gather_dp_groups: one all_gather_into_tensor of the 16-bit flat buffer.
      if (N_ > 1) {
        Task a;
        a.kind = TaskKind::kAllGather;
        a.resource = Resource::kCompute;
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
      int64_t remaining = part_;
      TaskId prev = last_compute_;
      for (int64_t sg = 0; sg < f_.subgroups; ++sg) {
        const int64_t n = std::min(remaining, z.sub_group_size);
        remaining -= n;
        if (!off) {
          Task s;
          s.kind = TaskKind::kGpuOptimizer;
          s.index = static_cast<int>(sg);
          s.bytes = (2.0 * acc_ + 4.0) * n + adam_bytes_per_elt * n + (4.0 + e_) * n;
          s.elements = static_cast<double>(n);
          s.kernels = 30;
          prev = last_compute_ = g_.Add(
              s, {prev, last_reduce_},
              {Alloc(acc_ * n, MemCategory::kTemporaries), Alloc(4 * n, MemCategory::kGradients),
               Free(acc_ * n, MemCategory::kTemporaries), Alloc(adam_temp_per_elt * n, MemCategory::kTemporaries),
               Free(adam_temp_per_elt * n, MemCategory::kTemporaries), Free(4 * n, MemCategory::kGradients)});
          continue;
        }
        TaskId read = -1;
        if (nvme) {
          Task r;
          r.kind = TaskKind::kNvmeRead;
          r.resource = Resource::kNvme;
          r.index = static_cast<int>(sg);
          r.bytes = (4.0 + state_bytes_ + 4.0) * n;
          read = g_.Add(r, {prev}, {});
        }
        Task c;
        c.kind = TaskKind::kCpuOptimizer;
        c.resource = Resource::kCpu;
        c.index = static_cast<int>(sg);
        c.elements = static_cast<double>(n);
        TaskId cpu = g_.Add(c, {prev, read, last_reduce_}, {});
        for (TaskId d : d2h_tasks_) g_.AddDep(d);
        if (nvme) {
          Task wr;
          wr.kind = TaskKind::kNvmeWrite;
          wr.resource = Resource::kNvme;
          wr.index = static_cast<int>(sg);
          wr.bytes = (4.0 + state_bytes_) * n;
          g_.Add(wr, {cpu}, {});
        }
        if (!p_.OffloadsParams()) {
          Task h;
          h.kind = TaskKind::kCopyH2D;
          h.resource = Resource::kH2D;
          h.index = static_cast<int>(sg);
          h.bytes = static_cast<double>(e_ * n);
          h.pinned = false;
          prev = g_.Add(h, {cpu}, {});
        } else {
          prev = cpu;
        }
      }
      last_compute_ = prev;
      // Persistent parameters are all-gathered again after the step.
      if (N_ > 1 && f_.persistent_numel > 0) {
        Task a;
        a.kind = TaskKind::kAllGather;
        a.resource = Resource::kCompute;
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
    a.resource = Resource::kCompute;
    a.bytes = static_cast<double>(e_ * part_ * N_);
    a.ranks = N_;
    a.inter_node = inter_node_;
    last_compute_ = g_.Add(a, {last_compute_}, {});
  }
}

}  // namespace

Result<BuiltStep> BuildStepGraph(const Workload& w, const std::vector<LayerParams>& params,
                                 const Plan& plan) {
  DSPLAN_RETURN_IF_ERROR(ValidatePlan(plan));
  if (params.size() != w.layers.size()) {
    return Status::Internal("BuildStepGraph: layer parameter facts do not match the workload");
  }
  if (w.options.micro_batch != plan.micro_batch) {
    return Status::Internal(fmt::format(
        "BuildStepGraph: workload micro-batch {} differs from the plan's {}",
        w.options.micro_batch, plan.micro_batch));
  }
  BuiltStep out;
  Builder b(w, params, plan, out);
  DSPLAN_RETURN_IF_ERROR(b.Build());
  return out;
}

}  // namespace dsplan
