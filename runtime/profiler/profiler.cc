#include "runtime/profiler/profiler.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <ctime>
#include <memory>

#include <fmt/format.h>

#include "core/units.h"
#include "runtime/cpu_kernels/cpu_adam.h"
#include "runtime/profiler/fit.h"

namespace dsplan {

std::vector<int64_t> GemmTokenCounts(bool quick) {
  if (quick) return {4096, 16384};
  return {256, 512, 1024, 2048, 4096, 8192, 16384};
}

std::vector<GemmShape> LinearGemmShapes(const std::vector<LinearShape>& layers,
                                        const std::vector<int64_t>& tokens) {
  std::vector<GemmShape> out;
  auto add = [&](int64_t m, int64_t n, int64_t k, GemmLayout l) {
    for (const GemmShape& s : out) {
      if (s.m == m && s.n == n && s.k == k && s.layout == l) return;
    }
    out.push_back({m, n, k, l});
  };
  add(8192, 8192, 8192, GemmLayout::kNT);
  for (const LinearShape& L : layers) {
    for (int64_t t : tokens) {
      add(t, L.out, L.in, GemmLayout::kNT);  // Y = X W^T
      add(t, L.in, L.out, GemmLayout::kNN);  // dX = dY W
      add(L.out, L.in, t, GemmLayout::kTN);  // dW = dY^T X
    }
  }
  return out;
}

std::vector<GemmShape> BatchedGemmShapes(const std::vector<BatchedShape>& products) {
  std::vector<GemmShape> out;
  auto add = [&](int64_t m, int64_t n, int64_t k, GemmLayout l) {
    for (const GemmShape& s : out) {
      if (s.m == m && s.n == n && s.k == k && s.layout == l) return;
    }
    out.push_back({m, n, k, l, kProfileGemmBatch});
  };
  for (const BatchedShape& p : products) {
    add(p.m, p.n, p.k, GemmLayout::kNN);
    add(p.m, p.k, p.n, GemmLayout::kNT);
    add(p.k, p.n, p.m, GemmLayout::kTN);
  }
  return out;
}

std::vector<LinearShape> CommonLinearShapes(bool quick) {
  std::vector<LinearShape> out;
  auto add = [&](int64_t o, int64_t i) {
    for (const LinearShape& s : out) {
      if (s.out == o && s.in == i) return;
    }
    out.push_back({o, i});
  };
  const std::vector<int64_t> hidden = quick ? std::vector<int64_t>{2048, 4096}
                                            : std::vector<int64_t>{1024, 1600, 2048, 4096, 5120,
                                                                   8192};
  for (int64_t h : hidden) {
    add(3 * h, h);  // fused QKV projection
    add(h, h);      // attention output projection
    add(4 * h, h);  // MLP up
    add(h, 4 * h);  // MLP down
  }
  if (!quick) {
    add(50257, 1600);  // GPT-2 vocabulary projection (gpt2-xl)
    add(32000, 4096);  // Llama vocabulary projection (llama-2-7b)
  }
  return out;
}

std::vector<GemmShape> WorkloadGemmShapes(bool quick) {
  return LinearGemmShapes(CommonLinearShapes(quick), GemmTokenCounts(quick));
}

ProfileSizes DefaultSizes(bool quick, int cores) {
  ProfileSizes s;
  s.gemm_dtypes = quick ? std::vector<Precision>{Precision::kBf16}
                        : std::vector<Precision>{Precision::kBf16, Precision::kFp16};
  s.gemm_shapes = WorkloadGemmShapes(quick);
  s.gemm_repeats = quick ? Repeats{2, 5} : Repeats{2, 7};
  s.hbm_bytes = quick ? 256 * kMiB : kGiB;
  s.hbm_repeats = quick ? Repeats{2, 5} : Repeats{3, 20};
  for (int64_t b = 4 * kKiB; b <= kGiB; b *= quick ? 16 : 4) s.stream_sizes.push_back(b);
  s.attention_dtypes = quick ? std::vector<Precision>{Precision::kBf16}
                             : std::vector<Precision>{Precision::kBf16, Precision::kFp16};
  s.attention_head_dims = {64, 128};
  s.attention_seqs = quick ? std::vector<int64_t>{256, 1024, 4096}
                           : std::vector<int64_t>{128, 256, 512, 1024, 2048, 4096, 8192};
  // 256 Ki rows: gpt2-xl at micro-batch 10 (25 heads x 1024); 16 Ki: t5-large's decoder at
  // micro-batch 8 (16 heads x 128).
  s.attention_rows = quick ? std::vector<int64_t>{16 * 1024, 256 * 1024}
                           : std::vector<int64_t>{16 * 1024, 64 * 1024, 256 * 1024};
  s.attention_repeats = quick ? Repeats{1, 3} : Repeats{2, 5};
  const int64_t step = quick ? 16 : 4;
  for (int64_t b = 4 * kKiB; b <= kGiB; b *= step) s.copy_sizes.push_back(b);
  if (quick) s.copy_sizes.push_back(256 * kMiB);
  s.copy_repeats = quick ? Repeats{1, 5} : Repeats{2, 10};
  s.pinned_alloc_bytes = 256 * kMiB;
  for (int64_t b = kKiB; b <= kGiB; b *= step) s.collective_sizes.push_back(b);
  s.collective_repeats = quick ? Repeats{2, 5} : Repeats{5, 20};
  s.adam_elements = quick ? 16 * kMiB : 64 * kMiB;
  for (int t = 1; t < cores; t *= 2) {
    if (!quick || t == 1) s.adam_threads.push_back(t);
  }
  s.adam_threads.push_back(cores);
  s.adam_repeats = quick ? Repeats{1, 3} : Repeats{1, 5};
  s.memcpy_bytes = quick ? 256 * kMiB : kGiB;
  s.alloc_bytes = 256 * kMiB;
  s.host_repeats = quick ? Repeats{1, 3} : Repeats{1, 5};
  s.nvme.file_bytes = quick ? 256 * kMiB : kGiB;
  s.nvme.block_sizes = quick ? std::vector<int64_t>{kMiB}
                             : std::vector<int64_t>{128 * kKiB, kMiB, 8 * kMiB};
  s.nvme.queue_depths = quick ? std::vector<int>{16} : std::vector<int>{1, 8, 32};
  return s;
}

const std::vector<std::string>& ProfileSections() {
  static const std::vector<std::string> kSections = {
      "context", "gemm", "hbm", "launch", "attention", "copy", "nccl", "cpu-adam", "host",
      "nvme"};
  return kSections;
}

Result<std::set<std::string>> ParseSections(const std::string& csv) {
  std::set<std::string> out;
  size_t start = 0;
  while (start <= csv.size()) {
    size_t end = csv.find(',', start);
    if (end == std::string::npos) end = csv.size();
    std::string item = csv.substr(start, end - start);
    if (!item.empty()) {
      const auto& all = ProfileSections();
      if (std::find(all.begin(), all.end(), item) == all.end()) {
        std::string valid;
        for (const auto& s : all) valid += (valid.empty() ? "" : ", ") + s;
        return Status::InvalidArgument(
            fmt::format("--only: unknown section '{}' (valid: {})", item, valid));
      }
      out.insert(item);
    }
    start = end + 1;
  }
  return out;
}

namespace {

using Clock = std::chrono::steady_clock;

std::string Today() {
  std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[16];
  std::strftime(buf, sizeof(buf), "%Y-%m-%d", &tm);
  return buf;
}

std::string RepeatsText(const Repeats& r) {
  return fmt::format("{} warm-up + {} timed", r.warmup, r.timed);
}

// One unit of measuring work, run in order with progress.
struct Step {
  std::string what;
  double estimate_s = 0;  // a guess used only for the time-left display
  std::function<void()> run;
};

class Profiler {
 public:
  Profiler(const HardwareProfile& base, DeviceProbe& gpu, const ProfileOptions& o)
      : base_(base), gpu_(gpu), o_(o), sizes_(o.sizes) {
    p_ = base;
    p_.file.clear();
    stamp_ = fmt::format("{}; dsplan {}", Today(), o.dsplan_version);
  }

  Result<ProfileResult> Run() {
    const int gpus = gpu_.DeviceCount();
    if (gpus == 0) {
      std::vector<std::string> wanted;
      for (const char* s : {"context", "gemm", "hbm", "launch", "attention", "copy", "nccl"}) {
        if (Selected(s)) wanted.push_back(s);
      }
      if (!wanted.empty()) {
        Note(fmt::format("no CUDA device: GPU measurements skipped (gemm, hbm, h2d/d2h, nccl); "
                         "those stay datasheet values from {} ({})",
                         base_.name, gpu_.UnavailableReason()));
      }
    } else {
      auto info = gpu_.Info();
      if (info.ok()) {
        info_ = *info;
        header_ += fmt::format("# Using device 0: {} ({} SMs, {} L2, {} memory, cc {}.{}); {} "
                               "GPU(s) visible\n# {}\n",
                               info_.name, info_.sm_count, FormatBytes(info_.l2_bytes),
                               FormatBytes(static_cast<double>(info_.total_bytes)), info_.cc_major,
                               info_.cc_minor, gpus, info_.versions);
        if (!base_.gpu.name.empty() && info_.name != base_.gpu.name) {
          Note(fmt::format("the GPU is '{}' but the base profile {} describes '{}'; the peaks "
                           "(peak_flops_*) stay the base's",
                           info_.name, base_.name, base_.gpu.name));
        }
      } else {
        Note("GPU info: " + info.status().message());
      }
      if (Selected("context")) PlanContext();
      if (Selected("gemm")) PlanGemm();
      if (Selected("hbm")) PlanHbm();
      if (Selected("launch")) PlanLaunch();
      if (Selected("attention")) PlanAttention();
      if (Selected("copy")) PlanCopies();
      if (Selected("nccl")) PlanNccl(gpus);
    }
    if (Selected("cpu-adam")) PlanCpuAdam();
    if (Selected("host")) PlanHost();
    if (Selected("nvme")) PlanNvme();

    Execute();
    Finish(gpus);
    ProfileResult r;
    r.profile = std::move(p_);
    r.notes = notes_;
    r.report = header_ + report_;
    return r;
  }

 private:
  bool Selected(const std::string& s) const {
    return o_.sections.empty() || o_.sections.count(s) > 0;
  }
  void Note(std::string s) { notes_.push_back(std::move(s)); }
  Number Measured(double v, const std::string& method) const {
    return Number{v, Source{SourceKind::kMeasured, method + "; " + stamp_}};
  }

  void Execute() {
    double total_est = 0;
    for (const Step& s : steps_) total_est += s.estimate_s;
    double done_est = 0;
    auto t0 = Clock::now();
    for (size_t i = 0; i < steps_.size(); ++i) {
      if (o_.progress) {
        const double elapsed = std::chrono::duration<double>(Clock::now() - t0).count();
        // Scale the remaining estimate by how far off the estimates were so far.
        const double ratio = done_est > 0.5 ? elapsed / done_est : 1.0;
        o_.progress({steps_[i].what, static_cast<int>(i), static_cast<int>(steps_.size()),
                     (total_est - done_est) * ratio});
      }
      steps_[i].run();
      done_est += steps_[i].estimate_s;
    }
    if (o_.progress) {
      o_.progress({"done", static_cast<int>(steps_.size()), static_cast<int>(steps_.size()), 0});
    }
  }

  // ---- GPU sections ----

  void PlanContext() {
    steps_.push_back({"CUDA context and device memory", 0.5, [this] {
      if (info_.total_bytes > 0) {
        p_.gpu.memory_bytes = Measured(static_cast<double>(info_.total_bytes),
                                       "cudaMemGetInfo total on device 0");
        p_.gpu.name = info_.name;
      }
      auto ctx = gpu_.ContextBytes();
      if (!ctx.ok()) return Note("context: " + ctx.status().message());
      p_.gpu.context_bytes = Measured(
          static_cast<double>(*ctx),
          "cudaMemGetInfo total - free after the CUDA context, a cuBLASLt handle and its 32 MiB "
          "workspace exist, before other allocations (one process; the driver's own reservation "
          "before any context is outside total)");
      context_row_ = fmt::format("# context: {} in use after CUDA + cuBLASLt init; device total {}\n",
                                 FormatBytes(static_cast<double>(*ctx)),
                                 FormatBytes(static_cast<double>(info_.total_bytes)));
    }});
  }

  void PlanGemm() {
    for (Precision dt : sizes_.gemm_dtypes) {
      for (const GemmShape& s : sizes_.gemm_shapes) {
        const double flops = 2.0 * s.m * s.n * s.k * s.batch;
        const double est = flops / 5e14 * (sizes_.gemm_repeats.warmup + sizes_.gemm_repeats.timed) + 0.01;
        const std::string what =
            fmt::format("gemm {} {} {}x{}x{}{}", PrecisionName(dt), GemmLayoutName(s.layout), s.m,
                        s.n, s.k, s.batch > 1 ? fmt::format(" x{}", s.batch) : "");
        steps_.push_back({what, est, [this, dt, s, flops, what] {
          auto t = gpu_.Gemm(dt, s.layout, s.m, s.n, s.k, s.batch, sizes_.gemm_repeats);
          if (!t.ok()) return Note(fmt::format("{}: {}", what, t.status().message()));
          const double rate = flops / t->median_s;
          gemm_.push_back({dt, s.m, s.n, s.k, rate, s.layout, s.batch});
          const double peak = dt == Precision::kFp16 ? base_.gpu.peak_flops_fp16.value
                                                     : base_.gpu.peak_flops_bf16.value;
          gemm_rows_ += fmt::format("{:>6} {:>3} {:>7} {:>7} {:>7} {:>5} {:>11.1f} {:>9.1f} {:>8.1f} {:>7}\n",
                                    PrecisionName(dt), GemmLayoutName(s.layout), s.m, s.n, s.k,
                                    s.batch, t->median_s * 1e6,
                                    rate / 1e12, t->Spread() * 100,
                                    peak > 0 ? fmt::format("{:.1f}", 100 * rate / peak) : "-");
        }});
      }
    }
    steps_.push_back({"gemm fit", 0, [this] {
      if (gemm_.empty()) return;
      p_.gpu.gemm = gemm_;
      p_.gpu.gemm_source = Source{
          SourceKind::kMeasured,
          fmt::format("cuBLASLt matmul, fp32 accumulation, the heuristic's first algorithm, 32 "
                      "MiB workspace, in the layouts of torch.nn.Linear's forward (nt), input "
                      "gradient (nn) and weight gradient (tn), uniform random inputs; {}; "
                      "consecutive repeats on different copies of the operands spanning 3x L2 "
                      "(operands not in L2, no flush); CUDA events around the matmul alone; "
                      "median; {}",
                      RepeatsText(sizes_.gemm_repeats), stamp_)};
      Precision dt = base_.gpu.peak_flops_bf16.value > 0 ? Precision::kBf16 : Precision::kFp16;
      const double peak = dt == Precision::kBf16 ? base_.gpu.peak_flops_bf16.value
                                                 : base_.gpu.peak_flops_fp16.value;
      auto eff = GemmEfficiency(gemm_, dt, peak);
      if (!eff.ok()) return Note("gemm efficiency: " + eff.status().message());
      p_.gpu.gemm_efficiency = Measured(
          std::min(1.0, *eff),
          fmt::format("median over the measured {} GEMMs with m, n, k >= 4096 of achieved "
                      "FLOP/s / the {} peak {:.1f} TFLOP/s ({})",
                      PrecisionName(dt), base_.gpu.peak_flops_bf16.source.kind ==
                                                 SourceKind::kDatasheet ? "datasheet" : "profile",
                      peak / 1e12, base_.name));
    }});
  }

  void PlanHbm() {
    const int64_t bytes = sizes_.hbm_bytes;
    steps_.push_back({fmt::format("device-to-device copy {}", FormatBytes(bytes)), 0.2, [this, bytes] {
      auto t = gpu_.DeviceCopy(bytes, sizes_.hbm_repeats);
      if (!t.ok()) return Note("device copy: " + t.status().message());
      copy_bw_ = 2.0 * bytes / t->median_s;
      p_.gpu.hbm_bytes_per_s = Measured(
          copy_bw_, fmt::format("cudaMemcpyAsync device-to-device of {}, bytes read + written "
                                "over the median time; {}; CUDA events",
                                FormatBytes(bytes), RepeatsText(sizes_.hbm_repeats)));
      hbm_rows_ += fmt::format("{:<22} {:>12} {:>11.1f} {:>10.1f} {:>8.1f}\n", "d2d memcpy", bytes,
                               t->median_s * 1e6, copy_bw_ / 1e9, t->Spread() * 100);
    }});
    steps_.push_back({fmt::format("elementwise kernel {}", FormatBytes(bytes)), 0.2, [this, bytes] {
      auto t = gpu_.Elementwise(bytes, sizes_.hbm_repeats);
      if (!t.ok()) return Note("elementwise: " + t.status().message());
      const double bw = 2.0 * bytes / t->median_s;
      hbm_rows_ += fmt::format("{:<22} {:>12} {:>11.1f} {:>10.1f} {:>8.1f}\n", "elementwise a*x+b",
                               bytes, t->median_s * 1e6, bw / 1e9, t->Spread() * 100);
      if (copy_bw_ > 0) {
        if (bw > copy_bw_) {
          Note(fmt::format("the elementwise kernel ({:.0f} GB/s) beat the copy ({:.0f} GB/s); "
                           "memory_bound_efficiency capped at 1",
                           bw / 1e9, copy_bw_ / 1e9));
        }
        p_.gpu.memory_bound_efficiency = Measured(
            std::min(1.0, bw / copy_bw_),
            fmt::format("fp32 elementwise y = a*x + b (16-byte loads) over {}: bytes read + "
                        "written / median time, divided by the device copy's rate; {}",
                        FormatBytes(bytes), RepeatsText(sizes_.hbm_repeats)));
      }
    }});
    if (sizes_.stream_sizes.empty()) return;
    steps_.push_back({"streaming kernel per launch", 0.5, [this] {
      std::vector<StreamPoint> curve;
      for (int64_t b : sizes_.stream_sizes) {
        // Back-to-back launches over about 1 ms of work (at least 20, at most 2000).
        const int launches = static_cast<int>(std::clamp<double>(1e-3 * 3e12 / b, 20, 2000));
        auto t = gpu_.StreamLaunches(b, launches, sizes_.hbm_repeats);
        if (!t.ok()) return Note("streaming kernel curve: " + t.status().message());
        const double per = t->median_s / launches;
        if (!curve.empty() && per < curve.back().seconds) {
          // A launch over more bytes never takes less time: keep the curve monotone (the
          // smaller size's point was noise or host-bound).
          curve.back().seconds = per;
          for (size_t i = curve.size(); i-- > 1;) {
            curve[i - 1].seconds = std::min(curve[i - 1].seconds, curve[i].seconds);
          }
        }
        curve.push_back({static_cast<double>(b), per});
        hbm_rows_ += fmt::format("{:<22} {:>12} {:>11.2f} {:>10.1f} {:>8.1f}\n",
                                 fmt::format("stream x{}", launches), b, per * 1e6,
                                 b / per / 1e9, t->Spread() * 100);
      }
      p_.gpu.streaming = curve;
      p_.gpu.streaming_source = Source{
          SourceKind::kMeasured,
          fmt::format("dsplan's streaming kernel (fp32 y = a*x + b, 16-byte accesses) launched "
                      "back to back on one stream, each launch over a fresh part of a buffer "
                      "larger than 4x L2; bytes = read + written per launch; CUDA events around "
                      "the launches / their count; {}; median; {}",
                      RepeatsText(sizes_.hbm_repeats), stamp_)};
    }});
  }

  void PlanLaunch() {
    steps_.push_back({"kernel launch", 0.1, [this] {
      auto t = gpu_.KernelLaunch(Repeats{2, 10});
      if (!t.ok()) return Note("kernel launch: " + t.status().message());
      p_.gpu.kernel_launch_s = Measured(
          t->median_s, "1000 empty kernels launched back to back on one stream, host time "
                       "until the stream finished / 1000; 2 warm-up + 10 timed, median");
      hbm_rows_ += fmt::format("{:<22} {:>12} {:>11.2f} {:>10} {:>8.1f}\n", "empty kernel launch", 0,
                               t->median_s * 1e6, "-", t->Spread() * 100);
    }});
  }

  // dsplan's fused attention kernel: the profile's gpu.attention table (the cost model's price
  // of the runtime's attention).
  void PlanAttention() {
    const int64_t total = static_cast<int64_t>(
        sizes_.attention_dtypes.size() * sizes_.attention_head_dims.size() * 2 *
        sizes_.attention_rows.size() * sizes_.attention_seqs.size());
    struct Point {
      Precision dt;
      int64_t d;
      bool causal;
      int64_t seq, bh;
    };
    std::vector<Point> points;
    for (Precision dt : sizes_.attention_dtypes) {
      for (int64_t d : sizes_.attention_head_dims) {
        for (bool causal : {true, false}) {
          for (int64_t rows : sizes_.attention_rows) {
            for (int64_t seq : sizes_.attention_seqs) {
              points.push_back({dt, d, causal, seq, std::max<int64_t>(1, rows / seq)});
            }
          }
        }
      }
    }
    for (const Point& pt : points) {
      const double fwd = 4.0 * pt.bh * pt.seq * pt.seq * pt.d / (pt.causal ? 2 : 1);
      const double est =
          3.5 * fwd / 2e14 * (sizes_.attention_repeats.warmup + sizes_.attention_repeats.timed) +
          0.01;
      steps_.push_back({fmt::format("attention {} d{} {} seq {} x {}", PrecisionName(pt.dt),
                                    pt.d, pt.causal ? "causal" : "full", pt.seq, pt.bh),
                        est, [this, pt, fwd, total] {
        auto t = gpu_.Attention(pt.dt, pt.d, pt.causal, pt.seq, pt.bh, sizes_.attention_repeats);
        if (!t.ok()) {
          if (attention_failed_++ == 0) attention_error_ = t.status().message();
          if (attention_failed_ == total) {
            Note(fmt::format("attention: not measured ({}); the runtime's attention stays "
                             "priced as tiled GEMMs",
                             attention_error_));
          }
          return;
        }
        const double fr = fwd / t->forward.median_s, br = 2.5 * fwd / t->backward.median_s;
        attention_.push_back({pt.dt, pt.d, pt.causal, pt.seq, pt.bh, fr, br});
        attention_rows_ += fmt::format(
            "{:>6} {:>5} {:>7} {:>7} {:>7} {:>11.1f} {:>9.1f} {:>11.1f} {:>9.1f} {:>8.1f}\n",
            PrecisionName(pt.dt), pt.d, pt.causal ? "yes" : "no", pt.seq, pt.bh,
            t->forward.median_s * 1e6, fr / 1e12, t->backward.median_s * 1e6, br / 1e12,
            100 * std::max(t->forward.Spread(), t->backward.Spread()));
      }});
    }
    steps_.push_back({"attention table", 0, [this, total] {
      if (attention_failed_ > 0 && attention_failed_ < total) {
        Note(fmt::format("attention: {} of {} points failed (first: {})", attention_failed_,
                         total, attention_error_));
      }
      if (attention_.empty()) return;
      p_.gpu.attention = attention_;
      p_.gpu.attention_source = Source{
          SourceKind::kMeasured,
          fmt::format("dsplan's fused attention kernel (runtime/cuda/flash_attention, default "
                      "tiles), self-attention sq = sk = seq, batch x heads = rows / seq for rows "
                      "in {{{}}}, uniform random inputs; forward, then backward on its output; "
                      "FLOPs 4 B H s^2 d (halved when causal), backward 2.5x; {}; L2 flushed "
                      "(cudaMemsetAsync over 2x L2) before each repeat; CUDA events; median; {}",
                      fmt::join(sizes_.attention_rows, ", "),
                      RepeatsText(sizes_.attention_repeats), stamp_)};
    }});
  }

  void PlanCopies() {
    for (CopyKind kind : {CopyKind::kH2DPinned, CopyKind::kD2HPinned, CopyKind::kH2DPageable,
                          CopyKind::kD2HPageable}) {
      const bool pinned = kind == CopyKind::kH2DPinned || kind == CopyKind::kD2HPinned;
      for (int64_t bytes : sizes_.copy_sizes) {
        const double est = bytes / (pinned ? 4e10 : 1e10) *
                           (sizes_.copy_repeats.warmup + sizes_.copy_repeats.timed) + 0.002;
        steps_.push_back({fmt::format("{} {}", CopyKindName(kind), FormatBytes(bytes)), est,
                          [this, kind, bytes] {
          auto t = gpu_.HostCopy(kind, bytes, sizes_.copy_repeats);
          if (!t.ok()) {
            return Note(fmt::format("{} {}: {}", CopyKindName(kind), FormatBytes(bytes),
                                    t.status().message()));
          }
          copies_[static_cast<int>(kind)].push_back({static_cast<double>(bytes), bytes / t->median_s});
          copy_rows_ += fmt::format("{:<14} {:>12} {:>11.1f} {:>10.2f} {:>8.1f}\n", CopyKindName(kind),
                                    bytes, t->median_s * 1e6, bytes / t->median_s / 1e9,
                                    t->Spread() * 100);
        }});
      }
      steps_.push_back({fmt::format("{} fit", CopyKindName(kind)), 0, [this, kind, pinned] {
        const auto& pts = copies_[static_cast<int>(kind)];
        if (pts.size() < 2) return;
        auto fit = FitCopy(pts);
        if (!fit.ok()) return Note(std::string(CopyKindName(kind)) + ": " + fit.status().message());
        CopyCurve* c = kind == CopyKind::kH2DPinned     ? &p_.links.h2d_pinned
                       : kind == CopyKind::kD2HPinned   ? &p_.links.d2h_pinned
                       : kind == CopyKind::kH2DPageable ? &p_.links.h2d_pageable
                                                        : &p_.links.d2h_pageable;
        const std::string method = fmt::format(
            "cudaMemcpyAsync {} memory ({}), {} sizes {}..{}; {}; CUDA events; median; fit "
            "t = latency + S / bandwidth weighted by 1/t^2 (max relative error {:.0f}%)",
            pinned ? "pinned" : "pageable", pinned ? "cudaHostAlloc" : "malloc", pts.size(),
            FormatBytes(pts.front().bytes), FormatBytes(pts.back().bytes),
            RepeatsText(sizes_.copy_repeats), fit->max_rel_error * 100);
        c->latency_s = Measured(fit->alpha_s, method);
        c->bytes_per_s = Measured(fit->bytes_per_s, method);
        c->points = pts;
        fit_rows_ += fmt::format("{:<14} {:>12.2f} {:>12.2f} {:>10.0f}\n", CopyKindName(kind),
                                 fit->alpha_s * 1e6, fit->bytes_per_s / 1e9,
                                 fit->max_rel_error * 100);
      }});
    }
    steps_.push_back({"cudaHostAlloc", 0.2, [this] {
      auto rate = gpu_.PinnedAllocBytesPerS(sizes_.pinned_alloc_bytes);
      if (!rate.ok()) return Note("pinned alloc: " + rate.status().message());
      p_.host.pinned_alloc_bytes_per_s = Measured(
          *rate, fmt::format("cudaHostAlloc + cudaFreeHost of {}, bytes / host time",
                             FormatBytes(static_cast<double>(sizes_.pinned_alloc_bytes))));
      host_rows_ += fmt::format("{:<26} {:>12} {:>10.2f}\n", "cudaHostAlloc",
                                sizes_.pinned_alloc_bytes, *rate / 1e9);
    }});
  }

  void PlanNccl(int gpus) {
    if (gpus < 2) {
      Note(fmt::format("{} GPU visible: NVLink collectives not measured; they stay the values of "
                       "{}",
                       gpus, base_.name));
      return;
    }
    for (Collective op : {Collective::kAllReduce, Collective::kReduceScatter,
                          Collective::kAllGather}) {
      for (int64_t bytes : sizes_.collective_sizes) {
        const double est = bytes / 1e11 * (sizes_.collective_repeats.warmup +
                                           sizes_.collective_repeats.timed) + 0.005;
        steps_.push_back({fmt::format("nccl {} {}", CollectiveName(op), FormatBytes(bytes)), est,
                          [this, op, bytes, gpus] {
          auto t = gpu_.Collective(op, gpus, bytes, sizes_.collective_repeats);
          if (!t.ok()) {
            return Note(fmt::format("nccl {} {}: {}", CollectiveName(op), FormatBytes(bytes),
                                    t.status().message()));
          }
          const double busbw = BusBandwidth(op, gpus, static_cast<double>(bytes), t->median_s);
          colls_[static_cast<int>(op)].push_back({static_cast<double>(bytes), busbw});
          coll_rows_ += fmt::format("{:<15} {:>5} {:>12} {:>12} {:>11.1f} {:>9.2f} {:>9.2f} {:>8.1f}\n",
                                    CollectiveName(op), gpus, bytes, bytes / 2, t->median_s * 1e6,
                                    bytes / t->median_s / 1e9, busbw / 1e9, t->Spread() * 100);
        }});
      }
      steps_.push_back({fmt::format("nccl {} fit", CollectiveName(op)), 0, [this, op, gpus] {
        const auto& pts = colls_[static_cast<int>(op)];
        if (pts.size() < 2) return;
        auto fit = FitCollective(op, gpus, pts);
        if (!fit.ok()) return Note(std::string(CollectiveName(op)) + ": " + fit.status().message());
        const std::string method = fmt::format(
            "NCCL {} over {} GPUs of one process (ncclCommInitAll, grouped launches), bf16, "
            "out-of-place, sizes {}..{}; {}; host time after every stream finished / repeats "
            "(the slowest rank); busbw = S/t x {:.3f} (core/collectives.h); fit weighted by 1/t^2 "
            "(max relative error {:.0f}%)",
            CollectiveName(op), gpus, FormatBytes(pts.front().bytes), FormatBytes(pts.back().bytes),
            RepeatsText(sizes_.collective_repeats), BusFactor(op, gpus), fit->max_rel_error * 100);
        CollectiveCurve c;
        c.op = op;
        c.ranks = gpus;
        c.inter_node = false;
        c.alpha_s = Measured(fit->alpha_s, method);
        c.busbw_bytes_per_s = Measured(fit->bytes_per_s, method);
        c.points = pts;
        auto& v = p_.links.collectives;
        v.erase(std::remove_if(v.begin(), v.end(),
                               [&](const CollectiveCurve& x) { return !x.inter_node && x.op == op; }),
                v.end());
        v.push_back(std::move(c));
        fit_rows_ += fmt::format("{:<14} {:>12.2f} {:>12.2f} {:>10.0f}   (busbw)\n",
                                 CollectiveName(op), fit->alpha_s * 1e6, fit->bytes_per_s / 1e9,
                                 fit->max_rel_error * 100);
      }});
    }
  }

  // ---- host sections ----

  void PlanCpuAdam() {
    for (int threads : sizes_.adam_threads) {
      const double est = sizes_.adam_elements * 30.0 / std::min(threads * 4e9, 4e10) *
                             (sizes_.adam_repeats.warmup + sizes_.adam_repeats.timed) + 0.3;
      steps_.push_back({fmt::format("cpu adam {} threads", threads), est, [this, threads] {
        auto t = TimeCpuAdam(sizes_.adam_elements, threads, sizes_.adam_repeats);
        if (!t.ok()) return Note("cpu adam: " + t.status().message());
        const double rate = sizes_.adam_elements / t->median_s;
        adam_.push_back({threads, rate});
        adam_rows_ += fmt::format("{:>8} {:>12} {:>11.1f} {:>12.1f} {:>8.1f}\n", threads,
                                  sizes_.adam_elements, t->median_s * 1e6, rate / 1e6,
                                  t->Spread() * 100);
      }});
    }
    steps_.push_back({"cpu adam table", 0, [this] {
      if (adam_.empty()) return;
      p_.host.cpu_adam = adam_;
      p_.host.cpu_adam_source = Source{
          SourceKind::kMeasured,
          fmt::format("runtime/cpu_kernels/cpu_adam AdamW step, fp32 params/grads/moments ({} kernel), "
                      "{} elements split over std::threads; {}; host clock; median; {}",
                      SimdLevelName(DetectSimdLevel()), sizes_.adam_elements,
                      RepeatsText(sizes_.adam_repeats), stamp_)};
    }});
  }

  void PlanHost() {
    steps_.push_back({"host memory", 0.5, [this] {
      p_.host.cores = PhysicalCores();
      auto ram = HostRamBytes();
      if (ram.ok()) {
        p_.host.ram_bytes = Measured(static_cast<double>(*ram),
                                     "MemTotal in /proc/meminfo (a VM may grow it later)");
      } else {
        Note("host RAM: " + ram.status().message());
      }
      const int threads = p_.host.cores;
      // One host rate: |bytes| over the median time, into |field| with its method, one row.
      auto record = [&](const Result<Timing>& t, int64_t bytes, Number& field,
                        const std::string& method, const std::string& row) {
        if (!t.ok()) return Note(row + ": " + t.status().message());
        const double bw = static_cast<double>(bytes) / t->median_s;
        field = Measured(bw, fmt::format("{}; {}", method, RepeatsText(sizes_.host_repeats)));
        host_rows_ += fmt::format("{:<26} {:>12} {:>10.2f}\n", row, bytes, bw / 1e9);
      };
      const std::string alloc = FormatBytes(static_cast<double>(sizes_.alloc_bytes));
      record(TimeMemcpy(sizes_.memcpy_bytes, threads, sizes_.host_repeats), sizes_.memcpy_bytes,
             p_.host.memcpy_bytes_per_s,
             fmt::format("memcpy of {} between pageable buffers split over {} threads, bytes "
                         "copied / median time",
                         FormatBytes(static_cast<double>(sizes_.memcpy_bytes)), threads),
             fmt::format("memcpy ({} threads)", threads));
      record(TimePageableAlloc(sizes_.alloc_bytes, sizes_.host_repeats), sizes_.alloc_bytes,
             p_.host.pageable_alloc_bytes_per_s,
             fmt::format("mmap + first touch of every page + munmap of {}, one thread", alloc),
             "pageable alloc + touch");
      record(TimePageableAlloc(sizes_.alloc_bytes, sizes_.host_repeats, threads),
             sizes_.alloc_bytes, p_.host.parallel_alloc_bytes_per_s,
             fmt::format("mmap + first touch of every page + munmap of {}, the pages split over "
                         "{} threads",
                         alloc, threads),
             fmt::format("alloc + touch ({} thr)", threads));
    }});
  }

  void PlanNvme() {
    if (o_.nvme_path.empty()) {
      Note(fmt::format("no --nvme-path: NVMe not measured; it stays the values of {}", base_.name));
      return;
    }
    const double est = 2.0 * sizes_.nvme.file_bytes / 2e9 * sizes_.nvme.block_sizes.size() *
                       sizes_.nvme.queue_depths.size();
    steps_.push_back({"nvme " + o_.nvme_path, est, [this] {
      auto r = MeasureNvme(o_.nvme_path, sizes_.nvme);
      if (!r.ok()) {
        return Note(fmt::format("NVMe not measured, it stays the values of {}: {}", base_.name,
                                r.status().message()));
      }
      NvmeProfile& v = p_.nvme;
      v.present = true;
      v.path = r->path;
      v.capacity_bytes = Measured(static_cast<double>(r->capacity_bytes),
                                  "statvfs size of the filesystem holding the path");
      double rd = 0, wr = 0;
      for (const NvmePoint& pt : r->points) {
        rd = std::max(rd, pt.read_bytes_per_s);
        wr = std::max(wr, pt.write_bytes_per_s);
        nvme_rows_ += fmt::format("{:>10} {:>6} {:>10.2f} {:>10.2f}\n", pt.block_size,
                                  pt.queue_depth, pt.read_bytes_per_s / 1e9,
                                  pt.write_bytes_per_s / 1e9);
      }
      v.read_bytes_per_s = Measured(rd, "best point: " + r->method);
      v.write_bytes_per_s = Measured(wr, "best point: " + r->method);
      v.points = r->points;
      nvme_method_ = r->method;
    }});
  }

  void Finish(int gpus) {
    p_.name = o_.name.empty() ? base_.name + "-measured" : o_.name;
    p_.base = base_.name;
    p_.description = fmt::format(
        "measured by dsplan profile on {}{} ({} GPU(s) visible), {}; numbers not measured are "
        "{}'s",
        gpus > 0 ? info_.name : "a machine without a CUDA device",
        gpus > 0 ? "" : " (GPU numbers not measured)", gpus, stamp_, base_.name);
    std::string& r = report_;
    if (!context_row_.empty()) r += context_row_;
    if (!gemm_rows_.empty()) {
      r += fmt::format("\n# GEMM: cuBLASLt, C[m,n] = op(A)[m,k] op(B)[k,n], {}, operands not in "
                       "L2, median\n",
                       RepeatsText(sizes_.gemm_repeats));
      r += fmt::format("{:>6} {:>3} {:>7} {:>7} {:>7} {:>5} {:>11} {:>9} {:>8} {:>7}\n", "dtype",
                       "op", "m", "n", "k", "batch", "time", "rate", "spread", "of peak");
      r += fmt::format("{:>6} {:>3} {:>7} {:>7} {:>7} {:>5} {:>11} {:>9} {:>8} {:>7}\n", "", "", "",
                       "", "", "", "(us)", "(TFLOP/s)", "(%)", "(%)");
      r += gemm_rows_;
    }
    if (!hbm_rows_.empty()) {
      r += "\n# Device memory and launch\n";
      r += fmt::format("{:<22} {:>12} {:>11} {:>10} {:>8}\n", "kernel", "size", "time", "bw",
                       "spread");
      r += fmt::format("{:<22} {:>12} {:>11} {:>10} {:>8}\n", "", "(B)", "(us)", "(GB/s)", "(%)");
      r += hbm_rows_;
      r += "# bw counts bytes read + written\n";
    }
    if (!attention_rows_.empty()) {
      r += fmt::format("\n# Fused attention (dsplan's kernel), self-attention, {}, L2 flushed, "
                       "median; backward FLOPs = 2.5x forward\n",
                       RepeatsText(sizes_.attention_repeats));
      r += fmt::format("{:>6} {:>5} {:>7} {:>7} {:>7} {:>11} {:>9} {:>11} {:>9} {:>8}\n", "dtype",
                       "d", "causal", "seq", "b x h", "forward", "rate", "backward", "rate",
                       "spread");
      r += fmt::format("{:>6} {:>5} {:>7} {:>7} {:>7} {:>11} {:>9} {:>11} {:>9} {:>8}\n", "", "",
                       "", "", "", "(us)", "(TFLOP/s)", "(us)", "(TFLOP/s)", "(%)");
      r += attention_rows_;
    }
    if (!copy_rows_.empty()) {
      r += "\n# Host <-> device copies (cudaMemcpyAsync), median\n";
      r += fmt::format("{:<14} {:>12} {:>11} {:>10} {:>8}\n", "path", "size", "time", "bw", "spread");
      r += fmt::format("{:<14} {:>12} {:>11} {:>10} {:>8}\n", "", "(B)", "(us)", "(GB/s)", "(%)");
      r += copy_rows_;
    }
    if (!coll_rows_.empty()) {
      r += "\n# NCCL collectives (bf16, out-of-place), nccl-tests sizes and bus factors\n";
      r += fmt::format("{:<15} {:>5} {:>12} {:>12} {:>11} {:>9} {:>9} {:>8}\n", "op", "ranks",
                       "size", "count", "time", "algbw", "busbw", "spread");
      r += fmt::format("{:<15} {:>5} {:>12} {:>12} {:>11} {:>9} {:>9} {:>8}\n", "", "", "(B)",
                       "(elements)", "(us)", "(GB/s)", "(GB/s)", "(%)");
      r += coll_rows_;
    }
    if (!fit_rows_.empty()) {
      r += "\n# Alpha-beta fits: t(S) = latency + S x factor / bandwidth\n";
      r += fmt::format("{:<14} {:>12} {:>12} {:>10}\n", "curve", "latency", "bandwidth", "max err");
      r += fmt::format("{:<14} {:>12} {:>12} {:>10}\n", "", "(us)", "(GB/s)", "(%)");
      r += fit_rows_;
    }
    if (!adam_rows_.empty()) {
      r += fmt::format("\n# CPU Adam (runtime/cpu_kernels/cpu_adam, {}), median\n",
                       SimdLevelName(DetectSimdLevel()));
      r += fmt::format("{:>8} {:>12} {:>11} {:>12} {:>8}\n", "threads", "elements", "time", "rate",
                       "spread");
      r += fmt::format("{:>8} {:>12} {:>11} {:>12} {:>8}\n", "", "", "(us)", "(M elem/s)", "(%)");
      r += adam_rows_;
    }
    if (!host_rows_.empty()) {
      r += "\n# Host memory\n";
      r += fmt::format("{:<26} {:>12} {:>10}\n", "operation", "size", "rate");
      r += fmt::format("{:<26} {:>12} {:>10}\n", "", "(B)", "(GB/s)");
      r += host_rows_;
    }
    if (!nvme_rows_.empty()) {
      r += fmt::format("\n# NVMe at {}: {}\n", p_.nvme.path, nvme_method_);
      r += fmt::format("{:>10} {:>6} {:>10} {:>10}\n", "block", "qd", "read", "write");
      r += fmt::format("{:>10} {:>6} {:>10} {:>10}\n", "(B)", "", "(GB/s)", "(GB/s)");
      r += nvme_rows_;
    }
  }

  const HardwareProfile& base_;
  DeviceProbe& gpu_;
  const ProfileOptions& o_;
  const ProfileSizes& sizes_;
  HardwareProfile p_;
  std::string stamp_;
  GpuInfo info_;
  std::vector<Step> steps_;
  std::vector<std::string> notes_;
  std::vector<GemmPoint> gemm_;
  std::vector<CpuAdamPoint> adam_;
  std::vector<BandwidthPoint> copies_[4];
  std::vector<BandwidthPoint> colls_[8];
  double copy_bw_ = 0;
  std::vector<AttentionPoint> attention_;
  int64_t attention_failed_ = 0;
  std::string attention_error_, attention_rows_;
  std::string header_, report_, context_row_, gemm_rows_, hbm_rows_, copy_rows_, coll_rows_,
      fit_rows_, adam_rows_, host_rows_, nvme_rows_, nvme_method_;
};

}  // namespace

Result<ProfileResult> RunProfile(const HardwareProfile& base, DeviceProbe& gpu,
                                 const ProfileOptions& options) {
  for (const std::string& s : options.sections) {
    const auto& all = ProfileSections();
    if (std::find(all.begin(), all.end(), s) == all.end()) {
      return Status::InvalidArgument(fmt::format("unknown profile section '{}'", s));
    }
  }
  for (int t : options.sizes.adam_threads) {
    if (t < 1) return Status::InvalidArgument("CPU Adam thread counts must be >= 1");
  }
  Profiler p(base, gpu, options);
  return p.Run();
}

}  // namespace dsplan
