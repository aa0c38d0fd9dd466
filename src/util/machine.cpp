#include "src/util/machine.h"

#include <fmt/format.h>
#include <cblas.h>
#include <omp.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <limits>
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
  rlimit rl{};
  if (getrlimit(RLIMIT_AS, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY) {
    const double vm = std::max(0.0, proc_kib_field("/proc/self/status", "VmSize"));
    consider(double(rl.rlim_cur) - vm + rss, "RLIMIT_AS (ulimit -v) " + bytes_text(double(rl.rlim_cur)));
  }
  return a;
}

}  // namespace lct
