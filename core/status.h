// Status and Result<T>: the one error type of dsplan's libraries.
//
// Library code never throws across its API and never exits; it returns a Status (or a Result<T>
// holding either a value or a non-OK Status). Only cli/ turns a Status into an exit code.
// Thread safety: Status and Result are plain values; const methods are safe across threads.
#ifndef DSPLAN_CORE_STATUS_H_
#define DSPLAN_CORE_STATUS_H_

#include <cassert>
#include <optional>
#include <string>
#include <utility>
#include <variant>

namespace dsplan {

class Status {
 public:
  enum class Code {
    kOk = 0,
    kInvalidArgument,  // the user's input is wrong: a value, a key, a flag
    kNotFound,         // a named thing (model, file, profile) does not exist
    kUnsupported,      // valid input that dsplan does not handle (say what it does handle)
    kIoError,          // reading or writing a file failed
    kCudaError,
    kNcclError,
    kInternal,         // a broken invariant inside dsplan
  };

  /// An OK status.
  Status() = default;

  static Status InvalidArgument(std::string msg) { return {Code::kInvalidArgument, std::move(msg)}; }
  static Status NotFound(std::string msg) { return {Code::kNotFound, std::move(msg)}; }
  static Status Unsupported(std::string msg) { return {Code::kUnsupported, std::move(msg)}; }
  static Status IoError(std::string msg) { return {Code::kIoError, std::move(msg)}; }
  static Status CudaError(std::string msg) { return {Code::kCudaError, std::move(msg)}; }
  static Status NcclError(std::string msg) { return {Code::kNcclError, std::move(msg)}; }
  static Status Internal(std::string msg) { return {Code::kInternal, std::move(msg)}; }

  bool ok() const { return code_ == Code::kOk; }
  Code code() const { return code_; }
  /// The message, without a code prefix; empty when ok().
  const std::string& message() const { return message_; }
  /// "invalid argument: <message>", or "OK".
  std::string ToString() const;

  /// Returns a copy whose message is "<prefix>: <message>" (for adding context such as a file).
  Status WithPrefix(const std::string& prefix) const;

  bool operator==(const Status&) const = default;

 private:
  Status(Code code, std::string msg) : code_(code), message_(std::move(msg)) {}
  Code code_ = Code::kOk;
  std::string message_;
};

const char* CodeName(Status::Code code);

/// Either a T or a non-OK Status. Construct from a T or from a non-OK Status.
template <typename T>
class Result {
 public:
  Result(T value) : v_(std::move(value)) {}  // NOLINT: implicit by design
  Result(Status status) : v_(std::move(status)) {  // NOLINT: implicit by design
    assert(!std::get<Status>(v_).ok() && "Result needs a value or a non-OK status");
  }

  bool ok() const { return std::holds_alternative<T>(v_); }
  /// The error; an OK Status when ok().
  Status status() const { return ok() ? Status() : std::get<Status>(v_); }

  /// REQUIRES: ok().
  const T& value() const& { return std::get<T>(v_); }
  T& value() & { return std::get<T>(v_); }
  T&& value() && { return std::get<T>(std::move(v_)); }
  const T& operator*() const& { return value(); }
  T& operator*() & { return value(); }
  const T* operator->() const { return &value(); }
  T* operator->() { return &value(); }

 private:
  std::variant<T, Status> v_;
};

}  // namespace dsplan

/// Returns early from a function returning Status or Result<T> when |expr| is not OK.
#define DSPLAN_RETURN_IF_ERROR(expr)             \
  do {                                           \
    ::dsplan::Status dsplan_status_ = (expr);    \
    if (!dsplan_status_.ok()) return dsplan_status_; \
  } while (0)

#define DSPLAN_CONCAT_INNER_(a, b) a##b
#define DSPLAN_CONCAT_(a, b) DSPLAN_CONCAT_INNER_(a, b)
/// `DSPLAN_ASSIGN_OR_RETURN(auto x, F());` declares x from F()'s value or returns its error.
#define DSPLAN_ASSIGN_OR_RETURN(lhs, rexpr)                                     \
  auto DSPLAN_CONCAT_(dsplan_result_, __LINE__) = (rexpr);                      \
  if (!DSPLAN_CONCAT_(dsplan_result_, __LINE__).ok())                           \
    return DSPLAN_CONCAT_(dsplan_result_, __LINE__).status();                   \
  lhs = std::move(DSPLAN_CONCAT_(dsplan_result_, __LINE__)).value()

#endif  // DSPLAN_CORE_STATUS_H_
