// server/openai_request.cpp — OpenAI request bodies to engine requests.
#include "server/openai_request.h"

#include <fmt/format.h>

#include "core/error.h"
#include "server/api_error.h"

namespace rill::server {
namespace {

void check_model(const ojson& body, const ModelInfo& model, OpenAIRequest& r) {
  r.model = get_string(body, "model").value_or(model.id);
  if (r.model != model.id && r.model != "default")
    throw ApiError(404, "model", fmt::format("The model '{}' does not exist; this server serves '{}'", r.model, model.id),
                   "not_found_error");
}

std::vector<std::string> parse_stop(const ojson& body) {
  const ojson* v = field(body, "stop");
  if (!v) return {};
  if (v->is_string()) return {v->get<std::string>()};
  if (!v->is_array()) bad_request("stop", "'stop' must be a string or an array of strings, got {}", type_name(*v));
  std::vector<std::string> out;
  for (size_t i = 0; i < v->size(); ++i) {
    if (!(*v)[i].is_string()) bad_request("stop", "'stop[{}]' must be a string, got {}", i, type_name((*v)[i]));
    out.push_back((*v)[i].get<std::string>());
  }
  return out;
}

/// Sampling fields shared by both endpoints.
void parse_sampling(const ojson& body, const ModelInfo& model, OpenAIRequest& r) {
  SamplingParams& s = r.request.sampling;
  s.temperature = float(get_number(body, "temperature", 0, 2).value_or(1.0));
  s.top_p = float(get_number(body, "top_p", 0, 1).value_or(1.0));
  if (s.top_p <= 0) bad_request("top_p", "'top_p' must be in (0, 1], got {}", s.top_p);
  s.top_k = int32_t(get_int(body, "top_k", -1, 1 << 30).value_or(0));
  if (s.top_k < 0) s.top_k = 0;
  s.min_p = float(get_number(body, "min_p", 0, 1).value_or(0.0));
  s.presence_penalty = float(get_number(body, "presence_penalty", -2, 2).value_or(0.0));
  s.frequency_penalty = float(get_number(body, "frequency_penalty", -2, 2).value_or(0.0));
  s.repetition_penalty = float(get_number(body, "repetition_penalty", 1e-6, 1e6).value_or(1.0));
  if (auto seed = get_int(body, "seed", INT64_MIN, INT64_MAX)) s.seed = uint64_t(*seed);
  s.n = int32_t(get_int(body, "n", 1, model.max_n).value_or(1));
  if (const ojson* bias = field(body, "logit_bias")) {
    if (!bias->is_object()) bad_request("logit_bias", "'logit_bias' must be an object, got {}", type_name(*bias));
    for (auto it = bias->begin(); it != bias->end(); ++it) {
      const std::string name = "logit_bias." + it.key();
      int64_t id = -1;
      try {
        size_t used = 0;
        id = std::stoll(it.key(), &used);
        if (used != it.key().size()) id = -1;
      } catch (const std::exception&) {
        id = -1;
      }
      if (id < 0 || id >= model.vocab_size)
        bad_request(name, "'logit_bias' key '{}' is not a token id in [0, {})", it.key(), model.vocab_size);
      if (!it->is_number()) bad_request(name, "'{}' must be a number, got {}", name, type_name(*it));
      double b = it->get<double>();
      if (b < -100 || b > 100) bad_request(name, "'{}' must be in [-100, 100], got {}", name, b);
      s.logit_bias.emplace_back(int32_t(id), float(b));
    }
  }
  r.stream = get_bool(body, "stream").value_or(false);
  if (const ojson* so = field(body, "stream_options")) {
    if (!so->is_object()) bad_request("stream_options", "'stream_options' must be an object, got {}", type_name(*so));
    if (!r.stream) bad_request("stream_options", "'stream_options' is only allowed when 'stream' is true");
    r.include_usage = get_bool(*so, "include_usage", "stream_options").value_or(false);
  }
  r.stop = parse_stop(body);
  if (const ojson* rf = field(body, "response_format")) {
    std::string type = rf->is_object() ? get_string(*rf, "type", "response_format").value_or("text") : "";
    if (type != "text")
      bad_request("response_format", "'response_format' of type '{}' is not supported yet (only 'text')", type);
  }
  r.request.stop_token_ids = model.stop_ids;
  if (get_bool(body, "ignore_eos").value_or(false)) r.request.stop_token_ids.clear();
}

/// max_tokens after the prompt is known: default fills the context; too long is a 400.
void finish_lengths(const ojson& body, const ModelInfo& model, OpenAIRequest& r, const char* key) {
  const int64_t prompt = int64_t(r.request.prompt.size());
  if (prompt == 0) bad_request(r.chat ? "messages" : "prompt", "the prompt is empty");
  std::optional<int64_t> max = get_int(body, key, 1, INT32_MAX);
  if (!max && std::string(key) == "max_completion_tokens") max = get_int(body, "max_tokens", 1, INT32_MAX);
  if (prompt >= model.max_model_len)
    bad_request(r.chat ? "messages" : "prompt",
                "This model's maximum context length is {} tokens, but the prompt has {} tokens", model.max_model_len,
                prompt);
  if (max && prompt + *max > model.max_model_len)
    bad_request(key,
                "This model's maximum context length is {} tokens; the prompt has {} tokens and {} were requested "
                "for the completion",
                model.max_model_len, prompt, *max);
  r.request.max_tokens = int32_t(max.value_or(model.max_model_len - prompt));
}

std::string content_text(const ojson& content, const std::string& path) {
  if (content.is_null()) return "";
  if (content.is_string()) return content.get<std::string>();
  if (!content.is_array()) bad_request(path, "'{}' must be a string or an array of content parts, got {}", path, type_name(content));
  std::string out;
  for (size_t i = 0; i < content.size(); ++i) {
    const ojson& part = content[i];
    const std::string p = fmt::format("{}[{}]", path, i);
    if (!part.is_object()) bad_request(p, "'{}' must be an object, got {}", p, type_name(part));
    std::string type = get_string(part, "type", p).value_or("");
    if (type != "text" && type != "input_text" && type != "output_text")
      bad_request(p + ".type", "content part type '{}' is not supported (only 'text')", type);
    out += get_string(part, "text", p).value_or("");
  }
  return out;
}

/// tool_choice "auto", "none", "required" or {"type": "function", "function": {"name"}}. Forcing a
/// call ends the prompt with the call's opening, which the model continues.
void parse_tool_choice(const ojson& choice, const ojson& tools, const ModelInfo& model, OpenAIRequest& r) {
  std::string name;
  if (choice.is_object()) {
    const ojson* fn = field(choice, "function");
    if (get_string(choice, "type", "tool_choice") != "function" || !fn || !fn->is_object() ||
        !get_string(*fn, "name", "tool_choice.function"))
      bad_request("tool_choice", "'tool_choice' as an object must be {{\"type\": \"function\", \"function\": {{\"name\": ...}}}}");
    name = *get_string(*fn, "name", "tool_choice.function");
    bool known = false;
    for (const ojson& t : tools.is_array() ? tools : ojson::array())
      known = known || (t.is_object() && t.contains("function") && t["function"].is_object() && t["function"].value("name", "") == name);
    if (!known) bad_request("tool_choice", "'tool_choice' names function '{}', which is not in 'tools'", name);
  } else if (!choice.is_string() || (choice != "auto" && choice != "none" && choice != "required")) {
    bad_request("tool_choice", "'tool_choice' must be 'auto', 'none', 'required' or a function, got {}", choice.dump());
  }
  if (choice == "none") r.parse_tools = false;
  if (choice == "none" || choice == "auto") return;
  if (!tools.is_array() || tools.empty()) bad_request("tool_choice", "'tool_choice' {} needs 'tools'", choice.dump());
  if (model.tool_format == text::ToolFormat::none)
    bad_request("tool_choice", "'tool_choice' {} cannot be honoured: tool-call parsing is off (--tool-parser none)", choice.dump());
  r.forced_prefix = text::forced_call_opening(model.tool_format, name);
}

/// Chat tools as OpenAI defines them: {"type": "function", "function": {"name", "description"?, "parameters"?}}.
/// A nameless function would reach the chat template and the model as a tool it cannot call, so it is a 400
/// naming the field, as OpenAI's API answers; a missing "type" is taken as "function".
void check_function_tools(const ojson& tools) {
  for (size_t i = 0; i < tools.size(); ++i) {
    const ojson& t = tools[i];
    const std::string p = fmt::format("tools[{}]", i);
    if (!t.is_object()) bad_request(p, "'{}' must be an object, got {}", p, type_name(t));
    if (auto type = get_string(t, "type", p); type && *type != "function")
      bad_request(p + ".type", "'{}.type' '{}' is not supported (only 'function')", p, *type);
    const ojson* fn = field(t, "function");
    if (!fn) bad_request(p + ".function", "'{}.function' is required", p);
    if (!fn->is_object()) bad_request(p + ".function", "'{}.function' must be an object, got {}", p, type_name(*fn));
    const std::string fp = p + ".function";
    const std::optional<std::string> name = get_string(*fn, "name", fp);
    if (!name || name->empty()) bad_request(fp + ".name", "'{}.name' is required", fp);
    get_string(*fn, "description", fp);
    if (const ojson* params = field(*fn, "parameters"); params && !params->is_object())
      bad_request(fp + ".parameters", "'{}.parameters' must be a JSON Schema object, got {}", fp, type_name(*params));
  }
}

}  // namespace

std::string parse_session_id(const ojson& body) {
  const ojson* v = field(body, "session_id");
  if (!v) return "";
  if (!v->is_string()) bad_request("session_id", "'session_id' must be a string, got {}", type_name(*v));
  std::string id = v->get<std::string>();
  if (id.size() > 256) bad_request("session_id", "'session_id' must be at most 256 bytes, got {}", id.size());
  return id;
}

ojson normalize_messages(const ojson& messages) {
  if (!messages.is_array()) bad_request("messages", "'messages' must be an array, got {}", type_name(messages));
  if (messages.empty()) bad_request("messages", "'messages' must not be empty");
  ojson out = ojson::array();
  for (size_t i = 0; i < messages.size(); ++i) {
    const std::string p = fmt::format("messages[{}]", i);
    const ojson& m = messages[i];
    if (!m.is_object()) bad_request(p, "'{}' must be an object, got {}", p, type_name(m));
    std::optional<std::string> role = get_string(m, "role", p);
    if (!role) bad_request(p + ".role", "'{}.role' is required", p);
    if (*role != "system" && *role != "user" && *role != "assistant" && *role != "tool" && *role != "developer")
      bad_request(p + ".role", "'{}.role' must be one of system, developer, user, assistant, tool; got '{}'", p, *role);
    ojson msg = m;
    if (*role == "developer") msg["role"] = "system";
    auto it = m.find("content");
    msg["content"] = content_text(it == m.end() ? ojson() : *it, p + ".content");
    if (const ojson* calls = field(m, "tool_calls")) {  // templates expect arguments as objects
      const std::string cp = p + ".tool_calls";
      if (!calls->is_array()) bad_request(cp, "'{}' must be an array, got {}", cp, type_name(*calls));
      for (size_t k = 0; k < calls->size(); ++k) {
        const std::string kp = fmt::format("{}[{}]", cp, k);
        const ojson& c = (*calls)[k];
        if (!c.is_object()) bad_request(kp, "'{}' must be an object, got {}", kp, type_name(c));
        const ojson* fn = field(c, "function");
        if (!fn || !fn->is_object()) bad_request(kp + ".function", "'{}.function' must be an object with a 'name'", kp);
        if (!get_string(*fn, "name", kp + ".function")) bad_request(kp + ".function.name", "'{}.function.name' is required", kp);
      }
      ojson fixed = *calls;
      for (ojson& c : fixed)
        if (c.is_object() && c.contains("function") && c["function"].is_object() && c["function"].contains("arguments") &&
            c["function"]["arguments"].is_string()) {
          try {
            c["function"]["arguments"] = ojson::parse(c["function"]["arguments"].get<std::string>());
          } catch (const std::exception&) {
          }
        }
      msg["tool_calls"] = fixed;
    }
    out.push_back(std::move(msg));
  }
  return out;
}

OpenAIRequest parse_chat_request(const ojson& body, const ModelInfo& model) {
  OpenAIRequest r;
  r.chat = true;
  check_model(body, model, r);
  r.request.session_id = parse_session_id(body);
  if (!model.tokenizer) throw ApiError(400, "", "the served model has no tokenizer; chat needs one");
  if (!model.chat_template || model.chat_template->empty())
    throw ApiError(400, "messages", "the served model has no chat template; use /v1/completions");
  const ojson* messages = field(body, "messages");
  if (!messages) bad_request("messages", "'messages' is required");
  ojson msgs = normalize_messages(*messages);
  ojson tools = nullptr;
  if (const ojson* t = field(body, "tools")) {
    if (!t->is_array()) bad_request("tools", "'tools' must be an array, got {}", type_name(*t));
    check_function_tools(*t);
    tools = *t;
    r.parse_tools = model.tool_format != text::ToolFormat::none;
    r.tool_format = model.tool_format;
  }
  if (const ojson* choice = field(body, "tool_choice")) parse_tool_choice(*choice, tools, model, r);
  ojson kwargs = ojson::object();
  if (const ojson* k = field(body, "chat_template_kwargs")) {
    if (!k->is_object()) bad_request("chat_template_kwargs", "'chat_template_kwargs' must be an object, got {}", type_name(*k));
    kwargs = *k;
  }
  r.split_reasoning = model.reasoning && !(kwargs.contains("enable_thinking") && kwargs["enable_thinking"] == false) &&
                      r.forced_prefix.empty();
  parse_sampling(body, model, r);
  r.logprobs = get_bool(body, "logprobs").value_or(false);
  if (auto top = get_int(body, "top_logprobs", 0, 20)) {
    if (!r.logprobs && *top > 0) bad_request("top_logprobs", "'top_logprobs' requires 'logprobs' to be true");
    r.top_logprobs = int32_t(*top);
  }
  r.request.sampling.logprobs = r.logprobs;
  r.request.sampling.top_logprobs = r.top_logprobs;
  std::string prompt;
  try {
    prompt = model.chat_template->render(msgs, tools, true, kwargs) + r.forced_prefix;
  } catch (const Error& e) {
    bad_request("messages", "the chat template failed on these messages: {}", e.what());
  }
  r.request.prompt = model.tokenizer->encode(prompt, text::EncodeOptions{false, true});
  finish_lengths(body, model, r, "max_completion_tokens");
  return r;
}

// The prompts after the first against the context, as finish_lengths checked the first: max_tokens
// given must fit beside each; left out (OpenAI's default of 16), it is cut to fit the longest.
static void check_more_prompts(const ojson& body, const ModelInfo& model, OpenAIRequest& r) {
  for (size_t k = 0; k < r.more_prompts.size(); ++k) {
    const int64_t len = int64_t(r.more_prompts[k].size());
    if (len >= model.max_model_len)
      bad_request("prompt", "This model's maximum context length is {} tokens, but prompt[{}] has {} tokens",
                  model.max_model_len, k + 1, len);
    if (len + r.request.max_tokens > model.max_model_len) {
      if (field(body, "max_tokens"))
        bad_request("max_tokens",
                    "This model's maximum context length is {} tokens; prompt[{}] has {} tokens and {} were "
                    "requested for the completion",
                    model.max_model_len, k + 1, len, r.request.max_tokens);
      r.request.max_tokens = int32_t(model.max_model_len - len);
    }
  }
}

OpenAIRequest parse_completion_request(const ojson& body, const ModelInfo& model) {
  OpenAIRequest r;
  r.chat = false;
  check_model(body, model, r);
  r.request.session_id = parse_session_id(body);
  const ojson* p = field(body, "prompt");
  if (!p) bad_request("prompt", "'prompt' is required");
  // One prompt (a string or an array of token ids), or a list of them (strings or arrays of ids): each is
  // an engine request of its own, its choices numbered after the previous prompt's.
  std::vector<const ojson*> prompts;
  if (p->is_array() && !p->empty() && ((*p)[0].is_string() || (*p)[0].is_array())) {
    if (p->size() > size_t(kMaxPrompts))
      bad_request("prompt", "'prompt' holds {} prompts; at most {} a request", p->size(), kMaxPrompts);
    for (const ojson& one : *p) prompts.push_back(&one);
  } else {
    prompts.push_back(p);
  }
  for (size_t k = 0; k < prompts.size(); ++k) {
    const ojson& prompt = *prompts[k];
    const std::string where = p != &prompt ? fmt::format("prompt[{}]", k) : "prompt";
    std::vector<int32_t> ids;
    std::string text;
    if (prompt.is_string()) {
      if (!model.tokenizer) bad_request("prompt", "the served model has no tokenizer; give 'prompt' as token ids");
      text = prompt.get<std::string>();
      ids = model.tokenizer->encode(text);
    } else if (prompt.is_array()) {
      for (size_t i = 0; i < prompt.size(); ++i) {
        const ojson& t = prompt[i];
        if (!t.is_number_integer()) {
          if (p == &prompt && (t.is_string() || t.is_array()))
            bad_request("prompt", "'prompt' mixes prompts and token ids; give a list of prompts or one list of ids");
          bad_request("prompt", "'{}[{}]' must be a token id, got {}", where, i, type_name(t));
        }
        // An unsigned past INT64_MAX reads as a negative int64; either way the message quotes the id as written.
        const int64_t id = t.is_number_unsigned() && t.get<uint64_t>() > uint64_t(INT64_MAX) ? -1 : t.get<int64_t>();
        if (id < 0 || id >= model.vocab_size)
          bad_request("prompt", "'{}[{}]' = {} is not a token id in [0, {})", where, i, t.dump(), model.vocab_size);
        ids.push_back(int32_t(id));
      }
      if (model.tokenizer) text = model.tokenizer->decode(ids);
    } else {
      bad_request("prompt", "'{}' must be a string or an array of token ids, got {}", where, type_name(prompt));
    }
    if (ids.empty()) bad_request("prompt", "'{}' is empty", where);
    if (k == 0) {
      r.request.prompt = std::move(ids);
      r.prompt_text = std::move(text);
    } else {
      r.more_prompts.push_back(std::move(ids));
      r.more_prompt_texts.push_back(std::move(text));
    }
  }
  if (field(body, "suffix")) bad_request("suffix", "'suffix' is not supported");
  get_int(body, "best_of", 1, 1);  // only the default is supported
  parse_sampling(body, model, r);
  r.echo = get_bool(body, "echo").value_or(false);
  if (auto lp = get_int(body, "logprobs", 0, 20)) {
    r.logprobs = true;
    r.top_logprobs = int32_t(*lp);
  }
  // OpenAI's echo with logprobs returns the prompt tokens' logprobs too, with as many alternatives (how
  // evaluation harnesses score a text): the engine scores the prompt (SamplingParams::prompt_logprobs).
  if (r.echo && r.logprobs) r.request.sampling.prompt_logprobs = r.top_logprobs;
  r.request.sampling.logprobs = r.logprobs;
  r.request.sampling.top_logprobs = r.top_logprobs;
  // max_tokens 0 asks for no output: with echo, the legacy way to score a text (the prompt and its
  // logprobs alone). The engine always draws a token; the answer leaves it out.
  if (const ojson* m = field(body, "max_tokens"); m && m->is_number_integer() && m->get<int64_t>() == 0) {
    if (!r.echo)
      bad_request("max_tokens", "'max_tokens' 0 generates nothing; it is accepted only with 'echo' (to return the "
                                "prompt, scored when 'logprobs' is given)");
    r.score_only = true;
    ojson one = body;
    one["max_tokens"] = 1;
    finish_lengths(one, model, r, "max_tokens");
    check_more_prompts(one, model, r);
    return r;
  }
  finish_lengths(body, model, r, "max_tokens");
  if (!field(body, "max_tokens")) r.request.max_tokens = std::min(r.request.max_tokens, 16);  // OpenAI's default
  check_more_prompts(body, model, r);
  return r;
}

}  // namespace rill::server
