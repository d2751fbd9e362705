// Writing the files dsplan produces (ds_config.json, hostfiles, traces, reports, profiles): one
// helper for every command, so that no command overwrites an input or an existing file unasked,
// and none reports success for a write that failed.
//
// Thread safety: the functions touch the file system; callers serialize writes to one path.
#ifndef DSPLAN_CORE_OUTPUT_FILE_H_
#define DSPLAN_CORE_OUTPUT_FILE_H_

#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace dsplan {

struct OutputPolicy {
  /// Files this command read (--model's config.json, --ds-config, --hardware YAML, ...): never
  /// written, even with |force|.
  std::vector<std::string> inputs;
  /// Replace an existing regular file (--force).
  bool force = false;
  /// The flag that named the path, for messages ("--emit").
  std::string flag;
};

/// True when |a| and |b| name the same file (both must exist) or the same normalized path.
bool SamePath(const std::string& a, const std::string& b);

/// Whether |path| may be written under |policy|: not one of the inputs; not an existing regular
/// file unless policy.force; its folder exists. Devices and pipes (/dev/stdout) may be written.
/// InvalidArgument naming the flag, the path and the way out (--force, another name).
Status CheckOutputPath(const std::string& path, const OutputPolicy& policy);

/// |path| when it may be written without force; else the first free "stem-N.ext" next to it
/// (ds_config.json -> ds_config-1.json). For default names the user did not choose.
std::string FreeOutputPath(const std::string& path, const OutputPolicy& policy);

/// Writes |content| to |path|: a regular file through a temporary file in the same folder,
/// flushed, closed and renamed over |path| (nothing half-written is left on failure); a device
/// or pipe directly. Every step is checked: IoError naming the path and the cause (e.g. "No
/// space left on device").
Status WriteOutputFile(const std::string& path, std::string_view content);

/// CheckOutputPath, then WriteOutputFile.
Status WriteOutputFile(const std::string& path, std::string_view content,
                       const OutputPolicy& policy);

}  // namespace dsplan

#endif  // DSPLAN_CORE_OUTPUT_FILE_H_
