// `dsplan profile --stack`: measures the software stack users train with (PyTorch eager +
// transformers + DeepSpeed) on this machine by running tools/probes/stack_costs.py and
// tools/probes/torch_gemm.py with python3, and turns their JSON output into the profile's
// `stack:` section (core/hardware_profile.h StackProfile; docs/stack-costs.md). It also runs
// tools/probes/gemm_sustained.py --duty-sweep for the GPU's GEMM sustained-load curve
// (gpu.sustained_gemm; docs/stack-costs.md section 7).
//
// Nothing is measured silently or filled in: when python3, torch or a CUDA GPU is missing the
// section is not written and one note says which and why; when DeepSpeed or transformers is
// missing, the parts they measure are left out of the section and a note says so (the cost model
// then uses the built-in ZeRO-3 hook costs, or per-op host costs for the families (scaled from
// the measured families when there are three or more), and the
// profile's summary says so).
#ifndef DSPLAN_RUNTIME_PROFILER_STACK_PROBE_H_
#define DSPLAN_RUNTIME_PROFILER_STACK_PROBE_H_

#include <string>
#include <vector>

#include "core/hardware_profile.h"
#include "core/status.h"

namespace dsplan {

/// One catalog model per family whose blocks the stack measurement times (tools/probes/
/// stack_costs.py --models).
const char* DefaultStackModels();

/// The `stack:` section from the JSON that tools/probes/stack_costs.py writes (schema
/// dsplan-stack-costs/1). |reference_stream_bytes_per_s|: the streaming rate of the profile the
/// section goes into (the kernel rates were measured on its GPU). |tool| names what ran, for the
/// source. Sections that are missing or failed in the document become |notes|; the document must
/// hold op_kinds and kernels (else an error naming what is missing). |source| names the
/// document in errors.
Result<StackProfile> StackProfileFromJson(const std::string& json_text, const std::string& source,
                                          double reference_stream_bytes_per_s,
                                          const std::string& tool,
                                          std::vector<std::string>* notes);

/// The rows and source of a tools/probes/torch_gemm.py document (schema dsplan-torch-gemm/1),
/// into |stack| (stack.gemm, stack.gemm_source); every row is checked.
Status AddTorchGemmFromJson(const std::string& json_text, const std::string& source,
                            StackProfile* stack);

/// The GEMM sustained-load curve and its source, for gpu.sustained_gemm / sustained_gemm_source.
struct SustainedGemmCurve {
  std::vector<DutyPoint> points;  // ascending in duty; empty when not measured
  Source source;
};

/// At most this many points in a measured curve (the sweep writes 6).
inline constexpr size_t kMaxSustainedGemmPoints = 64;

/// The curve from the JSON that tools/probes/gemm_sustained.py --duty-sweep writes (schema
/// dsplan-gemm-duty/1): one point per row, [rows[i].sustained.duty, rows[i].sustained_over_alone],
/// sorted by duty. Every row is checked: duty in (0, 1], ratio a finite number in [0.95, 4]; a
/// ratio in [0.95, 1) (noise around no slowdown: the sweep's lowest duties on a GPU that does not
/// slow down) is read as 1 and the source says so; 2 to kMaxSustainedGemmPoints rows, no two at
/// the same duty; torch, device and date present. Errors name |source| and the key. |tool| names
/// what ran and |dsplan_version| (may be empty) what converted it, for the source.
Result<SustainedGemmCurve> SustainedGemmFromJson(const std::string& json_text,
                                                 const std::string& source, const std::string& tool,
                                                 const std::string& dsplan_version);

/// PyTorch's fused attention table and its source, for gpu.sdpa / sdpa_source.
struct SdpaTable {
  std::vector<AttentionPoint> rows;  // empty when not measured
  Source source;
};

/// At most this many rows in a measured SDPA table (torch_sdpa.py writes 300).
inline constexpr size_t kMaxSdpaRows = 4096;

/// The table from the JSON that tools/probes/torch_sdpa.py writes (schema dsplan-torch-sdpa/1):
/// rows [dtype, head_dim, causal, seq, batch_heads, fwd_flops_per_s, bwd_flops_per_s]. Every row
/// is checked: dtype bf16 or fp16, head_dim 1-1024, seq and batch_heads positive, rates finite
/// in (0, 1e17] FLOP/s, no two rows at the same point; 1 to kMaxSdpaRows rows; torch, gpu and
/// date present. Errors name |source| and the row.
Result<SdpaTable> SdpaTableFromJson(const std::string& json_text, const std::string& source,
                                    const std::string& dsplan_version);

struct StackProbeOptions {
  std::string python = "python3";  // the interpreter (a name on PATH or a path)
  std::string tools_dir;           // where stack_costs.py and torch_gemm.py are
  std::string catalog_dir;         // models/ for stack_costs.py --catalog
  std::string models;              // comma-separated catalog ids (DefaultStackModels())
  std::string work_dir;            // an existing folder for the probes' files
  bool gemm = true;                // also measure the profile's GEMM rows through PyTorch
  bool sustained_gemm = true;      // also run the GEMM duty sweep (gpu.sustained_gemm)
  bool sdpa = true;                // also measure PyTorch's fused attention (gpu.sdpa)
  std::string gemm_dtypes = "bf16,fp16";
  std::string dsplan_version;      // "0.1.0 (abc1234)"
};

struct StackProbeResult {
  StackProfile stack;              // present only when measured
  SustainedGemmCurve sustained_gemm;  // points only when measured
  SdpaTable sdpa;                  // rows only when measured
  std::vector<std::string> notes;  // what was not measured and why (one line each)
};

/// Measures the stack for |profile| (the profile being written: its streaming rate and, for
/// stack.gemm, its gpu.gemm rows), then the GEMM sustained-load curve and PyTorch's fused
/// attention table (whether or not the stack section was measured: they need only torch and a
/// CUDA GPU). Never fails: what cannot be measured becomes a note.
StackProbeResult MeasureStack(const HardwareProfile& profile, const StackProbeOptions& options);

}  // namespace dsplan

#endif  // DSPLAN_RUNTIME_PROFILER_STACK_PROBE_H_
