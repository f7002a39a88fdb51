// The environment's tuning numbers (util/env_number.h): the default when unset, the value when it
// is in range, the default plus one warning naming the variable otherwise.
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "util/env_number.h"
#include "util/log.h"

namespace dsrt {
namespace {

std::vector<std::string> g_messages;

void keep(int32_t, const char *message, void *) { g_messages.emplace_back(message); }

class EnvNumber : public ::testing::Test {
 protected:
  void SetUp() override {
    g_messages.clear();
    log_set_callback(keep, nullptr);
  }
  void TearDown() override {
    log_set_callback(nullptr, nullptr);
    unsetenv(name_.c_str());
  }
  // A fresh variable per case: the warning is once per variable and process.
  double read(const char *value, double fallback, const EnvNumberRule &rule) {
    name_ = "DSRT_TEST_ENV_NUMBER_" + std::to_string(++serial_);
    if (value) setenv(name_.c_str(), value, 1);
    return env_number(name_.c_str(), fallback, rule);
  }
  std::string name_;
  static int serial_;
};
int EnvNumber::serial_ = 0;

constexpr EnvNumberRule kBytes{4096.0, 16777216.0, true, "bytes"};
constexpr EnvNumberRule kSeconds{0.001, 86400.0, false, "seconds"};

TEST_F(EnvNumber, UnsetOrEmptyGivesTheDefaultSilently) {
  EXPECT_EQ(read(nullptr, 1048576.0, kBytes), 1048576.0);
  EXPECT_EQ(read("", 1048576.0, kBytes), 1048576.0);
  EXPECT_TRUE(g_messages.empty());
}

TEST_F(EnvNumber, ValuesInRangeAreTaken) {
  EXPECT_EQ(read("4096", 1.0, kBytes), 4096.0);
  EXPECT_EQ(read("16777216", 1.0, kBytes), 16777216.0);
  EXPECT_EQ(read("2.5", 120.0, kSeconds), 2.5);
  EXPECT_EQ(read("1e3", 120.0, kSeconds), 1000.0);
  EXPECT_TRUE(g_messages.empty());
}

TEST_F(EnvNumber, BadValuesGiveTheDefaultAndOneWarningNamingTheVariable) {
  const char *bad_bytes[] = {"4095", "16777217", "8192.5", "lots", "12kb", "nan", "inf", "-4096", " "};
  for (const char *value : bad_bytes) {
    g_messages.clear();
    EXPECT_EQ(read(value, 1048576.0, kBytes), 1048576.0) << value;
    ASSERT_EQ(g_messages.size(), 1u) << value;
    EXPECT_NE(g_messages[0].find(name_ + "='" + value + "'"), std::string::npos) << g_messages[0];
    EXPECT_NE(g_messages[0].find("whole number of bytes in 4096 .. 16777216; using 1048576"), std::string::npos)
        << g_messages[0];
  }
  g_messages.clear();
  EXPECT_EQ(read("0", 120.0, kSeconds), 120.0);
  ASSERT_EQ(g_messages.size(), 1u);
  EXPECT_NE(g_messages[0].find("is not a number of seconds in 0.001 .. 86400; using 120"), std::string::npos)
      << g_messages[0];
}

TEST_F(EnvNumber, TheWarningIsOncePerVariable) {
  setenv("DSRT_TEST_ENV_NUMBER_ONCE", "bad", 1);
  EXPECT_EQ(env_number("DSRT_TEST_ENV_NUMBER_ONCE", 7.0, kSeconds), 7.0);
  EXPECT_EQ(env_number("DSRT_TEST_ENV_NUMBER_ONCE", 7.0, kSeconds), 7.0);
  unsetenv("DSRT_TEST_ENV_NUMBER_ONCE");
  EXPECT_EQ(g_messages.size(), 1u);
}

}  // namespace
}  // namespace dsrt
