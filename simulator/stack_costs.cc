#include "simulator/stack_costs.h"

#include <algorithm>

namespace dsplan {
namespace {

// tools/probes/stack_costs.py, "families" (2- against 6-block models at width 64, 15 timed
// steps, median), docs/validation/stack/stack-costs-call2.json. The block's modules and
// parameter tensors are counted from the built model (6- minus 2-block, / 4).
const FamilyBlockHost kFamilies[] = {
    {"gpt2", LayerKind::kDecoderBlock, 920e-6, 1113e-6, 2165e-6, 3487e-6, 13, 12},
    {"t5", LayerKind::kEncoderBlock, 1958e-6, 1387e-6, 2872e-6, 3436e-6, 18, 8},
    {"t5", LayerKind::kDecoderBlock, 2847e-6, 2040e-6, 3116e-6, 7519e-6, 26, 13},
    {"llama", LayerKind::kDecoderBlock, 1135e-6, 1229e-6, 2029e-6, 5331e-6, 13, 9},
    {"opt", LayerKind::kDecoderBlock, 804e-6, 1283e-6, 1748e-6, 3442e-6, 11, 16},
    {"gpt_neox", LayerKind::kDecoderBlock, 1479e-6, 1514e-6, 2131e-6, 3703e-6, 12, 12},
    {"qwen2", LayerKind::kDecoderBlock, 1623e-6, 2352e-6, 2878e-6, 5556e-6, 13, 12},
    {"bloom", LayerKind::kDecoderBlock, 1259e-6, 1965e-6, 1972e-6, 3346e-6, 11, 12},
    {"gemma", LayerKind::kDecoderBlock, 1307e-6, 2399e-6, 2678e-6, 5681e-6, 13, 9},
    {"phi", LayerKind::kDecoderBlock, 1540e-6, 2243e-6, 2331e-6, 4306e-6, 12, 14},
    {"falcon", LayerKind::kDecoderBlock, 1746e-6, 2060e-6, 2927e-6, 4531e-6, 10, 6},
    {"gptj", LayerKind::kDecoderBlock, 2418e-6, 2467e-6, 2801e-6, 5626e-6, 14, 10},
    {"mistral", LayerKind::kDecoderBlock, 1578e-6, 2624e-6, 2283e-6, 5025e-6, 13, 9},
    // stack-costs-call3.json (the same method, a later run)
    {"bert", LayerKind::kEncoderBlock, 797e-6, 905e-6, 1108e-6, 2841e-6, 18, 16},
    {"mixtral", LayerKind::kDecoderBlock, 2504e-6, 3029e-6, 2709e-6, 7032e-6, 12, 9},
};

// The same runs: the 2-block model's time less two blocks (negative differences, within the
// noise, as 0). T5: the decoder series' rest (2 encoder blocks included) less 2 encoder blocks.
const FamilyRestHost kRests[] = {
    {"gpt2", 1412e-6, 776e-6},    {"t5", 3123e-6, 3929e-6},     {"llama", 1566e-6, 2351e-6},
    {"opt", 1400e-6, 304e-6},     {"gpt_neox", 1108e-6, 1152e-6}, {"qwen2", 1946e-6, 1207e-6},
    {"bloom", 1316e-6, 312e-6},   {"gemma", 2866e-6, 933e-6},   {"phi", 2138e-6, 375e-6},
    {"falcon", 1233e-6, 1106e-6}, {"gptj", 179e-6, 49e-6},      {"mistral", 2800e-6, 449e-6},
    {"bert", 848e-6, 1050e-6},    {"mixtral", 848e-6, 0},
};

// The measured families as dsplan's tracer decomposes them: the catalog model each was measured
// with (stack-costs-call2/3.json "measured_with"), one sample of 32 tokens; per block kind and
// for the rest of the model (kEmbedding: every layer outside the blocks), ops by OpKind (GEMM,
// batched GEMM, attention, norm, activation, dropout, elementwise, embedding, softmax, loss) and
// the kernels beyond one per op, forward and backward.
// tests/simulator/stack_costs_test.cc (FamilyHost.TheMeasuredFamiliesTracesAreTheTracers)
// re-traces each and prints this table when the tracer changes.
struct TraceRow {
  const char* model_type;
  LayerKind kind;
  const char* traced_from;
  std::array<int32_t, kOpKindCount> ops;
  int32_t fwd_extra, bwd_extra;
};

std::vector<FamilyTrace> Traces() {
  static const TraceRow kRows[] = {
      {"gpt2", LayerKind::kDecoderBlock, "gpt2-xl", {{4, 0, 1, 2, 1, 2, 2, 0, 0, 0}}, 7, 11},
      {"gpt2", LayerKind::kEmbedding, "gpt2-xl", {{1, 0, 0, 1, 0, 1, 2, 2, 0, 1}}, 1, 3},
      {"t5", LayerKind::kEncoderBlock, "t5-3b", {{6, 2, 0, 2, 1, 4, 8, 1, 1, 0}}, 14, 22},
      {"t5", LayerKind::kDecoderBlock, "t5-3b", {{10, 2, 1, 3, 1, 5, 9, 1, 1, 0}}, 21, 33},
      {"t5", LayerKind::kEmbedding, "t5-3b", {{1, 0, 0, 2, 0, 4, 1, 2, 0, 1}}, 15, 24},
      {"llama", LayerKind::kDecoderBlock, "llama-2-7b", {{7, 0, 1, 2, 1, 0, 5, 0, 0, 0}}, 22, 41},
      {"llama", LayerKind::kEmbedding, "llama-2-7b", {{1, 0, 0, 1, 0, 0, 1, 1, 0, 1}}, 8, 13},
      {"opt", LayerKind::kDecoderBlock, "opt-2.7b", {{6, 0, 1, 2, 1, 2, 3, 0, 0, 0}}, 0, 2},
      {"opt", LayerKind::kEmbedding, "opt-2.7b", {{1, 0, 0, 1, 0, 0, 2, 2, 0, 1}}, 1, 3},
      {"gpt_neox", LayerKind::kDecoderBlock, "pythia-1.4b", {{4, 0, 1, 2, 1, 0, 6, 0, 0, 0}}, 10, 25},
      {"gpt_neox", LayerKind::kEmbedding, "pythia-1.4b", {{1, 0, 0, 1, 0, 0, 1, 1, 0, 1}}, 1, 3},
      {"qwen2", LayerKind::kDecoderBlock, "qwen2-1.5b", {{7, 0, 1, 2, 1, 0, 5, 0, 0, 0}}, 22, 41},
      {"qwen2", LayerKind::kEmbedding, "qwen2-1.5b", {{1, 0, 0, 1, 0, 0, 1, 1, 0, 1}}, 8, 13},
      {"bloom", LayerKind::kDecoderBlock, "bloom-3b", {{4, 2, 0, 2, 1, 0, 9, 0, 1, 0}}, 8, 19},
      {"bloom", LayerKind::kEmbedding, "bloom-3b", {{1, 0, 0, 2, 0, 0, 1, 1, 0, 1}}, 1, 4},
      {"gemma", LayerKind::kDecoderBlock, "gemma-2b", {{7, 0, 1, 2, 1, 0, 5, 0, 0, 0}}, 22, 41},
      {"gemma", LayerKind::kEmbedding, "gemma-2b", {{1, 0, 0, 1, 0, 0, 2, 1, 0, 1}}, 8, 13},
      {"phi", LayerKind::kDecoderBlock, "phi-2", {{6, 0, 1, 1, 1, 2, 5, 0, 0, 0}}, 17, 34},
      {"phi", LayerKind::kEmbedding, "phi-2", {{1, 0, 0, 1, 0, 0, 1, 1, 0, 1}}, 1, 3},
      {"falcon", LayerKind::kDecoderBlock, "falcon-7b", {{4, 2, 0, 1, 1, 0, 10, 0, 1, 0}}, 8, 17},
      {"falcon", LayerKind::kEmbedding, "falcon-7b", {{1, 0, 0, 1, 0, 0, 1, 1, 0, 1}}, 1, 3},
      {"gptj", LayerKind::kDecoderBlock, "gpt-j-6b", {{6, 2, 0, 1, 1, 0, 10, 0, 1, 0}}, 17, 34},
      {"gptj", LayerKind::kEmbedding, "gpt-j-6b", {{1, 0, 0, 1, 0, 0, 1, 1, 0, 1}}, 1, 3},
      {"mistral", LayerKind::kDecoderBlock, "mistral-7b", {{7, 0, 1, 2, 1, 0, 5, 0, 0, 0}}, 22, 41},
      {"mistral", LayerKind::kEmbedding, "mistral-7b", {{1, 0, 0, 1, 0, 0, 1, 1, 0, 1}}, 8, 13},
      {"bert", LayerKind::kEncoderBlock, "bert-large-uncased", {{6, 0, 1, 2, 1, 2, 2, 0, 0, 0}}, 0, 2},
      {"bert", LayerKind::kEmbedding, "bert-large-uncased", {{2, 0, 0, 2, 1, 1, 2, 3, 0, 1}}, 1, 4},
      {"mixtral", LayerKind::kDecoderBlock, "mixtral-8x7b", {{7, 0, 1, 2, 0, 0, 5, 0, 1, 0}}, 22, 40},
      {"mixtral", LayerKind::kEmbedding, "mixtral-8x7b", {{1, 0, 0, 1, 0, 0, 1, 1, 0, 1}}, 8, 13},
  };
  std::vector<FamilyTrace> t;
  for (const TraceRow& r : kRows) {
    FamilyTrace f{r.model_type, r.kind, r.traced_from, {}};
    f.ops.ops = r.ops;
    f.ops.fwd_extra_kernels = r.fwd_extra;
    f.ops.bwd_extra_kernels = r.bwd_extra;
    t.push_back(std::move(f));
  }
  return t;
}

StackCosts Build() {
  StackCosts s;
  s.source =
      "measured by tools/probes/stack_costs.py on the H200 device machine (16-core x86 host), "
      "PyTorch 2.11.0+cu130, transformers 5.17.0, DeepSpeed 0.14.5, 2026-12-03 "
      "(docs/validation/stack/)";
  // h200-measured: hbm_bytes_per_s 4.2299e12 x memory_bound_efficiency 0.99243.
  s.reference_stream_bytes_per_s = 4.2299e12 * 0.99243;
  auto set = [&s](KernelClass c, double fwd, double bwd) {
    s.fwd_bytes_per_s[static_cast<int>(c)] = fwd;
    s.bwd_bytes_per_s[static_cast<int>(c)] = bwd;
  };
  // "kernels" (docs/validation/stack/kernel-rates.json): 64 Mi-element tensors, CUDA events
  // around the op and around its backward, median of 6. Stream: bf16 a + b; the casts are
  // bf16 -> fp32 and fp32 -> bf16 forward; reduce: fp32 mean over rows of 2048; norm: fused
  // LayerNorm over rows of 4096 (backward with the weight gradient); softmax: bf16 rows of
  // 4096; log_softmax: fp32 rows of 50304, 16,384 of them, as training runs it (measured
  // 2026-12-06, docs/validation/stack/stack-kernels-h200-1206.json; the 1,334 rows measured
  // first ran it 14-16 % slower: docs/stack-costs.md 1b).
  set(KernelClass::kStream, 3.519e12, 3.519e12);
  set(KernelClass::kCastUp, 1.964e12, 1.964e12);
  set(KernelClass::kCastDown, 3.495e12, 3.495e12);
  set(KernelClass::kReduce, 2.154e12, 2.154e12);
  set(KernelClass::kNorm, 1.908e12, 1.419e12);
  set(KernelClass::kActivation, 2.354e12, 2.483e12);
  set(KernelClass::kDropout, 2.371e12, 2.724e12);
  set(KernelClass::kSoftmax, 1.160e12, 1.756e12);
  set(KernelClass::kLogSoftmax, 2.119e12, 2.927e12);
  // Layout-dependent copies (docs/validation/deepspeed/plans-1203b/copy-kernels-h200.json,
  // tools/probes/copy_kernels.py: bf16, 32-160 MiB, CUDA events, median over the shapes of
  // partial-rotary and attention blocks): transpose(1, 2).contiguous() 1.45 TB/s (a contiguous
  // copy 3.95); a multiply reading a narrow strided slice 1.33. Backward is taken at the same
  // rate.
  set(KernelClass::kPermuteCopy, 1.448e12, 1.448e12);
  set(KernelClass::kStridedMul, 1.335e12, 1.335e12);
  // The rotary embedding's ops in the layouts transformers gives them (docs/validation/stack/
  // rotary-kernels-h200.json, tools/probes/rotary_kernels.py: bf16, 9 shapes of 34-130 MB per
  // tensor, CUDA events, median of 7 batches of 10; medians over the shapes, bytes read +
  // written): rotate_half's cat of the negated half with a slice 0.87 TB/s (0.73-0.97); the
  // partial rotary's cat of the rotated part with the pass-through slice 0.78 (0.75-0.88,
  // contiguous or transposed source alike); an add of a result laid out like a transposed view
  // with a contiguous one 1.74 (1.63-1.86; 3.8-4.2 when both are contiguous). The strided
  // multiplies and negations of the same probe ran at 1.29 (0.99-1.70), the broadcast multiplies
  // at 1.58: the classes above, measured before, within 4 %.
  set(KernelClass::kRotateHalf, 0.866e12, 0.866e12);
  set(KernelClass::kCatStrided, 0.78e12, 0.78e12);
  set(KernelClass::kMixedLayout, 1.74e12, 1.74e12);
  // An elementwise op with a broadcast operand (docs/validation/stack/
  // eager-attention-kernels-h200.json, tools/probes/eager_attention_kernels.py: bf16 scores
  // [b, h, s, s] + a mask [b, 1, s, s], 134-168 Mi elements, CUDA events behind a busy-wait,
  // median of 10; the same add without the broadcast runs at 4.35): PyTorch's elementwise
  // kernel does not vectorize a stride-0 operand. 1.53-1.55 TB/s over four shapes.
  set(KernelClass::kBroadcast, 1.54e12, 1.54e12);
  // "op_kinds" (stack-costs-call2.json): a chain of 400 ops of one kind on tiny bf16 tensors,
  // forward and backward wall time / 400 (the batched-gemm and dropout chains less their extra
  // elementwise op).
  auto op = [&s](OpKind k, double fwd, double bwd) {
    s.op_fwd_s[static_cast<int>(k)] = fwd;
    s.op_bwd_s[static_cast<int>(k)] = bwd;
  };
  op(OpKind::kGemm, 36.2e-6, 139.0e-6);
  op(OpKind::kBatchedGemm, 44.8e-6, 68.3e-6);
  op(OpKind::kAttention, 36.6e-6, 62.5e-6);
  op(OpKind::kNorm, 31.0e-6, 70.0e-6);
  op(OpKind::kActivation, 11.8e-6, 20.7e-6);
  op(OpKind::kDropout, 30.0e-6, 33.1e-6);
  op(OpKind::kElementwise, 8.7e-6, 7.1e-6);
  op(OpKind::kEmbedding, 36.2e-6, 70.0e-6);  // a module call with one kernel: as Linear fwd, LayerNorm bwd
  op(OpKind::kSoftmax, 12.7e-6, 27.9e-6);
  op(OpKind::kLoss, 12.7e-6, 27.9e-6);       // a softmax-class kernel pair, as softmax
  s.kernel_fwd_s = 8.7e-6;
  s.kernel_bwd_s = 7.1e-6;
  // "zero3" (stack-costs-call2.json): stacks of 32 and 128 tiny Linear modules (without bias,
  // with bias, pairs in a container), every parameter partitioned, stage 3 minus stage 2, least
  // squares over the six stacks of t = a + b * modules + c * parameters.
  s.z3_fwd_per_module_s = 187.7e-6;
  s.z3_fwd_per_param_s = 120.9e-6;
  s.z3_bwd_per_module_s = 281.2e-6;
  s.z3_bwd_per_param_s = 188.8e-6;
  // zero3-gather-stacks-h200.json (tools/probes/zero3_gather_calls.py): stacks of 8 and 24
  // Linear(w, w), w = 64, 1024, 4096, at prefetch bucket 0 (one gather call per module) against
  // 1e12 (one call per step): 56, 78 and 74 us more per module, with the minimum over 10 rounds
  // (the host's speed varied by up to 2x between rounds; the minimum is the undisturbed cost,
  // the estimator the per-module costs above agree with: 186-205 us there). Their mean.
  s.z3_per_gather_call_s = 69e-6;
  // zero3-reduce-stacks-{a,b}-h200.json (zero3_gather_calls.py --stacks --reduce-sweep): stacks
  // of 8 and 24 Linear(4096, 4096) gathered in one call, reduce bucket of one gradient (a flush
  // in every module's backward hook) against the whole stack (one flush, at the end): 299 and
  // 416 us more per module in two processes (minimum over 10 rounds); one attributed
  // __reduce_and_partition_ipg_grads took 368-409 us. Width 64, where both buckets hold every
  // gradient, differs by -20 us. About 370 us.
  s.z3_per_bucket_flush_s = 370e-6;
  // "zero3" grid of stack-costs-call2.json, the stage-2 and stage-3 columns alone: the step
  // time (engine.step(), synchronized) of the six stacks of 32 to 385 tiny modules with 32 to
  // 256 parameter tensors, least squares t = a + b * parameter tensors. The stacks' tensors
  // are tiny, so this is host time (residuals at most 1.9 ms and 0.9 ms).
  s.z12_step_s = 2.095e-3;
  s.z12_step_per_param_s = 45.8e-6;
  s.z3_step_s = 2.887e-3;
  s.z3_step_per_param_s = 74.6e-6;
  // Stage 0's BF16_Optimizer.step() (bf16-optimizer-parts-h200.json,
  // tools/probes/bf16_optimizer_parts.py): models of 64, 256 and 768 tiny parallel Linear
  // modules, FusedAdam, engine.step() synchronized, median of 10, least squares t = a + b * n
  // per setting; without clipping (gradient_clipping 0) and with the clip loop forced
  // (gradient_clipping 1e-6, so clip_coef < 1 always). Residuals at most 1.1 and 1.4 ms.
  s.bf16_step_s = 2.357e-3;
  s.bf16_step_per_param_s = 44.9e-6;
  s.bf16_clip_step_s = 2.743e-3;
  s.bf16_clip_step_per_param_s = 56.1e-6;
  // The fp64 copy and norm of the step's gradient-norm loop (optimizer-kernels-h200.json,
  // tools/probes/optimizer_kernels.py: 256 Mi bf16 elements in 64 tensors, 2 + 6 timed, median).
  // The probe also measured the step's other kernels near the classes that price them: flatten
  // 4.20, cast to fp32 2.11, unscale 4.20, copy back 4.37, FusedAdam 3.37 TB/s.
  s.fp64_cast_bytes_per_s = 1.978e12;
  s.fp64_norm_bytes_per_s = 2.182e12;
  // The same probe's flat passes (flatten 4.20, unscale 4.20, copy back 4.37 TB/s) and FusedAdam
  // (3.37 TB/s) stay priced at the streaming class (3.52 TB/s) in the built-in costs: at their
  // own rates the H200 record's GPU-bound steps came out 0.13 points worse (2.97 -> 3.10 %
  // mean), the step being short already where a model has hundreds of tensors
  // (docs/stack-costs.md section 5). A profile that measured them (stack.optimizer_kernels)
  // prices them at its rates.
  // offload-copy-1205 (tools/device/offload_copy_probe.py, 2026-12-05, PyTorch 2.11, 16
  // intra-op threads on the H200 machine's 16 CPUs): `fp32_cpu.copy_(bf16_cuda)` into a pinned
  // fp32 destination, median of 5, by the bf16 source's bytes. Up to 16 MiB the temporary comes
  // from the heap; more than the pageable D2H and the conversion measured alone add up to
  // (+0.13 ms at 2 MB, +0.4 ms at 8-17 MB). From 32 MiB (16 M elements) it is a fresh mapping
  // each copy: 1.2-1.7 GB/s, the page faults inside the copy (the same probe's D2H into a fresh
  // tensor alone: 1.4-1.8 GB/s, into a reused one 13-17 GB/s).
  s.cast_copy_d2h = {{32768, 40.8e-6},    {65536, 57.3e-6},     {131072, 61.0e-6},
                     {262144, 79.0e-6},   {524288, 117.4e-6},   {1048576, 177.6e-6},
                     {2097152, 365.5e-6}, {4194304, 666.0e-6},  {8388608, 1.123e-3},
                     {16777216, 1.789e-3}, {33554432, 20.11e-3}, {67108864, 39.45e-3},
                     {134217728, 109.06e-3}, {268435456, 187.37e-3}};
  // block-ops-h200.json (tools/probes/block_ops.py, plain PyTorch, 2026-12-04), gpt2-xl at
  // micro-batch 11: cuDNN's SDPA forward with GPT-2's attention dropout (0.1) took 259.5 us per
  // block for [11, 25, 1024, 64], causal; the profile's SDPA table (measured without dropout)
  // gives 119 us for that call: 2.18x. Its backward took 455.8 us against 386 us priced
  // (1.18x), as llama-3.2-1b's without dropout (1150 against 945 us, 1.22x): dropout does not
  // change the backward, so only the forward gets the ratio.
  s.sdpa_dropout_fwd_ratio = 2.18;
  s.families.assign(std::begin(kFamilies), std::end(kFamilies));
  s.rests.assign(std::begin(kRests), std::end(kRests));
  s.traces = Traces();
  return s;
}

}  // namespace

bool StackCosts::FreshCastCopyMeasured() const {
  return !cast_copy_d2h.empty() && cast_copy_d2h.back().first >= kFreshMappingBytes;
}

double StackCosts::CastCopyD2HSeconds(double bytes, bool heap) const {
  // The points of |bytes|' regime: [lo, hi) of the table.
  const bool heap_curve = heap && cast_copy_d2h_heap.size() >= 2;
  const auto& t = heap_curve ? cast_copy_d2h_heap : cast_copy_d2h;
  size_t split = 0;
  while (split < t.size() && (heap_curve || t[split].first < kFreshMappingBytes)) ++split;
  const bool fresh = !heap && bytes >= kFreshMappingBytes && split < t.size();
  size_t lo = fresh ? split : 0, hi = fresh ? t.size() : split;
  if (hi == lo) hi = t.size();  // no heap-regime points: take what there is
  if (hi - lo == 1) {
    const auto& [b, s] = t[lo];
    return bytes <= b ? s : s * bytes / b;
  }
  if (bytes <= t[lo].first) return t[lo].second;
  size_t i = lo + 1;
  while (i + 1 < hi && t[i].first < bytes) ++i;
  const auto& [b0, s0] = t[i - 1];
  const auto& [b1, s1] = t[i];
  return s0 + (s1 - s0) * (bytes - b0) / (b1 - b0);
}

const FamilyBlockHost* StackCosts::Block(std::string_view model_type, LayerKind kind) const {
  for (const FamilyBlockHost& f : families) {
    if (f.model_type == model_type && f.kind == kind) return &f;
  }
  return nullptr;
}

const FamilyRestHost* StackCosts::Rest(std::string_view model_type) const {
  for (const FamilyRestHost& r : rests) {
    if (r.model_type == model_type) return &r;
  }
  return nullptr;
}

void TracedOps::Add(const Op& op) {
  ++ops[static_cast<int>(op.kind)];
  fwd_extra_kernels += std::max(0, op.eager.fwd_kernels - 1);
  bwd_extra_kernels += std::max(0, op.eager.bwd_kernels - 1);
}

double StackCosts::PerOpFwd(const TracedOps& t) const {
  double s = t.fwd_extra_kernels * kernel_fwd_s;
  for (int k = 0; k < kOpKindCount; ++k) s += t.ops[k] * op_fwd_s[k];
  return s;
}

double StackCosts::PerOpBwd(const TracedOps& t) const {
  double s = t.bwd_extra_kernels * kernel_bwd_s;
  for (int k = 0; k < kOpKindCount; ++k) s += t.ops[k] * op_bwd_s[k];
  return s;
}

namespace {

double Median(std::vector<double> v) {
  if (v.empty()) return 1;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

}  // namespace

UnmeasuredHostScale StackCosts::ScaleForUnmeasured(std::string_view exclude_model_type) const {
  // Each measured block (T5's encoder and decoder are two) and each measured rest of a model
  // whose family dsplan has traced is one sample of measured / per-op estimate, forward.
  std::vector<double> fwd, ckpt_fwd, recompute, rest_fwd;
  std::vector<std::string_view> seen;
  for (const FamilyTrace& t : traces) {
    if (t.model_type == exclude_model_type) continue;
    const double pf = PerOpFwd(t.ops);
    if (pf <= 0) continue;
    if (t.kind == LayerKind::kEmbedding) {
      const FamilyRestHost* r = Rest(t.model_type);
      if (r == nullptr) continue;
      rest_fwd.push_back(r->fwd_s / pf);
      continue;
    }
    const FamilyBlockHost* b = Block(t.model_type, t.kind);
    if (b == nullptr) continue;
    fwd.push_back(b->fwd_s / pf);
    ckpt_fwd.push_back(b->ckpt_fwd_s / pf);
    recompute.push_back(std::max(0.0, b->ckpt_bwd_s - b->bwd_s) / pf);
    if (std::find(seen.begin(), seen.end(), t.model_type) == seen.end()) {
      seen.push_back(t.model_type);
    }
  }
  UnmeasuredHostScale s;
  if (seen.size() < 3) return s;
  s.families = static_cast<int>(seen.size());
  s.fwd = Median(fwd);
  s.ckpt_fwd = Median(ckpt_fwd);
  s.recompute = Median(recompute);
  if (rest_fwd.size() >= 3) s.rest_fwd = Median(rest_fwd);
  return s;
}

const StackCosts& MeasuredStackCosts() {
  static const StackCosts costs = Build();
  return costs;
}

// The section's kernel classes and op kinds are named in KernelClass / OpKind order
// (core/hardware_profile.h); the names must agree.
// The section holds the classes stack_costs.py measures, the first kStackKernelClasses of
// KernelClass; the layout classes after them (permuted copies, the partial rotary's kernels)
// and the optimizer step's costs come from other probes and stay the built-in ones.
static_assert(kStackKernelClasses <= kKernelClassCount, "stack section kernel classes");
static_assert(kStackOpKinds == kOpKindCount, "stack section op kinds");

StackCosts StackCostsFromProfile(const StackProfile& p) {
  // Everything the section does not hold (the layout classes, the optimizer step's costs,
  // ZeRO-3's hooks when DeepSpeed was not measured) stays the built-in measurement.
  const StackCosts& built_in = MeasuredStackCosts();
  StackCosts s = built_in;
  s.families.clear();
  s.rests.clear();
  s.source = p.source.detail;
  s.reference_stream_bytes_per_s = p.reference_stream_bytes_per_s;
  for (int i = 0; i < kStackKernelClasses; ++i) {
    s.fwd_bytes_per_s[i] = p.kernel_fwd_bytes_per_s[i];
    s.bwd_bytes_per_s[i] = p.kernel_bwd_bytes_per_s[i];
  }
  s.op_fwd_s = p.op_fwd_s;
  s.op_bwd_s = p.op_bwd_s;
  s.kernel_fwd_s = p.kernel_fwd_s;
  s.kernel_bwd_s = p.kernel_bwd_s;
  if (p.zero3) {
    s.z3_fwd_per_module_s = p.z3_fwd_per_module_s;
    s.z3_fwd_per_param_s = p.z3_fwd_per_param_s;
    s.z3_bwd_per_module_s = p.z3_bwd_per_module_s;
    s.z3_bwd_per_param_s = p.z3_bwd_per_param_s;
  }
  // Measured by --stack (stack_costs.py "zero3_calls") each, else the built-in one.
  if (p.z3_per_gather_call_s) s.z3_per_gather_call_s = *p.z3_per_gather_call_s;
  if (p.z3_per_bucket_flush_s) s.z3_per_bucket_flush_s = *p.z3_per_bucket_flush_s;
  // The heap curve goes with the default curve it was measured beside: a profile that measured
  // only the default one leaves no built-in heap curve of another machine.
  if (!p.cast_copy_d2h.empty()) {
    s.cast_copy_d2h = p.cast_copy_d2h;
    s.cast_copy_d2h_heap = p.cast_copy_d2h_heap;
  }
  if (p.optimizer_step) {
    s.z12_step_s = p.z12_step_s;
    s.z12_step_per_param_s = p.z12_step_per_param_s;
    s.z3_step_s = p.z3_step_s;
    s.z3_step_per_param_s = p.z3_step_per_param_s;
  }
  if (p.optimizer_kernels) {
    // Measured with this stack: a rate the section lacks is priced at the streaming class.
    s.fp64_cast_bytes_per_s = p.fp64_cast_bytes_per_s;
    s.fp64_norm_bytes_per_s = p.fp64_norm_bytes_per_s;
    s.step_flat_bytes_per_s = p.step_flat_bytes_per_s;
    s.fused_adam_bytes_per_s = p.fused_adam_bytes_per_s;
    s.torch_adam_bytes_per_s = p.torch_adam_bytes_per_s;
  }
  if (p.bf16_step) {
    s.bf16_step_s = p.bf16_step_s;
    s.bf16_step_per_param_s = p.bf16_step_per_param_s;
    s.bf16_clip_step_s = p.bf16_clip_step_s;
    s.bf16_clip_step_per_param_s = p.bf16_clip_step_per_param_s;
  }
  for (const StackBlockPoint& b : p.blocks) {
    s.families.push_back({b.model_type,
                          b.encoder ? LayerKind::kEncoderBlock : LayerKind::kDecoderBlock, b.fwd_s,
                          b.bwd_s, b.ckpt_fwd_s, b.ckpt_bwd_s, b.modules, b.param_tensors});
  }
  for (const StackRestPoint& r : p.rests) s.rests.push_back({r.model_type, r.fwd_s, r.bwd_s});
  return s;
}

std::shared_ptr<const StackCosts> StackCostsOf(const HardwareProfile& profile) {
  if (!profile.stack.present) {
    // The built-in costs live for the process: a non-owning pointer.
    return std::shared_ptr<const StackCosts>(std::shared_ptr<const StackCosts>(),
                                             &MeasuredStackCosts());
  }
  return std::make_shared<const StackCosts>(StackCostsFromProfile(profile.stack));
}

KernelClass DefaultKernelClass(OpKind kind) {
  switch (kind) {
    case OpKind::kNorm: return KernelClass::kNorm;
    case OpKind::kActivation: return KernelClass::kActivation;
    case OpKind::kDropout: return KernelClass::kDropout;
    case OpKind::kSoftmax: return KernelClass::kSoftmax;
    case OpKind::kLoss: return KernelClass::kLogSoftmax;
    default: return KernelClass::kStream;
  }
}

}  // namespace dsplan
