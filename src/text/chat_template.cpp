// text/chat_template.cpp — loading chat templates from a model directory and rendering them
// with the variables transformers passes (see chat_template.h).
#include "text/chat_template.h"

#include <ctime>
#include <fstream>
#include <sstream>

#include "core/error.h"
#include "text/jinja/error.h"
#include "text/jinja/template.h"
#include "text/jinja/value.h"

namespace rill::text {
namespace {

std::string read_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail("cannot read '{}'", path.string());
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// A special token is a string or an AddedToken object {"content": ...}.
std::string token_text(const nlohmann::ordered_json& j, const std::string& field, const std::string& file) {
  if (j.is_string()) return j.get<std::string>();
  if (j.is_object() && j.contains("content") && j["content"].is_string()) return j["content"].get<std::string>();
  if (j.is_null()) return "";
  fail("{}: field '{}' must be a string or an object with 'content'", file, field);
}

std::shared_ptr<const jinja::Template> compile(const std::string& source, const std::string& what) {
  try {
    return std::make_shared<const jinja::Template>(source);
  } catch (const Error& e) {
    fail("chat template '{}': {}", what, e.what());
  }
}

jinja::Value strftime_now(jinja::CallArgs& a) {
  if (a.args.size() != 1 || !a.args[0].is_string()) fail("strftime_now(format) needs one string argument");
  std::time_t now = std::time(nullptr);
  std::tm local{};
  localtime_r(&now, &local);
  char buf[256];
  size_t n = std::strftime(buf, sizeof(buf), a.args[0].s.c_str(), &local);
  return jinja::Value::string(std::string(buf, n));
}

}  // namespace

ChatTemplate::ChatTemplate() = default;
ChatTemplate::~ChatTemplate() = default;
ChatTemplate::ChatTemplate(const ChatTemplate&) = default;
ChatTemplate& ChatTemplate::operator=(const ChatTemplate&) = default;
ChatTemplate::ChatTemplate(ChatTemplate&&) noexcept = default;
ChatTemplate& ChatTemplate::operator=(ChatTemplate&&) noexcept = default;

ChatTemplate ChatTemplate::load(const std::filesystem::path& model_dir, const std::string& name) {
  ChatTemplate t;
  const auto config_path = model_dir / "tokenizer_config.json";
  nlohmann::ordered_json config = nlohmann::ordered_json::object();
  if (std::filesystem::exists(config_path)) {
    try {
      config = nlohmann::ordered_json::parse(read_file(config_path));
    } catch (const nlohmann::json::exception& e) {
      fail("{}: invalid JSON: {}", config_path.string(), e.what());
    }
    for (const char* field : {"bos_token", "eos_token", "unk_token", "pad_token", "sep_token", "cls_token",
                              "mask_token"}) {
      if (!config.contains(field)) continue;
      std::string text = token_text(config[field], field, config_path.string());
      if (!text.empty()) t.special_tokens_[field] = text;
    }
  }
  std::map<std::string, std::string> sources;
  const auto jinja_path = model_dir / "chat_template.jinja";
  if (std::filesystem::exists(jinja_path)) {
    sources["default"] = read_file(jinja_path);
    const auto extra_dir = model_dir / "additional_chat_templates";
    if (std::filesystem::is_directory(extra_dir))
      for (const auto& entry : std::filesystem::directory_iterator(extra_dir))
        if (entry.path().extension() == ".jinja") sources[entry.path().stem().string()] = read_file(entry.path());
  } else if (config.contains("chat_template")) {
    const auto& ct = config["chat_template"];
    if (ct.is_string()) {
      sources["default"] = ct.get<std::string>();
    } else if (ct.is_array()) {
      for (const auto& item : ct) {
        if (!item.is_object() || !item.contains("name") || !item.contains("template") || !item["name"].is_string() ||
            !item["template"].is_string())
          fail("{}: field 'chat_template' list items must be {{\"name\", \"template\"}} strings", config_path.string());
        sources[item["name"].get<std::string>()] = item["template"].get<std::string>();
      }
    } else if (!ct.is_null()) {
      fail("{}: field 'chat_template' must be a string or a list", config_path.string());
    }
  }
  if (sources.empty()) return t;
  for (auto& [key, source] : sources) {
    Entry e{source, compile(source, (model_dir / key).string())};
    t.templates_.emplace(key, std::move(e));
  }
  if (!t.templates_.count(name)) {
    if (name != "default")
      fail("{}: no chat template named '{}' (have: {})", model_dir.string(), name, fmt::join(t.names(), ", "));
    t.selected_ = t.templates_.begin()->first;
  } else {
    t.selected_ = name;
  }
  if (name == "default" && t.templates_.count("tool_use")) t.tool_use_ = "tool_use";
  return t;
}

ChatTemplate ChatTemplate::from_string(std::string source, std::string bos_token, std::string eos_token) {
  ChatTemplate t;
  Entry e{source, compile(source, "<string>")};
  t.templates_.emplace("default", std::move(e));
  t.selected_ = "default";
  if (!bos_token.empty()) t.special_tokens_["bos_token"] = std::move(bos_token);
  if (!eos_token.empty()) t.special_tokens_["eos_token"] = std::move(eos_token);
  return t;
}

bool ChatTemplate::empty() const { return templates_.empty(); }

const std::string& ChatTemplate::source() const {
  static const std::string kNone;
  return empty() ? kNone : templates_.at(selected_).source;
}

std::vector<std::string> ChatTemplate::names() const {
  std::vector<std::string> out;
  for (const auto& [k, v] : templates_) out.push_back(k);
  return out;
}

std::string ChatTemplate::render(const nlohmann::json& messages, const nlohmann::json& tools,
                                 bool add_generation_prompt, const nlohmann::json& kwargs) const {
  return render(nlohmann::ordered_json(messages), nlohmann::ordered_json(tools), add_generation_prompt,
                nlohmann::ordered_json(kwargs));
}

std::string ChatTemplate::render(const nlohmann::ordered_json& messages, const nlohmann::ordered_json& tools,
                                 bool add_generation_prompt, const nlohmann::ordered_json& kwargs) const {
  if (empty()) fail("this model has no chat template");
  if (!messages.is_array()) fail("chat template: 'messages' must be a JSON array");
  // transformers refuses an empty conversation before rendering.
  if (messages.empty()) fail("Cannot apply chat template to an empty conversation. Provide at least one message.");
  if (!tools.is_null() && !tools.is_array()) fail("chat template: 'tools' must be a JSON array or null");
  if (!kwargs.is_null() && !kwargs.is_object()) fail("chat template: kwargs must be a JSON object");
  const std::string& key = (!tools.is_null() && !tool_use_.empty()) ? tool_use_ : selected_;
  using jinja::Value;
  Value ctx = Value::make_dict();
  ctx.dict->set("messages", jinja::from_json(messages));
  ctx.dict->set("tools", jinja::from_json(tools));
  ctx.dict->set("documents", Value::none());
  ctx.dict->set("add_generation_prompt", Value::boolean(add_generation_prompt));
  for (const auto& [k, v] : special_tokens_) ctx.dict->set(k, Value::string(v));
  if (kwargs.is_object())
    for (auto it = kwargs.begin(); it != kwargs.end(); ++it) ctx.dict->set(it.key(), jinja::from_json(it.value()));
  ctx.dict->set("raise_exception", Value::function("raise_exception", [](jinja::CallArgs& a) -> Value {
    throw jinja::RaisedError(a.args.empty() ? std::string() : a.args[0].str());
  }));
  ctx.dict->set("strftime_now", Value::function("strftime_now", strftime_now));
  return templates_.at(key).compiled->render(ctx);
}

}  // namespace rill::text
