// text/chat_template.h — a model's chat template (tokenizer_config.json `chat_template`, or
// chat_template.jinja) rendered as transformers' apply_chat_template(tokenize=False) does:
// same Jinja environment, same variables (messages, tools, add_generation_prompt, special
// tokens, kwargs, raise_exception, strftime_now). Not responsible for tokenizing the result.
#pragma once

#include <nlohmann/json.hpp>

#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace rill::text {

namespace jinja {
class Template;
}

class ChatTemplate {
 public:
  ChatTemplate();
  ~ChatTemplate();
  ChatTemplate(const ChatTemplate&);
  ChatTemplate& operator=(const ChatTemplate&);
  ChatTemplate(ChatTemplate&&) noexcept;
  ChatTemplate& operator=(ChatTemplate&&) noexcept;

  /// Reads chat_template.jinja (+ additional_chat_templates/*.jinja) or tokenizer_config.json's
  /// `chat_template` (a string, or a list of {name, template}). `name` picks a named template;
  /// with "default", a "tool_use" template is used when tools are given (as transformers does).
  /// A model without any template gives an empty() ChatTemplate; a missing `name` throws.
  static ChatTemplate load(const std::filesystem::path& model_dir, const std::string& name = "default");
  /// Parses source now; throws rill::Error "template line N: ..." on syntax errors.
  static ChatTemplate from_string(std::string source, std::string bos_token = "", std::string eos_token = "");

  bool empty() const;
  const std::string& source() const;  ///< the selected template's text
  /// Names of all templates found by load() ("default", "tool_use", ...).
  std::vector<std::string> names() const;

  /// messages: JSON array; tools: JSON array or null; kwargs: extra variables (e.g. {"enable_thinking": false}).
  /// Throws rill::Error; a template's raise_exception("msg") gives exactly "msg".
  std::string render(const nlohmann::json& messages, const nlohmann::json& tools, bool add_generation_prompt,
                     const nlohmann::json& kwargs = nlohmann::json::object()) const;
  /// Same, keeping the key order of the request's JSON objects (what `tojson` prints).
  std::string render(const nlohmann::ordered_json& messages, const nlohmann::ordered_json& tools,
                     bool add_generation_prompt,
                     const nlohmann::ordered_json& kwargs = nlohmann::ordered_json::object()) const;

 private:
  struct Entry {
    std::string source;
    std::shared_ptr<const jinja::Template> compiled;
  };
  std::map<std::string, Entry> templates_;
  std::string selected_;        ///< key into templates_, empty when none
  std::string tool_use_;        ///< key used instead of selected_ when tools are given
  std::map<std::string, std::string> special_tokens_;  ///< bos_token, eos_token, ...
};

}  // namespace rill::text
