// Signals that end lct, and the temporary files they must not leave behind.
//
// Every temporary file lct creates (src/io/output_files.h: "<target>.lct-XXXXXX") is in a
// registry of this process from the moment it exists until it is renamed into place or
// removed. Creating one installs, for each of the signals below whose disposition is still
// the default (ending the process), a handler that removes (unlink) every temporary this
// process registered, restores the default and raises the signal again: the process still
// ends by that signal (128 + N from a shell, a core where the default dumps one), and leaves
// no temporary. That holds for every command that writes (export, make-batch, eval,
// bench, simulate, ...), and on every MPI rank, each with its own registry.
//   - A signal the process ignores stays ignored (nohup, a shell's background job's
//     SIGINT), and one with a handler of its own keeps it: lct train's SIGINT/SIGTERM
//     handler (src/train/trainer.h) stops at a step boundary with a checkpoint, and its
//     temporaries are removed as they are after any write (committed or unlinked).
//   - A second signal to the thread whose handler runs waits (these signals are blocked
//     in it): the first one ends the process. One that another thread takes meanwhile
//     waits for the registry's flag as below, so it may end the process before the
//     first handler has removed every temporary (at most 2 s later).
//   - Only this process's own names are removed: each entry carries the pid that
//     created it, so a forked child's handler leaves its parent's temporaries alone.
//   - Faults of the process itself (SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT, SIGTRAP,
//     SIGSYS) are left as they are, so a crash dumps its core untouched; SIGKILL cannot
//     be handled (a run's folder is cleared of checkpoint temporaries by the next run,
//     src/io/run_folder.h).
//
// The handler is async-signal-safe: the registry is a fixed array of fixed-size names
// (absolute, so a change of folder cannot redirect them), guarded by a lock-free flag
// that code changing the registry holds only with these signals blocked in its thread;
// a handler on another thread waits for it (at most 2 s, then it ends the process without
// removing anything rather than read a half-written entry).
#pragma once

#include <signal.h>

#include <vector>

namespace lct {

// The signals whose default action ends the process and that reach it from outside:
// SIGHUP, SIGINT, SIGQUIT, SIGTERM, SIGPIPE, SIGALRM, SIGUSR1, SIGUSR2, SIGXCPU, SIGXFSZ.
const std::vector<int>& temporary_cleanup_signals();

// Installs the removing handler for each of those signals whose disposition is the
// default (SIG_DFL); leaves ignored ones and other handlers as they are. Cheap and
// idempotent: every new temporary calls it, so a handler set to the default later is
// covered again.
void install_temporary_cleanup();

// While one lives, this thread may change the registry: the signals above are blocked in
// this thread and the registry is held. Create, rename or remove a temporary inside it,
// so that a signal sees the file and its entry change together.
class TemporaryRegistryLock {
 public:
  TemporaryRegistryLock();
  ~TemporaryRegistryLock();
  TemporaryRegistryLock(const TemporaryRegistryLock&) = delete;
  TemporaryRegistryLock& operator=(const TemporaryRegistryLock&) = delete;

  // Records `name`, a file this process just created, as one of its temporaries: the
  // entry's index, or -1 when no entry is free (64 live at once) or the name (made
  // absolute) does not fit 4096 bytes; such a file is not removed by a signal.
  int add(const char* name);
  // Forgets entry `entry` (from add; -1 does nothing).
  void remove(int entry);

 private:
  sigset_t saved_mask_;
};

// How many temporaries this process has registered now (for tests).
int registered_temporaries();

}  // namespace lct
