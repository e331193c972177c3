// cli/cmd_template.cpp — `rill template`: render a model's chat template for a conversation
// and print the prompt exactly (no added newline), as transformers' apply_chat_template
// (tokenize=False) would. Key order of the JSON files is kept (it shows in `tojson`).
#include <cstdio>
#include <fstream>
#include <sstream>

#include "cli/commands.h"
#include "core/error.h"
#include "text/chat_template.h"

namespace rill::cli {
namespace {

nlohmann::ordered_json read_json_file(const std::string& path, const char* flag) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail("{}: cannot read '{}'", flag, path);
  std::stringstream ss;
  ss << in.rdbuf();
  try {
    return nlohmann::ordered_json::parse(ss.str());
  } catch (const nlohmann::json::exception& e) {
    fail("{}: '{}' is not valid JSON: {}", flag, path, e.what());
  }
}

}  // namespace

void add_template_command(CLI::App& app) {
  struct Args {
    std::string model, messages, tools, kwargs, name = "default";
    bool add_generation_prompt = false;
  };
  auto args = std::make_shared<Args>();
  CLI::App* cmd = app.add_subcommand("template", "Render a model's chat template and print the prompt");
  cmd->add_option("--model,model", args->model, "Model directory (tokenizer_config.json or chat_template.jinja)")
      ->required();
  cmd->add_option("--messages", args->messages, "JSON file with the messages array")->required();
  cmd->add_option("--tools", args->tools, "JSON file with the tools array");
  cmd->add_flag("--add-generation-prompt", args->add_generation_prompt, "Append the assistant turn opener");
  cmd->add_option("--kwargs", args->kwargs, "Extra template variables as a JSON object, e.g. '{\"enable_thinking\": false}'");
  cmd->add_option("--name", args->name, "Named template (e.g. tool_use)")->capture_default_str();
  cmd->callback([args] {
    text::ChatTemplate tmpl = text::ChatTemplate::load(args->model, args->name);
    if (tmpl.empty()) fail("--model: '{}' has no chat template", args->model);
    nlohmann::ordered_json messages = read_json_file(args->messages, "--messages");
    nlohmann::ordered_json tools = args->tools.empty() ? nlohmann::ordered_json() : read_json_file(args->tools, "--tools");
    nlohmann::ordered_json kwargs = nlohmann::ordered_json::object();
    if (!args->kwargs.empty()) {
      try {
        kwargs = nlohmann::ordered_json::parse(args->kwargs);
      } catch (const nlohmann::json::exception& e) {
        fail("--kwargs: not valid JSON: {}", e.what());
      }
      if (!kwargs.is_object()) fail("--kwargs: must be a JSON object");
    }
    const std::string prompt = tmpl.render(messages, tools, args->add_generation_prompt, kwargs);
    std::fwrite(prompt.data(), 1, prompt.size(), stdout);
    std::fflush(stdout);
  });
}

}  // namespace rill::cli
