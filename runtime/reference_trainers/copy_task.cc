// RunCopyTask and TimeGptStep on top of the CUDA trainer (train_kernels.cu). Host code only:
// the data, the learning-rate schedule, the timing and the Status conversion.
#include "runtime/reference_trainers/copy_task.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <memory>
#include <random>

#include <fmt/format.h>

#include "runtime/reference_trainers/train_kernels.h"

namespace dsplan {
namespace {

using Clock = std::chrono::steady_clock;

Status FromErr(const std::string& err, const char* what) {
  if (err.empty()) return Status();
  return Status::CudaError(fmt::format("{}: {}", what, err));
}

// The trainer's config from a gpt2 ModelSpec.
Result<train::GptConfig> ConfigFromSpec(const ModelSpec& s, int batch, int seq) {
  if (s.family != Family::kGpt2) {
    return Status::Unsupported(fmt::format(
        "the CUDA trainer implements GPT-2 (model_type gpt2) only; '{}' is model_type {}", s.name,
        s.model_type));
  }
  if (s.activation != Activation::kGeluNew && s.activation != Activation::kGeluTanh &&
      s.activation != Activation::kGeluFast && s.activation != Activation::kGelu) {
    return Status::Unsupported(fmt::format(
        "the CUDA trainer implements the tanh GELU (gelu_new); '{}' uses {}", s.name,
        ActivationName(s.activation)));
  }
  if (s.hidden_size <= 0 || s.num_heads <= 0 || s.num_layers <= 0 || s.vocab_size < 3 ||
      s.max_positions <= 0) {
    return Status::InvalidArgument(fmt::format("model '{}': sizes must be positive (vocab >= 3)",
                                               s.name));
  }
  if (s.hidden_size % s.num_heads != 0) {
    return Status::InvalidArgument(fmt::format(
        "model '{}': hidden size {} is not divisible by {} heads", s.name, s.hidden_size,
        s.num_heads));
  }
  if (batch < 1) return Status::InvalidArgument("micro-batch must be >= 1");
  if (seq < 1 || seq > s.max_positions) {
    return Status::InvalidArgument(fmt::format(
        "sequence length {} must be in [1, {}] (the model's position table)", seq,
        s.max_positions));
  }
  const int64_t big = int64_t{1} << 31;
  if (s.hidden_size >= big / 4 || s.vocab_size >= big || int64_t{batch} * seq >= big / 64) {
    return Status::InvalidArgument("sizes too large for the trainer's 32-bit GEMM dimensions");
  }
  train::GptConfig c;
  c.batch = batch;
  c.seq = seq;
  c.hidden = static_cast<int>(s.hidden_size);
  c.layers = static_cast<int>(s.num_layers);
  c.heads = static_cast<int>(s.num_heads);
  c.vocab = static_cast<int>(s.vocab_size);
  c.ffn = static_cast<int>(s.intermediate_size > 0 ? s.intermediate_size : 4 * s.hidden_size);
  c.max_pos = static_cast<int>(s.max_positions);
  c.eps = static_cast<float>(s.norm_eps);
  return c;
}

Status NeedDevice() {
  if (train::CudaDeviceCount() == 0) {
    return Status::CudaError("no CUDA device is visible (check the driver and CUDA_VISIBLE_DEVICES)");
  }
  return Status();
}

}  // namespace

Result<CopyTaskReport> RunCopyTask(const CopyTaskOptions& o) {
  if (o.copy_len < 1) return Status::InvalidArgument("copy length must be >= 1");
  if (o.steps < 1) return Status::InvalidArgument("steps must be >= 1");
  if (!(o.lr > 0) || !std::isfinite(o.lr)) return Status::InvalidArgument("lr must be > 0");
  const int t = 2 * o.copy_len;
  DSPLAN_ASSIGN_OR_RETURN(train::GptConfig cfg, ConfigFromSpec(o.spec, o.micro_batch, t));
  cfg.bf16 = o.bf16;
  cfg.seed = o.seed;
  DSPLAN_RETURN_IF_ERROR(NeedDevice());
  std::unique_ptr<train::GptTrainer> tr;
  DSPLAN_RETURN_IF_ERROR(FromErr(train::GptTrainer::Create(cfg, o.device, &tr), "trainer"));

  const int v = cfg.vocab, sep = v - 1;
  std::mt19937_64 rng(o.seed ^ 0x5eedull);
  std::uniform_int_distribution<int> tok(0, v - 2);
  const size_t n = static_cast<size_t>(cfg.batch) * t;
  std::vector<int32_t> in(n), tg(n);
  std::vector<int32_t> seqbuf(t + 1);

  CopyTaskReport r;
  r.device = tr->device_name();
  r.params = tr->num_params();
  r.chance_loss = std::log(static_cast<float>(v - 1));
  r.loss.reserve(o.steps);
  train::AdamWParams opt;
  opt.weight_decay = o.weight_decay;
  const auto t0 = Clock::now();
  for (int step = 0; step < o.steps; ++step) {
    for (int b = 0; b < cfg.batch; ++b) {
      for (int i = 0; i < o.copy_len; ++i) seqbuf[i] = tok(rng);
      seqbuf[o.copy_len] = sep;
      for (int i = 0; i < o.copy_len; ++i) seqbuf[o.copy_len + 1 + i] = seqbuf[i];
      for (int i = 0; i < t; ++i) {
        in[b * t + i] = seqbuf[i];
        // Position i predicts token i+1; only the copied half (i >= L) counts.
        tg[b * t + i] = i >= o.copy_len ? seqbuf[i + 1] : -1;
      }
    }
    // Warm-up then cosine decay to lr/10.
    float lr = o.lr;
    if (step < o.warmup_steps) {
      lr = o.lr * static_cast<float>(step + 1) / static_cast<float>(o.warmup_steps);
    } else {
      const double p = static_cast<double>(step - o.warmup_steps) /
                       std::max(1, o.steps - o.warmup_steps);
      lr = static_cast<float>(o.lr * (0.1 + 0.9 * 0.5 * (1 + std::cos(M_PI * p))));
    }
    opt.lr = lr;
    float loss = 0;
    DSPLAN_RETURN_IF_ERROR(FromErr(tr->Step(in.data(), tg.data(), opt, &loss),
                                   "copy-task step"));
    if (!std::isfinite(loss)) {
      return Status::Internal(fmt::format("copy task: loss is {} at step {}", loss, step));
    }
    r.loss.push_back(loss);
    if (r.first_step_below < 0 && loss < o.learned_loss) r.first_step_below = step;
  }
  r.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  r.tokens_per_s = static_cast<double>(n) * o.steps / std::max(r.seconds, 1e-9);
  r.initial_loss = r.loss.front();
  const int tail = std::min<int>(10, static_cast<int>(r.loss.size()));
  double s = 0;
  for (int i = static_cast<int>(r.loss.size()) - tail; i < static_cast<int>(r.loss.size()); ++i)
    s += r.loss[i];
  r.final_loss = static_cast<float>(s / tail);
  r.learned = r.final_loss < o.learned_loss;
  return r;
}

Result<GptStepTiming> TimeGptStep(const ModelSpec& spec, int micro_batch, int seq_len, int steps,
                                  int device) {
  if (steps < 1) return Status::InvalidArgument("steps must be >= 1");
  DSPLAN_ASSIGN_OR_RETURN(train::GptConfig cfg, ConfigFromSpec(spec, micro_batch, seq_len));
  cfg.bf16 = true;
  DSPLAN_RETURN_IF_ERROR(NeedDevice());
  std::unique_ptr<train::GptTrainer> tr;
  DSPLAN_RETURN_IF_ERROR(FromErr(train::GptTrainer::Create(cfg, device, &tr), "trainer"));
  const size_t n = static_cast<size_t>(micro_batch) * seq_len;
  std::mt19937_64 rng(7);
  std::uniform_int_distribution<int> tok(0, cfg.vocab - 1);
  std::vector<int32_t> stream(n + 1);
  for (auto& x : stream) x = tok(rng);
  std::vector<int32_t> in(stream.begin(), stream.end() - 1), tg(stream.begin() + 1, stream.end());
  train::AdamWParams opt;
  opt.lr = 1e-4f;
  opt.weight_decay = 0.1f;
  GptStepTiming r;
  r.model = spec.name;
  r.device = tr->device_name();
  r.micro_batch = micro_batch;
  r.seq_len = seq_len;
  r.steps = steps;
  r.params = tr->num_params();
  r.device_gib = static_cast<double>(tr->device_bytes()) / (1024.0 * 1024.0 * 1024.0);
  for (int i = 0; i < 3; ++i) {
    DSPLAN_RETURN_IF_ERROR(FromErr(tr->Step(in.data(), tg.data(), opt, &r.last_loss), "warm-up"));
  }
  std::vector<double> times, fwd, bwd, adam;
  for (int i = 0; i < steps; ++i) {
    const auto t0 = Clock::now();
    DSPLAN_RETURN_IF_ERROR(FromErr(tr->Step(in.data(), tg.data(), opt, nullptr), "step"));
    DSPLAN_RETURN_IF_ERROR(FromErr(tr->Synchronize(), "step"));
    times.push_back(std::chrono::duration<double>(Clock::now() - t0).count());
    double f = 0, b = 0, a = 0;
    DSPLAN_RETURN_IF_ERROR(FromErr(tr->LastStepPhases(&f, &b, &a), "phase timing"));
    fwd.push_back(f);
    bwd.push_back(b);
    adam.push_back(a);
  }
  auto median = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  r.forward_s = median(fwd);
  r.backward_s = median(bwd);
  r.optimizer_s = median(adam);
  DSPLAN_RETURN_IF_ERROR(FromErr(tr->Step(in.data(), tg.data(), opt, &r.last_loss), "last step"));
  double sum = 0;
  for (double x : times) sum += x;
  r.step_s_mean = sum / times.size();
  std::sort(times.begin(), times.end());
  r.step_s_median = times[times.size() / 2];
  r.tokens_per_s = static_cast<double>(n) / r.step_s_median;
  r.flops_per_step = 6.0 * static_cast<double>(r.params) * n +
                     12.0 * cfg.layers * static_cast<double>(seq_len) * cfg.hidden * n;
  r.tflops = r.flops_per_step / r.step_s_median / 1e12;
  r.mfu = r.tflops / 989.0;
  return r;
}

}  // namespace dsplan
