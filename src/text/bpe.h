// text/bpe.h — the BPE model of tokenizer.json: vocab, merges by rank, byte fallback, unk/fuse_unk,
// ignore_merges, and a bounded piece → ids cache. Merging replays Hugging Face's priority-queue
// algorithm exactly (lowest rank first, then leftmost), including how it skips stale entries.
// Not responsible for splitting text into pieces (pre_tokenizer.h) or added tokens.
#pragma once

#include <nlohmann/json_fwd.hpp>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace rill::text {

class BpeModel {
 public:
  /// Builds the model from tokenizer.json's "model" object; `where` names the file for errors.
  static std::unique_ptr<BpeModel> from_json(const nlohmann::json& model, const std::string& where);
  ~BpeModel();

  /// Appends the ids of one pre-tokenized piece. Thread-safe.
  void encode(std::string_view piece, std::vector<int32_t>& out) const;
  /// Same for a raw piece of a byte-level tokenizer: the byte → character mapping is applied only
  /// on a cache miss (the cache is keyed by the raw bytes). A model uses one of the two entries.
  void encode_byte_level(std::string_view raw, std::vector<int32_t>& out) const;

  std::optional<int32_t> token_to_id(std::string_view token) const;
  /// nullptr when the id is not in the model vocabulary.
  const std::string* id_to_token(int32_t id) const;
  /// One past the largest model id.
  int32_t size() const;

 private:
  BpeModel();
  struct Impl;
  struct Cache;
  /// This thread's piece cache for this model. Caches live until their thread exits (a model
  /// destroyed meanwhile leaves at most kMaxCacheEntries entries behind per thread).
  Cache& thread_cache() const;
  void encode_cached(std::string_view key, std::string_view piece, std::vector<int32_t>& out) const;
  std::unique_ptr<Impl> impl_;
  uint64_t uid_;
};

}  // namespace rill::text
