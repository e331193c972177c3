// server/sse.h — Server-Sent Events framing (one `data:` line per event, as the OpenAI and
// Anthropic streams use) and HTTP/1.1 chunked transfer framing of what goes on the wire.
#pragma once

#include <string>
#include <string_view>

namespace rill::server {

/// "data: <payload>\n\n"; a payload with newlines becomes several data: lines.
std::string sse_data(std::string_view payload);
/// "event: <name>\ndata: <payload>\n\n" (Anthropic's named events).
std::string sse_event(std::string_view name, std::string_view payload);
/// The OpenAI end-of-stream marker "data: [DONE]\n\n".
std::string sse_done();
/// One HTTP/1.1 chunk: "<hex size>\r\n<bytes>\r\n" ("" for empty input: an empty chunk ends a body).
std::string http_chunk(std::string_view bytes);
/// The last chunk: "0\r\n\r\n".
std::string http_last_chunk();

}  // namespace rill::server
