// The model catalog (models/<name>.yaml) and the one entry point that turns a --model argument
// into a ModelSpec.
//
// A catalog file holds a model's HuggingFace config.json keys under `config:` (facts copied from
// the hub), plus `name`, `hf_id` and `description`. It goes through the same importer as a
// user's config.json, so the catalog and user configs cannot disagree.
#ifndef DSPLAN_CORE_MODEL_CATALOG_H_
#define DSPLAN_CORE_MODEL_CATALOG_H_

#include <string>
#include <vector>

#include "core/hf_config.h"
#include "core/model_spec.h"
#include "core/status.h"

namespace dsplan {

struct CatalogEntry {
  std::string name;         // file stem, the --model name
  std::string hf_id;        // HuggingFace hub id, e.g. "meta-llama/Llama-2-7b-hf"
  std::string description;
  std::string path;         // the YAML file
};

/// The folder holding models/ and profiles/: $DSPLAN_DATA_DIR when set, else the source tree
/// the binary was built from.
std::string DataDir();

/// Lists models/<name>.yaml under |data_dir|, sorted by name. Errors: folder missing, or a file
/// that is not a valid catalog entry (named).
Result<std::vector<CatalogEntry>> ListCatalog(const std::string& data_dir);

/// Reads one catalog file into an HfConfig (its `config:` mapping as JSON).
Result<HfConfig> LoadCatalogConfig(const std::string& yaml_path);
/// The same from YAML text; |source| names it in errors.
Result<HfConfig> ParseCatalogConfig(const std::string& text, const std::string& source);

/// Resolves --model: a path to a config.json or a folder holding one (anything that exists on
/// disk, or contains '/' or ends in .json), else a catalog name. An unknown name is NotFound
/// with the closest catalog names suggested.
Result<ModelSpec> LoadModel(const std::string& name_or_path, const std::string& data_dir);

/// Catalog names within a small edit distance of |name|, closest first (at most |max|).
std::vector<std::string> SuggestNames(const std::string& name,
                                      const std::vector<std::string>& candidates, size_t max = 3);

}  // namespace dsplan

#endif  // DSPLAN_CORE_MODEL_CATALOG_H_
