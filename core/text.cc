#include "core/text.h"

#include <sys/stat.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>
#include <vector>

#include <fmt/format.h>

namespace dsplan {
namespace {

// Length of the valid UTF-8 sequence starting at s[i] (2..4), or 0 when it is not one.
size_t Utf8SequenceLength(std::string_view s, size_t i) {
  const auto b = [&](size_t k) { return static_cast<unsigned char>(s[k]); };
  const unsigned char c = b(i);
  size_t n = 0;
  uint32_t cp = 0;
  if (c >= 0xC2 && c <= 0xDF) {
    n = 2;
    cp = c & 0x1F;
  } else if (c >= 0xE0 && c <= 0xEF) {
    n = 3;
    cp = c & 0x0F;
  } else if (c >= 0xF0 && c <= 0xF4) {
    n = 4;
    cp = c & 0x07;
  } else {
    return 0;
  }
  if (i + n > s.size()) return 0;
  for (size_t k = 1; k < n; ++k) {
    if ((b(i + k) & 0xC0) != 0x80) return 0;
    cp = (cp << 6) | (b(i + k) & 0x3F);
  }
  if ((n == 3 && cp < 0x800) || (n == 4 && cp < 0x10000) || cp > 0x10FFFF ||
      (cp >= 0xD800 && cp <= 0xDFFF)) {
    return 0;
  }
  return n;
}

std::string EscapeImpl(std::string_view v, size_t max, bool cut_note) {
  std::string out;
  size_t i = 0;
  while (i < v.size()) {
    if (out.size() >= max) break;
    const unsigned char c = static_cast<unsigned char>(v[i]);
    if (c >= 0x20 && c < 0x7F) {
      out += static_cast<char>(c);
      ++i;
    } else if (c == '\n') {
      out += "\\n";
      ++i;
    } else if (c == '\t') {
      out += "\\t";
      ++i;
    } else if (c == '\r') {
      out += "\\r";
      ++i;
    } else if (c >= 0x80) {
      const size_t n = Utf8SequenceLength(v, i);
      if (n > 0) {
        out.append(v.substr(i, n));
        i += n;
      } else {
        out += fmt::format("\\x{:02x}", c);
        ++i;
      }
    } else {
      out += fmt::format("\\x{:02x}", c);
      ++i;
    }
  }
  if (i < v.size() && cut_note) out += fmt::format("... ({} bytes)", v.size());
  return out;
}

}  // namespace

bool IsValidUtf8(std::string_view s) {
  for (size_t i = 0; i < s.size();) {
    if (static_cast<unsigned char>(s[i]) < 0x80) {
      ++i;
      continue;
    }
    const size_t n = Utf8SequenceLength(s, i);
    if (n == 0) return false;
    i += n;
  }
  return true;
}

std::string Escape(std::string_view v, size_t max) { return EscapeImpl(v, max, true); }

std::string Quote(std::string_view v, size_t max) { return "'" + Escape(v, max) + "'"; }

std::string OneLine(std::string_view message) {
  std::string out = EscapeImpl(message, kMaxMessageBytes, false);
  if (out.size() >= kMaxMessageBytes && message.size() > out.size()) out += "... (cut)";
  return out;
}

std::string ShowJson(const nlohmann::json& v, size_t max) {
  // Values reach here from ParseJsonText (nesting bounded), so dump's recursion is bounded.
  std::string s = v.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  return Escape(s, max);
}

std::string JsonText(const nlohmann::json& v, int indent) {
  return v.dump(indent, ' ', false, nlohmann::json::error_handler_t::replace);
}

Result<std::string> ReadInputFile(const std::string& path, const std::string& what,
                                  int64_t max_bytes) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    const int err = errno;
    if (err == ENOENT || err == ENOTDIR) {
      return Status::NotFound(fmt::format("{} {}: no such file", what, Quote(path)));
    }
    return Status::IoError(
        fmt::format("{} {}: cannot be read: {}", what, Quote(path), std::strerror(err)));
  }
  if (S_ISDIR(st.st_mode)) {
    return Status::InvalidArgument(
        fmt::format("{} {} is a folder; give a file", what, Quote(path)));
  }
  if (!S_ISREG(st.st_mode)) {
    return Status::InvalidArgument(fmt::format(
        "{} {} is not a regular file (a device, pipe or socket); give a file", what, Quote(path)));
  }
  if (st.st_size > max_bytes) {
    return Status::InvalidArgument(fmt::format("{} {} is {} bytes; dsplan reads at most {} bytes",
                                               what, Quote(path), st.st_size, max_bytes));
  }
  std::unique_ptr<FILE, int (*)(FILE*)> f(std::fopen(path.c_str(), "rb"), &std::fclose);
  if (!f) {
    return Status::IoError(
        fmt::format("{} {}: cannot be read: {}", what, Quote(path), std::strerror(errno)));
  }
  std::string text;
  text.reserve(static_cast<size_t>(st.st_size));
  char buf[65536];
  size_t n = 0;
  while ((n = std::fread(buf, 1, sizeof buf, f.get())) > 0) {
    text.append(buf, n);
    // The file may grow while it is read; the cap holds regardless.
    if (static_cast<int64_t>(text.size()) > max_bytes) {
      return Status::InvalidArgument(fmt::format("{} {} is larger than {} bytes", what,
                                                 Quote(path), max_bytes));
    }
  }
  if (std::ferror(f.get())) {
    return Status::IoError(
        fmt::format("{} {}: read failed: {}", what, Quote(path), std::strerror(errno)));
  }
  return text;
}

Status WriteTextFile(const std::string& path, std::string_view text, const std::string& what) {
  auto fail = [&](int err) {
    std::string why = std::strerror(err);
    if (err == ENOENT) {
      why = "its folder does not exist";
    } else if (err == EISDIR) {
      why = "it is a folder; give a file name";
    } else if (err == EROFS) {
      why = "the file system is read-only";
    } else if (err == EACCES || err == EPERM) {
      why = "permission denied";
    } else if (err == ENOSPC) {
      why = "no space left on the device";
    }
    return Status::IoError(fmt::format("cannot write {} {}: {}", what, Quote(path), why));
  };
  if (path.empty()) return Status::InvalidArgument(fmt::format("the {} file name is empty", what));
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) return fail(EISDIR);
  errno = 0;
  FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr) return fail(errno);
  const size_t n = std::fwrite(text.data(), 1, text.size(), f);
  int err = (n != text.size()) ? errno : 0;
  if (std::fflush(f) != 0 && err == 0) err = errno;
  if (std::fclose(f) != 0 && err == 0) err = errno;
  if (err != 0 || n != text.size()) return fail(err ? err : EIO);
  return Status();
}

namespace {

// Line and column (1-based) of byte |offset| in |text|.
std::pair<size_t, size_t> LineColumn(std::string_view text, size_t offset) {
  size_t line = 1, col = 1;
  offset = std::min(offset, text.size());
  for (size_t i = 0; i < offset; ++i) {
    if (text[i] == '\n') {
      ++line;
      col = 1;
    } else {
      ++col;
    }
  }
  return {line, col};
}

// nlohmann's what(): "[json.exception.parse_error.101] parse error at line 3, column 5: <detail>";
// the part after the bracketed id and the position, made one bounded line.
std::string CleanJsonWhat(const std::string& what) {
  std::string s = what;
  if (!s.empty() && s[0] == '[') {
    const size_t close = s.find("] ");
    if (close != std::string::npos) s = s.substr(close + 2);
  }
  if (s.rfind("parse error", 0) == 0) {
    const size_t colon = s.find(": ");
    if (colon != std::string::npos) s = s.substr(colon + 2);
  }
  return Escape(s, 200);
}

}  // namespace

Result<nlohmann::json> ParseJsonText(std::string_view text, const std::string& source,
                                     const JsonParseOptions& options) {
  // Nesting first: nlohmann's parser and dump() recurse once per level.
  {
    int depth = 0;
    bool in_string = false, escaped = false;
    for (size_t i = 0; i < text.size(); ++i) {
      const char c = text[i];
      if (in_string) {
        if (escaped) {
          escaped = false;
        } else if (c == '\\') {
          escaped = true;
        } else if (c == '"') {
          in_string = false;
        }
        continue;
      }
      if (c == '"') {
        in_string = true;
      } else if (c == '[' || c == '{') {
        if (++depth > kMaxNestingDepth) {
          auto [line, col] = LineColumn(text, i);
          return Status::InvalidArgument(
              fmt::format("{}:{}:{}: JSON nested deeper than {} levels; dsplan refuses it",
                          source, line, col, kMaxNestingDepth));
        }
      } else if (c == ']' || c == '}') {
        if (depth > 0) --depth;
      }
    }
  }
  nlohmann::json::parser_callback_t cb = nullptr;
  if (options.on_key || options.on_object_start || options.on_object_end) {
    cb = [&options](int depth, nlohmann::json::parse_event_t event, nlohmann::json& parsed) {
      switch (event) {
        case nlohmann::json::parse_event_t::object_start:
          if (options.on_object_start) options.on_object_start();
          break;
        case nlohmann::json::parse_event_t::object_end:
          if (options.on_object_end) options.on_object_end();
          break;
        case nlohmann::json::parse_event_t::key:
          if (options.on_key && parsed.is_string()) {
            options.on_key(depth, parsed.get_ref<const std::string&>());
          }
          break;
        default:
          break;
      }
      return true;
    };
  }
  try {
    return nlohmann::json::parse(text.begin(), text.end(), cb);
  } catch (const nlohmann::json::parse_error& e) {
    auto [line, col] = LineColumn(text, e.byte > 0 ? e.byte - 1 : 0);
    return Status::InvalidArgument(fmt::format("{}:{}:{}: malformed JSON: {}", source, line, col,
                                               CleanJsonWhat(e.what())));
  } catch (const nlohmann::json::out_of_range& e) {
    // 406: a number outside double range, e.g. 1e400.
    return Status::InvalidArgument(fmt::format("{}: {} (numbers must fit a 64-bit float)", source,
                                               CleanJsonWhat(e.what())));
  } catch (const nlohmann::json::exception& e) {
    return Status::InvalidArgument(
        fmt::format("{}: malformed JSON: {}", source, CleanJsonWhat(e.what())));
  } catch (const std::bad_alloc&) {
    return Status::InvalidArgument(fmt::format("{}: JSON too large to read", source));
  }
}

size_t EditDistance(std::string_view a, std::string_view b, bool ignore_case) {
  auto same = [ignore_case](char x, char y) {
    if (!ignore_case) return x == y;
    return std::tolower(static_cast<unsigned char>(x)) == std::tolower(static_cast<unsigned char>(y));
  };
  std::vector<size_t> prev(b.size() + 1), cur(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) prev[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    cur[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t sub = prev[j - 1] + (same(a[i - 1], b[j - 1]) ? 0 : 1);
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, sub});
    }
    std::swap(prev, cur);
  }
  return prev[b.size()];
}

double Median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

}  // namespace dsplan
