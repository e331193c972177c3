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
    if (type != "text") bad_request(p + ".type", "content block type '{}' is not supported here (only 'text')", type);
    std::optional<std::string> text = get_string(b, "text", p);
    if (!text) bad_request(p + ".text", "'{}.text' is required", p);
    out += *text;
  }
  return out;
}

std::string required_string(const ojson& b, const char* key, const std::string& path) {
  std::optional<std::string> v = get_string(b, key, path);
  if (!v) bad_request(join_path(path, key), "'{}' is required", join_path(path, key));
  return *v;
}

/// One Anthropic message as the template's OpenAI-style messages: text blocks joined; an
/// assistant's tool_use blocks become its tool_calls; a user's tool_result blocks become role
/// "tool" messages, in the order the blocks come.
void convert_message(const std::string& role, const ojson& content, const std::string& path, ojson& out) {
  if (!content.is_array()) {
    out.push_back({{"role", role}, {"content", blocks_text(content, path)}});
    return;
  }
  std::string text, reasoning;
  ojson calls = ojson::array();
  bool pushed = false;
  auto flush_text = [&] {
    if (text.empty()) return;
    out.push_back({{"role", role}, {"content", text}});
    text.clear();
    pushed = true;
  };
  for (size_t i = 0; i < content.size(); ++i) {
    const std::string p = fmt::format("{}[{}]", path, i);
    const ojson& b = content[i];
    if (!b.is_object()) bad_request(p, "'{}' must be an object, got {}", p, type_name(b));
    const std::string type = get_string(b, "type", p).value_or("");
    if (type == "text") {
      text += required_string(b, "text", p);
    } else if (type == "tool_use" && role == "assistant") {
      const ojson* input = field(b, "input");
      if (!input || !input->is_object()) bad_request(p + ".input", "'{}.input' must be an object", p);
      calls.push_back({{"id", required_string(b, "id", p)}, {"type", "function"},
                       {"function", {{"name", required_string(b, "name", p)}, {"arguments", *input}}}});
    } else if (type == "thinking" && role == "assistant") {
      // A reply's thinking sent back (multi-turn with thinking on): the template's reasoning_content, which
      // Qwen3-style templates render for the turns after the last user message and drop elsewhere.
      reasoning += required_string(b, "thinking", p);
    } else if (type == "redacted_thinking" && role == "assistant") {
      // Encrypted thinking of another server's model: nothing a template can show; dropped.
    } else if (type == "tool_result" && role == "user") {
      flush_text();
      const std::string id = required_string(b, "tool_use_id", p);
      const ojson* result = field(b, "content");
      out.push_back({{"role", "tool"}, {"tool_call_id", id}, {"content", result ? blocks_text(*result, p + ".content") : ""}});
      pushed = true;
    } else {
      bad_request(p + ".type", "{}.type: content block type '{}' is not supported in a{} {} message (text{})", p, type,
                  role == "assistant" ? "n" : "", role,
                  role == "assistant" ? ", tool_use, thinking, redacted_thinking" : ", tool_result");
    }
  }
  if (role == "assistant") {
    ojson m = {{"role", role}, {"content", text}};
    if (!reasoning.empty()) m["reasoning_content"] = reasoning;
    if (!calls.empty()) m["tool_calls"] = calls;
    out.push_back(std::move(m));
  } else if (!text.empty() || !pushed) {
    out.push_back({{"role", role}, {"content", text}});
  }
}

/// Anthropic tools ({name, description, input_schema}) as OpenAI-style function tools.
ojson convert_tools(const ojson& tools) {
  if (!tools.is_array()) bad_request("tools", "tools: must be an array, got {}", type_name(tools));
  ojson out = ojson::array();
  for (size_t i = 0; i < tools.size(); ++i) {
    const std::string p = fmt::format("tools.{}", i);
    const ojson& t = tools[i];
    if (!t.is_object()) bad_request(p, "{}: must be an object", p);
    const std::string type = get_string(t, "type", p).value_or("custom");
    if (type != "custom") bad_request(p + ".type", "{}.type: '{}' tools are not supported (only client tools)", p, type);
    ojson fn = {{"name", required_string(t, "name", p)}};
    if (std::optional<std::string> d = get_string(t, "description", p)) fn["description"] = *d;
    const ojson* schema = field(t, "input_schema");
    if (!schema || !schema->is_object()) bad_request(p + ".input_schema", "{}.input_schema: must be an object (a JSON schema)", p);
    fn["parameters"] = *schema;
    out.push_back({{"type", "function"}, {"function", fn}});
  }
  return out;
}

/// tool_choice {type: auto|any|tool|none, name}: sets parse_tools, and for any/tool the opening of
/// a call that the prompt ends with (the model continues it; no grammar is needed).
void apply_tool_choice(const ojson* choice, ojson& tools, const ModelInfo& model, OpenAIRequest& r) {
  std::string type = "auto", name;
  if (choice) {
    if (!choice->is_object()) bad_request("tool_choice", "tool_choice: must be an object, got {}", type_name(*choice));
    type = get_string(*choice, "type", "tool_choice").value_or("");
    if (type != "auto" && type != "any" && type != "tool" && type != "none")
      bad_request("tool_choice.type", "tool_choice.type: must be 'auto', 'any', 'tool' or 'none', got '{}'", type);
    if (type == "tool") {
      name = required_string(*choice, "name", "tool_choice");
      bool known = false;
      for (const ojson& t : tools) known = known || t["function"]["name"] == name;
      if (!known) bad_request("tool_choice.name", "tool_choice.name: '{}' is not one of the tools", name);
    }
    if (tools.empty() && type != "none" && type != "auto") bad_request("tool_choice", "tool_choice: '{}' needs tools", type);
  }
  if (type == "none") tools = ojson::array();  // the model is not told about them
  r.tool_format = model.tool_format;
  r.parse_tools = !tools.empty() && model.tool_format != text::ToolFormat::none;
  if (type != "any" && type != "tool") return;
  if (model.tool_format == text::ToolFormat::none)
    bad_request("tool_choice", "tool_choice: '{}' cannot be honoured: tool-call parsing is off (--tool-parser none)", type);
  r.forced_prefix = text::forced_call_opening(model.tool_format, name);
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
  r.request.session_id = parse_session_id(body);  // extension; metadata.user_id names a user, not a conversation
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
    convert_message(*role, *content, p + ".content", msgs);
  }
  ojson tools = ojson::array();
  if (const ojson* t = field(body, "tools")) tools = convert_tools(*t);
  apply_tool_choice(field(body, "tool_choice"), tools, model, r);
  // thinking {type: enabled, budget_tokens} | {type: disabled}: the chat template's enable_thinking (Qwen3-style
  // templates; others ignore it). Absent, the template's default holds, as on /v1/chat/completions. With a
  // reasoning parser on (--reasoning-parser), the thinking comes back as a thinking block and budget_tokens
  // caps it: after that many tokens without "</think>" the thinking is closed and the answer generated
  // (AnthropicJob). Without a parser the server cannot tell thinking from answer: max_tokens alone bounds both.
  ojson kwargs = ojson::object();
  if (const ojson* th = field(body, "thinking")) {
    if (!th->is_object()) bad_request("thinking", "thinking: must be an object, got {}", type_name(*th));
    const std::string type = get_string(*th, "type", "thinking").value_or("");
    if (type == "enabled") {
      const std::optional<int64_t> budget = get_int(*th, "budget_tokens", 1024, INT32_MAX, "thinking");
      if (!budget) bad_request("thinking.budget_tokens", "thinking.budget_tokens: field required");
      if (const std::optional<int64_t> max = get_int(body, "max_tokens", 1, INT32_MAX); max && *budget >= *max)
        bad_request("thinking.budget_tokens", "thinking.budget_tokens: must be less than max_tokens ({}), got {}", *max,
                    *budget);
      kwargs["enable_thinking"] = true;
      r.thinking_budget = int32_t(*budget);
    } else if (type == "disabled") {
      kwargs["enable_thinking"] = false;
    } else {
      bad_request("thinking.type", "thinking.type: must be 'enabled' or 'disabled', got '{}'", type);
    }
  }
  r.split_reasoning = model.reasoning && kwargs.value("enable_thinking", true) && r.forced_prefix.empty();
  std::string prompt;
  try {
    prompt = model.chat_template->render(msgs, tools.empty() ? ojson() : tools, true, kwargs) + r.forced_prefix;
  } catch (const Error& e) {
    bad_request("messages", "the chat template failed on these messages: {}", e.what());
  }
  r.request.prompt = model.tokenizer->encode(prompt, text::EncodeOptions{false, true});
  if (count_only) return r;
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
  r.request.stop_token_ids = model.stop_ids;
  const int64_t len = int64_t(r.request.prompt.size());
  if (len + *max > model.max_model_len)
    bad_request("max_tokens", "prompt is too long: {} tokens + max_tokens {} > the context length {}", len, *max,
                model.max_model_len);
  r.request.max_tokens = int32_t(*max);
  return r;
}

AnthropicJob::AnthropicJob(EngineApi& engine, const text::Tokenizer& tokenizer, OpenAIRequest request, RequestHandle handle,
                           std::string id, ServerMetrics* metrics)
    : req_(std::move(request)),
      gen_(engine, tokenizer, std::move(handle), 1, req_.stop, false, metrics),
      parser_(req_.tool_format),
      id_(std::move(id)) {
  if (!req_.forced_prefix.empty()) pending_ += parser_.push(req_.forced_prefix).content;
  // The thinking's end as Qwen3's template writes it after a thought ("</think>" is one special token there).
  if (req_.split_reasoning && req_.thinking_budget > 0)
    gen_.set_thinking_budget({req_.thinking_budget, "</think>",
                              tokenizer.encode("\n</think>\n\n", text::EncodeOptions{false, true}), req_.request});
}

ojson AnthropicJob::message_shell() const {
  return ojson{{"id", id_}, {"type", "message"}, {"role", "assistant"}, {"model", req_.model}, {"content", ojson::array()},
               {"stop_reason", nullptr}, {"stop_sequence", nullptr}};
}

std::string AnthropicJob::stop_reason() const {
  if (!stop_sequence_.empty()) return "stop_sequence";
  if (finish_ == "length") return "max_tokens";
  return parser_.calls_seen() > 0 ? "tool_use" : "end_turn";
}

namespace {
std::string dump(const ojson& j) { return j.dump(-1, ' ', false, ojson::error_handler_t::replace); }
}  // namespace

void AnthropicJob::open_block(ojson block, std::string& out) {
  blocks_.push_back(block);
  if (!req_.stream) return;
  if (block["type"] == "tool_use") block["input"] = ojson::object();  // the input follows as input_json_delta
  out += sse_event("content_block_start", dump(ojson{{"type", "content_block_start"}, {"index", blocks_.size() - 1},
                                                     {"content_block", block}}));
}

void AnthropicJob::close_block(std::string& out) {
  if (!text_open_ && !thinking_open_) return;
  text_open_ = thinking_open_ = false;
  if (req_.stream)
    out += sse_event("content_block_stop", dump(ojson{{"type", "content_block_stop"}, {"index", blocks_.size() - 1}}));
}

void AnthropicJob::add_thinking(const std::string& text, std::string& out) {
  if (text.empty()) return;
  if (!thinking_open_) {
    close_block(out);
    // No signature: this server's thinking is plain text a client may send back as it is.
    open_block(ojson{{"type", "thinking"}, {"thinking", ""}, {"signature", ""}}, out);
    thinking_open_ = true;
  }
  blocks_.back()["thinking"] = blocks_.back()["thinking"].get<std::string>() + text;
  if (req_.stream)
    out += sse_event("content_block_delta", dump(ojson{{"type", "content_block_delta"}, {"index", blocks_.size() - 1},
                                                       {"delta", {{"type", "thinking_delta"}, {"thinking", text}}}}));
}

void AnthropicJob::add_text(const std::string& text, std::string& out) {
  if (text.empty()) return;
  if (thinking_open_) close_block(out);
  if (!text_open_) {
    open_block(ojson{{"type", "text"}, {"text", ""}}, out);
    text_open_ = true;
  }
  blocks_.back()["text"] = blocks_.back()["text"].get<std::string>() + text;
  if (req_.stream)
    out += sse_event("content_block_delta", dump(ojson{{"type", "content_block_delta"}, {"index", blocks_.size() - 1},
                                                       {"delta", {{"type", "text_delta"}, {"text", text}}}}));
}

void AnthropicJob::add_tool_use(const text::ToolCall& call, std::string& out) {
  close_block(out);
  ojson input = ojson::object();
  try {
    ojson parsed = ojson::parse(call.arguments);
    if (parsed.is_object()) input = std::move(parsed);
  } catch (const std::exception&) {
  }
  // Ids are unique per server run: the message id's digits and the call's place in the message.
  const std::string id = fmt::format("toolu_{}{:02d}", id_.substr(id_.find('_') + 1), tool_uses_++);
  open_block(ojson{{"type", "tool_use"}, {"id", id}, {"name", call.name}, {"input", input}}, out);
  if (!req_.stream) return;
  out += sse_event("content_block_delta", dump(ojson{{"type", "content_block_delta"}, {"index", blocks_.size() - 1},
                                                     {"delta", {{"type", "input_json_delta"}, {"partial_json", input.dump()}}}}));
  out += sse_event("content_block_stop", dump(ojson{{"type", "content_block_stop"}, {"index", blocks_.size() - 1}}));
}

bool AnthropicJob::poll(std::string& out) {
  const int32_t input = int32_t(req_.request.prompt.size());
  if (req_.stream && !started_) {
    started_ = true;
    ojson m = message_shell();
    m["usage"] = {{"input_tokens", input}, {"output_tokens", 0}};
    out += sse_event("message_start", dump(ojson{{"type", "message_start"}, {"message", m}}));
    if (!req_.parse_tools && !req_.split_reasoning) {  // plain text: the one text block opens at once
      open_block(ojson{{"type", "text"}, {"text", ""}}, out);
      text_open_ = true;
    }
    out += sse_event("ping", R"({"type":"ping"})");
  }
  for (SequenceDelta& d : gen_.poll()) {
    if (d.finish_reason) finish_ = *d.finish_reason;
    if (!d.stop_sequence.empty()) stop_sequence_ = d.stop_sequence;
    if (req_.split_reasoning) {
      text::ReasoningSplitter::Output o = splitter_.push(d.text);
      if (d.finish_reason) {
        text::ReasoningSplitter::Output f = splitter_.flush();
        o.reasoning += f.reasoning;
        o.content += f.content;
      }
      add_thinking(o.reasoning, out);
      d.text = std::move(o.content);
    }
    if (!req_.parse_tools) {
      add_text(d.text, out);
      continue;
    }
    text::ToolCallParser::Output o = parser_.push(d.text);
    if (d.finish_reason) {
      text::ToolCallParser::Output f = parser_.flush();
      o.content += f.content;
      o.calls.insert(o.calls.end(), f.calls.begin(), f.calls.end());
    }
    // White space outside a text block is held until other text follows, so a reply that is only
    // calls has only tool_use blocks; a reply without calls keeps every byte.
    pending_ += o.content;
    if (text_open_ || pending_.find_first_not_of(" \t\r\n") != std::string::npos) {
      add_text(pending_, out);
      pending_.clear();
    }
    for (const text::ToolCall& call : o.calls) {
      pending_.clear();
      add_tool_use(call, out);
    }
  }
  if (!gen_.done()) return false;
  if (parser_.calls_seen() == 0) add_text(pending_, out);
  if (blocks_.empty()) {  // no output at all: one empty text block
    open_block(ojson{{"type", "text"}, {"text", ""}}, out);
    text_open_ = true;
  }
  const ojson usage = {{"input_tokens", input}, {"output_tokens", gen_.completion_tokens()},
                       {"cache_read_input_tokens", gen_.cached_tokens()}};
  if (!req_.stream) {
    if (!gen_.error().empty()) {
      status_ = 500;
      out = anthropic_error(500, gen_.error()).body;
      return true;
    }
    ojson m = message_shell();
    m["content"] = blocks_;
    m["stop_reason"] = stop_reason();
    m["stop_sequence"] = stop_sequence_.empty() ? ojson(nullptr) : ojson(stop_sequence_);
    m["usage"] = usage;
    out = dump(m);
    return true;
  }
  if (!gen_.error().empty()) {
    out += sse_event("error", dump(ojson{{"type", "error"}, {"error", {{"type", "api_error"}, {"message", gen_.error()}}}}));
    return true;
  }
  close_block(out);
  out += sse_event("message_delta",
                   dump(ojson{{"type", "message_delta"},
                              {"delta", {{"stop_reason", stop_reason()},
                                         {"stop_sequence", stop_sequence_.empty() ? ojson(nullptr) : ojson(stop_sequence_)}}},
                              {"usage", {{"output_tokens", gen_.completion_tokens()}}}}));
  out += sse_event("message_stop", R"({"type":"message_stop"})");
  return true;
}

}  // namespace rill::server
