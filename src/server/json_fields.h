// server/json_fields.h — typed reads of request JSON fields; a wrong type or a value out of range
// is a 400 ApiError naming the field (its JSON path, e.g. "messages[2].role").
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <optional>
#include <string>

namespace rill::server {

using ojson = nlohmann::ordered_json;

/// Parses a request body; a syntax error or a non-object is a 400.
ojson parse_body(const std::string& body);

/// The field or nullopt when absent or null.
const ojson* field(const ojson& obj, const char* key);
std::optional<std::string> get_string(const ojson& obj, const char* key, const std::string& path = "");
std::optional<bool> get_bool(const ojson& obj, const char* key, const std::string& path = "");
/// A number within [lo, hi].
std::optional<double> get_number(const ojson& obj, const char* key, double lo, double hi, const std::string& path = "");
/// An integer within [lo, hi] (a float with a fraction is an error).
std::optional<int64_t> get_int(const ojson& obj, const char* key, int64_t lo, int64_t hi, const std::string& path = "");

/// "<path>.<key>" or "<key>" for a top-level field.
std::string join_path(const std::string& path, const char* key);
/// A JSON type name as the error messages use it ("string", "array", ...).
const char* type_name(const ojson& v);

}  // namespace rill::server
