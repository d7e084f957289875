// The fold that lets power-of-two algorithms (recursive doubling, Rabenseifner) run on any world
// size P (Thakur, Rabenseifner & Gropp, "Optimization of Collective Communication Operations in
// MPICH", IJHPCA 2005, section 4): with P' the largest power of two <= P and R = P - P', each even
// rank r < 2R hands its whole vector to r + 1 and sits out; the other P' ranks run the algorithm
// under new ranks 0 .. P'-1, and at the end each odd r < 2R sends the result back to r - 1.
// Costs 2 latency terms and one full vector each way for the 2R folded ranks; none when P = P'.
#pragma once

namespace strait::comm {

class PowerOfTwoFold {
 public:
  constexpr PowerOfTwoFold(int rank, int size) noexcept : rank_(rank) {
    while (pof2_ * 2 <= size) pof2_ *= 2;
    rem_ = size - pof2_;
  }
  [[nodiscard]] constexpr int pof2() const noexcept { return pof2_; }
  [[nodiscard]] constexpr int log2() const noexcept {
    int l = 0;
    while ((1 << l) < pof2_) ++l;
    return l;
  }
  // An even rank below 2R: gives its vector to rank + 1 and receives the result from it.
  [[nodiscard]] constexpr bool sits_out() const noexcept {
    return rank_ < 2 * rem_ && rank_ % 2 == 0;
  }
  // An odd rank below 2R: takes in rank - 1's vector and returns the result to it.
  [[nodiscard]] constexpr bool folds_in() const noexcept {
    return rank_ < 2 * rem_ && rank_ % 2 == 1;
  }
  // This rank's index among the P' ranks that run the algorithm (-1 when it sits out).
  [[nodiscard]] constexpr int new_rank() const noexcept {
    if (sits_out()) return -1;
    return rank_ < 2 * rem_ ? rank_ / 2 : rank_ - rem_;
  }
  // The real rank of new rank `v`.
  [[nodiscard]] constexpr int real_rank(int v) const noexcept {
    return v < rem_ ? 2 * v + 1 : v + rem_;
  }
  // Calls f(rank) for every rank this one exchanges messages with when the algorithm pairs new
  // ranks v and v XOR 2^i (recursive doubling and halving), once each.
  template <class F>
  constexpr void for_each_partner(F&& f) const {
    if (sits_out()) {
      f(rank_ + 1);
      return;
    }
    if (folds_in()) f(rank_ - 1);
    for (int mask = 1; mask < pof2_; mask <<= 1) f(real_rank(new_rank() ^ mask));
  }

 private:
  int rank_;
  int pof2_ = 1;
  int rem_ = 0;
};

}  // namespace strait::comm
