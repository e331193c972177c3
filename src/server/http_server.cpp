// server/http_server.cpp — Beast sessions: read a request, call the handler, write the reply or
// pump a StreamJob (poll on a timer; write what it produced; watch the socket for a disconnect).
#include "server/http_server.h"

#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <fmt/format.h>

#include <chrono>
#include <csignal>
#include <optional>
#include <thread>

#include "core/error.h"
#include "core/log.h"
#include "server/sse.h"

namespace rill::server {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = net::ip::tcp;

struct HttpServer::State {
  HttpOptions options;
  Handler handler;
  ErrorReply error_reply;
  net::io_context ioc;
  tcp::acceptor acceptor{ioc};
  std::atomic<int> jobs{0};
  std::atomic<bool> stopping{false};
};

namespace {

class Session : public std::enable_shared_from_this<Session> {
 public:
  Session(tcp::socket socket, std::shared_ptr<HttpServer::State> state)
      : stream_(std::move(socket)), timer_(stream_.get_executor()), state_(std::move(state)) {}

  void start() {
    net::dispatch(stream_.get_executor(), [self = shared_from_this()] { self->read(); });
  }

 private:
  void read() {
    parser_.emplace();
    parser_->body_limit(state_->options.body_limit);
    parser_->header_limit(64 * 1024);
    stream_.expires_after(std::chrono::seconds(300));
    http::async_read(stream_, buffer_, *parser_, [self = shared_from_this()](beast::error_code ec, size_t) {
      self->on_read(ec);
    });
  }

  void on_read(beast::error_code ec) {
    method_.clear();
    target_.clear();
    started_ = std::chrono::steady_clock::now();
    if (ec == http::error::end_of_stream || ec == net::error::eof) return close();
    if (ec == http::error::body_limit) {
      keep_alive_ = false;
      method_ = std::string(parser_->get().method_string());
      target_ = std::string(parser_->get().target());
      return send(state_->error_reply(413, fmt::format("request body exceeds the limit of {} bytes", state_->options.body_limit),
                                      std::string(parser_->get().target())));
    }
    if (ec) {
      if (ec.category() == http::make_error_code(http::error::bad_target).category()) {
        keep_alive_ = false;
        return send(state_->error_reply(400, "malformed HTTP request: " + ec.message(), ""));
      }
      return close();
    }
    stream_.expires_never();
    http::request<http::string_body> req = parser_->release();
    keep_alive_ = req.keep_alive() && !state_->stopping.load();
    HttpRequest r;
    r.method = method_ = std::string(req.method_string());
    r.target = target_ = std::string(req.target());
    started_ = std::chrono::steady_clock::now();
    r.body = std::move(req.body());
    if (auto it = req.find(http::field::authorization); it != req.end()) r.authorization = std::string(it->value());
    if (auto it = req.find("x-api-key"); it != req.end()) r.x_api_key = std::string(it->value());
    HandlerResult result;
    try {
      result = state_->handler(r);
    } catch (const std::exception& e) {
      result.reply = state_->error_reply(500, std::string("internal error: ") + e.what(), r.target);
    }
    if (!result.job) return send(std::move(result.reply));
    job_ = std::move(result.job);
    sse_ = result.sse;
    state_->jobs.fetch_add(1);
    watch_disconnect();
    if (sse_) {
      out_ = "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\n"
             "Transfer-Encoding: chunked\r\n";
      out_ += keep_alive_ ? "Connection: keep-alive\r\n\r\n" : "Connection: close\r\n\r\n";
      write_out();
    } else {
      pump();
    }
  }

  /// A readable socket during a job means EOF (the client left) or a pipelined request.
  void watch_disconnect() {
    stream_.socket().async_wait(tcp::socket::wait_read, [self = shared_from_this(), job = job_](beast::error_code ec) {
      if (ec || self->job_ != job) return;
      char c;
      beast::error_code peek_ec;
      size_t n = self->stream_.socket().receive(net::buffer(&c, 1), tcp::socket::message_peek, peek_ec);
      if (peek_ec == net::error::would_block) return self->watch_disconnect();
      if (n == 0 || peek_ec) self->abandon();
    });
  }

  void abandon() {
    if (!job_) return;
    log_done(499);  // the client went away before the response ended (nginx's code for it)
    job_->cancel();
    end_job();
    keep_alive_ = false;
    beast::error_code ec;
    stream_.socket().shutdown(tcp::socket::shutdown_both, ec);
    stream_.socket().close(ec);
  }

  void end_job() {
    if (job_) state_->jobs.fetch_sub(1);
    job_.reset();
    timer_.cancel();
  }

  void pump() {
    if (!job_) return;
    std::string produced;
    bool finished = false;
    try {
      finished = job_->poll(produced);
    } catch (const std::exception& e) {
      logger().error("server: job failed: {}", e.what());
      finished = true;
      if (!sse_) {
        end_job();
        keep_alive_ = false;
        return send(state_->error_reply(500, std::string("internal error: ") + e.what(), target_));
      }
    }
    if (!sse_) {
      body_ += produced;
      if (!finished) return wait(produced.empty());
      HttpReply reply;
      reply.status = job_->status();
      reply.body = std::move(body_);
      body_.clear();
      end_job();
      return send(std::move(reply));
    }
    out_ = http_chunk(produced);
    if (finished) {
      log_done(200);
      out_ += http_last_chunk();
      end_job();
      last_ = true;
    }
    if (out_.empty()) return wait(true);
    write_out();
  }

  void wait(bool idle) {
    delay_us_ = idle ? std::min(delay_us_ * 2, 20000) : 500;
    timer_.expires_after(std::chrono::microseconds(delay_us_));
    timer_.async_wait([self = shared_from_this()](beast::error_code ec) {
      if (!ec) self->pump();
    });
  }

  void write_out() {
    net::async_write(stream_, net::buffer(out_), [self = shared_from_this()](beast::error_code ec, size_t) {
      if (ec) return self->abandon();
      if (self->last_) {
        self->last_ = false;
        return self->keep_alive_ ? self->read() : self->close();
      }
      self->delay_us_ = 500;
      self->pump();
    });
  }

  // The access log: every request at debug level, refusals (4xx) at info, failures (5xx) at warn.
  void log_done(int status) {
    const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - started_).count();
    const auto level = status >= 500 ? spdlog::level::warn : status >= 400 ? spdlog::level::info : spdlog::level::debug;
    if (!logger().should_log(level)) return;
    beast::error_code ec;
    const tcp::endpoint peer = stream_.socket().remote_endpoint(ec);
    logger().log(level, "server: {} {} {} -> {} in {:.1f} ms", ec ? std::string("?") : peer.address().to_string(),
                 method_.empty() ? "-" : method_, target_.empty() ? "-" : target_, status, ms);
  }

  void send(HttpReply reply) {
    log_done(reply.status);
    auto res = std::make_shared<http::response<http::string_body>>(http::status(reply.status), 11);
    res->set(http::field::server, "rill");
    res->set(http::field::content_type, reply.content_type);
    res->keep_alive(keep_alive_);
    res->body() = std::move(reply.body);
    res->prepare_payload();
    stream_.expires_after(std::chrono::seconds(60));
    http::async_write(stream_, *res, [self = shared_from_this(), res](beast::error_code ec, size_t) {
      if (ec) return self->close();
      if (self->keep_alive_) return self->read();
      self->close();
    });
  }

  void close() {
    end_job();
    beast::error_code ec;
    stream_.socket().shutdown(tcp::socket::shutdown_send, ec);
  }

  beast::tcp_stream stream_;
  net::steady_timer timer_;
  std::shared_ptr<HttpServer::State> state_;
  beast::flat_buffer buffer_;
  std::optional<http::request_parser<http::string_body>> parser_;
  std::shared_ptr<StreamJob> job_;
  bool sse_ = false, keep_alive_ = true, last_ = false;
  int delay_us_ = 500;
  std::string out_, body_;
  std::string target_, method_;  // of the request being answered
  std::chrono::steady_clock::time_point started_;
};

void accept(std::shared_ptr<HttpServer::State> state) {
  state->acceptor.async_accept(net::make_strand(state->ioc), [state](beast::error_code ec, tcp::socket socket) {
    if (ec) {
      if (ec == net::error::operation_aborted || !state->acceptor.is_open()) return;
      logger().warn("server: accept failed: {}", ec.message());
    } else {
      std::make_shared<Session>(std::move(socket), state)->start();
    }
    accept(state);
  });
}

}  // namespace

HttpServer::HttpServer(const HttpOptions& options, Handler handler, ErrorReply error_reply)
    : state_(std::make_shared<State>()) {
  state_->options = options;
  state_->handler = std::move(handler);
  state_->error_reply = std::move(error_reply);
  beast::error_code ec;
  auto address = net::ip::make_address(options.host, ec);
  if (ec) fail("--host: '{}' is not an IP address: {}", options.host, ec.message());
  tcp::endpoint endpoint(address, options.port);
  state_->acceptor.open(endpoint.protocol(), ec);
  if (!ec) state_->acceptor.set_option(net::socket_base::reuse_address(true), ec);
  if (!ec) state_->acceptor.bind(endpoint, ec);
  if (!ec) state_->acceptor.listen(net::socket_base::max_listen_connections, ec);
  if (ec) fail("cannot listen on {}:{}: {}", options.host, options.port, ec.message());
}

HttpServer::~HttpServer() { stop(); }

uint16_t HttpServer::port() const { return state_->acceptor.local_endpoint().port(); }
int HttpServer::active_jobs() const { return state_->jobs.load(); }

void HttpServer::stop() {
  net::post(state_->ioc, [s = state_] { s->ioc.stop(); });
}

void HttpServer::run(double grace_s, std::function<void()> on_drain) {
  auto state = state_;
  accept(state);
  std::optional<net::signal_set> signals(std::in_place, state->ioc, SIGINT, SIGTERM);
  bool signalled = false;
  net::steady_timer drain(state->ioc);
  std::chrono::steady_clock::time_point deadline;
  std::function<void()> check = [&] {
    if (state->jobs.load() == 0 || std::chrono::steady_clock::now() >= deadline) return state->ioc.stop();
    drain.expires_after(std::chrono::milliseconds(50));
    drain.async_wait([&](beast::error_code ec) {
      if (!ec) check();
    });
  };
  signals->async_wait([&](beast::error_code ec, int sig) {
    if (ec) return;
    signalled = true;
    logger().info("server: signal {}: taking no new work; finishing {} running request(s)", sig, state->jobs.load());
    state->stopping = true;
    if (on_drain) {
      on_drain();
    } else {
      beast::error_code ignored;
      state->acceptor.close(ignored);
    }
    deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(int64_t(grace_s * 1000));
    check();
  });
  std::vector<std::thread> threads;
  for (int i = 1; i < std::max(1, state->options.threads); ++i) threads.emplace_back([state] { state->ioc.run(); });
  state->ioc.run();
  state->ioc.stop();
  for (std::thread& t : threads) t.join();
  if (signalled) {
    // Shutting down on a signal: the signal set's end restores the default action, under which
    // a repeated SIGINT/SIGTERM during the rest of the orderly shutdown (engine stop, freeing the
    // model) would kill the process instead of letting it exit 0. Ignore them from here on.
    signals.reset();
    std::signal(SIGINT, SIG_IGN);
    std::signal(SIGTERM, SIG_IGN);
  }
}

}  // namespace rill::server
