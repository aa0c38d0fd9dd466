// The machine a run uses: OpenMP / OpenBLAS thread counts, what OpenBLAS runs, and the
// memory a rank may use.
#pragma once

#include <cstdint>
#include <string>

namespace lct {

// Sets OpenMP and OpenBLAS thread counts; 0 = the cores available to this process
// divided by the MPI ranks on its node. Returns the count used. Under an address-space
// limit (RLIMIT_AS, below) it also maps, once it is known to fit, everything the
// threads' products will map (OpenBLAS's buffers for its threads and for each thread
// calling a product, the OpenMP threads with their stacks and malloc arenas), so no
// product maps anything later; an automatic count is then no more than the limit holds
// (a warning line says so when that lowers it), and a count given that does not fit is
// refused (std::runtime_error, one line).
int configure_threads(int64_t threads);
std::string blas_description();
std::string cpu_model_name();  // /proc/cpuinfo's model name
std::string host_name();       // gethostname(), "unknown host" when it fails
// Where lct caches what it measured about this machine: $LCT_CACHE_DIR, else
// $XDG_CACHE_HOME/lct, else $HOME/.cache/lct; "" when none is set.
std::string cache_folder();
// Non-empty when OpenBLAS runs kernels below what the CPU supports (AVX2 kernels on an
// AVX-512 CPU, typically forced by OPENBLAS_CORETYPE): says so and how to change it.
std::string blas_capability_warning();
// OpenBLAS picks its kernels when the library loads, before main. Where it picked kernels
// without AVX-512 on a CPU with AVX-512 while OPENBLAS_CORETYPE is unset (bookworm's
// OpenBLAS 0.3.21 takes newer Xeons for Prescott, SSE3 only: 4x slower attention), this
// sets OPENBLAS_CORETYPE to the kernels the CPU can run (Cooperlake with AVX512-BF16,
// else SkylakeX) and re-executes the program once, before MPI starts; an explicit
// OPENBLAS_CORETYPE is always kept. Returns only when nothing is to be done (or the
// re-execution failed, which leaves the kernels as they were).
void choose_blas_kernels(char** argv);

// A "Name:   <n> kB" field of a /proc file (/proc/self/status, /proc/meminfo) in bytes;
// -1 when absent.
double proc_kib_field(const char* file, const char* field);

// Address space (RLIMIT_AS, ulimit -v), which OpenBLAS spends far beyond what it keeps
// resident. OpenBLAS 0.3.21 (bookworm's) maps a buffer of BUFFER_SIZE, 128 MiB on x86-64
// (common_x86_64.h: 32 << 22), for every thread it runs (in its constructor, for
// OMP_NUM_THREADS or the configured CPUs, and when its thread count is raised), and one
// for every thread that calls a product (the main thread, and each of lct's threads that
// calls one inside its own parallel regions, as the attention kernels do); a worker
// thread also maps its stack, and a malloc arena when it allocates. When a mapping fails,
// OpenBLAS's blas_memory_alloc retries forever, ignoring SIGTERM: lct checks the limit
// before each of these instead (below, and configure_threads).
inline constexpr double kBlasBufferBytes = 128.0 * 1048576;
// RLIMIT_AS's soft limit in bytes; infinity when there is none.
double address_space_limit();
// The address space `threads` threads map when they run products: an OpenBLAS buffer
// for each thread calling one, a stack and a malloc arena for each but the main thread
// (counted whole: an upper bound when some are mapped already).
double thread_address_space(int threads);
// lct's start-up check, run from its .preinit_array (src/main.cpp) before any shared
// library's constructor, with the environment the loader passes: when RLIMIT_AS is below
// what lct needs to start (what is mapped now, the program and its libraries; OpenBLAS's
// buffers for the threads its constructor will run and for the main thread's first
// product; those threads' stacks; a reserve for the start-up itself), it writes one line
// "lct: error: the address-space limit (ulimit -v) of N MiB is below the M MiB lct needs
// to start (...); raise it" to stderr and exits 1, instead of OpenBLAS spinning in its
// constructor. Uses only the C library: no C++ object of lct or of a library is made yet.
void refuse_address_space_below_start(char** envp);

// What one rank may use: the tightest of MemAvailable (/proc/meminfo) shared by the
// `ranks_on_host` ranks on this host and the cgroup's memory limit (resident memory),
// and RLIMIT_AS less the address space mapped and what is still to be mapped (the
// threads' products, thread_address_space of omp_get_max_threads(), unless
// configure_threads mapped that already; a stack and arena for a heartbeat's thread):
// the limit is set against address space, the estimates count resident bytes, which for
// lct's own allocations are their sizes. Each plus what the process holds already.
struct MemoryAvailable {
  double bytes = 0;      // for one rank
  std::string limit;     // what sets it, e.g. "MemAvailable 20.1 GiB / 2 ranks"
};
MemoryAvailable available_memory(int ranks_on_host);

std::string bytes_text(double bytes);  // "1.23 GiB"

// Peak resident memory of this process since start or the last reset_peak_rss() (Linux
// VmHWM), in bytes; -1 when unknown.
int64_t peak_rss_bytes();
void reset_peak_rss();

}  // namespace lct
