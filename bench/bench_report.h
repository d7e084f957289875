// strait-bench's output: nccl-tests' table (size, count, type, redop, root, then time, algbw,
// busbw and #wrong out of place and in place), its "# Avg bus bandwidth" footer, and the same
// rows as JSON. With strait-bench --bound (bench/bound.h) each row also shows the copy rate
// measured just before it and, per variant, the bound busbw and busbw / bound.
#pragma once

#include <cstddef>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string>
#include <vector>

namespace strait::bench {

// One variant (out of place or in place) of one size.
struct Measurement {
  double time_us = 0;
  double algbw_gbs = 0;             // size / time, GB/s (1e9 bytes)
  double busbw_gbs = 0;             // algbw * the collective's factor
  std::optional<long long> wrong;   // wrong elements over all ranks; nullopt when not checked
  std::optional<double> bound_gbs;  // --bound: the bound busbw (GB/s); 0 when it has none
  // busbw / bound; nullopt without a bound.
  [[nodiscard]] std::optional<double> of_bound() const {
    if (!bound_gbs || *bound_gbs <= 0) return std::nullopt;
    return busbw_gbs / *bound_gbs;
  }
};

struct Row {
  std::size_t bytes = 0;
  std::size_t count = 0;
  std::string type;
  std::string redop;                        // "none" when the collective does not reduce
  int root = -1;                            // -1 when it has none
  std::optional<Measurement> out_of_place;  // nullopt: strait has no such form
  std::optional<Measurement> in_place;
  std::optional<double> copy_gbs;  // --bound: per-rank copy rate, all ranks copying (GB/s)
};

// Fills algbw and busbw from bytes and time.
Measurement measure(std::size_t bytes, double time_us, double bus_factor,
                    std::optional<long long> wrong);

// `bound`: with the --bound columns.
std::string table_header(bool bound = false);
std::string table_row(const Row& r);
// Mean busbw over every measured variant of every row (nccl-tests' "Avg bus bandwidth").
double average_busbw(const std::vector<Row>& rows);
// Total wrong elements, over rows and variants.
long long total_wrong(const std::vector<Row>& rows);

nlohmann::json to_json(const Row& r);

}  // namespace strait::bench
