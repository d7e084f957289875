// `strait-bench offload`: sequential read and write throughput of the offload I/O engines over
// block sizes and queue depths, and the throughput of the CPU AdamW kernel that consumes what
// they read. bench/compare_offload_io.sh runs it next to fio on the same file.
//
// Engines: "uring" (io_uring, O_DIRECT, plain buffers and descriptors), "uring-fixed" (the same
// with registered buffers and files), "posix" (the pread/pwrite fallback, through the page cache:
// its reads start after the file's cached pages are dropped and its writes are timed up to
// fdatasync, so both measure the disk, not memory).
// Each point (engine, op, block, depth) moves BYTES in one batch of BYTES / block requests at
// consecutive offsets from 0 (wrapping at the file's end), with the engine keeping `depth` in
// flight, after an untimed warm-up of `depth` requests. GB/s = 1e9 bytes per second.
#pragma once

namespace strait::bench {

// argv[0] is "offload". Returns the process exit status (0, 1 on failure, 2 for bad arguments);
// prints errors itself and throws nothing.
int offload_main(int argc, char** argv) noexcept;

}  // namespace strait::bench
