// text/jinja/json_dump.h — Python json.dumps for template values: the `tojson` filter that
// transformers registers (ensure_ascii=False, indent, separators, sort_keys as in CPython).
#pragma once

#include <optional>
#include <string>

#include "text/jinja/value.h"

namespace rill::text::jinja {

struct JsonDumpOptions {
  bool ensure_ascii = false;
  std::optional<std::string> indent;           ///< nullopt: single line
  std::optional<std::string> item_separator;   ///< default ", " (or "," with indent)
  std::optional<std::string> key_separator;    ///< default ": "
  bool sort_keys = false;
};

/// Throws rill::Error (TypeError text as CPython) for values JSON cannot hold (undefined, functions).
std::string json_dumps(const Value& v, const JsonDumpOptions& options);

}  // namespace rill::text::jinja
