// server/service.cpp — routing, API key, error bodies, and the small endpoints.
#include "server/service.h"

#include <algorithm>
#include <chrono>
#include <iterator>

#include "core/error.h"
#include "core/log.h"
#include "server/anthropic.h"
#include "server/api_error.h"
#include "server/openai_job.h"
#include "server/responses.h"

namespace rill::server {
namespace {

int64_t unix_now() {
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

HttpReply json_reply(const ojson& j, int status = 200) { return HttpReply{status, "application/json", j.dump()}; }

std::string path_of(const std::string& target) { return target.substr(0, target.find('?')); }

HandlerResult immediate(HttpReply reply) {
  HandlerResult r;
  r.reply = std::move(reply);
  return r;
}

}  // namespace

Service::Service(EngineApi& engine, std::optional<text::Tokenizer> tokenizer, text::ChatTemplate chat_template,
                 std::vector<int32_t> stop_ids, ServiceOptions options)
    : engine_(engine),
      tokenizer_(std::move(tokenizer)),
      chat_template_(std::move(chat_template)),
      options_(std::move(options)),
      created_(unix_now()) {
  info_.id = options_.model_id;
  info_.tokenizer = tokenizer_ ? &*tokenizer_ : nullptr;
  info_.chat_template = &chat_template_;
  info_.stop_ids = std::move(stop_ids);
  info_.max_model_len = engine_.max_model_len();
  info_.vocab_size = engine_.vocab_size();
  info_.reasoning = options_.reasoning;
  info_.tool_format = options_.tool_parser.empty() ? text::detect_tool_format(chat_template_.source())
                                                   : text::tool_format_from_name(options_.tool_parser, "tool_parser");
}

HttpReply Service::error_reply(int status, const std::string& message, const std::string& param,
                               const std::string& type) {
  ojson err = {{"message", message},
               {"type", type.empty() ? ApiError::default_type(status) : type},
               {"param", param.empty() ? ojson(nullptr) : ojson(param)},
               {"code", status == 401 ? ojson("invalid_api_key") : ojson(nullptr)}};
  return json_reply(ojson{{"error", err}}, status);
}

HttpReply Service::error_reply_for(const std::string& target, int status, const std::string& message) {
  return path_of(target).rfind("/v1/messages", 0) == 0 ? anthropic_error(status, message) : error_reply(status, message);
}

HandlerResult Service::handle(const HttpRequest& request) {
  HandlerResult result;
  const bool anthropic = path_of(request.target).rfind("/v1/messages", 0) == 0;
  auto error = [&](int status, const std::string& message, const std::string& param, const std::string& type) {
    return anthropic ? anthropic_error(status, message) : error_reply(status, message, param, type);
  };
  try {
    result = route(request);
  } catch (const ApiError& e) {
    result.reply = error(e.status(), e.what(), e.param(), e.type());
  } catch (const Error& e) {
    result.reply = error(400, e.what(), "", "");
  } catch (const std::exception& e) {
    logger().error("server: {} {}: {}", request.method, request.target, e.what());
    result.reply = error(500, std::string("internal error: ") + e.what(), "", "");
  }
  static const char* known[] = {"/health", "/metrics", "/v1/models", "/tokenize", "/detokenize", "/v1/chat/completions",
                                "/v1/completions", "/v1/responses", "/v1/messages", "/v1/messages/count_tokens"};
  const std::string path = path_of(request.target);
  const bool listed = std::find(std::begin(known), std::end(known), path) != std::end(known);
  metrics_.count_request(listed ? path : "other", result.job ? 200 : result.reply.status);
  return result;
}

HandlerResult Service::route(const HttpRequest& request) {
  const std::string path = path_of(request.target);
  const std::string& m = request.method;
  auto only = [&](const char* method) {
    if (m != method) throw ApiError(405, "", fmt::format("{} {}: method not allowed (use {})", m, path, method));
  };
  if (path == "/health") {
    only("GET");
    return immediate(draining_ ? json_reply(ojson{{"status", "draining"}}, 503) : json_reply(ojson{{"status", "ok"}}));
  }
  if (path == "/metrics") {
    only("GET");
    return immediate(HttpReply{200, "text/plain; version=0.0.4", metrics_.render(engine_.stats())});
  }
  if (!options_.api_key.empty()) {
    const std::string bearer = "Bearer " + options_.api_key;
    if (request.authorization != bearer && request.x_api_key != options_.api_key)
      throw ApiError(401, "", "Incorrect or missing API key (send 'Authorization: Bearer <key>' or 'x-api-key')");
  }
  static const char* generating[] = {"/v1/chat/completions", "/v1/completions", "/v1/responses", "/v1/messages"};
  if (draining_ && std::find(std::begin(generating), std::end(generating), path) != std::end(generating))
    throw ApiError(503, "", "the server is shutting down and takes no new requests; retry on another instance");
  if (path == "/v1/models") {
    only("GET");
    return immediate(models());
  }
  if (path == "/tokenize") {
    only("POST");
    return immediate(tokenize(request));
  }
  if (path == "/detokenize") {
    only("POST");
    return immediate(detokenize(request));
  }
  if (path == "/v1/chat/completions") {
    only("POST");
    return generate(request, true);
  }
  if (path == "/v1/completions") {
    only("POST");
    return generate(request, false);
  }
  if (path == "/v1/responses") {
    only("POST");
    const text::Tokenizer& tok = need_tokenizer("/v1/responses");
    OpenAIRequest req = parse_responses_request(parse_body(request.body), info_);
    Submission s = submit(req.request, "input");
    HandlerResult result;
    result.sse = req.stream;
    result.job = std::make_shared<ResponsesJob>(engine_, tok, std::move(req), s.handle,
                                                fmt::format("resp_{:x}{:08x}", created_, next_id_.fetch_add(1)),
                                                unix_now(), &metrics_);
    return result;
  }
  if (path == "/v1/messages") {
    only("POST");
    return messages(request);
  }
  if (path == "/v1/messages/count_tokens") {
    only("POST");
    ojson body = parse_body(request.body);
    OpenAIRequest req = parse_messages_request(body, info_, true);
    return immediate(json_reply(ojson{{"input_tokens", req.request.prompt.size()}}));
  }
  throw ApiError(404, "", fmt::format("no route for {} {}", m, path));
}

const text::Tokenizer& Service::need_tokenizer(const char* what) const {
  if (!tokenizer_) throw ApiError(400, "", fmt::format("{}: the served model has no tokenizer.json", what));
  return *tokenizer_;
}

HttpReply Service::models() const {
  ojson model = {{"id", info_.id}, {"object", "model"}, {"created", created_}, {"owned_by", "rill"},
                 {"max_model_len", info_.max_model_len}};
  return json_reply(ojson{{"object", "list"}, {"data", ojson::array({model})}});
}

HttpReply Service::tokenize(const HttpRequest& request) {
  const text::Tokenizer& tok = need_tokenizer("/tokenize");
  ojson body = parse_body(request.body);
  std::vector<int32_t> ids;
  const bool add_special = get_bool(body, "add_special_tokens").value_or(true);
  if (const ojson* messages = field(body, "messages")) {
    if (chat_template_.empty()) bad_request("messages", "the served model has no chat template");
    std::string prompt;
    try {
      prompt = chat_template_.render(normalize_messages(*messages), nullptr,
                                     get_bool(body, "add_generation_prompt").value_or(true));
    } catch (const Error& e) {
      bad_request("messages", "the chat template failed on these messages: {}", e.what());
    }
    ids = tok.encode(prompt, text::EncodeOptions{false, true});
  } else {
    std::optional<std::string> prompt = get_string(body, "prompt");
    if (!prompt) bad_request("prompt", "'prompt' (a string) or 'messages' is required");
    ids = tok.encode(*prompt, text::EncodeOptions{add_special, true});
  }
  return json_reply(ojson{{"tokens", ids}, {"count", ids.size()}, {"max_model_len", info_.max_model_len}});
}

HttpReply Service::detokenize(const HttpRequest& request) {
  const text::Tokenizer& tok = need_tokenizer("/detokenize");
  ojson body = parse_body(request.body);
  const ojson* tokens = field(body, "tokens");
  if (!tokens) bad_request("tokens", "'tokens' is required");
  if (!tokens->is_array()) bad_request("tokens", "'tokens' must be an array of token ids, got {}", type_name(*tokens));
  std::vector<int32_t> ids;
  for (size_t i = 0; i < tokens->size(); ++i) {
    const ojson& t = (*tokens)[i];
    if (!t.is_number_integer() || t.get<int64_t>() < 0 || t.get<int64_t>() >= info_.vocab_size)
      bad_request("tokens", "'tokens[{}]' must be a token id in [0, {}), got {}", i, info_.vocab_size, t.dump());
    ids.push_back(int32_t(t.get<int64_t>()));
  }
  return json_reply(ojson{{"prompt", tok.decode(ids)}});
}

Submission Service::submit(const Request& request, const char* prompt_field) {
  Submission s;
  try {
    s = engine_.submit(request);
  } catch (const Error& e) {
    bad_request("", "{}", e.what());
  }
  if (!s.ok()) {
    if (s.reject == RejectReason::queue_full) throw ApiError(429, "", s.message);
    bad_request(prompt_field, "{}", s.message);
  }
  return s;
}

HandlerResult Service::messages(const HttpRequest& request) {
  const text::Tokenizer& tok = need_tokenizer("/v1/messages");
  ojson body = parse_body(request.body);
  OpenAIRequest req = parse_messages_request(body, info_);
  Submission s = submit(req.request, "messages");
  HandlerResult result;
  result.sse = req.stream;
  result.job = std::make_shared<AnthropicJob>(engine_, tok, std::move(req), s.handle,
                                              fmt::format("msg_{:x}{:08x}", created_, next_id_.fetch_add(1)), &metrics_);
  return result;
}

HandlerResult Service::generate(const HttpRequest& request, bool chat) {
  const text::Tokenizer& tok = need_tokenizer(chat ? "/v1/chat/completions" : "/v1/completions");
  ojson body = parse_body(request.body);
  OpenAIRequest req = chat ? parse_chat_request(body, info_) : parse_completion_request(body, info_);
  // One engine request a prompt (a completions list of prompts); a refusal of any cancels those before it.
  std::vector<RequestHandle> handles{submit(req.request, chat ? "messages" : "prompt").handle};
  try {
    Request more = req.request;
    for (const std::vector<int32_t>& p : req.more_prompts) {
      more.prompt = p;
      handles.push_back(submit(more, "prompt").handle);
    }
  } catch (...) {
    for (const RequestHandle& h : handles) engine_.cancel(h);
    throw;
  }
  const uint64_t n = next_id_.fetch_add(1);
  std::string id = fmt::format("{}-{:x}{:08x}", chat ? "chatcmpl" : "cmpl", created_, n);
  HandlerResult result;
  result.sse = req.stream;
  result.job = std::make_shared<OpenAIJob>(engine_, tok, std::move(req), std::move(handles), std::move(id), unix_now(),
                                           &metrics_);
  return result;
}

}  // namespace rill::server
