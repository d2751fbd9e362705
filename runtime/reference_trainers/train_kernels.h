// The GPT-2 trainer's CUDA side: kernels (forward and backward), cuBLASLt GEMMs and a trainer
// that runs full training steps (forward, backward, AdamW) on one GPU.
//
// This header is included both by train_kernels.cu (nvcc, C++17) and by host C++20 code, so it
// holds no CUDA include and does not use core/status.h (whose defaulted operator== is C++20):
// every function returns a std::string that is empty on success and holds the error otherwise.
// copy_task.cc turns those into Status. Method and numbers: docs/runtime-math.md.
#ifndef DSPLAN_RUNTIME_REFERENCE_TRAINERS_TRAIN_KERNELS_H_
#define DSPLAN_RUNTIME_REFERENCE_TRAINERS_TRAIN_KERNELS_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace dsplan {
namespace train {

/// Number of CUDA devices visible (0 when none, or when the driver is missing).
int CudaDeviceCount();

/// A GPT-2 (GPT2LMHeadModel) architecture: pre-LN blocks, fused qkv, learned positions, tanh
/// GELU, tied LM head. Sizes of one training step.
struct GptConfig {
  int batch = 1;        // B: sequences per step
  int seq = 32;         // T: positions per sequence (<= max_pos)
  int hidden = 128;     // C
  int layers = 2;       // L
  int heads = 4;        // NH (C % NH == 0)
  int vocab = 64;       // V
  int ffn = 512;        // F: MLP inner size (4 C for GPT-2)
  int max_pos = 64;     // rows of the position table
  float eps = 1e-5f;    // LayerNorm epsilon
  bool bf16 = true;     // bf16 params/activations (fp32 master, grads, states); false: all fp32
  uint64_t seed = 1;    // weight init
};

/// AdamW hyperparameters of one step.
struct AdamWParams {
  float lr = 1e-3f;
  float beta1 = 0.9f;
  float beta2 = 0.95f;
  float eps = 1e-8f;
  float weight_decay = 0.0f;  // decoupled; applied to weight matrices and embeddings only
};

class GptTrainer {
 public:
  /// Allocates parameters (initialised as GPT-2 does: N(0, 0.02), residual projections
  /// N(0, 0.02/sqrt(2L)), LayerNorm 1/0, biases 0), optimizer states and activations.
  static std::string Create(const GptConfig& config, int device, std::unique_ptr<GptTrainer>* out);
  ~GptTrainer();
  GptTrainer(const GptTrainer&) = delete;
  GptTrainer& operator=(const GptTrainer&) = delete;

  /// One training step on B*T input tokens and B*T targets (host arrays, row-major [B, T]);
  /// a target < 0 is left out of the loss. The loss is the mean cross-entropy over the targets
  /// kept. When |loss| is null the step is only enqueued (no synchronisation); else the call
  /// waits and writes the step's loss (computed before the update).
  std::string Step(const int32_t* inputs, const int32_t* targets, const AdamWParams& opt,
                   float* loss);
  /// Waits for all enqueued work; reports any asynchronous error.
  std::string Synchronize();
  /// Device time (CUDA events) of the last step's phases: forward (embedding to loss),
  /// backward (to the embedding gradients, including zeroing the gradients) and AdamW. Waits
  /// for the step to finish.
  std::string LastStepPhases(double* forward_s, double* backward_s, double* optimizer_s);

  // Test hooks (the whole-model gradient check): parameter tensors of the fp32 master buffer,
  // the loss (and gradients) at the current weights without an update, and the master weights
  // (setting them re-derives the working copy).
  struct ParamInfo {
    std::string name;  // "wte", "h0.qkv_w", ...
    int64_t offset = 0;
    int64_t size = 0;  // wte: V rows (the padding rows are left out)
  };
  std::vector<ParamInfo> Params() const;
  std::string Evaluate(const int32_t* inputs, const int32_t* targets, float* loss,
                       std::vector<float>* grad /* null: forward only */);
  std::string GetMaster(std::vector<float>* master);
  std::string SetMaster(const std::vector<float>& master);

  std::string device_name() const;
  /// Parameters of the model (wte counted with V rows, wpe with max_pos rows).
  int64_t num_params() const;
  /// Bytes this trainer allocated on the device.
  int64_t device_bytes() const;

  struct Impl;  // internal (train_kernels.cu)

 private:
  explicit GptTrainer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// Host-vector entry points for the kernel tests: each uploads its inputs (rounded to bf16 when
// |bf16|), poisons its outputs with NaN, runs the kernel once and downloads the results as float.
// Layouts are row-major as in the trainer.
namespace check {

std::string LayerNormFwd(bool bf16, int n, int c, const std::vector<float>& x,
                         const std::vector<float>& w, const std::vector<float>& b, float eps,
                         std::vector<float>* out, std::vector<float>* mean,
                         std::vector<float>* rstd);
/// dx = (accumulate ? dx_in : 0) + dL/dx; dw, db: fp32, summed over rows.
std::string LayerNormBwd(bool bf16, int n, int c, const std::vector<float>& dout,
                         const std::vector<float>& x, const std::vector<float>& w,
                         const std::vector<float>& mean, const std::vector<float>& rstd,
                         const std::vector<float>& dx_in, bool accumulate, std::vector<float>* dx,
                         std::vector<float>* dw, std::vector<float>* db);
std::string GeluFwd(bool bf16, const std::vector<float>& x, std::vector<float>* out);
std::string GeluBwd(bool bf16, const std::vector<float>& x, const std::vector<float>& dy,
                    std::vector<float>* dx);
/// Rows of length t; row r is query position r % t. s is fp32; p is bf16 or fp32.
std::string CausalSoftmaxFwd(bool bf16, int rows, int t, const std::vector<float>& s,
                             std::vector<float>* p);
/// dp fp32; p and ds bf16 or fp32.
std::string CausalSoftmaxBwd(bool bf16, int rows, int t, const std::vector<float>& p,
                             const std::vector<float>& dp, std::vector<float>* ds);
std::string EmbeddingFwd(bool bf16, int b, int t, int c, const std::vector<int32_t>& tokens,
                         const std::vector<float>& wte, const std::vector<float>& wpe,
                         std::vector<float>* out);
/// dwte [V, C] and dwpe [t, C] in fp32 (|vocab| rows of dwte).
std::string EmbeddingBwd(bool bf16, int b, int t, int c, int vocab,
                         const std::vector<int32_t>& tokens, const std::vector<float>& dout,
                         std::vector<float>* dwte, std::vector<float>* dwpe);
std::string ResidualAdd(bool bf16, const std::vector<float>& a, const std::vector<float>& b,
                        std::vector<float>* out);
/// db[j] = sum over rows of dout[row, j], fp32.
std::string BiasGrad(bool bf16, int n, int oc, const std::vector<float>& dout,
                     std::vector<float>* db);
/// logits [n, vp] (columns >= v are padding); loss per row and dlogits = d(mean loss)/dlogits
/// over the rows whose target >= 0.
std::string CrossEntropy(bool bf16, int n, int v, int vp, const std::vector<float>& logits,
                         const std::vector<int32_t>& targets, std::vector<float>* losses,
                         std::vector<float>* dlogits);
/// One AdamW step at step number |t| (1-based) on fp32 master/m/v/grad; |param| is the
/// bf16/fp32 copy written from the new master.
std::string AdamW(bool bf16, const AdamWParams& p, int t, std::vector<float>* master,
                  const std::vector<float>& grad, std::vector<float>* m, std::vector<float>* v,
                  std::vector<float>* param);
/// Row-major D[M,N] = alpha op(A) op(B) (+ bias[N]) through cuBLASLt, batched with packed
/// strides; A, B bf16 or fp32; D fp32 when |d_fp32|, else the operand type.
std::string Gemm(bool bf16, bool ta, bool tb, int m, int n, int k, int batch, float alpha,
                 const std::vector<float>& a, const std::vector<float>& b,
                 const std::vector<float>* bias, bool d_fp32, std::vector<float>* d);
/// Multi-head causal self-attention core: qkv [B,T,3C] -> y [B,T,C] (permute, scaled QK^T,
/// causal softmax, PV, unpermute), and its backward: dy -> dqkv.
std::string Attention(bool bf16, int b, int t, int c, int nh, const std::vector<float>& qkv,
                      const std::vector<float>& dy, std::vector<float>* y,
                      std::vector<float>* dqkv);

}  // namespace check
}  // namespace train
}  // namespace dsplan

#endif  // DSPLAN_RUNTIME_REFERENCE_TRAINERS_TRAIN_KERNELS_H_
