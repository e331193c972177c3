// server/generation.cpp — TokenEvents to text deltas.
#include "server/generation.h"

#include <map>

#include "core/log.h"

namespace rill::server {

Generation::Generation(EngineApi& engine, const text::Tokenizer& tokenizer, RequestHandle handle, int32_t n,
                       std::vector<std::string> stops, bool logprobs, ServerMetrics* metrics)
    : engine_(engine), tokenizer_(tokenizer), handle_(std::move(handle)), logprobs_(logprobs), metrics_(metrics) {
  for (int32_t i = 0; i < n; ++i) seqs_.push_back(Seq{text::IncrementalDetokenizer(tokenizer_, true), StopMatcher(stops)});
}

Generation::~Generation() { cancel(); }

void Generation::cancel() {
  if (!engine_done_ && handle_) engine_.cancel(handle_);
  engine_done_ = true;
  done_ = true;
}

void Generation::set_thinking_budget(ThinkingBudget budget) {
  if (budget.budget > 0 && seqs_.size() == 1) budget_ = std::move(budget);
}

bool Generation::continue_past_budget(Seq& s, SequenceDelta& d) {
  ThinkingBudget b = std::move(*budget_);
  budget_.reset();
  logger().info("server: request {}: thinking budget of {} tokens reached; the thought is closed, the answer follows",
                handle_->id(), b.budget);
  engine_.cancel(handle_);
  continued_ = true;
  for (int32_t t : b.close) {  // the end tag as if generated: the reasoning splitter sees it
    ++s.tokens;
    d.text += s.stop.push(s.detok.push(t));
  }
  Request next = std::move(b.request);
  next.max_tokens -= int32_t(ids_.size() + b.close.size());
  next.prompt.insert(next.prompt.end(), ids_.begin(), ids_.end());
  next.prompt.insert(next.prompt.end(), b.close.begin(), b.close.end());
  std::string why;
  if (next.max_tokens > 0 && !s.stop.stopped()) {
    Submission sub;
    try {
      sub = engine_.submit(next);
    } catch (const std::exception& e) {
      sub.reject = RejectReason::invalid;
      sub.message = e.what();
    }
    if (sub.ok()) {
      handle_ = std::move(sub.handle);
      return true;
    }
    why = sub.message;
  }
  // No room left after the tag (or a stop string in it, or a refusal): the sequence ends here.
  d.text += s.stop.push(s.detok.flush());
  if (!s.stop.stopped()) d.text += s.stop.flush();
  s.finished = true;
  if (!why.empty()) error_ = "the answer after the thinking budget could not be queued: " + why;
  d.finish_reason = s.stop.stopped() || !why.empty() ? "stop" : "length";
  if (s.stop.stopped()) d.stop_sequence = s.stop.matched();
  engine_done_ = true;
  return false;
}

int32_t Generation::completion_tokens() const {
  int32_t total = 0;
  for (const Seq& s : seqs_) total += s.tokens;
  return total;
}

std::vector<SequenceDelta> Generation::poll() {
  std::map<int32_t, SequenceDelta> deltas;
  auto delta = [&](int32_t i) -> SequenceDelta& {
    SequenceDelta& d = deltas[i];
    d.sequence = i;
    return d;
  };
  while (!engine_done_) {
    std::optional<TokenEvent> e = handle_->try_next();
    if (!e) break;
    if (!continued_) {  // a continuation's prompt holds the first request's output: keep the first's counts
      prompt_tokens_ = e->prompt_tokens;
      cached_tokens_ = e->cached_tokens;
    }
    if (e->request_done) engine_done_ = true;
    if (!e->prompt_logprobs.empty()) prompt_logprobs_ = std::move(e->prompt_logprobs);
    if (e->token >= 0) first_token_seen_ = true;
    if (metrics_ && !ttft_seen_ && e->token >= 0 && e->sequence == 0) {
      ttft_seen_ = true;
      metrics_->observe_ttft(e->ttft_s);
    }
    if (metrics_ && e->token >= 0 && e->itl_s > 0) metrics_->observe_itl(e->itl_s);
    if (e->sequence < 0 || e->sequence >= int32_t(seqs_.size())) continue;
    Seq& s = seqs_[size_t(e->sequence)];
    if (s.finished) continue;
    SequenceDelta& d = delta(e->sequence);
    if (e->token >= 0) {
      ++s.tokens;
      if (logprobs_) d.logprobs.push_back(TokenLogprob{e->token, e->logprob, e->top_logprobs});
      const std::string text = s.stop.push(s.detok.push(e->token));
      d.text += text;
      if (s.stop.stopped()) {
        s.finished = true;
        d.finish_reason = "stop";
        d.stop_sequence = s.stop.matched();
        continue;
      }
      if (budget_) {
        ids_.push_back(e->token);
        thought_tail_ += text;
        if (thought_tail_.find(budget_->end_tag) != std::string::npos) {
          budget_.reset();  // the thinking ended within its budget
        } else {
          if (thought_tail_.size() > 2 * budget_->end_tag.size())
            thought_tail_.erase(0, thought_tail_.size() - budget_->end_tag.size());
          if (int32_t(ids_.size()) >= budget_->budget && e->finish == FinishReason::none) {
            if (!continue_past_budget(s, d)) break;
            continue;  // the old request's later events are not read
          }
        }
      }
    }
    if (e->finish != FinishReason::none) {
      if (e->finish == FinishReason::error) error_ = e->error.empty() ? "generation failed" : e->error;
      d.text += s.stop.push(s.detok.flush());
      if (!s.stop.stopped()) d.text += s.stop.flush();
      s.finished = true;
      d.finish_reason = s.stop.stopped() || e->finish != FinishReason::length ? "stop" : "length";
      if (s.stop.stopped()) d.stop_sequence = s.stop.matched();
    }
  }
  bool all = true;
  for (const Seq& s : seqs_) all = all && s.finished;
  if (all || engine_done_) {
    for (size_t i = 0; i < seqs_.size(); ++i)
      if (!seqs_[i].finished) {  // the engine ended without a per-sequence end (cancel, error)
        seqs_[i].finished = true;
        delta(int32_t(i)).finish_reason = "stop";
      }
    if (!engine_done_) engine_.cancel(handle_);  // every sequence hit a stop string
    engine_done_ = done_ = true;
  }
  std::vector<SequenceDelta> out;
  for (auto& [i, d] : deltas) out.push_back(std::move(d));
  return out;
}

}  // namespace rill::server
