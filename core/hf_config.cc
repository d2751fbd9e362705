#include "core/hf_config.h"

#include <cmath>
#include <filesystem>

#include <fmt/format.h>

#include "core/text.h"

namespace dsplan {
namespace fs = std::filesystem;

HfConfig::HfConfig(nlohmann::json json, std::string source)
    : json_(std::move(json)), source_(std::move(source)) {}

Result<HfConfig> HfConfig::Parse(const std::string& text, const std::string& source) {
  DSPLAN_ASSIGN_OR_RETURN(nlohmann::json j, ParseJsonText(text, source));
  if (!j.is_object()) {
    return Status::InvalidArgument(
        fmt::format("{}: a HuggingFace config.json must be a JSON object, found {}", source,
                    j.type_name()));
  }
  return HfConfig(std::move(j), source);
}

Result<HfConfig> HfConfig::Load(const std::string& path) {
  std::error_code ec;
  fs::path p(path);
  if (fs::is_directory(p, ec)) {
    fs::path c = p / "config.json";
    if (!fs::exists(c, ec)) {
      return Status::NotFound(
          fmt::format("{}: folder has no config.json (give a HuggingFace model folder or a "
                      "config.json path)",
                      Quote(path)));
    }
    p = c;
  } else if (!fs::exists(p, ec)) {
    return Status::NotFound(fmt::format("{}: no such file", Quote(path)));
  }
  DSPLAN_ASSIGN_OR_RETURN(std::string text, ReadInputFile(p.string(), "model config"));
  return Parse(text, Escape(p.string()));
}

bool HfConfig::Has(const std::string& key) const {
  auto it = json_.find(key);
  return it != json_.end() && !it->is_null();
}

const nlohmann::json* HfConfig::Find(std::initializer_list<const char*> keys,
                                     std::string* found) const {
  for (const char* k : keys) {
    auto it = json_.find(k);
    if (it != json_.end() && !it->is_null()) {
      *found = k;
      return &*it;
    }
  }
  return nullptr;
}

Status HfConfig::Error(const std::string& key, const std::string& what) const {
  return Status::InvalidArgument(fmt::format("{}: key '{}' {}", source_, key, what));
}

Result<std::optional<int64_t>> HfConfig::OptInt(std::initializer_list<const char*> keys) const {
  std::string key;
  const nlohmann::json* v = Find(keys, &key);
  if (!v) return std::optional<int64_t>();
  if (v->is_number_integer()) return std::optional<int64_t>(v->get<int64_t>());
  if (v->is_number_float()) {
    double d = v->get<double>();
    if (std::isfinite(d) && d == std::floor(d) && std::fabs(d) < 9e18) {
      return std::optional<int64_t>(static_cast<int64_t>(d));
    }
  }
  return Error(key, fmt::format("must be an integer, found {}", ShowJson(*v)));
}

Result<int64_t> HfConfig::Int(std::initializer_list<const char*> keys, int64_t def) const {
  DSPLAN_ASSIGN_OR_RETURN(auto v, OptInt(keys));
  return v.value_or(def);
}

Result<std::optional<double>> HfConfig::OptDouble(std::initializer_list<const char*> keys) const {
  std::string key;
  const nlohmann::json* v = Find(keys, &key);
  if (!v) return std::optional<double>();
  if (v->is_number()) return std::optional<double>(v->get<double>());
  return Error(key, fmt::format("must be a number, found {}", ShowJson(*v)));
}

Result<double> HfConfig::Double(std::initializer_list<const char*> keys, double def) const {
  DSPLAN_ASSIGN_OR_RETURN(auto v, OptDouble(keys));
  return v.value_or(def);
}

Result<bool> HfConfig::Bool(std::initializer_list<const char*> keys, bool def) const {
  std::string key;
  const nlohmann::json* v = Find(keys, &key);
  if (!v) return def;
  if (v->is_boolean()) return v->get<bool>();
  return Error(key, fmt::format("must be true or false, found {}", ShowJson(*v)));
}

Result<std::string> HfConfig::String(std::initializer_list<const char*> keys,
                                     const std::string& def) const {
  std::string key;
  const nlohmann::json* v = Find(keys, &key);
  if (!v) return def;
  if (v->is_string()) return v->get<std::string>();
  return Error(key, fmt::format("must be a string, found {}", ShowJson(*v)));
}

}  // namespace dsplan
