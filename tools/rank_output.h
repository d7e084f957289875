// RankOutput: one output stream of one rank (its stdout or its stderr), relayed to the launcher's
// own stream a whole line at a time, and the stream's last lines kept for the failure summary.
//
// Ranks that share the launcher's stdout and stderr directly cut each other's lines wherever a
// write() ends (a UCX warning in the middle of another rank's error line). Here each rank writes
// into a pipe of its own, and the launcher, the only writer of its streams, copies complete
// lines: a line is never interleaved with another. A line ends at '\n' or '\r' (a progress bar
// redraws with '\r'); bytes with no line end are held until one comes, the rank's stream closes,
// or kMaxHeld bytes wait (a longer line goes in pieces). With a prefix (`strait run
// --tag-output`) each line starts with it.
// The rank's stream is a pipe, not a terminal: C stdio and Python buffer it in blocks unless the
// program flushes (or runs with PYTHONUNBUFFERED=1), as under torchrun's --tee.
// Writes to the launcher's stream that fail (a closed pipe: `strait run ... | head`) are dropped
// from then on, and the pipe is still drained, so that a rank never blocks on it.
// Thread-safety: none; the launcher's single thread owns it.
// Errors: Io when the pipe cannot be created.
#pragma once

#include <cstddef>
#include <deque>
#include <optional>
#include <string>
#include <string_view>

#include "core/fd.h"

namespace strait::tools {

class RankOutput {
 public:
  static constexpr std::size_t kMaxHeld = 64 << 10;
  static constexpr std::size_t kTailLines = 20;      // lines kept for the summary
  static constexpr std::size_t kMaxTailLine = 4096;  // bytes kept of each

  // `to`: the launcher's file descriptor the lines go to (1 or 2). `prefix` starts every line.
  RankOutput(int to, std::string prefix);

  // The pipe's write end, for the child to dup2 onto its own descriptor (close-on-exec: the
  // child's dup2 copy is what stays open), and closed in the launcher once the child is forked.
  [[nodiscard]] int child_end() const { return write_end_.get(); }
  void close_child_end() { write_end_.reset(); }

  // The read end while the stream is open (-1 at end of file), for poll().
  [[nodiscard]] int fd() const { return read_end_.get(); }
  // Reads what the pipe holds now and relays the complete lines; at end of file also the rest.
  // Returns false once the stream has ended.
  bool pump();
  // Relays what is held even without its line end (the rank is gone, its pipe may stay open in a
  // child of its own), and stops reading.
  void finish();

  // The last kTailLines lines, oldest first (as a terminal would show each: after a '\r', what
  // follows it), and how many lines there were in all.
  [[nodiscard]] const std::deque<std::string>& tail() const { return tail_; }
  [[nodiscard]] std::size_t line_count() const { return lines_; }
  // The last of those lines that reads as an error (names an error, a failure, an abort, an
  // exception, a traceback, or starts with one of strait's error codes), if any.
  [[nodiscard]] std::optional<std::string> last_error_line() const;

 private:
  void relay(std::string_view complete);  // whole lines, each ending in '\n' or '\r'
  void remember(std::string_view line);
  void write_out(std::string_view bytes);

  int to_;
  std::string prefix_;
  Fd read_end_;
  Fd write_end_;
  std::string held_;  // bytes after the last line end
  std::deque<std::string> tail_;
  std::string tail_partial_;  // the last line as far as it has been relayed in pieces
  std::size_t lines_ = 0;
  bool at_line_start_ = true;  // of the relayed bytes: the prefix goes first
  bool out_broken_ = false;
};

}  // namespace strait::tools
