#include "src/machine.h"

#include <cblas.h>
#include <omp.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <fstream>
#include <string>

namespace lct {

int configure_threads(int64_t threads) {
  int n = int(threads);
  if (n <= 0) {
    const char* local = std::getenv("OMPI_COMM_WORLD_LOCAL_SIZE");
    const int ranks_here = local ? std::max(1, std::atoi(local)) : 1;
    n = std::max(1, omp_get_num_procs() / ranks_here);
  }
  omp_set_num_threads(n);
  openblas_set_num_threads(n);
  return n;
}

std::string cpu_model_name() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("model name", 0) == 0) return line.substr(line.find(':') + 2);
  return "unknown CPU";
}

std::string blas_description() {
  const char* env = std::getenv("OPENBLAS_CORETYPE");
  return std::string("OpenBLAS ") + openblas_get_corename() +
         (env ? std::string(" (OPENBLAS_CORETYPE=") + env + ")" : std::string());
}

std::string blas_capability_warning() {
  std::string core = openblas_get_corename();
  std::string lower = core;
  for (char& ch : lower) ch = char(std::tolower(static_cast<unsigned char>(ch)));
  const bool blas_uses_avx512 =
      lower == "skylakex" || lower == "cooperlake" || lower == "sapphirerapids";
  if (blas_uses_avx512 || !__builtin_cpu_supports("avx512f")) return "";
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

}  // namespace lct
