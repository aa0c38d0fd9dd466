// The float64 reference of core attention (and its float twin): dense_attention.h.
#include "tests/attention/dense_attention.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

namespace lct::test {

std::vector<int32_t> reference_selection(const Problem& pr, const std::vector<float>& q, const std::vector<float>& k) {
  const int H = pr.H, KV = pr.KV, hd = pr.hd, G = H / KV, K = pr.mask.top_blocks, B = pr.mask.block_size;
  std::vector<int32_t> sel(size_t(pr.T() * KV * K), -1);
  // under bf16 the kernel reads (and selects from) Q and K rounded to bf16
  const auto value = [&pr](float x) { return double(pr.precision == Precision::bf16 ? round_to_bf16(x) : x); };
  for (size_t d = 0; d + 1 < pr.cu.size(); ++d) {
    const int64_t start = pr.cu[d], len = pr.cu[d + 1] - start;
    for (int g = 0; g < KV; ++g) {
      std::vector<std::vector<double>> kbar;  // the document's whole blocks' mean keys
      for (int64_t m = 0; (m + 1) * B <= len; ++m) {
        std::vector<double> mean(size_t(hd), 0.0);
        for (int64_t j = m * B; j < (m + 1) * B; ++j)
          for (int x = 0; x < hd; ++x) mean[size_t(x)] += value(k[size_t(((start + j) * KV + g) * hd + x)]);
        for (double& x : mean) x /= B;
        kbar.push_back(mean);
      }
      for (int64_t i = 0; i < len; ++i) {
        std::vector<double> qbar(size_t(hd), 0.0);
        for (int h = g * G; h < (g + 1) * G; ++h)
          for (int x = 0; x < hd; ++x) qbar[size_t(x)] += value(q[size_t(((start + i) * H + h) * hd + x)]);
        for (double& x : qbar) x /= G;
        std::vector<std::pair<double, int32_t>> scores;  // (score, block)
        for (int64_t m = 0; m < i / B; ++m) {
          double s = 0;
          for (int x = 0; x < hd; ++x) s = std::fma(qbar[size_t(x)], kbar[size_t(m)][size_t(x)], s);
          scores.push_back({s, int32_t(m)});
        }
        // highest first, the later block first among equal scores
        std::sort(scores.begin(), scores.end(), [](auto a, auto b) { return a > b; });
        std::vector<int32_t> top;
        for (size_t n = 0; n < scores.size() && int(n) < K; ++n) top.push_back(scores[n].second);
        std::sort(top.begin(), top.end());
        std::copy(top.begin(), top.end(), sel.begin() + ((start + i) * KV + g) * K);
      }
    }
  }
  return sel;
}

template <typename Real>
Dense<Real> dense_attention(const Problem& problem, const std::vector<float>& q, const std::vector<float>& k,
                            const std::vector<float>& v, const std::vector<float>& dout) {
  Problem pr = problem;
  if (pr.mask.kind == MaskKind::block_sparse) pr.selected = reference_selection(pr, q, k);
  const int H = pr.H, KV = pr.KV, hd = pr.hd, group = H / KV;
  const int64_t T = pr.T();
  const Real scale = Real(1) / std::sqrt(Real(hd));
  Dense<Real> r;
  r.o.assign(size_t(T * H * hd), 0);
  r.lse.assign(size_t(T * H), 0);
  r.dq.assign(size_t(T * H * hd), 0);
  r.dk.assign(size_t(T * KV * hd), 0);
  r.dv.assign(size_t(T * KV * hd), 0);
  for (size_t d = 0; d + 1 < pr.cu.size(); ++d) {
    const int64_t b = pr.cu[d], e = pr.cu[d + 1];
    for (int h = 0; h < H; ++h) {
      const int g = h / group;
      for (int64_t i = b; i < e; ++i) {
        std::vector<Real> s;
        std::vector<int64_t> keys;  // the rows query i reads
        Real mx = -std::numeric_limits<Real>::infinity();
        for (int64_t j = b; j < e; ++j) {
          if (!pr.visible(d, i - b, j - b, g)) continue;
          Real acc = 0;
          for (int x = 0; x < hd; ++x)
            acc += Real(q[size_t((i * H + h) * hd + x)]) * k[size_t((j * KV + g) * hd + x)];
          s.push_back(acc * scale);
          keys.push_back(j);
          mx = std::max(mx, s.back());
        }
        if (keys.empty()) {  // no visible key: O = 0, LSE = -inf, no gradient
          r.lse[size_t(i * H + h)] = -std::numeric_limits<Real>::infinity();
          continue;
        }
        Real sum = 0;
        for (Real& x : s) sum += std::exp(x - mx);
        const Real lse = mx + std::log(sum);
        r.lse[size_t(i * H + h)] = lse;
        std::vector<Real> p(s.size());
        for (size_t j = 0; j < s.size(); ++j) p[j] = std::exp(s[j] - lse);
        for (int x = 0; x < hd; ++x) {
          Real acc = 0;
          for (size_t j = 0; j < p.size(); ++j) acc += p[j] * v[size_t((keys[j] * KV + g) * hd + x)];
          r.o[size_t((i * H + h) * hd + x)] = acc;
        }
        // backward: dP_j = dO . V_j ; dS_j = P_j (dP_j - sum_k P_k dP_k)
        std::vector<Real> dp(p.size());
        Real D = 0;
        for (size_t j = 0; j < p.size(); ++j) {
          Real acc = 0;
          for (int x = 0; x < hd; ++x)
            acc += Real(dout[size_t((i * H + h) * hd + x)]) * v[size_t((keys[j] * KV + g) * hd + x)];
          dp[j] = acc;
          D += p[j] * acc;
        }
        for (size_t j = 0; j < p.size(); ++j) {
          const Real ds = p[j] * (dp[j] - D) * scale;
          const int64_t kj = keys[j];
          for (int x = 0; x < hd; ++x) {
            r.dq[size_t((i * H + h) * hd + x)] += ds * k[size_t((kj * KV + g) * hd + x)];
            r.dk[size_t((kj * KV + g) * hd + x)] += ds * q[size_t((i * H + h) * hd + x)];
            r.dv[size_t((kj * KV + g) * hd + x)] += p[j] * dout[size_t((i * H + h) * hd + x)];
          }
        }
      }
    }
  }
  return r;
}

template Dense<float> dense_attention<float>(const Problem&, const std::vector<float>&, const std::vector<float>&,
                                             const std::vector<float>&, const std::vector<float>&);
template Dense<double> dense_attention<double>(const Problem&, const std::vector<float>&, const std::vector<float>&,
                                               const std::vector<float>&, const std::vector<float>&);

}  // namespace lct::test
