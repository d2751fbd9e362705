// HfConfig: typed, error-naming access to a HuggingFace config.json object.
//
// Every getter reads one key the way transformers' configuration class does: the value when the
// key is present and not null, the class default otherwise. A present key of the wrong type is
// an error that names the source file and the key. Aliases model transformers' attribute_map
// (e.g. GPT-2's `hidden_size` -> `n_embd`): the first present name wins.
#ifndef DSPLAN_CORE_HF_CONFIG_H_
#define DSPLAN_CORE_HF_CONFIG_H_

#include <cstdint>
#include <initializer_list>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "core/status.h"

namespace dsplan {

class HfConfig {
 public:
  /// |source| names the file (or catalog entry) in error messages.
  HfConfig(nlohmann::json json, std::string source);

  /// Parses JSON text. Errors name |source| and the parser's position.
  static Result<HfConfig> Parse(const std::string& text, const std::string& source);
  /// Reads |path| (a config.json, or a folder holding one).
  static Result<HfConfig> Load(const std::string& path);

  const std::string& source() const { return source_; }
  const nlohmann::json& json() const { return json_; }
  bool Has(const std::string& key) const;

  /// Integer value of the first present, non-null key in |keys|; |def| when none is present.
  Result<int64_t> Int(std::initializer_list<const char*> keys, int64_t def) const;
  /// Like Int() but nullopt when absent or null (for `Optional[int] = None` config fields).
  Result<std::optional<int64_t>> OptInt(std::initializer_list<const char*> keys) const;
  Result<double> Double(std::initializer_list<const char*> keys, double def) const;
  Result<std::optional<double>> OptDouble(std::initializer_list<const char*> keys) const;
  Result<bool> Bool(std::initializer_list<const char*> keys, bool def) const;
  Result<std::string> String(std::initializer_list<const char*> keys, const std::string& def) const;

  /// An error "<source>: key '<key>' <what>" for checks made after reading.
  Status Error(const std::string& key, const std::string& what) const;

 private:
  const nlohmann::json* Find(std::initializer_list<const char*> keys, std::string* found) const;
  nlohmann::json json_;
  std::string source_;
};

}  // namespace dsplan

#endif  // DSPLAN_CORE_HF_CONFIG_H_
