#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "cli/dsplan_main.h"
#include "core/status.h"
#include "tests/fuzz/fuzz_targets.h"

namespace dsplan::fuzz {

int CliArgs(const uint8_t* data, size_t size) {
  std::vector<std::string> args = {"dsplan"};
  std::string cur;
  for (size_t i = 0; i < size && args.size() < 64; ++i) {
    if (data[i] == 0) {
      args.push_back(cur);
      cur.clear();
    } else {
      cur += static_cast<char>(data[i]);
    }
  }
  if (!cur.empty() && args.size() < 64) args.push_back(cur);
  // --help and --version print pages; they are no parser path worth the time.
  for (const std::string& a : args) {
    if (a == "-h" || a == "--help" || a == "--help-all" || a == "--version") return 0;
  }
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  std::string error;
  DsplanMainOptions o;
  o.parse_only = true;
  o.parse_error = &error;
  const int rc = DsplanMain(static_cast<int>(args.size()), argv.data(), o);
  // docs/cli.md: 0 success, 2 bad input, 1 internal error; nothing else.
  if (rc != 0 && rc != 1 && rc != 2) {
    std::fprintf(stderr, "fuzz cli_args: exit code %d\n", rc);
    std::abort();
  }
  if (rc != 0) CheckMessage(Status::InvalidArgument(error), "cli_args");
  return 0;
}

}  // namespace dsplan::fuzz
