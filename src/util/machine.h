// The machine a run uses: OpenMP / OpenBLAS thread counts, what OpenBLAS runs, and the
// memory a rank may use.
#pragma once

#include <cstdint>
#include <string>

namespace lct {

// Sets OpenMP and OpenBLAS thread counts; 0 = the cores available to this process
// divided by the MPI ranks on its node. Returns the count used.
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

// What one rank may use: the tightest of MemAvailable (/proc/meminfo) shared by the
// `ranks_on_host` ranks on this host, the cgroup's memory limit, and RLIMIT_AS less the
// address space in use (each plus what the process holds already).
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
