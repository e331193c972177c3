// tests/server/sse_test.cpp — SSE event and HTTP chunk framing, checked against hand-written bytes.
#include <gtest/gtest.h>

#include "server/sse.h"

namespace rill::server {
namespace {

TEST(Sse, DataLine) {
  EXPECT_EQ(sse_data(R"({"a":1})"), "data: {\"a\":1}\n\n");
  EXPECT_EQ(sse_done(), "data: [DONE]\n\n");
}

TEST(Sse, MultilinePayloadBecomesSeveralDataLines) { EXPECT_EQ(sse_data("x\ny"), "data: x\ndata: y\n\n"); }

TEST(Sse, NamedEvent) {
  EXPECT_EQ(sse_event("message_stop", R"({"type":"message_stop"})"),
            "event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n");
}

TEST(Sse, HttpChunks) {
  EXPECT_EQ(http_chunk("hello world, sixteen+"), "15\r\nhello world, sixteen+\r\n");
  EXPECT_EQ(http_chunk(""), "");  // an empty chunk would end the body
  EXPECT_EQ(http_last_chunk(), "0\r\n\r\n");
}

}  // namespace
}  // namespace rill::server
