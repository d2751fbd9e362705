// HardwareProfile's own logic: names of enums, FullyMeasured, SourceSummary, node profiles
// applied over a GPU profile. Reading and writing YAML is core/profile_yaml.cc.
#include "core/hardware_profile.h"

#include <algorithm>
#include <map>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "core/text.h"

namespace dsplan {

const char* SourceKindName(SourceKind k) {
  switch (k) {
    case SourceKind::kDatasheet: return "datasheet";
    case SourceKind::kMeasured: return "measured";
    case SourceKind::kAssumption: return "assumption";
  }
  return "?";
}

const char* GemmLayoutName(GemmLayout l) {
  switch (l) {
    case GemmLayout::kNT: return "nt";
    case GemmLayout::kNN: return "nn";
    case GemmLayout::kTN: return "tn";
  }
  return "?";
}

const char* StackKernelClassName(int i) {
  static constexpr const char* kNames[kStackKernelClasses] = {
      "stream", "cast_up", "cast_down", "reduce", "norm",
      "activation", "dropout", "softmax", "log_softmax"};
  return i >= 0 && i < kStackKernelClasses ? kNames[i] : "?";
}

const char* StackOpKindName(int i) {
  static constexpr const char* kNames[kStackOpKinds] = {
      "gemm", "batched_gemm", "attention", "norm", "activation",
      "dropout", "elementwise", "embedding", "softmax", "loss"};
  return i >= 0 && i < kStackOpKinds ? kNames[i] : "?";
}

std::string HardwareProfile::StackSummary() const {
  if (!stack.present) return fmt::format("stack costs: {}", kBuiltInStackCosts);
  std::string versions = "PyTorch " + (stack.versions.torch.empty() ? "?" : stack.versions.torch);
  if (!stack.versions.deepspeed.empty()) versions += " / DeepSpeed " + stack.versions.deepspeed;
  std::string out = fmt::format("stack costs: {} on {} with {} on {}",
                                SourceKindName(stack.source.kind),
                                stack.gpu.empty() ? "?" : stack.gpu, versions,
                                stack.date.empty() ? "?" : stack.date);
  std::vector<std::string> notes;
  if (!stack.zero3) {
    notes.push_back(fmt::format("ZeRO-3 hooks not measured: {}", kBuiltInStackCosts));
  }
  if (!stack.optimizer_step) {
    notes.push_back(
        fmt::format("ZeRO-1/2/3 optimizer step not measured: {}", kBuiltInStackCosts));
  }
  if (!stack.bf16_step) {
    notes.push_back(fmt::format("stage 0's BF16_Optimizer step: {}", kBuiltInStackCosts));
  }
  // stack_costs.py's optimizer_kernels section measures them (since 2026-12-07).
  if (!stack.optimizer_kernels) {
    notes.push_back(fmt::format("optimizer step's fp64 norm kernels: {}", kBuiltInStackCosts));
  }
  // stack_costs.py's zero3_calls section (zero3_gather_calls.py's stacks) measures them.
  const bool call = stack.z3_per_gather_call_s.has_value();
  const bool flush = stack.z3_per_bucket_flush_s.has_value();
  if (call && flush) {
    notes.push_back("ZeRO-3 cost per gather call and per reduce-bucket flush: measured");
  } else if (call || flush) {
    notes.push_back(fmt::format("ZeRO-3 cost per {}: measured; per {}: {}",
                                call ? "gather call" : "reduce-bucket flush",
                                call ? "reduce-bucket flush" : "gather call", kBuiltInStackCosts));
  } else {
    notes.push_back(fmt::format("ZeRO-3 cost per gather call and per reduce-bucket flush: {}",
                                kBuiltInStackCosts));
  }
  // stack_costs.py's cast_copy section measures it (the built-in one: offload_copy_probe.py).
  if (stack.cast_copy_d2h.empty()) {
    notes.push_back(fmt::format("ZeRO-3 offload's blocking cast copy: {}", kBuiltInCastCopy));
  } else if (stack.cast_copy_d2h.back().first < kFreshMappingBytes) {
    // Measured before stack_costs.py timed copies whose temporary is a fresh mapping.
    notes.push_back(
        "ZeRO-3 offload's blocking cast copy: measured below 32 MiB only; larger copies are "
        "priced as that curve plus their page faults, which ran 20-35 % short on the H200 host "
        "(rerun dsplan profile --stack)");
  }
  if (stack.blocks.empty()) notes.push_back("no family blocks measured: per-op host costs");
  if (!stack.gemm.empty()) {
    notes.push_back(fmt::format("GEMMs measured through PyTorch ({})",
                                SourceKindName(stack.gemm_source.kind)));
  }
  for (size_t i = 0; i < notes.size(); ++i) out += (i == 0 ? " (" : "; ") + notes[i];
  if (!notes.empty()) out += ")";
  return out;
}

Result<GemmLayout> ParseGemmLayout(const std::string& s) {
  for (GemmLayout l : {GemmLayout::kNT, GemmLayout::kNN, GemmLayout::kTN}) {
    if (s == GemmLayoutName(l)) return l;
  }
  return Status::InvalidArgument(fmt::format(
      "unknown GEMM layout {} (valid: nt = X W^T forward, nn = dY W input gradient, "
      "tn = dY^T X weight gradient)",
      Quote(s)));
}


HardwareProfile ApplyNodeProfile(const HardwareProfile& gpu, const NodeProfile& node) {
  HardwareProfile p = gpu;
  p.name = gpu.name + "@" + node.name;
  p.description = fmt::format("{} in a {} node: {}", gpu.name, node.name, node.description);
  p.file = node.file;
  p.gpus_per_node = static_cast<int>(node.gpus_per_node.value);
  p.host.cores = static_cast<int>(node.cores.value);
  p.host.ram_bytes = node.ram_bytes;
  if (node.cpu_adam_per_core.value > 0) {
    // min(threads x per-core rate, memory bandwidth / 28 B): AdamW reads the parameter, the
    // gradient and two moments and writes three (7 fp32 = 28 bytes per element).
    p.host.cpu_adam.clear();
    const double cap = node.memory_bytes_per_s.value / 28.0;
    for (int t = 1;; t *= 2) {
      const int threads = std::min(t, p.host.cores);
      p.host.cpu_adam.push_back(
          {threads, std::min(threads * node.cpu_adam_per_core.value, cap)});
      if (threads == p.host.cores) break;
    }
    p.host.cpu_adam_source = Source{
        node.cpu_adam_per_core.source.kind == SourceKind::kMeasured &&
                node.memory_bytes_per_s.source.kind == SourceKind::kMeasured
            ? SourceKind::kMeasured
            : SourceKind::kAssumption,
        fmt::format("node {}: min(threads x {:.3g} elements/s per core ({}), {:.3g} B/s / 28 B "
                    "({}))",
                    node.name, node.cpu_adam_per_core.value, node.cpu_adam_per_core.source.detail,
                    node.memory_bytes_per_s.value, node.memory_bytes_per_s.source.detail)};
  }
  if (node.nvme_drives.value > 0) {
    const double d = node.nvme_drives.value;
    const auto scaled = [&](const Number& n) {
      return Number{n.value * d,
                    Source{n.source.kind, fmt::format("{} drives x ({})", d, n.source.detail)}};
    };
    p.nvme.present = true;
    p.nvme.capacity_bytes = scaled(node.nvme_drive_capacity_bytes);
    p.nvme.read_bytes_per_s = scaled(node.nvme_drive_read_bytes_per_s);
    p.nvme.write_bytes_per_s = scaled(node.nvme_drive_write_bytes_per_s);
    p.nvme.points.clear();
  } else {
    p.nvme = NvmeProfile{};
  }
  for (CollectiveCurve& c : p.links.collectives) {
    if (c.inter_node && node.nic_bytes_per_s_per_gpu.value > 0) {
      c.busbw_bytes_per_s = Number{
          node.nic_bytes_per_s_per_gpu.value * node.nic_busbw_efficiency.value,
          Source{SourceKind::kAssumption,
                 fmt::format("node {}: NIC {:.3g} B/s per GPU ({}) x busbw efficiency {} ({})",
                             node.name, node.nic_bytes_per_s_per_gpu.value,
                             node.nic_bytes_per_s_per_gpu.source.detail,
                             node.nic_busbw_efficiency.value,
                             node.nic_busbw_efficiency.source.detail)}};
      c.points.clear();
    }
    if (!c.inter_node && node.intra_node_busbw_bytes_per_s.value > 0) {
      c.busbw_bytes_per_s = node.intra_node_busbw_bytes_per_s;
      c.points.clear();
    }
    if (!c.inter_node) c.ranks = std::min(c.ranks, p.gpus_per_node);
  }
  return p;
}

namespace {

// One line of SourceSummary: which components each source kind covers.
struct Component {
  std::string name;
  std::vector<const Source*> sources;
};

}  // namespace

bool HardwareProfile::FullyMeasured() const {
  auto m = [](const Number& n) { return n.source.kind == SourceKind::kMeasured; };
  const GpuProfile& g = gpu;
  if (!(m(g.memory_bytes) && m(g.hbm_bytes_per_s) && m(g.memory_bound_efficiency) &&
        m(g.gemm_efficiency) && m(g.attention_efficiency) && m(g.kernel_launch_s) &&
        m(g.context_bytes))) {
    return false;
  }
  if (g.gemm.empty() || g.gemm_source.kind != SourceKind::kMeasured) return false;
  if (host.cpu_adam.empty() || host.cpu_adam_source.kind != SourceKind::kMeasured) return false;
  if (!(m(host.ram_bytes) && m(host.pinned_alloc_bytes_per_s) &&
        m(host.pageable_alloc_bytes_per_s) && m(host.memcpy_bytes_per_s))) {
    return false;
  }
  for (const CopyCurve* c :
       {&links.h2d_pinned, &links.h2d_pageable, &links.d2h_pinned, &links.d2h_pageable}) {
    if (!m(c->latency_s) || !m(c->bytes_per_s)) return false;
  }
  bool intra = false;
  for (const CollectiveCurve& c : links.collectives) {
    if (!m(c.alpha_s) || !m(c.busbw_bytes_per_s)) return false;
    intra = intra || !c.inter_node;
  }
  if (gpus_per_node > 1 && !intra) return false;
  if (nvme.present &&
      !(m(nvme.capacity_bytes) && m(nvme.read_bytes_per_s) && m(nvme.write_bytes_per_s))) {
    return false;
  }
  return true;
}

std::string HardwareProfile::SourceSummary() const {
  std::vector<Component> comps;
  comps.push_back({"GEMM", {&gpu.gemm_source, &gpu.gemm_efficiency.source}});
  comps.push_back({"HBM", {&gpu.hbm_bytes_per_s.source, &gpu.memory_bound_efficiency.source}});
  // The PyTorch stack's fused attention: its measured table when the profile has one, else the
  // efficiency (an assumption in the shipped profiles).
  comps.push_back({"attention", {gpu.sdpa.empty() ? &gpu.attention_efficiency.source
                                                  : &gpu.sdpa_source}});
  if (!gpu.attention.empty()) comps.push_back({"runtime attention", {&gpu.attention_source}});
  if (!gpu.sustained_gemm.empty()) {
    comps.push_back({"sustained GEMM clock", {&gpu.sustained_gemm_source}});
  }
  comps.push_back({"launch", {&gpu.kernel_launch_s.source}});
  comps.push_back({"context", {&gpu.context_bytes.source}});
  comps.push_back({"PCIe", {&links.h2d_pinned.bytes_per_s.source,
                            &links.d2h_pinned.bytes_per_s.source,
                            &links.h2d_pageable.bytes_per_s.source,
                            &links.d2h_pageable.bytes_per_s.source}});
  comps.push_back({"CPU Adam", {&host.cpu_adam_source}});
  comps.push_back({"host memory", {&host.memcpy_bytes_per_s.source,
                                   &host.pinned_alloc_bytes_per_s.source,
                                   &host.pageable_alloc_bytes_per_s.source,
                                   &host.parallel_alloc_bytes_per_s.source}});
  Component intra{"NVLink", {}}, inter{"network", {}};
  for (const CollectiveCurve& c : links.collectives) {
    (c.inter_node ? inter : intra).sources.push_back(&c.busbw_bytes_per_s.source);
  }
  if (!intra.sources.empty()) comps.push_back(intra);
  if (!inter.sources.empty()) comps.push_back(inter);
  if (nvme.present) {
    comps.push_back({"NVMe", {&nvme.read_bytes_per_s.source, &nvme.write_bytes_per_s.source}});
  }
  // A component counts as measured only when all its numbers are; otherwise it takes the
  // weakest kind among them (assumption < datasheet < measured).
  auto rank = [](SourceKind k) {
    return k == SourceKind::kMeasured ? 2 : k == SourceKind::kDatasheet ? 1 : 0;
  };
  std::map<int, std::vector<std::string>> by_kind;
  for (const Component& c : comps) {
    int r = 2;
    bool any = false;
    for (const Source* s : c.sources) {
      if (c.name == "GEMM" && s == &gpu.gemm_source && gpu.gemm.empty()) continue;
      r = std::min(r, rank(s->kind));
      any = true;
    }
    if (any) by_kind[r].push_back(c.name);
  }
  std::string out;
  for (int r : {2, 1, 0}) {
    auto it = by_kind.find(r);
    if (it == by_kind.end()) continue;
    std::string names;
    for (const auto& n : it->second) names += (names.empty() ? "" : ", ") + n;
    out += fmt::format("{}{} ({})", out.empty() ? "" : "; ",
                       r == 2 ? "measured" : r == 1 ? "datasheet" : "assumption", names);
  }
  // dsplan's runtime runs its own fused attention kernel; without its measured table the cost
  // model prices it as tiled GEMMs, which says nothing of the kernel's speed.
  if (gpu.attention.empty()) {
    out += fmt::format("{}not measured (runtime attention: priced as tiled GEMMs)",
                       out.empty() ? "" : "; ");
  }
  // Where the PyTorch stack's host times, kernel rates and hook costs come from.
  out += (out.empty() ? "" : "; ") + StackSummary();
  return out;
}

}  // namespace dsplan
