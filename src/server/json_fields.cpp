// server/json_fields.cpp — typed field reads with 400s naming the field.
#include "server/json_fields.h"

#include <cmath>

#include "server/api_error.h"

namespace rill::server {

ojson parse_body(const std::string& body) {
  ojson j;
  try {
    j = ojson::parse(body);
  } catch (const nlohmann::json::exception& e) {
    // parse_error for bad syntax; out_of_range (406) for a number no double holds, such as 1e400.
    bad_request("", "request body is not valid JSON: {}", e.what());
  }
  if (!j.is_object()) bad_request("", "request body must be a JSON object, got {}", type_name(j));
  return j;
}

std::string join_path(const std::string& path, const char* key) { return path.empty() ? key : path + "." + key; }

const char* type_name(const ojson& v) {
  switch (v.type()) {
    case ojson::value_t::null: return "null";
    case ojson::value_t::object: return "object";
    case ojson::value_t::array: return "array";
    case ojson::value_t::string: return "string";
    case ojson::value_t::boolean: return "boolean";
    default: return "number";
  }
}

const ojson* field(const ojson& obj, const char* key) {
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return nullptr;
  return &*it;
}

std::optional<std::string> get_string(const ojson& obj, const char* key, const std::string& path) {
  const ojson* v = field(obj, key);
  if (!v) return std::nullopt;
  if (!v->is_string()) bad_request(join_path(path, key), "'{}' must be a string, got {}", join_path(path, key), type_name(*v));
  return v->get<std::string>();
}

std::optional<bool> get_bool(const ojson& obj, const char* key, const std::string& path) {
  const ojson* v = field(obj, key);
  if (!v) return std::nullopt;
  if (!v->is_boolean()) bad_request(join_path(path, key), "'{}' must be a boolean, got {}", join_path(path, key), type_name(*v));
  return v->get<bool>();
}

std::optional<double> get_number(const ojson& obj, const char* key, double lo, double hi, const std::string& path) {
  const ojson* v = field(obj, key);
  if (!v) return std::nullopt;
  const std::string name = join_path(path, key);
  if (!v->is_number()) bad_request(name, "'{}' must be a number, got {}", name, type_name(*v));
  double x = v->get<double>();
  if (!std::isfinite(x) || x < lo || x > hi) bad_request(name, "'{}' must be in [{}, {}], got {}", name, lo, hi, x);
  return x;
}

std::optional<int64_t> get_int(const ojson& obj, const char* key, int64_t lo, int64_t hi, const std::string& path) {
  const ojson* v = field(obj, key);
  if (!v) return std::nullopt;
  const std::string name = join_path(path, key);
  if (!v->is_number()) bad_request(name, "'{}' must be an integer, got {}", name, type_name(*v));
  // The message quotes the value as the request wrote it: a conversion of a value outside int64 would be
  // undefined (a double such as 1e30) or clipped (an unsigned past INT64_MAX).
  const auto out_of_range = [&] { bad_request(name, "'{}' must be in [{}, {}], got {}", name, lo, hi, v->dump()); };
  int64_t x = 0;
  if (v->is_number_float()) {
    const double d = v->get<double>();
    if (d != std::floor(d)) bad_request(name, "'{}' must be an integer, got {}", name, v->dump());
    // [-2^63, 2^63): every double in it converts exactly; 2^63 itself does not fit.
    if (!(d >= -9223372036854775808.0 && d < 9223372036854775808.0)) out_of_range();
    x = int64_t(d);
  } else if (v->is_number_unsigned()) {
    const uint64_t u = v->get<uint64_t>();
    if (u > uint64_t(INT64_MAX)) out_of_range();
    x = int64_t(u);
  } else {
    x = v->get<int64_t>();
  }
  if (x < lo || x > hi) out_of_range();
  return x;
}

}  // namespace rill::server
