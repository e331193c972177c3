// text/tokenizer_load.cpp — reads tokenizer.json and tokenizer_config.json into Tokenizer::Impl.
// Special-token policy follows transformers 5: BOS/EOS come from tokenizer_config.json's
// add_bos_token/add_eos_token when present, else from tokenizer.json's post_processor; the
// skip set for decode is tokenizer.json's special flags plus the config's named special tokens.
#include <nlohmann/json.hpp>

#include <fstream>
#include <sstream>

#include "core/error.h"
#include "text/tokenizer_impl.h"

namespace rill::text {
namespace {

nlohmann::json read_json(const std::filesystem::path& path) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) fail("tokenizer: file not found: {}", path.string());
  std::ifstream f(path, std::ios::binary);
  if (!f) fail("tokenizer: cannot open {}", path.string());
  std::stringstream ss;
  ss << f.rdbuf();
  try {
    return nlohmann::json::parse(ss.str());
  } catch (const nlohmann::json::exception& e) {
    fail("{}: invalid JSON: {}", path.string(), e.what());
  }
}

// A special-token entry of tokenizer_config.json: "text", {"content": "text", ...} or null.
std::optional<std::string> token_text(const nlohmann::json& j) {
  if (j.is_string()) return j.get<std::string>();
  if (j.is_object() && j.contains("content") && j["content"].is_string()) return j["content"].get<std::string>();
  return std::nullopt;
}

struct PostProcessor {
  std::vector<int32_t> prefix, suffix;
};

PostProcessor parse_post_processor(const nlohmann::json& j, const std::string& where) {
  PostProcessor p;
  if (j.is_null()) return p;
  std::string type = j.value("type", "");
  if (type == "ByteLevel") return p;
  if (type == "TemplateProcessing") {
    bool seen_sequence = false;
    for (const auto& item : j.at("single")) {
      if (item.contains("Sequence")) {
        seen_sequence = true;
        continue;
      }
      std::string name = item.at("SpecialToken").at("id").get<std::string>();
      const auto& st = j.at("special_tokens");
      if (!st.contains(name)) fail("{}: TemplateProcessing uses unknown special token '{}'", where, name);
      auto ids = st.at(name).at("ids").get<std::vector<int32_t>>();
      auto& dst = seen_sequence ? p.suffix : p.prefix;
      dst.insert(dst.end(), ids.begin(), ids.end());
    }
    return p;
  }
  if (type == "BertProcessing" || type == "RobertaProcessing") {
    p.prefix.push_back(j.at("cls").at(1).get<int32_t>());
    p.suffix.push_back(j.at("sep").at(1).get<int32_t>());
    return p;
  }
  if (type == "Sequence") {
    for (const auto& sub : j.at("processors")) {
      PostProcessor q = parse_post_processor(sub, where);
      p.prefix.insert(p.prefix.begin(), q.prefix.begin(), q.prefix.end());
      p.suffix.insert(p.suffix.end(), q.suffix.begin(), q.suffix.end());
    }
    return p;
  }
  fail("{}: unsupported post_processor type '{}'", where, type);
}

void mark_special(Tokenizer::Impl& d, int32_t id) {
  if (id < 0) return;
  if (size_t(id) >= d.special.size()) d.special.resize(size_t(id) + 1, 0);
  d.special[size_t(id)] = 1;
}

}  // namespace

Tokenizer Tokenizer::load(const std::filesystem::path& model_dir) {
  std::error_code ec;
  if (!std::filesystem::is_directory(model_dir, ec)) fail("tokenizer: model directory not found: {}", model_dir.string());
  auto config = model_dir / "tokenizer_config.json";
  return load_files(model_dir / "tokenizer.json", std::filesystem::exists(config, ec) ? config : std::filesystem::path());
}

Tokenizer Tokenizer::load_files(const std::filesystem::path& tokenizer_json, const std::filesystem::path& config_json) {
  auto d = std::make_shared<Impl>();
  d->where = tokenizer_json.string();
  const std::string& where = d->where;
  nlohmann::json tj = read_json(tokenizer_json);
  nlohmann::json cfg = config_json.empty() ? nlohmann::json::object() : read_json(config_json);
  try {
    if (!tj.is_object() || !tj.contains("model")) fail("{}: no \"model\" section", where);
    d->normalizer = make_normalizer(tj.value("normalizer", nlohmann::json()), where);
    d->pre_tokenizer = make_pre_tokenizer(tj.value("pre_tokenizer", nlohmann::json()), where);
    d->byte_level_regex = byte_level_split_regex(tj.value("pre_tokenizer", nlohmann::json()), where);
    d->model = BpeModel::from_json(tj.at("model"), where);
    d->added = AddedTokens(tj.value("added_tokens", nlohmann::json()), d->normalizer.get(), where);
    d->decoder = Decoder::from_json(tj.value("decoder", nlohmann::json()), where);
    PostProcessor post = parse_post_processor(tj.value("post_processor", nlohmann::json()), where);

    d->vocab_size = d->model->size();
    for (const AddedToken& t : d->added.tokens()) {
      d->vocab_size = std::max(d->vocab_size, t.id + 1);
      if (t.special) mark_special(*d, t.id);
    }
    auto id_of = [&](const std::string& text) -> std::optional<int32_t> {
      if (auto id = d->added.find(text)) return id;
      return d->model->token_to_id(text);
    };

    // Special tokens named by the config (transformers' all_special_ids). GemmaTokenizer's
    // constructor supplies mask_token="<mask>" when the config does not name one.
    std::string cls = cfg.value("tokenizer_class", "");
    if ((cls == "GemmaTokenizer" || cls == "GemmaTokenizerFast") && !cfg.contains("mask_token"))
      cfg["mask_token"] = "<mask>";
    for (const char* key : {"bos_token", "eos_token", "unk_token", "pad_token", "mask_token", "cls_token", "sep_token"})
      if (cfg.contains(key))
        if (auto text = token_text(cfg[key]))
          if (auto id = id_of(*text)) mark_special(*d, *id);
    if (cfg.contains("additional_special_tokens") && cfg["additional_special_tokens"].is_array())
      for (const auto& t : cfg["additional_special_tokens"])
        if (auto text = token_text(t))
          if (auto id = id_of(*text)) mark_special(*d, *id);
    if (cfg.contains("extra_special_tokens")) {
      const auto& extra = cfg["extra_special_tokens"];
      for (auto it = extra.begin(); it != extra.end(); ++it)
        if (auto text = token_text(it.value()))
          if (auto id = id_of(*text)) mark_special(*d, *id);
    }
    if (cfg.contains("bos_token"))
      if (auto text = token_text(cfg["bos_token"])) d->bos_token = *text, d->bos_id = id_of(*text);
    if (cfg.contains("eos_token"))
      if (auto text = token_text(cfg["eos_token"])) d->eos_token = *text, d->eos_id = id_of(*text);

    if (cfg.contains("add_bos_token") || cfg.contains("add_eos_token")) {
      if (cfg.value("add_bos_token", false) && d->bos_id) post.prefix = {*d->bos_id};
      else post.prefix.clear();
      if (cfg.value("add_eos_token", false) && d->eos_id) post.suffix = {*d->eos_id};
      else post.suffix.clear();
    }
    d->prefix_ids = std::move(post.prefix);
    d->suffix_ids = std::move(post.suffix);
  } catch (const nlohmann::json::exception& e) {
    fail("{}: malformed tokenizer file: {}", where, e.what());
  }
  return Tokenizer(std::move(d));
}

}  // namespace rill::text
