#include "tools/rank_output.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <poll.h>
#include <unistd.h>

#include <array>
#include <cctype>
#include <cerrno>
#include <cstring>

#include "core/error.h"

namespace strait::tools {
namespace {

bool is_line_end(char c) {
  return c == '\n' || c == '\r';
}

bool reads_as_error(std::string_view line) {
  std::string lower(line);
  for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  for (std::string_view word : {"error", "fail", "abort", "exception", "traceback", "fatal"}) {
    if (lower.find(word) != std::string::npos) return true;
  }
  // strait's own errors: "Timeout: ...", "PeerLost: ...", maybe after a "rank 1: " prefix.
  for (int c = 0; c <= static_cast<int>(ErrorCode::Internal); ++c) {
    if (line.find(fmt::format("{}: ", to_string(static_cast<ErrorCode>(c)))) != line.npos) {
      return true;
    }
  }
  return false;
}

}  // namespace

std::optional<std::string> RankOutput::last_error_line() const {
  for (auto it = tail_.rbegin(); it != tail_.rend(); ++it) {
    if (reads_as_error(*it)) return *it;
  }
  return std::nullopt;
}

RankOutput::RankOutput(int to, std::string prefix) : to_(to), prefix_(std::move(prefix)) {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) {
    throw Error(ErrorCode::Io,
                fmt::format("cannot create a pipe for a rank's output: {}", std::strerror(errno)));
  }
  read_end_.reset(fds[0]);
  write_end_.reset(fds[1]);
  // Non-blocking: the launcher reads what there is and goes back to poll().
  const int flags = ::fcntl(read_end_.get(), F_GETFL);
  ::fcntl(read_end_.get(), F_SETFL, flags | O_NONBLOCK);
}

bool RankOutput::pump() {
  if (!read_end_) return false;
  std::array<char, 64 << 10> buf{};
  // A bounded number of reads, so that one busy rank cannot starve the others or the signals.
  for (int i = 0; i < 16; ++i) {
    const ssize_t n = ::read(read_end_.get(), buf.data(), buf.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) break;  // EAGAIN: nothing more for now
    if (n == 0) {
      finish();
      return false;
    }
    held_.append(buf.data(), static_cast<std::size_t>(n));
    std::size_t end = held_.size();
    while (end > 0 && !is_line_end(held_[end - 1])) --end;
    if (end == 0 && held_.size() >= kMaxHeld) end = held_.size();  // a very long line: in pieces
    if (end > 0) {
      relay(std::string_view(held_).substr(0, end));
      held_.erase(0, end);
    }
  }
  return true;
}

void RankOutput::finish() {
  if (!held_.empty()) {
    relay(held_);
    held_.clear();
  }
  if (!at_line_start_) relay("\n");  // the launcher's next line starts a line of its own
  read_end_.reset();
}

void RankOutput::relay(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size() + prefix_.size());
  std::size_t begin = 0;
  while (begin < bytes.size()) {
    std::size_t end = begin;
    while (end < bytes.size() && !is_line_end(bytes[end])) ++end;
    const bool ended = end < bytes.size();
    const std::string_view segment = bytes.substr(begin, end - begin + (ended ? 1 : 0));
    if (at_line_start_) out += prefix_;
    out += segment;
    at_line_start_ = ended;
    remember(segment);
    begin += segment.size();
  }
  write_out(out);
}

void RankOutput::remember(std::string_view segment) {
  // Only '\n' ends a line here; after a '\r' a terminal shows what overwrote it.
  const bool newline = !segment.empty() && segment.back() == '\n';
  tail_partial_ += newline ? segment.substr(0, segment.size() - 1) : segment;
  if (tail_partial_.size() > 2 * kMaxTailLine)
    tail_partial_.erase(0, tail_partial_.size() - kMaxTailLine);
  if (!newline) return;
  std::string_view line = tail_partial_;
  while (!line.empty() && line.back() == '\r') line.remove_suffix(1);
  if (const auto cr = line.rfind('\r'); cr != std::string_view::npos) line.remove_prefix(cr + 1);
  if (line.size() > kMaxTailLine) line = line.substr(0, kMaxTailLine);
  tail_.emplace_back(line);
  if (tail_.size() > kTailLines) tail_.pop_front();
  ++lines_;
  tail_partial_.clear();
}

void RankOutput::write_out(std::string_view bytes) {
  while (!bytes.empty() && !out_broken_) {
    const ssize_t n = ::write(to_, bytes.data(), bytes.size());
    if (n > 0) {
      bytes.remove_prefix(static_cast<std::size_t>(n));
    } else if (n < 0 && errno == EINTR) {
      continue;
    } else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      pollfd pfd{to_, POLLOUT, 0};
      ::poll(&pfd, 1, 100);
    } else {
      out_broken_ = true;  // a closed pipe or a bad descriptor: the output has nowhere to go
    }
  }
}

}  // namespace strait::tools
