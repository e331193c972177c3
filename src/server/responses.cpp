// server/responses.cpp — Responses API translation and event stream.
#include "server/responses.h"

#include <fmt/format.h>

#include "server/api_error.h"
#include "server/sse.h"

namespace rill::server {
namespace {

std::string parts_text(const ojson& content, const std::string& path) {
  if (content.is_string()) return content.get<std::string>();
  if (!content.is_array()) bad_request(path, "'{}' must be a string or an array of content parts", path);
  std::string out;
  for (size_t i = 0; i < content.size(); ++i) {
    const ojson& p = content[i];
    const std::string where = fmt::format("{}[{}]", path, i);
    std::string type = p.is_object() ? get_string(p, "type", where).value_or("") : "";
    if (type != "input_text" && type != "output_text" && type != "text")
      bad_request(where + ".type", "content part type '{}' is not supported (only input_text/output_text)", type);
    out += get_string(p, "text", where).value_or("");
  }
  return out;
}

}  // namespace

OpenAIRequest parse_responses_request(const ojson& body, const ModelInfo& model) {
  // This server keeps no responses or conversations: a request that continues a stored one would otherwise be
  // answered without its context, silently. The client has to send the whole conversation in 'input' (store
  // false), so these are 400s that say so; 'store' itself is accepted and has no effect (nothing is stored).
  for (const char* key : {"previous_response_id", "conversation"})
    if (field(body, key))
      bad_request(key, "'{}' is not supported: this server stores no responses; send the whole conversation in 'input'",
                  key);
  ojson chat = ojson::object();
  if (const ojson* m = field(body, "model")) chat["model"] = *m;
  ojson messages = ojson::array();
  if (auto instructions = get_string(body, "instructions")) messages.push_back({{"role", "system"}, {"content", *instructions}});
  const ojson* input = field(body, "input");
  if (!input) bad_request("input", "'input' is required");
  if (input->is_string()) {
    messages.push_back({{"role", "user"}, {"content", input->get<std::string>()}});
  } else if (input->is_array()) {
    for (size_t i = 0; i < input->size(); ++i) {
      const ojson& item = (*input)[i];
      const std::string p = fmt::format("input[{}]", i);
      if (!item.is_object()) bad_request(p, "'{}' must be an object", p);
      std::string type = get_string(item, "type", p).value_or("message");
      if (type == "message") {
        std::optional<std::string> role = get_string(item, "role", p);
        if (!role) bad_request(p + ".role", "'{}.role' is required", p);
        const ojson* content = field(item, "content");
        messages.push_back({{"role", *role}, {"content", content ? parts_text(*content, p + ".content") : ""}});
      } else if (type == "function_call") {
        ojson call = {{"id", get_string(item, "call_id", p).value_or("")},
                      {"type", "function"},
                      {"function", {{"name", get_string(item, "name", p).value_or("")},
                                    {"arguments", get_string(item, "arguments", p).value_or("{}")}}}};
        if (!messages.empty() && messages.back()["role"] == "assistant" && messages.back().contains("tool_calls"))
          messages.back()["tool_calls"].push_back(call);
        else
          messages.push_back({{"role", "assistant"}, {"content", ""}, {"tool_calls", ojson::array({call})}});
      } else if (type == "function_call_output") {
        messages.push_back({{"role", "tool"},
                            {"tool_call_id", get_string(item, "call_id", p).value_or("")},
                            {"content", get_string(item, "output", p).value_or("")}});
      } else {
        bad_request(p + ".type", "input item type '{}' is not supported", type);
      }
    }
  } else {
    bad_request("input", "'input' must be a string or an array of items, got {}", type_name(*input));
  }
  chat["messages"] = messages;
  if (const ojson* tools = field(body, "tools")) {
    if (!tools->is_array()) bad_request("tools", "'tools' must be an array");
    ojson converted = ojson::array();
    for (size_t i = 0; i < tools->size(); ++i) {
      const ojson& t = (*tools)[i];
      const std::string p = fmt::format("tools[{}]", i);
      if (!t.is_object() || get_string(t, "type", p) != "function")
        bad_request(p + ".type", "only function tools are supported");
      const std::optional<std::string> name = get_string(t, "name", p);
      if (!name || name->empty()) bad_request(p + ".name", "'{}.name' is required", p);
      ojson fn = {{"name", *name}};
      if (auto d = get_string(t, "description", p)) fn["description"] = *d;
      if (const ojson* params = field(t, "parameters")) fn["parameters"] = *params;
      converted.push_back({{"type", "function"}, {"function", fn}});
    }
    chat["tools"] = converted;
  }
  for (const char* key : {"temperature", "top_p", "stream", "tool_choice", "session_id"})
    if (const ojson* v = field(body, key)) chat[key] = *v;
  if (const ojson* v = field(body, "max_output_tokens")) chat["max_completion_tokens"] = *v;
  if (field(body, "text")) {
    const ojson& t = body["text"];
    if (t.is_object() && t.contains("format") && t["format"].is_object() && t["format"].value("type", "text") != "text")
      bad_request("text.format", "'text.format' other than 'text' is not supported yet");
  }
  try {
    return parse_chat_request(chat, model);
  } catch (const ApiError& e) {
    std::string param = e.param() == "max_completion_tokens" ? "max_output_tokens"
                        : e.param().rfind("messages", 0) == 0 ? "input" : e.param();
    throw ApiError(e.status(), param, e.what(), e.type());
  }
}

ResponsesJob::ResponsesJob(EngineApi& engine, const text::Tokenizer& tokenizer, OpenAIRequest request, RequestHandle handle,
                           std::string id, int64_t created, ServerMetrics* metrics)
    : req_(std::move(request)),
      gen_(engine, tokenizer, std::move(handle), 1, req_.stop, false, metrics),
      parser_(req_.tool_format),
      id_(std::move(id)),
      created_(created) {
  if (!req_.forced_prefix.empty()) parser_.push(req_.forced_prefix);  // held inside the parser: no output yet
}

ojson ResponsesJob::message_item(const std::string& status) const {
  ojson content = ojson::array();
  if (status == "completed")
    content.push_back({{"type", "output_text"}, {"text", text_}, {"annotations", ojson::array()}});
  return {{"type", "message"}, {"id", "msg_" + id_.substr(5)}, {"status", status}, {"role", "assistant"}, {"content", content}};
}

ojson ResponsesJob::response(const std::string& status) const {
  ojson r = {{"id", id_}, {"object", "response"}, {"created_at", created_}, {"status", status},
             {"model", req_.model}, {"output", ojson::array()}, {"error", nullptr}, {"incomplete_details", nullptr},
             {"parallel_tool_calls", true}, {"tool_choice", "auto"}, {"tools", ojson::array()}};
  if (status == "completed" || status == "incomplete") {
    if (!text_.empty() || calls_.empty()) r["output"].push_back(message_item("completed"));
    for (const ojson& c : calls_) r["output"].push_back(c);
    if (finish_ == "length") r["incomplete_details"] = {{"reason", "max_output_tokens"}};
    const int32_t in = gen_.prompt_tokens(), outp = gen_.completion_tokens();
    r["usage"] = {{"input_tokens", in}, {"input_tokens_details", {{"cached_tokens", gen_.cached_tokens()}}},
                  {"output_tokens", outp}, {"output_tokens_details", {{"reasoning_tokens", 0}}},
                  {"total_tokens", in + outp}};
  } else {
    r["usage"] = nullptr;
  }
  return r;
}

std::string ResponsesJob::event(const char* type, ojson payload) {
  ojson e = {{"type", type}, {"sequence_number", sequence_++}};
  for (auto it = payload.begin(); it != payload.end(); ++it) e[it.key()] = it.value();
  return sse_event(type, e.dump(-1, ' ', false, ojson::error_handler_t::replace));
}

bool ResponsesJob::poll(std::string& out) {
  if (req_.stream && !started_) {
    started_ = true;
    out += event("response.created", {{"response", response("in_progress")}});
    out += event("response.in_progress", {{"response", response("in_progress")}});
    out += event("response.output_item.added", {{"output_index", 0}, {"item", message_item("in_progress")}});
    out += event("response.content_part.added",
                 {{"output_index", 0}, {"item_id", "msg_" + id_.substr(5)}, {"content_index", 0},
                  {"part", {{"type", "output_text"}, {"text", ""}, {"annotations", ojson::array()}}}});
  }
  for (SequenceDelta& d : gen_.poll()) {
    text::ToolCallParser::Output o = req_.parse_tools ? parser_.push(d.text) : text::ToolCallParser::Output{d.text, {}};
    if (d.finish_reason) {
      finish_ = *d.finish_reason;
      if (req_.parse_tools) o.content += parser_.flush().content;
    }
    for (const text::ToolCall& c : o.calls)
      calls_.push_back({{"type", "function_call"}, {"id", fmt::format("fc_{}_{}", id_.substr(5), calls_.size())},
                        {"call_id", fmt::format("call_{}_{}", id_.substr(5), calls_.size())}, {"name", c.name},
                        {"arguments", c.arguments}, {"status", "completed"}});
    text_ += o.content;
    if (req_.stream && !o.content.empty())
      out += event("response.output_text.delta", {{"output_index", 0}, {"item_id", "msg_" + id_.substr(5)},
                                                   {"content_index", 0}, {"delta", o.content}});
  }
  if (!gen_.done()) return false;
  const std::string status = finish_ == "length" ? "incomplete" : "completed";
  if (!req_.stream) {
    if (!gen_.error().empty()) {
      status_ = 500;
      out = ojson{{"error", {{"message", gen_.error()}, {"type", "server_error"}, {"param", nullptr}, {"code", nullptr}}}}.dump(-1, ' ', false, ojson::error_handler_t::replace);
    } else {
      out = response(status).dump(-1, ' ', false, ojson::error_handler_t::replace);
    }
    return true;
  }
  if (!gen_.error().empty()) {
    out += event("error", {{"code", "server_error"}, {"message", gen_.error()}, {"param", nullptr}});
    return true;
  }
  const std::string item_id = "msg_" + id_.substr(5);
  out += event("response.output_text.done", {{"output_index", 0}, {"item_id", item_id}, {"content_index", 0}, {"text", text_}});
  out += event("response.content_part.done",
               {{"output_index", 0}, {"item_id", item_id}, {"content_index", 0},
                {"part", {{"type", "output_text"}, {"text", text_}, {"annotations", ojson::array()}}}});
  out += event("response.output_item.done", {{"output_index", 0}, {"item", message_item("completed")}});
  for (size_t i = 0; i < calls_.size(); ++i) {
    out += event("response.output_item.added", {{"output_index", i + 1}, {"item", calls_[i]}});
    out += event("response.output_item.done", {{"output_index", i + 1}, {"item", calls_[i]}});
  }
  ojson final = response(status);
  if (text_.empty() && !calls_.empty()) final["output"].insert(final["output"].begin(), message_item("completed"));
  out += event(status == "completed" ? "response.completed" : "response.incomplete", {{"response", final}});
  return true;
}

}  // namespace rill::server
