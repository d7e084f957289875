#include "core/params.h"

#include <fmt/format.h>
#include <unistd.h>  // environ (glibc, with _GNU_SOURCE)

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>

#include "core/error.h"

namespace strait::params {
namespace {

std::string_view trim(std::string_view s) {
  const auto space = [](char c) { return c == ' ' || c == '\t' || c == '\r'; };
  while (!s.empty() && space(s.front())) s.remove_prefix(1);
  while (!s.empty() && space(s.back())) s.remove_suffix(1);
  return s;
}

// The only getenv of STRAIT_ names in the project (scripts/check-params.sh).
std::optional<std::string> from_environment(std::string_view name) {
  const char* v = std::getenv(std::string(name).c_str());
  if (v == nullptr || *v == '\0') return std::nullopt;
  return std::string(v);
}

Error bad(std::string_view name, std::string_view value, std::string_view expected) {
  const Param& p = declared(name);
  return Error(ErrorCode::InvalidArgument,
               fmt::format("{}={} is not {}: {}", name, value, expected, p.doc));
}

// The setting of name in the config file path: its value and "FILE:LINE", or nullopt.
std::optional<std::pair<std::string, std::string>> from_file(const std::string& path,
                                                             std::string_view name) {
  std::ifstream in(path);
  if (!in.is_open()) {
    throw Error(ErrorCode::InvalidArgument,
                fmt::format("strait's config file {} cannot be read ({}); fix or unset "
                            "STRAIT_CONF_FILE",
                            path, std::strerror(errno)));
  }
  std::optional<std::pair<std::string, std::string>> found;
  std::string line;
  for (int number = 1; std::getline(in, line); ++number) {
    const std::string_view l = trim(line);
    if (l.empty() || l.front() == '#') continue;
    const auto eq = l.find('=');
    const std::string where = fmt::format("{}:{}", path, number);
    if (eq == std::string_view::npos) {
      throw Error(ErrorCode::InvalidArgument,
                  fmt::format("{}: {:?} is not NAME=VALUE (or a # comment)", where, l));
    }
    const std::string_view key = trim(l.substr(0, eq));
    const auto& table = all();
    if (std::none_of(table.begin(), table.end(), [&](const Param& p) { return p.name == key; })) {
      throw Error(
          ErrorCode::InvalidArgument,
          fmt::format("{}: {} is not a strait parameter (`strait info` lists them)", where, key));
    }
    if (key == name) found.emplace(std::string(trim(l.substr(eq + 1))), where);  // last one wins
  }
  return found;
}

}  // namespace

std::string_view to_string(Type type) noexcept {
  switch (type) {
    case Type::Int: return "int";
    case Type::Double: return "number";
    case Type::Size: return "size";
    case Type::Bool: return "bool";
    case Type::String: return "string";
    case Type::Path: return "path";
    case Type::Enum: return "enum";
  }
  return "?";
}

std::string_view to_string(Source source) noexcept {
  switch (source) {
    case Source::Default: return "default";
    case Source::Environment: return "environment";
    case Source::ConfigFile: return "config file";
  }
  return "?";
}

const Param& declared(std::string_view name) {
  const auto& table = all();
  const auto it =
      std::find_if(table.begin(), table.end(), [&](const Param& p) { return p.name == name; });
  if (it == table.end()) {
    throw Error(ErrorCode::Internal,
                fmt::format("{} is not declared in core/param_table.cpp", name));
  }
  return *it;
}

std::vector<std::string> undeclared_in_environment() {
  std::vector<std::string> out;
  const auto& table = all();
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    const std::string_view entry(*e);
    const std::string_view name = entry.substr(0, entry.find('='));
    if (!name.starts_with("STRAIT_")) continue;
    if (std::none_of(table.begin(), table.end(), [&](const Param& p) { return p.name == name; })) {
      out.emplace_back(name);
    }
  }
  std::sort(out.begin(), out.end());
  return out;
}

std::string config_file() {
  if (auto named = from_environment("STRAIT_CONF_FILE")) return *named;
  std::error_code ec;
  if (const char* home = std::getenv("HOME"); home != nullptr && *home != '\0') {
    const std::string user = std::string(home) + "/.strait.conf";
    if (std::filesystem::exists(user, ec)) return user;
  }
  if (std::filesystem::exists("/etc/strait.conf", ec)) return "/etc/strait.conf";
  return {};
}

Setting lookup(std::string_view name) {
  Setting s;
  s.param = &declared(name);
  if (auto v = from_environment(name)) {
    s.value = std::move(v);
    s.source = Source::Environment;
    return s;
  }
  if (name == "STRAIT_CONF_FILE") return s;  // names the file: never read from it
  if (const std::string file = config_file(); !file.empty()) {
    if (auto found = from_file(file, name); found && !found->first.empty()) {
      s.value = std::move(found->first);
      s.source = Source::ConfigFile;
      s.origin = std::move(found->second);
    }
  }
  return s;
}

std::optional<std::string> text(std::string_view name) {
  return lookup(name).value;
}

bool is_set(std::string_view name) {
  return lookup(name).value.has_value();
}

bool is_present(std::string_view name) {
  return std::getenv(std::string(declared(name).name).c_str()) != nullptr || is_set(name);
}

std::optional<long long> get_int(std::string_view name, long long min, long long max) {
  const auto v = text(name);
  if (!v) return std::nullopt;
  char* end = nullptr;
  errno = 0;
  const long long n = std::strtoll(v->c_str(), &end, 10);
  if (end == v->c_str() || *end != '\0' || errno != 0 || n < min || n > max) {
    throw bad(name, *v, fmt::format("a whole number from {} to {}", min, max));
  }
  return n;
}

std::optional<double> get_double(std::string_view name, double min, double max) {
  const auto v = text(name);
  if (!v) return std::nullopt;
  char* end = nullptr;
  const double x = std::strtod(v->c_str(), &end);
  if (end == v->c_str() || *end != '\0' || !(x >= min && x <= max)) {
    throw bad(name, *v, fmt::format("a number from {} to {}", min, max));
  }
  return x;
}

std::size_t parse_size(std::string_view text, std::string_view what) {
  const std::string s(text);
  char* end = nullptr;
  errno = 0;
  const unsigned long long n = std::strtoull(s.c_str(), &end, 10);
  const std::string_view suffix(end);
  unsigned shift = 0;
  if (suffix == "K" || suffix == "k") shift = 10;
  if (suffix == "M" || suffix == "m") shift = 20;
  if (suffix == "G" || suffix == "g") shift = 30;
  const bool suffix_ok = suffix.empty() || shift != 0;
  if (s.empty() || s.front() == '-' || end == s.c_str() || !suffix_ok || errno != 0 ||
      n > (std::numeric_limits<std::size_t>::max() >> shift)) {
    throw Error(ErrorCode::InvalidArgument,
                fmt::format("{} is not a size in bytes (a whole number, optionally with K, M or "
                            "G: 4096, 256K, 1M)",
                            what));
  }
  return static_cast<std::size_t>(n) << shift;
}

std::optional<std::size_t> get_size(std::string_view name) {
  const auto v = text(name);
  if (!v) return std::nullopt;
  return parse_size(*v, fmt::format("{}={}", name, *v));
}

bool parse_bool(std::string_view text, std::string_view what) {
  for (std::string_view t : {"1", "true", "yes", "on"}) {
    if (text == t) return true;
  }
  for (std::string_view f : {"0", "false", "no", "off"}) {
    if (text == f) return false;
  }
  throw Error(
      ErrorCode::InvalidArgument,
      fmt::format("{} is not a boolean: use 1, true, yes or on, or 0, false, no or off", what));
}

std::optional<bool> get_bool(std::string_view name) {
  const auto v = text(name);
  if (!v) return std::nullopt;
  return parse_bool(*v, fmt::format("{}={}", name, *v));
}

std::optional<std::string> get_enum(std::string_view name) {
  const Param& p = declared(name);
  auto v = text(name);
  if (!v) return std::nullopt;
  std::string_view rest = p.allowed;
  while (!rest.empty()) {
    const auto comma = rest.find(',');
    if (trim(rest.substr(0, comma)) == *v) return v;
    rest = comma == std::string_view::npos ? std::string_view() : rest.substr(comma + 1);
  }
  throw Error(ErrorCode::InvalidArgument,
              fmt::format("{}={} is not one of {}", name, *v, p.allowed));
}

}  // namespace strait::params
