// What an elastic job's log and its joiner's log must say about one admission (the test of
// `strait train --elastic --join` on loopback and the WAN testbed's): one joiner admitted after
// step 6 as replica 2 of generation 2, and the state the job sent hashing to what the joiner holds.
#pragma once

#include <gtest/gtest.h>

#include <regex>
#include <string>

namespace strait::test {

inline void expect_joiner_admitted_after_step_6_with_the_sent_state(const std::string& job,
                                                                    const std::string& joiner) {
  EXPECT_NE(job.find("after step 6 admitted 1 joiner (2 ranks); generation 2: replicas 0,2"),
            std::string::npos)
      << job;
  // The state sent and the state the joiner holds afterwards pack to the same bytes.
  static const std::regex kSent(R"(sent the state of step 6 \([^,]+, xxh3 ([0-9a-f]{16})\))");
  static const std::regex kHeld(
      R"(joined as replica 2 \(rank 1 of 2, generation 2\) after step 6: .* packs to xxh3 )"
      R"(([0-9a-f]{16}))");
  std::smatch sent;
  std::smatch held;
  ASSERT_TRUE(std::regex_search(job, sent, kSent)) << job;
  ASSERT_TRUE(std::regex_search(joiner, held, kHeld)) << joiner;
  EXPECT_EQ(sent[1].str(), held[1].str());
}

}  // namespace strait::test
