// server/http_server.h — async HTTP/1.1 on Boost.Beast: an io_context run by a few threads, one
// strand per connection (no thread per connection), keep-alive, a body-size limit, and long
// responses (SSE streams, generation) produced by a polled StreamJob so that thousands of idle
// streaming clients cost no threads. A client that disconnects mid-job cancels the job.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace rill::server {

struct HttpRequest {
  std::string method, target, body;
  std::string authorization, x_api_key;
};

struct HttpReply {
  int status = 200;
  std::string content_type = "application/json";
  std::string body;
};

/// A response produced over time. poll() runs on the connection's strand, never concurrently.
class StreamJob {
 public:
  virtual ~StreamJob() = default;
  /// Appends whatever is ready to `out`; returns true when nothing more will come.
  virtual bool poll(std::string& out) = 0;
  /// The client went away: stop the work (the job is dropped afterwards).
  virtual void cancel() = 0;
  /// For non-SSE jobs: the status and content type of the single body (read after poll() → true).
  virtual int status() const { return 200; }
};

struct HandlerResult {
  HttpReply reply;                 ///< when job is null
  std::shared_ptr<StreamJob> job;  ///< a long response
  bool sse = false;                ///< job output is an event stream (sent chunk by chunk as it comes)
};

using Handler = std::function<HandlerResult(const HttpRequest&)>;
/// The reply for a request the server itself refuses (oversize body, bad HTTP, a handler that threw);
/// `target` is the request's target when known (the API it was for picks the error shape).
using ErrorReply = std::function<HttpReply(int status, const std::string& message, const std::string& target)>;

struct HttpOptions {
  std::string host = "127.0.0.1";
  uint16_t port = 8080;  ///< 0: any free port (see HttpServer::port())
  int threads = 2;
  size_t body_limit = 8 << 20;
};

class HttpServer {
 public:
  HttpServer(const HttpOptions& options, Handler handler, ErrorReply error_reply);
  ~HttpServer();
  uint16_t port() const;  ///< the bound port
  /// Serves until SIGINT/SIGTERM (or stop()): then lets running jobs finish for up to `grace_s`
  /// seconds, and returns. Without `on_drain` it stops accepting at the signal; with it, it calls
  /// on_drain() and keeps answering (the handler refuses new work, e.g. 503) until then.
  void run(double grace_s = 10.0, std::function<void()> on_drain = {});
  void stop();
  int active_jobs() const;

  struct State;

 private:
  std::shared_ptr<State> state_;
};

}  // namespace rill::server
