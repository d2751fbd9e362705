#include "core/model_catalog.h"

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <filesystem>

#include <fmt/format.h>
#include <yaml-cpp/yaml.h>

namespace dsplan {
namespace fs = std::filesystem;

#ifndef DSPLAN_SOURCE_DATA_DIR
#define DSPLAN_SOURCE_DATA_DIR "."
#endif

namespace {

// Converts a YAML node to JSON with YAML 1.2 core-schema typing for plain scalars; quoted
// scalars stay strings.
Result<nlohmann::json> YamlToJson(const YAML::Node& n, const std::string& where) {
  switch (n.Type()) {
    case YAML::NodeType::Null:
    case YAML::NodeType::Undefined:
      return nlohmann::json(nullptr);
    case YAML::NodeType::Sequence: {
      nlohmann::json a = nlohmann::json::array();
      for (const auto& e : n) {
        DSPLAN_ASSIGN_OR_RETURN(auto v, YamlToJson(e, where));
        a.push_back(std::move(v));
      }
      return a;
    }
    case YAML::NodeType::Map: {
      nlohmann::json o = nlohmann::json::object();
      for (const auto& kv : n) {
        std::string key = kv.first.as<std::string>();
        DSPLAN_ASSIGN_OR_RETURN(auto v, YamlToJson(kv.second, where + "." + key));
        o[key] = std::move(v);
      }
      return o;
    }
    case YAML::NodeType::Scalar: {
      const std::string& s = n.Scalar();
      if (n.Tag() == "!") return nlohmann::json(s);  // quoted
      if (s == "null" || s == "~" || s == "Null" || s == "NULL") return nlohmann::json(nullptr);
      if (s == "true" || s == "True") return nlohmann::json(true);
      if (s == "false" || s == "False") return nlohmann::json(false);
      try {
        size_t pos = 0;
        long long i = std::stoll(s, &pos);
        if (pos == s.size()) return nlohmann::json(static_cast<int64_t>(i));
      } catch (...) {
      }
      try {
        size_t pos = 0;
        double d = std::stod(s, &pos);
        if (pos == s.size()) return nlohmann::json(d);
      } catch (...) {
      }
      return nlohmann::json(s);
    }
  }
  return Status::Internal("unknown YAML node type at " + where);
}

Result<YAML::Node> LoadYaml(const std::string& path) {
  try {
    return YAML::LoadFile(path);
  } catch (const YAML::BadFile&) {
    return Status::NotFound(fmt::format("{}: cannot be read", path));
  } catch (const YAML::Exception& e) {
    return Status::InvalidArgument(fmt::format("{}: malformed YAML at line {}, column {}: {}",
                                               path, e.mark.line + 1, e.mark.column + 1, e.msg));
  }
}

size_t EditDistance(const std::string& a, const std::string& b) {
  std::vector<size_t> prev(b.size() + 1), cur(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) prev[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    cur[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      size_t sub = prev[j - 1] + (std::tolower(a[i - 1]) == std::tolower(b[j - 1]) ? 0 : 1);
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, sub});
    }
    std::swap(prev, cur);
  }
  return prev[b.size()];
}

bool LooksLikePath(const std::string& s) {
  std::error_code ec;
  if (fs::exists(s, ec)) return true;
  if (s.find('/') != std::string::npos) return true;
  return s.size() > 5 && s.substr(s.size() - 5) == ".json";
}

}  // namespace

std::string DataDir() {
  if (const char* d = std::getenv("DSPLAN_DATA_DIR"); d && *d) return d;
  return DSPLAN_SOURCE_DATA_DIR;
}

Result<HfConfig> LoadCatalogConfig(const std::string& yaml_path) {
  DSPLAN_ASSIGN_OR_RETURN(YAML::Node root, LoadYaml(yaml_path));
  if (!root.IsMap()) {
    return Status::InvalidArgument(fmt::format("{}: a catalog entry must be a YAML mapping",
                                               yaml_path));
  }
  for (const auto& kv : root) {
    std::string key = kv.first.as<std::string>();
    if (key != "name" && key != "hf_id" && key != "description" && key != "config") {
      return Status::InvalidArgument(fmt::format(
          "{}: unknown key '{}' (valid: name, hf_id, description, config)", yaml_path, key));
    }
  }
  if (!root["config"] || !root["config"].IsMap()) {
    return Status::InvalidArgument(fmt::format(
        "{}: key 'config' is missing or not a mapping; it must hold the model's config.json keys",
        yaml_path));
  }
  DSPLAN_ASSIGN_OR_RETURN(auto j, YamlToJson(root["config"], "config"));
  return HfConfig(std::move(j), yaml_path);
}

Result<std::vector<CatalogEntry>> ListCatalog(const std::string& data_dir) {
  fs::path dir = fs::path(data_dir) / "models";
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) {
    return Status::NotFound(fmt::format(
        "model catalog folder {} does not exist (set DSPLAN_DATA_DIR to the dsplan source tree)",
        dir.string()));
  }
  std::vector<CatalogEntry> out;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    if (e.path().extension() != ".yaml") continue;
    DSPLAN_ASSIGN_OR_RETURN(YAML::Node root, LoadYaml(e.path().string()));
    CatalogEntry c;
    c.name = e.path().stem().string();
    c.path = e.path().string();
    if (root.IsMap()) {
      if (root["hf_id"]) c.hf_id = root["hf_id"].as<std::string>("");
      if (root["description"]) c.description = root["description"].as<std::string>("");
      if (root["name"] && root["name"].as<std::string>("") != c.name) {
        return Status::InvalidArgument(fmt::format("{}: key 'name' is '{}' but the file is named "
                                                   "'{}'; they must agree",
                                                   c.path, root["name"].as<std::string>(""),
                                                   c.name));
      }
    }
    out.push_back(std::move(c));
  }
  std::sort(out.begin(), out.end(),
            [](const CatalogEntry& a, const CatalogEntry& b) { return a.name < b.name; });
  return out;
}

std::vector<std::string> SuggestNames(const std::string& name,
                                      const std::vector<std::string>& candidates, size_t max) {
  std::vector<std::pair<size_t, std::string>> scored;
  for (const auto& c : candidates) {
    size_t d = EditDistance(name, c);
    bool prefix = c.rfind(name, 0) == 0 || name.rfind(c, 0) == 0;
    size_t limit = std::max<size_t>(2, name.size() / 3);
    if (d <= limit || (prefix && !name.empty())) scored.emplace_back(prefix ? d / 2 : d, c);
  }
  std::sort(scored.begin(), scored.end());
  std::vector<std::string> out;
  for (size_t i = 0; i < scored.size() && i < max; ++i) out.push_back(scored[i].second);
  return out;
}

Result<ModelSpec> LoadModel(const std::string& name_or_path, const std::string& data_dir) {
  if (name_or_path.empty()) {
    return Status::InvalidArgument("--model is empty; give a catalog name (see `dsplan models`) "
                                   "or a path to a HuggingFace config.json");
  }
  std::error_code exists_ec;
  if (!fs::exists(name_or_path, exists_ec) && name_or_path.find('/') != std::string::npos &&
      name_or_path.front() != '/' && name_or_path.front() != '.') {
    // A HuggingFace hub id ("Qwen/Qwen2-7B") that is not a local path: the catalog entry with
    // that hf_id (case-insensitive, as the hub resolves ids).
    auto lower = [](std::string s) {
      for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
      return s;
    };
    auto entries = ListCatalog(data_dir);
    if (entries.ok()) {
      for (const CatalogEntry& e : *entries) {
        if (!e.hf_id.empty() && lower(e.hf_id) == lower(name_or_path)) {
          return LoadModel(e.name, data_dir);
        }
      }
    }
  }
  if (LooksLikePath(name_or_path)) {
    DSPLAN_ASSIGN_OR_RETURN(auto cfg, HfConfig::Load(name_or_path));
    return ModelSpecFromHf(cfg, name_or_path);
  }
  fs::path file = fs::path(data_dir) / "models" / (name_or_path + ".yaml");
  std::error_code ec;
  if (!fs::exists(file, ec)) {
    DSPLAN_ASSIGN_OR_RETURN(auto entries, ListCatalog(data_dir));
    std::vector<std::string> names;
    for (const auto& e : entries) names.push_back(e.name);
    auto near = SuggestNames(name_or_path, names);
    std::string hint = near.empty() ? std::string("run `dsplan models` for the list")
                                    : fmt::format("did you mean {}?", fmt::join(near, ", "));
    return Status::NotFound(fmt::format("unknown model '{}': not in the catalog ({} models) and "
                                        "not a file; {}",
                                        name_or_path, names.size(), hint));
  }
  DSPLAN_ASSIGN_OR_RETURN(auto cfg, LoadCatalogConfig(file.string()));
  return ModelSpecFromHf(cfg, name_or_path);
}

}  // namespace dsplan
