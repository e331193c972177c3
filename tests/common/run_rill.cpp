// tests/common/run_rill.cpp — popen-based runner; stderr and stdin go through temp files.
#include "common/run_rill.h"

#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>

namespace rill::test {
namespace fs = std::filesystem;

ProcessResult run_rill(const std::string& args, const std::string& input) {
  static int counter = 0;
  const std::string stem = "rill-proc-" + std::to_string(::getpid()) + "-" + std::to_string(counter++);
  const fs::path err_file = fs::temp_directory_path() / (stem + ".err");
  const fs::path in_file = fs::temp_directory_path() / (stem + ".in");
  std::ofstream(in_file, std::ios::binary) << input;
  const std::string cmd = std::string(RILL_BINARY) + " " + args + " <" + in_file.string() + " 2>" + err_file.string();
  ProcessResult r;
  FILE* p = ::popen(cmd.c_str(), "r");
  if (!p) return r;
  std::array<char, 4096> buf;
  size_t n;
  while ((n = std::fread(buf.data(), 1, buf.size(), p)) > 0) r.out.append(buf.data(), n);
  int status = ::pclose(p);
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  std::ifstream in(err_file);
  r.err.assign(std::istreambuf_iterator<char>(in), {});
  fs::remove(err_file);
  fs::remove(in_file);
  return r;
}

}  // namespace rill::test
