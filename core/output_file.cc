#include "core/output_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include <fmt/format.h>

namespace dsplan {
namespace fs = std::filesystem;

namespace {

std::string Errno() { return std::strerror(errno); }

// Writes all of |content| to |fd|; false with errno set on failure.
bool WriteAll(int fd, std::string_view content) {
  size_t done = 0;
  while (done < content.size()) {
    const ssize_t n = ::write(fd, content.data() + done, content.size() - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    done += static_cast<size_t>(n);
  }
  return true;
}

}  // namespace

bool SamePath(const std::string& a, const std::string& b) {
  if (a.empty() || b.empty()) return false;
  std::error_code ec;
  if (fs::exists(a, ec) && fs::exists(b, ec)) {
    const bool eq = fs::equivalent(a, b, ec);
    if (!ec) return eq;
  }
  const fs::path na = fs::weakly_canonical(fs::absolute(a, ec), ec);
  const fs::path nb = fs::weakly_canonical(fs::absolute(b, ec), ec);
  return na == nb;
}

Status CheckOutputPath(const std::string& path, const OutputPolicy& policy) {
  const std::string flag = policy.flag.empty() ? "output" : policy.flag;
  if (path.empty()) return Status::InvalidArgument(fmt::format("{}: empty file name", flag));
  std::error_code in_ec;
  for (const std::string& in : policy.inputs) {
    // Inputs were read, so they exist; a name that is no file (a catalog model name) is none.
    if (in.empty() || !fs::exists(in, in_ec)) continue;
    if (SamePath(path, in)) {
      return Status::InvalidArgument(fmt::format(
          "{} {}: that is an input of this command; dsplan never overwrites its inputs: "
          "choose another file name",
          flag, path));
    }
  }
  std::error_code ec;
  const fs::file_status st = fs::status(path, ec);
  if (fs::exists(st)) {
    if (fs::is_directory(st)) {
      return Status::InvalidArgument(
          fmt::format("{} {}: is a folder; give a file name", flag, path));
    }
    if (fs::is_regular_file(st) && !policy.force) {
      return Status::InvalidArgument(fmt::format(
          "{} {}: the file exists; pass --force to replace it, or choose another name", flag,
          path));
    }
    return Status();
  }
  const fs::path parent = fs::path(path).parent_path();
  if (!parent.empty() && !fs::is_directory(parent, ec)) {
    return Status::InvalidArgument(
        fmt::format("{} {}: the folder {} does not exist", flag, path, parent.string()));
  }
  return Status();
}

std::string FreeOutputPath(const std::string& path, const OutputPolicy& policy) {
  OutputPolicy p = policy;
  p.force = false;
  if (CheckOutputPath(path, p).ok()) return path;
  const fs::path fp(path);
  const std::string stem = fp.stem().string(), ext = fp.extension().string();
  for (int i = 1; i < 1000; ++i) {
    const fs::path cand = fp.parent_path() / fmt::format("{}-{}{}", stem, i, ext);
    if (CheckOutputPath(cand.string(), p).ok()) return cand.string();
  }
  return path;  // CheckOutputPath will refuse it
}

Status WriteOutputFile(const std::string& path, std::string_view content) {
  std::error_code ec;
  const fs::file_status st = fs::status(path, ec);
  const bool special = fs::exists(st) && !fs::is_regular_file(st);
  if (special) {
    // A device or pipe (/dev/stdout, /dev/null, a FIFO): write in place.
    const int fd = ::open(path.c_str(), O_WRONLY | O_CLOEXEC);
    if (fd < 0) return Status::IoError(fmt::format("cannot write {}: {}", path, Errno()));
    const bool ok = WriteAll(fd, content);
    const std::string why = ok ? "" : Errno();
    const bool closed = ::close(fd) == 0;
    if (!ok || !closed) {
      return Status::IoError(
          fmt::format("cannot write {}: {}", path, ok ? Errno() : why));
    }
    return Status();
  }
  const fs::path fp(path);
  const fs::path dir = fp.parent_path().empty() ? fs::path(".") : fp.parent_path();
  std::string tmpl = (dir / ("." + fp.filename().string() + ".tmp-XXXXXX")).string();
  const int fd = ::mkstemp(tmpl.data());
  if (fd < 0) return Status::IoError(fmt::format("cannot write {}: {}", path, Errno()));
  bool ok = WriteAll(fd, content);
  std::string why = ok ? "" : Errno();
  if (ok && ::fsync(fd) != 0 && errno != EINVAL && errno != EROFS) {
    ok = false;
    why = Errno();
  }
  // New files get the usual permissions (mkstemp makes them 0600).
  if (ok) {
    const mode_t mask = ::umask(0);
    ::umask(mask);
    ::fchmod(fd, 0666 & ~mask);
  }
  if (::close(fd) != 0 && ok) {
    ok = false;
    why = Errno();
  }
  if (ok && std::rename(tmpl.c_str(), path.c_str()) != 0) {
    ok = false;
    why = Errno();
  }
  if (!ok) {
    std::remove(tmpl.c_str());
    return Status::IoError(fmt::format("cannot write {}: {}", path, why));
  }
  return Status();
}

Status WriteOutputFile(const std::string& path, std::string_view content,
                       const OutputPolicy& policy) {
  DSPLAN_RETURN_IF_ERROR(CheckOutputPath(path, policy));
  return WriteOutputFile(path, content);
}

}  // namespace dsplan
