// A signal that ends the process removes its temporaries first (src/util/signals.h), and
// only its own; ignored signals and the program's own handlers are kept. Each case runs
// in a forked child (which a signal may end), the parent checks how it ended and the folder.
#include <gtest/gtest.h>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <filesystem>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "src/io/output_files.h"
#include "src/util/signals.h"

namespace lct::signals_test {  // the file's own namespace: a unity build compiles test files together
namespace {
namespace fs = std::filesystem;

// A new empty folder for one case (removed by the caller).
fs::path fresh_folder(const std::string& name) {
  const fs::path dir = fs::temp_directory_path() / ("lct_signals_" + std::to_string(::getpid()) + "_" + name);
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

std::vector<std::string> files_in(const fs::path& dir) {
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(dir)) names.push_back(e.path().filename().string());
  return names;
}

// Runs `child` in a forked process that ends with _exit(child()) (2 if it throws) unless
// a signal ends it first; waitpid's status.
int run_forked(const std::function<int()>& child) {
  const pid_t pid = ::fork();
  if (pid < 0) throw std::runtime_error("fork failed");
  if (pid == 0) {
    int code = 2;
    try {
      code = child();
    } catch (...) {
    }
    ::_exit(code);
  }
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  return status;
}

// The signal's default disposition in this process (a test runner may start it with
// some ignored).
void set_default(int sig) {
  struct sigaction sa {};
  sa.sa_handler = SIG_DFL;
  sigemptyset(&sa.sa_mask);
  sigaction(sig, &sa, nullptr);
}

volatile sig_atomic_t g_seen = 0;
void note_signal(int sig) { g_seen = sig; }

TEST(TemporarySignals, ASignalRemovesEveryTemporaryAndStillEndsTheProcess) {
  for (const int sig : {SIGTERM, SIGINT, SIGHUP, SIGPIPE}) {
    const fs::path dir = fresh_folder("ends_" + std::to_string(sig));
    const int status = run_forked([&] {
      set_default(sig);
      // two live at once (lct export's model.safetensors and config.json), one written
      TempFile weights((dir / "model.safetensors").string()), config((dir / "config.json").string());
      weights.write_all_and_close("weights", 7);
      if (registered_temporaries() != 2 || files_in(dir).size() != 2) return 3;
      ::raise(sig);
      return 4;  // not reached: the signal ends the process
    });
    EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == sig)
        << "signal " << sig << ": the child ended with status " << status << ", not by the signal";
    EXPECT_TRUE(files_in(dir).empty()) << "signal " << sig << ": left " << files_in(dir).front();
    fs::remove_all(dir);
  }
}

TEST(TemporarySignals, OnlyTheProcesssOwnTemporariesAreRemoved) {
  const fs::path dir = fresh_folder("own");
  TempFile parents((dir / "parent.h5").string());  // registered by this process
  const int status = run_forked([&] {
    set_default(SIGTERM);
    TempFile childs((dir / "child.h5").string());
    ::raise(SIGTERM);
    return 4;
  });
  EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGTERM) << "status " << status;
  EXPECT_EQ(files_in(dir), std::vector<std::string>{fs::path(parents.name()).filename().string()})
      << "the child's signal must remove the child's temporary and leave its parent's";
  fs::remove_all(dir);
}

TEST(TemporarySignals, RelativeNamesAreRemovedAfterAChangeOfFolder) {
  const fs::path dir = fresh_folder("relative");
  const int status = run_forked([&] {
    set_default(SIGTERM);
    if (::chdir(dir.c_str()) != 0) return 3;
    TempFile t("out.csv");
    if (::chdir("/") != 0) return 3;
    ::raise(SIGTERM);
    return 4;
  });
  EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGTERM) << "status " << status;
  EXPECT_TRUE(files_in(dir).empty());
  fs::remove_all(dir);
}

TEST(TemporarySignals, IgnoredSignalsAndTheProgramsOwnHandlersAreKept) {
  const fs::path dir = fresh_folder("kept");
  const int status = run_forked([&] {
    // lct train's handler (stop at a step boundary) and an ignored SIGINT (a shell's
    // background job) stay in force: neither ends the process nor removes anything
    struct sigaction own {};
    own.sa_handler = note_signal;
    sigemptyset(&own.sa_mask);
    sigaction(SIGTERM, &own, nullptr);
    struct sigaction ignore {};
    ignore.sa_handler = SIG_IGN;
    sigemptyset(&ignore.sa_mask);
    sigaction(SIGINT, &ignore, nullptr);
    TempFile t((dir / "step_00000004.h5").string());
    ::raise(SIGTERM);
    ::raise(SIGINT);
    if (g_seen != SIGTERM || !fs::exists(t.name())) return 3;
    struct sigaction now {};
    sigaction(SIGTERM, nullptr, &now);
    if (now.sa_handler != note_signal) return 5;
    sigaction(SIGINT, nullptr, &now);
    if (now.sa_handler != SIG_IGN) return 6;
    t.write_all_and_close("ok", 2);
    t.commit();
    return 0;
  });
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "status " << status;
  EXPECT_EQ(files_in(dir), std::vector<std::string>{"step_00000004.h5"});
  fs::remove_all(dir);
}

TEST(TemporarySignals, TheRegistryHoldsExactlyTheLiveTemporaries) {
  const fs::path dir = fresh_folder("registry");
  const int before = registered_temporaries();
  ASSERT_EQ(before, 0) << "no other temporary is live between tests";
  {
    TempFile committed((dir / "a.txt").string());
    EXPECT_EQ(registered_temporaries(), before + 1);
    committed.write_all_and_close("a", 1);
    committed.commit();
    EXPECT_EQ(registered_temporaries(), before);
    TempFile removed((dir / "b.txt").string());
    EXPECT_EQ(registered_temporaries(), before + 1);
  }
  EXPECT_EQ(registered_temporaries(), before);
  write_text_atomically((dir / "c.txt").string(), "c");
  EXPECT_EQ(registered_temporaries(), before);
  {
    TempFile weights((dir / "d.safetensors").string()), config((dir / "d.json").string());
    weights.write_all_and_close("w", 1);
    config.write_all_and_close("c", 1);
    EXPECT_EQ(registered_temporaries(), before + 2);
    TempFile::commit_all({&weights, &config});  // renamed together for a signal
    EXPECT_EQ(registered_temporaries(), before);
  }
  // more live at once than the registry holds: still written, the overflow unregistered
  std::vector<std::unique_ptr<TempFile>> many;
  for (int k = 0; k < 70; ++k) many.push_back(std::make_unique<TempFile>((dir / ("m" + std::to_string(k))).string()));
  EXPECT_EQ(registered_temporaries(), 64);
  many.clear();
  EXPECT_EQ(registered_temporaries(), before);
  auto left = files_in(dir);
  std::sort(left.begin(), left.end());
  EXPECT_EQ(left, (std::vector<std::string>{"a.txt", "c.txt", "d.json", "d.safetensors"}));
  fs::remove_all(dir);
}

}  // namespace
}  // namespace lct::signals_test
