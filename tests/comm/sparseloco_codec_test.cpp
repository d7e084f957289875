// SparseLoCo's message (comm/compress/sparseloco_codec.h) against a naive reference written here:
// the size is the documented formula, the kept elements are each chunk's top k by magnitude
// (ties: the lower index), and each decodes to sign * s * (2j + 1) / M with s the mean kept |x|.
#include "comm/compress/sparseloco_codec.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "comm/compress/codec_factory.h"
#include "core/error.h"

namespace strait::comm {
namespace {

std::size_t formula_bytes(std::size_t n, double density, std::size_t chunk, int bits) {
  int ib = 1;
  while ((std::size_t{1} << ib) < chunk) ++ib;
  std::size_t total = 0;
  for (std::size_t first = 0; first < n; first += chunk) {
    const std::size_t len = std::min(chunk, n - first);
    const auto k = std::min(len, static_cast<std::size_t>(std::ceil(density * double(len))));
    total += 4 + (k * static_cast<std::size_t>(ib + bits) + 7) / 8;
  }
  return total;
}

std::vector<float> sample(std::size_t n) {
  std::vector<float> x(n);
  for (std::size_t i = 0; i < n; ++i) {
    x[i] = static_cast<float>(std::sin(0.37 * double(i)) * (1.0 + double(i % 11)));
  }
  return x;
}

TEST(SparseLocoCodec, EncodedBytesAreTheFormatsFormula) {
  for (const std::size_t n : {1UL, 7UL, 100UL, 4096UL, 4097UL, 10000UL, 123457UL}) {
    for (const double d : {0.005, 0.02, 0.3, 1.0}) {
      for (const std::size_t chunk : {2UL, 64UL, 4096UL, 5000UL}) {
        for (const int bits : {2, 3, 8}) {
          const SparseLocoCodec c({d, chunk, bits});
          EXPECT_EQ(c.encoded_bytes(n), formula_bytes(n, d, chunk, bits))
              << n << " " << d << " " << chunk << " " << bits;
        }
      }
    }
  }
  // The defaults: 82 of 4096 kept, 14 bits each: 4 + 144 bytes per chunk.
  EXPECT_EQ(SparseLocoCodec().encoded_bytes(4096 * 3), 3U * 148U);
}

TEST(SparseLocoCodec, KeepsEachChunksTopKAsTwoBitCodesOfTheMeanMagnitude) {
  for (const int bits : {2, 3}) {
    const std::size_t n = 1000, chunk = 256;
    const double density = 0.05;
    SparseLocoCodec c({density, chunk, bits});
    std::vector<float> x = sample(n);
    x[3] = x[4] = 100.0f;  // a tie: both kept
    x[5] = -100.0f;
    std::vector<std::byte> bytes(c.encoded_bytes(n));
    c.encode(x, bytes);
    std::vector<float> out(n, 7.0f);
    c.decode(bytes, out);
    const int m = 1 << (bits - 1);
    for (std::size_t first = 0; first < n; first += chunk) {
      const std::size_t len = std::min(chunk, n - first);
      const auto k = static_cast<std::size_t>(std::ceil(density * double(len)));
      std::vector<std::size_t> idx(len);
      std::iota(idx.begin(), idx.end(), 0);
      std::stable_sort(idx.begin(), idx.end(), [&](std::size_t a, std::size_t b) {
        return std::fabs(x[first + a]) > std::fabs(x[first + b]);
      });
      idx.resize(k);
      double sum = 0;
      for (const std::size_t i : idx) sum += std::fabs(x[first + i]);
      const auto s = static_cast<float>(sum / double(k));
      std::vector<bool> kept(len, false);
      for (const std::size_t i : idx) {
        kept[i] = true;
        const float v = x[first + i];
        const int j = std::min(m - 1, static_cast<int>(std::floor(std::fabs(v) / s * m / 2)));
        const float want = std::copysign(s * float(2 * j + 1) / float(m), v);
        EXPECT_FLOAT_EQ(out[first + i], want) << "bits " << bits << " element " << first + i;
      }
      for (std::size_t i = 0; i < len; ++i) {
        if (!kept[i]) {
          EXPECT_EQ(out[first + i], 0.0f) << "element " << first + i;
        }
      }
    }
    // decode_add adds the same values.
    std::vector<float> acc(n, 1.0f);
    c.decode_add(bytes, acc);
    for (std::size_t i = 0; i < n; ++i) EXPECT_FLOAT_EQ(acc[i], 1.0f + out[i]);
  }
}

TEST(SparseLocoCodec, FactorySpecRoundTripsAndBadArgumentsAreNamed) {
  const auto c = make_codec_from_spec("sparseloco:density=0.01,chunk=1024");
  EXPECT_EQ(c->spec(), "sparseloco:density=0.01,chunk=1024,bits=2");
  EXPECT_EQ(make_codec_from_spec(c->spec())->spec(), c->spec());
  EXPECT_TRUE(c->needs_error_feedback());
  EXPECT_EQ(c->granularity(), 1024U);
  for (const char* bad : {"sparseloco:density=0", "sparseloco:density=1.5", "sparseloco:chunk=1",
                          "sparseloco:bits=1", "sparseloco:bits=9", "sparseloco:block=4"}) {
    EXPECT_THROW((void)make_codec_from_spec(bad), Error) << bad;
  }
  std::vector<float> x{1.0f, NAN};
  std::vector<std::byte> b(c->encoded_bytes(2));
  EXPECT_THROW(c->encode(x, b), Error);
}

}  // namespace
}  // namespace strait::comm
