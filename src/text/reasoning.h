// text/reasoning.h — splits a thinking model's output (Qwen3, DeepSeek-R1 style) into
// reasoning and answer: text up to "</think>" is reasoning (an opening "<think>" is dropped), the
// rest is content. Streaming: a possible partial tag is held back.
#pragma once

#include <string>
#include <string_view>

namespace rill::text {

class ReasoningSplitter {
 public:
  struct Output {
    std::string reasoning, content;
  };
  Output push(std::string_view text);
  Output flush();

 private:
  std::string held_;
  bool answering_ = false;  // "</think>" seen
  bool at_start_ = true;    // an opening "<think>" may still come
  bool trim_ = false;       // newlines right after "</think>" are dropped
  std::string answer(std::string_view text);
};

}  // namespace rill::text
