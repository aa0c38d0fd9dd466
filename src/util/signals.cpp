#include "src/util/signals.h"

#include <pthread.h>
#include <sched.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <iterator>

namespace lct {
namespace {

constexpr int kCleanupSignals[] = {SIGHUP,  SIGINT,  SIGQUIT, SIGTERM, SIGPIPE,
                                   SIGALRM, SIGUSR1, SIGUSR2, SIGXCPU, SIGXFSZ};
constexpr int kEntries = 64;
constexpr size_t kNameBytes = 4096;  // PATH_MAX, with the terminating NUL

// One temporary: the pid that created it (0: a free entry) and its absolute name. Read
// and written only while g_held is set (the flag's acquire/release orders them).
struct Entry {
  pid_t owner;
  char name[kNameBytes];
};
Entry g_entries[kEntries];
std::atomic_flag g_held = ATOMIC_FLAG_INIT;

sigset_t cleanup_set() {
  sigset_t set;
  sigemptyset(&set);
  for (const int sig : kCleanupSignals) sigaddset(&set, sig);
  return set;
}

// The handler (async-signal-safe: no allocation, no lock but the registry's flag, only
// unlink, nanosleep, getpid, sigaction, pthread_sigmask, raise and _exit).
void remove_temporaries_and_reraise(int sig) {
  // A thread changing the registry has these signals blocked, so it is never this one:
  // wait for it to finish (a rename or an unlink), then remove what is registered. The
  // flag stays held: the process ends here.
  bool held = false;
  for (int tries = 0; tries < 2000; ++tries) {
    if (!g_held.test_and_set(std::memory_order_acquire)) {
      held = true;
      break;
    }
    struct timespec ms = {0, 1000000};
    nanosleep(&ms, nullptr);
  }
  if (held) {
    const pid_t me = getpid();  // a forked child leaves its parent's temporaries alone
    for (Entry& e : g_entries)
      if (e.owner == me) {
        ::unlink(e.name);
        e.owner = 0;
      }
  }
  // the default action: the process ends by this signal, as it would have without lct's handler
  struct sigaction dfl;
  std::memset(&dfl, 0, sizeof dfl);
  dfl.sa_handler = SIG_DFL;
  sigemptyset(&dfl.sa_mask);
  sigaction(sig, &dfl, nullptr);
  sigset_t only;
  sigemptyset(&only);
  sigaddset(&only, sig);
  pthread_sigmask(SIG_UNBLOCK, &only, nullptr);
  raise(sig);
  _exit(128 + sig);  // not reached: every signal handled here ends the process by default
}

}  // namespace

const std::vector<int>& temporary_cleanup_signals() {
  static const std::vector<int> signals(std::begin(kCleanupSignals), std::end(kCleanupSignals));
  return signals;
}

void install_temporary_cleanup() {
  for (const int sig : kCleanupSignals) {
    struct sigaction old;
    std::memset(&old, 0, sizeof old);
    if (sigaction(sig, nullptr, &old) != 0) continue;
    // ignored, or a handler of the program's own (lct train's, or this one): kept
    if ((old.sa_flags & SA_SIGINFO) != 0 || old.sa_handler != SIG_DFL) continue;
    struct sigaction sa;
    std::memset(&sa, 0, sizeof sa);
    sa.sa_handler = remove_temporaries_and_reraise;
    sa.sa_mask = cleanup_set();  // a second signal waits for the first to end the process
    sa.sa_flags = SA_RESTART;
    sigaction(sig, &sa, nullptr);
  }
}

TemporaryRegistryLock::TemporaryRegistryLock() {
  const sigset_t set = cleanup_set();
  pthread_sigmask(SIG_BLOCK, &set, &saved_mask_);
  // held by another thread changing the registry (briefly), or by a handler on another
  // thread that is ending the process
  while (g_held.test_and_set(std::memory_order_acquire)) sched_yield();
}

TemporaryRegistryLock::~TemporaryRegistryLock() {
  g_held.clear(std::memory_order_release);
  pthread_sigmask(SIG_SETMASK, &saved_mask_, nullptr);  // a signal that came meanwhile arrives now
}

int TemporaryRegistryLock::add(const char* name) {
  const size_t length = std::strlen(name);
  for (int k = 0; k < kEntries; ++k) {
    Entry& e = g_entries[k];
    if (e.owner != 0) continue;
    size_t at = 0;
    if (name[0] != '/') {  // relative: to the folder the name was made in
      if (::getcwd(e.name, kNameBytes) == nullptr) return -1;
      at = std::strlen(e.name);
      if (at > 0 && e.name[at - 1] != '/') e.name[at++] = '/';
    }
    if (at + length + 1 > kNameBytes) return -1;
    std::memcpy(e.name + at, name, length + 1);
    e.owner = ::getpid();
    return k;
  }
  return -1;
}

void TemporaryRegistryLock::remove(int entry) {
  if (entry >= 0 && entry < kEntries) g_entries[entry].owner = 0;
}

int registered_temporaries() {
  const TemporaryRegistryLock lock;
  const pid_t me = ::getpid();
  int n = 0;
  for (const Entry& e : g_entries) n += e.owner == me ? 1 : 0;
  return n;
}

}  // namespace lct
