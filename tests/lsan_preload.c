/* Preloaded by scripts/test.sh --sanitize so that LeakSanitizer matches every leak that a
   library keeps until exit (tests/sanitizer.supp) by the module of the frame that
   allocated it, without symbolizing anything: the sanitizer suite runs with
   symbolize=0 (symbolizing one frame made each MPI rank load every module's debug
   information, about a third of a sanitized MPI launch), and reruns a failed test with
   names.

   1. dlclose does nothing, so the MPI components OpenMPI unloads at MPI_Finalize stay
      mapped and a frame of theirs still has a module name (not "<unknown module>").
   2. asprintf and vasprintf (and their _FORTIFY_SOURCE forms, which OpenMPI, PMIx and
      hwloc call) format here, compiled with frame pointers: in libc, whose code keeps
      none, the stack of their allocation ended inside libc, so no library's module was on
      it. Here the frame after this file's is the caller's (OpenMPI's). lct never calls
      them. */
#define _GNU_SOURCE
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

int dlclose(void* handle) {
  (void)handle;
  return 0;
}

static int format_new(char** out, const char* format, va_list args) {
  va_list copy;
  va_copy(copy, args);
  const int n = vsnprintf(NULL, 0, format, copy);
  va_end(copy);
  if (n < 0) return -1;
  char* text = malloc((size_t)n + 1);
  if (!text) return -1;
  vsnprintf(text, (size_t)n + 1, format, args);
  *out = text;
  return n;
}

int vasprintf(char** out, const char* format, va_list args) { return format_new(out, format, args); }

int __vasprintf_chk(char** out, int flag, const char* format, va_list args) {
  (void)flag;
  return format_new(out, format, args);
}

int asprintf(char** out, const char* format, ...) {
  va_list args;
  va_start(args, format);
  const int n = format_new(out, format, args);
  va_end(args);
  return n;
}

int __asprintf_chk(char** out, int flag, const char* format, ...) {
  (void)flag;
  va_list args;
  va_start(args, format);
  const int n = format_new(out, format, args);
  va_end(args);
  return n;
}
