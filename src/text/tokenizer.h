// text/tokenizer.h — Hugging Face tokenizer.json tokenizers (BPE: byte-level like Qwen3/Llama 3,
// SentencePiece-style with byte fallback like Gemma 3), exact against transformers'
// AutoTokenizer: tok(text)["input_ids"] and tok.decode(ids, skip_special_tokens).
// Invalid UTF-8 input is never an error: each maximal invalid subsequence is replaced with U+FFFD
// (Python's errors="replace") before encoding. Thread-safe after load; cheap to move and copy.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace rill::text {

struct EncodeOptions {
  bool add_special_tokens = true;  ///< BOS/EOS etc. as the post-processor / tokenizer_config.json say
  bool parse_special = true;       ///< false: special-token text in the input is encoded as plain text
};

class IncrementalDetokenizer;

class Tokenizer {
 public:
  /// Loads model_dir/tokenizer.json and, when present, model_dir/tokenizer_config.json.
  static Tokenizer load(const std::filesystem::path& model_dir);
  /// Same, from explicit files (config may be empty: no tokenizer_config.json).
  static Tokenizer load_files(const std::filesystem::path& tokenizer_json, const std::filesystem::path& config_json);

  std::vector<int32_t> encode(std::string_view text, const EncodeOptions& options = {}) const;
  /// Ids outside the vocabulary are dropped (as tokenizers' decode does), never an error.
  std::string decode(std::span<const int32_t> ids, bool skip_special_tokens = false) const;

  int32_t vocab_size() const;  ///< including added tokens (max id + 1)
  std::optional<int32_t> token_to_id(std::string_view token) const;
  std::string id_to_token(int32_t id) const;  ///< "" for an unknown id
  std::optional<int32_t> bos_id() const;
  std::optional<int32_t> eos_id() const;
  std::string bos_token() const;
  std::string eos_token() const;
  /// Special for decode(skip_special_tokens=true): flagged special in tokenizer.json or named as a
  /// special token (bos, eos, unk, pad, mask, additional/extra special tokens) by the config.
  bool is_special(int32_t id) const;

  struct Impl;  ///< internal (tokenizer_impl.h)

 private:
  friend class IncrementalDetokenizer;
  explicit Tokenizer(std::shared_ptr<const Impl> impl) : impl_(std::move(impl)) {}
  std::shared_ptr<const Impl> impl_;
};

}  // namespace rill::text
