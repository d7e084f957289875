#include "tools/cli_support.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>

#include "core/error.h"

namespace strait::tools {
namespace {

// One example per command, by its path below `strait` ("" is strait itself).
const std::map<std::string, std::string, std::less<>>& examples() {
  static const std::map<std::string, std::string, std::less<>> table = {
      {"", "strait train --steps 100"},
      {"diagnose", "strait diagnose /tmp/strait-fr"},
      {"info", "strait info --markdown > docs/environment.md"},
      {"plan", "strait plan -n 4 --top 5 --output plan.json"},
      {"run", "strait run -n 4 -- ./train --steps 100"},
      {"schedule", "strait schedule --schedule all -p 4 -m 8"},
      {"train", "strait train --stages 2 --replicas 2 --steps 100"},
      {"tune", "strait tune -n 2 --sizes 4K..4M --output tune.json"},
      {"wan", "sudo strait wan run --ranks-per-site 2 -- strait train --replicas 4"},
      {"wan down", "sudo strait wan down"},
      {"wan exec", "sudo strait wan exec --site 1 --master-port 29600 -- strait train --join"},
      {"wan run", "sudo strait wan run --ranks-per-site 2 -- strait train --replicas 4"},
      {"wan status", "sudo strait wan status"},
      {"wan up", "sudo strait wan up --sites 2 --rate 100mbit"},
  };
  return table;
}

std::string path_of(const CLI::App& cmd) {
  std::string path;
  for (const CLI::App* a = &cmd; a->get_parent() != nullptr; a = a->get_parent()) {
    path = path.empty() ? a->get_name() : a->get_name() + " " + path;
  }
  return path;
}

void add_example(CLI::App& cmd) {
  const auto it = examples().find(path_of(cmd));
  if (it == examples().end()) {
    throw Error(ErrorCode::Internal,
                fmt::format("`strait {}` has no example in tools/cli_support.cpp", path_of(cmd)));
  }
  std::string footer = cmd.get_footer();
  while (!footer.empty() && footer.back() == '\n') footer.pop_back();
  cmd.footer(fmt::format("{}{}Example:\n  {}", footer, footer.empty() ? "\n" : "\n\n", it->second));
  for (CLI::App* sub : cmd.get_subcommands({})) add_example(*sub);
}

std::vector<std::string> option_names(const CLI::App& cmd) {
  std::vector<std::string> names;
  for (const CLI::Option* o : cmd.get_options({})) {
    for (const auto& l : o->get_lnames()) names.push_back("--" + l);
    for (const auto& s : o->get_snames()) names.push_back("-" + s);
  }
  return names;
}

std::vector<std::string> subcommand_names(const CLI::App& cmd) {
  std::vector<std::string> names;
  for (const CLI::App* s : cmd.get_subcommands({})) names.push_back(s->get_name());
  return names;
}

// "did you mean X?" for each word cmd did not take that is close to one of its names.
std::string suggestions(const CLI::App& cmd) {
  std::string out;
  for (const std::string& word : cmd.remaining()) {
    const bool dashed = word.size() > 1 && word.front() == '-';
    // "--name=value" is the option --name.
    const std::string typed = dashed ? word.substr(0, word.find('=')) : word;
    const auto near = closest_name(typed, dashed ? option_names(cmd) : subcommand_names(cmd));
    if (!near) continue;
    const std::string where =
        fmt::format("`strait{}{}`", cmd.get_parent() ? " " : "", path_of(cmd));
    out += fmt::format("did you mean {}? ({} is not {} of {})\n", *near, typed,
                       dashed ? "an option" : "a command", where);
  }
  return out;
}

}  // namespace

std::size_t edit_distance(std::string_view a, std::string_view b) {
  // Optimal string alignment: Levenshtein plus the swap of two neighbours ("trian" -> "train").
  std::vector<std::vector<std::size_t>> d(a.size() + 1, std::vector<std::size_t>(b.size() + 1));
  for (std::size_t i = 0; i <= a.size(); ++i) d[i][0] = i;
  for (std::size_t j = 0; j <= b.size(); ++j) d[0][j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    for (std::size_t j = 1; j <= b.size(); ++j) {
      const std::size_t cost = a[i - 1] == b[j - 1] ? 0 : 1;
      d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + cost});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1]) {
        d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
      }
    }
  }
  return d[a.size()][b.size()];
}

std::optional<std::string> closest_name(std::string_view typed,
                                        const std::vector<std::string>& names) {
  // A third of the word, at least 1 and at most 3 edits: "--step" finds "--steps", "-x" nothing.
  const std::size_t letters = typed.size() - std::min(typed.find_first_not_of('-'), typed.size());
  const std::size_t limit = std::clamp<std::size_t>(letters / 3, 1, 3);
  std::optional<std::string> best;
  std::size_t best_distance = limit + 1;
  for (const std::string& n : names) {
    const std::size_t d = edit_distance(typed, n);
    if (d < best_distance && d > 0) {
      best = n;
      best_distance = d;
    }
  }
  return best;
}

void add_examples(CLI::App& app) {
  add_example(app);
}

std::string command_list(const CLI::App& cmd) {
  const std::string path = path_of(cmd);
  const std::string name = path.empty() ? "strait" : "strait " + path;
  std::string out = fmt::format(
      "{}\n\nUsage: {} COMMAND [OPTIONS]   ({} COMMAND --help for more)\n\n"
      "Commands:\n",
      cmd.get_description(), name, name);
  std::size_t width = 0;
  for (const CLI::App* s : cmd.get_subcommands({})) width = std::max(width, s->get_name().size());
  for (const CLI::App* s : cmd.get_subcommands({})) {
    const std::string d = s->get_description();
    out += fmt::format("  {:<{}}  {}\n", s->get_name(), width, d.substr(0, d.find('\n')));
  }
  if (const auto it = examples().find(path); it != examples().end()) {
    out += fmt::format("\nExample:\n  {}\n", it->second);
  }
  return out;
}

const CLI::App& deepest_parsed(const CLI::App& app) {
  for (const CLI::App* s : app.get_subcommands({})) {
    if (s->parsed()) return deepest_parsed(*s);
  }
  return app;
}

void suggest_on_failure(CLI::App& app) {
  app.failure_message([](const CLI::App* top, const CLI::Error& e) {
    return fmt::format("{}\n{}Run with --help for more information.\n", e.what(),
                       suggestions(deepest_parsed(*top)));
  });
}

}  // namespace strait::tools
