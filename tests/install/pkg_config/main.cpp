// Out-of-tree consumer through pkg-config: on every rank of `strait run -n N`, an f32 allreduce
// averaging the ranks' vectors, checked against its closed form (exact: small integers and a
// power-of-two world, or else within one rounding of the sum), after a barrier.
#include <strait/comm/communicator.h>

#include <cmath>
#include <cstdio>
#include <vector>

int main() {
  try {
    auto comm = strait::comm::Communicator::from_env();
    const int rank = comm->rank();
    const int size = comm->size();
    comm->barrier();

    // x[i] = i + 2 * rank: the average over ranks is i + (P - 1).
    constexpr std::size_t kCount = 1000;
    std::vector<float> x(kCount);
    for (std::size_t i = 0; i < kCount; ++i) x[i] = static_cast<float>(i) + 2.0F * rank;
    std::vector<float> avg(kCount);
    comm->allreduce(x.data(), avg.data(), kCount, strait::kernels::DType::F32,
                    strait::kernels::ReduceOp::Avg);
    std::size_t wrong = 0;
    for (std::size_t i = 0; i < kCount; ++i) {
      const double expected = static_cast<double>(i) + (size - 1);
      if (std::abs(avg[i] - expected) > 1e-6 * expected) ++wrong;
    }
    if (wrong != 0) {
      std::fprintf(stderr, "rank %d: allreduce f32 avg: %zu of %zu elements wrong\n", rank, wrong,
                   kCount);
      return 1;
    }
    std::printf("rank %d of %d: allreduce f32 avg OK\n", rank, size);
    return 0;
  } catch (const strait::Error& e) {
    std::fprintf(stderr, "strait error: %s\n", e.what());
    return 1;
  }
}
