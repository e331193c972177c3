// tests/common/run_rill.h — runs the built `rill` binary for end-to-end tests.
#pragma once

#include <string>

namespace rill::test {

struct ProcessResult {
  int code = -1;    ///< exit code (128 + signal when killed)
  std::string out;  ///< stdout
  std::string err;  ///< stderr
};

/// Runs `rill <args>` through the shell with `input` on stdin.
ProcessResult run_rill(const std::string& args, const std::string& input = "");

}  // namespace rill::test
