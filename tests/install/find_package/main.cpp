// Out-of-tree consumer through find_package(strait): on every rank of `strait run -n N`, a
// blocking f64 allreduce and a non-blocking i32 one, each checked against its closed form, and a
// strait::Error thrown inside libstrait.so caught here by type (its typeinfo must be exported).
#include <strait/comm/communicator.h>
#include <strait/core/error.h>
#include <strait/kernels/dtype.h>

#include <cstdint>
#include <cstdio>
#include <vector>

namespace {

using strait::kernels::DType;
using strait::kernels::ReduceOp;

int check(bool ok, const char* what, int rank) {
  if (!ok) std::fprintf(stderr, "rank %d: %s: wrong result\n", rank, what);
  return ok ? 0 : 1;
}

}  // namespace

int main() {
  try {
    auto comm = strait::comm::Communicator::from_env();
    const int rank = comm->rank();
    const int size = comm->size();
    constexpr std::size_t kCount = 4099;  // not a multiple of any segment or rank count

    // x[i] = (rank + 1) * (i + 1): the sum over ranks is (i + 1) * P(P + 1)/2, exact in f64.
    std::vector<double> x(kCount);
    for (std::size_t i = 0; i < kCount; ++i) x[i] = (rank + 1.0) * static_cast<double>(i + 1);
    comm->allreduce(x.data(), x.data(), kCount, DType::F64, ReduceOp::Sum);
    bool ok = true;
    const double ranks_sum = size * (size + 1) / 2.0;
    for (std::size_t i = 0; i < kCount; ++i)
      ok = ok && x[i] == static_cast<double>(i + 1) * ranks_sum;
    int failures = check(ok, "allreduce f64 sum", rank);

    // Max of y[i] = i * (rank + 1) - rank over ranks is i * P - (P - 1) for i >= 1, 0 at i = 0.
    std::vector<std::int32_t> y(kCount);
    std::vector<std::int32_t> y_out(kCount, -1);
    for (std::size_t i = 0; i < kCount; ++i)
      y[i] = static_cast<std::int32_t>(i) * (rank + 1) - rank;
    strait::comm::Work work =
        comm->iallreduce(y.data(), y_out.data(), kCount, DType::I32, ReduceOp::Max);
    work.wait();
    ok = y_out[0] == 0;
    for (std::size_t i = 1; i < kCount; ++i) {
      ok = ok && y_out[i] == static_cast<std::int32_t>(i) * size - (size - 1);
    }
    failures += check(ok, "iallreduce i32 max", rank);

    // A root outside the communicator is InvalidArgument, thrown before anything is sent.
    bool caught = false;
    try {
      comm->broadcast(x.data(), kCount, DType::F64, size);
    } catch (const strait::Error& e) {
      caught = e.code() == strait::ErrorCode::InvalidArgument;
    }
    failures += check(caught, "broadcast to a root out of range throws InvalidArgument", rank);

    if (failures == 0) {
      std::printf("rank %d of %d: allreduce f64 sum, iallreduce i32 max and the error path OK\n",
                  rank, size);
    }
    return failures == 0 ? 0 : 1;
  } catch (const strait::Error& e) {
    std::fprintf(stderr, "strait error: %s\n", e.what());
    return 1;
  }
}
