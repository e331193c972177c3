// server/anthropic.cpp — Anthropic Messages request parsing and response shapes.
#include "server/anthropic.h"

#include <fmt/format.h>

#include "core/error.h"
#include "server/api_error.h"
#include "server/sse.h"

namespace rill::server {
namespace {

std::string blocks_text(const ojson& content, const std::string& path) {
  if (content.is_string()) return content.get<std::string>();
  if (!content.is_array()) bad_request(path, "'{}' must be a string or an array of content blocks, got {}", path, type_name(content));
  std::string out;
  for (size_t i = 0; i < content.size(); ++i) {
    const std::string p = fmt::format("{}[{}]", path, i);
    const ojson& b = content[i];
    if (!b.is_object()) bad_request(p, "'{}' must be an object, got {}", p, type_name(b));
    std::string type = get_string(b, "type", p).value_or("");
    if (type != "text") bad_request(p + ".type", "content block type '{}' is not supported yet (only 'text')", type);
    std::optional<std::string> text = get_string(b, "text", p);
    if (!text) bad_request(p + ".text", "'{}.text' is required", p);
    out += *text;
  }
  return out;
}

}  // namespace

HttpReply anthropic_error(int status, const std::string& message) {
  std::string type = status == 503 ? "overloaded_error" : status >= 500 ? "api_error" : ApiError::default_type(status);
  return HttpReply{status, "application/json",
                   ojson{{"type", "error"}, {"error", {{"type", type}, {"message", message}}}}.dump()};
}

OpenAIRequest parse_messages_request(const ojson& body, const ModelInfo& model, bool count_only) {
  OpenAIRequest r;
  r.chat = true;
  std::optional<std::string> name = get_string(body, "model");
  if (!name) bad_request("model", "'model' is required");
  r.model = *name;
  if (r.model != model.id && r.model != "default")
    throw ApiError(404, "model", fmt::format("model: '{}' does not exist; this server serves '{}'", r.model, model.id));
  if (!model.tokenizer || !model.chat_template || model.chat_template->empty())
    throw ApiError(400, "", "the served model has no tokenizer or chat template");
  ojson msgs = ojson::array();
  if (const ojson* system = field(body, "system")) msgs.push_back({{"role", "system"}, {"content", blocks_text(*system, "system")}});
  const ojson* messages = field(body, "messages");
  if (!messages) bad_request("messages", "messages: field required");
  if (!messages->is_array() || messages->empty()) bad_request("messages", "messages: must be a non-empty array");
  for (size_t i = 0; i < messages->size(); ++i) {
    const std::string p = fmt::format("messages.{}", i);
    const ojson& m = (*messages)[i];
    if (!m.is_object()) bad_request(p, "{}: must be an object", p);
    std::optional<std::string> role = get_string(m, "role", p);
    if (role != "user" && role != "assistant")
      bad_request(p + ".role", "{}.role: must be 'user' or 'assistant', got '{}'", p, role.value_or(""));
    const ojson* content = field(m, "content");
    if (!content) bad_request(p + ".content", "{}.content: field required", p);
    msgs.push_back({{"role", *role}, {"content", blocks_text(*content, p + ".content")}});
  }
  if (field(body, "tools")) bad_request("tools", "tools: not supported yet on /v1/messages");
  if (count_only) {
    r.request.prompt = model.tokenizer->encode(model.chat_template->render(msgs, nullptr, true), text::EncodeOptions{false, true});
    return r;
  }
  std::optional<int64_t> max = get_int(body, "max_tokens", 1, INT32_MAX);
  if (!max) bad_request("max_tokens", "max_tokens: field required");
  SamplingParams& s = r.request.sampling;
  s.temperature = float(get_number(body, "temperature", 0, 1).value_or(1.0));
  s.top_p = float(get_number(body, "top_p", 0, 1).value_or(1.0));
  if (s.top_p <= 0) bad_request("top_p", "top_p: must be in (0, 1]");
  s.top_k = int32_t(get_int(body, "top_k", 0, 1 << 30).value_or(0));
  r.stream = get_bool(body, "stream").value_or(false);
  if (const ojson* stops = field(body, "stop_sequences")) {
    if (!stops->is_array()) bad_request("stop_sequences", "stop_sequences: must be an array of strings");
    for (const ojson& st : *stops) {
      if (!st.is_string()) bad_request("stop_sequences", "stop_sequences: must be an array of strings");
      r.stop.push_back(st.get<std::string>());
    }
  }
  std::string prompt;
  try {
    prompt = model.chat_template->render(msgs, nullptr, true);
  } catch (const Error& e) {
    bad_request("messages", "the chat template failed on these messages: {}", e.what());
  }
  r.request.prompt = model.tokenizer->encode(prompt, text::EncodeOptions{false, true});
  r.request.stop_token_ids = model.stop_ids;
  const int64_t len = int64_t(r.request.prompt.size());
  if (len + *max > model.max_model_len)
    bad_request("max_tokens", "prompt is too long: {} tokens + max_tokens {} > the context length {}", len, *max,
                model.max_model_len);
  r.request.max_tokens = int32_t(*max);
  return r;
}

AnthropicJob::AnthropicJob(Engine& engine, const text::Tokenizer& tokenizer, OpenAIRequest request, RequestHandle handle,
                           std::string id, ServerMetrics* metrics)
    : req_(std::move(request)),
      gen_(engine, tokenizer, std::move(handle), 1, req_.stop, false, metrics),
      id_(std::move(id)) {}

ojson AnthropicJob::message_shell() const {
  return ojson{{"id", id_}, {"type", "message"}, {"role", "assistant"}, {"model", req_.model}, {"content", ojson::array()},
               {"stop_reason", nullptr}, {"stop_sequence", nullptr}};
}

std::string AnthropicJob::stop_reason() const {
  if (!stop_sequence_.empty()) return "stop_sequence";
  return finish_ == "length" ? "max_tokens" : "end_turn";
}

bool AnthropicJob::poll(std::string& out) {
  const int32_t input = int32_t(req_.request.prompt.size());
  if (req_.stream && !started_) {
    started_ = true;
    ojson m = message_shell();
    m["usage"] = {{"input_tokens", input}, {"output_tokens", 0}};
    out += sse_event("message_start", ojson{{"type", "message_start"}, {"message", m}}.dump(-1, ' ', false, ojson::error_handler_t::replace));
    out += sse_event("content_block_start", ojson{{"type", "content_block_start"}, {"index", 0},
                                                  {"content_block", {{"type", "text"}, {"text", ""}}}}.dump(-1, ' ', false, ojson::error_handler_t::replace));
    out += sse_event("ping", R"({"type":"ping"})");
  }
  for (SequenceDelta& d : gen_.poll()) {
    if (d.finish_reason) finish_ = *d.finish_reason;
    if (!d.stop_sequence.empty()) stop_sequence_ = d.stop_sequence;
    text_ += d.text;
    if (req_.stream && !d.text.empty())
      out += sse_event("content_block_delta", ojson{{"type", "content_block_delta"}, {"index", 0},
                                                    {"delta", {{"type", "text_delta"}, {"text", d.text}}}}.dump(-1, ' ', false, ojson::error_handler_t::replace));
  }
  if (!gen_.done()) return false;
  const ojson usage = {{"input_tokens", input}, {"output_tokens", gen_.completion_tokens()},
                       {"cache_read_input_tokens", gen_.cached_tokens()}};
  if (!req_.stream) {
    if (!gen_.error().empty()) {
      status_ = 500;
      out = anthropic_error(500, gen_.error()).body;
      return true;
    }
    ojson m = message_shell();
    m["content"] = ojson::array({ojson{{"type", "text"}, {"text", text_}}});
    m["stop_reason"] = stop_reason();
    m["stop_sequence"] = stop_sequence_.empty() ? ojson(nullptr) : ojson(stop_sequence_);
    m["usage"] = usage;
    out = m.dump(-1, ' ', false, ojson::error_handler_t::replace);
    return true;
  }
  if (!gen_.error().empty()) {
    out += sse_event("error", ojson{{"type", "error"}, {"error", {{"type", "api_error"}, {"message", gen_.error()}}}}.dump(-1, ' ', false, ojson::error_handler_t::replace));
    return true;
  }
  out += sse_event("content_block_stop", R"({"type":"content_block_stop","index":0})");
  out += sse_event("message_delta",
                   ojson{{"type", "message_delta"},
                         {"delta", {{"stop_reason", stop_reason()},
                                    {"stop_sequence", stop_sequence_.empty() ? ojson(nullptr) : ojson(stop_sequence_)}}},
                         {"usage", {{"output_tokens", gen_.completion_tokens()}}}}.dump(-1, ' ', false, ojson::error_handler_t::replace));
  out += sse_event("message_stop", R"({"type":"message_stop"})");
  return true;
}

}  // namespace rill::server
