// server/json_fields.cpp — typed field reads with 400s naming the field.
#include "server/json_fields.h"

#include <cmath>

#include "server/api_error.h"

namespace rill::server {

ojson parse_body(const std::string& body) {
  ojson j;
  try {
    j = ojson::parse(body);
  } catch (const nlohmann::json::parse_error& e) {
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
  if (v->is_number_float()) {
    double x = v->get<double>();
    if (x != std::floor(x)) bad_request(name, "'{}' must be an integer, got {}", name, x);
  }
  int64_t x = v->is_number_unsigned() ? int64_t(std::min<uint64_t>(v->get<uint64_t>(), uint64_t(INT64_MAX)))
                                      : v->is_number_float() ? int64_t(v->get<double>()) : v->get<int64_t>();
  if (x < lo || x > hi) bad_request(name, "'{}' must be in [{}, {}], got {}", name, lo, hi, x);
  return x;
}

}  // namespace rill::server
