#include "core/status.h"

namespace dsplan {

const char* CodeName(Status::Code code) {
  switch (code) {
    case Status::Code::kOk: return "OK";
    case Status::Code::kInvalidArgument: return "invalid argument";
    case Status::Code::kNotFound: return "not found";
    case Status::Code::kUnsupported: return "unsupported";
    case Status::Code::kIoError: return "I/O error";
    case Status::Code::kCudaError: return "CUDA error";
    case Status::Code::kNcclError: return "NCCL error";
    case Status::Code::kInternal: return "internal error";
  }
  return "unknown";
}

std::string Status::ToString() const {
  if (ok()) return "OK";
  return std::string(CodeName(code_)) + ": " + message_;
}

Status Status::WithPrefix(const std::string& prefix) const {
  if (ok()) return *this;
  return Status(code_, prefix + ": " + message_);
}

}  // namespace dsplan
