/// \file
/// SwapStore: byte buffers (tensors, activations) swapped out to a file on disk by key and read
/// back later, every operation asynchronous and answered by a std::future.
///
/// Storage. One file per store, created under SwapStoreOptions::dir with a name holding the tag,
/// the pid and a per-process counter ("strait-swap-<tag>-pid<pid>-<n>.swap"), opened by the
/// engine make_io_engine() picks for that directory (io_uring with O_DIRECT, or the pread/pwrite
/// fallback where io_uring or O_DIRECT is refused; see io_engine_factory.h) and unlinked at once
/// unless keep_name. Each stored key owns one extent of the file: an offset and a length that are
/// multiples of the I/O unit (the larger of the page size and the file's O_DIRECT offset and memory
/// alignments), the length being the key's size rounded up to that unit (0 for an empty key).
/// Extents come from a free list (best fit; neighbours are merged; a request that fits nowhere
/// extends the last free extent if it ends the file, else goes at the end of the file).
///
/// Space. Every extent is reserved with fallocate(2) before a byte is written (posix_fallocate,
/// which writes zeros through a buffered descriptor, only where the file system answers EOPNOTSUPP;
/// see preallocate() in io_file.h), so a full disk fails up front, never halfway through a write.
/// Freed extents keep their blocks for reuse; when a reservation fails, the blocks of every free
/// extent are given back (FALLOC_FL_PUNCH_HOLE) and the reservation is tried once more. A failed
/// reservation gives back whatever it got. The error is Io naming the key, the file, the bytes
/// needed, the bytes free (statvfs, before the attempt) and the fix (free space or pass
/// --offload-dir on a larger disk).
///
/// Versions. swap_out always writes into a new extent and switches the key to it only when every
/// byte has been written (write-new-then-switch); the old extent is freed then. So a failed
/// swap_out (no space, I/O error) leaves the key's previous version, if any, readable and
/// unchanged. The price: rewriting a key needs room for both versions for a moment (the freed
/// extent serves the next rewrite of that size). Nothing is fsynced: this is scratch space, not a
/// durable store.
///
/// Unaligned sizes and buffers. O_DIRECT needs aligned offsets, lengths and addresses. A caller's
/// buffer whose address is aligned moves directly, all but its last partial unit; that tail goes
/// through an aligned staging buffer (zero-padded on write, copied out on read). A buffer at an
/// unaligned address is streamed through two aligned staging buffers of staging_bytes (one copied
/// while the other is in flight). With the posix engine (no O_DIRECT) data moves directly. Round
/// trips are exact for every size, 0 included.
///
/// Checksums (checksum = true). The stored bytes are hashed in blocks of kChecksumBlock bytes with
/// XXH3_64bits (xxHash, libxxhash; Collet, https://xxhash.com: 64-bit non-cryptographic hash at
/// memory speed), computed from the caller's buffer on swap_out while the write is in flight, and
/// verified after every read from the file (swap_in and prefetch); padding is not hashed. A
/// mismatch is an Io error naming the key, the file, the block's file offset and byte range, and
/// the expected and actual hash. The hashes live in memory, so they catch corruption of the file
/// (or the device, or a stray writer) during the store's life.
///
/// Operations and order. Every call is queued and run by one worker thread, in the order the calls
/// were made (one queue for all keys), so a swap_in called after a swap_out of the same key reads
/// what that swap_out wrote, without waiting for its future first; an erase called after them
/// takes effect after them. Each transfer uses the engine's queue (large requests in pieces, see
/// IoEngineOptions::block_size), but operations do not overlap each other. The futures are
/// std::future<void>: ready when the operation is done, holding a strait::Error when it failed.
///
/// prefetch(key) reads the key's current version into an internal aligned buffer (verified), so a
/// later swap_in of the same version is a memory copy; that swap_in consumes the prefetched copy
/// (one prefetch serves one swap_in). A swap_out or erase of the key drops it. A prefetch of a key
/// already prefetched does nothing. Each prefetched copy holds size rounded up to the unit bytes of
/// host memory until it is consumed.
///
/// Thread-safety: every member function may be called concurrently from any number of threads
/// (a mutex orders them into the queue); futures may be waited on from any thread. contains() and
/// stored_size() describe the store as the calls made so far leave it: a swap_out counts from its
/// call, an erase from its call; a swap_out that fails is undone in that view when its future
/// becomes ready (unless a later swap_out or erase of the key was called meanwhile). The
/// destructor must not race with other calls: it waits for the operation in progress, fails the
/// queued ones with Aborted, and waits for any transfer still in flight; then it closes (and,
/// with keep_name, removes) the file.
///
/// Errors (on the future): InvalidArgument for swap_in or prefetch of a key that is not stored (or
/// whose swap_out failed) and for swap_in into a buffer whose size differs from the stored size;
/// Io for a full disk, a failed transfer, or a checksum mismatch; Timeout when a transfer is not
/// done within IoEngineOptions::timeout: that transfer is still in flight, so the buffer passed to
/// the operation must stay alive until the store is destroyed, and every later operation fails with
/// Aborted; Aborted for operations still queued when the store is destroyed. The constructor
/// throws InvalidArgument for a missing, non-directory or unwritable directory (with the
/// --offload-dir hint) or a tag containing '/', Unavailable when an engine is forced that cannot
/// work there, Io when the file cannot be created.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <future>
#include <memory>
#include <span>
#include <string>
#include <string_view>

#include "core/export.h"
#include "offload/io_engine.h"

namespace strait::offload {

/// Bytes of stored data per checksum (the last block of a key may be shorter).
inline constexpr std::size_t kChecksumBlock = std::size_t{1} << 20;

/// Where and how a SwapStore keeps its file.
struct SwapStoreOptions {
  std::filesystem::path dir;  ///< must exist, writable
  std::string tag = "swap";   ///< part of the file name (with pid + counter so runs never collide)
  bool checksum = true;       ///< per-extent checksum verified on every read
  IoEngineOptions io;         ///< engine choice/tuning (io_engine_factory.h)
  bool keep_name = false;     ///< as AdamWStateFile: unlink after open unless true
  /// Bytes of each of the two staging buffers that unaligned caller buffers stream through
  /// (rounded up to the I/O unit). Page-locked host memory held for the store's life.
  std::size_t staging_bytes = std::size_t{4} << 20;
};

/// Tensors by key in one file, moved in and out asynchronously (see the file comment). Not
/// copyable.
class STRAIT_API SwapStore {
 public:
  /// Creates the swap file under options.dir. Errors: InvalidArgument for a bad dir or tag; Io when
  /// the file cannot be created.
  explicit SwapStore(const SwapStoreOptions& options);
  SwapStore(const SwapStore&) = delete;
  SwapStore& operator=(const SwapStore&) = delete;
  ~SwapStore();

  /// Stores a copy of data under key, replacing the key's previous version once written.
  /// The caller keeps data alive and unchanged until the future is ready.
  std::future<void> swap_out(std::string_view key, std::span<const std::byte> data);
  /// Reads the key's stored bytes into out; out.size() must equal the stored size (else
  /// InvalidArgument). The caller keeps out alive and leaves it alone until the future is ready;
  /// on an error its contents are unspecified. The key stays stored.
  std::future<void> swap_in(std::string_view key, std::span<std::byte> out);
  /// Starts reading the key into internal staging so a later swap_in is a copy (see above).
  std::future<void> prefetch(std::string_view key);

  /// True when key has a stored (or queued) version.
  [[nodiscard]] bool contains(std::string_view key) const;
  /// Bytes stored under key. Throws InvalidArgument when the key is not stored.
  [[nodiscard]] std::size_t stored_size(std::string_view key) const;
  /// Forgets the key (queued like the other operations; its extent returns to the free list).
  /// Erasing a key that is not stored does nothing.
  void erase(std::string_view key);

  /// Blocks until every operation called before it is done (their futures are ready).
  void drain();

  [[nodiscard]] const std::filesystem::path& path() const noexcept;  ///< the swap file
  [[nodiscard]] std::size_t unit() const noexcept;  ///< bytes: extent offsets and lengths
  /// Bytes the file spans now: the end of the highest extent ever reserved (a multiple of unit()).
  [[nodiscard]] std::uint64_t file_bytes() const;
  /// The I/O engine behind the file.
  [[nodiscard]] IoEngineKind engine_kind() const noexcept;
  [[nodiscard]] std::string_view engine_reason() const noexcept;  ///< why that engine

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace strait::offload
