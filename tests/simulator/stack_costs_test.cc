// The eager-PyTorch mechanisms of the time model (docs/stack-costs.md): what each traced op
// runs as kernels, the measured rates and host times that price them, GEMM alignment classes,
// and SDPA's fp32 math path.

#include <gtest/gtest.h>

#include <string>

#include "core/hardware_profile.h"
#include "core/model_catalog.h"
#include "simulator/cost_model.h"
#include "simulator/stack_costs.h"
#include "simulator/step_builder.h"
#include "simulator/workload.h"

namespace dsplan {
namespace {

Workload Trace(const std::string& model, int64_t mb, int64_t seq, bool ckpt = false,
               AttentionImpl attn = AttentionImpl::kAuto) {
  auto spec = LoadModel(model, DSPLAN_TEST_DATA_DIR);
  EXPECT_TRUE(spec.ok()) << spec.status().message();
  RunShape o;
  o.micro_batch = mb;
  o.seq_len = seq;
  o.gradient_checkpointing = ckpt;
  o.attention = attn;
  auto w = BuildWorkload(*spec, o);
  EXPECT_TRUE(w.ok()) << w.status().message();
  return std::move(*w);
}

const Op* FindOp(const Workload& w, const std::string& suffix) {
  for (const Layer& l : w.layers) {
    for (const Op& op : l.ops) {
      if (op.name.size() >= suffix.size() &&
          op.name.compare(op.name.size() - suffix.size(), suffix.size(), suffix) == 0) {
        return &op;
      }
    }
  }
  return nullptr;
}

double Sum(const std::array<double, kKernelClassCount>& a) {
  double s = 0;
  for (double v : a) s += v;
  return s;
}

double At(KernelClass c, const std::array<double, kKernelClassCount>& a) {
  return a[static_cast<int>(c)];
}

TEST(EagerKernels, LlamaRmsNormRunsItsUpcastMath) {
  // LlamaRMSNorm on bf16 [tokens, d]: to(fp32) 6 B/elem, pow 8, mean 4, h * rsqrt 8,
  // to(bf16) 6, weight * h 4: 36 bytes per element in 8 kernels (with + eps and rsqrt on the
  // [tokens, 1] variance). Backward: 84 bytes per element in 12 kernels.
  const Workload w = Trace("llama-3.2-1b", 2, 128);
  const Op* norm = FindOp(w, "layers.0.input_layernorm");
  ASSERT_NE(norm, nullptr);
  const double n = 2.0 * 128 * 2048;
  EXPECT_EQ(norm->eager.fwd_kernels, 8);
  EXPECT_EQ(norm->eager.bwd_kernels, 12);
  EXPECT_DOUBLE_EQ(Sum(norm->eager.fwd), 36 * n);
  EXPECT_DOUBLE_EQ(Sum(norm->eager.bwd), 84 * n);
  EXPECT_DOUBLE_EQ(At(KernelClass::kCastUp, norm->eager.fwd), 6 * n);
  EXPECT_DOUBLE_EQ(At(KernelClass::kCastDown, norm->eager.fwd), 6 * n);
  EXPECT_DOUBLE_EQ(At(KernelClass::kReduce, norm->eager.fwd), 4 * n);
  // What dsplan's runtime moves for it stays the least traffic: read x, write y.
  EXPECT_DOUBLE_EQ(norm->fwd_bytes, 4 * n);
}

TEST(EagerKernels, LossBackwardZeroFillsTheDenseGradient) {
  // ForCausalLMLoss: logits.float() (cast up), log_softmax + nll_loss; backward writes a
  // zero-filled fp32 gradient (4 B/logit) before log_softmax_backward (12 B/logit).
  const Workload w = Trace("gpt2", 2, 128);
  const Op* loss = nullptr;
  for (const Layer& l : w.layers) {
    for (const Op& op : l.ops) {
      if (op.kind == OpKind::kLoss) loss = &op;
    }
  }
  ASSERT_NE(loss, nullptr);
  const double logits = 2.0 * 128 * 50257;
  EXPECT_DOUBLE_EQ(At(KernelClass::kLogSoftmax, loss->eager.fwd), 8 * logits);
  EXPECT_DOUBLE_EQ(At(KernelClass::kStream, loss->eager.bwd), 4 * logits);
  EXPECT_DOUBLE_EQ(At(KernelClass::kLogSoftmax, loss->eager.bwd), 12 * logits);
  const Op* cast = FindOp(w, "logits_fp32");
  ASSERT_NE(cast, nullptr);
  EXPECT_DOUBLE_EQ(At(KernelClass::kCastUp, cast->eager.fwd), 6 * logits);
  EXPECT_DOUBLE_EQ(At(KernelClass::kCastDown, cast->eager.bwd), 6 * logits);
}

TEST(EagerKernels, GptTwoGeluIsEightTensorOps) {
  const Workload w = Trace("gpt2", 1, 64);
  const Op* act = FindOp(w, "h.0.mlp.act");
  ASSERT_NE(act, nullptr);
  EXPECT_EQ(act->kind, OpKind::kActivation);
  EXPECT_EQ(act->eager.fwd_kernels, 8);
  const double b = 64.0 * 3072 * 2;
  EXPECT_DOUBLE_EQ(Sum(act->eager.fwd), 18 * b);
}

TEST(EagerKernels, PricedAtTheMeasuredRatesOfTheirClasses) {
  auto hw = FindHardwareProfile("h200-measured", DSPLAN_TEST_DATA_DIR);
  ASSERT_TRUE(hw.ok());
  const CostModel pt(*hw, Precision::kBf16);
  const StackCosts& s = MeasuredStackCosts();
  // h200-measured is the machine the rates were measured on: no scaling (to the rounding of
  // the reference rate).
  EXPECT_NEAR(pt.EagerRate(KernelClass::kCastUp, false) / s.fwd_bytes_per_s[1], 1.0, 1e-4);
  Op op;
  op.kind = OpKind::kNorm;
  op.eager.Fwd(KernelClass::kCastUp, 6e9);
  op.eager.Fwd(KernelClass::kStream, 8e9);
  EXPECT_NEAR(pt.OpForwardSeconds(op) / (6e9 / 1.964e12 + 8e9 / 3.519e12), 1.0, 1e-4);
  // An op without a decomposition: its bytes at its kind's class.
  Op plain;
  plain.kind = OpKind::kDropout;
  plain.fwd_bytes = 5e9;
  EXPECT_NEAR(pt.OpForwardSeconds(plain) / (5e9 / 2.371e12), 1.0, 1e-4);
  // A GPU streaming at half the rate gets half the rates.
  HardwareProfile slow = *hw;
  slow.gpu.hbm_bytes_per_s.value /= 2;
  const CostModel ps(slow, Precision::kBf16);
  EXPECT_NEAR(ps.OpForwardSeconds(plain), 2 * pt.OpForwardSeconds(plain), 1e-12);
}

TEST(GemmAlignment, RatesTransferOnlyWithinAnAlignmentClass) {
  EXPECT_EQ(GemmAlignmentClass(50257, 2), 2);
  EXPECT_EQ(GemmAlignmentClass(256000, 2), 16);
  EXPECT_EQ(GemmAlignmentClass(1600, 2), 16);
  EXPECT_EQ(GemmAlignmentClass(50257, 4), 4);
  auto hw = FindHardwareProfile("h200-sxm", DSPLAN_TEST_DATA_DIR);
  ASSERT_TRUE(hw.ok());
  HardwareProfile p = *hw;
  // GPT-2's odd-width head runs align-1 kernels at 100 TFLOP/s; Llama's at 700.
  p.gpu.gemm = {{Precision::kBf16, 8192, 50257, 1600, 100e12, GemmLayout::kNT},
                {Precision::kBf16, 8192, 32000, 4096, 700e12, GemmLayout::kNT}};
  const CostModel cm(p, Precision::kBf16);
  // Gemma's 256000 x 2048 head is nearer GPT-2's shape in log space, but aligned like Llama's.
  const double t = cm.LinearGemmSeconds(GemmLayout::kNT, 8192, 256000, 2048);
  EXPECT_NEAR(t, 2.0 * 8192 * 256000 * 2048 / 700e12, 1e-9);
  // An odd width still gets the odd-width rate.
  const double odd = cm.LinearGemmSeconds(GemmLayout::kNT, 8192, 50257, 1600);
  EXPECT_NEAR(odd, 2.0 * 8192 * 50257 * 1600 / 100e12, 1e-9);
}

TEST(FamilyHost, BlocksTakeTheFamilysMeasuredHostTime) {
  auto hw = FindHardwareProfile("h200-measured", DSPLAN_TEST_DATA_DIR);
  ASSERT_TRUE(hw.ok());
  const CostModel pt(*hw, Precision::kBf16);
  const StackCosts& s = pt.stack_costs();  // the profile's measured section
  const FamilyBlockHost* llama = s.Block("llama", LayerKind::kDecoderBlock);
  ASSERT_NE(llama, nullptr);
  // One sample of 16 tokens: the GPU's share is tiny, the host's is the measurement.
  const Workload w = Trace("llama-3.2-1b", 1, 16);
  const std::vector<LayerCost> c = pt.Layers(w);
  const std::vector<LayerCost> unseen = pt.Layers(w, false);
  int blocks = 0;
  for (size_t i = 0; i < w.layers.size(); ++i) {
    if (w.layers[i].kind != LayerKind::kDecoderBlock) continue;
    ++blocks;
    EXPECT_DOUBLE_EQ(c[i].fwd_dispatch_s, llama->fwd_s);
    EXPECT_DOUBLE_EQ(c[i].bwd_dispatch_s, llama->bwd_s);
    EXPECT_DOUBLE_EQ(c[i].fwd_s, llama->fwd_s);
    EXPECT_EQ(c[i].modules, llama->modules);
    // Unseen (llama held out): the per-op estimate, its forward scaled by the other measured
    // families' measured / per-op ratio; the backward as estimated.
    TracedOps ops;
    for (const Op& op : w.layers[i].ops) ops.Add(op);
    const UnmeasuredHostScale scale = s.ScaleForUnmeasured("llama");
    EXPECT_GE(scale.families, 10);
    EXPECT_GT(scale.fwd, 1.5);  // the per-op estimate leaves out much of the forward's Python
    EXPECT_DOUBLE_EQ(unseen[i].fwd_dispatch_s, s.PerOpFwd(ops) * scale.fwd);
    EXPECT_DOUBLE_EQ(unseen[i].bwd_dispatch_s, s.PerOpBwd(ops));
    EXPECT_NE(unseen[i].fwd_dispatch_s, llama->fwd_s);
  }
  EXPECT_EQ(blocks, 16);
  // Under checkpointing: the wrapper's forward, and the recomputation's host time.
  const Workload wc = Trace("llama-3.2-1b", 1, 16, true);
  const std::vector<LayerCost> cc = pt.Layers(wc);
  for (size_t i = 0; i < wc.layers.size(); ++i) {
    if (wc.layers[i].kind != LayerKind::kDecoderBlock) continue;
    EXPECT_DOUBLE_EQ(cc[i].fwd_s, llama->ckpt_fwd_s);
    EXPECT_DOUBLE_EQ(cc[i].recompute_s, llama->ckpt_bwd_s - llama->bwd_s);
  }
}

// The measured families as dsplan traces them (StackCosts::traces) must be what the tracer gives
// for the catalog model each was measured with, at the probe's shape (one sample of 32 tokens):
// the table feeds the scale for families without a measurement, and would go stale silently.
TEST(FamilyHost, TheMeasuredFamiliesTracesAreTheTracers) {
  const StackCosts& s = MeasuredStackCosts();
  std::string table;
  for (const FamilyTrace& t : s.traces) {
    const Workload w = Trace(t.traced_from, 1, 32);
    EXPECT_EQ(w.spec.model_type, t.model_type) << t.traced_from;
    TracedOps got;
    bool found = false;
    for (const Layer& l : w.layers) {
      const bool block = l.kind == LayerKind::kEncoderBlock || l.kind == LayerKind::kDecoderBlock;
      if (t.kind == LayerKind::kEmbedding ? block : (l.kind != t.kind || found)) continue;
      for (const Op& op : l.ops) got.Add(op);
      found = true;
    }
    EXPECT_TRUE(found) << t.model_type << " " << LayerKindName(t.kind);
    EXPECT_EQ(got, t.ops) << t.model_type << " " << LayerKindName(t.kind);
    table += t.model_type + " " + LayerKindName(t.kind) + ": {";
    for (int32_t n : got.ops) table += std::to_string(n) + ", ";
    table += "}, " + std::to_string(got.fwd_extra_kernels) + ", " +
             std::to_string(got.bwd_extra_kernels) + "\n";
  }
  if (HasFailure()) ADD_FAILURE() << "what the tracer gives:\n" << table;
  // Every measured block and rest has its trace.
  for (const FamilyBlockHost& b : s.families) {
    bool traced = false;
    for (const FamilyTrace& t : s.traces) traced |= t.model_type == b.model_type && t.kind == b.kind;
    EXPECT_TRUE(traced) << b.model_type << " " << LayerKindName(b.kind);
  }
  for (const FamilyRestHost& r : s.rests) {
    bool traced = false;
    for (const FamilyTrace& t : s.traces) {
      traced |= t.model_type == r.model_type && t.kind == LayerKind::kEmbedding;
    }
    EXPECT_TRUE(traced) << r.model_type << " rest";
  }
}

// The scale for an unmeasured family is the median over the other measured families of measured
// / per-op forward host time; the held-out family's own measurement never enters it.
TEST(FamilyHost, AnUnmeasuredFamilysScaleComesFromTheOtherFamilies) {
  StackCosts s = MeasuredStackCosts();
  auto ratio = [&](const std::string& type) {
    for (const FamilyTrace& t : s.traces) {
      if (t.model_type == type && t.kind == LayerKind::kDecoderBlock) {
        return s.Block(type, t.kind)->fwd_s / s.PerOpFwd(t.ops);
      }
    }
    return 0.0;
  };
  const UnmeasuredHostScale all = s.ScaleForUnmeasured("");
  const UnmeasuredHostScale no_gpt2 = s.ScaleForUnmeasured("gpt2");
  EXPECT_EQ(all.families, static_cast<int>(s.rests.size()));
  EXPECT_EQ(no_gpt2.families, all.families - 1);
  // Changing gpt2's measurement moves every scale but the one that holds gpt2 out.
  for (FamilyBlockHost& f : s.families) {
    if (f.model_type == "gpt2") f.fwd_s *= 100;
  }
  for (FamilyRestHost& r : s.rests) {
    if (r.model_type == "gpt2") r.fwd_s *= 100;
  }
  EXPECT_DOUBLE_EQ(s.ScaleForUnmeasured("gpt2").fwd, no_gpt2.fwd);
  EXPECT_DOUBLE_EQ(s.ScaleForUnmeasured("gpt2").rest_fwd, no_gpt2.rest_fwd);
  EXPECT_GE(s.ScaleForUnmeasured("").fwd, all.fwd);
  // The scale lies among the measured ratios (a median).
  double lo = 1e9, hi = 0;
  for (const char* t : {"llama", "opt", "gpt_neox", "qwen2", "bloom", "gemma", "phi", "falcon",
                        "gptj", "mistral", "mixtral"}) {
    lo = std::min(lo, ratio(t));
    hi = std::max(hi, ratio(t));
  }
  EXPECT_GE(no_gpt2.fwd, lo);
  EXPECT_LE(no_gpt2.fwd, hi);
  // With fewer than three measured families there is nothing to take a median of: no scale.
  s.families.resize(2);
  s.rests.clear();
  const UnmeasuredHostScale few = s.ScaleForUnmeasured("");
  EXPECT_EQ(few.families, 0);
  EXPECT_EQ(few.fwd, 1);
  EXPECT_EQ(few.rest_fwd, 1);
}

// PyTorch's fused attention with attention dropout (GPT-2's attn_pdrop, BERT's
// attention_probs_dropout_prob) runs its forward slower than the SDPA table, which was measured
// without dropout: by the measured ratio, forward only. Llama has no attention dropout.
TEST(FusedAttention, DropoutSlowsTheForwardByTheMeasuredRatio) {
  auto hw = FindHardwareProfile("h200-measured", DSPLAN_TEST_DATA_DIR);
  ASSERT_TRUE(hw.ok());
  const CostModel pt(*hw, Precision::kBf16);
  const double ratio = pt.stack_costs().sdpa_dropout_fwd_ratio;
  EXPECT_GT(ratio, 2.0);
  EXPECT_LT(ratio, 2.4);
  const Workload wg = Trace("gpt2-xl", 11, 1024);
  const Workload wl = Trace("llama-3.2-1b", 22, 1024);
  const Op* gpt2 = FindOp(wg, "attn.sdpa");
  const Op* llama = FindOp(wl, "self_attn.sdpa");
  ASSERT_NE(gpt2, nullptr);
  ASSERT_NE(llama, nullptr);
  EXPECT_TRUE(gpt2->dropout);
  EXPECT_FALSE(llama->dropout);
  Op without = *gpt2;
  without.dropout = false;
  EXPECT_NEAR(pt.OpForwardSeconds(*gpt2), ratio * pt.OpForwardSeconds(without),
              1e-9 * pt.OpForwardSeconds(*gpt2));
  EXPECT_DOUBLE_EQ(pt.OpBackwardSeconds(*gpt2), pt.OpBackwardSeconds(without));
}

TEST(MathAttention, FalconsUpcastScoresArePricedAsFp32Products) {
  // SDPA's math path multiplies fp32 copies of q, k and the probabilities: cuBLAS runs FFMA
  // kernels, far below the bf16 tensor-core table.
  const Workload w = Trace("falcon-7b", 8, 1024);
  const Op* qk = FindOp(w, ".qk");
  ASSERT_NE(qk, nullptr);
  EXPECT_TRUE(qk->fp32);
  auto hw = FindHardwareProfile("h200-measured", DSPLAN_TEST_DATA_DIR);
  ASSERT_TRUE(hw.ok());
  const CostModel pt(*hw, Precision::kBf16);
  Op bf16 = *qk;
  bf16.fp32 = false;
  EXPECT_GT(pt.OpForwardSeconds(*qk), 4 * pt.OpForwardSeconds(bf16));
}

TEST(MathAttention, TheMaskIsAddedInPlaceAndTheWeightsAreCastBack) {
  // PyTorch 2.11's math SDPA (falcon-7b: one K/V head, no enable_gqa): attn.add_(mask) on the
  // fp32 scores, a broadcast of the [b, 1, s, s] mask over the heads with no backward kernel
  // (the scores' gradient passes through), and attn.to(bf16) returned as a second output (one
  // fp32 -> bf16 cast in forward, none in backward). Measured in falcon-7b's block at
  // micro-batch 9 (docs/stack-costs.md 8b): add_ 2.89 ms, the cast 0.92 ms, neither in backward.
  const int64_t b = 2, h = 71, s = 256;
  const double scores = static_cast<double>(b) * h * s * s;  // elements of [b, h, s, s]
  const Workload w = Trace("falcon-7b", b, s);
  const Op* add = FindOp(w, "h.0.self_attention.mask_add");
  ASSERT_NE(add, nullptr);
  EXPECT_DOUBLE_EQ(At(KernelClass::kBroadcast, add->eager.fwd), 4 * scores + b * s * s + 4 * scores);
  EXPECT_EQ(add->eager.bwd_kernels, 0);
  EXPECT_EQ(FindOp(w, "h.0.self_attention.scale_mask"), nullptr);
  const Op* cast = FindOp(w, "h.0.self_attention.weights_cast");
  ASSERT_NE(cast, nullptr);
  EXPECT_DOUBLE_EQ(At(KernelClass::kCastDown, cast->eager.fwd), 4 * scores + 2 * scores);
  EXPECT_EQ(cast->eager.bwd_kernels, 0);
  // The fused (cuDNN) path has neither: llama's SDPA takes the mask inside its one kernel.
  const Workload l = Trace("llama-3.2-1b", b, s);
  EXPECT_EQ(FindOp(l, "layers.0.self_attn.weights_cast"), nullptr);
  EXPECT_EQ(FindOp(l, "layers.0.self_attn.mask_add"), nullptr);
}

TEST(MathAttention, T5AddsItsPositionBiasAsABroadcastAndReducesItsGradient) {
  // T5's self-attention passes its relative position bias ([1, h, s, s], bf16, from the first
  // block's embedding) as SDPA's float mask; the bias's strided last dim sends it to the math
  // path, which adds it to the fp32 scores in place (attn.add_): the broadcast kernel over the
  // batch. The bias takes a gradient, so autograd sums the scores' gradient over the batch in
  // every block's backward (sum_to_size: the whole fp32 gradient read, [1, h, s, s] written).
  // Cross-attention's zero bias is contiguous and goes to cuDNN: no separate add there.
  const int64_t b = 2, s = 128;
  const Workload w = Trace("t5-small", b, s);
  const int64_t h = 8;
  const double scores = static_cast<double>(b) * h * s * s;
  const double bias = static_cast<double>(h) * s * s;
  const Op* add = FindOp(w, "encoder.block.1.layer.0.SelfAttention.mask_add");
  ASSERT_NE(add, nullptr);
  EXPECT_DOUBLE_EQ(At(KernelClass::kBroadcast, add->eager.fwd), 4 * scores + 2 * bias + 4 * scores);
  EXPECT_DOUBLE_EQ(At(KernelClass::kReduce, add->eager.bwd), 4 * scores + 4 * bias);
  EXPECT_EQ(add->eager.bwd_kernels, 1);
  EXPECT_EQ(FindOp(w, "encoder.block.1.layer.0.SelfAttention.scale_mask"), nullptr);
  EXPECT_NE(FindOp(w, "decoder.block.1.layer.0.SelfAttention.mask_add"), nullptr);
  EXPECT_EQ(FindOp(w, "decoder.block.1.layer.1.EncDecAttention.mask_add"), nullptr);
}

TEST(MathAttention, SoftmaxBackwardHoldsThreeBuffersOfTheProbabilities) {
  // CUDA's softmax backward computes tmp = grad * output before its kernel, so the block's
  // backward holds the probabilities' gradient, that temporary and the scores' gradient at once:
  // three fp32 [b, h, s, s] buffers (falcon-7b's peak was 2.0-2.1 % under without the third,
  // docs/validation/deepspeed/records-h200.jsonl). A fused-attention block keeps two.
  const int64_t b = 2, h = 71, s = 256;
  const Workload w = Trace("falcon-7b", b, s);
  bool found = false;
  for (const TensorSpec& t : w.tensors) {
    if (t.name == "transformer.h.0.self_attention.probs") {
      found = true;
      EXPECT_EQ(t.backward_extra_buffers, 1);
      EXPECT_EQ(t.bytes, 4 * b * h * s * s);
    }
  }
  EXPECT_TRUE(found);
  const std::vector<LayerParams> lp = ComputeLayerParams(w, 0);
  for (size_t i = 0; i < w.layers.size(); ++i) {
    if (w.layers[i].kind != LayerKind::kDecoderBlock) continue;
    EXPECT_EQ(lp[i].largest_saved_bytes, 4 * b * h * s * s) << w.layers[i].name;
    EXPECT_EQ(lp[i].backward_work_buffers, 3) << w.layers[i].name;
  }
  const Workload l = Trace("llama-3.2-1b", b, s);
  const std::vector<LayerParams> ll = ComputeLayerParams(l, 0);
  for (size_t i = 0; i < l.layers.size(); ++i) {
    if (l.layers[i].kind == LayerKind::kDecoderBlock) EXPECT_EQ(ll[i].backward_work_buffers, 2);
  }
}

}  // namespace
}  // namespace dsplan

namespace dsplan {
namespace {

TEST(EagerKernels, RotaryOpsRunInTheKernelClassOfTheirOperandsLayout) {
  // pythia-1.4b (batch 1, 128 tokens): q is a view into the fused q|k|v projection, [1, 16, 128,
  // 128] bf16 = 524288 bytes (B), rotary_dim 32: the rotated part is b = B / 4 = 131072 bytes.
  // Bytes by class, from transformers' apply_rotary_pos_emb (docs/stack-costs.md section 2).
  const double B = 524288, b = 131072;
  const Workload p = Trace("pythia-1.4b", 1, 128);
  const Op* rq = FindOp(p, "layers.0.attention.rotary_q");
  ASSERT_NE(rq, nullptr);
  // Forward: x_rot * cos and neg (strided), rotate_half's cat, * sin (broadcast), the add of a
  // strided-layout and a contiguous product, the cat with the pass-through slice.
  EXPECT_DOUBLE_EQ(At(KernelClass::kStridedMul, rq->eager.fwd), 3 * b);
  EXPECT_DOUBLE_EQ(At(KernelClass::kRotateHalf, rq->eager.fwd), 2 * b);
  EXPECT_DOUBLE_EQ(At(KernelClass::kBroadcast, rq->eager.fwd), 2 * b);
  EXPECT_DOUBLE_EQ(At(KernelClass::kMixedLayout, rq->eager.fwd), 3 * b);
  EXPECT_DOUBLE_EQ(At(KernelClass::kCatStrided, rq->eager.fwd), 2 * B);
  EXPECT_DOUBLE_EQ(Sum(rq->eager.fwd), 10 * b + 2 * B);
  // Backward: two broadcast muls, neg, the halves' zero-fills and copies, two accumulations;
  // the partial slices' zero-fills, copies and sum; no copy back (the fused split does it).
  EXPECT_DOUBLE_EQ(At(KernelClass::kBroadcast, rq->eager.bwd), 4 * b);
  EXPECT_DOUBLE_EQ(At(KernelClass::kStridedMul, rq->eager.bwd), 3 * b + 2 * B);
  EXPECT_DOUBLE_EQ(At(KernelClass::kStream, rq->eager.bwd), 2 * b + 5 * B);
  EXPECT_DOUBLE_EQ(At(KernelClass::kMixedLayout, rq->eager.bwd), 6 * b);
  EXPECT_EQ(At(KernelClass::kPermuteCopy, rq->eager.bwd), 0);
  // The fused projection's split: the gradients' cat and the copy back, 2 x [1, 128, 6144] bf16
  // (1572864 bytes) each, nothing forward.
  const Op* split = FindOp(p, "layers.0.attention.qkv_split");
  ASSERT_NE(split, nullptr);
  EXPECT_EQ(Sum(split->eager.fwd), 0);
  EXPECT_DOUBLE_EQ(At(KernelClass::kCatStrided, split->eager.bwd), 2 * 1572864.0);
  EXPECT_DOUBLE_EQ(At(KernelClass::kPermuteCopy, split->eager.bwd), 2 * 1572864.0);

  // llama-3.2-1b rotates the whole head of q, a transposed view of q_proj: [1, 32, 128, 64]
  // bf16 = 524288 bytes; no pass-through cat, and the gradient is copied back to q_proj's layout.
  const double L = 524288;
  const Workload l = Trace("llama-3.2-1b", 1, 128);
  const Op* lq = FindOp(l, "layers.0.self_attn.rotary_q");
  ASSERT_NE(lq, nullptr);
  EXPECT_DOUBLE_EQ(At(KernelClass::kStridedMul, lq->eager.fwd), 3 * L);
  EXPECT_DOUBLE_EQ(At(KernelClass::kMixedLayout, lq->eager.fwd), 3 * L);
  EXPECT_EQ(At(KernelClass::kCatStrided, lq->eager.fwd), 0);
  EXPECT_DOUBLE_EQ(At(KernelClass::kPermuteCopy, lq->eager.bwd), 2 * L);
  EXPECT_EQ(FindOp(l, "layers.0.self_attn.qkv_split"), nullptr);
}

TEST(EagerKernels, ALinearsBiasGradientIsAStreamingReductionOfItsOutputGradient) {
  // pythia-1.4b's dense_h_to_4h has a bias: the backward reads dY [128, 8192] bf16 and writes the
  // [8192] gradient (2 x (128 x 8192 + 8192) bytes). llama's projections have none.
  const Workload p = Trace("pythia-1.4b", 1, 128);
  const Op* fc1 = FindOp(p, "layers.0.mlp.dense_h_to_4h");
  ASSERT_NE(fc1, nullptr);
  EXPECT_DOUBLE_EQ(At(KernelClass::kStream, fc1->eager.bwd), 2.0 * (128 * 8192 + 8192));
  EXPECT_DOUBLE_EQ(Sum(fc1->eager.bwd), At(KernelClass::kStream, fc1->eager.bwd));
  EXPECT_EQ(Sum(fc1->eager.fwd), 0);
  const Workload l = Trace("llama-3.2-1b", 1, 128);
  const Op* up = FindOp(l, "layers.0.mlp.up_proj");
  ASSERT_NE(up, nullptr);
  EXPECT_TRUE(up->eager.empty());
  // Priced in the PyTorch stack's backward as memory-bound time on top of the two GEMMs.
  auto profile = FindHardwareProfile("h200-measured", DSPLAN_TEST_DATA_DIR);
  ASSERT_TRUE(profile.ok());
  const CostModel m(*profile, Precision::kBf16);
  Op no_bias = *fc1;
  no_bias.eager = EagerWork{};
  EXPECT_NEAR(m.OpBackwardSeconds(*fc1) - m.OpBackwardSeconds(no_bias),
              2.0 * (128 * 8192 + 8192) / m.EagerRate(KernelClass::kStream, true), 1e-12);
}

// A GPU optimizer step's task as the builder writes it: 10 GB of fp64 copies, 8 GB of fp64
// norms, 6 GB of widening casts, |adam| bytes of the inner optimizer and |flat| bytes of the
// flat passes, over 10 parameter tensors at ZeRO stage |stage|; and the time the cost model
// gives its fp64 and widening parts (the same in every profile's pricing).
Task GpuStepTask(double adam, double flat, int stage) {
  Task t;
  t.kind = TaskKind::kGpuOptimizer;
  t.fp64_cast_bytes = 10e9;
  t.fp64_norm_bytes = 8e9;
  t.cast_up_bytes = 6e9;
  t.adam_bytes = adam;
  t.bytes = 10e9 + 8e9 + 6e9 + adam + flat;
  t.step_param_tensors = 10;
  t.step_stage = static_cast<int8_t>(stage);
  return t;
}

double NormAndCastSeconds(const CostModel& m) {
  const StackCosts& s = m.stack_costs();
  const double scale = m.EagerRate(KernelClass::kStream, false) /
                       s.fwd_bytes_per_s[static_cast<int>(KernelClass::kStream)];
  return 10e9 / (s.fp64_cast_bytes_per_s * scale) + 8e9 / (s.fp64_norm_bytes_per_s * scale) +
         6e9 / m.EagerRate(KernelClass::kCastUp, false);
}

TEST(OptimizerStepCost, TakesTheLongerOfItsPassesAndTheHostsWalkOverTensors) {
  auto profile = FindHardwareProfile("h200-measured", DSPLAN_TEST_DATA_DIR);
  ASSERT_TRUE(profile.ok());
  const CostModel m(*profile, Precision::kBf16);
  const StackCosts& s = m.stack_costs();
  // GPU-bound: 10 GB of fp64 copies, 8 GB of fp64 norms, 6 GB of widening casts, 30 GB of the
  // rest, over 10 tensors (host 2.5 ms).
  const Task t = GpuStepTask(0, 30e9, 2);
  const double gpu = NormAndCastSeconds(m) + 30e9 / m.EagerRate(KernelClass::kStream, false);
  EXPECT_NEAR(m.PyTorchOptimizerSeconds(t, 1e-5), gpu, 1e-9);
  // Host-bound: a small partition in 2,000 tensors at stage 3.
  Task h = t;
  h.fp64_cast_bytes = h.fp64_norm_bytes = h.cast_up_bytes = 0;
  h.bytes = 1e6;
  h.step_param_tensors = 2000;
  h.step_stage = 3;
  EXPECT_NEAR(m.PyTorchOptimizerSeconds(h, 1e-5), s.z3_step_s + 2000 * s.z3_step_per_param_s,
              1e-12);
  EXPECT_GT(s.z3_step_per_param_s, s.z12_step_per_param_s);
}

}  // namespace
}  // namespace dsplan

namespace dsplan {
namespace {

TEST(OptimizerStepCost, Bf16OptimizersKernelsAfterItsLastSyncFollowItsHostLoops) {
  auto profile = FindHardwareProfile("h200-measured", DSPLAN_TEST_DATA_DIR);
  ASSERT_TRUE(profile.ok());
  const CostModel m(*profile, Precision::kBf16);
  const StackCosts& s = m.stack_costs();
  const double stream = m.EagerRate(KernelClass::kStream, false);
  // 300 tensors, 1 GB of kernels of which 0.8 GB after the last synchronisation: the host's
  // loops (with the clip loop) and then those kernels, not the longer of the two.
  Task t;
  t.kind = TaskKind::kGpuOptimizer;
  t.bytes = 1e9;
  t.after_sync_bytes = 0.8e9;
  t.step_param_tensors = 300;
  t.step_stage = 0;
  t.step_clip = true;
  const double host = s.bf16_clip_step_s + 300 * s.bf16_clip_step_per_param_s;
  EXPECT_NEAR(m.PyTorchOptimizerSeconds(t, 1e-5), host + 0.8e9 / stream, 1e-12);
  // Without the clip loop the host's part is the smaller measurement.
  t.step_clip = false;
  EXPECT_NEAR(m.PyTorchOptimizerSeconds(t, 1e-5),
              s.bf16_step_s + 300 * s.bf16_step_per_param_s + 0.8e9 / stream, 1e-12);
  EXPECT_GT(s.bf16_clip_step_per_param_s, s.bf16_step_per_param_s);
  // A GPU-bound step is its kernels.
  t.bytes = 400e9;
  EXPECT_NEAR(m.PyTorchOptimizerSeconds(t, 1e-5), 400e9 / stream, 1e-9);
}

TEST(EagerKernels, GradCopyCastsRunAtTheirClassesRates) {
  auto profile = FindHardwareProfile("h200-measured", DSPLAN_TEST_DATA_DIR);
  ASSERT_TRUE(profile.ok());
  const CostModel m(*profile, Precision::kBf16);
  Task t;
  t.kind = TaskKind::kGradCopy;
  t.cast_up_bytes = 6e9;
  t.cast_down_bytes = 3e9;
  t.bytes = 21e9;
  t.kernels = 2;
  const double want = 6e9 / m.EagerRate(KernelClass::kCastUp, false) +
                      3e9 / m.EagerRate(KernelClass::kCastDown, false) +
                      12e9 / m.EagerRate(KernelClass::kStream, false);
  EXPECT_NEAR(m.TaskSeconds(t, {}, 1), want, 1e-12);
  // The widening cast is the slower class.
  EXPECT_LT(m.EagerRate(KernelClass::kCastUp, false), m.EagerRate(KernelClass::kStream, false));
}

TEST(EagerKernels, BloomsAlibiMaskAndGeluRunAsTheirTensorOps) {
  // transformers' BLOOM: alibi.baddbmm expands ALiBi into the scores, + causal_mask broadcasts
  // over heads (unvectorized), and BloomGelu in training is a Python autograd Function of 9
  // tensor ops forward and 18 backward.
  const Workload w = Trace("bloom-560m", 2, 128);
  const Op* bias = FindOp(w, "h.0.self_attention.bias_baddbmm");
  const Op* mask = FindOp(w, "h.0.self_attention.mask_add");
  const Op* gelu = FindOp(w, "h.0.mlp.act");
  ASSERT_NE(bias, nullptr);
  ASSERT_NE(mask, nullptr);
  ASSERT_NE(gelu, nullptr);
  const double scores = 2.0 * 2 * 16 * 128 * 128;  // bf16 [b, h, s, s]
  EXPECT_DOUBLE_EQ(At(KernelClass::kBroadcast, bias->eager.fwd), 2 * scores);
  EXPECT_DOUBLE_EQ(Sum(bias->eager.bwd), 0);
  EXPECT_DOUBLE_EQ(At(KernelClass::kBroadcast, mask->eager.fwd), 2 * scores + scores / 16);
  EXPECT_DOUBLE_EQ(Sum(mask->eager.bwd), 0);
  EXPECT_EQ(gelu->eager.fwd_kernels, 9);
  EXPECT_EQ(gelu->eager.bwd_kernels, 18);
  const double x = 2.0 * 2 * 128 * 4096;  // bf16 [b, s, 4h]
  EXPECT_DOUBLE_EQ(Sum(gelu->eager.fwd), 21 * x);
  EXPECT_DOUBLE_EQ(Sum(gelu->eager.bwd), 44 * x);
  // The broadcast class is measured slower than streaming.
  auto profile = FindHardwareProfile("h200-measured", DSPLAN_TEST_DATA_DIR);
  ASSERT_TRUE(profile.ok());
  const CostModel m(*profile, Precision::kBf16);
  EXPECT_LT(m.EagerRate(KernelClass::kBroadcast, false),
            0.5 * m.EagerRate(KernelClass::kStream, false));
  // Other families keep the generic scale-and-mask op.
  const Workload g = Trace("gpt2", 1, 128, false, AttentionImpl::kEager);
  EXPECT_EQ(FindOp(g, "h.0.attn.mask_add"), nullptr);
  EXPECT_EQ(FindOp(g, "h.0.attn.bias_baddbmm"), nullptr);
}

}  // namespace
}  // namespace dsplan

namespace dsplan {
namespace {

// A profile that measured the optimizer step's kernels (stack.optimizer_kernels: the H100's,
// session 34) prices each part of the step at its own rate: the fp64 copies and norms, the passes
// over flat tensors, FusedAdam or torch.optim's AdamW; a kernel the section lacks at the
// streaming class. Fails if the Adam bytes or the flat passes fall back to the class.
TEST(OptimizerStepCost, EachKernelAtTheRateTheProfileMeasured) {
  auto profile = FindHardwareProfile("h100-measured", DSPLAN_TEST_DATA_DIR);
  ASSERT_TRUE(profile.ok());
  ASSERT_TRUE(profile->stack.optimizer_kernels);
  const CostModel m(*profile, Precision::kBf16);
  const StackCosts& s = m.stack_costs();
  const double stream = m.EagerRate(KernelClass::kStream, false);
  const double scale = stream / s.fwd_bytes_per_s[static_cast<int>(KernelClass::kStream)];
  ASSERT_GT(s.torch_adam_bytes_per_s, 0);
  ASSERT_GT(s.fused_adam_bytes_per_s, 0);
  ASSERT_GT(s.step_flat_bytes_per_s, 0);
  Task t = GpuStepTask(72e9, 20e9, 1);
  t.torch_adam = true;
  const double common = NormAndCastSeconds(m) + 20e9 / (s.step_flat_bytes_per_s * scale);
  EXPECT_NEAR(m.PyTorchOptimizerSeconds(t, 1e-5),
              common + 72e9 / (s.torch_adam_bytes_per_s * scale), 1e-9);
  t.torch_adam = false;  // FusedAdam
  EXPECT_NEAR(m.PyTorchOptimizerSeconds(t, 1e-5),
              common + 72e9 / (s.fused_adam_bytes_per_s * scale), 1e-9);
  // The measured rates differ from the class's, so the test tells them apart.
  EXPECT_GT(std::abs(s.torch_adam_bytes_per_s * scale / stream - 1), 0.02);
  EXPECT_GT(std::abs(s.step_flat_bytes_per_s * scale / stream - 1), 0.02);
  // A kernel the section did not measure: the streaming class.
  HardwareProfile no_fused = *profile;
  no_fused.stack.fused_adam_bytes_per_s = 0;
  const CostModel n(no_fused, Precision::kBf16);
  EXPECT_NEAR(n.PyTorchOptimizerSeconds(t, 1e-5), common + 72e9 / stream, 1e-9);
}

}  // namespace
}  // namespace dsplan
