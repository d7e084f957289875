// The parameter registry (core/params.h): the table, where a value comes from (environment, then
// config file, then default), the config file's format and errors, and the typed getters.
#include "core/params.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <algorithm>
#include <fstream>
#include <string>

#include "comm/communicator.h"
#include "core/error.h"
#include "tests/common/expect_error.h"
#include "tests/common/scoped_env.h"
#include "tests/common/temp_dir.h"

namespace {

using strait::ErrorCode;
using strait::test::error_of;
using strait::test::expect_error;
using strait::test::ScopedEnv;
using strait::test::TempDir;
namespace params = strait::params;

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

// A config file in its own folder, named by STRAIT_CONF_FILE for the test's lifetime; HOME points
// at the folder too, so that the user's ~/.strait.conf never takes part.
class ConfigFile {
 public:
  explicit ConfigFile(const std::string& text)
      : path_((dir_.path() / "strait.conf").string()),
        file_("STRAIT_CONF_FILE", path_),
        home_("HOME", dir_.str()) {
    std::ofstream(path_) << text;
  }
  [[nodiscard]] const std::string& path() const { return path_; }

 private:
  TempDir dir_;
  std::string path_;
  ScopedEnv file_;
  ScopedEnv home_;
};

TEST(Params, TheTableIsSortedUniqueAndComplete) {
  const auto all = params::all();
  ASSERT_FALSE(all.empty());
  for (std::size_t i = 0; i < all.size(); ++i) {
    EXPECT_TRUE(all[i].name.starts_with("STRAIT_")) << all[i].name;
    EXPECT_FALSE(all[i].doc.empty()) << all[i].name;
    EXPECT_FALSE(all[i].layer.empty()) << all[i].name;
    if (i > 0) {
      EXPECT_LT(all[i - 1].name, all[i].name);
    }
  }
  EXPECT_EQ(params::declared("STRAIT_TIMEOUT_S").type, params::Type::Double);
  expect_error(ErrorCode::Internal, [] { (void)params::declared("STRAIT_NO_SUCH_THING"); });
  expect_error(ErrorCode::Internal, [] { (void)params::text("STRAIT_NO_SUCH_THING"); });
}

TEST(Params, UnsetIsTheDefault) {
  const ConfigFile file("# nothing set\n");
  ::unsetenv("STRAIT_STREAMS");
  const params::Setting s = params::lookup("STRAIT_STREAMS");
  EXPECT_FALSE(s.value);
  EXPECT_EQ(s.source, params::Source::Default);
  EXPECT_FALSE(params::is_set("STRAIT_STREAMS"));
  EXPECT_EQ(params::get_int("STRAIT_STREAMS", 1, 8), std::nullopt);
}

TEST(Params, TheEnvironmentWinsOverTheFileWhichWinsOverTheDefault) {
  const ConfigFile file(
      "# a comment\n\n  STRAIT_STREAMS = 3  \nSTRAIT_TIMEOUT_S=12.5\nSTRAIT_SITES=0,0,1,1\n");
  ::unsetenv("STRAIT_STREAMS");
  ::unsetenv("STRAIT_SITES");
  const ScopedEnv timeout("STRAIT_TIMEOUT_S", "7");
  const params::Setting streams = params::lookup("STRAIT_STREAMS");
  EXPECT_EQ(streams.value, "3");
  EXPECT_EQ(streams.source, params::Source::ConfigFile);
  EXPECT_EQ(streams.origin, file.path() + ":3");
  const params::Setting t = params::lookup("STRAIT_TIMEOUT_S");
  EXPECT_EQ(t.value, "7");
  EXPECT_EQ(t.source, params::Source::Environment);
  EXPECT_EQ(params::text("STRAIT_SITES"), "0,0,1,1");
  // An empty value in the environment is not a setting: the file's applies.
  const ScopedEnv empty("STRAIT_STREAMS", "");
  EXPECT_EQ(params::text("STRAIT_STREAMS"), "3");
  EXPECT_TRUE(params::is_present("STRAIT_STREAMS"));
  // Read at every access: a change takes effect at once, in the file as in the environment.
  std::ofstream(file.path()) << "STRAIT_STREAMS=5\n";
  EXPECT_EQ(params::text("STRAIT_STREAMS"), "5");
}

TEST(Params, AValueFromTheFileReachesItsReader) {
  const ConfigFile file("STRAIT_STREAMS=4\n");
  ::unsetenv("STRAIT_STREAMS");
  EXPECT_EQ(strait::comm::CommOptions::default_streams(), 4);
  const ScopedEnv env("STRAIT_STREAMS", "2");
  EXPECT_EQ(strait::comm::CommOptions::default_streams(), 2);
}

TEST(Params, ConfigFileErrorsNameTheFileAndLine) {
  {
    const ConfigFile file("STRAIT_STREAMS=2\nnot a setting\n");
    const std::string e = error_of([] { (void)params::text("STRAIT_SITES"); });
    EXPECT_TRUE(contains(e, ":2: \"not a setting\" is not NAME=VALUE")) << e;
  }
  {
    const ConfigFile file("STRAIT_TIMOUT_S=3\n");
    const std::string e = error_of([] { (void)params::text("STRAIT_SITES"); });
    EXPECT_TRUE(contains(e, ":1: STRAIT_TIMOUT_S is not a strait parameter")) << e;
  }
  const ScopedEnv missing("STRAIT_CONF_FILE", "/nonexistent/strait.conf");
  const std::string e = error_of([] { (void)params::text("STRAIT_SITES"); });
  EXPECT_TRUE(contains(e, "/nonexistent/strait.conf cannot be read")) << e;
  EXPECT_EQ(params::config_file(), "/nonexistent/strait.conf");
}

TEST(Params, WithoutStraitConfFileTheHomeFileIsRead) {
  const TempDir home;
  const ScopedEnv h("HOME", home.str());
  ::unsetenv("STRAIT_CONF_FILE");
  ::unsetenv("STRAIT_SPIN_US");
  std::ofstream(home.path() / ".strait.conf") << "STRAIT_SPIN_US=9\n";
  EXPECT_EQ(params::config_file(), (home.path() / ".strait.conf").string());
  EXPECT_EQ(params::get_int("STRAIT_SPIN_US", 0, 100), 9);
}

TEST(Params, TypedGettersParseAndNameBadValues) {
  const ConfigFile file("");
  {
    const ScopedEnv v("STRAIT_STREAMS", "9");
    const std::string e = error_of([] { (void)params::get_int("STRAIT_STREAMS", 1, 8); });
    EXPECT_TRUE(contains(e, "STRAIT_STREAMS=9 is not a whole number from 1 to 8")) << e;
  }
  {
    const ScopedEnv v("STRAIT_TIMEOUT_S", "2.5");
    EXPECT_EQ(params::get_double("STRAIT_TIMEOUT_S", 0.001, 1e6), 2.5);
    const ScopedEnv bad("STRAIT_TIMEOUT_S", "2.5s");
    const std::string e = error_of([] { (void)params::get_double("STRAIT_TIMEOUT_S", 0, 1); });
    EXPECT_TRUE(contains(e, "STRAIT_TIMEOUT_S=2.5s is not a number")) << e;
  }
  {
    const ScopedEnv v("STRAIT_SINGLE_COPY_MIN", "256K");
    EXPECT_EQ(params::get_size("STRAIT_SINGLE_COPY_MIN"), 256U << 10);
    EXPECT_EQ(params::parse_size("3G", "x"), std::size_t{3} << 30);
    EXPECT_EQ(params::parse_size("17", "x"), 17U);
    for (const char* bad : {"", "-1", "1T", "K", "1.5M"}) {
      const std::string e = error_of([&] { (void)params::parse_size(bad, "X=bad"); });
      EXPECT_TRUE(contains(e, "X=bad is not a size in bytes")) << bad << ": " << e;
    }
  }
  {
    const ScopedEnv v("STRAIT_REQUIRE_GPU", "yes");
    EXPECT_EQ(params::get_bool("STRAIT_REQUIRE_GPU"), true);
    const ScopedEnv off("STRAIT_REQUIRE_GPU", "off");
    EXPECT_EQ(params::get_bool("STRAIT_REQUIRE_GPU"), false);
    const ScopedEnv bad("STRAIT_REQUIRE_GPU", "maybe");
    const std::string e = error_of([] { (void)params::get_bool("STRAIT_REQUIRE_GPU"); });
    EXPECT_TRUE(contains(e, "STRAIT_REQUIRE_GPU=maybe is not a boolean")) << e;
  }
  {
    const ScopedEnv v("STRAIT_SIMD", "avx2");
    EXPECT_EQ(params::get_enum("STRAIT_SIMD"), "avx2");
    const ScopedEnv bad("STRAIT_SIMD", "avx3");
    const std::string e = error_of([] { (void)params::get_enum("STRAIT_SIMD"); });
    EXPECT_EQ(e, "InvalidArgument: STRAIT_SIMD=avx3 is not one of scalar, avx2, avx512");
  }
}

TEST(Params, UndeclaredVariablesInTheEnvironmentAreListed) {
  const ScopedEnv typo("STRAIT_TIMOUT_S", "3");
  const auto names = params::undeclared_in_environment();
  EXPECT_NE(std::find(names.begin(), names.end(), "STRAIT_TIMOUT_S"), names.end());
  EXPECT_EQ(std::find(names.begin(), names.end(), "STRAIT_CONF_FILE"), names.end());
}

}  // namespace
