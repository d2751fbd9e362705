// An Execution (runtime/executor.h) as bytes and back, so that the ranks of an MPI job can send
// rank 0 what they measured (Executor::Run under ExecuteOptions::comm). The bytes are JSON; every
// field round-trips exactly (doubles are written with 17 significant digits).
#ifndef DSPLAN_RUNTIME_EXECUTION_IO_H_
#define DSPLAN_RUNTIME_EXECUTION_IO_H_

#include <string>

#include "core/status.h"
#include "runtime/executor.h"

namespace dsplan {

std::string ExecutionToWire(const Execution& e);

/// Errors: bytes that ExecutionToWire did not write (InvalidArgument, with the parser's reason).
Result<Execution> ExecutionFromWire(const std::string& bytes);

}  // namespace dsplan

#endif  // DSPLAN_RUNTIME_EXECUTION_IO_H_
