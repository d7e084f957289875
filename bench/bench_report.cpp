#include "bench/bench_report.h"

#include <fmt/format.h>

#include <nlohmann/json.hpp>

namespace strait::bench {
namespace {

constexpr const char* kLead = "{:>12}  {:>12}  {:>6}  {:>6}  {:>6}";
constexpr int kLeadWidth = 12 + 2 + 12 + 2 + 6 + 2 + 6 + 2 + 6;
constexpr const char* kVariant = "  {:>9}  {:>7}  {:>7}  {:>6}";
constexpr int kVariantWidth = 2 + 9 + 2 + 7 + 2 + 7 + 2 + 6;
// --bound: the copy rate, then per variant the bound busbw and busbw / bound.
constexpr const char* kCopy = "  {:>7}";
constexpr const char* kBound = "  {:>7}  {:>5}";
constexpr int kBoundWidth = 2 + 7 + 2 * (2 + 7 + 2 + 5);

std::string variant(const std::optional<Measurement>& m) {
  if (!m) return fmt::format(kVariant, "n/a", "n/a", "n/a", "n/a");
  return fmt::format("  {:>9.2f}  {:>7.2f}  {:>7.2f}  {:>6}", m->time_us, m->algbw_gbs,
                     m->busbw_gbs, m->wrong ? fmt::format("{}", *m->wrong) : "N/A");
}

std::string bound_columns(const std::optional<Measurement>& m) {
  if (!m || !m->bound_gbs) return fmt::format(kBound, "n/a", "n/a");
  const auto f = m->of_bound();
  return fmt::format(kBound, fmt::format("{:.2f}", *m->bound_gbs),
                     f ? fmt::format("{:.2f}", *f) : "-");
}

nlohmann::json variant_json(const std::optional<Measurement>& m) {
  if (!m) return nullptr;
  nlohmann::json j{{"time_us", m->time_us},
                   {"algbw_gbs", m->algbw_gbs},
                   {"busbw_gbs", m->busbw_gbs},
                   {"wrong", m->wrong ? nlohmann::json(*m->wrong) : nlohmann::json(nullptr)}};
  if (m->bound_gbs) {
    j["bound_busbw_gbs"] = *m->bound_gbs;
    const auto f = m->of_bound();
    j["of_bound"] = f ? nlohmann::json(*f) : nlohmann::json(nullptr);
  }
  return j;
}

}  // namespace

Measurement measure(std::size_t bytes, double time_us, double bus_factor,
                    std::optional<long long> wrong) {
  Measurement m{.time_us = time_us,
                .algbw_gbs = 0,
                .busbw_gbs = 0,
                .wrong = wrong,
                .bound_gbs = std::nullopt};
  if (time_us > 0) {
    m.algbw_gbs = static_cast<double>(bytes) / (time_us * 1e3);  // B/us = 1e-3 GB/s
    m.busbw_gbs = m.algbw_gbs * bus_factor;
  }
  return m;
}

std::string table_header(bool bound) {
  const std::string lead_blank(kLeadWidth - 1, ' ');
  std::string h = fmt::format("#{}  {:^{}}{:^{}}", lead_blank, "out-of-place", kVariantWidth - 2,
                              "in-place", kVariantWidth);
  if (bound) h += fmt::format("{:^{}}", "memory bound (oop, ip)", kBoundWidth);
  h += '\n';
  const auto head = [](const char* a, const char* b, const char* c, const char* d, const char* e) {
    return fmt::format("#{:>11}  {:>12}  {:>6}  {:>6}  {:>6}", a, b, c, d, e);
  };
  h += head("size", "count", "type", "redop", "root");
  for (int i = 0; i < 2; ++i) h += fmt::format(kVariant, "time", "algbw", "busbw", "#wrong");
  if (bound) {
    h += fmt::format(kCopy, "copy");
    for (int i = 0; i < 2; ++i) h += fmt::format(kBound, "bound", "of_bd");
  }
  h += '\n';
  h += head("(B)", "(elements)", "", "", "");
  for (int i = 0; i < 2; ++i) h += fmt::format(kVariant, "(us)", "(GB/s)", "(GB/s)", "");
  if (bound) {
    h += fmt::format(kCopy, "(GB/s)");
    for (int i = 0; i < 2; ++i) h += fmt::format(kBound, "(GB/s)", "");
  }
  h += '\n';
  return h;
}

std::string table_row(const Row& r) {
  std::string line = fmt::format(kLead, r.bytes, r.count, r.type, r.redop, r.root) +
                     variant(r.out_of_place) + variant(r.in_place);
  if (r.copy_gbs) {
    line += fmt::format(kCopy, fmt::format("{:.2f}", *r.copy_gbs)) + bound_columns(r.out_of_place) +
            bound_columns(r.in_place);
  }
  return line;
}

double average_busbw(const std::vector<Row>& rows) {
  double sum = 0;
  int n = 0;
  for (const auto& r : rows) {
    for (const auto* m : {&r.out_of_place, &r.in_place}) {
      if (*m) {
        sum += (*m)->busbw_gbs;
        ++n;
      }
    }
  }
  return n == 0 ? 0.0 : sum / n;
}

long long total_wrong(const std::vector<Row>& rows) {
  long long n = 0;
  for (const auto& r : rows) {
    for (const auto* m : {&r.out_of_place, &r.in_place}) {
      if (*m && (*m)->wrong) n += *(*m)->wrong;
    }
  }
  return n;
}

nlohmann::json to_json(const Row& r) {
  nlohmann::json j{{"bytes", r.bytes},
                   {"count", r.count},
                   {"type", r.type},
                   {"redop", r.redop},
                   {"root", r.root},
                   {"out_of_place", variant_json(r.out_of_place)},
                   {"in_place", variant_json(r.in_place)}};
  if (r.copy_gbs) j["copy_gbs"] = *r.copy_gbs;
  return j;
}

}  // namespace strait::bench
