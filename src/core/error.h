// core/error.h — the three error mechanisms of rill (STYLE.md):
// rill::Error for bad input/config/I-O (caught at the boundary), RILL_CHECK for broken
// invariants (logs file:line and aborts), RILL_DCHECK for debug-only checks.
#pragma once

#include <fmt/format.h>

#include <stdexcept>
#include <string>

namespace rill {

/// Bad input, configuration or I/O. The message names the file, field or parameter.
class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& message) : std::runtime_error(message) {}
};

/// Throws rill::Error with a fmt-formatted message.
template <typename... Args>
[[noreturn]] void fail(fmt::format_string<Args...> format, Args&&... args) {
  throw Error(fmt::format(format, std::forward<Args>(args)...));
}

namespace detail {
[[noreturn]] void check_failed(const char* file, int line, const char* expr, const std::string& message);
}  // namespace detail

}  // namespace rill

/// Invariant check: on failure logs "file:line: check failed: expr: message" and aborts.
#define RILL_CHECK(cond, ...)                                                              \
  do {                                                                                     \
    if (!(cond)) [[unlikely]]                                                              \
      ::rill::detail::check_failed(__FILE__, __LINE__, #cond, ::fmt::format("" __VA_ARGS__)); \
  } while (0)

#ifdef NDEBUG
#define RILL_DCHECK(cond, ...) \
  do {                         \
  } while (0)
#else
#define RILL_DCHECK(cond, ...) RILL_CHECK(cond, __VA_ARGS__)
#endif

/// Argument check for public entry points: throws rill::Error("[op] message").
#define RILL_ENSURE(cond, ...)                          \
  do {                                                  \
    if (!(cond)) [[unlikely]]                           \
      ::rill::fail(__VA_ARGS__);                        \
  } while (0)
