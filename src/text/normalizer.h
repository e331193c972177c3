// text/normalizer.h — tokenizer.json "normalizer" section: NFC/NFD/NFKC/NFKD (ICU), Replace,
// Prepend, Lowercase, Strip and Sequence, applied to one text segment (between added tokens).
// Not responsible for offsets: rill never reports token offsets.
#pragma once

#include <nlohmann/json_fwd.hpp>

#include <memory>
#include <string>
#include <string_view>

namespace rill::text {

class Normalizer {
 public:
  virtual ~Normalizer() = default;
  /// Normalizes s in place (s is valid UTF-8 and stays so).
  virtual void normalize(std::string& s) const = 0;
};

/// Builds the normalizer described by j (null → nullptr). Unknown types fail naming `where`.
std::unique_ptr<Normalizer> make_normalizer(const nlohmann::json& j, const std::string& where);

}  // namespace rill::text
