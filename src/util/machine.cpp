#include "src/util/machine.h"

#include <fmt/format.h>
#include <cblas.h>
#include <fcntl.h>
#include <omp.h>
#include <sched.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <cstdlib>
#include <fstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "src/util/log.h"

// OpenBLAS's buffer pool (exported by libopenblas, declared in its internal common.h):
// a buffer of BUFFER_SIZE, a mapped one that is free or else a new mapping, and its return
extern "C" void* blas_memory_alloc(int procpos);
extern "C" void blas_memory_free(void* buffer);

namespace lct {

namespace {
// Address space the process has mapped (VmSize), in bytes.
double mapped_bytes() { return std::max(0.0, proc_kib_field("/proc/self/status", "VmSize")); }

// A worker thread's stack as libgomp maps it: OMP_STACKSIZE, else GOMP_STACKSIZE (a
// number in KiB, or with a suffix B, K, M or G), else glibc's default thread stack
// (RLIMIT_STACK's soft limit, 2 MiB when unlimited); and its guard page. The C library
// only: the start-up check runs it before any constructor.
double thread_stack_bytes(const char* omp_stacksize, const char* gomp_stacksize) {
  const long page = sysconf(_SC_PAGESIZE) > 0 ? sysconf(_SC_PAGESIZE) : 4096;
  for (const char* text : {omp_stacksize, gomp_stacksize}) {
    if (!text) continue;
    char* end = nullptr;
    const double v = std::strtod(text, &end);
    if (end == text || !(v > 0)) continue;
    while (*end == ' ') ++end;
    double unit = 1024;
    switch (*end) {
      case 'b': case 'B': unit = 1; break;
      case 'm': case 'M': unit = 1048576; break;
      case 'g': case 'G': unit = 1073741824.0; break;
      default: break;
    }
    return v * unit + double(page);
  }
  rlimit rl{};
  const double fallback = 2.0 * 1048576;
  const double stack = getrlimit(RLIMIT_STACK, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY ? double(rl.rlim_cur) : fallback;
  return std::max(stack, 16384.0) + double(page);
}

// A malloc arena, which glibc maps for a thread's first allocation (HEAP_MAX_SIZE on
// 64-bit, 2 x 32 MiB), measured: 64 MiB beside the stack when an OpenMP thread allocates
constexpr double kThreadArenaBytes = 64.0 * 1048576;

// A reserve for what lct's start-up maps beyond the program, OpenBLAS's buffers and the
// threads' stacks before a command checks its own memory: the other libraries'
// constructors (0.13 MiB with lct's libraries linked, measured), the heap of the command
// line's parse and of the command's set-up
constexpr double kStartReserveBytes = 16.0 * 1048576;
}  // namespace

double address_space_limit() {
  rlimit rl{};
  if (getrlimit(RLIMIT_AS, &rl) != 0 || rl.rlim_cur == RLIM_INFINITY) return std::numeric_limits<double>::infinity();
  return double(rl.rlim_cur);
}

double thread_address_space(int threads) {
  const int n = std::max(1, threads);
  const double stack = thread_stack_bytes(std::getenv("OMP_STACKSIZE"), std::getenv("GOMP_STACKSIZE"));
  return double(n) * kBlasBufferBytes + double(n - 1) * (stack + kThreadArenaBytes);
}

namespace {
// The threads whose products' address space configure_threads has mapped already (under
// a finite RLIMIT_AS): available_memory has nothing more to set aside for them.
int g_threads_mapped = 0;
}  // namespace

int configure_threads(int64_t threads) {
  int n = int(threads);
  const bool automatic = n <= 0;
  if (automatic) {
    const char* local = std::getenv("OMPI_COMM_WORLD_LOCAL_SIZE");
    const int ranks_here = local ? std::max(1, std::atoi(local)) : 1;
    n = std::max(1, omp_get_num_procs() / ranks_here);
  }
  // OpenBLAS's buffers for its threads: mapped for as many as it has run, its
  // constructor's first; raising its count maps the rest at once (goto_set_num_threads)
  static int blas_threads = openblas_get_num_threads();
  const double limit = address_space_limit();
  if (!std::isfinite(limit)) {
    omp_set_num_threads(n);
    openblas_set_num_threads(n);
    blas_threads = std::max(blas_threads, n);
    return n;
  }
  // Under an address-space limit everything the threads' products will map is mapped
  // here, once it is known to fit: OpenBLAS's buffers for its threads and one for each
  // thread calling a product, the OpenMP threads with their stacks and malloc arenas. No
  // product maps anything later, so none can meet OpenBLAS's endless retry, and the
  // memory checks after this (available_memory) find it all in VmSize.
  const double mapped = mapped_bytes();
  // (what an earlier call mapped is in `mapped`)
  const auto needs = [&](int k) {
    const double more = k <= g_threads_mapped ? 0.0
                        : thread_address_space(k) - (g_threads_mapped > 0 ? thread_address_space(g_threads_mapped) : 0.0);
    return mapped + double(std::max(0, k - blas_threads)) * kBlasBufferBytes + more;
  };
  if (automatic) {
    const int wanted = n;
    while (n > 1 && needs(n) > limit) --n;
    if (n < wanted)
      log_warn(fmt::format("{} thread{} instead of {}: the address-space limit (ulimit -v) of {} holds no more threads' "
                           "OpenBLAS buffers ({} MiB for each thread it runs and each thread calling a product), "
                           "stacks and malloc arenas, with {} mapped already; raise it for more threads",
                           n, n == 1 ? "" : "s", wanted, bytes_text(limit), kBlasBufferBytes / 1048576,
                           bytes_text(mapped)));
  }
  if (needs(n) > limit)
    throw std::runtime_error(fmt::format(
        "{} thread{} need about {} of address space for OpenBLAS's buffers ({} MiB for each thread it runs and each "
        "thread calling a product), their stacks and malloc arenas, but the address-space limit (ulimit -v) of {} "
        "leaves {} ({} mapped); give fewer threads or raise the limit",
        n, n == 1 ? "" : "s", bytes_text(needs(n) - mapped), kBlasBufferBytes / 1048576, bytes_text(limit),
        bytes_text(std::max(0.0, limit - mapped)), bytes_text(mapped)));
  omp_set_num_threads(n);
  openblas_set_num_threads(n);
  blas_threads = std::max(blas_threads, n);
  // a buffer for each thread that may call a product at once, held together so that each
  // is its own (a free mapped one, or a new mapping), then given back for the products
  std::vector<void*> held(size_t(n), nullptr);
  for (void*& b : held) b = blas_memory_alloc(0);
  for (void* b : held)
    if (b) blas_memory_free(b);
  // the thread pool, each thread with its stack and its malloc arena
#pragma omp parallel num_threads(n)
  {
    void* volatile first = std::malloc(64);
    std::free(first);
  }
  g_threads_mapped = std::max(g_threads_mapped, n);
  return n;
}

namespace {
// The value of `name` in the loader's environment (the C library's own may not be set
// up before the libraries' constructors).
const char* loader_env(char** envp, const char* name) {
  const size_t n = std::strlen(name);
  for (char** e = envp; e && *e; ++e)
    if (std::strncmp(*e, name, n) == 0 && (*e)[n] == '=') return *e + n + 1;
  return nullptr;
}

// /proc/self/status's VmSize in bytes, read with system calls only; -1 when unknown.
double status_vm_size() {
  char text[16384];
  const int fd = ::open("/proc/self/status", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  size_t have = 0;
  for (ssize_t got; have + 1 < sizeof text && (got = ::read(fd, text + have, sizeof text - 1 - have)) > 0;)
    have += size_t(got);
  ::close(fd);
  text[have] = '\0';
  const char* at = std::strstr(text, "\nVmSize:");
  return at ? std::strtod(at + 8, nullptr) * 1024.0 : -1;
}
}  // namespace

void refuse_address_space_below_start(char** envp) {
  const double limit = address_space_limit();
  if (!std::isfinite(limit)) return;
  const double mapped = status_vm_size();
  if (mapped < 0) return;
  // OpenBLAS's threads at load (0.3.21, OpenMP build): OMP_NUM_THREADS as atoi reads it
  // (the first number of a list), else all, at most the CPUs it may run on, which it
  // counts as this does: the affinity mask (a cpuset or taskset of 4 CPUs on a 128-CPU
  // host is 4), the configured CPUs when the mask cannot be read
  cpu_set_t mask;
  CPU_ZERO(&mask);
  const long configured = sysconf(_SC_NPROCESSORS_CONF) > 0 ? sysconf(_SC_NPROCESSORS_CONF) : 2;
  const long cpus = sched_getaffinity(0, sizeof mask, &mask) == 0 && CPU_COUNT(&mask) > 0 ? CPU_COUNT(&mask) : configured;
  const char* omp = loader_env(envp, "OMP_NUM_THREADS");
  const long asked = omp ? std::atol(omp) : 0;
  const int threads = int(asked > 0 ? std::min(asked, cpus) : cpus);
  const double stack = thread_stack_bytes(loader_env(envp, "OMP_STACKSIZE"), loader_env(envp, "GOMP_STACKSIZE"));
  const auto needs = [&](int t) {
    return mapped + double(t + 1) * kBlasBufferBytes + double(t - 1) * stack + kStartReserveBytes;
  };
  const double need = needs(threads);
  if (need <= limit) return;
  int fits = threads - 1;
  while (fits >= 1 && needs(fits) > limit) --fits;
  const double mib = 1048576;
  char stacks[160] = "", instead[160] = "", line[1024];
  if (threads > 1)
    std::snprintf(stacks, sizeof stacks, "; %d worker thread stack%s of %.1f MiB", threads - 1,
                  threads - 1 == 1 ? "" : "s", stack / mib);
  if (fits >= 1)
    std::snprintf(instead, sizeof instead, ", or set OMP_NUM_THREADS=%d (%d thread%s: %.1f MiB)", fits, fits,
                  fits == 1 ? "" : "s", needs(fits) / mib);
  const int n = std::snprintf(
      line, sizeof line,
      "lct: error: the address-space limit (ulimit -v) of %.1f MiB is below the %.1f MiB lct needs to start with %d "
      "thread%s (the program and its libraries %.1f MiB; OpenBLAS's buffers %d x %.0f MiB, one for each of its "
      "threads and one for the main thread's products%s; %.0f MiB for the start-up); raise it%s\n",
      limit / mib, need / mib, threads, threads == 1 ? "" : "s", mapped / mib, threads + 1, kBlasBufferBytes / mib,
      stacks, kStartReserveBytes / mib, instead);
  if (n > 0) {
    const ssize_t written = ::write(STDERR_FILENO, line, std::min(size_t(n), sizeof line - 1));
    (void)written;
  }
  _exit(1);
}

std::string cache_folder() {
  if (const char* d = std::getenv("LCT_CACHE_DIR"); d && *d) return d;
  if (const char* d = std::getenv("XDG_CACHE_HOME"); d && *d) return std::string(d) + "/lct";
  if (const char* d = std::getenv("HOME"); d && *d) return std::string(d) + "/.cache/lct";
  return {};
}

std::string cpu_model_name() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("model name", 0) == 0) return line.substr(line.find(':') + 2);
  return "unknown CPU";
}

std::string host_name() {
  std::string name(256, '\0');
  if (::gethostname(name.data(), name.size() - 1) != 0 || name[0] == 0) return "unknown host";
  return name.substr(0, name.find('\0'));
}

namespace {
constexpr const char* kChosenFrom = "LCT_OPENBLAS_CHOSE";  // what OpenBLAS picked itself, before lct set the core

bool blas_core_uses_avx512(std::string core) {
  for (char& ch : core) ch = char(std::tolower(static_cast<unsigned char>(ch)));
  return core == "skylakex" || core == "cooperlake" || core == "sapphirerapids";
}
}  // namespace

void choose_blas_kernels(char** argv) {
  if (std::getenv("OPENBLAS_CORETYPE") || std::getenv(kChosenFrom)) return;  // the user's, or done
  const std::string core = openblas_get_corename();
  if (blas_core_uses_avx512(core) || !__builtin_cpu_supports("avx512f") || !__builtin_cpu_supports("avx512bw") ||
      !__builtin_cpu_supports("avx512vl") || !__builtin_cpu_supports("avx512dq"))
    return;
  setenv("OPENBLAS_CORETYPE", __builtin_cpu_supports("avx512bf16") ? "Cooperlake" : "SkylakeX", 1);
  setenv(kChosenFrom, core.c_str(), 1);
  // the binary's own path, not /proc/self/exe: the process keeps its name (ps, pgrep)
  std::string self(4096, '\0');
  const ssize_t n = readlink("/proc/self/exe", self.data(), self.size() - 1);
  if (n > 0) {
    self.resize(size_t(n));
    execv(self.c_str(), argv);  // returns only on failure: run on as loaded
  }
  unsetenv("OPENBLAS_CORETYPE");
  unsetenv(kChosenFrom);
}

std::string blas_description() {
  const char* env = std::getenv("OPENBLAS_CORETYPE");
  const char* chose = std::getenv(kChosenFrom);
  return std::string("OpenBLAS ") + openblas_get_corename() +
         (env ? std::string(" (OPENBLAS_CORETYPE=") + env +
                    (chose ? std::string(", set by lct: OpenBLAS chose ") + chose + " on this CPU" : std::string()) + ")"
              : std::string());
}

std::string blas_capability_warning() {
  const std::string core = openblas_get_corename();
  if (blas_core_uses_avx512(core) || !__builtin_cpu_supports("avx512f")) return "";
  const char* env = std::getenv("OPENBLAS_CORETYPE");
  return "OpenBLAS runs its " + core + " kernels (no AVX-512) on a CPU with AVX-512" +
         (env ? std::string(" because OPENBLAS_CORETYPE=") + env + " is set" : std::string()) +
         "; SGEMM was about 1.8x slower than with SkylakeX kernels on lct's development "
         "machine. lct keeps your setting; unset OPENBLAS_CORETYPE (or set it to SkylakeX) "
         "for full speed";
}

double proc_kib_field(const char* file, const char* field) {
  std::ifstream in(file);
  std::string line;
  const std::string key = std::string(field) + ":";
  while (std::getline(in, line))
    if (line.rfind(key, 0) == 0) return std::stod(line.substr(key.size())) * 1024.0;
  return -1;
}

int64_t peak_rss_bytes() { return int64_t(proc_kib_field("/proc/self/status", "VmHWM")); }

void reset_peak_rss() {
  std::ofstream("/proc/self/clear_refs") << "5";  // resets VmHWM to the current RSS
}

namespace {
// The first line of a cgroup file as a number (-1 if absent or "max").
double cgroup_value(const std::string& path) {
  std::ifstream in(path);
  std::string text;
  if (!(in >> text) || text == "max") return -1;
  try {
    return std::stod(text);
  } catch (const std::exception&) {
    return -1;
  }
}

}  // namespace

std::string bytes_text(double bytes) {
  if (bytes >= double(int64_t(1) << 30)) return fmt::format("{:.2f} GiB", bytes / double(int64_t(1) << 30));
  return fmt::format("{:.1f} MiB", bytes / 1048576.0);
}

MemoryAvailable available_memory(int ranks_on_host) {
  MemoryAvailable a;
  a.bytes = std::numeric_limits<double>::infinity();
  const auto consider = [&](double bytes, const std::string& what) {
    if (bytes >= 0 && bytes < a.bytes) a.bytes = bytes, a.limit = what;
  };
  const double rss = std::max(0.0, proc_kib_field("/proc/self/status", "VmRSS"));
  const int n = std::max(1, ranks_on_host);
  const double avail = proc_kib_field("/proc/meminfo", "MemAvailable");
  // this rank's share, plus what it holds already (the estimate includes it)
  if (avail >= 0)
    consider(avail / n + rss, "MemAvailable " + bytes_text(avail) + (n > 1 ? " / " + std::to_string(n) + " ranks" : ""));
  // cgroup v2, else v1
  double limit = cgroup_value("/sys/fs/cgroup/memory.max"), used = cgroup_value("/sys/fs/cgroup/memory.current");
  if (limit < 0) {
    limit = cgroup_value("/sys/fs/cgroup/memory/memory.limit_in_bytes");
    used = cgroup_value("/sys/fs/cgroup/memory/memory.usage_in_bytes");
    if (limit > 1e18) limit = -1;  // v1's "unlimited"
  }
  if (limit >= 0 && used >= 0)
    consider(std::max(0.0, limit - used) / n + rss, "the cgroup's memory limit " + bytes_text(limit));
  // the address space: what is mapped now, and what the threads' products will map
  // beyond it unless configure_threads mapped that already, come off the limit; the rest
  // is for the allocations the estimates count, at their sizes
  if (const double as = address_space_limit(); std::isfinite(as)) {
    const double vm = mapped_bytes();
    const int threads = omp_get_max_threads();
    // (and a stack and malloc arena for the heartbeat's thread of train, bench and generate)
    const bool mapped_already = threads <= g_threads_mapped;
    const double heartbeat = thread_stack_bytes(nullptr, nullptr) + kThreadArenaBytes;
    const double will_map = (mapped_already ? 0.0 : thread_address_space(threads)) + heartbeat;
    consider(std::max(0.0, as - vm - will_map + rss),
             mapped_already
                 ? fmt::format("RLIMIT_AS (ulimit -v) {} less the {} of address space mapped ({} {} OpenBLAS buffers "
                               "of {} MiB each and stacks included) and {} for the heartbeat's thread",
                               bytes_text(as), bytes_text(vm), threads, threads == 1 ? "thread's" : "threads'",
                               kBlasBufferBytes / 1048576, bytes_text(heartbeat))
                 : fmt::format("RLIMIT_AS (ulimit -v) {} less the {} of address space mapped and the {} that {} {} "
                               "products and the heartbeat's thread will map (OpenBLAS's {} MiB buffer each, stacks, "
                               "malloc arenas)",
                               bytes_text(as), bytes_text(vm), bytes_text(will_map), threads,
                               threads == 1 ? "thread's" : "threads'", kBlasBufferBytes / 1048576));
  }
  return a;
}

}  // namespace lct
