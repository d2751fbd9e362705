// Real math on the GPU: a GPT-2 trainer written here (CUDA kernels for every non-GEMM op,
// forward and backward, cuBLASLt GEMMs, AdamW with fp32 master weights) shown to learn a
// synthetic copy task, and timed on a real-size GPT-2.
//
// The copy task: each sequence is L random tokens, a separator, then the same L tokens
// (S = 2L+1 tokens). The model reads the first 2L tokens and predicts the next token at each
// position; only the L predictions of the copied half enter the loss (the first half is random
// and cannot be learned). A model that has learned the task drives that loss toward 0 from
// ln(V-1) at the start.
//
// Without CUDA (no toolkit at build time) both entry points return Status::Unsupported.
// This header includes no CUDA header. Method and measured numbers: docs/runtime-math.md.
#ifndef DSPLAN_RUNTIME_REFERENCE_TRAINERS_COPY_TASK_H_
#define DSPLAN_RUNTIME_REFERENCE_TRAINERS_COPY_TASK_H_

#include <cstdint>
#include <string>
#include <vector>

#include "core/model_spec.h"
#include "core/status.h"

namespace dsplan {

/// The tiny default model of the copy task: GPT-2 with 2 layers, hidden 128, 4 heads, vocab 64,
/// MLP 512, 64 positions, gelu_new, tied embeddings.
ModelSpec TinyCopyTaskSpec();

struct CopyTaskOptions {
  ModelSpec spec = TinyCopyTaskSpec();  // family gpt2 with a GELU activation
  int micro_batch = 64;                 // sequences per step
  int copy_len = 16;                    // L: tokens copied (the model sees 2L positions)
  int steps = 400;
  float lr = 1e-3f;                     // peak; linear warm-up over warmup_steps, then cosine to lr/10
  int warmup_steps = 20;
  float weight_decay = 0.0f;
  bool bf16 = true;                     // bf16 params/activations, fp32 master; false: all fp32
  uint64_t seed = 1;                    // weights and data
  int device = 0;
  float learned_loss = 0.5f;            // "learned" when the mean loss of the last 10 steps is below
};

struct CopyTaskReport {
  std::vector<float> loss;  // per step, mean cross-entropy (nats) over the copied positions
  float initial_loss = 0;   // loss[0]
  float final_loss = 0;     // mean of the last min(10, steps) losses
  float chance_loss = 0;    // ln(V-1): guessing uniformly among the data tokens
  int first_step_below = -1;  // first step whose loss < learned_loss, -1 if none
  bool learned = false;
  double seconds = 0;       // wall time of the steps (including per-step loss read-back)
  double tokens_per_s = 0;  // model positions (B * 2L) per second
  int64_t params = 0;
  std::string device;
};

/// Trains a fresh model on the copy task. Errors: InvalidArgument for bad sizes, Unsupported for
/// a family other than gpt2 (or a non-GELU activation) and for builds without CUDA, CudaError
/// for device failures.
Result<CopyTaskReport> RunCopyTask(const CopyTaskOptions& options);

struct GptStepTiming {
  std::string model;
  std::string device;
  int micro_batch = 0;
  int seq_len = 0;
  int steps = 0;               // timed steps (after 3 warm-up steps)
  int64_t params = 0;          // N
  double step_s_median = 0;    // one full step: forward, backward, AdamW
  double step_s_mean = 0;
  // Medians over the timed steps of each phase's device time (CUDA events): forward (to the
  // loss), backward (including zeroing the gradients), AdamW.
  double forward_s = 0;
  double backward_s = 0;
  double optimizer_s = 0;
  double tokens_per_s = 0;     // micro_batch * seq_len / median step
  // Flops counted per step: 6 N tokens (every parameter in one multiply-add forward and two
  // backward, which counts the tied LM head once through wte) plus attention's score and value
  // products, 12 L T C per token (forward + backward, full T x T as computed).
  double flops_per_step = 0;
  double tflops = 0;           // flops_per_step / median step / 1e12
  double mfu = 0;              // tflops / 989 (H100/H200 SXM dense bf16 peak)
  double device_gib = 0;       // memory the trainer allocated
  float last_loss = 0;         // loss of the last step (random tokens: about ln V)
};

/// Times full bf16 training steps (fwd + bwd + AdamW) of |spec| (family gpt2) on random tokens.
Result<GptStepTiming> TimeGptStep(const ModelSpec& spec, int micro_batch, int seq_len, int steps,
                                  int device = 0);

}  // namespace dsplan

#endif  // DSPLAN_RUNTIME_REFERENCE_TRAINERS_COPY_TASK_H_
