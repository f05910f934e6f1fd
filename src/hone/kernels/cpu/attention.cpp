#include "hone/kernels/cpu/attention.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <type_traits>
#include <vector>

#include "hone/core/error.hpp"
#include "hone/kernels/cpu/fast_math.hpp"
#include "hone/kernels/cpu/gemm.hpp"

namespace hone::kernels::cpu {

namespace {

// Queries per block. A block of one key/value head stacks its group's query
// heads, so its products are (group·kQueryBlock) × keys × head_dim GEMMs: large
// enough for oneDNN's AMX / AVX-512 kernels, small enough that a causal block
// skips most keys after its last query. 64 beat 128 and 256 on llama_125M at
// seq 256 and 2048, and 32 at seq 256 (docs/benchmarks.md).
constexpr int64_t kQueryBlock = 64;

// Where the heads of one batch element live inside the fused qkv rows.
template <typename T>
struct QkvView {
  const T* base;
  int64_t row_stride, k_offset, v_offset, head_dim;

  const T* q(int64_t pos, int64_t h) const { return base + pos * row_stride + h * head_dim; }
  const T* k(int64_t pos, int64_t h) const { return base + pos * row_stride + k_offset + h * head_dim; }
  const T* v(int64_t pos, int64_t h) const { return base + pos * row_stride + v_offset + h * head_dim; }
};

// Per-thread scratch of n elements.
template <typename X>
std::vector<X> scratch(int64_t n) {
  return std::vector<X>(size_t(n));
}

// One head vector. The common sizes (head_dim 64 and 128 in bf16 or f32) are
// constants here, so the copy inlines as a few vector moves: a libc call per
// head vector cost more than the copy (GCC turns a copy loop into that call).
template <typename T>
void copy_head(T* dst, const T* src, int64_t head_dim) {
  switch (const size_t bytes = size_t(head_dim) * sizeof(T)) {
    case 128: std::memcpy(dst, src, 128); break;
    case 256: std::memcpy(dst, src, 256); break;
    case 512: std::memcpy(dst, src, 512); break;
    default: std::memcpy(dst, src, bytes);
  }
}

// dst[r] = src[r·stride], `rows` head vectors.
template <typename T>
void gather_rows(T* dst, const T* src, int64_t stride, int64_t rows, int64_t head_dim) {
  for (int64_t r = 0; r < rows; ++r) copy_head(dst + r * head_dim, src + r * stride, head_dim);
}

// C = A·op(B) (+ C when accumulate) on dense row-major matrices; A is M×K, or
// stored K×M when trans_a.
template <typename In, typename Out>
void product(int64_t m, int64_t n, int64_t k, const In* a, bool trans_a, const In* b, bool trans_b, Out* c,
             bool accumulate = false) {
  gemm({.m = m, .n = n, .k = k, .trans_a = trans_a, .trans_b = trans_b, .beta = accumulate ? 1.0f : 0.0f, .a = a,
        .b = b, .c = c, .ab_type = dtype_of<In>(), .c_type = dtype_of<Out>()});
}

// One query block of one key/value head in batch element b: queries
// [q0, q0 + rows) of each of the group's heads (row g·rows + r of the block is
// query q0 + r of the group's head g) against keys [first_key, first_key + keys),
// from the earliest sample start among the rows to the last query.
struct Block {
  int64_t b, q0, rows, first_key, keys;

  // Row i's query position, and which of the group's heads it belongs to.
  int64_t position(int64_t i) const { return q0 + i % rows; }
  int64_t group_head(int64_t i) const { return i / rows; }
};

// The first key query t may see: where its sample starts (0 without packing).
int64_t window_start(const AttentionDims& d, int64_t b, int64_t t) {
  return d.positions ? t - int64_t(d.positions[b * d.seq + t]) : 0;
}

Block block_at(const AttentionDims& d, int64_t b, int64_t q0) {
  const int64_t rows = std::min(kQueryBlock, d.seq - q0);
  int64_t first_key = q0;
  for (int64_t t = q0; t < q0 + rows; ++t) first_key = std::min(first_key, window_start(d, b, t));
  first_key = std::max<int64_t>(first_key, 0);
  return {b, q0, rows, first_key, q0 + rows - first_key};
}

// Row `row` of a block's scores, in place, as logits: each score times `scale`
// plus ALiBi's slope·(key - query) for the keys the row's query sees ([window
// start, query position]), -inf for the others. The exp() loops after it then
// run over whole rows, masked keys included (exp(-inf) = 0), so that they
// vectorize without ragged ends: causal rows end anywhere, and a scalar
// remainder of up to 15 exp() calls a row cost more than the masked lanes do.
template <typename C>
void to_logits(const AttentionDims& d, const Block& k, int64_t row, C* s, C scale, C slope) {
  const int64_t pos = k.position(row);
  const int64_t begin = std::max(window_start(d, k.b, pos), k.first_key) - k.first_key, end = pos + 1 - k.first_key;
  const C offset = slope * C(k.first_key - pos);
  std::fill(s, s + begin, -std::numeric_limits<C>::infinity());
#pragma omp simd
  for (int64_t j = begin; j < end; ++j) s[j] = s[j] * scale + (offset + slope * C(j));
  std::fill(s + end, s + k.keys, -std::numeric_limits<C>::infinity());
}

// Whether probabilities can live in the scores buffer (T is its own compute type).
template <typename T>
constexpr bool kInPlace = std::is_same_v<T, compute_t<T>>;

// Row `offset` of the probabilities: the scores themselves when they can hold
// them, else the T buffer.
template <typename T>
T* probs_row(compute_t<T>* scores, std::vector<T>& probs, int64_t offset) {
  if constexpr (kInPlace<T>) return scores + offset;
  else return probs.data() + offset;
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
  const int64_t blocks = (seq + kQueryBlock - 1) / kQueryBlock;
  const C scale = C(dims.scale);

  // Dense copies of every key and value head, [batch][kv head][position][head_dim]:
  // the GEMMs read them in place. Scratch outside the activation arena.
  const auto keys = std::make_unique_for_overwrite<T[]>(size_t(dims.batch * KV * seq * hd));
  const auto values = std::make_unique_for_overwrite<T[]>(size_t(dims.batch * KV * seq * hd));
#pragma omp parallel for collapse(2) schedule(static)
  for (int64_t b = 0; b < dims.batch; ++b) {
    for (int64_t kvh = 0; kvh < KV; ++kvh) {
      const QkvView<T> view{qkv + b * seq * row_stride, row_stride, H * hd, (H + KV) * hd, hd};
      gather_rows(keys.get() + (b * KV + kvh) * seq * hd, view.k(0, kvh), row_stride, seq, hd);
      gather_rows(values.get() + (b * KV + kvh) * seq * hd, view.v(0, kvh), row_stride, seq, hd);
    }
  }

  // Per-thread scratch at its largest block's size, allocated once: resizing
  // per block value-initialized the bf16 buffers one element at a time.
  const int64_t max_rows = group * std::min(kQueryBlock, seq);
#pragma omp parallel
  {
    auto queries = scratch<T>(max_rows * hd), probs = scratch<T>(kInPlace<T> ? 0 : max_rows * seq);
    auto scores = scratch<C>(max_rows * seq), outputs = scratch<C>(max_rows * hd), row_sums = scratch<C>(max_rows);
#pragma omp for collapse(3) schedule(dynamic)
    for (int64_t b = 0; b < dims.batch; ++b) {
      for (int64_t kvh = 0; kvh < KV; ++kvh) {
        for (int64_t block = 0; block < blocks; ++block) {
          const Block k = block_at(dims, b, block * kQueryBlock);
          const int64_t m = group * k.rows, head0 = kvh * group;
          const QkvView<T> view{qkv + b * seq * row_stride, row_stride, H * hd, (H + KV) * hd, hd};
          const int64_t kv_offset = ((b * KV + kvh) * seq + k.first_key) * hd;
          for (int64_t g = 0; g < group; ++g)
            gather_rows(queries.data() + g * k.rows * hd, view.q(k.q0, head0 + g), row_stride, k.rows, hd);
          product(m, k.keys, hd, queries.data(), false, keys.get() + kv_offset, true, scores.data());  // Q·Kᵀ
          // Softmax over each row's visible keys (the others get probability 0),
          // left unnormalized: P·V is divided by the row's sum on the way out.
          // In place when T is the compute type.
          for (int64_t i = 0; i < m; ++i) {
            const int64_t h = head0 + k.group_head(i);
            C* s = scores.data() + i * k.keys;
            to_logits(dims, k, i, s, scale, alibi_slopes ? alibi_slopes[h] : C(0));
            C max = -std::numeric_limits<C>::infinity();
#pragma omp simd reduction(max : max)
            for (int64_t j = 0; j < k.keys; ++j) max = fast_max(max, s[j]);
            T* p = probs_row<T>(scores.data(), probs, i * k.keys);
            C sum = 0;
#pragma omp simd reduction(+ : sum)
            for (int64_t j = 0; j < k.keys; ++j) {
              const C e = fast_exp(s[j] - max);
              p[j] = store<T>(e);
              sum += load(store<T>(e));  // the probabilities P·V sees, rounded as they are
            }
            row_sums[size_t(i)] = sum;
            lse[(b * H + h) * seq + k.position(i)] = max + std::log(sum);
          }
          product(m, hd, k.keys, probs_row<T>(scores.data(), probs, 0), false, values.get() + kv_offset, false,
                  outputs.data());  // P·V
          for (int64_t i = 0; i < m; ++i) {
            const C inv = C(1) / row_sums[size_t(i)];
            const C* o = outputs.data() + i * hd;
            T* dst = out + (b * seq + k.position(i)) * out_stride + (head0 + k.group_head(i)) * hd;
#pragma omp simd
            for (int64_t e = 0; e < hd; ++e) dst[e] = store<T>(o[e] * inv);
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
  const int64_t max_rows = group * std::min(kQueryBlock, seq), block_scores = max_rows * seq;
#pragma omp parallel
  {
    // Per-thread scratch, allocated once: a task's keys, values, queries and
    // output gradients, one block's scores and probabilities.
    auto keys = scratch<T>(seq * hd), values = scratch<T>(seq * hd), queries = scratch<T>(group * seq * hd),
         d_outs = scratch<T>(group * seq * hd), d_queries = scratch<T>(max_rows * hd);
    auto probs = scratch<T>(kInPlace<T> ? 0 : block_scores), d_scores = scratch<T>(kInPlace<T> ? 0 : block_scores);
    auto scores = scratch<C>(block_scores), d_probs = scratch<C>(block_scores), delta = scratch<C>(group * seq);
    auto d_keys = scratch<C>(seq * hd), d_values = scratch<C>(seq * hd);
#pragma omp for collapse(2) schedule(dynamic)
    for (int64_t b = 0; b < dims.batch; ++b) {
      for (int64_t kvh = 0; kvh < KV; ++kvh) {
        const QkvView<T> view{qkv + b * seq * row_stride, row_stride, H * hd, (H + KV) * hd, hd};
        const int64_t head0 = kvh * group;
        gather_rows(keys.data(), view.k(0, kvh), row_stride, seq, hd);
        gather_rows(values.data(), view.v(0, kvh), row_stride, seq, hd);
        std::fill(d_keys.begin(), d_keys.end(), C(0));
        std::fill(d_values.begin(), d_values.end(), C(0));
        // The group's queries and output gradients stacked as the blocks'
        // products read them (row g·rows + r of the block at q0 holds position
        // q0 + r of the group's head g; the block starts at row q0·group), and
        // delta = dO·O per query, the softmax backward's correction: one pass
        // over the rows of qkv, out and d_out in memory order.
        for (int64_t t = 0; t < seq; ++t) {
          const int64_t q0 = t / kQueryBlock * kQueryBlock, rows = std::min(kQueryBlock, seq - q0);
          for (int64_t g = 0; g < group; ++g) {
            const int64_t row = q0 * group + g * rows + t - q0;
            const int64_t out_offset = (b * seq + t) * out_stride + (head0 + g) * hd;
            copy_head(queries.data() + row * hd, view.q(t, head0 + g), hd);
            const T* d_o = d_out + out_offset;
            const T* o = out + out_offset;
            copy_head(d_outs.data() + row * hd, d_o, hd);
            C sum = 0;
#pragma omp simd reduction(+ : sum)
            for (int64_t d = 0; d < hd; ++d) sum += load(d_o[d]) * load(o[d]);
            delta[size_t(row)] = sum;
          }
        }
        for (int64_t q0 = 0; q0 < seq; q0 += kQueryBlock) {
          const Block k = block_at(dims, b, q0);
          const int64_t m = group * k.rows, first = k.first_key * hd;
          const T* block_queries = queries.data() + q0 * group * hd;
          const T* block_d_outs = d_outs.data() + q0 * group * hd;
          const C* block_delta = delta.data() + q0 * group;
          // S = Q·Kᵀ and dP = dO·Vᵀ; then in one pass P = exp(S - lse) (the
          // forward pass's probabilities, 0 where masked) and dS = P ⊙ (dP -
          // delta)·scale, the gradient of q·k. In place when T is the compute
          // type: P overwrites S, dS overwrites dP.
          product(m, k.keys, hd, block_queries, false, keys.data() + first, true, scores.data());
          product(m, k.keys, hd, block_d_outs, false, values.data() + first, true, d_probs.data());
          for (int64_t i = 0; i < m; ++i) {
            const int64_t h = head0 + k.group_head(i);
            C* s = scores.data() + i * k.keys;
            to_logits(dims, k, i, s, scale, alibi_slopes ? alibi_slopes[h] : C(0));
            const C l = lse[(b * H + h) * seq + k.position(i)], delta_i = block_delta[i];
            const C* dp = d_probs.data() + i * k.keys;
            T* p_out = probs_row<T>(scores.data(), probs, i * k.keys);
            T* ds = probs_row<T>(d_probs.data(), d_scores, i * k.keys);
#pragma omp simd
            for (int64_t j = 0; j < k.keys; ++j) {
              const C p = fast_exp(s[j] - l);
              ds[j] = store<T>(p * (dp[j] - delta_i) * scale);
              p_out[j] = store<T>(p);
            }
          }
          const T* p_block = probs_row<T>(scores.data(), probs, 0);
          const T* ds_block = probs_row<T>(d_probs.data(), d_scores, 0);
          // dQ = dS·K, dV += Pᵀ·dO, dK += dSᵀ·Q.
          product(m, hd, k.keys, ds_block, false, keys.data() + first, false, d_queries.data());
          for (int64_t i = 0; i < m; ++i)
            copy_head(d_qkv + (b * seq + k.position(i)) * row_stride + (head0 + k.group_head(i)) * hd,
                      d_queries.data() + i * hd, hd);
          product(k.keys, hd, m, p_block, true, block_d_outs, false, d_values.data() + first, true);
          product(k.keys, hd, m, ds_block, true, block_queries, false, d_keys.data() + first, true);
        }
        T* d_qkv_b = d_qkv + b * seq * row_stride;
        for (int64_t pos = 0; pos < seq; ++pos) {
          T* dk = d_qkv_b + pos * row_stride + (H + kvh) * hd;
          T* dv = d_qkv_b + pos * row_stride + (H + KV + kvh) * hd;
          const C* dk_sum = d_keys.data() + pos * hd;
          const C* dv_sum = d_values.data() + pos * hd;
#pragma omp simd
          for (int64_t d = 0; d < hd; ++d) dk[d] = store<T>(dk_sum[d]);
#pragma omp simd
          for (int64_t d = 0; d < hd; ++d) dv[d] = store<T>(dv_sum[d]);
        }
      }
    }
  }
}

template <typename T>
void attention_decode(const T* q, const T* k_cache, const T* v_cache, const int32_t* slots, const int32_t* positions,
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
        const int64_t position = positions[i], length = position + 1, kvh = h / group;
        const T* keys = k_cache + int64_t(slots[i]) * d.capacity * KV * hd + kvh * hd;
        const T* values = v_cache + int64_t(slots[i]) * d.capacity * KV * hd + kvh * hd;
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

template <typename T>
void kv_cache_write(const T* qkv, T* k_cache, T* v_cache, const int32_t* slots, const int32_t* positions,
                    const DecodeDims& d) {
  const int64_t width = d.n_kv_heads * d.head_dim, queries = d.n_heads * d.head_dim;
  for (int64_t i = 0; i < d.rows; ++i) {
    const T* row = qkv + i * d.q_row_stride;
    const int64_t cached = (int64_t(slots[i]) * d.capacity + positions[i]) * width;
    std::copy_n(row + queries, width, k_cache + cached);
    std::copy_n(row + queries + width, width, v_cache + cached);
  }
}

template void kv_cache_write<float>(const float*, float*, float*, const int32_t*, const int32_t*, const DecodeDims&);
template void kv_cache_write<double>(const double*, double*, double*, const int32_t*, const int32_t*,
                                     const DecodeDims&);
template void kv_cache_write<bf16>(const bf16*, bf16*, bf16*, const int32_t*, const int32_t*, const DecodeDims&);
template void attention_decode<float>(const float*, const float*, const float*, const int32_t*, const int32_t*,
                                      const float*, float*, const DecodeDims&);
template void attention_decode<double>(const double*, const double*, const double*, const int32_t*, const int32_t*,
                                       const double*, double*, const DecodeDims&);
template void attention_decode<bf16>(const bf16*, const bf16*, const bf16*, const int32_t*, const int32_t*,
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
