// estimate_memory_util.h -- dsrt_engine_memory against `dsrt estimate-memory`: run the command-line
// estimator with --json, read one figure, and bound the engine's figure by it.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

namespace dsrt {
namespace estimate_test {

// Runs `dsrt estimate-memory <args> --json` and reads the number after "<key>": (*out: the whole
// output, for messages). A fatal failure when the command fails or prints no such key: call it
// inside ASSERT_NO_FATAL_FAILURE.
inline void estimate_memory(const std::string &args, const std::string &key, uint64_t *value, std::string *out) {
  const std::string command = std::string(DSRT_BINARY_DIR) + "/bin/dsrt estimate-memory " + args + " --json";
  out->clear();
  FILE *pipe = popen(command.c_str(), "r");
  ASSERT_NE(pipe, nullptr) << command;
  char chunk[4096];
  for (size_t n; (n = fread(chunk, 1, sizeof chunk, pipe)) > 0;) out->append(chunk, n);
  ASSERT_EQ(pclose(pipe), 0) << command << "\n" << *out;
  const std::string field = "\"" + key + "\": ";
  const size_t at = out->find(field);
  ASSERT_NE(at, std::string::npos) << *out;
  *value = std::strtoull(out->c_str() + at + field.size(), nullptr, 10);
}

// The engine holds at least the estimate and at most `slack` bytes more (the padding the estimate
// does not count).
inline void expect_within_estimate(uint64_t engine_bytes, uint64_t estimated, uint64_t slack, const std::string &out) {
  EXPECT_LE(estimated, engine_bytes) << out;
  EXPECT_LE(engine_bytes, estimated + slack) << "engine " << engine_bytes << " bytes, estimate-memory " << estimated;
}

}  // namespace estimate_test
}  // namespace dsrt
