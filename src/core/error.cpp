// core/error.cpp — the abort path of RILL_CHECK.
#include "core/error.h"

#include <cstdio>
#include <cstdlib>

#include "core/log.h"

namespace rill::detail {

void check_failed(const char* file, int line, const char* expr, const std::string& message) {
  std::string text = fmt::format("{}:{}: check failed: {}", file, line, expr);
  if (!message.empty()) text += ": " + message;
  logger().critical("{}", text);
  logger().flush();
  std::fprintf(stderr, "%s\n", text.c_str());
  std::abort();
}

}  // namespace rill::detail
