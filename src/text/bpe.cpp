// text/bpe.cpp — BPE encoding (see bpe.h). The merge loop mirrors tokenizers' Word::merge_all:
// a min-heap on (rank, position); an entry is stale when the pair now at its position no longer
// merges into the same token. Ties and stale-entry handling must match for id-exact output.
#include "text/bpe.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <array>
#include <atomic>
#include <unordered_map>

#include "core/error.h"
#include "text/pre_tokenizer.h"
#include "text/utf8.h"

namespace rill::text {
namespace {

struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const noexcept { return std::hash<std::string_view>{}(s); }
};

// Open-addressing map from a (left id, right id) pair to (rank, merged id); key and value share
// a 16-byte slot so a lookup touches one cache line.
class MergeMap {
 public:
  struct Value {
    int32_t rank, id;
  };
  void reserve(size_t n) {
    size_t cap = 16;
    while (cap < n * 2) cap <<= 1;
    slots_.assign(cap, Slot{kEmpty, {0, 0}});
    mask_ = cap - 1;
  }
  bool insert(int32_t a, int32_t b, Value v) {  // false if the pair is already present
    uint64_t k = key(a, b);
    for (size_t i = hash(k) & mask_;; i = (i + 1) & mask_) {
      if (slots_[i].key == kEmpty) {
        slots_[i] = {k, v};
        return true;
      }
      if (slots_[i].key == k) return false;
    }
  }
  const Value* find(int32_t a, int32_t b) const {
    uint64_t k = key(a, b);
    for (size_t i = hash(k) & mask_;; i = (i + 1) & mask_) {
      if (slots_[i].key == k) return &slots_[i].value;
      if (slots_[i].key == kEmpty) return nullptr;
    }
  }

 private:
  struct Slot {
    uint64_t key;
    Value value;
  };
  static constexpr uint64_t kEmpty = ~uint64_t{0};
  static uint64_t key(int32_t a, int32_t b) { return (uint64_t(uint32_t(a)) << 32) | uint32_t(b); }
  static size_t hash(uint64_t k) { return size_t((k * 0x9E3779B97F4A7C15ull) >> 17); }
  std::vector<Slot> slots_;
  size_t mask_ = 0;
};

// Code point of a 1-3 byte UTF-8 sequence (the caller checked the length).
uint32_t bmp_code_point(std::string_view c) {
  auto b = [&](size_t k) { return uint32_t(static_cast<unsigned char>(c[k])); };
  if (c.size() == 1) return b(0);
  if (c.size() == 2) return ((b(0) & 0x1fu) << 6) | (b(1) & 0x3fu);
  return ((b(0) & 0x0fu) << 12) | ((b(1) & 0x3fu) << 6) | (b(2) & 0x3fu);
}

struct Symbol {
  int32_t id, prev, next, len;
};

struct QueuedMerge {
  int32_t rank, pos, id;
};

// std heap functions build a max-heap; "greater" entries (higher rank, then higher pos) sink.
bool merge_after(const QueuedMerge& a, const QueuedMerge& b) {
  return a.rank != b.rank ? a.rank > b.rank : a.pos > b.pos;
}

constexpr size_t kMaxCachedPiece = 256;
constexpr size_t kMaxCacheEntries = 200000;

}  // namespace

struct BpeModel::Impl {
  std::unordered_map<std::string, int32_t, StringHash, std::equal_to<>> vocab;
  std::vector<std::string> id_to_token;
  std::vector<uint8_t> has_id;
  std::vector<int32_t> bmp_char_ids;  // id of the one-character token for each code point < U+10000, or -1
  std::array<int32_t, 256> byte_ids;         // "<0xXX>" tokens, -1 if absent
  MergeMap merges;
  std::optional<int32_t> unk_id;
  bool byte_fallback = false, fuse_unk = false, ignore_merges = false;
  // Word splitting for SentencePiece-style models whose pieces are whole paragraphs: a "▁" that
  // follows a character c (c != "▁", c not in no_split_after) starts an independent word, since
  // no merge joins a symbol ending in c with one starting with "▁". Checked on the merges at load.
  bool split_words = false;
  std::vector<uint32_t> no_split_after;

  std::optional<int32_t> lookup(std::string_view s) const {
    auto it = vocab.find(s);
    if (it == vocab.end()) return std::nullopt;
    return it->second;
  }

  void merge_word(std::string_view w, std::vector<int32_t>& out) const;
};

struct BpeModel::Cache {
  std::unordered_map<std::string, std::vector<int32_t>, StringHash, std::equal_to<>> map;
};

namespace {
std::atomic<uint64_t> next_model_uid{1};
}  // namespace

BpeModel::BpeModel() : impl_(std::make_unique<Impl>()), uid_(next_model_uid.fetch_add(1)) {}
BpeModel::~BpeModel() = default;

std::unique_ptr<BpeModel> BpeModel::from_json(const nlohmann::json& m, const std::string& where) {
  std::string type = m.value("type", "BPE");
  if (type != "BPE") fail("{}: unsupported model type '{}' (only BPE is supported)", where, type);
  if (m.contains("dropout") && !m["dropout"].is_null() && m["dropout"].get<double>() != 0.0)
    fail("{}: BPE dropout is not supported", where);
  for (const char* k : {"continuing_subword_prefix", "end_of_word_suffix"})
    if (m.contains(k) && m[k].is_string() && !m[k].get<std::string>().empty())
      fail("{}: BPE {} '{}' is not supported", where, k, m[k].get<std::string>());

  std::unique_ptr<BpeModel> model(new BpeModel());
  Impl& d = *model->impl_;
  const auto& vocab = m.at("vocab");
  if (!vocab.is_object()) fail("{}: model.vocab must be an object", where);
  d.vocab.reserve(vocab.size() * 2);
  int32_t max_id = -1;
  for (auto it = vocab.begin(); it != vocab.end(); ++it) {
    int32_t id = it.value().get<int32_t>();
    if (id < 0) fail("{}: negative id {} for token '{}'", where, id, it.key());
    d.vocab.emplace(it.key(), id);
    max_id = std::max(max_id, id);
  }
  d.id_to_token.resize(size_t(max_id + 1));
  d.has_id.assign(size_t(max_id + 1), 0);
  for (const auto& [tok, id] : d.vocab) {
    d.id_to_token[size_t(id)] = tok;
    d.has_id[size_t(id)] = 1;
  }
  d.bmp_char_ids.assign(0x10000, -1);
  for (const auto& [tok, id] : d.vocab) {
    if (tok.empty() || tok.size() > 3 || size_t(utf8_sequence_length(static_cast<unsigned char>(tok[0]))) != tok.size())
      continue;
    d.bmp_char_ids[bmp_code_point(tok)] = id;
  }
  for (int b = 0; b < 256; ++b) {
    auto id = d.lookup(fmt::format("<0x{:02X}>", b));
    d.byte_ids[size_t(b)] = id ? *id : -1;
  }
  d.byte_fallback = m.value("byte_fallback", false);
  d.fuse_unk = m.value("fuse_unk", false);
  d.ignore_merges = m.value("ignore_merges", false);
  if (m.contains("unk_token") && m["unk_token"].is_string()) {
    std::string unk = m["unk_token"].get<std::string>();
    d.unk_id = d.lookup(unk);
    if (!d.unk_id) fail("{}: unk_token '{}' is not in the vocabulary", where, unk);
  }

  const auto& merges = m.at("merges");
  d.merges.reserve(merges.size());
  static constexpr std::string_view kMeta = "\u2581";
  d.split_words = !d.ignore_merges && d.lookup(kMeta).has_value();
  int32_t rank = 0;
  std::string joined;
  for (const auto& mj : merges) {
    std::string_view a, b;
    if (mj.is_string()) {
      std::string_view s = mj.get_ref<const std::string&>();
      size_t sp = s.find(' ');
      if (sp == std::string::npos || s.find(' ', sp + 1) != std::string::npos)
        fail("{}: merge '{}' is not two tokens separated by one space", where, s);
      a = s.substr(0, sp);
      b = s.substr(sp + 1);
    } else if (mj.is_array() && mj.size() == 2 && mj[0].is_string() && mj[1].is_string()) {
      a = mj[0].get_ref<const std::string&>();
      b = mj[1].get_ref<const std::string&>();
    } else {
      fail("{}: merge #{} must be \"a b\" or [a, b]", where, rank);
    }
    joined.assign(a);
    joined.append(b);
    auto ia = d.lookup(a), ib = d.lookup(b), im = d.lookup(joined);
    if (!ia || !ib) fail("{}: merge #{} uses a token missing from the vocabulary ('{}' '{}')", where, rank, a, b);
    if (!im) fail("{}: merge #{} produces '{}', which is not in the vocabulary", where, rank, joined);
    d.merges.insert(*ia, *ib, {rank, *im});  // a repeated pair keeps its first (lowest) rank
    if (d.split_words && b.starts_with(kMeta) && !a.ends_with(kMeta)) {
      // A merge across a word boundary: its left side must be an ordinary character.
      bool special_left = (a.size() == 6 && a.starts_with("<0x")) || (d.unk_id && a == d.id_to_token[size_t(*d.unk_id)]);
      size_t last = a.size() - 1;
      while (last > 0 && (static_cast<unsigned char>(a[last]) & 0xc0) == 0x80) --last;
      uint32_t cp = 0;
      std::string_view tail = std::string_view(a).substr(last);
      unsigned char c0 = static_cast<unsigned char>(tail[0]);
      if (tail.size() == 1) cp = c0;
      else if (tail.size() == 2) cp = ((c0 & 0x1fu) << 6) | (static_cast<unsigned char>(tail[1]) & 0x3fu);
      else if (tail.size() == 3) cp = ((c0 & 0x0fu) << 12) | ((static_cast<unsigned char>(tail[1]) & 0x3fu) << 6) |
                                     (static_cast<unsigned char>(tail[2]) & 0x3fu);
      else cp = ((c0 & 0x07u) << 18) | ((static_cast<unsigned char>(tail[1]) & 0x3fu) << 12) |
                ((static_cast<unsigned char>(tail[2]) & 0x3fu) << 6) | (static_cast<unsigned char>(tail[3]) & 0x3fu);
      if (special_left) d.split_words = false;
      else d.no_split_after.push_back(cp);
    }
    ++rank;
  }
  return model;
}

void BpeModel::Impl::merge_word(std::string_view w, std::vector<int32_t>& out) const {
  thread_local std::vector<Symbol> syms;
  thread_local std::vector<QueuedMerge> heap;
  syms.clear();
  heap.clear();
  auto add = [&](int32_t id, int32_t len) {
    int32_t i = int32_t(syms.size());
    syms.push_back({id, i - 1, -1, len});
    if (i > 0) syms[size_t(i - 1)].next = i;
  };
  int32_t unk_pending = -1, unk_len = 0;  // id and byte length of a pending unknown run
  for (size_t i = 0; i < w.size();) {
    int n = utf8_sequence_length(static_cast<unsigned char>(w[i]));
    if (n <= 0 || i + size_t(n) > w.size()) n = 1;  // cannot happen on valid UTF-8
    std::string_view ch = w.substr(i, size_t(n));
    i += size_t(n);
    int32_t id = n <= 3 ? bmp_char_ids[bmp_code_point(ch)] : -1;
    if (id < 0 && n > 3) {
      auto found = lookup(ch);
      if (found) id = *found;
    }
    if (id >= 0) {
      if (unk_pending >= 0) add(unk_pending, unk_len), unk_pending = -1;
      add(id, n);
      continue;
    }
    if (byte_fallback) {
      bool all = true;
      for (unsigned char b : ch) all = all && byte_ids[b] >= 0;
      if (all) {  // NOTE: a pending unk is not flushed first, as in tokenizers
        for (unsigned char b : ch) add(byte_ids[b], 1);
        continue;
      }
    }
    if (unk_id) {
      if (unk_pending >= 0 && fuse_unk) {
        unk_len += n;
      } else {
        if (unk_pending >= 0) add(unk_pending, unk_len);
        unk_pending = *unk_id;
        unk_len = n;
      }
    }
  }
  if (unk_pending >= 0) add(unk_pending, unk_len);

  for (size_t i = 0; i + 1 < syms.size(); ++i)
    if (const auto* m = merges.find(syms[i].id, syms[i + 1].id)) heap.push_back({m->rank, int32_t(i), m->id});
  std::make_heap(heap.begin(), heap.end(), merge_after);
  while (!heap.empty()) {
    std::pop_heap(heap.begin(), heap.end(), merge_after);
    QueuedMerge top = heap.back();
    heap.pop_back();
    Symbol& cur = syms[size_t(top.pos)];
    if (cur.len == 0 || cur.next < 0) continue;
    int32_t right_pos = cur.next;
    Symbol right = syms[size_t(right_pos)];
    const auto* m = merges.find(cur.id, right.id);
    if (m == nullptr || m->id != top.id) continue;  // stale entry
    cur.id = top.id;
    cur.len += right.len;
    cur.next = right.next;
    syms[size_t(right_pos)].len = 0;
    if (right.next >= 0) syms[size_t(right.next)].prev = top.pos;
    if (cur.prev >= 0)
      if (const auto* pm = merges.find(syms[size_t(cur.prev)].id, cur.id)) {
        heap.push_back({pm->rank, cur.prev, pm->id});
        std::push_heap(heap.begin(), heap.end(), merge_after);
      }
    if (cur.next >= 0)
      if (const auto* nm = merges.find(cur.id, syms[size_t(cur.next)].id)) {
        heap.push_back({nm->rank, top.pos, nm->id});
        std::push_heap(heap.begin(), heap.end(), merge_after);
      }
  }
  for (const Symbol& s : syms)
    if (s.len != 0) out.push_back(s.id);
}

BpeModel::Cache& BpeModel::thread_cache() const {
  thread_local std::unordered_map<uint64_t, std::unique_ptr<Cache>> caches;
  thread_local uint64_t last_uid = 0;
  thread_local Cache* last = nullptr;
  if (last_uid != uid_) {
    auto& c = caches[uid_];
    if (!c) c = std::make_unique<Cache>();
    last_uid = uid_;
    last = c.get();
  }
  return *last;
}

void BpeModel::encode_cached(std::string_view key, std::string_view piece, std::vector<int32_t>& out) const {
  const Impl& d = *impl_;
  Cache& cache = thread_cache();
  bool cacheable = key.size() <= kMaxCachedPiece;
  if (cacheable) {
    auto it = cache.map.find(key);
    if (it != cache.map.end()) {
      out.insert(out.end(), it->second.begin(), it->second.end());
      return;
    }
  }
  size_t start = out.size();
  std::optional<int32_t> whole;
  if (d.ignore_merges) whole = d.lookup(piece);  // tokenizers checks the vocab before merging
  if (whole) out.push_back(*whole);
  else d.merge_word(piece, out);
  if (cacheable) {
    if (cache.map.size() >= kMaxCacheEntries) cache.map.clear();
    cache.map.emplace(std::string(key), std::vector<int32_t>(out.begin() + std::ptrdiff_t(start), out.end()));
  }
}

void BpeModel::encode(std::string_view piece, std::vector<int32_t>& out) const {
  if (piece.empty()) return;
  const Impl& d = *impl_;
  if (!d.split_words || piece.size() <= 32) {
    encode_cached(piece, piece, out);
    return;
  }
  static constexpr std::string_view kMeta = "\u2581";
  size_t word = 0;
  uint32_t prev = 0x2581;  // no split before the first character
  for (size_t i = 0; i < piece.size();) {
    size_t n = size_t(std::max(1, utf8_sequence_length(static_cast<unsigned char>(piece[i]))));
    bool meta = piece.compare(i, kMeta.size(), kMeta) == 0;
    if (meta && prev != 0x2581 &&
        std::find(d.no_split_after.begin(), d.no_split_after.end(), prev) == d.no_split_after.end()) {
      encode_cached(piece.substr(word, i - word), piece.substr(word, i - word), out);
      word = i;
    }
    uint32_t cp = static_cast<unsigned char>(piece[i]);
    for (size_t k = 1; k < n && i + k < piece.size(); ++k) cp = (cp << 6) | (static_cast<unsigned char>(piece[i + k]) & 0x3fu);
    if (n == 2) cp &= 0x7ff;
    else if (n == 3) cp &= 0xffff;
    else if (n == 4) cp &= 0x1fffff;
    prev = meta ? 0x2581 : cp;
    i += n;
  }
  encode_cached(piece.substr(word), piece.substr(word), out);
}

void BpeModel::encode_byte_level(std::string_view raw, std::vector<int32_t>& out) const {
  if (raw.empty()) return;
  Cache& cache = thread_cache();
  if (raw.size() <= kMaxCachedPiece) {
    auto it = cache.map.find(raw);
    if (it != cache.map.end()) {
      out.insert(out.end(), it->second.begin(), it->second.end());
      return;
    }
  }
  thread_local std::string mapped;
  mapped.clear();
  const auto& table = byte_level_chars();
  for (unsigned char c : raw) mapped += table[c];
  encode_cached(raw, mapped, out);
}

std::optional<int32_t> BpeModel::token_to_id(std::string_view token) const { return impl_->lookup(token); }

const std::string* BpeModel::id_to_token(int32_t id) const {
  if (id < 0 || size_t(id) >= impl_->has_id.size() || !impl_->has_id[size_t(id)]) return nullptr;
  return &impl_->id_to_token[size_t(id)];
}

int32_t BpeModel::size() const { return int32_t(impl_->has_id.size()); }

}  // namespace rill::text
