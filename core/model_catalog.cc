#include "core/model_catalog.h"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <filesystem>

#include <fmt/format.h>
#include <yaml-cpp/yaml.h>

#include "core/text.h"

namespace dsplan {
namespace fs = std::filesystem;

#ifndef DSPLAN_SOURCE_DATA_DIR
#define DSPLAN_SOURCE_DATA_DIR "."
#endif

namespace {

// Limits of YamlToJson: nesting, and nodes converted in all (aliases are expanded, so a file of
// a few lines can name billions of nodes: "billion laughs").
constexpr int64_t kMaxYamlNodes = 100000;

// A YAML 1.2 core-schema integer or float (plain scalars only): digits with an optional sign,
// fraction and exponent. Anything else (0x1p3, nan, inf, 1_000) stays a string.
bool LooksNumeric(const std::string& s, bool* integer) {
  size_t i = 0;
  if (i < s.size() && (s[i] == '-' || s[i] == '+')) ++i;
  size_t digits = 0;
  while (i < s.size() && std::isdigit(static_cast<unsigned char>(s[i]))) ++i, ++digits;
  *integer = true;
  if (i < s.size() && s[i] == '.') {
    *integer = false;
    ++i;
    while (i < s.size() && std::isdigit(static_cast<unsigned char>(s[i]))) ++i, ++digits;
  }
  if (digits == 0) return false;
  if (i < s.size() && (s[i] == 'e' || s[i] == 'E')) {
    *integer = false;
    ++i;
    if (i < s.size() && (s[i] == '-' || s[i] == '+')) ++i;
    size_t exp = 0;
    while (i < s.size() && std::isdigit(static_cast<unsigned char>(s[i]))) ++i, ++exp;
    if (exp == 0) return false;
  }
  return i == s.size();
}

// Converts a YAML node to JSON with YAML 1.2 core-schema typing for plain scalars; quoted
// scalars stay strings. |budget| counts the nodes still allowed.
Result<nlohmann::json> YamlToJson(const YAML::Node& n, const std::string& file,
                                  const std::string& where, int depth, int64_t* budget) {
  if (--*budget < 0) {
    return Status::InvalidArgument(fmt::format(
        "{}: more than {} values (after expanding aliases); a catalog entry holds a few dozen",
        file, kMaxYamlNodes));
  }
  if (depth > kMaxNestingDepth) {
    return Status::InvalidArgument(fmt::format("{}: {} is nested deeper than {} levels", file,
                                               Escape(where), kMaxNestingDepth));
  }
  switch (n.Type()) {
    case YAML::NodeType::Null:
    case YAML::NodeType::Undefined:
      return nlohmann::json(nullptr);
    case YAML::NodeType::Sequence: {
      nlohmann::json a = nlohmann::json::array();
      for (const auto& e : n) {
        DSPLAN_ASSIGN_OR_RETURN(auto v, YamlToJson(e, file, where + "[]", depth + 1, budget));
        a.push_back(std::move(v));
      }
      return a;
    }
    case YAML::NodeType::Map: {
      nlohmann::json o = nlohmann::json::object();
      for (const auto& kv : n) {
        if (!kv.first.IsScalar()) {
          return Status::InvalidArgument(fmt::format(
              "{}:{}: a key under {} is a list or mapping; keys must be plain names", file,
              kv.first.Mark().line + 1, Escape(where)));
        }
        const std::string& key = kv.first.Scalar();
        if (!IsValidUtf8(key)) {
          return Status::InvalidArgument(fmt::format("{}: key {} under {} is not valid UTF-8",
                                                     file, Quote(key), Escape(where)));
        }
        DSPLAN_ASSIGN_OR_RETURN(
            auto v, YamlToJson(kv.second, file, where + "." + key, depth + 1, budget));
        o[key] = std::move(v);
      }
      return o;
    }
    case YAML::NodeType::Scalar: {
      const std::string& s = n.Scalar();
      if (!IsValidUtf8(s)) {
        return Status::InvalidArgument(fmt::format("{}: {} = {} is not valid UTF-8", file,
                                                   Escape(where), Quote(s)));
      }
      if (n.Tag() == "!") return nlohmann::json(s);  // quoted
      if (s == "null" || s == "~" || s == "Null" || s == "NULL") return nlohmann::json(nullptr);
      if (s == "true" || s == "True") return nlohmann::json(true);
      if (s == "false" || s == "False") return nlohmann::json(false);
      bool integer = false;
      if (LooksNumeric(s, &integer)) {
        errno = 0;
        char* end = nullptr;
        if (integer) {
          const long long i = std::strtoll(s.c_str(), &end, 10);
          if (errno == 0 && *end == '\0') return nlohmann::json(static_cast<int64_t>(i));
        }
        errno = 0;
        const double d = std::strtod(s.c_str(), &end);
        if (*end != '\0' || !std::isfinite(d)) {
          return Status::InvalidArgument(fmt::format(
              "{}: {} = {} is outside the range of a 64-bit float", file, Escape(where),
              Quote(s)));
        }
        return nlohmann::json(d);
      }
      return nlohmann::json(s);
    }
  }
  return Status::Internal("unknown YAML node type at " + where);
}

Result<YAML::Node> ParseYaml(const std::string& text, const std::string& path) {
  try {
    return YAML::Load(text);
  } catch (const YAML::Exception& e) {
    return Status::InvalidArgument(fmt::format("{}: malformed YAML at line {}, column {}: {}",
                                               Escape(path), e.mark.line + 1, e.mark.column + 1,
                                               Escape(e.msg, 200)));
  } catch (const std::exception& e) {
    return Status::InvalidArgument(
        fmt::format("{}: cannot be read as YAML: {}", Escape(path), Escape(e.what(), 200)));
  }
}

Result<YAML::Node> LoadYaml(const std::string& path) {
  DSPLAN_ASSIGN_OR_RETURN(std::string text, ReadInputFile(path, "catalog entry"));
  return ParseYaml(text, path);
}

// A catalog string (hf_id, description, name): a scalar in valid UTF-8.
Result<std::string> CatalogString(const YAML::Node& root, const char* key,
                                  const std::string& path) {
  YAML::Node n = root[key];
  if (!n.IsDefined() || n.IsNull()) return std::string();
  if (!n.IsScalar()) {
    return Status::InvalidArgument(
        fmt::format("{}: key '{}' must be a string", Escape(path), key));
  }
  if (!IsValidUtf8(n.Scalar())) {
    return Status::InvalidArgument(fmt::format("{}: key '{}' is not valid UTF-8: {}",
                                               Escape(path), key, Quote(n.Scalar())));
  }
  return n.Scalar();
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
  DSPLAN_ASSIGN_OR_RETURN(std::string text, ReadInputFile(yaml_path, "catalog entry"));
  return ParseCatalogConfig(text, yaml_path);
}

Result<HfConfig> ParseCatalogConfig(const std::string& text, const std::string& source) {
  const std::string& yaml_path = source;
  const std::string file = Escape(yaml_path);
  DSPLAN_ASSIGN_OR_RETURN(YAML::Node root, ParseYaml(text, yaml_path));
  if (!root.IsMap()) {
    return Status::InvalidArgument(fmt::format("{}: a catalog entry must be a YAML mapping",
                                               file));
  }
  for (const auto& kv : root) {
    if (!kv.first.IsScalar()) {
      return Status::InvalidArgument(fmt::format(
          "{}:{}: a top-level key is a list or mapping; valid keys: name, hf_id, description, "
          "config",
          file, kv.first.Mark().line + 1));
    }
    const std::string& key = kv.first.Scalar();
    if (key != "name" && key != "hf_id" && key != "description" && key != "config") {
      return Status::InvalidArgument(fmt::format(
          "{}: unknown key {} (valid: name, hf_id, description, config)", file, Quote(key)));
    }
  }
  YAML::Node config = root["config"];
  if (!config.IsDefined() || !config.IsMap()) {
    return Status::InvalidArgument(fmt::format(
        "{}: key 'config' is missing or not a mapping; it must hold the model's config.json keys",
        file));
  }
  int64_t budget = kMaxYamlNodes;
  DSPLAN_ASSIGN_OR_RETURN(auto j, YamlToJson(config, file, "config", 0, &budget));
  return HfConfig(std::move(j), file);
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
      DSPLAN_ASSIGN_OR_RETURN(c.hf_id, CatalogString(root, "hf_id", c.path));
      DSPLAN_ASSIGN_OR_RETURN(c.description, CatalogString(root, "description", c.path));
      DSPLAN_ASSIGN_OR_RETURN(std::string name, CatalogString(root, "name", c.path));
      if (!name.empty() && name != c.name) {
        return Status::InvalidArgument(fmt::format("{}: key 'name' is {} but the file is named "
                                                   "{}; they must agree",
                                                   Escape(c.path), Quote(name), Quote(c.name)));
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
  // Names are short; a long argument is no typo of one (and the edit distance is quadratic).
  if (name.size() > 256) return {};
  for (const auto& c : candidates) {
    if (c.size() > 256) continue;
    size_t d = EditDistance(name, c, /*ignore_case=*/true);
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
    // A hub id of no catalog entry ("allenai/OLMo-2-1124-7B"): dsplan reads no network, so say how to
    // get the config instead of only that no such file exists.
    if (!fs::exists(name_or_path, exists_ec) && name_or_path.front() != '/' &&
        name_or_path.front() != '.' &&
        std::count(name_or_path.begin(), name_or_path.end(), '/') == 1 &&
        name_or_path.find(".json") == std::string::npos) {
      return Status::NotFound(fmt::format(
          "{} is neither a file nor the hub id of a catalog model (`dsplan models` lists them); "
          "dsplan does not download: fetch the model's config.json (for example `huggingface-cli "
          "download {} config.json`) and pass its path",
          Quote(name_or_path), name_or_path));
    }
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
    return Status::NotFound(
        fmt::format("unknown model {}: not in the catalog ({} models) and "
                    "not a file; {} (a model outside the catalog: pass the "
                    "path of its config.json)",
                    Quote(name_or_path), names.size(), hint));
  }
  DSPLAN_ASSIGN_OR_RETURN(auto cfg, LoadCatalogConfig(file.string()));
  return ModelSpecFromHf(cfg, name_or_path);
}

}  // namespace dsplan
