#include "hone/kernels/cpu/attention.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <vector>

#include "hone/core/error.hpp"
#include "hone/kernels/cpu/fast_math.hpp"
#include "hone/kernels/cpu/tile_gemm.hpp"

namespace hone::kernels::cpu {

namespace {

constexpr int64_t kTile = 64;  // queries and keys per tile

// Where the heads of one batch element live inside the fused qkv rows.
template <typename T>
struct QkvView {
  const T* base;
  int64_t row_stride, k_offset, v_offset, head_dim;

  const T* q(int64_t pos, int64_t h) const { return base + pos * row_stride + h * head_dim; }
  const T* k(int64_t pos, int64_t h) const { return base + pos * row_stride + k_offset + h * head_dim; }
  const T* v(int64_t pos, int64_t h) const { return base + pos * row_stride + v_offset + h * head_dim; }
};

// Copies `rows` head vectors into a dense compute-type tile.
template <typename T, typename C, typename RowPtr>
void load_tile(C* tile, int64_t rows, int64_t head_dim, RowPtr&& row) {
  for (int64_t r = 0; r < rows; ++r) {
    const T* src = row(r);
#pragma omp simd
    for (int64_t d = 0; d < head_dim; ++d) tile[r * head_dim + d] = load(src[d]);
  }
}

// scores[i][j] = scale·q_i·k_j (+ ALiBi), -inf where key j comes after query i
// or before the start of query i's sample (window_start, packed sequences).
// kt is the scaled key tile transposed, [head_dim][kTile].
template <typename C>
void tile_scores(const C* q, const C* kt, C* scores, int64_t q_rows, int64_t k_rows, int64_t head_dim,
                 int64_t q_start, int64_t k_start, C slope, const int64_t* window_start) {
  std::fill(scores, scores + q_rows * kTile, C(0));
  tile_gemm(q, head_dim, kt, kTile, scores, kTile, q_rows, k_rows, head_dim);
  // Most tiles lie wholly inside every query's window: nothing to mask there,
  // and without ALiBi nothing to add.
  const bool all_visible =
      k_start + k_rows - 1 <= q_start &&
      (!window_start || *std::max_element(window_start, window_start + q_rows) <= k_start);
  if (all_visible) {
    if (slope == C(0)) return;
    for (int64_t i = 0; i < q_rows; ++i) {
      C* s = scores + i * kTile;
      const C offset = C(k_start - (q_start + i));
#pragma omp simd
      for (int64_t j = 0; j < k_rows; ++j) s[j] += slope * (offset + C(j));
    }
    return;
  }
  for (int64_t i = 0; i < q_rows; ++i) {
    C* s = scores + i * kTile;
    const int64_t q_pos = q_start + i, first_key = window_start ? window_start[i] : 0;
    for (int64_t j = 0; j < k_rows; ++j) {
      const int64_t k_pos = k_start + j;
      s[j] = k_pos > q_pos || k_pos < first_key ? -std::numeric_limits<C>::infinity()
                                                : s[j] + slope * C(k_pos - q_pos);
    }
  }
}

// dst[c][r] = scale · src[r][c] for a [rows][cols] tile; src has rows of
// src_ld elements, dst rows of kTile.
template <typename C>
void transpose_tile(const C* src, int64_t src_ld, C* dst, int64_t rows, int64_t cols, C scale) {
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) dst[c * kTile + r] = scale * src[r * src_ld + c];
}

// The first key each query of a tile may see: position - (its position in its sample).
void window_starts(const AttentionDims& d, int64_t b, int64_t q_start, int64_t q_rows, int64_t* starts) {
  for (int64_t i = 0; i < q_rows; ++i) {
    const int64_t t = q_start + i;
    starts[i] = d.positions ? t - int64_t(d.positions[b * d.seq + t]) : 0;
  }
}

template <typename T>
void check_dims(const AttentionDims& d) {
  HONE_CHECK(d.n_kv_heads > 0 && d.n_heads % d.n_kv_heads == 0,
             "attention: {} query heads cannot share {} key/value heads evenly", d.n_heads, d.n_kv_heads);
}

}  // namespace

template <typename T>
void attention_forward(const T* qkv, T* out, compute_t<T>* lse, const compute_t<T>* alibi_slopes,
                       const AttentionDims& dims) {
  using C = compute_t<T>;
  check_dims<T>(dims);
  const int64_t H = dims.n_heads, KV = dims.n_kv_heads, hd = dims.head_dim, seq = dims.seq;
  const int64_t group = H / KV, row_stride = (H + 2 * KV) * hd, out_stride = H * hd;
  const int64_t q_tiles = (seq + kTile - 1) / kTile;
  const C scale = C(dims.scale);

  // Every query tile of every head in a group reads the same key and value
  // tiles: they are converted once, keys scaled and transposed for the Q·Kᵀ
  // tiles ([tile][head_dim][kTile]), values as they are ([position][head_dim]).
  // Scratch outside the activation arena: 2·B·KV·T·hd compute-type elements.
  const int64_t k_tiles = q_tiles;
  // Not zeroed: every element a tile product reads is written first.
  const auto keys_t = std::make_unique_for_overwrite<C[]>(size_t(dims.batch * KV * k_tiles * hd * kTile));
  const auto values = std::make_unique_for_overwrite<C[]>(size_t(dims.batch * KV * seq * hd));
#pragma omp parallel
  {
    std::vector<C> k(size_t(kTile * hd));
#pragma omp for collapse(3) schedule(static)
    for (int64_t b = 0; b < dims.batch; ++b) {
      for (int64_t kvh = 0; kvh < KV; ++kvh) {
        for (int64_t tile = 0; tile < k_tiles; ++tile) {
          const QkvView<T> view{qkv + b * seq * row_stride, row_stride, H * hd, (H + KV) * hd, hd};
          const int64_t k_start = tile * kTile, k_rows = std::min(kTile, seq - k_start);
          const int64_t head = b * KV + kvh;
          load_tile<T>(k.data(), k_rows, hd, [&](int64_t r) { return view.k(k_start + r, kvh); });
          transpose_tile(k.data(), hd, keys_t.get() + (head * k_tiles + tile) * hd * kTile, k_rows, hd, scale);
          load_tile<T>(values.get() + (head * seq + k_start) * hd, k_rows, hd,
                       [&](int64_t r) { return view.v(k_start + r, kvh); });
        }
      }
    }
  }

#pragma omp parallel
  {
    std::vector<C> q(size_t(kTile * hd));
    std::vector<C> scores(size_t(kTile * kTile)), acc(size_t(kTile * hd)), row_max(kTile), row_sum(kTile);
    int64_t starts[kTile];
#pragma omp for collapse(3) schedule(dynamic)
    for (int64_t b = 0; b < dims.batch; ++b) {
      for (int64_t h = 0; h < H; ++h) {
        for (int64_t qt = 0; qt < q_tiles; ++qt) {
          const QkvView<T> view{qkv + b * seq * row_stride, row_stride, H * hd, (H + KV) * hd, hd};
          const int64_t kvh = h / group, head = b * KV + kvh;
          const int64_t q_start = qt * kTile, q_rows = std::min(kTile, seq - q_start);
          const C slope = alibi_slopes ? alibi_slopes[h] : C(0);
          load_tile<T>(q.data(), q_rows, hd, [&](int64_t r) { return view.q(q_start + r, h); });
          std::fill(acc.begin(), acc.end(), C(0));
          std::fill(row_max.begin(), row_max.end(), -std::numeric_limits<C>::infinity());
          std::fill(row_sum.begin(), row_sum.end(), C(0));
          window_starts(dims, b, q_start, q_rows, starts);
          const int64_t first_key = *std::min_element(starts, starts + q_rows);
          // Causal: keys up to the last query of this tile, from the earliest sample start.
          for (int64_t k_start = first_key / kTile * kTile; k_start < q_start + q_rows; k_start += kTile) {
            const int64_t k_rows = std::min(kTile, seq - k_start);
            const C* kt = keys_t.get() + (head * k_tiles + k_start / kTile) * hd * kTile;
            const C* v = values.get() + (head * seq + k_start) * hd;
            tile_scores(q.data(), kt, scores.data(), q_rows, k_rows, hd, q_start, k_start, slope, starts);
            for (int64_t i = 0; i < q_rows; ++i) {
              C* s = scores.data() + i * kTile;
              C tile_max = -std::numeric_limits<C>::infinity();
              for (int64_t j = 0; j < k_rows; ++j) tile_max = std::max(tile_max, s[j]);
              if (tile_max == -std::numeric_limits<C>::infinity()) {  // every key masked: adds nothing
                std::fill(s, s + k_rows, C(0));
                continue;
              }
              // Online softmax: rescale what was accumulated under the old maximum.
              const C new_max = std::max(row_max[size_t(i)], tile_max);
              const C correction = fast_exp(row_max[size_t(i)] - new_max);
              C sum = 0;
#pragma omp simd reduction(+ : sum)
              for (int64_t j = 0; j < k_rows; ++j) sum += (s[j] = fast_exp(s[j] - new_max));
              row_sum[size_t(i)] = row_sum[size_t(i)] * correction + sum;
              row_max[size_t(i)] = new_max;
              C* a = acc.data() + i * hd;
#pragma omp simd
              for (int64_t d = 0; d < hd; ++d) a[d] *= correction;
            }
            tile_gemm(scores.data(), kTile, v, hd, acc.data(), hd, q_rows, hd, k_rows);  // acc += P·V
          }
          for (int64_t i = 0; i < q_rows; ++i) {
            const int64_t pos = q_start + i;
            T* o = out + (b * seq + pos) * out_stride + h * hd;
            const C inv = C(1) / row_sum[size_t(i)];
#pragma omp simd
            for (int64_t d = 0; d < hd; ++d) o[d] = store<T>(acc[size_t(i * hd + d)] * inv);
            lse[(b * H + h) * seq + pos] = row_max[size_t(i)] + std::log(row_sum[size_t(i)]);
          }
        }
      }
    }
  }
}

template <typename T>
void attention_backward(const T* d_out, const T* qkv, const T* out, const compute_t<T>* lse,
                        const compute_t<T>* alibi_slopes, T* d_qkv, const AttentionDims& dims) {
  using C = compute_t<T>;
  check_dims<T>(dims);
  const int64_t H = dims.n_heads, KV = dims.n_kv_heads, hd = dims.head_dim, seq = dims.seq;
  const int64_t group = H / KV, row_stride = (H + 2 * KV) * hd, out_stride = H * hd;
  const C scale = C(dims.scale);

  // One task per (batch, key/value head): it owns the gradients of that key/value
  // head and of the query heads that read it, so no two tasks write one place.
#pragma omp parallel
  {
    std::vector<C> k(size_t(kTile * hd)), kt(size_t(hd * kTile)), vt(size_t(hd * kTile)), v(size_t(kTile * hd));
    std::vector<C> probs(size_t(kTile * kTile)), dprobs(size_t(kTile * kTile)), transposed(size_t(kTile * kTile));
    std::vector<C> dk(size_t(kTile * hd)), dv(size_t(kTile * hd)), dq, delta;
    // The group's queries and output gradients, converted once per task
    // ([group][seq][head_dim]): every key tile reads them again.
    std::vector<C> queries, d_outs;
    int64_t starts[kTile];
#pragma omp for collapse(2) schedule(dynamic)
    for (int64_t b = 0; b < dims.batch; ++b) {
      for (int64_t kvh = 0; kvh < KV; ++kvh) {
        const QkvView<T> view{qkv + b * seq * row_stride, row_stride, H * hd, (H + KV) * hd, hd};
        const T* d_out_b = d_out + b * seq * out_stride;
        const T* out_b = out + b * seq * out_stride;
        T* d_qkv_b = d_qkv + b * seq * row_stride;
        // delta[g][i] = dO_i · O_i, the softmax-backward correction per query.
        dq.assign(size_t(group * seq * hd), C(0));
        delta.assign(size_t(group * seq), C(0));
        queries.resize(size_t(group * seq * hd));
        d_outs.resize(size_t(group * seq * hd));
        for (int64_t g = 0; g < group; ++g) {
          const int64_t h = kvh * group + g;
          load_tile<T>(queries.data() + g * seq * hd, seq, hd, [&](int64_t r) { return view.q(r, h); });
          load_tile<T>(d_outs.data() + g * seq * hd, seq, hd,
                       [&](int64_t r) { return d_out_b + r * out_stride + h * hd; });
          for (int64_t i = 0; i < seq; ++i) {
            const C* dout_i = d_outs.data() + (g * seq + i) * hd;
            const T* out_i = out_b + i * out_stride + h * hd;
            C sum = 0;
            for (int64_t d = 0; d < hd; ++d) sum += dout_i[d] * load(out_i[d]);
            delta[size_t(g * seq + i)] = sum;
          }
        }
        for (int64_t k_start = 0; k_start < seq; k_start += kTile) {
          const int64_t k_rows = std::min(kTile, seq - k_start);
          load_tile<T>(k.data(), k_rows, hd, [&](int64_t r) { return view.k(k_start + r, kvh); });
          transpose_tile(k.data(), hd, kt.data(), k_rows, hd, scale);
          load_tile<T>(v.data(), k_rows, hd, [&](int64_t r) { return view.v(k_start + r, kvh); });
          transpose_tile(v.data(), hd, vt.data(), k_rows, hd, C(1));
          std::fill(dk.begin(), dk.end(), C(0));
          std::fill(dv.begin(), dv.end(), C(0));
          for (int64_t g = 0; g < group; ++g) {
            const int64_t h = kvh * group + g;
            const C slope = alibi_slopes ? alibi_slopes[h] : C(0);
            const C* lse_h = lse + (b * H + h) * seq;
            // Causal: only query tiles that reach this key tile.
            for (int64_t q_start = k_start; q_start < seq; q_start += kTile) {
              const int64_t q_rows = std::min(kTile, seq - q_start);
              const C* q = queries.data() + (g * seq + q_start) * hd;
              const C* dout = d_outs.data() + (g * seq + q_start) * hd;
              window_starts(dims, b, q_start, q_rows, starts);
              tile_scores(q, kt.data(), probs.data(), q_rows, k_rows, hd, q_start, k_start, slope, starts);
              // P = exp(S - lse): the forward pass's probabilities (masked: exactly 0).
              for (int64_t i = 0; i < q_rows; ++i) {
                C* p = probs.data() + i * kTile;
                const C l = lse_h[q_start + i];
#pragma omp simd
                for (int64_t j = 0; j < k_rows; ++j) p[j] = fast_exp(p[j] - l);
              }
              // dP = dO·Vᵀ, then dS = P ⊙ (dP - delta)·scale: the gradient of q·k.
              std::fill(dprobs.begin(), dprobs.begin() + q_rows * kTile, C(0));
              tile_gemm(dout, hd, vt.data(), kTile, dprobs.data(), kTile, q_rows, k_rows, hd);
              for (int64_t i = 0; i < q_rows; ++i) {
                const C* p = probs.data() + i * kTile;
                C* ds = dprobs.data() + i * kTile;
                const C delta_i = delta[size_t(g * seq + q_start + i)];
#pragma omp simd
                for (int64_t j = 0; j < k_rows; ++j) ds[j] = p[j] * (ds[j] - delta_i) * scale;
              }
              // dV += Pᵀ·dO, dK += dSᵀ·Q, dQ += dS·K.
              transpose_tile(probs.data(), kTile, transposed.data(), q_rows, k_rows, C(1));  // [key][query]
              tile_gemm(transposed.data(), kTile, dout, hd, dv.data(), hd, k_rows, hd, q_rows);
              transpose_tile(dprobs.data(), kTile, transposed.data(), q_rows, k_rows, C(1));
              tile_gemm(transposed.data(), kTile, q, hd, dk.data(), hd, k_rows, hd, q_rows);
              tile_gemm(dprobs.data(), kTile, k.data(), hd, dq.data() + (g * seq + q_start) * hd, hd, q_rows, hd,
                        k_rows);
            }
          }
          for (int64_t r = 0; r < k_rows; ++r) {
            T* dk_row = d_qkv_b + (k_start + r) * row_stride + H * hd + kvh * hd;
            T* dv_row = d_qkv_b + (k_start + r) * row_stride + (H + KV) * hd + kvh * hd;
            for (int64_t d = 0; d < hd; ++d) {
              dk_row[d] = store<T>(dk[size_t(r * hd + d)]);
              dv_row[d] = store<T>(dv[size_t(r * hd + d)]);
            }
          }
        }
        for (int64_t g = 0; g < group; ++g) {
          const int64_t h = kvh * group + g;
          for (int64_t i = 0; i < seq; ++i) {
            T* dq_row = d_qkv_b + i * row_stride + h * hd;
            for (int64_t d = 0; d < hd; ++d) dq_row[d] = store<T>(dq[size_t((g * seq + i) * hd + d)]);
          }
        }
      }
    }
  }
}

template <typename T>
void attention_decode(const T* q, const T* k_cache, const T* v_cache, const int64_t* slots, const int64_t* lengths,
                      const compute_t<T>* alibi_slopes, T* out, const DecodeDims& d) {
  using C = compute_t<T>;
  const int64_t H = d.n_heads, KV = d.n_kv_heads, hd = d.head_dim, group = H / KV;
  const C scale = C(d.scale);
#pragma omp parallel
  {
    std::vector<C> scores, acc(static_cast<size_t>(hd)), query(static_cast<size_t>(hd));
#pragma omp for collapse(2) schedule(static)
    for (int64_t i = 0; i < d.rows; ++i) {
      for (int64_t h = 0; h < H; ++h) {
        const int64_t length = lengths[i], kvh = h / group, position = length - 1;
        const T* keys = k_cache + slots[i] * d.capacity * KV * hd + kvh * hd;
        const T* values = v_cache + slots[i] * d.capacity * KV * hd + kvh * hd;
        const C slope = alibi_slopes ? alibi_slopes[h] : C(0);
        for (int64_t e = 0; e < hd; ++e) query[size_t(e)] = load(q[i * d.q_row_stride + h * hd + e]) * scale;
        scores.resize(size_t(length));
        C max = -std::numeric_limits<C>::infinity();
        for (int64_t j = 0; j < length; ++j) {
          const T* k = keys + j * KV * hd;
          C s = 0;
          for (int64_t e = 0; e < hd; ++e) s += query[size_t(e)] * load(k[e]);
          s += slope * C(j - position);
          scores[size_t(j)] = s;
          max = std::max(max, s);
        }
        C sum = 0;
        for (C& s : scores) sum += (s = fast_exp(s - max));
        std::fill(acc.begin(), acc.end(), C(0));
        for (int64_t j = 0; j < length; ++j) {
          const T* v = values + j * KV * hd;
          const C p = scores[size_t(j)] / sum;
#pragma omp simd
          for (int64_t e = 0; e < hd; ++e) acc[size_t(e)] += p * load(v[e]);
        }
        for (int64_t e = 0; e < hd; ++e) out[(i * H + h) * hd + e] = store<T>(acc[size_t(e)]);
      }
    }
  }
}

template void attention_decode<float>(const float*, const float*, const float*, const int64_t*, const int64_t*,
                                      const float*, float*, const DecodeDims&);
template void attention_decode<double>(const double*, const double*, const double*, const int64_t*, const int64_t*,
                                       const double*, double*, const DecodeDims&);
template void attention_decode<bf16>(const bf16*, const bf16*, const bf16*, const int64_t*, const int64_t*,
                                     const float*, bf16*, const DecodeDims&);
template void attention_forward<float>(const float*, float*, float*, const float*, const AttentionDims&);
template void attention_forward<double>(const double*, double*, double*, const double*, const AttentionDims&);
template void attention_forward<bf16>(const bf16*, bf16*, float*, const float*, const AttentionDims&);
template void attention_backward<float>(const float*, const float*, const float*, const float*, const float*, float*,
                                        const AttentionDims&);
template void attention_backward<double>(const double*, const double*, const double*, const double*, const double*,
                                         double*, const AttentionDims&);
template void attention_backward<bf16>(const bf16*, const bf16*, const bf16*, const float*, const float*, bf16*,
                                       const AttentionDims&);

}  // namespace hone::kernels::cpu
