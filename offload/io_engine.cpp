#include "offload/io_engine.h"

#include <fmt/format.h>

#include <algorithm>
#include <bit>
#include <numeric>

#include "core/error.h"

namespace strait::offload {

std::string describe(const IoRequest& r) {
  return fmt::format("{} of {} bytes at offset {} of {}", r.op == IoOp::Read ? "read" : "write",
                     r.length, r.offset, r.file != nullptr ? r.file->path().string() : "<no file>");
}

void validate(const IoRequest& r) {
  if (r.file == nullptr || r.file->fd() < 0) {
    throw Error(ErrorCode::InvalidArgument,
                fmt::format("io: {}: the request has no open file", describe(r)));
  }
  if (r.data == nullptr && r.length != 0) {
    throw Error(ErrorCode::InvalidArgument,
                fmt::format("io: {}: the request has a null buffer", describe(r)));
  }
  if (!r.file->direct()) return;
  const IoAlignment a = r.file->alignment();
  const auto address = std::bit_cast<std::uintptr_t>(r.data);
  if (r.offset % a.offset != 0 || r.length % a.offset != 0 || address % a.memory != 0) {
    throw Error(ErrorCode::InvalidArgument,
                fmt::format("io: {}: O_DIRECT needs offset and length multiples of {} bytes and "
                            "a buffer address multiple of {} (buffer at {:#x}); use a "
                            "PinnedBuffer and pad lengths to the alignment",
                            describe(r), a.offset, a.memory, address));
  }
}

std::size_t piece_bytes(const IoFile& file, std::size_t block_size) noexcept {
  std::size_t piece = block_size == 0 ? kMaxTransferBytes : std::min(block_size, kMaxTransferBytes);
  if (file.direct()) {
    const IoAlignment a = file.alignment();
    const std::size_t unit = std::max<std::size_t>(1, std::lcm(a.offset, a.memory));
    piece = std::max(unit, piece / unit * unit);
  }
  return piece;
}

std::vector<IoRequest> split_requests(std::span<const IoRequest> requests, std::size_t block_size) {
  std::vector<IoRequest> pieces;
  for (const IoRequest& r : requests) {
    const std::size_t piece = piece_bytes(*r.file, block_size);
    for (std::size_t done = 0; done < r.length; done += piece) {
      IoRequest part = r;
      part.offset += done;
      part.data += done;
      part.length = std::min(piece, r.length - done);
      pieces.push_back(part);
    }
  }
  return pieces;
}

std::string_view to_string(IoEngineKind kind) noexcept {
  switch (kind) {
    case IoEngineKind::Posix: return "posix";
    case IoEngineKind::Uring: return "uring";
  }
  return "?";
}

}  // namespace strait::offload
