// Text that crosses dsplan's boundary: user values quoted into messages, bounded file reads, and
// JSON parsed and printed without the library's exceptions or unbounded recursion.
//
// Every message that names a value the user gave (a flag value, a key, a file name, a JSON value)
// goes through Quote/Escape or ShowJson: long values are cut, control bytes and bytes that are not
// UTF-8 are escaped, so a message is always one readable line of bounded length.
#ifndef DSPLAN_CORE_TEXT_H_
#define DSPLAN_CORE_TEXT_H_

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/status.h"

namespace dsplan {

/// How much of a user value a message shows by default.
inline constexpr size_t kMaxQuotedBytes = 80;
/// The longest message line dsplan prints (a safety net over everything else).
inline constexpr size_t kMaxMessageBytes = 1000;
/// Input files (configs, profiles, catalog entries, calibration runs) larger than this are refused.
inline constexpr int64_t kMaxInputFileBytes = int64_t{16} << 20;
/// JSON and YAML inputs nested deeper than this are refused (real configs nest 3-5 levels).
inline constexpr int kMaxNestingDepth = 64;

/// |v| with control bytes and invalid UTF-8 escaped (\n, \t, \xNN), cut after about |max| bytes
/// with "... (N bytes)" appended. Valid UTF-8 text is kept as is.
std::string Escape(std::string_view v, size_t max = kMaxQuotedBytes);
/// Escape(v, max) between single quotes: the one way to put a user value into a message.
std::string Quote(std::string_view v, size_t max = kMaxQuotedBytes);
/// A whole message made one line: newlines and control bytes escaped, invalid UTF-8 escaped,
/// cut at kMaxMessageBytes.
std::string OneLine(std::string_view message);
/// True when |s| is valid UTF-8.
bool IsValidUtf8(std::string_view s);

/// A JSON value for a message: compact, invalid UTF-8 replaced, cut after |max| bytes.
std::string ShowJson(const nlohmann::json& v, size_t max = kMaxQuotedBytes);
/// JSON text for output (stdout or a file): never throws on invalid UTF-8 (replaced by U+FFFD).
std::string JsonText(const nlohmann::json& v, int indent = 2);

/// Levenshtein distance of |a| and |b| (letters compared case-insensitively when
/// |ignore_case|): the "did you mean" suggestions of the config and catalog readers.
size_t EditDistance(std::string_view a, std::string_view b, bool ignore_case = false);

/// The median of |v| (the mean of the middle two for an even count); 0 when empty.
double Median(std::vector<double> v);

/// Reads a regular file whole. Refuses what is not a regular file (a folder, /dev/zero, a FIFO)
/// and files over |max_bytes|, each with a message naming |path| and |what| (e.g. "DeepSpeed
/// config"). NotFound when the file does not exist.
Result<std::string> ReadInputFile(const std::string& path, const std::string& what,
                                  int64_t max_bytes = kMaxInputFileBytes);

/// Writes |text| to |path| (created or replaced). Errors say why, naming |what| and the path:
/// the folder does not exist, the path is a folder, permission denied, read-only, disk full.
Status WriteTextFile(const std::string& path, std::string_view text, const std::string& what);

/// Options of ParseJsonText.
struct JsonParseOptions {
  /// Called for each object key at parse time (the caller keeps its own state, e.g. to find a
  /// duplicate key). May be empty.
  std::function<void(int depth, const std::string& key)> on_key;
  /// Object starts and ends, for callers that track keys per object.
  std::function<void()> on_object_start, on_object_end;
};

/// Parses JSON text: refuses nesting deeper than kMaxNestingDepth, numbers outside double range,
/// and malformed text, each as one InvalidArgument line "<source>:<line>:<column>: ...".
Result<nlohmann::json> ParseJsonText(std::string_view text, const std::string& source,
                                     const JsonParseOptions& options = {});

}  // namespace dsplan

#endif  // DSPLAN_CORE_TEXT_H_
