// Fields of a JSON document eacgm did not necessarily write itself (a summary.json from another
// version, edited by hand, or cut short), read without throwing: nlohmann's value() throws
// type_error.302 when the key is there with another type (a null role, a string count).
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <type_traits>

namespace eacgm {

// `key`'s text, or `fallback` when `j` is not an object or the field is missing or not a string.
inline std::string json_string(const nlohmann::json& j, const char* key,
                               const std::string& fallback = "") {
  if (!j.is_object()) return fallback;
  const auto it = j.find(key);
  return it != j.end() && it->is_string() ? it->get<std::string>() : fallback;
}

// `key`'s object or array, or an empty one when `j` is not an object or the field is something
// else.
inline nlohmann::json json_object(const nlohmann::json& j, const char* key) {
  if (!j.is_object()) return nlohmann::json::object();
  const auto it = j.find(key);
  return it != j.end() && it->is_object() ? *it : nlohmann::json::object();
}
inline nlohmann::json json_array(const nlohmann::json& j, const char* key) {
  if (!j.is_object()) return nlohmann::json::array();
  const auto it = j.find(key);
  return it != j.end() && it->is_array() ? *it : nlohmann::json::array();
}

// `key`'s number as T, or `fallback` when missing, not a number, or (for an unsigned T) negative.
template <typename T>
T json_number(const nlohmann::json& j, const char* key, T fallback = T{}) {
  static_assert(std::is_arithmetic_v<T>);
  if (!j.is_object()) return fallback;
  const auto it = j.find(key);
  if (it == j.end() || !it->is_number()) return fallback;
  if constexpr (std::is_unsigned_v<T>) {
    if (it->is_number_integer() && !it->is_number_unsigned()) return fallback;
  }
  return it->get<T>();
}

}  // namespace eacgm
