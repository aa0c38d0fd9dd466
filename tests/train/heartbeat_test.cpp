// The heartbeat inside long steps (src/train/heartbeat.h): its line says where the step
// is, how much of its FLOPs are done and how long the rest takes at the rate so far.
#include <gtest/gtest.h>

#include <string>

#include "src/train/heartbeat.h"

namespace lct::heartbeat_test {  // the file's own namespace: a unity build compiles test files together
namespace {

TEST(Heartbeat, LineSaysWhereTheStepIs) {
  StepProgress progress;
  progress.reset();
  EXPECT_EQ(Heartbeat::line(3, progress.position(), 100.0, 4, 2, 2.0),
            "step 3: starting | 0% of the step's FLOPs | 2.0 s in");
  progress.at("backward", 1, 0);
  progress.finished(10.0);
  progress.finished(15.0);
  // a quarter done in 92 s: three times as long to go; in 300 s, 15 minutes
  EXPECT_EQ(Heartbeat::line(3, progress.position(), 100.0, 4, 2, 92.0),
            "step 3: backward, layer 2 of 4, micro-batch 1 of 2 | 25% of the step's FLOPs | 92 s in, about 276 s to go");
  EXPECT_EQ(Heartbeat::line(3, progress.position(), 100.0, 4, 1, 300.0),
            "step 3: backward, layer 2 of 4 | 25% of the step's FLOPs | 300 s in, about 15.0 min to go");
  progress.at("loss", -1, 1);
  progress.finished(75.0);
  EXPECT_EQ(Heartbeat::line(12, progress.position(), 100.0, 4, 1, 7300.0),
            "step 12: loss | 100% of the step's FLOPs | 2.0 h in");
}

}  // namespace
}  // namespace lct::heartbeat_test
