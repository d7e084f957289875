// The C API's arguments as the C++ API takes them, checked: enums, counts, out-pointers and the
// versioned structs of capi/strait.h.
//
// Each check throws Error(InvalidArgument) that names the C function, the argument, the value
// given and what is accepted.
// Versioned structs (size, magic, version first, as NCCL's ncclConfig_t): a struct must carry its
// magic (set by its initializer macro) and a size from its first version's up to this library's;
// a program compiled against an older strait.h passes a smaller struct, whose missing fields keep
// their initializer's values. A larger one (a newer header than the library) is refused, since
// the library would ignore fields the program set.
// Thread-safety: pure functions.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <vector>

#include "capi/strait.h"
#include "kernels/dtype.h"
#include "kernels/reduce.h"

namespace strait::capi {

// What read_versioned needs to know of a versioned struct.
struct StructInfo {
  const char* name;         // "straitConfig_t"
  const char* initializer;  // "STRAIT_CONFIG_INITIALIZER"
  unsigned magic;
  std::size_t first_size;  // sizeof its first version
  std::size_t size;        // sizeof this library's version

  static StructInfo config();
  static StructInfo store();
  static StructInfo compression();
};

// Checks the header of a versioned struct; returns its size.
std::size_t check_versioned(const void* in, std::size_t size, unsigned magic,
                            const StructInfo& info, const char* function);

// `defaults` overwritten with the fields that `in` has.
template <class T>
T read_versioned(const T* in, const StructInfo& info, const char* function, T defaults = {}) {
  const std::size_t size = check_versioned(in, in == nullptr ? 0 : in->size,
                                           in == nullptr ? 0U : in->magic, info, function);
  std::memcpy(&defaults, in, size);
  return defaults;
}

[[nodiscard]] kernels::DType to_dtype(straitDataType_t datatype, const char* function);
[[nodiscard]] kernels::ReduceOp to_op(straitRedOp_t op, const char* function);
// A count of elements: 0 or more, and with its bytes (elements of `dtype`) addressable.
[[nodiscard]] std::size_t to_count(std::int64_t count, kernels::DType dtype, const char* function,
                                   const char* argument);
// `size` counts from an array that must not be NULL.
[[nodiscard]] std::vector<std::size_t> to_counts(const std::int64_t* counts, int size,
                                                 kernels::DType dtype, const char* function,
                                                 const char* argument);
// An out-pointer must not be NULL.
void require_out(const void* out, const char* function, const char* argument);
// A timeout in milliseconds: 1 .. 1e9.
[[nodiscard]] std::int64_t to_timeout_ms(std::int64_t ms, const char* function,
                                         const char* argument);
// Host-only operations (the v-forms, the compressed allreduce: NCCL has no equivalent): a device
// buffer is refused rather than read from the host.
void require_host(std::span<const void* const> buffers, const char* function);

}  // namespace strait::capi
