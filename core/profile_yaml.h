// Reading and writing hardware and node profiles as YAML (format: docs/profile-format.md).
//
// The reader is strict: an unknown key, a missing required key, a value of the wrong type or
// unit is an InvalidArgument naming the file, the dotted key and the line, and what is valid.
// The types are core/hardware_profile.h.
#ifndef DSPLAN_CORE_PROFILE_YAML_H_
#define DSPLAN_CORE_PROFILE_YAML_H_

#include <string>
#include <vector>

#include "core/hardware_profile.h"
#include "core/status.h"

namespace dsplan {

/// Parses profile YAML text; |source| names it in errors (the file, or "<fuzz>").
Result<HardwareProfile> ParseHardwareProfile(const std::string& text, const std::string& source);

/// Reads a profile YAML. Unknown keys, missing required keys, wrong types or units are errors
/// naming the file and key.
Result<HardwareProfile> LoadHardwareProfile(const std::string& path);
/// |name_or_path|: a file path (contains '/' or ends in .yaml), or a profile name in
/// <data_dir>/profiles/, or a node profile (a file with a gpu_profile key, or a name in
/// <data_dir>/profiles/nodes/), which is applied over its GPU profile. Unknown names list the
/// available ones.
Result<HardwareProfile> FindHardwareProfile(const std::string& name_or_path,
                                            const std::string& data_dir);
/// Names of the profiles in <data_dir>/profiles/, sorted.
Result<std::vector<std::string>> ListHardwareProfiles(const std::string& data_dir);
/// Writes |profile| as YAML that LoadHardwareProfile reads back unchanged.
Status WriteHardwareProfile(const HardwareProfile& profile, const std::string& path);

/// Parses a node profile; |source| names it in errors.
Result<NodeProfile> ParseNodeProfile(const std::string& text, const std::string& source);
/// |name_or_path|: a file path, or a name in <data_dir>/profiles/nodes/.
Result<NodeProfile> FindNodeProfile(const std::string& name_or_path, const std::string& data_dir);
/// Names of the node profiles in <data_dir>/profiles/nodes/, sorted (empty when none).
std::vector<std::string> ListNodeProfiles(const std::string& data_dir);
}  // namespace dsplan

#endif  // DSPLAN_CORE_PROFILE_YAML_H_
