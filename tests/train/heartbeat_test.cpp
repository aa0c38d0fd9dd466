// The heartbeat inside long work (src/util/heartbeat.h) and the training step's line
// (src/train/heartbeat.h): the line says where the step is, how much of its FLOPs are
// done and how long the rest takes at the rate so far; the thread prints while work runs
// longer than the interval and never after it ended.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <thread>

#include "src/train/heartbeat.h"
#include "src/util/heartbeat.h"

namespace lct::heartbeat_test {  // the file's own namespace: a unity build compiles test files together
namespace {

TEST(Heartbeat, LineSaysWhereTheStepIs) {
  StepProgress progress;
  progress.reset();
  EXPECT_EQ(step_heartbeat_line(3, progress.position(), 100.0, 4, 2, 2.0),
            "step 3: starting | 0% of the step's FLOPs | 2.0 s in");
  progress.at("backward", 1, 0);
  progress.finished(10.0);
  progress.finished(15.0);
  // a quarter done in 92 s: three times as long to go; in 300 s, 15 minutes
  EXPECT_EQ(step_heartbeat_line(3, progress.position(), 100.0, 4, 2, 92.0),
            "step 3: backward, layer 2 of 4, micro-batch 1 of 2 | 25% of the step's FLOPs | 92 s in, about 276 s to go");
  EXPECT_EQ(step_heartbeat_line(3, progress.position(), 100.0, 4, 1, 300.0),
            "step 3: backward, layer 2 of 4 | 25% of the step's FLOPs | 300 s in, about 15.0 min to go");
  progress.at("loss", -1, 1);
  progress.finished(75.0);
  EXPECT_EQ(step_heartbeat_line(12, progress.position(), 100.0, 4, 1, 7300.0),
            "step 12: loss | 100% of the step's FLOPs | 2.0 h in");
}

TEST(Heartbeat, TimeToGoAtTheRateSoFar) {
  EXPECT_EQ(Heartbeat::time_text(4.25, 0.0), "4.2 s in");  // nothing done: no estimate
  EXPECT_EQ(Heartbeat::time_text(30.0, 0.25), "30 s in, about 90 s to go");
  EXPECT_EQ(Heartbeat::time_text(600.0, 0.5), "10.0 min in, about 10.0 min to go");
  EXPECT_EQ(Heartbeat::time_text(8000.0, 1.0), "2.2 h in");  // all done: none
}

// the lines a heartbeat of `interval_s` wrote to a file while work of `work_s` ran, and
// after it ended
std::string lines_of(double interval_s, double work_s, std::string* after) {
  std::FILE* f = std::tmpfile();
  {
    Heartbeat h(interval_s, f);
    {
      const HeartbeatScope scope(&h, [](double elapsed_s) { return "working, " + Heartbeat::duration_text(elapsed_s) + " in"; });
      std::this_thread::sleep_for(std::chrono::duration<double>(work_s));
    }
    if (after) {  // ten more intervals without work
      const long at_end = std::ftell(f);
      std::this_thread::sleep_for(std::chrono::duration<double>(10 * interval_s));
      std::fflush(f);
      *after = std::ftell(f) == at_end ? "" : "written after the work ended";
    }
  }
  std::rewind(f);
  std::string text;
  for (int c; (c = std::fgetc(f)) != EOF;) text += char(c);
  std::fclose(f);
  return text;
}

TEST(Heartbeat, PrintsWhileWorkRunsLongerThanTheIntervalAndNeverAfter) {
  std::string after;
  // 0.3 s of work at 0.02 s: a line every interval once the first has passed (the thread
  // wakes every 5 ms; a loaded machine may skip some, never all)
  const std::string text = lines_of(0.02, 0.3, &after);
  EXPECT_GE(std::count(text.begin(), text.end(), '\n'), 2) << text;
  EXPECT_EQ(text.rfind("working, ", 0), 0u) << text;  // a file is not a terminal: plain lines
  EXPECT_EQ(text.find('\r'), std::string::npos) << text;
  EXPECT_EQ(after, "");
  // work shorter than the interval prints nothing; an interval of 0 starts no thread
  EXPECT_EQ(lines_of(5.0, 0.05, nullptr), "");
  EXPECT_EQ(lines_of(0.0, 0.05, nullptr), "");
}

}  // namespace
}  // namespace lct::heartbeat_test
