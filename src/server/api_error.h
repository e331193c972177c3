// server/api_error.h — an API-level failure: HTTP status, error type and the request field it
// names. Handlers throw it; the service turns it into an OpenAI-style (or Anthropic-style) body.
#pragma once

#include <fmt/format.h>

#include <stdexcept>
#include <string>

namespace rill::server {

class ApiError : public std::runtime_error {
 public:
  ApiError(int status, std::string param, const std::string& message, std::string type = "")
      : std::runtime_error(message), status_(status), param_(std::move(param)), type_(std::move(type)) {
    if (type_.empty()) type_ = default_type(status);
  }
  int status() const { return status_; }
  const std::string& param() const { return param_; }  ///< "" when no single field is at fault
  const std::string& type() const { return type_; }
  static std::string default_type(int status) {
    switch (status) {
      case 401: return "authentication_error";
      case 404: return "not_found_error";
      case 413: return "request_too_large";
      case 429: return "rate_limit_error";
      case 503: return "service_unavailable";
      default: return status >= 500 ? "server_error" : "invalid_request_error";
    }
  }

 private:
  int status_;
  std::string param_, type_;
};

/// Throws a 400 ApiError naming `param`.
template <typename... Args>
[[noreturn]] void bad_request(const std::string& param, fmt::format_string<Args...> format, Args&&... args) {
  throw ApiError(400, param, fmt::format(format, std::forward<Args>(args)...));
}

}  // namespace rill::server
