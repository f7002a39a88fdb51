// The numbers csv_monitor writes are the text Python's repr() gives (DeepSpeed writes its CSV rows
// with Python's csv module), and the events' text lines read back to the same doubles. The expected
// strings below were printed by CPython 3.11's repr().
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <limits>
#include <random>

#include "monitor/monitor_csv.h"
#include "monitor/monitor_events.h"

namespace dsrt {
namespace {

TEST(MonitorFormat, MatchesPythonRepr) {
  const struct {
    double value;
    const char *text;
  } cases[] = {{0.0, "0.0"},
               {-0.0, "-0.0"},
               {1.0, "1.0"},
               {256.0, "256.0"},
               {65536.0, "65536.0"},
               {0.001, "0.001"},
               {1e-05, "1e-05"},
               {0.0001, "0.0001"},
               {0.1 + 0.2, "0.30000000000000004"},
               {2.302585092994046, "2.302585092994046"},
               {1e16, "1e+16"},
               {1e15, "1000000000000000.0"},
               {123456789012345678.0, "1.2345678901234568e+17"},
               {-1.5e-300, "-1.5e-300"},
               {1.7976931348623157e308, "1.7976931348623157e+308"},
               {5e-324, "5e-324"},
               {100000.0, "100000.0"},
               {0.5, "0.5"},
               {12345.678, "12345.678"},
               {std::numeric_limits<double>::infinity(), "inf"},
               {-std::numeric_limits<double>::infinity(), "-inf"},
               {std::nan(""), "nan"}};
  for (const auto &c : cases) EXPECT_EQ(python_float_text(c.value), c.text) << c.text;
}

TEST(MonitorFormat, RoundTripsRandomDoubles) {
  std::mt19937_64 rng(19);
  std::uniform_real_distribution<double> mantissa(-10.0, 10.0);
  std::uniform_int_distribution<int> exponent(-30, 30);
  for (int i = 0; i < 20000; ++i) {
    const double v = std::ldexp(mantissa(rng), exponent(rng));
    const std::string text = python_float_text(v);
    EXPECT_EQ(std::strtod(text.c_str(), nullptr), v) << text;
  }
}

TEST(MonitorEvents, WindowSumsAndResets) {
  MonitorEvents monitor(4);
  double loss = 0;
  EXPECT_FALSE(monitor.window_loss(&loss));
  const double losses[4] = {2.5, 1.25, 3.0, 0.75};
  double expected = 0;
  for (double l : losses) {
    monitor.add_loss(l);
    expected += l / 4;
  }
  ASSERT_TRUE(monitor.window_loss(&loss));
  EXPECT_EQ(loss, expected);
  BoundaryFacts facts;
  facts.samples_before = 16;
  facts.samples_after = 24;
  facts.next_lr = 0.125;
  auto events = monitor.boundary(facts);
  ASSERT_EQ(events.size(), 2u);  // no fp16, no wall_clock_breakdown
  EXPECT_EQ(events[0].name, "Train/Samples/train_loss");
  EXPECT_EQ(events[0].step, 16);
  EXPECT_EQ(events[1].name, "Train/Samples/lr");
  EXPECT_EQ(events[1].step, 24);
  EXPECT_EQ(events_text(events), "Train/Samples/train_loss," + python_float_text(expected) +
                                     ",16\nTrain/Samples/lr,0.125,24\n");
  EXPECT_FALSE(monitor.window_loss(&loss));  // the window starts again
  EXPECT_EQ(monitor.boundary(facts).size(), 1u);
}

}  // namespace
}  // namespace dsrt
