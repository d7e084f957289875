/// \file
/// IoEngine: reads and writes byte ranges of files at offsets, in batches.
///
/// submit() starts a batch of requests and returns a ticket at once; wait(ticket) blocks until
/// every request of that batch has finished, then returns or throws the batch's first error.
/// Batches are independent: several may be in flight and they may be waited for in any order,
/// which is how callers overlap I/O with compute (read chunk i+1 while updating chunk i).
/// A request's buffer must stay valid, and untouched by the caller, until its batch is waited for.
///
/// Every transfer is finished or fails loudly: requests longer than IoEngineOptions::block_size
/// (and than kMaxTransferBytes, since io_uring's results are 32-bit) are cut into pieces that run
/// concurrently, short transfers continue with the remainder, EINTR and EAGAIN are retried, a read
/// that reaches the end of the file is an error (never silent zeros), and any other failure is
/// Error(Io) naming the file, offset, length and errno. Engines: UringEngine (io_uring, O_DIRECT)
/// and PosixEngine (thread pool of pread/pwrite); make_io_engine() in io_engine_factory.h picks one
/// for a directory. Thread-safety: an engine is used by one thread at a time (its owner); it is not
/// shared. Errors: InvalidArgument for a malformed request (null file; for O_DIRECT files an
/// offset, length or address that is not aligned, see IoFile::alignment) or an unknown ticket; Io
/// as above; Timeout when a batch is not done within IoEngineOptions::timeout (the batch stays in
/// flight: wait again, or destroy the engine, which waits for in-flight transfers, before the
/// buffers).
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/export.h"
#include "offload/io_file.h"

namespace strait::offload {

/// Direction of a request.
enum class IoOp : std::uint8_t { Read, Write };

/// One transfer: `length` bytes between `data` and `file` at `offset` (O_DIRECT files: all three
/// aligned to IoFile::alignment()).
struct IoRequest {
  /// Read from the file into data, or write data to the file.
  IoOp op = IoOp::Read;
  const IoFile* file = nullptr;  ///< not owned; must outlive the batch
  std::uint64_t offset = 0;      ///< bytes from the start of the file
  std::byte* data = nullptr;     ///< a write request's engine only reads through this pointer
  std::size_t length = 0;        ///< bytes

  /// A read of into.size() bytes at `offset` into `into`.
  static IoRequest read(const IoFile& file, std::uint64_t offset, std::span<std::byte> into) {
    return {IoOp::Read, &file, offset, into.data(), into.size()};
  }
  /// A write of from.size() bytes from `from` at `offset`.
  static IoRequest write(const IoFile& file, std::uint64_t offset,
                         std::span<const std::byte> from) {
    // The engines never write through a write request's pointer; one type keeps slots simple.
    return {IoOp::Write, &file, offset, const_cast<std::byte*>(from.data()), from.size()};
  }
};

/// "read of 4096 bytes at offset 8192 of /nvme/x": the prefix of every I/O error message.
STRAIT_API std::string describe(const IoRequest& request);

/// Throws InvalidArgument when the request cannot be issued as it is (see the header comment).
STRAIT_API void validate(const IoRequest& request);

/// Which engine: pread/pwrite on a thread pool, or io_uring.
enum class IoEngineKind : std::uint8_t { Posix, Uring };

/// "posix" or "uring".
STRAIT_API std::string_view to_string(IoEngineKind kind) noexcept;

/// The most bytes one io_uring SQE or pread/pwrite call is asked to move: 1 GiB, a multiple of
/// every O_DIRECT alignment, below Linux's 2 GiB - 4 KiB cap per call and io_uring's 32-bit result.
inline constexpr std::size_t kMaxTransferBytes = std::size_t{1} << 30;

/// The length in bytes of the pieces a request on `file` is cut into: block_size (0: no limit)
/// capped at kMaxTransferBytes and rounded down to the file's O_DIRECT alignment (at least one
/// alignment unit). Every piece but a request's last has this length.
STRAIT_API std::size_t piece_bytes(const IoFile& file, std::size_t block_size) noexcept;

/// The pieces the engines run for a batch: each request cut into piece_bytes(*file, block_size)
/// long parts (the last part of a request shorter), in order; an empty request has none.
STRAIT_API std::vector<IoRequest> split_requests(std::span<const IoRequest> requests,
                                                 std::size_t block_size);

/// How an engine queues and cuts requests (make_io_engine and the engines' constructors).
struct IoEngineOptions {
  unsigned queue_depth = 64;  ///< uring: submission queue entries = most pieces in flight
  unsigned threads = 4;       ///< posix: worker threads = most pieces in flight
  /// Bytes: requests longer than this are cut into pieces of this size (see piece_bytes) that run
  /// concurrently, so one large request keeps the queue full. 0: requests as given.
  std::size_t block_size = 0;
  /// uring: SQEs prepared per io_uring_submit call (fio's iodepth_batch_submit). 0: everything
  /// ready is submitted with one call.
  unsigned submit_batch = 0;
  /// uring: a kernel thread polls the submission queue (IORING_SETUP_SQPOLL), so submitting needs
  /// no system call while it is awake; it sleeps after sqpoll_idle_ms without work. It costs a
  /// CPU. Where the kernel refuses it, one warning and a normal ring.
  bool sqpoll = false;
  /// uring with sqpoll: milliseconds the polling thread stays awake without work.
  unsigned sqpoll_idle_ms = 100;
  std::chrono::milliseconds timeout = std::chrono::minutes(5);  ///< per wait(); > 0
  bool register_buffers = true;  ///< uring: fixed buffers when RLIMIT_MEMLOCK allows
  bool register_files = true;    ///< uring: fixed files (skips the per-request file lookup)
  /// make_io_engine only: force an engine instead of STRAIT_IO_ENGINE or the automatic choice.
  std::optional<IoEngineKind> force;
};

/// Reads and writes byte ranges of files in batches (see the file comment for errors and
/// threading).
class STRAIT_API IoEngine {
 public:
  /// Names a submitted batch for wait(); unique within the engine.
  using Ticket = std::uint64_t;

  IoEngine() = default;
  IoEngine(const IoEngine&) = delete;
  IoEngine& operator=(const IoEngine&) = delete;
  virtual ~IoEngine() = default;

  /// Which engine this is.
  [[nodiscard]] virtual IoEngineKind kind() const noexcept = 0;

  /// Opens a file the way this engine transfers it (O_DIRECT for io_uring).
  virtual IoFile open(const std::filesystem::path& path, OpenMode mode) = 0;

  /// Declares long-lived buffers that requests will point into (io_uring registers them as fixed
  /// buffers, when the memlock limit allows, to skip per-request page pinning). They must stay
  /// mapped until the engine is destroyed or register_buffers is called again. Only with no batch
  /// in flight. Requests outside these buffers work too.
  virtual void register_buffers(std::span<const std::span<std::byte>> buffers) = 0;

  /// Declares files that requests will name (io_uring registers them as fixed files, replacing
  /// any earlier set). The kernel holds a reference to each until the engine is destroyed or
  /// register_files is called again, so a registered file's space is not freed by unlink before
  /// then. Only with no batch in flight. Requests on other files work too.
  virtual void register_files(std::span<const IoFile* const> files) = 0;

  /// Starts a batch and returns at once. The requests' buffers and files must stay valid and
  /// untouched until wait(ticket) returns. Throws InvalidArgument for a malformed request
  /// (validate()).
  virtual Ticket submit(std::span<const IoRequest> requests) = 0;
  /// Blocks until every request of the batch has finished; throws its first error (Io, Timeout
  /// after IoEngineOptions::timeout; InvalidArgument for an unknown or already waited ticket).
  virtual void wait(Ticket ticket) = 0;

  /// submit() then wait(): one blocking batch.
  void run(std::span<const IoRequest> requests) { wait(submit(requests)); }
};

}  // namespace strait::offload
