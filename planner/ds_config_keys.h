// The ds_config.json key table: one row per key dsplan reads, with the Plan member it sets, how
// its value is read, what the HF Trainer does with "auto", DeepSpeed's default (taken from the
// config structs of core/plan.h, never written twice) and what DeepSpeed does with it.
//
// The table drives planner/ds_config.cc: the keys each pydantic section accepts (and their
// aliases), the plain reads of those sections, which "auto" values the Trainer fills, the "has
// no effect" warnings, which ZeRO keys are emitted, and the key list of docs/ds-config.md
// (DsConfigKeyTableMarkdown; tests/planner/ds_config_test.cc checks that the doc matches).
//
// Thread safety: the table is immutable after its first use; safe from several threads.
#ifndef DSPLAN_PLANNER_DS_CONFIG_KEYS_H_
#define DSPLAN_PLANNER_DS_CONFIG_KEYS_H_

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/plan.h"

namespace dsplan {

/// How a value is read (pydantic's lax mode for the pydantic sections).
enum class DsKeyType : uint8_t {
  kBool,      // true/false, 0/1, "yes"/"no", ...
  kSize,      // an integer >= 0 (integral floats such as 5e8 accepted)
  kInt,       // an integer (may be negative)
  kNumber,    // any JSON number
  kFraction,  // a number from 0 to 1
  kString,
  kDevice,    // "none", "cpu" or "nvme"
  kDtype,     // "fp32", "fp16", "bf16" (and DeepSpeed's other spellings)
  kObject,    // a nested block
  kBatch,     // a positive integer, or "auto"
  kAny,       // accepted as written (DeepSpeed passes it on)
};
const char* DsKeyTypeName(DsKeyType t);

/// What an "auto" value becomes.
enum class DsKeyAuto : uint8_t {
  /// The HF Trainer leaves it; pydantic drops it and DeepSpeed's default applies (a warning).
  kDropped,
  /// The Trainer fills it from the model's hidden_size h (zero_optimization buckets).
  kHiddenSize,
  /// The Trainer fills it at stage 3 only, from h; below stage 3 it is dropped.
  kHiddenSizeStage3,
  /// The Trainer fills it from its arguments (batch keys, precision, clipping, lr, ...).
  kTrainer,
  /// Not allowed: an error (or, where DeepSpeed reads the key itself, the key's special rule).
  kRejected,
};
const char* DsKeyAutoText(DsKeyAuto a);

/// When DeepSpeed does nothing with the key (a "has no effect" warning when it is given).
enum class DsKeyNoEffect : uint8_t {
  kNever,
  kStage0,          // stage 0 ignores it (no partitioning, no buckets)
  kBelowStage3,     // a stage-3 key given at stage 0, 1 or 2
  kDeviceNone,      // an offload key when the block's device is "none"
  kWithoutNvme,     // an NVMe-only offload key when the block's device is "cpu"
};

/// When EmitDsConfig writes a zero_optimization key.
enum class DsKeyEmit : uint8_t {
  kByHand,            // written by the emitter's own code (blocks, devices), or never
  kAboveStage0,       // at stages 1-3; at stage 0 only a value other than the default
  kStage3,            // at stage 3; below only a value other than the default
  kNotDefault,        // only a value other than DeepSpeed's default
};

/// Who reads the key.
enum class DsKeyRead : uint8_t {
  kPlain,    // the table's own read: the value, checked by type, into the member
  kChecked,  // the table's own read: type-checked only (DeepSpeed accepts it; no Plan member)
  kSpecial,  // the parser's own code (stage, devices, deprecated names, unsupported features)
};

struct DsConfigKey {
  const char* name;       // dotted, e.g. "zero_optimization.reduce_bucket_size"
  const char* alias;      // the pydantic alias, e.g. "prefetch_bucket_size"; nullptr if none
  const char* member;     // the Plan member it sets, e.g. "zero.reduce_bucket_size"; "" if none
  DsKeyType type;
  DsKeyAuto on_auto;
  DsKeyNoEffect no_effect;
  DsKeyEmit emit;
  DsKeyRead read;
  /// What DeepSpeed does with the key, in one line (also the doc's last column).
  const char* effect;
  /// DeepSpeed's default where no Plan member holds it ("" = the member's default, or none).
  const char* default_text = "";
  /// Position among the "has no effect" warnings of one check (lower first; ties keep table
  /// order): the order the messages have always come in.
  int8_t warn_order = 0;
  /// Left out of the "valid: ..." lists of warnings (an older spelling DeepSpeed still reads,
  /// or one it rejects).
  bool unlisted = false;
  /// kHiddenSize / kHiddenSizeStage3: the Trainer's value from the model's hidden_size.
  int64_t (*from_hidden)(int64_t h) = nullptr;
  /// The Plan member, for the plain reads, the emitter and the default (at most one is set).
  bool* (*bool_ref)(Plan&) = nullptr;
  int64_t* (*int_ref)(Plan&) = nullptr;
  double* (*double_ref)(Plan&) = nullptr;
  std::optional<bool>* (*opt_bool_ref)(Plan&) = nullptr;

  /// The part after |section| + ".", e.g. "reduce_bucket_size".
  std::string_view Leaf() const;
  /// True when the key is directly inside |section| ("zero_optimization").
  bool In(std::string_view section) const;
  /// DeepSpeed's default as text: from the member of a default Plan, else default_text.
  std::string DefaultText() const;
};

/// Every row, grouped by section; within a pydantic section in the order of DeepSpeed's model
/// (the order of the "Valid keys" list in errors).
const std::vector<DsConfigKey>& DsConfigKeys();

/// The rows directly inside |section|, in table order.
std::vector<const DsConfigKey*> DsConfigKeysIn(std::string_view section);

/// The row named |dotted| (canonical name or alias), or nullptr.
const DsConfigKey* FindDsConfigKey(std::string_view dotted);

/// The key list of docs/ds-config.md (between its "key table" markers), one row per key.
std::string DsConfigKeyTableMarkdown();

}  // namespace dsplan

#endif  // DSPLAN_PLANNER_DS_CONFIG_KEYS_H_
