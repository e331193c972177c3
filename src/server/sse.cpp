// server/sse.cpp — SSE and chunked framing.
#include "server/sse.h"

#include <fmt/format.h>

namespace rill::server {

std::string sse_data(std::string_view payload) {
  std::string out;
  size_t start = 0;
  while (true) {
    size_t nl = payload.find('\n', start);
    out += "data: ";
    out.append(payload.substr(start, nl == std::string_view::npos ? std::string_view::npos : nl - start));
    out += '\n';
    if (nl == std::string_view::npos) break;
    start = nl + 1;
  }
  out += '\n';
  return out;
}

std::string sse_event(std::string_view name, std::string_view payload) {
  return fmt::format("event: {}\n", name) + sse_data(payload);
}

std::string sse_done() { return "data: [DONE]\n\n"; }

std::string http_chunk(std::string_view bytes) {
  if (bytes.empty()) return "";
  return fmt::format("{:x}\r\n", bytes.size()).append(bytes).append("\r\n");
}

std::string http_last_chunk() { return "0\r\n\r\n"; }

}  // namespace rill::server
