// The float64 reference of core attention (and its float twin): dense_attention.h.
#include "tests/attention/dense_attention.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

namespace lct::test {

template <typename Real>
Dense<Real> dense_attention(const Problem& pr, const std::vector<float>& q, const std::vector<float>& k,
                            const std::vector<float>& v, const std::vector<float>& dout) {
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
          if (!pr.visible(d, i - b, j - b)) continue;
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
