// The parameter registry: every STRAIT_* variable is declared once (core/param_table.cpp: name,
// type, default, allowed values, one-line doc, layer) and read only through here, in the shape of
// NCCL's NCCL_PARAM table and UCC's config tables. scripts/check-params.sh fails on a getenv of a
// STRAIT_ name anywhere else; `strait info` prints every parameter's effective value and its
// source; docs/environment.md is generated from the table (`strait info --markdown`).
//
// Where a value comes from, first found wins: the environment (set and non-empty), then the
// config file (STRAIT_CONF_FILE, else ~/.strait.conf, else /etc/strait.conf; lines NAME=VALUE,
// '#' starts a comment line), then the parameter's default (nullopt from the getters: the reader
// applies it, so that "unset" stays distinguishable). Both are read at every access, so a test's
// setenv takes effect at once.
//
// Errors: InvalidArgument naming the variable, the value and what is allowed (a bad value, a bad
// config file line, a config file naming an undeclared parameter); Internal when code asks for a
// name the table does not declare.
// Thread-safety: reads the environment (getenv), which races with setenv in other threads.
#pragma once

#include <cstddef>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace strait::params {

enum class Type { Int, Double, Size, Bool, String, Path, Enum };
std::string_view to_string(Type type) noexcept;

struct Param {
  std::string_view name;
  Type type;
  std::string_view default_text;  // as shown to users; "" when unset means "not set"
  std::string_view allowed;       // Enum: "a, b, c"; otherwise the range in words, or ""
  std::string_view doc;           // one line
  std::string_view layer;         // core, kernels, offload, comm, ..., tests, scripts, python
};

// Every declared parameter, sorted by name.
std::span<const Param> all() noexcept;
// The declaration of name; Internal when there is none (a programming error).
const Param& declared(std::string_view name);

enum class Source { Default, Environment, ConfigFile };
std::string_view to_string(Source source) noexcept;

struct Setting {
  const Param* param = nullptr;
  std::optional<std::string> value;  // nullopt: not set (the default applies)
  Source source = Source::Default;
  std::string origin;  // "FILE:LINE" for ConfigFile, "" otherwise
};

// The effective setting of a declared parameter (see the precedence above).
Setting lookup(std::string_view name);
// Its value when set in the environment or the config file; nullopt otherwise.
std::optional<std::string> text(std::string_view name);
bool is_set(std::string_view name);
// Set at all, even to an empty value (in the environment or the config file).
bool is_present(std::string_view name);
// STRAIT_* variables set in the environment that the registry does not declare (typos, or
// variables of another version), sorted.
std::vector<std::string> undeclared_in_environment();
// The config file in force ("" when none): STRAIT_CONF_FILE, ~/.strait.conf or /etc/strait.conf.
std::string config_file();

// Typed getters: nullopt when not set; InvalidArgument "NAME=VALUE is not ..." on a bad value.
std::optional<long long> get_int(std::string_view name, long long min, long long max);
std::optional<double> get_double(std::string_view name, double min, double max);
// Bytes: a whole number with an optional K, M or G suffix (powers of 1024).
std::optional<std::size_t> get_size(std::string_view name);
// 1/0, true/false, yes/no, on/off.
std::optional<bool> get_bool(std::string_view name);
// One of the declaration's allowed values ("NAME=VALUE is not one of a, b, c").
std::optional<std::string> get_enum(std::string_view name);

// Parsers the getters use, for a value from elsewhere: `what` names it in errors ("NAME=VALUE").
std::size_t parse_size(std::string_view text, std::string_view what);
bool parse_bool(std::string_view text, std::string_view what);

}  // namespace strait::params
