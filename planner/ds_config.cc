#include "planner/ds_config.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <limits>
#include <map>
#include <set>
#include <sstream>
#include <string_view>

#include <fmt/format.h>

#include "core/checked_math.h"
#include "core/text.h"
#include "planner/ds_config_keys.h"

namespace dsplan {
namespace {

using json = nlohmann::json;

// ---------------------------------------------------------------------------------------------
// Value helpers. Every error names the dotted key and the value.

// A value quoted into a message: compact, cut, escaped (core/text.h).
std::string Show(const json& v) { return ShowJson(v); }

bool IsAuto(const json& v) { return v.is_string() && v.get_ref<const std::string&>() == "auto"; }

std::string Lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::tolower(c); });
  return s;
}

std::string Join(const std::vector<std::string>& v, std::string_view sep = ", ") {
  std::string out;
  for (size_t i = 0; i < v.size(); ++i) {
    if (i) out += sep;
    out += v[i];
  }
  return out;
}


/// " (did you mean 'x'?)" when a valid name is close to |key|, else "".
std::string Suggestion(const std::string& key, const std::vector<std::string>& valid) {
  // Keys are short; a long one is no typo (and the edit distance is quadratic in its length).
  if (key.size() > 256) return "";
  std::string best;
  size_t best_d = std::numeric_limits<size_t>::max();
  for (const std::string& v : valid) {
    size_t d = EditDistance(Lower(key), Lower(v));
    // A key that is a prefix/suffix-free rename (cpu_offload vs offload) is also worth naming.
    if (v.find(key) != std::string::npos || key.find(v) != std::string::npos) d = std::min<size_t>(d, 3);
    if (d < best_d) {
      best_d = d;
      best = v;
    }
  }
  if (best.empty() || best_d > std::max<size_t>(3, key.size() / 3)) return "";
  return fmt::format(" (did you mean '{}'?)", best);
}

/// pydantic's lax int: JSON integers, integral floats (5e8), digit strings. Rejects fractions,
/// booleans and other strings.
Result<int64_t> ToInt(const json& v, const std::string& key) {
  if (v.is_number_integer()) {
    if (v.is_number_unsigned() && v.get<uint64_t>() > uint64_t(std::numeric_limits<int64_t>::max())) {
      return Status::InvalidArgument(fmt::format("{} = {} is too large", key, Show(v)));
    }
    return v.get<int64_t>();
  }
  if (v.is_number_float()) {
    const double d = v.get<double>();
    if (!std::isfinite(d) || d != std::floor(d)) {
      return Status::InvalidArgument(fmt::format(
          "{} must be an integer, got {} (DeepSpeed's pydantic model rejects fractional values; "
          "round it, e.g. int(0.9*h*h))",
          key, Show(v)));
    }
    if (std::fabs(d) > 9.2e18) {
      return Status::InvalidArgument(fmt::format("{} = {} is too large", key, Show(v)));
    }
    return static_cast<int64_t>(d);
  }
  if (v.is_string()) {
    const std::string& s = v.get_ref<const std::string&>();
    size_t i = (!s.empty() && (s[0] == '-' || s[0] == '+')) ? 1 : 0;
    bool digits = s.size() > i && s.size() < 19;
    for (size_t k = i; k < s.size() && digits; ++k) digits = std::isdigit((unsigned char)s[k]);
    if (digits) return std::stoll(s);
  }
  return Status::InvalidArgument(
      fmt::format("{} must be an integer, got {}", key, Show(v)));
}

Result<double> ToDouble(const json& v, const std::string& key) {
  if (v.is_number()) return v.get<double>();
  return Status::InvalidArgument(fmt::format("{} must be a number, got {}", key, Show(v)));
}

/// pydantic's lax bool: true/false, 0/1, and the usual strings.
Result<bool> ToBool(const json& v, const std::string& key) {
  if (v.is_boolean()) return v.get<bool>();
  if (v.is_number_integer()) {
    const int64_t i = v.get<int64_t>();
    if (i == 0 || i == 1) return i == 1;
  }
  if (v.is_string()) {
    const std::string s = Lower(v.get<std::string>());
    for (const char* t : {"true", "1", "yes", "on", "y", "t"}) if (s == t) return true;
    for (const char* f : {"false", "0", "no", "off", "n", "f"}) if (s == f) return false;
  }
  return Status::InvalidArgument(
      fmt::format("{} must be true or false, got {}", key, Show(v)));
}

Result<std::string> ToString(const json& v, const std::string& key) {
  if (v.is_string()) return v.get<std::string>();
  return Status::InvalidArgument(fmt::format("{} must be a string, got {}", key, Show(v)));
}

Result<int64_t> NonNegativeInt(const json& v, const std::string& key) {
  DSPLAN_ASSIGN_OR_RETURN(int64_t i, ToInt(v, key));
  if (i < 0) {
    return Status::InvalidArgument(fmt::format("{} must be >= 0, got {}", key, i));
  }
  return i;
}

/// data_types.grad_accum_dtype and friends: DeepSpeed's DtypeEnum names.
Result<Precision> ToDtype(const json& v, const std::string& key) {
  if (v.is_string()) {
    const std::string s = Lower(v.get<std::string>());
    if (s == "fp32" || s == "float32" || s == "float") return Precision::kFp32;
    if (s == "fp16" || s == "float16" || s == "half") return Precision::kFp16;
    if (s == "bf16" || s == "bfloat16") return Precision::kBf16;
  }
  return Status::InvalidArgument(
      fmt::format("{} is {}; valid: \"fp32\", \"fp16\", \"bf16\"", key, Show(v)));
}

// ---------------------------------------------------------------------------------------------
// Table-driven reads (planner/ds_config_keys.h).

/// Reads |v| as the row's type into its Plan member; the error names the row's dotted key.
/// REQUIRES: the row has a member (bool_ref, opt_bool_ref, int_ref or double_ref).
Status ReadInto(const DsConfigKey& k, const json& v, Plan& p) {
  const std::string key = k.name;
  if (k.bool_ref != nullptr) {
    DSPLAN_ASSIGN_OR_RETURN(*k.bool_ref(p), ToBool(v, key));
  } else if (k.opt_bool_ref != nullptr) {
    DSPLAN_ASSIGN_OR_RETURN(bool b, ToBool(v, key));
    *k.opt_bool_ref(p) = b;
  } else if (k.int_ref != nullptr) {
    if (k.type == DsKeyType::kSize) {
      DSPLAN_ASSIGN_OR_RETURN(*k.int_ref(p), NonNegativeInt(v, key));
    } else {
      DSPLAN_ASSIGN_OR_RETURN(*k.int_ref(p), ToInt(v, key));
    }
  } else if (k.double_ref != nullptr) {
    DSPLAN_ASSIGN_OR_RETURN(double d, ToDouble(v, key));
    if (k.type == DsKeyType::kFraction && (d < 0 || d > 1)) {
      return Status::InvalidArgument(
          fmt::format("{} must be between 0 and 1, got {}", key, d));
    }
    *k.double_ref(p) = d;
  }
  return Status();
}

/// Type-checks |v| as the row's type (R::kChecked rows: accepted, no Plan member).
Status CheckType(const DsConfigKey& k, const json& v) {
  switch (k.type) {
    case DsKeyType::kBool: return ToBool(v, k.name).status();
    case DsKeyType::kSize: return NonNegativeInt(v, k.name).status();
    case DsKeyType::kInt: return ToInt(v, k.name).status();
    case DsKeyType::kNumber: return ToDouble(v, k.name).status();
    default: return Status();
  }
}

/// "a, b, c": the keys of |section| a warning lists as valid.
std::string ValidList(std::string_view section) {
  std::vector<std::string> names;
  for (const DsConfigKey* k : DsConfigKeysIn(section)) {
    if (!k->unlisted) names.emplace_back(k->Leaf());
  }
  return Join(names);
}

/// The rows of |section| with |rule| that |given| says are present, in the order of their
/// "has no effect" warnings.
template <typename Given>
std::vector<const DsConfigKey*> NoEffectKeys(std::string_view section,
                                             std::initializer_list<DsKeyNoEffect> rules,
                                             Given given) {
  std::vector<const DsConfigKey*> out;
  for (const DsConfigKey* k : DsConfigKeysIn(section)) {
    if (std::find(rules.begin(), rules.end(), k->no_effect) != rules.end() &&
        given(std::string(k->Leaf()))) {
      out.push_back(k);
    }
  }
  std::stable_sort(out.begin(), out.end(), [](const DsConfigKey* a, const DsConfigKey* b) {
    return a->warn_order < b->warn_order;
  });
  return out;
}

// ---------------------------------------------------------------------------------------------
// pydantic sections: the keys each model accepts (DeepSpeed 0.16.5), with aliases.

struct FieldName {
  const char* name;   // the field name
  const char* alias;  // the alias DeepSpeed documents, or nullptr
};

/// The keys of a pydantic section, from the key table (planner/ds_config_keys.h), in the order
/// of DeepSpeed's model.
std::vector<FieldName> FieldsOf(std::string_view section) {
  std::vector<FieldName> f;
  for (const DsConfigKey* k : DsConfigKeysIn(section)) {
    // The leaf is the tail of the row's name literal, so it ends with the literal's NUL.
    f.push_back({k->name + (std::strlen(k->name) - k->Leaf().size()), k->alias});
  }
  return f;
}

// DeepSpeedZeroConfig. Canonical names are the ds_config spellings we use in messages.
const std::vector<FieldName>& ZeroFields() {
  static const std::vector<FieldName> f = FieldsOf("zero_optimization");
  return f;
}

// Fields that DeepSpeed releases after 0.16.5 added; older versions reject them.
const std::set<std::string>& NewerZeroFields() {
  static const std::set<std::string> s = {
      "stage3_allgather_sequential", "allgather_sequential",
      "stage3_partition_stream_chunk_size", "partition_stream_chunk_size",
      "enable_sanity_checks", "save_muon_momentum_buffer_in_memory", "leaf_module", "zenflow"};
  return s;
}

const std::vector<FieldName>& OffloadOptimizerFields() {
  static const std::vector<FieldName> f = FieldsOf("zero_optimization.offload_optimizer");
  return f;
}
const std::set<std::string>& NewerOffloadOptimizerFields() {
  static const std::set<std::string> s = {"super_offload", "convert_grad_on_cpu",
                                          "cpuadam_cores_perc"};
  return s;
}

const std::vector<FieldName>& OffloadParamFields() {
  static const std::vector<FieldName> f = FieldsOf("zero_optimization.offload_param");
  return f;
}

/// Top-level keys DeepSpeed reads (any version); others it ignores.
const std::set<std::string>& KnownTopLevelKeys() {
  static const std::set<std::string> s = {
      "train_batch_size", "train_micro_batch_size_per_gpu", "gradient_accumulation_steps",
      "steps_per_print", "dump_state", "optimizer", "scheduler", "fp16", "bf16", "bfloat16",
      "amp", "gradient_clipping", "prescale_gradients", "gradient_predivide_factor",
      "sparse_gradients", "zero_optimization", "zero_allow_untested_optimizer",
      "zero_force_ds_cpu_optimizer", "communication_data_type",
      "seq_parallel_communication_data_type", "data_types", "wall_clock_breakdown",
      "memory_breakdown", "flops_profiler", "activation_checkpointing", "aio", "tensorboard",
      "wandb", "csv_monitor", "comet", "monitor_config", "elasticity", "autotuning",
      "checkpoint", "sparse_attention", "pipeline", "curriculum_learning", "data_efficiency",
      "compression_training", "quantize_training", "progressive_layer_drop", "eigenvalue",
      "nebula", "datastates_ckpt", "weight_quantization", "compile", "timers",
      "tensor_parallel", "hybrid_engine", "dataloader_drop_last", "vocabulary_size",
      "disable_allgather", "allgather_size", "fp16_master_weights_and_grads",
      "fp16_auto_cast", "graph_harvesting", "use_data_before_expert_parallelism",
      "load_universal_checkpoint", "use_node_local_storage", "sequence_parallel_size",
      "gradient_accumulation_dtype", "torch_autocast", "deepcompile", "zenflow",
      "zero_optimization_stage", "memory_efficient_linear", "optimizer_legacy_fusion",
      "mics_shard_size", "mics_hierarchical_params_gather", "expert_parallel",
      "train_batch_size_auto"};
  return s;
}

/// Checks |obj|'s keys against a pydantic model's fields; returns the values under their
/// canonical names. Unknown keys are an error naming the key, the nearest field and all fields.
Result<std::map<std::string, json>> CheckPydanticKeys(const json& obj, const std::string& section,
                                                      const std::vector<FieldName>& fields,
                                                      const std::set<std::string>& newer,
                                                      std::vector<std::string>* warnings) {
  if (!obj.is_object()) {
    return Status::InvalidArgument(
        fmt::format("{} must be an object, got {}", section, Show(obj)));
  }
  std::map<std::string, json> out;
  std::vector<std::string> valid;
  for (const FieldName& f : fields) {
    valid.push_back(f.name);
    if (f.alias) valid.push_back(f.alias);
  }
  for (auto it = obj.begin(); it != obj.end(); ++it) {
    const std::string& key = it.key();
    const FieldName* match = nullptr;
    for (const FieldName& f : fields) {
      if (key == f.name || (f.alias && key == f.alias)) match = &f;
    }
    if (!match) {
      if (newer.count(key)) {
        warnings->push_back(fmt::format(
            "{}.{} exists only in DeepSpeed releases after 0.16.5 (older ones reject it); dsplan "
            "does not model it",
            section, key));
        continue;
      }
      std::vector<std::string> names;
      for (const FieldName& f : fields) names.push_back(f.name);
      return Status::InvalidArgument(fmt::format(
          "{}: unknown key {}{}; DeepSpeed rejects unknown keys here (pydantic extra=forbid). "
          "Valid keys: {}",
          section, Quote(key), Suggestion(key, valid), Join(names)));
    }
    if (out.count(match->name)) {
      return Status::InvalidArgument(fmt::format(
          "{}: '{}' is given twice (as '{}' and as '{}'); keep one", section, match->name,
          match->name, match->alias ? match->alias : match->name));
    }
    out[match->name] = it.value();
  }
  return out;
}

// ---------------------------------------------------------------------------------------------
// The parser.

/// A batch triple from a config that ResolveBatch refused, explained as DeepSpeed reports it:
/// config.py _set_batch_related_parameters derives the missing key by integer division, then
/// _batch_assertion fails on a non-positive key or on train_batch_size != micro-batch x
/// accumulation x world size. The keys given are positive; at least train or micro is given.
/// |refused| (ResolveBatch's own message) is the fallback for a refusal DeepSpeed would not make
/// itself (accumulation beyond kMaxGradAccum).
Status DeepSpeedBatchError(std::optional<int64_t> train, std::optional<int64_t> micro,
                           std::optional<int64_t> gas, int64_t ws, const Status& refused) {
  auto overflow = [&]() {
    return Status::InvalidArgument(fmt::format(
        "train_micro_batch_size_per_gpu {} x gradient_accumulation_steps {} x world size {} "
        "overflows a 64-bit count; use realistic batch sizes",
        micro.value_or(0), gas.value_or(1), ws));
  };
  if (train && micro && !gas) {
    gas = *train / *micro / ws;
  } else if (train && gas && !micro) {
    micro = *train / ws / *gas;
  } else if (train && !micro) {
    gas = 1;
    micro = *train / ws;
  } else if (!train) {
    gas = gas.value_or(1);
    train = CheckedProduct({*micro, *gas, ws});
    if (!train) return overflow();
  }
  if (*micro <= 0) {
    return Status::InvalidArgument(fmt::format(
        "train_micro_batch_size_per_gpu is {} (train_batch_size {} // world size {} // "
        "accumulation {}); it has to be greater than 0",
        *micro, *train, ws, *gas));
  }
  if (*gas <= 0) {
    return Status::InvalidArgument(fmt::format(
        "gradient_accumulation_steps is {} (train_batch_size {} // micro-batch {} // world size "
        "{}); it has to be greater than 0",
        *gas, *train, *micro, ws));
  }
  const std::optional<int64_t> product = CheckedProduct({*micro, *gas, ws});
  if (!product) return overflow();
  if (*train != *product) {
    // The usual cause is a config written for another GPU count: say which one it fits.
    const int64_t per_rank = *micro * *gas;  // both <= *product, no overflow
    std::string fits;
    if (*train % per_rank == 0) {
      fits = fmt::format(" (they agree for {} GPUs in all: --gpus x --nodes)", *train / per_rank);
    }
    return Status::InvalidArgument(fmt::format(
        "train_batch_size {} != train_micro_batch_size_per_gpu {} * gradient_accumulation_steps "
        "{} * world size {} (= {}); DeepSpeed asserts they are equal: fix one of the batch keys{}",
        *train, *micro, *gas, ws, *product, fits));
  }
  if (*gas > kMaxGradAccum) {
    return Status::InvalidArgument(fmt::format(
        "gradient_accumulation_steps must be an integer from 1 to {}, got {}", kMaxGradAccum,
        *gas));
  }
  return Status::InvalidArgument(std::string(refused.message()));
}

class Parser {
 public:
  Parser(const json& cfg, const DsConfigContext& ctx) : cfg_(cfg), ctx_(ctx) {}

  Result<ParsedDsConfig> Run() {
    if (!cfg_.is_object()) {
      return Status::InvalidArgument(fmt::format(
          "a DeepSpeed config must be a JSON object, got {}", std::string(cfg_.type_name())));
    }
    Plan& p = out_.plan;
    p.nodes = ctx_.nodes;
    p.gpus_per_node = ctx_.gpus_per_node;
    p.seq_len = ctx_.shape.seq_len;
    p.target_len = ctx_.shape.target_len;
    p.gradient_checkpointing = ctx_.PinnedGradientCheckpointing().value_or(false);
    p.attention = ctx_.shape.attention;
    if (ctx_.nodes < 1 || ctx_.gpus_per_node < 1) {
      return Status::InvalidArgument(fmt::format(
          "the cluster must have at least one node and one GPU per node (got {} x {})",
          ctx_.nodes, ctx_.gpus_per_node));
    }

    WarnUnknownTopLevel();
    ReadDsplanBlock();
    DSPLAN_RETURN_IF_ERROR(ParsePrecision());
    DSPLAN_RETURN_IF_ERROR(ParseZero());
    DSPLAN_RETURN_IF_ERROR(ParseBatch());
    DSPLAN_RETURN_IF_ERROR(ParseOptimizer());
    DSPLAN_RETURN_IF_ERROR(ParseScheduler());
    DSPLAN_RETURN_IF_ERROR(ParseMisc());
    DSPLAN_RETURN_IF_ERROR(ParseAio());
    DSPLAN_RETURN_IF_ERROR(ParseActivationCheckpointing());
    DSPLAN_RETURN_IF_ERROR(CrossChecks());
    DSPLAN_RETURN_IF_ERROR(ValidatePlan(p));
    return std::move(out_);
  }

 private:
  void Warn(std::string w) { out_.warnings.push_back(std::move(w)); }
  void Resolved(const std::string& key, std::string value = "", std::string source = "",
                bool from_default = false) {
    out_.resolved_from_auto.push_back(key);
    out_.auto_values.push_back({key, std::move(value), std::move(source), from_default});
  }
  bool Has(const char* key) const { return cfg_.contains(key); }
  const json& At(const char* key) const { return cfg_.at(key); }

  void WarnUnknownTopLevel() {
    for (auto it = cfg_.begin(); it != cfg_.end(); ++it) {
      if (it.key() == "dsplan") continue;  // dsplan's own notes (ReadDsplanBlock)
      if (!KnownTopLevelKeys().count(it.key())) {
        Warn(fmt::format("DeepSpeed ignores top-level key {}{}", Quote(it.key()),
                         Suggestion(it.key(), std::vector<std::string>(KnownTopLevelKeys().begin(),
                                                                       KnownTopLevelKeys().end()))));
      }
    }
  }

  // The "dsplan" block EmitDsConfig writes (DeepSpeed ignores unknown top-level keys): what the
  // plan needs from the training script that a ds_config cannot say. gradient_checkpointing:
  // true means the script calls model.gradient_checkpointing_enable(); read back so that a
  // check of an emitted file judges the plan that was emitted.
  void ReadDsplanBlock() {
    if (!Has("dsplan")) return;
    const json& b = At("dsplan");
    if (!b.is_object()) {
      Warn("top-level key 'dsplan' is not an object; ignored");
      return;
    }
    if (b.contains("gradient_checkpointing")) {
      const json& v = b.at("gradient_checkpointing");
      if (!v.is_boolean()) {
        Warn("dsplan.gradient_checkpointing is not true/false; ignored");
      } else if (v.get<bool>() && !out_.plan.gradient_checkpointing) {
        out_.plan.gradient_checkpointing = true;
        bool host = false;
        if (Has("activation_checkpointing") && At("activation_checkpointing").is_object()) {
          const json& ac = At("activation_checkpointing");
          auto it = ac.find("cpu_checkpointing");
          host = it != ac.end() && it->is_boolean() && it->get<bool>();
        }
        Warn(host ? "dsplan.gradient_checkpointing is true: judged with activation checkpointing "
                    "on, through DeepSpeed's checkpoint function (activation_checkpointing."
                    "cpu_checkpointing)"
                  : "dsplan.gradient_checkpointing is true: judged with activation checkpointing "
                    "on (the training script must call model.gradient_checkpointing_enable(), or "
                    "pass --gradient_checkpointing to the HF Trainer)");
      }
    }
    if (b.contains("linear_tiles")) {
      const json& v = b.at("linear_tiles");
      if (!v.is_number_integer() || v.get<int64_t>() < 1 || v.get<int64_t>() > kMaxLinearTiles) {
        Warn(fmt::format("dsplan.linear_tiles is not an integer from 1 to {}; ignored",
                         kMaxLinearTiles));
      } else if (v.get<int64_t>() > 1 && out_.plan.linear_tiles == 1) {
        out_.plan.linear_tiles = v.get<int64_t>();
        Warn(fmt::format("dsplan.linear_tiles is {}: judged with every Linear of the model's "
                         "blocks split into that many tiles (deepspeed.zero.TiledLinear in the "
                         "model code)",
                         out_.plan.linear_tiles));
      }
    }
  }

  // --- fp16 / bf16 / amp -----------------------------------------------------------------------
  Result<bool> Enabled(const json& block, const std::string& name, Precision which) {
    if (!block.is_object()) {
      return Status::InvalidArgument(
          fmt::format("{} must be an object like {{\"enabled\": true}}, got {}", name, Show(block)));
    }
    if (!block.contains("enabled")) return false;
    const json& v = block.at("enabled");
    if (IsAuto(v)) {
      const std::optional<Precision> given = ctx_.PinnedPrecision();
      if (!given) {
        Resolved(name + ".enabled", "false",
                 fmt::format("the HF Trainer's default (--{} off)",
                             which == Precision::kBf16 ? "bf16" : "fp16"),
                 true);
        Warn(fmt::format(
            "{}.enabled is \"auto\" and no precision was given: the HF Trainer's default "
            "(--{} off) applies; pass --precision bf16|fp16|fp32",
            name, which == Precision::kBf16 ? "bf16" : "fp16"));
        return false;
      }
      Resolved(name + ".enabled", *given == which ? "true" : "false", "--precision");
      return *given == which;
    }
    return ToBool(v, name + ".enabled");
  }

  Status ParsePrecision() {
    Plan& p = out_.plan;
    bool fp16 = false, bf16 = false;
    if (Has("fp16")) {
      const json& b = At("fp16");
      DSPLAN_ASSIGN_OR_RETURN(fp16, Enabled(b, "fp16", Precision::kFp16));
      if (b.is_object()) {
        for (auto it = b.begin(); it != b.end(); ++it) {
          const std::string& k = it.key();
          const json& v = it.value();
          const std::string key = "fp16." + k;
          if (k == "enabled") continue;
          if (IsAuto(v)) {
            Warn(fmt::format("{} is \"auto\"; the HF Trainer does not fill it, DeepSpeed's "
                             "default is used",
                             key));
            continue;
          }
          const DsConfigKey* row = FindDsConfigKey(key);
          if (row != nullptr && row->read == DsKeyRead::kPlain) {
            DSPLAN_RETURN_IF_ERROR(ReadInto(*row, v, p));
          } else if (k == "auto_cast") {
            DSPLAN_ASSIGN_OR_RETURN(bool ac, ToBool(v, key));
            if (ac) Warn("fp16.auto_cast is true: dsplan models the module cast to fp16, not autocast");
          } else if (k == "fp16_master_weights_and_grads") {
            DSPLAN_ASSIGN_OR_RETURN(bool m, ToBool(v, key));
            if (m) {
              return Status::Unsupported(
                  "fp16.fp16_master_weights_and_grads is true: dsplan does not model fp16 master "
                  "weights; remove it or set it false");
            }
          } else {
            Warn(fmt::format("DeepSpeed ignores {} (valid: {})", key, ValidList("fp16")));
          }
        }
      }
      if (!fp16 && b.is_object() && b.size() > 1) {
        // Loss-scale keys of a disabled block do nothing; say so only when someone set them.
      }
    }
    // "bf16" and its alias "bfloat16" (DeepSpeed reads bf16 first).
    for (const char* name : {"bf16", "bfloat16"}) {
      if (!Has(name)) continue;
      if (std::string(name) == "bfloat16" && Has("bf16")) {
        Warn("both \"bf16\" and \"bfloat16\" are present; DeepSpeed reads \"bf16\" and ignores "
             "\"bfloat16\"");
        continue;
      }
      const json& b = At(name);
      DSPLAN_ASSIGN_OR_RETURN(bf16, Enabled(b, name, Precision::kBf16));
      for (auto it = b.begin(); it != b.end(); ++it) {
        const std::string& k = it.key();
        if (k == "enabled" || k == "immediate_grad_update" || k == "check_grad_overflow") continue;
        if (k == "bf16_master_weights_and_grads" || k == "bf16_optimizer_states") {
          DSPLAN_ASSIGN_OR_RETURN(bool m, ToBool(it.value(), std::string(name) + "." + k));
          if (m) {
            return Status::Unsupported(fmt::format(
                "{}.{} is true: dsplan does not model bf16 master weights or optimizer states; "
                "remove it",
                name, k));
          }
          continue;
        }
        Warn(fmt::format("DeepSpeed ignores {}.{} (valid: {})", name, k, ValidList("bf16")));
      }
    }
    if (fp16 && bf16) {
      return Status::InvalidArgument(
          "fp16.enabled and bf16.enabled are both true; DeepSpeed asserts \"bfloat16 and fp16 "
          "modes cannot be simultaneously enabled\": enable one");
    }
    p.precision = fp16 ? Precision::kFp16 : bf16 ? Precision::kBf16 : Precision::kFp32;
    if (const std::optional<Precision> given = ctx_.PinnedPrecision();
        given && *given != p.precision) {
      const bool from_auto = std::find_if(out_.resolved_from_auto.begin(),
                                          out_.resolved_from_auto.end(), [](const std::string& k) {
                                            return k.find(".enabled") != std::string::npos;
                                          }) != out_.resolved_from_auto.end();
      if (!from_auto) {
        return Status::InvalidArgument(fmt::format(
            "the config trains in {} (fp16/bf16 \"enabled\") but precision {} was given; make "
            "them agree or set \"enabled\": \"auto\"",
            PrecisionName(p.precision), PrecisionName(*given)));
      }
    }
    if (Has("amp")) {
      const json& a = At("amp");
      if (a.is_object() && a.contains("enabled") && !IsAuto(a.at("enabled"))) {
        DSPLAN_ASSIGN_OR_RETURN(bool amp, ToBool(a.at("enabled"), "amp.enabled"));
        if (amp) amp_enabled_ = true;
      }
    }
    return Status();
  }

  // --- zero_optimization -----------------------------------------------------------------------
  Status ParseZero() {
    ZeroConfig& z = out_.plan.zero;
    if (!Has("zero_optimization")) return Status();
    const json& zj = At("zero_optimization");
    if (zj.is_boolean()) {
      // read_zero_config_deprecated: true = stage 1 with allgather_size, false = stage 0.
      Warn("\"zero_optimization\": true/false is deprecated; DeepSpeed reads it as stage 1 "
           "(true) or 0 (false); write {\"stage\": N}");
      if (zj.get<bool>()) {
        z.stage = 1;
        if (Has("allgather_size")) {
          DSPLAN_ASSIGN_OR_RETURN(z.allgather_bucket_size,
                                  NonNegativeInt(At("allgather_size"), "allgather_size"));
        }
      }
      return Status();
    }
    DSPLAN_ASSIGN_OR_RETURN(
        auto fields, CheckPydanticKeys(zj, "zero_optimization", ZeroFields(), NewerZeroFields(),
                                       &out_.warnings));
    auto get = [&](std::string_view k) -> const json* {
      auto it = fields.find(std::string(k));
      return it == fields.end() ? nullptr : &it->second;
    };
    auto key = [](const char* k) { return std::string("zero_optimization.") + k; };

    // Stage first: several defaults and warnings depend on it.
    if (const json* v = get("stage")) {
      if (IsAuto(*v)) {
        Warn("zero_optimization.stage is \"auto\"; DeepSpeed drops it and uses stage 0");
        fields.erase("stage");
      } else {
        DSPLAN_ASSIGN_OR_RETURN(int64_t s, ToInt(*v, key("stage")));
        if (s < 0 || s > 3) {
          return Status::InvalidArgument(fmt::format(
              "zero_optimization.stage must be 0, 1, 2 or 3, got {}", Show(*v)));
        }
        z.stage = static_cast<int>(s);
      }
    }
    const bool stage3 = z.stage == 3;

    // HF "auto" for the hidden-size keys (trainer_config_finalize), and for everything else the
    // pydantic behaviour: the field is dropped and the default used.
    const int64_t h = ctx_.hidden_size.value_or(0);
    for (auto it = fields.begin(); it != fields.end();) {
      if (!IsAuto(it->second)) {
        ++it;
        continue;
      }
      const std::string& k = it->first;
      const DsConfigKey* row = FindDsConfigKey("zero_optimization." + k);
      const bool hf_fills =
          row != nullptr && row->from_hidden != nullptr && row->int_ref != nullptr &&
          (row->on_auto == DsKeyAuto::kHiddenSize ||
           (stage3 && row->on_auto == DsKeyAuto::kHiddenSizeStage3));
      if (hf_fills && h > 0) {
        const int64_t v = row->from_hidden(h);
        *row->int_ref(out_.plan) = v;
        Resolved("zero_optimization." + k, std::to_string(v),
                 fmt::format("the model's hidden_size {}", h));
      } else if (hf_fills) {
        Warn(fmt::format("zero_optimization.{} is \"auto\" but the model's hidden size is not "
                         "known; DeepSpeed's default is used (the HF Trainer would use the "
                         "model's hidden_size; pass a model)",
                         k));
      } else {
        Warn(fmt::format("zero_optimization.{} is \"auto\", which the HF Trainer does not fill; "
                         "DeepSpeed drops it and uses its default",
                         k));
      }
      it = fields.erase(it);
    }

    // Deprecated names (DeepSpeedConfigModel._process_deprecated_field).
    if (const json* v = get("cpu_offload")) {
      DSPLAN_ASSIGN_OR_RETURN(bool on, ToBool(*v, key("cpu_offload")));
      if (get("offload_optimizer")) {
        return Status::InvalidArgument(
            "zero_optimization: cannot give deprecated 'cpu_offload' and its replacement "
            "'offload_optimizer' together; keep offload_optimizer");
      }
      Warn("zero_optimization.cpu_offload is deprecated; DeepSpeed maps it to "
           "offload_optimizer: {\"device\": \"cpu\"}");
      if (on) z.offload_optimizer.device = OffloadDevice::kCpu;
    }
    if (const json* v = get("cpu_offload_param")) {
      DSPLAN_ASSIGN_OR_RETURN(bool on, ToBool(*v, key("cpu_offload_param")));
      if (get("offload_param")) {
        return Status::InvalidArgument(
            "zero_optimization: cannot give deprecated 'cpu_offload_param' and its replacement "
            "'offload_param' together; keep offload_param");
      }
      Warn("zero_optimization.cpu_offload_param is deprecated; DeepSpeed maps it to "
           "offload_param: {\"device\": \"cpu\"}");
      if (on) z.offload_param.device = OffloadDevice::kCpu;
    }
    if (const json* v = get("cpu_offload_use_pin_memory")) {
      DSPLAN_RETURN_IF_ERROR(ToBool(*v, key("cpu_offload_use_pin_memory")).status());
      Warn("zero_optimization.cpu_offload_use_pin_memory is deprecated and DeepSpeed does not "
           "apply it; set pin_memory inside offload_optimizer / offload_param");
    }
    if (const json* v = get("stage3_gather_fp16_weights_on_model_save")) {
      if (get("stage3_gather_16bit_weights_on_model_save")) {
        return Status::InvalidArgument(
            "zero_optimization: cannot give deprecated 'stage3_gather_fp16_weights_on_model_save' "
            "and 'stage3_gather_16bit_weights_on_model_save' together");
      }
      DSPLAN_ASSIGN_OR_RETURN(z.gather_16bit_weights_on_model_save,
                              ToBool(*v, key("stage3_gather_fp16_weights_on_model_save")));
      Warn("zero_optimization.stage3_gather_fp16_weights_on_model_save is deprecated; DeepSpeed "
           "maps it to stage3_gather_16bit_weights_on_model_save");
    }

    // Plain fields: the table's reads, in DeepSpeed's field order.
    DSPLAN_RETURN_IF_ERROR(ReadPlain("zero_optimization", fields));

    // Accepted, type-checked, no effect on memory or time.
    for (const DsConfigKey* k : DsConfigKeysIn("zero_optimization")) {
      if (k->read != DsKeyRead::kChecked) continue;
      if (const json* v = get(k->Leaf())) DSPLAN_RETURN_IF_ERROR(CheckType(*k, *v));
    }
    if (const json* v = get("stage3_module_granularity_threshold")) {
      DSPLAN_ASSIGN_OR_RETURN(int64_t t, ToInt(*v, key("stage3_module_granularity_threshold")));
      if (t > 0) {
        Warn("zero_optimization.stage3_module_granularity_threshold > 0 groups fine-grained "
             "modules for fetching; dsplan does not model it (fetch counts may differ)");
      }
    }

    // Keys that do nothing (docs/deepspeed-facts.md#no-effect).
    if (get("allgather_partitions")) {
      DSPLAN_RETURN_IF_ERROR(ToBool(*get("allgather_partitions"), key("allgather_partitions")).status());
      Warn("zero_optimization.allgather_partitions has no effect: DeepSpeed's runtime never "
           "reads it");
    }
    if (get("allgather_bucket_size")) {
      Warn(z.stage == 3
               ? "zero_optimization.allgather_bucket_size has no effect at stage 3 (parameter "
                 "gathers follow stage3_prefetch_bucket_size)"
               : "zero_optimization.allgather_bucket_size has no effect on PyTorch with "
                 "all_gather_into_tensor (>= 1.13): the post-step all-gather is not bucketed");
      if (z.allgather_bucket_size % 2 != 0 && z.stage != 3) {
        return Status::InvalidArgument(fmt::format(
            "zero_optimization.allgather_bucket_size must be a multiple of 2, got {}",
            z.allgather_bucket_size));
      }
    }
    if (get("legacy_stage1")) {
      DSPLAN_ASSIGN_OR_RETURN(bool l, ToBool(*get("legacy_stage1"), key("legacy_stage1")));
      if (l) {
        return Status::InvalidArgument(
            "zero_optimization.legacy_stage1 is true; DeepSpeed removed the legacy stage 1 "
            "implementation (>= 0.5.9) and raises; remove it");
      }
    }
    auto given = [&](const std::string& k) { return get(k) != nullptr; };
    if (z.stage < 3) {
      for (const DsConfigKey* k :
           NoEffectKeys("zero_optimization", {DsKeyNoEffect::kBelowStage3}, given)) {
        Warn(fmt::format("{} has no effect at stage {} (stage 3 only)", k->name, z.stage));
      }
    } else if (get("round_robin_gradients") && z.round_robin_gradients) {
      Warn("zero_optimization.round_robin_gradients has no effect at stage 3 (stages 1 and 2 "
           "with CPU offload only)");
    }
    if (z.stage == 0) {
      for (const DsConfigKey* k :
           NoEffectKeys("zero_optimization", {DsKeyNoEffect::kStage0}, given)) {
        Warn(fmt::format("{} has no effect at stage 0", k->name));
      }
    }

    // ZeRO++ / MiCS: valid DeepSpeed, not modelled yet.
    if (const json* v = get("zero_hpz_partition_size")) {
      DSPLAN_ASSIGN_OR_RETURN(int64_t k, NonNegativeInt(*v, key("zero_hpz_partition_size")));
      if (k > 1) {
        return Status::Unsupported(fmt::format(
            "zero_optimization.zero_hpz_partition_size = {} (ZeRO++ hpZ) is not modelled by "
            "dsplan yet; use 1 (the default)",
            k));
      }
    }
    for (const char* k : {"zero_quantized_weights", "zero_quantized_nontrainable_weights",
                          "zero_quantized_gradients"}) {
      if (const json* v = get(k)) {
        DSPLAN_ASSIGN_OR_RETURN(bool on, ToBool(*v, key(k)));
        if (on) {
          return Status::Unsupported(fmt::format(
              "zero_optimization.{} (ZeRO++) is not modelled by dsplan yet; set it false", k));
        }
      }
    }
    if (const json* v = get("zeropp_loco_param")) {
      if (!v->is_null()) {
        return Status::Unsupported(
            "zero_optimization.zeropp_loco_param (ZeRO++ LoCo) is not modelled by dsplan yet; "
            "remove it");
      }
    }
    if (const json* v = get("mics_shard_size")) {
      DSPLAN_ASSIGN_OR_RETURN(int64_t m, ToInt(*v, key("mics_shard_size")));
      if (m > 0) {
        return Status::Unsupported(fmt::format(
            "zero_optimization.mics_shard_size = {} (MiCS) is not modelled by dsplan yet; use -1",
            m));
      }
    }
    if (const json* v = get("stage3_use_all_reduce_for_fetch_params")) {
      DSPLAN_ASSIGN_OR_RETURN(bool on, ToBool(*v, key("stage3_use_all_reduce_for_fetch_params")));
      if (on && stage3) {
        Warn("zero_optimization.stage3_use_all_reduce_for_fetch_params is true: parameter fetches "
             "use all-reduce (about twice the bytes of an all-gather); dsplan models all-gather");
      }
    }

    // Offload blocks.
    if (const json* v = get("offload_optimizer")) {
      if (!v->is_null()) DSPLAN_RETURN_IF_ERROR(ParseOffloadOptimizer(*v));
    }
    if (const json* v = get("offload_param")) {
      if (!v->is_null()) DSPLAN_RETURN_IF_ERROR(ParseOffloadParam(*v));
    }
    return Status();
  }

  Result<OffloadDevice> Device(const json& v, const std::string& key) {
    if (v.is_string()) {
      const std::string& s = v.get_ref<const std::string&>();
      if (s == "none") return OffloadDevice::kNone;
      if (s == "cpu") return OffloadDevice::kCpu;
      if (s == "nvme") return OffloadDevice::kNvme;
    }
    return Status::InvalidArgument(
        fmt::format("{} is {}; valid: \"none\", \"cpu\", \"nvme\"", key, Show(v)));
  }

  /// Reads the common NVMe-related keys; |fields| already checked against the model.
  Status ParseOffloadOptimizer(const json& v) {
    const std::string sec = "zero_optimization.offload_optimizer";
    DSPLAN_ASSIGN_OR_RETURN(auto f, CheckPydanticKeys(v, sec, OffloadOptimizerFields(),
                                                      NewerOffloadOptimizerFields(),
                                                      &out_.warnings));
    DropAuto(&f, sec);
    OffloadOptimizerConfig& o = out_.plan.zero.offload_optimizer;
    if (f.count("device")) {
      DSPLAN_ASSIGN_OR_RETURN(o.device, Device(f["device"], sec + ".device"));
    }
    if (f.count("nvme_path") && !f["nvme_path"].is_null()) {
      DSPLAN_ASSIGN_OR_RETURN(o.nvme_path, ToString(f["nvme_path"], sec + ".nvme_path"));
    }
    DSPLAN_RETURN_IF_ERROR(ReadPlain(sec, f));
    const int stage = out_.plan.zero.stage;
    auto given = [&](const std::string& k) { return f.count(k) > 0; };
    if (o.device == OffloadDevice::kNone) {
      for (const DsConfigKey* k :
           NoEffectKeys(sec, {DsKeyNoEffect::kDeviceNone, DsKeyNoEffect::kWithoutNvme}, given)) {
        Warn(fmt::format("{} has no effect: device is \"none\"", k->name));
      }
      return Status();
    }
    if (o.ratio < 1.0 && stage != 3) {
      return Status::InvalidArgument(fmt::format(
          "{}.ratio = {} needs ZeRO stage 3; DeepSpeed asserts \"Partial offloading only "
          "supported for ZeRO Stage 3.\"",
          sec, o.ratio));
    }
    if (f.count("ratio") && o.ratio < 1.0) {
      Warn(fmt::format("{}.ratio = {} splits optimizer sub-groups between CPU and GPU; it has an "
                       "effect only when the model has several sub-groups (sub_group_size)",
                       sec, o.ratio));
    }
    if (o.device == OffloadDevice::kNvme && stage < 3) {
      Warn(fmt::format("{}.device is \"nvme\" at stage {}: stages 1 and 2 have no NVMe swapper "
                       "and keep optimizer states in CPU RAM, exactly as \"cpu\"",
                       sec, stage));
      o.device = OffloadDevice::kCpu;
    }
    if (o.device == OffloadDevice::kCpu) {
      for (const DsConfigKey* k : NoEffectKeys(sec, {DsKeyNoEffect::kWithoutNvme}, given)) {
        Warn(fmt::format("{} has no effect without NVMe (device is \"cpu\"{})", k->name,
                         stage < 3 ? " in effect" : ""));
      }
    }
    return Status();
  }

  Status ParseOffloadParam(const json& v) {
    const std::string sec = "zero_optimization.offload_param";
    DSPLAN_ASSIGN_OR_RETURN(auto f, CheckPydanticKeys(v, sec, OffloadParamFields(), {},
                                                      &out_.warnings));
    DropAuto(&f, sec);
    OffloadParamConfig& o = out_.plan.zero.offload_param;
    if (f.count("device")) {
      DSPLAN_ASSIGN_OR_RETURN(o.device, Device(f["device"], sec + ".device"));
    }
    if (f.count("nvme_path") && !f["nvme_path"].is_null()) {
      DSPLAN_ASSIGN_OR_RETURN(o.nvme_path, ToString(f["nvme_path"], sec + ".nvme_path"));
    }
    DSPLAN_RETURN_IF_ERROR(ReadPlain(sec, f));
    auto given = [&](const std::string& k) { return f.count(k) > 0; };
    if (o.device == OffloadDevice::kNone) {
      for (const DsConfigKey* k :
           NoEffectKeys(sec, {DsKeyNoEffect::kDeviceNone, DsKeyNoEffect::kWithoutNvme}, given)) {
        Warn(fmt::format("{} has no effect: device is \"none\"", k->name));
      }
    } else if (o.device == OffloadDevice::kCpu) {
      for (const DsConfigKey* k : NoEffectKeys(sec, {DsKeyNoEffect::kWithoutNvme}, given)) {
        Warn(fmt::format("{} has no effect without NVMe (device is \"cpu\")", k->name));
      }
    }
    if (o.device != OffloadDevice::kNone && out_.plan.zero.stage != 3) {
      return Status::InvalidArgument(fmt::format(
          "zero_optimization.offload_param (device \"{}\") needs ZeRO stage 3 but the config has "
          "stage {}; remove offload_param or set \"stage\": 3",
          OffloadDeviceName(o.device), out_.plan.zero.stage));
    }
    return Status();
  }

  /// The table's plain reads of a pydantic section's fields (canonical names), in table order.
  Status ReadPlain(const std::string& sec, const std::map<std::string, json>& f) {
    for (const DsConfigKey* k : DsConfigKeysIn(sec)) {
      if (k->read != DsKeyRead::kPlain) continue;
      auto it = f.find(std::string(k->Leaf()));
      if (it != f.end()) DSPLAN_RETURN_IF_ERROR(ReadInto(*k, it->second, out_.plan));
    }
    return Status();
  }

  void DropAuto(std::map<std::string, json>* f, const std::string& sec) {
    for (auto it = f->begin(); it != f->end();) {
      if (IsAuto(it->second)) {
        Warn(fmt::format("{}.{} is \"auto\", which the HF Trainer does not fill; DeepSpeed drops "
                         "it and uses its default",
                         sec, it->first));
        it = f->erase(it);
      } else {
        ++it;
      }
    }
  }

  // --- batch (config.py _set_batch_related_parameters / _batch_assertion) ---------------------
  Status ParseBatch() {
    Plan& p = out_.plan;
    const int64_t ws = p.world_size();
    std::optional<int64_t> train, micro, gas;
    bool train_auto = false, micro_auto = false, gas_auto = false;
    auto read = [&](const char* k, std::optional<int64_t>* dst, bool* is_auto) -> Status {
      if (!Has(k) || At(k).is_null()) return Status();
      if (IsAuto(At(k))) {
        *is_auto = true;
        return Status();
      }
      DSPLAN_ASSIGN_OR_RETURN(int64_t v, ToInt(At(k), k));
      // DeepSpeed's _batch_assertion requires each to be > 0; refusing it here also keeps the
      // integer divisions below defined.
      if (v <= 0) {
        return Status::InvalidArgument(
            fmt::format("{} is {}; it has to be greater than 0", k, v));
      }
      *dst = v;
      return Status();
    };
    DSPLAN_RETURN_IF_ERROR(read("train_batch_size", &train, &train_auto));
    DSPLAN_RETURN_IF_ERROR(read("train_micro_batch_size_per_gpu", &micro, &micro_auto));
    DSPLAN_RETURN_IF_ERROR(read("gradient_accumulation_steps", &gas, &gas_auto));

    // The HF Trainer's values, checked against explicit config values as trainer_config_finalize
    // does (a mismatch raises there).
    auto check = [&](const char* k, const std::optional<int64_t>& cfg,
                     const std::optional<int64_t>& given, const char* flag) -> Status {
      if (cfg && given && *cfg != *given) {
        return Status::InvalidArgument(fmt::format(
            "{} is {} in the config but {} {} was given; make them agree or set it to \"auto\"",
            k, *cfg, flag, *given));
      }
      return Status();
    };
    const std::optional<int64_t> given_micro = ctx_.PinnedMicroBatch();
    DSPLAN_RETURN_IF_ERROR(check("train_micro_batch_size_per_gpu", micro, given_micro,
                                 "--micro-batch"));
    DSPLAN_RETURN_IF_ERROR(check("gradient_accumulation_steps", gas, ctx_.grad_accum,
                                 "--grad-accum"));
    DSPLAN_RETURN_IF_ERROR(check("train_batch_size", train, ctx_.global_batch, "--global-batch"));

    // "auto" batch keys take the Trainer's arguments from the flags, else the Trainer's
    // defaults (per_device_train_batch_size 8, gradient_accumulation_steps 1), like every
    // other "auto" key; each is listed with where its value came from.
    constexpr int64_t kTrainerMicroBatch = 8;  // TrainingArguments.per_device_train_batch_size
    constexpr int64_t kTrainerGradAccum = 1;   // TrainingArguments.gradient_accumulation_steps
    if (micro_auto) {
      std::string src = "--micro-batch";
      bool dflt = false;
      if (given_micro) {
        micro = given_micro;
      } else if (ctx_.global_batch) {
        const int64_t g = gas.value_or(ctx_.grad_accum.value_or(kTrainerGradAccum));
        if (g <= 0) {
          return Status::InvalidArgument(fmt::format(
              "gradient_accumulation_steps is {}; it has to be greater than 0", g));
        }
        const Result<BatchTriple> t = ResolveBatch(ws, std::nullopt, g, *ctx_.global_batch);
        if (!t.ok()) {
          return Status::InvalidArgument(fmt::format(
              "train_micro_batch_size_per_gpu is \"auto\" and --global-batch {} is not a multiple "
              "of accumulation {} x {} GPUs: pass a --global-batch that is, or --micro-batch",
              *ctx_.global_batch, g, ws));
        }
        micro = t->micro_batch;
        src = "--global-batch / (accumulation x GPUs)";
      } else {
        micro = kTrainerMicroBatch;
        src = "the HF Trainer's default per_device_train_batch_size (pass --micro-batch N)";
        dflt = true;
      }
      Resolved("train_micro_batch_size_per_gpu", std::to_string(*micro), src, dflt);
    }
    if (gas_auto) {
      std::string src = "--grad-accum";
      bool dflt = false;
      if (ctx_.grad_accum) {
        gas = ctx_.grad_accum;
      } else if (ctx_.global_batch && micro) {
        if (*micro <= 0) {
          return Status::InvalidArgument(fmt::format(
              "train_micro_batch_size_per_gpu is {}; it has to be greater than 0", *micro));
        }
        const Result<BatchTriple> t = ResolveBatch(ws, *micro, std::nullopt, *ctx_.global_batch);
        if (!t.ok()) {
          return Status::InvalidArgument(fmt::format(
              "gradient_accumulation_steps is \"auto\" and --global-batch {} is not a multiple of "
              "micro-batch {} x {} GPUs: pass a --global-batch that is, or --grad-accum",
              *ctx_.global_batch, *micro, ws));
        }
        gas = t->grad_accum;
        src = "--global-batch / (micro-batch x GPUs)";
      } else {
        gas = kTrainerGradAccum;
        src = "the HF Trainer's default gradient_accumulation_steps (pass --grad-accum N)";
        dflt = true;
      }
      Resolved("gradient_accumulation_steps", std::to_string(*gas), src, dflt);
    }
    if (train_auto) {
      std::string src = "micro-batch x accumulation x GPUs";
      if (!(micro && gas) && ctx_.global_batch) {
        train = ctx_.global_batch;
        src = "--global-batch";
      } else {
        if (!(micro && gas)) {
          micro = micro.value_or(kTrainerMicroBatch);
          gas = gas.value_or(kTrainerGradAccum);
        }
        train = CheckedProduct({*micro, *gas, static_cast<int64_t>(ws)});
        if (!train) {
          return Status::InvalidArgument(fmt::format(
              "train_batch_size \"auto\": micro-batch {} x accumulation {} x world size {} "
              "overflows a 64-bit count",
              *micro, *gas, ws));
        }
      }
      Resolved("train_batch_size", std::to_string(*train), src);
    }
    // Flags fill keys the config leaves out only through "auto"; DeepSpeed itself derives the rest.
    if (!train && !micro && !gas && (given_micro || ctx_.global_batch)) {
      micro = given_micro;
      gas = ctx_.grad_accum;
      train = ctx_.global_batch;
      Warn("the config has no batch keys; using the batch given on the command line (DeepSpeed "
           "would need them in the config or from the HF Trainer)");
    }

    if (!train && !micro) {
      return Status::InvalidArgument(
          "the config sets neither train_batch_size nor train_micro_batch_size_per_gpu; DeepSpeed "
          "asserts \"Either train_batch_size or train_micro_batch_size_per_gpu needs to be "
          "provided\"; add one (or pass --micro-batch N)");
    }
    // The one batch rule (core/plan.h ResolveBatch): derives what the config leaves out and
    // refuses triples that do not multiply. Its refusals are put in DeepSpeed's words below.
    const Result<BatchTriple> t = ResolveBatch(ws, micro, gas, train);
    if (!t.ok()) return DeepSpeedBatchError(train, micro, gas, ws, t.status());
    p.micro_batch = t->micro_batch;
    p.grad_accum = t->grad_accum;
    return Status();
  }

  // --- optimizer ---------------------------------------------------------------------------------
  Status ParseOptimizer() {
    Plan& p = out_.plan;
    if (Has("zero_allow_untested_optimizer")) {
      DSPLAN_ASSIGN_OR_RETURN(p.zero_allow_untested_optimizer,
                              ToBool(At("zero_allow_untested_optimizer"), "zero_allow_untested_optimizer"));
    }
    if (Has("zero_force_ds_cpu_optimizer")) {
      DSPLAN_ASSIGN_OR_RETURN(p.zero_force_ds_cpu_optimizer,
                              ToBool(At("zero_force_ds_cpu_optimizer"), "zero_force_ds_cpu_optimizer"));
    }
    if (!Has("optimizer") || At("optimizer").is_null()) {
      p.optimizer_from_config = false;
      p.optimizer = OptimizerType::kAdamW;
      Warn("the config has no \"optimizer\" block: the client's optimizer is used (the HF Trainer "
           "passes its own and sets zero_allow_untested_optimizer); dsplan assumes AdamW");
      if (p.OffloadsOptimizer() && p.zero_force_ds_cpu_optimizer) {
        Warn("offload_optimizer with a client optimizer: DeepSpeed raises ZeRORuntimeException "
             "unless the client passes DeepSpeedCPUAdam or the config sets "
             "\"zero_force_ds_cpu_optimizer\": false; add an \"optimizer\" block instead");
      }
      return Status();
    }
    const json& o = At("optimizer");
    if (!o.is_object()) {
      return Status::InvalidArgument(fmt::format(
          "optimizer must be an object like {{\"type\": \"AdamW\", \"params\": {{...}}}}, got {}",
          Show(o)));
    }
    if (!o.contains("type")) {
      return Status::InvalidArgument(
          "optimizer has no \"type\"; valid: Adam, AdamW, Adagrad, Lamb, SGD");
    }
    DSPLAN_ASSIGN_OR_RETURN(std::string type, ToString(o.at("type"), "optimizer.type"));
    const std::string lower = Lower(type);
    // DeepSpeed lower-cases its own optimizer names; anything else is looked up in torch.optim
    // with the exact spelling.
    if (lower == "adam") {
      p.optimizer = OptimizerType::kAdam;
    } else if (lower == "adamw") {
      p.optimizer = OptimizerType::kAdamW;
    } else if (lower == "adagrad") {
      p.optimizer = OptimizerType::kAdagrad;
    } else if (lower == "lamb") {
      p.optimizer = OptimizerType::kLamb;
    } else if (type == "SGD") {
      p.optimizer = OptimizerType::kSgd;
    } else if (lower == "onebitadam" || lower == "zerooneadam" || lower == "onebitlamb" ||
               lower == "lion" || lower == "muadam" || lower == "muadamw" || lower == "musgd" ||
               lower == "muon") {
      return Status::Unsupported(fmt::format(
          "optimizer.type \"{}\" is a DeepSpeed optimizer dsplan does not model; supported: "
          "Adam, AdamW, Adagrad, Lamb, SGD",
          type));
    } else if (lower == "sgd") {
      return Status::InvalidArgument(fmt::format(
          "optimizer.type \"{}\": DeepSpeed looks non-DeepSpeed optimizers up in torch.optim by "
          "exact name; write \"SGD\"",
          type));
    } else {
      static const std::vector<std::string> kTorch = {"RMSprop", "Adadelta", "Adamax", "ASGD",
                                                      "NAdam", "RAdam", "Rprop", "LBFGS",
                                                      "SparseAdam", "Adafactor"};
      if (std::find(kTorch.begin(), kTorch.end(), type) != kTorch.end()) {
        return Status::Unsupported(fmt::format(
            "optimizer.type \"{}\" (torch.optim.{}) is not modelled by dsplan; supported: Adam, "
            "AdamW, Adagrad, Lamb, SGD",
            Escape(type), Escape(type)));
      }
      return Status::InvalidArgument(fmt::format(
          "optimizer.type \"{}\" is neither a DeepSpeed optimizer nor in torch.optim{}; supported "
          "by dsplan: Adam, AdamW, Adagrad, Lamb, SGD",
          Escape(type), Suggestion(type, {"Adam", "AdamW", "Adagrad", "Lamb", "SGD"})));
    }
    for (auto it = o.begin(); it != o.end(); ++it) {
      if (it.key() != "type" && it.key() != "params" && it.key() != "legacy_fusion") {
        Warn(fmt::format("DeepSpeed ignores optimizer.{} (valid: type, params)", it.key()));
      }
    }
    if (!o.contains("params") || o.at("params").is_null()) return Status();
    const json& prm = o.at("params");
    if (!prm.is_object()) {
      return Status::InvalidArgument(
          fmt::format("optimizer.params must be an object, got {}", Show(prm)));
    }
    OptimizerHyperparams& hp = p.optimizer_params;
    for (auto it = prm.begin(); it != prm.end(); ++it) {
      const std::string& k = it.key();
      const json& v = it.value();
      // optimizer.params is free-form (torch.optim's keyword arguments): its keys reach
      // messages escaped.
      const std::string key = "optimizer.params." + Escape(k);
      if (k == "max_grad_norm") {
        return Status::InvalidArgument(
            "optimizer.params.max_grad_norm is not supported by DeepSpeed (it raises); use the "
            "top-level \"gradient_clipping\"");
      }
      if (IsAuto(v)) {
        if (k == "lr" || k == "betas" || k == "eps" || k == "weight_decay") {
          // The Trainer fills it; no effect on memory or time.
          Resolved(key, "the Trainer's --" + std::string(k == "lr" ? "learning_rate"
                                                         : k == "betas" ? "adam_beta1/adam_beta2"
                                                         : k == "eps" ? "adam_epsilon"
                                                                      : "weight_decay"),
                   "the HF Trainer's arguments at start-up (no effect on memory or time)");
        } else {
          return Status::InvalidArgument(fmt::format(
              "{} is \"auto\" but the HF Trainer fills only lr, betas, eps and weight_decay; give "
              "a value",
              key));
        }
        continue;
      }
      // torch.optim raises on a negative lr, eps or weight_decay ("Invalid learning rate").
      auto non_negative = [&](std::optional<double>* dst) -> Status {
        DSPLAN_ASSIGN_OR_RETURN(double d, ToDouble(v, key));
        if (!(d >= 0) || !std::isfinite(d)) {
          return Status::InvalidArgument(
              fmt::format("{} must be a finite number >= 0, got {}", key, Show(v)));
        }
        *dst = d;
        return Status();
      };
      if (k == "lr") {
        DSPLAN_RETURN_IF_ERROR(non_negative(&hp.lr));
      } else if (k == "eps") {
        DSPLAN_RETURN_IF_ERROR(non_negative(&hp.eps));
      } else if (k == "weight_decay") {
        DSPLAN_RETURN_IF_ERROR(non_negative(&hp.weight_decay));
      } else if (k == "momentum") {
        DSPLAN_ASSIGN_OR_RETURN(hp.momentum, ToDouble(v, key));
      } else if (k == "betas") {
        if (!v.is_array() || v.size() != 2 || !v[0].is_number() || !v[1].is_number()) {
          return Status::InvalidArgument(fmt::format(
              "optimizer.params.betas must be two numbers like [0.9, 0.999], got {}", Show(v)));
        }
        hp.beta1 = v[0].get<double>();
        hp.beta2 = v[1].get<double>();
        // torch.optim.Adam: "Invalid beta parameter at index i" unless 0 <= beta < 1.
        for (int i = 0; i < 2; ++i) {
          const double b = i == 0 ? *hp.beta1 : *hp.beta2;
          if (!(b >= 0 && b < 1)) {
            return Status::InvalidArgument(fmt::format(
                "optimizer.params.betas[{}] is {}; each beta must be in [0, 1) (torch raises "
                "\"Invalid beta parameter\")",
                i, Show(v[i])));
          }
        }
      } else if (k == "torch_adam") {
        DSPLAN_ASSIGN_OR_RETURN(p.torch_adam, ToBool(v, key));
      } else if (k == "adam_w_mode") {
        DSPLAN_ASSIGN_OR_RETURN(p.adam_w_mode, ToBool(v, key));
      }
      // Other params go to the optimizer's constructor (amsgrad, bias_correction, ...).
    }
    if (p.optimizer == OptimizerType::kSgd) p.sgd_momentum = hp.momentum.value_or(0.0) > 0;
    if ((p.torch_adam || prm.contains("adam_w_mode")) && p.optimizer != OptimizerType::kAdam &&
        p.optimizer != OptimizerType::kAdamW) {
      Warn(fmt::format("optimizer.params torch_adam / adam_w_mode apply to Adam and AdamW only; "
                       "{} passes them to its constructor, which may reject them",
                       type));
    }
    if (p.optimizer == OptimizerType::kAdamW && prm.contains("adam_w_mode") && !p.adam_w_mode) {
      Warn("optimizer.params.adam_w_mode = false has no effect with type AdamW (AdamW always "
           "decouples weight decay)");
      p.adam_w_mode = true;
    }
    return Status();
  }

  Status ParseScheduler() {
    if (!Has("scheduler") || At("scheduler").is_null()) return Status();
    const json& s = At("scheduler");
    if (!s.is_object() || !s.contains("type")) {
      return Status::InvalidArgument(fmt::format(
          "scheduler must be an object with a \"type\" (WarmupLR, WarmupDecayLR, WarmupCosineLR, "
          "OneCycle, LRRangeTest), got {}",
          Show(s)));
    }
    DSPLAN_ASSIGN_OR_RETURN(out_.plan.scheduler, ToString(s.at("type"), "scheduler.type"));
    static const std::vector<std::string> kDs = {"WarmupLR", "WarmupDecayLR", "WarmupCosineLR",
                                                 "OneCycle", "LRRangeTest"};
    if (std::find(kDs.begin(), kDs.end(), out_.plan.scheduler) == kDs.end()) {
      Warn(fmt::format("scheduler.type {} is not a DeepSpeed scheduler{}; DeepSpeed looks it "
                       "up in torch.optim.lr_scheduler",
                       Quote(out_.plan.scheduler), Suggestion(out_.plan.scheduler, kDs)));
    }
    // The warm-up parameters (no effect on memory or time; kept so an emitted file reads back
    // to the same plan). "auto" and other types stay unset.
    if (s.contains("params") && s.at("params").is_object()) {
      const json& ps = s.at("params");
      SchedulerParams& sp = out_.plan.scheduler_params;
      auto num = [&](const char* k) -> std::optional<double> {
        if (ps.contains(k) && ps.at(k).is_number()) return ps.at(k).get<double>();
        return std::nullopt;
      };
      auto integer = [&](const char* k) -> std::optional<int64_t> {
        if (ps.contains(k) && ps.at(k).is_number_integer()) return ps.at(k).get<int64_t>();
        return std::nullopt;
      };
      sp.warmup_min_lr = num("warmup_min_lr");
      sp.warmup_max_lr = num("warmup_max_lr");
      sp.warmup_num_steps = integer("warmup_num_steps");
      sp.total_num_steps = integer("total_num_steps");
      if (ps.contains("warmup_type") && ps.at("warmup_type").is_string()) {
        sp.warmup_type = ps.at("warmup_type").get<std::string>();
      }
    }
    return Status();
  }

  // --- gradient_clipping, data types, misc ---------------------------------------------------------
  Status ParseMisc() {
    Plan& p = out_.plan;
    if (Has("gradient_clipping")) {
      const json& v = At("gradient_clipping");
      if (IsAuto(v)) {
        p.gradient_clipping = ctx_.gradient_clipping.value_or(1.0);
        Resolved("gradient_clipping", fmt::format("{}", p.gradient_clipping),
                 ctx_.gradient_clipping ? "max_grad_norm" : "the HF Trainer's default max_grad_norm",
                 !ctx_.gradient_clipping);
      } else {
        DSPLAN_ASSIGN_OR_RETURN(p.gradient_clipping, ToDouble(v, "gradient_clipping"));
        if (ctx_.gradient_clipping && *ctx_.gradient_clipping != p.gradient_clipping) {
          return Status::InvalidArgument(fmt::format(
              "gradient_clipping is {} in the config but {} was given; make them agree or set it "
              "to \"auto\"",
              p.gradient_clipping, *ctx_.gradient_clipping));
        }
      }
    }
    if (Has("communication_data_type") && !At("communication_data_type").is_null()) {
      const json& v = At("communication_data_type");
      const std::string s = v.is_string() ? Lower(v.get<std::string>()) : "";
      if (s == "fp32") p.communication_dtype = Precision::kFp32;
      else if (s == "fp16") p.communication_dtype = Precision::kFp16;
      else if (s == "bf16") p.communication_dtype = Precision::kBf16;
      else {
        return Status::InvalidArgument(fmt::format(
            "communication_data_type is {}; valid: \"fp16\", \"bf16\", \"fp32\"", Show(v)));
      }
    }
    if (Has("data_types")) {
      const json& d = At("data_types");
      if (!d.is_object()) {
        return Status::InvalidArgument(fmt::format(
            "data_types must be an object like {{\"grad_accum_dtype\": \"fp32\"}}, got {}", Show(d)));
      }
      for (auto it = d.begin(); it != d.end(); ++it) {
        if (it.key() == "grad_accum_dtype") {
          if (!it.value().is_null()) {
            DSPLAN_ASSIGN_OR_RETURN(Precision g, ToDtype(it.value(), "data_types.grad_accum_dtype"));
            p.grad_accum_dtype = g;
          }
        } else {
          Warn(fmt::format("DeepSpeed ignores data_types.{} (valid: {})", it.key(),
                           ValidList("data_types")));
        }
      }
    }
    if (Has("prescale_gradients")) {
      DSPLAN_ASSIGN_OR_RETURN(prescale_, ToBool(At("prescale_gradients"), "prescale_gradients"));
    }
    if (Has("gradient_predivide_factor")) {
      DSPLAN_ASSIGN_OR_RETURN(predivide_,
                              ToDouble(At("gradient_predivide_factor"), "gradient_predivide_factor"));
    }
    if (Has("sequence_parallel_size")) {
      DSPLAN_ASSIGN_OR_RETURN(int64_t sp, ToInt(At("sequence_parallel_size"), "sequence_parallel_size"));
      if (sp > 1) {
        return Status::Unsupported(fmt::format(
            "sequence_parallel_size = {}: dsplan models data parallelism only; remove it", sp));
      }
    }
    if (Has("tensor_parallel") && At("tensor_parallel").is_object()) {
      const json& tp = At("tensor_parallel");
      for (const char* k : {"autotp_size", "tp_size"}) {
        if (tp.contains(k) && tp.at(k).is_number() && tp.at(k).get<double>() > 1) {
          return Status::Unsupported(fmt::format(
              "tensor_parallel.{} = {}: dsplan models data parallelism only", k, Show(tp.at(k))));
        }
      }
    }
    // activation_checkpointing: ParseActivationCheckpointing.
    if (Has("elasticity")) {
      const json& e = At("elasticity");
      if (e.is_object() && e.contains("enabled") && e.at("enabled").is_boolean() &&
          e.at("enabled").get<bool>()) {
        Warn("elasticity is enabled: DeepSpeed may override the batch keys at launch; dsplan uses "
             "the batch keys as written");
      }
    }
    if (Has("fp16_master_weights_and_grads")) {
      DSPLAN_ASSIGN_OR_RETURN(bool m, ToBool(At("fp16_master_weights_and_grads"),
                                             "fp16_master_weights_and_grads"));
      if (m) {
        return Status::Unsupported(
            "fp16_master_weights_and_grads is true: dsplan does not model fp16 master weights; "
            "remove it");
      }
    }
    return Status();
  }

  Status ParseAio() {
    AioConfig& a = out_.plan.aio;
    const bool nvme = out_.plan.zero.offload_optimizer.device == OffloadDevice::kNvme ||
                      out_.plan.zero.offload_param.device == OffloadDevice::kNvme;
    if (!Has("aio")) return Status();
    const json& j = At("aio");
    if (!j.is_object()) {
      return Status::InvalidArgument(fmt::format("aio must be an object, got {}", Show(j)));
    }
    if (!nvme) Warn("aio has no effect: nothing is offloaded to NVMe");
    for (auto it = j.begin(); it != j.end(); ++it) {
      const std::string& k = it.key();
      const json& v = it.value();
      const std::string key = "aio." + k;
      const DsConfigKey* row = FindDsConfigKey(key);
      if (row != nullptr && row->read == DsKeyRead::kPlain) {
        DSPLAN_RETURN_IF_ERROR(ReadInto(*row, v, out_.plan));
      } else if (k == "intra_op_parallelism" || k == "thread_count") {
        // handled below
        DSPLAN_RETURN_IF_ERROR(NonNegativeInt(v, key).status());
      } else {
        Warn(fmt::format("DeepSpeed ignores {} (valid: {})", key, ValidList("aio")));
      }
    }
    const bool has_iop = j.contains("intra_op_parallelism");
    const bool has_tc = j.contains("thread_count");
    if (has_iop) {
      DSPLAN_ASSIGN_OR_RETURN(a.intra_op_parallelism,
                              NonNegativeInt(j.at("intra_op_parallelism"), "aio.intra_op_parallelism"));
    }
    if (has_tc) {
      DSPLAN_ASSIGN_OR_RETURN(int64_t tc, NonNegativeInt(j.at("thread_count"), "aio.thread_count"));
      if (!has_iop) {
        a.intra_op_parallelism = tc;
        Warn("aio.thread_count is read only by DeepSpeed < 0.16.4; later versions read "
             "aio.intra_op_parallelism (default 1): write both");
      } else if (tc != a.intra_op_parallelism) {
        Warn(fmt::format("aio.thread_count ({}) and aio.intra_op_parallelism ({}) differ; DeepSpeed "
                         ">= 0.16.4 uses intra_op_parallelism, older versions thread_count",
                         tc, a.intra_op_parallelism));
      }
    }
    if (a.block_size <= 0 || a.queue_depth <= 0 || a.intra_op_parallelism <= 0) {
      return Status::InvalidArgument(fmt::format(
          "aio block_size, queue_depth and intra_op_parallelism must be positive (got {}, {}, {})",
          a.block_size, a.queue_depth, a.intra_op_parallelism));
    }
    return Status();
  }

  // The activation_checkpointing block (runtime/activation_checkpointing/config.py reads it
  // with get_scalar_param: unknown keys are ignored). It configures deepspeed.checkpointing only
  // (docs/zero-infinity.md).
  Status ParseActivationCheckpointing() {
    if (!Has("activation_checkpointing")) return Status();
    const json& j = At("activation_checkpointing");
    if (!j.is_object()) {
      return Status::InvalidArgument(
          fmt::format("activation_checkpointing must be an object, got {}", Show(j)));
    }
    ActivationCheckpointingConfig& a = out_.plan.activation_checkpointing;
    a.present = true;
    for (auto it = j.begin(); it != j.end(); ++it) {
      const std::string& k = it.key();
      const json& v = it.value();
      const std::string key = "activation_checkpointing." + k;
      const DsConfigKey* row = FindDsConfigKey(key);
      if (row != nullptr && row->read == DsKeyRead::kPlain) {
        DSPLAN_RETURN_IF_ERROR(ReadInto(*row, v, out_.plan));
      } else if (k == "number_checkpoints") {
        if (!v.is_null()) {
          DSPLAN_ASSIGN_OR_RETURN(int64_t n, NonNegativeInt(v, key));
          a.number_checkpoints = n;
        }
      } else {
        Warn(fmt::format("DeepSpeed ignores {} (valid: {})", key,
                         ValidList("activation_checkpointing")));
      }
    }
    if (a.cpu_checkpointing && !out_.plan.gradient_checkpointing) {
      Warn("activation_checkpointing.cpu_checkpointing has no effect here: the model "
           "checkpoints no activations (pass --gradient-checkpointing if the training script "
           "checkpoints its blocks with deepspeed.checkpointing.checkpoint)");
    } else if (a.cpu_checkpointing || a.partition_activations) {
      Warn("activation_checkpointing acts only on deepspeed.checkpointing.checkpoint: the "
           "training script must call deepspeed.checkpointing.configure(None, "
           "deepspeed_config=...) and checkpoint its blocks with "
           "deepspeed.checkpointing.checkpoint, not transformers' "
           "gradient_checkpointing_enable() (torch.utils.checkpoint), or the block keeps its "
           "checkpoints on the GPU (docs/zero-infinity.md)");
    }
    if (a.partition_activations && !a.cpu_checkpointing) {
      Warn("activation_checkpointing.partition_activations splits each checkpoint over the "
           "tensor-parallel ranks; with data parallelism only there is one such rank, so it "
           "saves nothing");
    }
    return Status();
  }

  // --- checks that need the whole config (engine.py) ----------------------------------------------
  Status CrossChecks() {
    Plan& p = out_.plan;
    const ZeroConfig& z = p.zero;
    if (amp_enabled_) {
      if (z.stage > 0) {
        return Status::InvalidArgument(
            "amp.enabled is true with ZeRO; DeepSpeed asserts \"Amp and ZeRO are not currently "
            "compatible\": use fp16 or bf16 instead of amp");
      }
      return Status::Unsupported("amp.enabled (apex AMP) is not modelled by dsplan; use fp16 or bf16");
    }
    if (z.stage > 0 && p.optimizer_from_config) {
      // is_zero_supported_optimizer: torch Adam/AdamW, FusedAdam, DeepSpeedCPUAdam, Adagrad,
      // DeepSpeedCPUAdagrad (and Lion).
      const bool tested = p.optimizer == OptimizerType::kAdam ||
                          p.optimizer == OptimizerType::kAdamW ||
                          p.optimizer == OptimizerType::kAdagrad;
      if (!tested && !p.zero_allow_untested_optimizer) {
        return Status::InvalidArgument(fmt::format(
            "optimizer.type {} is not in ZeRO's tested list (Adam, AdamW, Adagrad); DeepSpeed "
            "asserts unless the config sets \"zero_allow_untested_optimizer\": true",
            OptimizerTypeName(p.optimizer)));
      }
      if (p.optimizer == OptimizerType::kLamb && p.OffloadsOptimizer()) {
        return Status::Unsupported(
            "optimizer.type Lamb with offload_optimizer: DeepSpeed's FusedLamb runs on GPU only; "
            "use Adam/AdamW or Adagrad with offload");
      }
      if (p.optimizer == OptimizerType::kSgd && p.OffloadsOptimizer()) {
        Warn("SGD with offload_optimizer runs torch.optim.SGD on CPU (no DeepSpeed CPU kernel)");
      }
    }
    if (p.torch_adam && p.OffloadsOptimizer() && p.optimizer_from_config &&
        (p.optimizer == OptimizerType::kAdam || p.optimizer == OptimizerType::kAdamW)) {
      Warn("optimizer.params.torch_adam with offload_optimizer: torch.optim.AdamW steps on CPU "
           "instead of DeepSpeedCPUAdam (several times slower); remove torch_adam");
    }
    if (z.stage >= 1 && z.stage <= 2 && p.OffloadsOptimizer() && !z.contiguous_gradients) {
      Warn("zero_optimization.contiguous_gradients = false is overridden: stages 1 and 2 force it "
           "on with CPU offload");
      p.zero.contiguous_gradients = true;
    }
    if (z.round_robin_gradients && (z.stage == 0 || z.stage == 3 || !p.OffloadsOptimizer())) {
      if (z.stage == 1 || z.stage == 2) {
        Warn("zero_optimization.round_robin_gradients has an effect only with CPU offload");
      }
    }
    if (z.stage == 2 && z.reduce_scatter) {
      if (predivide_ != 1.0) {
        return Status::InvalidArgument(fmt::format(
            "gradient_predivide_factor = {} is not supported by ZeRO stage 2 with reduce_scatter "
            "(DeepSpeed asserts); use 1.0 or set reduce_scatter false",
            predivide_));
      }
      if (prescale_) {
        return Status::InvalidArgument(
            "prescale_gradients = true is not supported by ZeRO stage 2 with reduce_scatter "
            "(DeepSpeed asserts); remove it or set reduce_scatter false");
      }
    }
    if (p.Wrapper() == OptimizerWrapper::kBf16Optimizer && z.stage == 0 &&
        !p.grad_accum_dtype) {
      Warn("bf16 without ZeRO: DeepSpeed 0.16 builds BF16_Optimizer (fp32 gradient "
           "accumulation); releases after PR #7790 (2026) raise NotImplementedError here, use "
           "stage 1 with data_types.grad_accum_dtype fp32 instead");
    }
    return Status();
  }

  const json& cfg_;
  const DsConfigContext& ctx_;
  ParsedDsConfig out_;
  bool amp_enabled_ = false;
  bool prescale_ = false;
  double predivide_ = 1.0;
};

}  // namespace

// ---------------------------------------------------------------------------------------------

Result<ParsedDsConfig> ParseDsConfig(const json& cfg, const DsConfigContext& ctx) {
  try {
    return Parser(cfg, ctx).Run();
  } catch (const std::exception& e) {
    return Status::Internal(fmt::format("reading the DeepSpeed config failed: {}", e.what()));
  }
}

Result<ParsedDsConfig> ParseDsConfigText(const std::string& text, const DsConfigContext& ctx,
                                         const std::string& source_name) {
  // DeepSpeed loads with object_pairs_hook=dict_raise_error_on_duplicate_keys.
  std::vector<std::set<std::string>> keys_at_depth;
  std::string duplicate;
  JsonParseOptions po;
  po.on_object_start = [&] { keys_at_depth.emplace_back(); };
  po.on_object_end = [&] {
    if (!keys_at_depth.empty()) keys_at_depth.pop_back();
  };
  po.on_key = [&](int, const std::string& key) {
    if (!keys_at_depth.empty() && !keys_at_depth.back().insert(key).second && duplicate.empty()) {
      duplicate = key;
    }
  };
  DSPLAN_ASSIGN_OR_RETURN(json cfg, ParseJsonText(text, source_name, po));
  if (!duplicate.empty()) {
    return Status::InvalidArgument(fmt::format(
        "{}: key {} appears twice in one object; DeepSpeed rejects duplicate keys", source_name,
        Quote(duplicate)));
  }
  auto r = ParseDsConfig(cfg, ctx);
  if (!r.ok()) return r.status().WithPrefix(source_name);
  return r;
}

Result<ParsedDsConfig> ParseDsConfigFile(const std::string& path, const DsConfigContext& ctx) {
  DSPLAN_ASSIGN_OR_RETURN(std::string text, ReadInputFile(path, "DeepSpeed config"));
  return ParseDsConfigText(text, ctx, Escape(path));
}

// ---------------------------------------------------------------------------------------------
// Emit.

const char* EmitStyleName(EmitStyle s) {
  return s == EmitStyle::kExplicit ? "explicit" : "hf-auto";
}

namespace {

json OptimizerJson(const Plan& p, bool hf_auto) {
  json o;
  o["type"] = OptimizerTypeName(p.optimizer);
  json params = json::object();
  const OptimizerHyperparams& hp = p.optimizer_params;
  const bool adam_like = p.optimizer == OptimizerType::kAdam ||
                         p.optimizer == OptimizerType::kAdamW || p.optimizer == OptimizerType::kLamb;
  if (hf_auto) {
    params["lr"] = "auto";
    if (adam_like) {
      params["betas"] = "auto";
      params["eps"] = "auto";
    }
    params["weight_decay"] = "auto";
  } else {
    if (hp.lr) params["lr"] = *hp.lr;
    if (hp.beta1 && hp.beta2) params["betas"] = {*hp.beta1, *hp.beta2};
    if (hp.eps) params["eps"] = *hp.eps;
    if (hp.weight_decay) params["weight_decay"] = *hp.weight_decay;
  }
  if (hp.momentum) params["momentum"] = *hp.momentum;
  if (p.torch_adam) params["torch_adam"] = true;
  if (p.optimizer == OptimizerType::kAdam && !p.adam_w_mode) params["adam_w_mode"] = false;
  if (!params.empty()) o["params"] = params;
  return o;
}

json SchedulerJson(const std::string& type) {
  json s;
  s["type"] = type;
  json params = json::object();
  if (type == "WarmupLR") {
    params = {{"warmup_min_lr", "auto"}, {"warmup_max_lr", "auto"}, {"warmup_num_steps", "auto"}};
  } else if (type == "WarmupDecayLR") {
    params = {{"warmup_min_lr", "auto"},
              {"warmup_max_lr", "auto"},
              {"warmup_num_steps", "auto"},
              {"total_num_steps", "auto"}};
  }
  if (!params.empty()) s["params"] = params;
  return s;
}

}  // namespace

json EmitDsConfig(const Plan& p, EmitStyle style) {
  const bool hf = style == EmitStyle::kHfAuto;
  const ZeroConfig& z = p.zero;
  json c = json::object();

  if (hf) {
    c["train_batch_size"] = "auto";
    c["train_micro_batch_size_per_gpu"] = "auto";
    c["gradient_accumulation_steps"] = "auto";
    c["gradient_clipping"] = "auto";
  } else {
    c["train_batch_size"] = p.train_batch();
    c["train_micro_batch_size_per_gpu"] = p.micro_batch;
    c["gradient_accumulation_steps"] = p.grad_accum;
    c["gradient_clipping"] = p.gradient_clipping;
  }

  // Precision. The HF form leaves "enabled" to the Trainer's --bf16/--fp16, and keeps only the
  // block of the dtype dsplan chose, so the Trainer flag that matters is the one in the config.
  const Fp16LossScale fd;
  auto fp16_block = [&](json enabled) {
    json b = {{"enabled", enabled}};
    b["loss_scale"] = p.fp16.loss_scale;
    b["initial_scale_power"] = p.fp16.initial_scale_power;
    b["loss_scale_window"] = p.fp16.loss_scale_window;
    b["hysteresis"] = p.fp16.hysteresis;
    if (p.fp16.consecutive_hysteresis) b["consecutive_hysteresis"] = true;
    b["min_loss_scale"] = p.fp16.min_loss_scale;
    return b;
  };
  if (hf) {
    if (p.precision == Precision::kFp16) c["fp16"] = fp16_block("auto");
    if (p.precision == Precision::kBf16) c["bf16"] = {{"enabled", "auto"}};
  } else {
    if (p.precision == Precision::kFp16) {
      c["fp16"] = fp16_block(true);
    } else if (!(p.fp16 == fd)) {
      c["fp16"] = fp16_block(false);
    }
    c["bf16"] = {{"enabled", p.precision == Precision::kBf16}};
  }
  if (p.grad_accum_dtype) c["data_types"] = {{"grad_accum_dtype", PrecisionName(*p.grad_accum_dtype)}};
  if (p.communication_dtype) c["communication_data_type"] = PrecisionName(*p.communication_dtype);

  if (p.optimizer_from_config) c["optimizer"] = OptimizerJson(p, hf);
  if (!p.scheduler.empty()) {
    if (hf) {
      c["scheduler"] = SchedulerJson(p.scheduler);
    } else {
      json s = {{"type", p.scheduler}};
      const SchedulerParams& sp = p.scheduler_params;
      json ps = json::object();
      if (sp.warmup_min_lr) ps["warmup_min_lr"] = *sp.warmup_min_lr;
      if (sp.warmup_max_lr) ps["warmup_max_lr"] = *sp.warmup_max_lr;
      if (sp.warmup_num_steps) ps["warmup_num_steps"] = *sp.warmup_num_steps;
      if (sp.total_num_steps) ps["total_num_steps"] = *sp.total_num_steps;
      if (!sp.warmup_type.empty()) ps["warmup_type"] = sp.warmup_type;
      if (!ps.empty()) s["params"] = ps;
      c["scheduler"] = s;
    }
  }
  if (p.zero_allow_untested_optimizer) c["zero_allow_untested_optimizer"] = true;
  if (!p.zero_force_ds_cpu_optimizer) c["zero_force_ds_cpu_optimizer"] = false;

  json zo = json::object();
  zo["stage"] = z.stage;
  // overlap_comm is explicit from stage 1 (its default depends on the stage); stage 0 ignores it
  // and gets it only to keep a value the plan set.
  if (z.stage > 0) {
    zo["overlap_comm"] = z.OverlapComm();
  } else if (z.overlap_comm) {
    zo["overlap_comm"] = *z.overlap_comm;
  }
  // The other ZeRO keys by the table's emit rule (planner/ds_config_keys.h).
  {
    Plan plan = p;     // the table's members take a mutable Plan; only read here
    Plan defaults;     // DeepSpeed's defaults
    const bool s3 = z.stage == 3;
    for (const DsConfigKey* k : DsConfigKeysIn("zero_optimization")) {
      if (k->emit == DsKeyEmit::kByHand) continue;
      json value;
      bool is_default = true;
      if (k->bool_ref != nullptr) {
        value = *k->bool_ref(plan);
        is_default = *k->bool_ref(plan) == *k->bool_ref(defaults);
      } else if (k->int_ref != nullptr) {
        value = *k->int_ref(plan);
        is_default = *k->int_ref(plan) == *k->int_ref(defaults);
      } else {
        continue;
      }
      const bool write = k->emit == DsKeyEmit::kAboveStage0 ? z.stage > 0 || !is_default
                         : k->emit == DsKeyEmit::kStage3    ? s3 || !is_default
                                                            : !is_default;
      if (write) zo[std::string(k->Leaf())] = value;
    }
  }

  const OffloadOptimizerConfig& oo = z.offload_optimizer;
  if (oo.device != OffloadDevice::kNone) {
    json b = {{"device", OffloadDeviceName(oo.device)}, {"pin_memory", oo.pin_memory}};
    if (oo.device == OffloadDevice::kNvme) {
      b["nvme_path"] = oo.nvme_path;
      b["buffer_count"] = oo.buffer_count;
      b["pipeline_read"] = oo.pipeline_read;
      b["pipeline_write"] = oo.pipeline_write;
      b["fast_init"] = oo.fast_init;
    }
    if (oo.ratio != 1.0) b["ratio"] = oo.ratio;
    zo["offload_optimizer"] = b;
  }
  const OffloadParamConfig& op = z.offload_param;
  if (op.device != OffloadDevice::kNone) {
    json b = {{"device", OffloadDeviceName(op.device)}, {"pin_memory", op.pin_memory}};
    if (op.device == OffloadDevice::kNvme) {
      b["nvme_path"] = op.nvme_path;
      b["buffer_count"] = op.buffer_count;
      b["buffer_size"] = op.buffer_size;
      b["max_in_cpu"] = op.max_in_cpu;
    }
    zo["offload_param"] = b;
  }
  c["zero_optimization"] = zo;

  const bool nvme = oo.device == OffloadDevice::kNvme || op.device == OffloadDevice::kNvme;
  if (nvme) {
    const AioConfig& a = p.aio;
    c["aio"] = {{"block_size", a.block_size},
                {"queue_depth", a.queue_depth},
                {"intra_op_parallelism", a.intra_op_parallelism},
                {"thread_count", a.intra_op_parallelism},
                {"single_submit", a.single_submit},
                {"overlap_events", a.overlap_events},
                {"use_gds", a.use_gds}};
  }
  const ActivationCheckpointingConfig& ac = p.activation_checkpointing;
  if (ac.present) {
    json b = {{"partition_activations", ac.partition_activations},
              {"cpu_checkpointing", ac.cpu_checkpointing},
              {"contiguous_memory_optimization", ac.contiguous_memory_optimization},
              {"synchronize_checkpoint_boundary", ac.synchronize_checkpoint_boundary},
              {"profile", ac.profile}};
    b["number_checkpoints"] = ac.number_checkpoints ? json(*ac.number_checkpoints) : json(nullptr);
    c["activation_checkpointing"] = b;
  }
  c["steps_per_print"] = 100;
  c["wall_clock_breakdown"] = false;
  if (p.gradient_checkpointing || p.linear_tiles > 1) {
    // DeepSpeed ignores this key; dsplan check reads it back (ReadDsplanBlock).
    json d;
    std::string note;
    if (p.gradient_checkpointing) {
      d["gradient_checkpointing"] = true;
      note = p.CheckpointsOnHost()
                 ? "the plan keeps activation checkpoints in host memory: call "
                   "deepspeed.checkpointing.configure(None, deepspeed_config=<this file>) and "
                   "checkpoint every block with deepspeed.checkpointing.checkpoint (not "
                   "model.gradient_checkpointing_enable(), whose torch.utils.checkpoint ignores "
                   "the activation_checkpointing block)"
                 : "the plan needs activation checkpointing: call "
                   "model.gradient_checkpointing_enable() in the training script, or pass "
                   "--gradient_checkpointing to the HF Trainer";
    }
    if (p.linear_tiles > 1) {
      d["linear_tiles"] = p.linear_tiles;
      note += fmt::format(
          "{}the plan tiles every Linear of the transformer blocks: replace each "
          "torch.nn.Linear(in, out) in them by deepspeed.zero.TiledLinear(in, out, "
          "out_splits={}) before deepspeed.initialize",
          note.empty() ? "" : "; ", p.linear_tiles);
    }
    d["note"] = note;
    c["dsplan"] = d;
  }
  return c;
}

DsConfigContext ContextForPlan(const Plan& p) {
  DsConfigContext c;
  c.nodes = p.nodes;
  c.gpus_per_node = p.gpus_per_node;
  c.shape = p.shape();
  c.PinMicroBatch(p.micro_batch);
  c.PinPrecision(p.precision);
  c.PinGradientCheckpointing(p.gradient_checkpointing);
  c.grad_accum = p.grad_accum;
  c.global_batch = p.train_batch();
  c.gradient_clipping = p.gradient_clipping;
  return c;
}

}  // namespace dsplan
