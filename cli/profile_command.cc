#include "cli/common.h"
#include "core/text.h"
#include "cli/profile_command.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "core/hardware_profile.h"
#include "core/output_file.h"
#include "core/model_catalog.h"
#include "core/status.h"
#include "runtime/profiler/device_probe.h"
#include "runtime/profiler/host_bench.h"
#include "runtime/profiler/profiler.h"
#include "runtime/profiler/stack_probe.h"
#include "simulator/workload.h"


namespace dsplan {
namespace {

namespace fs = std::filesystem;

struct ProfileFlags {
  std::string out = "dsplan-profile.yaml";
  std::string base;
  std::string name;
  std::string nvme_path;
  std::string only;
  std::string models;
  bool quick = false;
  bool stack = false;  // also measure the PyTorch + DeepSpeed stack (python3 with torch)
  std::string python = "python3";
  std::string stack_models;
  bool force = false;  // replace an existing --out file
  bool tiny = false;  // test-only sizes (hidden flag): seconds, not minutes
};

// The datasheet profile for a GPU name as CUDA reports it, or "" when none matches.
std::string BaseFor(const std::string& gpu) {
  auto has = [&](const char* s) { return gpu.find(s) != std::string::npos; };
  if (has("H200")) return "h200-sxm";
  if (has("H100")) return "h100-sxm";
  if (has("A100") && has("80GB")) return "a100-80gb";
  if (has("A100")) return "a100-40gb";
  if (has("L40S")) return "l40s";
  if (has("V100")) return "v100-32gb";
  if (has("T4")) return "t4";
  return "";
}

// Checks before measuring that |path| can be written, so minutes of measuring are not lost.
Status CheckWritable(const std::string& path, const ProfileFlags& f) {
  // Never the --base profile it reads; an existing file only with --force.
  if (Status s = CheckOutputPath(path, OutputPolicy{{f.base}, f.force, "--out"}); !s.ok()) return s;
  fs::path p(path);
  fs::path dir = p.has_parent_path() ? p.parent_path() : fs::path(".");
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) {
    return Status::InvalidArgument(
        fmt::format("--out {}: folder {} does not exist", Quote(path), Quote(dir.string())));
  }
  if (fs::is_directory(p, ec)) {
    return Status::InvalidArgument(fmt::format("--out {} is a folder; name a file", Quote(path)));
  }
  if (access(dir.c_str(), W_OK) != 0 || (fs::exists(p, ec) && access(path.c_str(), W_OK) != 0)) {
    return Status::InvalidArgument(fmt::format("--out {} is not writable", Quote(path)));
  }
  return Status();
}

// The Linear layers (out, in) of each model in the comma-separated |csv| (catalog names or HF
// config paths), from dsplan's workload of the model, and the products of its batched matmuls
// (eager attention) at sequence lengths 128..2048; errors name the model.
struct ModelShapes {
  std::vector<LinearShape> linear;
  std::vector<BatchedShape> batched;
};
// The non-empty names of a comma-separated --models or --stack-models list.
std::vector<std::string> ModelNames(const std::string& csv) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= csv.size()) {
    size_t end = csv.find(',', start);
    if (end == std::string::npos) end = csv.size();
    if (end > start) out.push_back(csv.substr(start, end - start));
    start = end + 1;
  }
  return out;
}

Result<ModelShapes> ModelGemmShapes(const std::string& csv) {
  std::set<LinearShape> shapes;
  std::set<BatchedShape> batched;
  for (const std::string& name : ModelNames(csv)) {
    auto spec = LoadModel(name, DataDir());
    if (!spec.ok()) return spec.status().WithPrefix("--models");
    for (int64_t seq : {128, 256, 512, 1024, 2048}) {
      if (spec->max_positions > 0 && seq > spec->max_positions) break;
      RunShape wo;
      wo.micro_batch = 1;
      wo.seq_len = seq;
      wo.target_len = spec->encoder_decoder() ? seq : 0;
      auto w = BuildWorkload(*spec, wo);
      if (!w.ok()) return w.status().WithPrefix(fmt::format("--models {}", name));
      for (const Layer& l : w->layers) {
        for (const Op& op : l.ops) {
          if (op.kind == OpKind::kGemm) shapes.insert({op.n, op.k});
          if (op.kind == OpKind::kBatchedGemm) batched.insert({op.m, op.n, op.k});
        }
      }
    }
  }
  return ModelShapes{std::vector<LinearShape>(shapes.begin(), shapes.end()),
                     std::vector<BatchedShape>(batched.begin(), batched.end())};
}

// --stack-models: catalog names or HF config paths, each loaded here so that a bad entry is one
// line before anything is measured; paths go to stack_costs.py absolute (it reads a config.json
// or a folder holding one, and names the family by its model_type).
Result<std::string> StackModels(const std::string& csv) {
  constexpr int kMaxModels = 64;
  std::string out;
  int n = 0;
  for (const std::string& name : ModelNames(csv)) {
    if (++n > kMaxModels) {
      return Status::InvalidArgument(
          fmt::format("--stack-models: more than {} models; one per family is enough", kMaxModels));
    }
    auto spec = LoadModel(name, DataDir());
    if (!spec.ok()) return spec.status().WithPrefix("--stack-models");
    std::error_code ec;
    const bool path = name.find('/') != std::string::npos || fs::exists(name, ec);
    const std::string arg = path ? fs::absolute(name, ec).string() : name;
    if (arg.find(',') != std::string::npos) {
      return Status::InvalidArgument(fmt::format(
          "--stack-models: {} holds a comma, which separates the models; rename or link it",
          Quote(arg)));
    }
    out += (out.empty() ? "" : ",") + arg;
  }
  if (out.empty()) {
    return Status::InvalidArgument(
        "--stack-models: no model given; name catalog models or config.json paths, comma "
        "separated");
  }
  return out;
}

ProfileSizes TinySizes() {
  ProfileSizes s = DefaultSizes(true, 2);
  s.gemm_shapes = {{256, 256, 256}};
  s.hbm_bytes = 1 << 20;
  s.attention_seqs = {256};
  s.attention_rows = {1024};
  s.copy_sizes = {4096, 1 << 16, 1 << 20};
  s.collective_sizes = {1024, 1 << 16, 1 << 20};
  s.pinned_alloc_bytes = 1 << 20;
  s.adam_elements = 1 << 16;
  s.adam_threads = {1, 2};
  s.memcpy_bytes = 1 << 22;
  s.alloc_bytes = 1 << 22;
  s.nvme.file_bytes = 4 << 20;
  s.nvme.block_sizes = {1 << 20};
  s.nvme.queue_depths = {4};
  return s;
}

}  // namespace

namespace {
int RunProfile(const ProfileFlags& f);
}  // namespace

DeclaredCommand AddProfileCommand(CLI::App& app) {
  auto flags = std::make_shared<ProfileFlags>();
  ProfileFlags& f = *flags;
  CLI::App* cmd = app.add_subcommand(
      "profile", "Measure this machine (GEMM, HBM, PCIe, NCCL, CPU Adam, NVMe) and write a "
                 "hardware profile");
  cmd->add_option("--out,-o", f.out, "Profile YAML to write")->capture_default_str();
  cmd->add_flag("--force", f.force, "Replace the --out file if it exists");
  cmd->add_option("--base", f.base,
                  "Datasheet profile (name in profiles/ or a path) for what is not measured; "
                  "default: the one matching the GPU, else h200-sxm");
  cmd->add_option("--name", f.name, "Name of the new profile (default: the --out file's stem)");
  cmd->add_option("--nvme-path", f.nvme_path,
                  "Folder on the NVMe drive to measure with O_DIRECT (default: not measured)");
  cmd->add_option("--only", f.only,
                  "Comma-separated sections: context, gemm, hbm, launch, attention, copy, nccl, "
                  "cpu-adam, host, nvme (default: all)");
  cmd->add_option("--models", f.models,
                  "Also measure the exact Linear layers of these models (comma-separated catalog "
                  "names or HF config paths) at every token count, in the forward and both "
                  "backward layouts");
  cmd->add_flag("--quick", f.quick, "Fewer shapes and sizes: under a minute on one H200");
  cmd->add_flag("--stack", f.stack,
                "Also measure the PyTorch + DeepSpeed stack (host time per op, block, ZeRO-3 "
                "hook and DeepSpeed optimizer step at stages 0-3, PyTorch's kernel rates and its "
                "blocking GPU-to-host cast copy, the "
                "GEMM rows through PyTorch) with "
                "tools/probes/stack_costs.py and torch_gemm.py, and the GPU's GEMM "
                "sustained-load curve (gpu.sustained_gemm, about 40 s) with gemm_sustained.py "
                "--duty-sweep, and PyTorch's fused attention (gpu.sdpa, about 70 s) with "
                "torch_sdpa.py; needs python3 with torch and a CUDA GPU (docs/stack-costs.md)");
  cmd->add_option("--python", f.python,
                  "Python interpreter for --stack (default python3 on PATH)")
      ->capture_default_str();
  cmd->add_option("--stack-models", f.stack_models,
                  "Models whose family blocks --stack times, one per family: catalog names or "
                  "HF config.json paths (a family the catalog lacks, such as qwen3, is measured "
                  "from its config; default: one catalog model of each of the 14 catalog "
                  "families)");
  cmd->add_flag("--test-sizes", f.tiny, "Tiny sizes for tests (numbers are not meaningful)")
      ->group("");
  return {cmd, [flags] { return RunProfile(*flags); }};
}

namespace {

int RunProfile(const ProfileFlags& f) {
  auto sections = ParseSections(f.only);
  if (!sections.ok()) return Fail(sections.status());
  std::string stack_models = DefaultStackModels();
  if (!f.stack_models.empty()) {
    auto m = StackModels(f.stack_models);
    if (!m.ok()) return Fail(m.status());
    stack_models = *m;
  }
  Status writable = CheckWritable(f.out, f);
  if (!writable.ok()) return Fail(writable);

  std::unique_ptr<DeviceProbe> gpu = MakeGpuProbe();
  std::string gpu_name;
  if (gpu->DeviceCount() > 0) {
    auto info = gpu->Info();
    if (info.ok()) gpu_name = info->name;
  }
  std::string base_name = f.base;
  if (base_name.empty()) {
    base_name = BaseFor(gpu_name);
    if (base_name.empty()) {
      base_name = "h200-sxm";
      fmt::print(stderr, "dsplan: note: {}; using --base {} for what is not measured\n",
                 gpu_name.empty() ? "no GPU to match a datasheet profile"
                                  : fmt::format("no datasheet profile matches '{}'", gpu_name),
                 base_name);
    }
  }
  auto base = FindHardwareProfile(base_name, DataDir());
  if (!base.ok()) return Fail(base.status().WithPrefix("--base"));

  ProfileOptions o;
  o.sections = *sections;
  o.nvme_path = f.nvme_path;
  o.sizes = f.tiny ? TinySizes() : DefaultSizes(f.quick, PhysicalCores());
  if (!f.models.empty()) {
    auto models = ModelGemmShapes(f.models);
    if (!models.ok()) return Fail(models.status());
    std::vector<LinearShape> all = f.tiny ? std::vector<LinearShape>{} : CommonLinearShapes(f.quick);
    for (const LinearShape& l : models->linear) {
      if (std::find_if(all.begin(), all.end(), [&](const LinearShape& a) {
            return a.out == l.out && a.in == l.in;
          }) == all.end()) {
        all.push_back(l);
      }
    }
    o.sizes.gemm_shapes = LinearGemmShapes(
        all, f.tiny ? std::vector<int64_t>{128} : GemmTokenCounts(f.quick));
    if (!f.tiny) {
      for (const GemmShape& s : BatchedGemmShapes(models->batched)) o.sizes.gemm_shapes.push_back(s);
    }
  }
  o.name = f.name.empty() ? fs::path(f.out).stem().string() : f.name;
  o.dsplan_version = fmt::format("{} ({})", DSPLAN_VERSION, DSPLAN_GIT_HASH);
  const bool tty = isatty(STDERR_FILENO);
  if (tty) {
    o.progress = [](const ProgressUpdate& p) {
      const int secs = static_cast<int>(p.seconds_left + 0.5);
      fmt::print(stderr, "\r\033[K[{:>3}/{}] {:<40} ~{}m{:02}s left", p.done, p.total,
                 p.what.substr(0, 40), secs / 60, secs % 60);
      if (p.done == p.total) fmt::print(stderr, "\r\033[K");
      std::fflush(stderr);
    };
  }

  fmt::print("# dsplan {} ({}) profile: {} mode, base {}, output {}\n", DSPLAN_VERSION,
             DSPLAN_GIT_HASH, f.tiny ? "test-size" : f.quick ? "quick" : "full", base->name, f.out);
  std::fflush(stdout);
  auto result = RunProfile(*base, *gpu, o);
  if (!result.ok()) return Fail(result.status());
  fmt::print("{}", result->report);
  if (!result->notes.empty()) {
    fmt::print("\n# Not measured / warnings\n");
    for (const std::string& n : result->notes) fmt::print("#  - {}\n", n);
  }
  // What --stack measures describes the machine it was measured on (its host and software, the
  // GPU's power limit and cooling, PyTorch's kernels): the base's is not carried over.
  auto drop = [&f](bool present, const char* what, const char* why, auto clear) {
    if (!present) return;
    clear();
    fmt::print("# the base's {} is not carried over (it describes {}){}\n", what, why,
               f.stack ? "; --stack measures this one" : "; measure this one with --stack");
  };
  GpuProfile& gpu_out = result->profile.gpu;
  drop(result->profile.stack.present, "stack section", "the machine it was measured on",
       [&] { result->profile.stack = StackProfile{}; });
  drop(!gpu_out.sustained_gemm.empty(), "GEMM sustained-load curve (gpu.sustained_gemm)",
       "the GPU it was measured on", [&] {
         gpu_out.sustained_gemm.clear();
         gpu_out.sustained_gemm_source = Source{};
       });
  drop(!gpu_out.sdpa.empty(), "PyTorch attention table (gpu.sdpa)",
       "the GPU and PyTorch it was measured with", [&] {
         gpu_out.sdpa.clear();
         gpu_out.sdpa_source = Source{};
       });
  if (f.stack) {
    // The stack's scripts live beside the catalog (the source tree, or DSPLAN_DATA_DIR).
    StackProbeOptions so;
    so.python = f.python;
    so.tools_dir = (fs::path(DataDir()) / "tools" / "probes").string();
    so.catalog_dir = (fs::path(DataDir()) / "models").string();
    so.models = stack_models;
    so.dsplan_version = o.dsplan_version;
    std::error_code ec;
    const fs::path work = fs::temp_directory_path(ec) /
                          fmt::format("dsplan-stack-{}", static_cast<long>(getpid()));
    fs::create_directories(work, ec);
    std::vector<std::string> stack_notes;
    if (ec) {
      stack_notes.push_back(fmt::format("stack not measured: cannot create {}: {}; the profile "
                                        "keeps no stack section",
                                        work.string(), ec.message()));
      stack_notes.push_back("GEMM sustained-load curve not measured (no folder for its output): "
                            "GEMMs priced at the table's rate (no gpu.sustained_gemm)");
      stack_notes.push_back("PyTorch's fused attention not measured (no folder for its output): "
                            "plans price SDPA at gpu.attention_efficiency (no gpu.sdpa)");
    } else {
      so.work_dir = work.string();
      fmt::print("\n# Stack: {} {}, torch_gemm.py, gemm_sustained.py --duty-sweep and "
                 "torch_sdpa.py (this takes a few minutes)\n",
                 so.python, (fs::path(so.tools_dir) / "stack_costs.py").string());
      std::fflush(stdout);
      StackProbeResult sr = MeasureStack(result->profile, so);
      stack_notes = sr.notes;
      if (sr.stack.present) {
        result->profile.stack = std::move(sr.stack);
        fmt::print("# stack: {}\n", result->profile.stack.source.detail);
        // What one run's host costs are good for (docs/stack-costs.md, "Honesty"): on the H200
        // two runs minutes apart agreed to about 10 % per number, and they did not predict that
        // day's host-bound DeepSpeed steps better than the built-in costs.
        fmt::print("# stack host costs are this run's: they repeat to about 10 % between runs and "
                   "track a host-bound step's speed only roughly; host-bound predictions carry "
                   "the wider band (docs/stack-costs.md, Honesty)\n");
        if (!result->profile.stack.gemm.empty()) {
          fmt::print("# stack GEMMs through PyTorch: {} rows\n",
                     result->profile.stack.gemm.size());
        }
      }
      if (!sr.sustained_gemm.points.empty()) {
        const std::vector<DutyPoint>& c = sr.sustained_gemm.points;
        fmt::print("# GEMM sustained-load curve: {:.2f}x at duty {:.3f} to {:.2f}x at duty {:.3f}: "
                   "{}\n",
                   c.front().time_ratio, c.front().duty, c.back().time_ratio, c.back().duty,
                   sr.sustained_gemm.source.detail);
        result->profile.gpu.sustained_gemm = std::move(sr.sustained_gemm.points);
        result->profile.gpu.sustained_gemm_source = std::move(sr.sustained_gemm.source);
      }
      if (!sr.sdpa.rows.empty()) {
        fmt::print("# PyTorch's fused attention: {} points: {}\n", sr.sdpa.rows.size(),
                   sr.sdpa.source.detail);
        result->profile.gpu.sdpa = std::move(sr.sdpa.rows);
        result->profile.gpu.sdpa_source = std::move(sr.sdpa.source);
      }
      fs::remove_all(work, ec);
    }
    for (const std::string& n : stack_notes) fmt::print("# {}\n", n);
  }
  Status w = WriteHardwareProfile(result->profile, f.out);
  if (!w.ok()) return Fail(w);
  fmt::print("\n# wrote {} ({}): {}\n", f.out, result->profile.name,
             result->profile.SourceSummary());
  return 0;
}

}  // namespace
}  // namespace dsplan
