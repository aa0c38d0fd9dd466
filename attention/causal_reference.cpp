#include "attention/causal_reference.h"

#include <cblas.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

namespace lct {
namespace {

constexpr int64_t kQueryBlock = 64;   // query rows per tile
constexpr int64_t kKeyBlock = 128;    // key rows per tile
constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// Keys [0, visible_keys) of task t are visible to its query row i.
inline int64_t visible_keys(const AttentionTask& t, int64_t i) {
  int64_t v = int64_t(t.q_pos) + i - t.kv_pos + 1;
  return std::clamp<int64_t>(v, 0, t.kv_len);
}

struct ForwardItem {
  int32_t task, head, block;
};

}  // namespace

void causal_attention_forward(const AttentionParams& params, std::span<const AttentionTask> tasks,
                              const float* q, const float* k, const float* v, float* out,
                              float* lse) {
  const int64_t H = params.num_heads, KV = params.num_kv_heads, hd = params.head_dim;
  const int64_t group = H / KV;
  const int64_t ldq = H * hd, ldk = KV * hd;
  const float scale = params.scale;

  // Independent tiles of output: (task, query head, query block).
  std::vector<ForwardItem> items;
  for (size_t ti = 0; ti < tasks.size(); ++ti)
    for (int32_t h = 0; h < H; ++h)
      for (int64_t b = 0; b * kQueryBlock < tasks[ti].q_len; ++b)
        items.push_back({int32_t(ti), h, int32_t(b)});

#pragma omp parallel
  {
    // Per-thread tiles: S/P is [kQueryBlock, kKeyBlock], acc is [kQueryBlock, hd].
    std::vector<float> S(kQueryBlock * kKeyBlock), acc(kQueryBlock * hd);
    std::vector<float> row_max(kQueryBlock), row_sum(kQueryBlock);

#pragma omp for schedule(dynamic, 1)
    for (size_t w = 0; w < items.size(); ++w) {
      const AttentionTask& t = tasks[items[w].task];
      const int64_t h = items[w].head, g = h / group;
      const int64_t i0 = int64_t(items[w].block) * kQueryBlock;
      const int64_t n = std::min<int64_t>(kQueryBlock, t.q_len - i0);
      const float* qp = q + (t.q_row + i0) * ldq + h * hd;
      const float* kp = k + t.kv_row * ldk + g * hd;
      const float* vp = v + t.kv_row * ldk + g * hd;

      std::fill(row_max.begin(), row_max.end(), kNegInf);
      std::fill(row_sum.begin(), row_sum.end(), 0.0f);
      std::fill(acc.begin(), acc.begin() + n * hd, 0.0f);

      const int64_t key_end = visible_keys(t, i0 + n - 1);  // last row sees the most keys
      const int64_t first_row_visible = visible_keys(t, i0);
      for (int64_t j0 = 0; j0 < key_end; j0 += kKeyBlock) {
        const int64_t m = std::min(kKeyBlock, key_end - j0);
        // S = scale * Q_blk K_blk^T          [n, m]
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, int(n), int(m), int(hd), scale, qp,
                    int(ldq), kp + j0 * ldk, int(ldk), 0.0f, S.data(), int(kKeyBlock));
        const bool crosses_diagonal = j0 + m > first_row_visible;
        for (int64_t r = 0; r < n; ++r) {
          float* s = S.data() + r * kKeyBlock;
          const int64_t valid =
              crosses_diagonal ? std::clamp<int64_t>(visible_keys(t, i0 + r) - j0, 0, m) : m;
          float mx = row_max[r];
          for (int64_t c = 0; c < valid; ++c) mx = std::max(mx, s[c]);
          if (mx == kNegInf) {  // this row sees no key yet
            std::fill(s, s + m, 0.0f);
            continue;
          }
          // online softmax: rescale the running sum and accumulator to the new max
          const float correction = std::exp(row_max[r] - mx);
          float sum = 0.0f;
          for (int64_t c = 0; c < valid; ++c) {
            s[c] = std::exp(s[c] - mx);
            sum += s[c];
          }
          for (int64_t c = valid; c < m; ++c) s[c] = 0.0f;
          row_sum[r] = row_sum[r] * correction + sum;
          row_max[r] = mx;
          if (correction != 1.0f) {
            float* a = acc.data() + r * hd;
            for (int64_t d = 0; d < hd; ++d) a[d] *= correction;
          }
        }
        // acc += P V_blk                  [n, hd]
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, int(n), int(hd), int(m), 1.0f,
                    S.data(), int(kKeyBlock), vp + j0 * ldk, int(ldk), 1.0f, acc.data(), int(hd));
      }

      for (int64_t r = 0; r < n; ++r) {
        float* o = out + (t.q_row + i0 + r) * ldq + h * hd;
        float* l = lse + (t.q_row + i0 + r) * H + h;
        if (row_sum[r] > 0.0f) {
          const float inv = 1.0f / row_sum[r];
          for (int64_t d = 0; d < hd; ++d) o[d] = acc[r * hd + d] * inv;
          *l = row_max[r] + std::log(row_sum[r]);
        } else {
          std::fill(o, o + hd, 0.0f);
          *l = kNegInf;
        }
      }
    }
  }
}

void causal_attention_backward(const AttentionParams& params,
                               std::span<const AttentionTask> tasks, const float* q,
                               const float* k, const float* v, const float* out, const float* lse,
                               const float* dout, float* dq, float* dk, float* dv) {
  const int64_t H = params.num_heads, KV = params.num_kv_heads, hd = params.head_dim;
  const int64_t group = H / KV;
  const int64_t ldq = H * hd, ldk = KV * hd;
  const float scale = params.scale;

  // One work item per kv head: it owns dK/dV columns of that head and dQ columns of
  // the query heads reading it, so items never write the same memory, whatever the
  // task list (tasks may share key rows under CP/CAD).
#pragma omp parallel
  {
    std::vector<float> P(kQueryBlock * kKeyBlock), dS(kQueryBlock * kKeyBlock);
    std::vector<float> D(kQueryBlock);

#pragma omp for schedule(dynamic, 1)
    for (int64_t g = 0; g < KV; ++g) {
      for (const AttentionTask& t : tasks) {
        const float* kp = k + t.kv_row * ldk + g * hd;
        const float* vp = v + t.kv_row * ldk + g * hd;
        float* dkp = dk + t.kv_row * ldk + g * hd;
        float* dvp = dv + t.kv_row * ldk + g * hd;
        for (int64_t h = g * group; h < (g + 1) * group; ++h) {
          for (int64_t i0 = 0; i0 < t.q_len; i0 += kQueryBlock) {
            const int64_t n = std::min<int64_t>(kQueryBlock, t.q_len - i0);
            const float* qp = q + (t.q_row + i0) * ldq + h * hd;
            const float* op = out + (t.q_row + i0) * ldq + h * hd;
            const float* dop = dout + (t.q_row + i0) * ldq + h * hd;
            const float* lp = lse + (t.q_row + i0) * H + h;
            float* dqp = dq + (t.q_row + i0) * ldq + h * hd;

            // D_i = rowsum(dO_i * O_i): the softmax-Jacobian term shared by all key blocks
            for (int64_t r = 0; r < n; ++r) {
              float acc = 0.0f;
              for (int64_t d = 0; d < hd; ++d) acc += dop[r * ldq + d] * op[r * ldq + d];
              D[r] = acc;
            }
            const int64_t key_end = visible_keys(t, i0 + n - 1);
            for (int64_t j0 = 0; j0 < key_end; j0 += kKeyBlock) {
              const int64_t m = std::min(kKeyBlock, key_end - j0);
              // forward was: S = scale * Q K^T ; P = exp(S - LSE)   [n, m]
              cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, int(n), int(m), int(hd),
                          scale, qp, int(ldq), kp + j0 * ldk, int(ldk), 0.0f, P.data(),
                          int(kKeyBlock));
              for (int64_t r = 0; r < n; ++r) {
                float* p = P.data() + r * kKeyBlock;
                const float row_lse = lp[r * H];
                const int64_t valid =
                    row_lse == kNegInf
                        ? 0
                        : std::clamp<int64_t>(visible_keys(t, i0 + r) - j0, 0, m);
                for (int64_t c = 0; c < valid; ++c) p[c] = std::exp(p[c] - row_lse);
                for (int64_t c = valid; c < m; ++c) p[c] = 0.0f;
              }
              // forward was: O = P V  ->  dV += P^T dO         [m, hd]
              cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, int(m), int(hd), int(n), 1.0f,
                          P.data(), int(kKeyBlock), dop, int(ldq), 1.0f, dvp + j0 * ldk,
                          int(ldk));
              // dP = dO V^T                                    [n, m]
              cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, int(n), int(m), int(hd), 1.0f,
                          dop, int(ldq), vp + j0 * ldk, int(ldk), 0.0f, dS.data(),
                          int(kKeyBlock));
              // softmax backward: dS = P * (dP - D)
              for (int64_t r = 0; r < n; ++r) {
                const float* p = P.data() + r * kKeyBlock;
                float* ds = dS.data() + r * kKeyBlock;
                for (int64_t c = 0; c < m; ++c) ds[c] = p[c] * (ds[c] - D[r]);
              }
              // S = scale * Q K^T  ->  dQ += scale * dS K ;  dK += scale * dS^T Q
              cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, int(n), int(hd), int(m),
                          scale, dS.data(), int(kKeyBlock), kp + j0 * ldk, int(ldk), 1.0f, dqp,
                          int(ldq));
              cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, int(m), int(hd), int(n),
                          scale, dS.data(), int(kKeyBlock), qp, int(ldq), 1.0f, dkp + j0 * ldk,
                          int(ldk));
            }
          }
        }
      }
    }
  }
}

}  // namespace lct
