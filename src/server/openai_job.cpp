// server/openai_job.cpp — OpenAI response and chunk shapes.
#include "server/openai_job.h"

#include <fmt/format.h>

#include "server/sse.h"

namespace rill::server {

OpenAIJob::OpenAIJob(EngineApi& engine, const text::Tokenizer& tokenizer, OpenAIRequest request,
                     std::vector<RequestHandle> handles, std::string id, int64_t created, ServerMetrics* metrics)
    : tokenizer_(tokenizer),
      req_(std::move(request)),
      id_(std::move(id)),
      created_(created),
      choices_(handles.size() * size_t(req_.request.sampling.n)) {
  for (RequestHandle& h : handles)
    gens_.push_back(std::make_unique<Generation>(engine, tokenizer, std::move(h), req_.request.sampling.n, req_.stop,
                                                 req_.logprobs, metrics));
  for (size_t i = 0; i < choices_.size(); ++i) {
    Choice& c = choices_[i];
    c.parser = text::ToolCallParser(req_.tool_format);
    if (!req_.forced_prefix.empty()) c.parser.push(req_.forced_prefix);  // held inside the parser: no output yet
    if (req_.echo) c.text = prompt_text(i / size_t(req_.request.sampling.n));
  }
}

bool OpenAIJob::all_done() const {
  for (const auto& g : gens_)
    if (!g->done()) return false;
  return true;
}

std::string OpenAIJob::first_error() const {
  for (const auto& g : gens_)
    if (!g->error().empty()) return g->error();
  return "";
}

ojson OpenAIJob::chunk_base() const {
  ojson j;
  j["id"] = id_;
  j["object"] = req_.chat ? "chat.completion.chunk" : "text_completion";
  j["created"] = created_;
  j["model"] = req_.model;
  j["system_fingerprint"] = nullptr;
  return j;
}

ojson OpenAIJob::usage() const {
  int32_t prompt = 0, completion = 0, cached = 0;
  for (const auto& g : gens_) {
    prompt += g->prompt_tokens();
    completion += req_.score_only ? 0 : g->completion_tokens();
    cached += g->cached_tokens();
  }
  ojson u;
  u["prompt_tokens"] = prompt;
  u["completion_tokens"] = completion;
  u["total_tokens"] = prompt + completion;
  u["prompt_tokens_details"] = {{"cached_tokens", cached}};
  return u;
}

static ojson token_bytes(const std::string& s) {
  ojson b = ojson::array();
  for (unsigned char c : s) b.push_back(int(c));
  return b;
}

ojson OpenAIJob::logprob_entries(const std::vector<TokenLogprob>& lps, size_t text_offset) const {
  if (req_.chat) {
    ojson content = ojson::array();
    for (const TokenLogprob& lp : lps) {
      const std::string tok = tokenizer_.decode(std::vector<int32_t>{lp.token});
      ojson e = {{"token", tok}, {"logprob", lp.logprob}, {"bytes", token_bytes(tok)}};
      ojson top = ojson::array();
      for (int32_t k = 0; k < req_.top_logprobs && size_t(k) < lp.top.size(); ++k) {
        const std::string t = tokenizer_.decode(std::vector<int32_t>{lp.top[size_t(k)].first});
        top.push_back({{"token", t}, {"logprob", lp.top[size_t(k)].second}, {"bytes", token_bytes(t)}});
      }
      e["top_logprobs"] = top;
      content.push_back(e);
    }
    return content;
  }
  ojson j = {{"tokens", ojson::array()}, {"token_logprobs", ojson::array()}, {"top_logprobs", ojson::array()},
             {"text_offset", ojson::array()}};
  for (const TokenLogprob& lp : lps) {
    const std::string tok = tokenizer_.decode(std::vector<int32_t>{lp.token});
    j["tokens"].push_back(tok);
    j["token_logprobs"].push_back(lp.logprob);
    ojson top = ojson::object();
    for (int32_t k = 0; k < req_.top_logprobs && size_t(k) < lp.top.size(); ++k)
      top[tokenizer_.decode(std::vector<int32_t>{lp.top[size_t(k)].first})] = lp.top[size_t(k)].second;
    j["top_logprobs"].push_back(top);
    j["text_offset"].push_back(text_offset);
    text_offset += tok.size();
  }
  return j;
}

ojson OpenAIJob::prompt_logprob_entries(size_t k) const {
  // The generated tokens' shape over the prompt, then null where a token has no score (the first: no context).
  const std::vector<int32_t>& prompt = this->prompt(k);
  const std::vector<PromptLogprob>& scores = gens_[k]->prompt_logprobs();
  std::vector<TokenLogprob> lps;
  for (size_t i = 0; i < prompt.size(); ++i)
    lps.push_back(i == 0 || i > scores.size() ? TokenLogprob{prompt[i], 0.f, {}}
                                              : TokenLogprob{prompt[i], scores[i - 1].logprob, scores[i - 1].top_logprobs});
  ojson j = logprob_entries(lps, 0);
  for (size_t i = 0; i < prompt.size(); ++i)
    if (i == 0 || i > scores.size()) j["token_logprobs"][i] = j["top_logprobs"][i] = nullptr;
  return j;
}

// Appends b's entries to a's (completions' parallel arrays).
static void append_entries(ojson& a, const ojson& b) {
  for (const char* key : {"tokens", "token_logprobs", "top_logprobs", "text_offset"})
    for (const ojson& v : b[key]) a[key].push_back(v);
}

bool OpenAIJob::poll(std::string& out) {
  std::vector<SequenceDelta> deltas;
  bool scored = true;  // every prompt's scores are in (echo with logprobs)
  for (size_t k = 0; k < gens_.size(); ++k) {
    for (SequenceDelta& d : gens_[k]->poll()) {
      d.sequence += int32_t(k) * req_.request.sampling.n;
      deltas.push_back(std::move(d));
    }
    scored = scored && gens_[k]->prompt_scored();
  }
  if (req_.score_only)  // max_tokens 0: the one drawn token is not part of the answer
    for (SequenceDelta& d : deltas) {
      d.text.clear();
      d.logprobs.clear();
      if (d.finish_reason) d.finish_reason = "length";
    }
  // With echo and logprobs the echoed prompt's chunk carries its tokens' logprobs, which come with the
  // first token.
  if (req_.stream && !started_ && (!echo_scores() || scored)) {
    started_ = true;
    for (size_t i = 0; i < choices_.size(); ++i) {
      ojson c = chunk_base();
      ojson choice = {{"index", i}};
      if (req_.chat) {
        choice["delta"] = {{"role", "assistant"}, {"content", ""}};
        choice["logprobs"] = nullptr;
      } else {
        const size_t k = i / size_t(req_.request.sampling.n);
        choice["text"] = req_.echo ? prompt_text(k) : "";
        choice["logprobs"] = echo_scores() ? prompt_logprob_entries(k) : ojson(nullptr);
      }
      choice["finish_reason"] = nullptr;
      c["choices"] = ojson::array({choice});
      if (req_.include_usage) c["usage"] = nullptr;
      if (req_.chat || req_.echo) out += sse_data(c.dump(-1, ' ', false, ojson::error_handler_t::replace));
    }
  }
  for (SequenceDelta& d : deltas) {
    Choice& ch = choices_[size_t(d.sequence)];
    std::vector<ojson> calls;
    std::string reasoning;
    if (req_.split_reasoning) {
      text::ReasoningSplitter::Output o = ch.splitter.push(d.text);
      if (d.finish_reason) {
        text::ReasoningSplitter::Output f = ch.splitter.flush();
        o.reasoning += f.reasoning;
        o.content += f.content;
      }
      reasoning = std::move(o.reasoning);
      ch.reasoning += reasoning;
      d.text = std::move(o.content);
    }
    if (req_.parse_tools) {
      text::ToolCallParser::Output o = ch.parser.push(d.text);
      if (d.finish_reason) {
        text::ToolCallParser::Output f = ch.parser.flush();
        o.content += f.content;
        if (*d.finish_reason == "stop" && ch.parser.calls_seen() > 0) d.finish_reason = "tool_calls";
      }
      d.text = std::move(o.content);
      for (const text::ToolCall& c : o.calls) {
        calls.push_back(tool_call_json(c, ch.tool_calls.size()));
        ch.tool_calls.push_back(calls.back());
      }
    }
    if (d.finish_reason) ch.finish_reason = *d.finish_reason;
    if (!req_.stream) {
      ch.text += d.text;
      ch.raw.insert(ch.raw.end(), d.logprobs.begin(), d.logprobs.end());
      continue;
    }
    if (!reasoning.empty()) {
      ojson c = chunk_base();
      c["choices"] = ojson::array({ojson{{"index", d.sequence}, {"delta", {{"reasoning_content", reasoning}}},
                                         {"logprobs", nullptr}, {"finish_reason", nullptr}}});
      if (req_.include_usage) c["usage"] = nullptr;
      out += sse_data(c.dump(-1, ' ', false, ojson::error_handler_t::replace));
    }
    for (const ojson& call : calls) {
      ojson c = chunk_base();
      c["choices"] = ojson::array({ojson{{"index", d.sequence}, {"delta", {{"tool_calls", ojson::array({call})}}},
                                         {"logprobs", nullptr}, {"finish_reason", nullptr}}});
      if (req_.include_usage) c["usage"] = nullptr;
      out += sse_data(c.dump(-1, ' ', false, ojson::error_handler_t::replace));
    }
    if (d.text.empty() && d.logprobs.empty() && !d.finish_reason) continue;
    ojson c = chunk_base();
    ojson choice = {{"index", d.sequence}};
    if (req_.chat)
      choice["delta"] = d.text.empty() && d.finish_reason ? ojson::object() : ojson{{"content", d.text}};
    else
      choice["text"] = d.text;
    choice["logprobs"] = nullptr;
    if (req_.logprobs && !d.logprobs.empty())
      choice["logprobs"] = req_.chat ? ojson{{"content", logprob_entries(d.logprobs, 0)}}
                                     : logprob_entries(d.logprobs, ch.text.size());
    ch.text += d.text;
    choice["finish_reason"] = d.finish_reason ? ojson(*d.finish_reason) : ojson(nullptr);
    c["choices"] = ojson::array({choice});
    if (req_.include_usage) c["usage"] = nullptr;
    out += sse_data(c.dump(-1, ' ', false, ojson::error_handler_t::replace));
  }
  if (!all_done()) return false;
  if (!req_.stream) {
    out = final_body();
    return true;
  }
  if (const std::string error = first_error(); !error.empty()) {
    out += sse_data(ojson{{"error", {{"message", error}, {"type", "server_error"}, {"param", nullptr}, {"code", nullptr}}}}.dump(-1, ' ', false, ojson::error_handler_t::replace));
  } else if (req_.include_usage) {
    ojson c = chunk_base();
    c["choices"] = ojson::array();
    c["usage"] = usage();
    out += sse_data(c.dump(-1, ' ', false, ojson::error_handler_t::replace));
  }
  out += sse_done();
  return true;
}

ojson OpenAIJob::tool_call_json(const text::ToolCall& call, size_t index) {
  return ojson{{"index", index},
               {"id", fmt::format("call_{}_{}", id_.substr(id_.find('-') + 1), index)},
               {"type", "function"},
               {"function", {{"name", call.name}, {"arguments", call.arguments}}}};
}

std::string OpenAIJob::final_body() {
  if (const std::string error = first_error(); !error.empty()) {
    status_ = 500;
    return ojson{{"error", {{"message", error}, {"type", "server_error"}, {"param", nullptr}, {"code", nullptr}}}}.dump(-1, ' ', false, ojson::error_handler_t::replace);
  }
  ojson j;
  j["id"] = id_;
  j["object"] = req_.chat ? "chat.completion" : "text_completion";
  j["created"] = created_;
  j["model"] = req_.model;
  j["system_fingerprint"] = nullptr;
  ojson choices = ojson::array();
  for (size_t i = 0; i < choices_.size(); ++i) {
    Choice& ch = choices_[i];
    ojson c = {{"index", i}};
    if (req_.chat) {
      c["message"] = {{"role", "assistant"}, {"content", ch.text}};
      if (req_.split_reasoning) c["message"]["reasoning_content"] = ch.reasoning;
      if (!ch.tool_calls.empty()) {
        if (ch.text.find_first_not_of(" \t\r\n") == std::string::npos) c["message"]["content"] = nullptr;
        c["message"]["tool_calls"] = ch.tool_calls;
      }
      c["logprobs"] = req_.logprobs ? ojson{{"content", logprob_entries(ch.raw, 0)}} : ojson(nullptr);
    } else {
      c["text"] = ch.text;
      const size_t k = i / size_t(req_.request.sampling.n);
      c["logprobs"] = req_.logprobs ? logprob_entries(ch.raw, req_.echo ? prompt_text(k).size() : 0) : ojson(nullptr);
      if (echo_scores()) {
        ojson all = prompt_logprob_entries(k);
        append_entries(all, c["logprobs"]);
        c["logprobs"] = std::move(all);
      }
    }
    c["finish_reason"] = ch.finish_reason.empty() ? "stop" : ch.finish_reason;
    choices.push_back(c);
  }
  j["choices"] = choices;
  j["usage"] = usage();
  return j.dump(-1, ' ', false, ojson::error_handler_t::replace);
}

}  // namespace rill::server
