// scratch_buffer: the temporary buffers of the collective algorithms (incoming chunks, staging
// copies), reused from call to call instead of allocated afresh.
//
// Why: a fresh buffer of 32 MiB or more comes from mmap (glibc's threshold), so every call of a
// large allreduce faulted its pages in again (about 17k page faults and 5-10x the time at 64 MiB,
// bench/RESULTS.md). A cache of a few buffers per thread (the progress engine's thread advances
// every operation) keeps their pages mapped.
//
// The buffer is a shared_ptr because a transport request may still write into it after its
// operation failed (TransportRequest::keep_alive); a cached buffer is handed out again only when
// nothing else holds it. At least `bytes` bytes, uninitialised; the cache keeps at most
// kScratchCacheSlots buffers per thread, for the thread's lifetime.
// Thread-safety: each thread has its own cache.
#pragma once

#include <cstddef>
#include <memory>

namespace strait::comm {

inline constexpr std::size_t kScratchCacheSlots = 8;

std::shared_ptr<std::byte[]> scratch_buffer(std::size_t bytes);

// frame_buffer: a buffer of kFrameBufferBytes for an operation's short messages (its fingerprint
// alone, or a fingerprint framing a short payload: comm/algorithms/collective_op.h), from a pool
// of kFrameCacheSlots per thread, so that posting them does not allocate. Separate from the
// scratch cache, whose large buffers it must not occupy. Same lifetime rules as scratch_buffer.
inline constexpr std::size_t kFrameBufferBytes = 8192;
inline constexpr std::size_t kFrameCacheSlots = 16;
std::shared_ptr<std::byte[]> frame_buffer();

}  // namespace strait::comm
