// HttpServer's access log: each answered request is one line with the peer, method, target and status —
// at debug level for successes, info for refusals (4xx), warn for failures (5xx).
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <string>
#include <thread>

#include "common/log_capture.h"
#include "server/http_server.h"

namespace rill::server {
namespace {

// One HTTP/1.1 request on a fresh connection (Connection: close); returns the raw response.
std::string fetch(uint16_t port, const std::string& target) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(port);
  if (fd < 0 || ::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) return "";
  const std::string req = "GET " + target + " HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n";
  if (::send(fd, req.data(), req.size(), 0) != ssize_t(req.size())) return "";
  std::string out;
  char buf[4096];
  for (ssize_t n; (n = ::recv(fd, buf, sizeof(buf), 0)) > 0;) out.append(buf, size_t(n));
  ::close(fd);
  return out;
}

TEST(HttpServer, AccessLogLevelsByStatus) {
  std::string out;
  {
    test::LogCapture log(spdlog::level::info);  // successes (debug) must not show; refusals and failures must
    HttpOptions o;
    o.port = 0;
    HttpServer http(
        o,
        [](const HttpRequest& r) {
          HandlerResult h;
          h.reply.status = r.target == "/ok" ? 200 : r.target == "/broken" ? 503 : 404;
          h.reply.body = "{}";
          return h;
        },
        [](int status, const std::string& message, const std::string&) { return HttpReply{status, "text/plain", message}; });
    std::thread server([&] { http.run(1.0); });
    EXPECT_NE(fetch(http.port(), "/ok").find("200 OK"), std::string::npos);
    EXPECT_NE(fetch(http.port(), "/missing").find("404"), std::string::npos);
    EXPECT_NE(fetch(http.port(), "/broken").find("503"), std::string::npos);
    http.stop();
    server.join();
    out = log.text();
  }
  EXPECT_NE(out.find("GET /missing -> 404"), std::string::npos) << out;
  EXPECT_NE(out.find("GET /broken -> 503"), std::string::npos) << out;
  EXPECT_NE(out.find("127.0.0.1"), std::string::npos) << out;
  EXPECT_EQ(out.find("GET /ok"), std::string::npos) << "a success logged above debug level:\n" << out;
}

}  // namespace
}  // namespace rill::server
