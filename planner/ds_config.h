// ds_config.json <-> Plan.
//
// ParseDsConfig reads a DeepSpeed config the way DeepSpeed's own loader does
// (docs/deepspeed-facts.md#config-loader: runtime/config.py, zero/config.py,
// zero/offload_config.py, swap_tensor/aio_config.py) and resolves "auto" values the way the
// HuggingFace Trainer does (docs/deepspeed-facts.md#hf-auto), with the Trainer's arguments taken
// from a DsConfigContext. What DeepSpeed rejects is an error naming the key and
// what is valid; what DeepSpeed accepts but ignores, or what has no effect, is a warning.
//
// EmitDsConfig writes a Plan back as a config DeepSpeed accepts, either with every value
// explicit or in the HF Trainer's "auto" form.
//
// Thread safety: all functions are pure (the file overload reads one file); safe to call from
// several threads.
#ifndef DSPLAN_PLANNER_DS_CONFIG_H_
#define DSPLAN_PLANNER_DS_CONFIG_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/plan.h"
#include "core/status.h"
#include "planner/run_shape_pins.h"

namespace dsplan {

/// What the config itself does not say: the cluster, and the values the HF Trainer would put in
/// place of "auto" (its TrainingArguments). An unset optional means "not given": an "auto" that
/// needs it is an error for the batch keys, and falls back to the Trainer's default elsewhere.
///
/// The run shape (PinnedRunShape, the one RunShape from the flags to the workload): its
/// seq_len, target_len and attention are the workload's, copied into the Plan unchanged (they
/// are not in ds_config.json), and so is gradient_checkpointing where pinned (unpinned: off).
/// The pinned micro_batch (per_device_train_batch_size, --micro-batch) and precision (the
/// Trainer's --bf16 / --fp16; fp32 = neither) resolve "auto" keys and must agree with explicit
/// ones; unpinned they are "not given".
struct DsConfigContext : PinnedRunShape {
  int nodes = 1;
  int gpus_per_node = 1;
  /// gradient_accumulation_steps (--grad-accum).
  std::optional<int64_t> grad_accum;
  /// train_batch_size (--global-batch) = micro × accumulation × world size.
  std::optional<int64_t> global_batch;
  /// model.config.hidden_size, for reduce_bucket_size = h*h and, at stage 3,
  /// stage3_prefetch_bucket_size = int(0.9*h*h), stage3_param_persistence_threshold = 10*h.
  std::optional<int64_t> hidden_size;
  /// max_grad_norm (Trainer default 1.0).
  std::optional<double> gradient_clipping;
};

/// One "auto" value and what it became.
struct AutoValue {
  std::string key;      // dotted, e.g. "gradient_accumulation_steps"
  std::string value;    // as resolved, e.g. "1", "true", "5e-05 (the Trainer's)"
  std::string source;   // "--grad-accum", "--global-batch", "model hidden_size", ...
  bool from_default = false;  // the HF Trainer's default (no flag given)
};

struct ParsedDsConfig {
  Plan plan;
  /// One line each: keys DeepSpeed ignores, keys with no effect in this configuration,
  /// deprecated names, "auto" values replaced by a default.
  std::vector<std::string> warnings;
  /// Dotted keys whose "auto" was replaced, e.g. "train_micro_batch_size_per_gpu",
  /// "zero_optimization.reduce_bucket_size", in the order they were resolved.
  std::vector<std::string> resolved_from_auto;
  /// The same keys with their values and where each came from.
  std::vector<AutoValue> auto_values;
};

/// Parses |cfg| (a ds_config.json object) into a Plan plus warnings, then runs ValidatePlan.
/// Returns InvalidArgument (the key, the value and what is valid, in one line) for anything
/// DeepSpeed would reject, and Unsupported for valid DeepSpeed features dsplan does not model
/// (ZeRO++, MiCS, 1-bit optimizers, pipeline/tensor parallelism).
Result<ParsedDsConfig> ParseDsConfig(const nlohmann::json& cfg, const DsConfigContext& ctx);

/// Reads and parses the file at |path|. Errors start with the file name; malformed JSON gives
/// the line and column; duplicate keys are rejected as DeepSpeed rejects them.
Result<ParsedDsConfig> ParseDsConfigFile(const std::string& path, const DsConfigContext& ctx);

/// Parses JSON text (the file overload's work, without the file). |source_name| prefixes errors.
Result<ParsedDsConfig> ParseDsConfigText(const std::string& text, const DsConfigContext& ctx,
                                         const std::string& source_name = "ds_config");

enum class EmitStyle {
  /// Every value explicit, only keys DeepSpeed's models accept, integers as integers; batch keys
  /// consistent for the plan's world size. For `deepspeed train.py --deepspeed ds_config.json`.
  kExplicit,
  /// The HF Trainer form: "auto" for the batch keys, gradient_clipping, the optimizer's and
  /// scheduler's hyperparameters and fp16/bf16 "enabled"; dsplan's values for the ZeRO keys.
  kHfAuto,
};
const char* EmitStyleName(EmitStyle s);

/// The ds_config.json object for |plan|. ParseDsConfig(EmitDsConfig(p, kExplicit), ctx with the
/// same cluster) gives back p (overlap_comm made explicit).
nlohmann::json EmitDsConfig(const Plan& plan, EmitStyle style);

/// The context under which |plan|'s kHfAuto config resolves back to |plan|: its cluster, batch,
/// precision, gradient clipping and workload.
DsConfigContext ContextForPlan(const Plan& plan);

}  // namespace dsplan

#endif  // DSPLAN_PLANNER_DS_CONFIG_H_
