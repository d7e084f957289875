#include "capi/arguments.h"

#include <fmt/format.h>

#include <limits>

#include "core/error.h"
#include "kernels/device_memory.h"

namespace strait::capi {

namespace {

// The last field of each struct's first version: its first_size is the offset past it.
constexpr std::size_t kConfigV1 = offsetof(straitConfig_t, tune) + sizeof(const char*);
constexpr std::size_t kStoreV1 = offsetof(straitStore_t, wait) + sizeof(void (*)());
constexpr std::size_t kCompressionV1 =
    offsetof(straitCompression_t, matrixCount) + sizeof(std::int64_t);

constexpr std::int64_t kMaxTimeoutMs = 1'000'000'000;

[[noreturn]] void invalid(const std::string& message) {
  throw Error(ErrorCode::InvalidArgument, message);
}

}  // namespace

StructInfo StructInfo::config() {
  return {"straitConfig_t", "STRAIT_CONFIG_INITIALIZER", STRAIT_CONFIG_MAGIC, kConfigV1,
          sizeof(straitConfig_t)};
}
StructInfo StructInfo::store() {
  return {"straitStore_t", "STRAIT_STORE_INITIALIZER", STRAIT_STORE_MAGIC, kStoreV1,
          sizeof(straitStore_t)};
}
StructInfo StructInfo::compression() {
  return {"straitCompression_t", "STRAIT_COMPRESSION_INITIALIZER", STRAIT_COMPRESSION_MAGIC,
          kCompressionV1, sizeof(straitCompression_t)};
}

std::size_t check_versioned(const void* in, std::size_t size, unsigned magic,
                            const StructInfo& info, const char* function) {
  if (in == nullptr) invalid(fmt::format("{}: the {} is NULL", function, info.name));
  if (magic != info.magic) {
    invalid(fmt::format(
        "{}: the {} was not set up with {} (its magic is {:#x}, not {:#x}): "
        "initialise it with `{} x = {};`",
        function, info.name, info.initializer, magic, info.magic, info.name, info.initializer));
  }
  if (size < info.first_size) {
    invalid(
        fmt::format("{}: the {}'s size is {} bytes, less than its first version's {}: set it "
                    "up with {}",
                    function, info.name, size, info.first_size, info.initializer));
  }
  if (size > info.size) {
    invalid(
        fmt::format("{}: the {}'s size is {} bytes, more than this libstrait's {} (version "
                    "{}): the program was compiled against a newer strait.h; run it with the "
                    "libstrait of that version",
                    function, info.name, size, info.size, STRAIT_VERSION_CODE));
  }
  return size;
}

kernels::DType to_dtype(straitDataType_t datatype, const char* function) {
  // On the integer: a C caller may pass any int, which need not be an enumerator.
  switch (static_cast<int>(datatype)) {
    case straitInt8: return kernels::DType::I8;
    case straitUint8: return kernels::DType::U8;
    case straitInt32: return kernels::DType::I32;
    case straitInt64: return kernels::DType::I64;
    case straitFloat16: return kernels::DType::F16;
    case straitFloat32: return kernels::DType::F32;
    case straitFloat64: return kernels::DType::F64;
    case straitBfloat16: return kernels::DType::BF16;
    default: break;
  }
  invalid(
      fmt::format("{}: datatype {} is not a straitDataType_t: strait moves straitInt8 (0), "
                  "straitUint8 (1), straitInt32 (2), straitInt64 (4), straitFloat16 (6), "
                  "straitFloat32 (7), straitFloat64 (8) and straitBfloat16 (9)",
                  function, static_cast<int>(datatype)));
}

kernels::ReduceOp to_op(straitRedOp_t op, const char* function) {
  switch (static_cast<int>(op)) {
    case straitSum: return kernels::ReduceOp::Sum;
    case straitProd: return kernels::ReduceOp::Prod;
    case straitMax: return kernels::ReduceOp::Max;
    case straitMin: return kernels::ReduceOp::Min;
    case straitAvg: return kernels::ReduceOp::Avg;
    case straitBand: return kernels::ReduceOp::Band;
    case straitBor: return kernels::ReduceOp::Bor;
    case straitBxor: return kernels::ReduceOp::Bxor;
    default: break;
  }
  invalid(
      fmt::format("{}: op {} is not a straitRedOp_t: straitSum (0), straitProd (1), "
                  "straitMax (2), straitMin (3), straitAvg (4), straitBand (5), straitBor (6) "
                  "or straitBxor (7)",
                  function, static_cast<int>(op)));
}

std::size_t to_count(std::int64_t count, kernels::DType dtype, const char* function,
                     const char* argument) {
  if (count < 0) {
    invalid(fmt::format("{}: {} is {}: counts are numbers of elements, 0 or more", function,
                        argument, count));
  }
  const auto max = static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()) /
                   kernels::dtype_size(dtype);
  if (static_cast<std::uint64_t>(count) > max) {
    invalid(fmt::format("{}: {} is {} elements of {}, more bytes than memory can hold", function,
                        argument, count, kernels::dtype_name(dtype)));
  }
  return static_cast<std::size_t>(count);
}

std::vector<std::size_t> to_counts(const std::int64_t* counts, int size, kernels::DType dtype,
                                   const char* function, const char* argument) {
  if (counts == nullptr) {
    invalid(
        fmt::format("{}: {} is NULL; it needs one count per rank ({})", function, argument, size));
  }
  std::vector<std::size_t> out(static_cast<std::size_t>(size));
  for (int r = 0; r < size; ++r) {
    const std::string name = fmt::format("{}[{}]", argument, r);
    out[static_cast<std::size_t>(r)] = to_count(counts[r], dtype, function, name.c_str());
  }
  return out;
}

void require_out(const void* out, const char* function, const char* argument) {
  if (out == nullptr) {
    invalid(
        fmt::format("{}: {} is NULL; pass where the result is to be written", function, argument));
  }
}

std::int64_t to_timeout_ms(std::int64_t ms, const char* function, const char* argument) {
  if (ms < 1 || ms > kMaxTimeoutMs) {
    invalid(fmt::format("{}: {} is {} ms; it must be 1 .. {} ms", function, argument, ms,
                        kMaxTimeoutMs));
  }
  return ms;
}

void require_host(std::span<const void* const> buffers, const char* function) {
  for (const void* buffer : buffers) {
    if (kernels::is_device_pointer(buffer)) {
      invalid(
          fmt::format("{}: buffer {} is GPU memory, and this operation runs on host buffers "
                      "only (NCCL has no equivalent): copy to host memory first",
                      function, buffer));
    }
  }
}

}  // namespace strait::capi
