#include "tests/fuzz/fuzz_targets.h"

namespace dsplan::fuzz {

TargetFn FindTarget(const std::string& name) {
  if (name == "hf_config") return &HfConfig;
  if (name == "ds_config") return &DsConfig;
  if (name == "profile_yaml") return &ProfileYaml;
  if (name == "catalog_yaml") return &CatalogYaml;
  if (name == "cli_args") return &CliArgs;
  return nullptr;
}

}  // namespace dsplan::fuzz
