// engine/request.cpp — RequestStream (the per-request channel) and collect().
#include "engine/request.h"

namespace rill {

const char* finish_reason_name(FinishReason r) {
  switch (r) {
    case FinishReason::none: return "none";
    case FinishReason::stop: return "stop";
    case FinishReason::length: return "length";
    case FinishReason::cancelled: return "cancelled";
    case FinishReason::error: return "error";
  }
  return "?";
}

void RequestStream::push(TokenEvent event) {
  {
    std::lock_guard lock(mutex_);
    closed_ = closed_ || event.request_done;
    events_.push_back(std::move(event));
  }
  ready_.notify_all();
}

std::optional<TokenEvent> RequestStream::pop_locked() {
  if (events_.empty()) return std::nullopt;
  TokenEvent e = std::move(events_.front());
  events_.pop_front();
  if (e.request_done) drained_ = true;
  return e;
}

std::optional<TokenEvent> RequestStream::next() {
  std::unique_lock lock(mutex_);
  ready_.wait(lock, [&] { return !events_.empty() || drained_; });
  return pop_locked();
}

std::optional<TokenEvent> RequestStream::try_next() {
  std::lock_guard lock(mutex_);
  return pop_locked();
}

std::optional<TokenEvent> RequestStream::next_for(std::chrono::milliseconds timeout) {
  std::unique_lock lock(mutex_);
  ready_.wait_for(lock, timeout, [&] { return !events_.empty() || drained_; });
  return pop_locked();
}

bool RequestStream::done() const {
  std::lock_guard lock(mutex_);
  return drained_;
}

RequestResult collect(RequestStream& stream) {
  RequestResult r;
  while (std::optional<TokenEvent> e = stream.next()) {
    const size_t s = size_t(e->sequence);
    if (r.tokens.size() <= s) {
      r.tokens.resize(s + 1);
      r.logprobs.resize(s + 1);
      r.top_logprobs.resize(s + 1);
      r.finish.resize(s + 1, FinishReason::none);
    }
    if (e->token >= 0) {
      r.tokens[s].push_back(e->token);
      r.logprobs[s].push_back(e->logprob);
      r.top_logprobs[s].push_back(std::move(e->top_logprobs));
    }
    if (!e->prompt_logprobs.empty()) r.prompt_logprobs = std::move(e->prompt_logprobs);
    if (e->finish != FinishReason::none) r.finish[s] = e->finish;
    if (!e->error.empty()) r.error = e->error;
    r.prompt_tokens = e->prompt_tokens;
    r.cached_tokens = e->cached_tokens;
    r.ttft_s = e->ttft_s;
    if (e->request_done) break;
  }
  return r;
}

}  // namespace rill
