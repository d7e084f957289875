// The binomial tree of MPICH's rooted collectives (broadcast, reduce, gather, scatter): ranks are
// renumbered relative to the root, v = (rank - root) mod P. The parent of v != 0 is v minus its
// lowest set bit; its children are v + 2^j for each 2^j below that bit (every 2^j < P for the
// root) with v + 2^j < P. The subtree of v is the relative ranks [v, v + span(v)): contiguous, so
// gather and scatter move a subtree's blocks as one message. Depth ceil(log2 P).
#pragma once

#include <algorithm>
#include <vector>

namespace strait::comm {

class BinomialTree {
 public:
  BinomialTree(int size, int rank, int root)
      : size_(size), root_(root), v_((rank - root + size) % size) {}

  [[nodiscard]] int relative() const noexcept { return v_; }
  [[nodiscard]] bool is_root() const noexcept { return v_ == 0; }
  // The group rank of relative rank `rel`.
  [[nodiscard]] int real(int rel) const noexcept { return (rel + root_) % size_; }
  // Relative rank of the parent (the root has none: -1).
  [[nodiscard]] int parent() const noexcept { return v_ == 0 ? -1 : v_ - (v_ & -v_); }
  // Relative ranks of the children, largest subtree first (the order a broadcast sends in, so the
  // deepest subtree starts first; a reduce receives the smallest, earliest-finished one first).
  [[nodiscard]] std::vector<int> children() const {
    int mask = 1;
    if (v_ == 0) {
      while (mask < size_) mask <<= 1;
    } else {
      mask = v_ & -v_;
    }
    std::vector<int> out;
    for (mask >>= 1; mask > 0; mask >>= 1) {
      if (v_ + mask < size_) out.push_back(v_ + mask);
    }
    return out;
  }
  // How many relative ranks the subtree of `rel` holds (itself included).
  [[nodiscard]] int span(int rel) const noexcept {
    return rel == 0 ? size_ : std::min(rel & -rel, size_ - rel);
  }

 private:
  int size_;
  int root_;
  int v_;
};

}  // namespace strait::comm
