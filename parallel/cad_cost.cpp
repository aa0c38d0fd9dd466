#include "parallel/cad_cost.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <sstream>
#include <stdexcept>

namespace lct {
namespace {
// Position of x on an ascending grid in log space: index i and weight of i + 1.
std::pair<size_t, double> locate(const std::vector<int64_t>& grid, int64_t x) {
  if (grid.size() == 1 || x <= grid.front()) return {0, 0.0};
  if (x >= grid.back()) return {grid.size() - 2, 1.0};
  size_t i = 0;
  while (grid[i + 1] < x) ++i;
  const double a = std::log(double(grid[i])), b = std::log(double(grid[i + 1]));
  return {i, (std::log(double(x)) - a) / (b - a)};
}
}  // namespace

double CadCostModel::seconds(int64_t q_len, int64_t kv_len, const AttentionMask& mask) const {
  return seconds(AttentionTask{0, 0, int32_t(q_len), int32_t(kv_len), int32_t(kv_len - q_len), 0, 0}, mask);
}

double CadCostModel::seconds(const AttentionTask& task, const AttentionMask& mask) const {
  const int64_t q_len = task.q_len, kv_len = int64_t(task.kv_pos) + task.kv_len;
  if (q_len <= 0) return 0.0;
  const int64_t pairs = attention_pairs(task, mask);
  const auto [qi, qw] = locate(q_grid, q_len);
  const auto [ki, kw] = locate(kv_grid, kv_len);
  const size_t nk = kv_grid.size();
  const auto at = [&](size_t a, size_t b) {
    a = std::min(a, q_grid.size() - 1);
    b = std::min(b, nk - 1);
    return seconds_per_pair[a * nk + b];
  };
  const double per_pair = (1 - qw) * ((1 - kw) * at(qi, ki) + kw * at(qi, ki + 1)) +
                          qw * ((1 - kw) * at(qi + 1, ki) + kw * at(qi + 1, ki + 1));
  return per_pair * double(pairs);
}

std::string CadCostModel::problem() const {
  for (const auto* g : {&q_grid, &kv_grid}) {
    const char* name = g == &q_grid ? "q_grid" : "kv_grid";
    if (g->empty()) return "q_grid and kv_grid are required";
    for (size_t i = 0; i < g->size(); ++i)
      if ((*g)[i] < 1 || (i > 0 && (*g)[i] <= (*g)[i - 1])) return std::string(name) + " must be ascending and >= 1";
  }
  if (seconds_per_pair.size() != q_grid.size() * kv_grid.size())
    return "seconds_per_pair needs one row per q_grid entry with one value per kv_grid entry";
  for (double v : seconds_per_pair)
    // a time a real machine can measure for one query-key pair (a few FLOPs): a crafted
    // 1e300 or a denormal would make every plan's costs inf or zero
    if (!(v >= 1e-15 && v <= 1)) return "seconds_per_pair values must be from 1e-15 to 1 (seconds per pair)";
  if (heads < 1 || kv_heads < 1 || head_dim < 1 || kernel.empty())
    return "kernel, heads, kv_heads and head_dim are required";
  return "";
}

bool CadCostModel::same_setup(const CadCostModel& o) const {
  return cpu == o.cpu && blas == o.blas && kernel == o.kernel && threads == o.threads &&
         heads == o.heads && kv_heads == o.kv_heads && head_dim == o.head_dim;
}

bool CadCostModel::reaches(int64_t longest) const {
  const int64_t need = cad_cost_grid(longest).back();
  return !q_grid.empty() && !kv_grid.empty() && q_grid.back() >= need && kv_grid.back() >= need;
}

std::vector<int64_t> cad_cost_grid(int64_t longest) {
  std::vector<int64_t> grid;
  for (int64_t v : {16, 64, 256, 1024, 4096}) {
    grid.push_back(v);
    if (v >= longest) break;
  }
  return grid;
}

CadCostModel measure_cost_model(const AttentionParams& p, const std::string& cpu,
                               const std::string& blas, int threads, int64_t longest,
                               int64_t pairs_per_cell, int repeats) {
  using Clock = std::chrono::steady_clock;
  CadCostModel m;
  m.cpu = cpu;
  m.blas = blas;
  m.threads = threads;
  m.kernel = attention_kernel_name(p.kernel);
  m.heads = p.num_heads;
  m.kv_heads = p.num_kv_heads;
  m.head_dim = p.head_dim;
  m.q_grid = cad_cost_grid(longest);
  m.kv_grid = m.q_grid;
  const int64_t qd = int64_t(p.num_heads) * p.head_dim, kvd = int64_t(p.num_kv_heads) * p.head_dim;
  // inputs of unit scale (the values do not change the kernel's time)
  const auto fill = [](std::vector<float>& v, uint32_t seed) {
    uint32_t x = seed * 2654435761u + 1;
    for (float& f : v) x = x * 1664525u + 1013904223u, f = float(int32_t(x >> 8) - (1 << 23)) / float(1 << 23);
  };
  for (int64_t q : m.q_grid)
    for (int64_t kv_grid : m.kv_grid) {
      const int64_t kv = std::max(kv_grid, q);
      // a row's cells with kv <= q are all one task, at kv = q: measured once (the first
      // cell), the others take its time (at q = 4096 that task is 8.4M pairs, and five
      // measurements of it were two thirds of the whole)
      if (kv_grid <= q && kv_grid != m.kv_grid.front()) {
        m.seconds_per_pair.push_back(m.seconds_per_pair.back());
        continue;
      }
      const AttentionTask one{0, 0, int32_t(q), int32_t(kv), int32_t(kv - q), 0, int32_t(kv)};
      const int64_t pairs = attention_pairs(one);
      const int64_t n = std::clamp<int64_t>(pairs_per_cell / pairs, 1, 65536 / q);
      std::vector<AttentionTask> tasks;
      for (int64_t i = 0; i < n; ++i) {
        AttentionTask t = one;
        t.q_row = i * q;
        tasks.push_back(t);
      }
      std::vector<float> qs(size_t(n * q * qd)), out(qs.size()), dout(qs.size()), dq(qs.size()),
          lse(size_t(n * q * p.num_heads)), ks(size_t(kv * kvd)), vs(ks.size()), dk(ks.size()),
          dv(ks.size());
      fill(qs, 1), fill(dout, 2), fill(ks, 3), fill(vs, 4);
      double best = 1e300;
      for (int rep = 0; rep < repeats; ++rep) {
        const auto t0 = Clock::now();
        attention_forward(p, tasks, qs.data(), ks.data(), vs.data(), out.data(), lse.data());
        attention_backward(p, tasks, qs.data(), ks.data(), vs.data(), out.data(), lse.data(),
                           dout.data(), dq.data(), dk.data(), dv.data());
        best = std::min(best, std::chrono::duration<double>(Clock::now() - t0).count());
      }
      m.seconds_per_pair.push_back(best / double(n * pairs));
    }
  attention_release_workspace();
  return m;
}

}  // namespace lct
