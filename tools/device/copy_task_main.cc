// dsplan_copy_task_run: the device-side driver of the GPT-2 trainer (runtime/reference_trainers/copy_task.h).
// Trains the copy task, then optionally times full steps of a catalog model.
//
//   dsplan_copy_task_run [--steps N] [--batch B] [--copy-len L] [--lr X] [--fp32] [--seed S]
//                        [--time MODEL] [--time-batch B] [--time-seq T] [--time-steps N]
//                        [--no-copy]
// Prints the loss every 25 steps and a summary line; exit code 0 when every run asked for
// succeeded and the copy task was learned.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include <fmt/format.h>

#include "core/model_catalog.h"
#include "runtime/reference_trainers/copy_task.h"

int main(int argc, char** argv) {
  using namespace dsplan;
  CopyTaskOptions o;
  std::string time_model;
  int time_batch = 8, time_seq = 1024, time_steps = 10;
  bool copy = true;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> const char* {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "%s needs a value\n", a.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--steps") o.steps = std::atoi(next());
    else if (a == "--batch") o.micro_batch = std::atoi(next());
    else if (a == "--copy-len") o.copy_len = std::atoi(next());
    else if (a == "--lr") o.lr = std::strtof(next(), nullptr);
    else if (a == "--seed") o.seed = std::strtoull(next(), nullptr, 10);
    else if (a == "--fp32") o.bf16 = false;
    else if (a == "--no-copy") copy = false;
    else if (a == "--time") time_model = next();
    else if (a == "--time-batch") time_batch = std::atoi(next());
    else if (a == "--time-seq") time_seq = std::atoi(next());
    else if (a == "--time-steps") time_steps = std::atoi(next());
    else {
      std::fprintf(stderr, "unknown argument %s\n", a.c_str());
      return 2;
    }
  }
  int rc = 0;
  if (copy) {
    auto r = RunCopyTask(o);
    if (!r.ok()) {
      fmt::print(stderr, "copy task: {}\n", r.status().ToString());
      return 1;
    }
    for (size_t i = 0; i < r->loss.size(); ++i) {
      if (i % 25 == 0 || i + 1 == r->loss.size()) fmt::print("step {:4d} loss {:.4f}\n", i, r->loss[i]);
    }
    fmt::print(
        "COPY {} {}: model {} ({} params) B={} L={} lr={} steps={}: loss {:.3f} -> {:.4f} "
        "(chance {:.3f}), first step < {} at {}, learned={}, {:.2f} s, {:.0f} tokens/s\n",
        r->device, o.bf16 ? "bf16" : "fp32", o.spec.name, r->params, o.micro_batch, o.copy_len,
        o.lr, o.steps, r->initial_loss, r->final_loss, r->chance_loss, o.learned_loss,
        r->first_step_below, r->learned ? "yes" : "no", r->seconds, r->tokens_per_s);
    if (!r->learned) rc = 3;
  }
  if (!time_model.empty()) {
    auto spec = LoadModel(time_model, DataDir());
    if (!spec.ok()) {
      fmt::print(stderr, "{}\n", spec.status().ToString());
      return 1;
    }
    auto t = TimeGptStep(*spec, time_batch, time_seq, time_steps);
    if (!t.ok()) {
      fmt::print(stderr, "timing: {}\n", t.status().ToString());
      return 1;
    }
    fmt::print(
        "TIME {} {}: N={} B={} T={} steps={}: step median {:.4f} s (mean {:.4f}), {:.0f} "
        "tokens/s, {:.1f} TFLOP/s, MFU {:.1f}% (flops/step {:.3e}), {:.1f} GiB allocated, "
        "last loss {:.3f}; phases fwd {:.4f} s, bwd {:.4f} s, AdamW {:.4f} s\n",
        t->device, t->model, t->params, t->micro_batch, t->seq_len, t->steps, t->step_s_median,
        t->step_s_mean, t->tokens_per_s, t->tflops, 100 * t->mfu, t->flops_per_step,
        t->device_gib, t->last_loss, t->forward_s, t->backward_s, t->optimizer_s);
  }
  return rc;
}
