#include "hone/kernels/cuda/attention.hpp"

#include <type_traits>

#include "hone/kernels/cuda/attention_cudnn.hpp"
#include "hone/kernels/cuda/attention_mma.hpp"
#include "hone/kernels/cuda/attention_shape.cuh"
#include "hone/kernels/cuda/common.cuh"

// bf16 calls go to cuDNN's fused attention first (attention_cudnn.cpp), then to
// the tensor-core kernels of attention_mma.cu. Here: a straightforward tiled
// kernel on the CUDA cores (fp32 arithmetic, no tensor cores) for every call
// that neither takes (f32, head sizes other than 64 and 128, unaligned rows,
// older GPUs): blocks of 8 warps own 32 queries (forward, dQ) or 32 keys (dK,
// dV); each warp owns 4 of them. In the score phase a lane owns one key (or query)
// of the 32 and computes its dot products from shared memory; in the
// accumulation phase a lane owns head dimensions lane, lane + 32, ... Keys and
// queries that a lane reads row-wise are stored with one float of padding per
// row, so the 32 lanes hit 32 different banks.

namespace hone::kernels::cuda {

namespace {

constexpr int kTile = 32;  // queries and keys per tile
constexpr int kWarps = 8;
constexpr int kThreads = kWarps * kWarpSize;
constexpr int kPerWarp = kTile / kWarps;  // queries (or keys) per warp
constexpr int kMaxHeadDim = 256;

// Copies `rows` head vectors starting at row `first` (row stride `stride`
// elements) into a float tile with leading dimension ld; missing rows are 0.
template <typename T>
__device__ void load_tile(float* tile, int ld, const T* src, int64_t stride, int rows, int hd) {
  for (int idx = threadIdx.x; idx < kTile * hd; idx += blockDim.x) {
    const int r = idx / hd, d = idx % hd;
    tile[r * ld + d] = r < rows ? to_f32(src[r * stride + d]) : 0.0f;
  }
}

template <typename T, int kDims>
__global__ void __launch_bounds__(kThreads)
    attention_forward_kernel(const T* qkv, T* out, float* lse, AttentionShape s) {
  float* smem = dynamic_shared<float>();
  __shared__ int first_key;
  const int hd = int(s.head_dim), ld = hd + 1;
  float* qs = smem;               // [kTile][hd + 1]
  float* ks = qs + kTile * ld;    // [kTile][hd + 1]
  float* vs = ks + kTile * ld;    // [kTile][hd + 1]
  const int64_t b = blockIdx.z, h = blockIdx.y, kvh = h / s.group;
  const int64_t q0 = int64_t(gridDim.x - 1 - blockIdx.x) * kTile;  // the longest tiles start first
  const int q_rows = int(min(int64_t(kTile), s.seq - q0));
  const int warp = threadIdx.x / kWarpSize, lane = threadIdx.x % kWarpSize;
  const T* base = qkv + b * s.seq * s.row_stride;
  const float slope = s.slopes ? s.slopes[h] : 0.0f;

  if (threadIdx.x == 0) first_key = int(q0);
  load_tile(qs, ld, base + q0 * s.row_stride + h * hd, s.row_stride, q_rows, hd);
  float m[kPerWarp], l[kPerWarp], acc[kPerWarp][kDims];
  int64_t first[kPerWarp];
#pragma unroll
  for (int r = 0; r < kPerWarp; ++r) {
    const int row = warp * kPerWarp + r;
    m[r] = -INFINITY;
    l[r] = 0.0f;
#pragma unroll
    for (int t = 0; t < kDims; ++t) acc[r][t] = 0.0f;
    first[r] = row < q_rows ? window_start(s, b, q0 + row) : q0;
  }
  __syncthreads();
  if (lane == 0) {
#pragma unroll
    for (int r = 0; r < kPerWarp; ++r) atomicMin(&first_key, int(first[r]));
  }
  __syncthreads();

  const int64_t k_end = q0 + q_rows;  // causal: keys up to the tile's last query
  for (int64_t k0 = int64_t(first_key) / kTile * kTile; k0 < k_end; k0 += kTile) {
    const int k_rows = int(min(int64_t(kTile), s.seq - k0));
    __syncthreads();  // the previous tile is consumed
    load_tile(ks, ld, base + k0 * s.row_stride + (s.heads + kvh) * hd, s.row_stride, k_rows, hd);
    load_tile(vs, ld, base + k0 * s.row_stride + (s.heads + s.kv_heads + kvh) * hd, s.row_stride, k_rows, hd);
    __syncthreads();
    float score[kPerWarp];
#pragma unroll
    for (int r = 0; r < kPerWarp; ++r) score[r] = 0.0f;
    for (int d = 0; d < hd; ++d) {
      const float kd = ks[lane * ld + d];
#pragma unroll
      for (int r = 0; r < kPerWarp; ++r) score[r] += qs[(warp * kPerWarp + r) * ld + d] * kd;
    }
#pragma unroll
    for (int r = 0; r < kPerWarp; ++r) {
      const int row = warp * kPerWarp + r;
      const int64_t q_pos = q0 + row, k_pos = k0 + lane;
      const bool visible = row < q_rows && lane < k_rows && k_pos <= q_pos && k_pos >= first[r];
      const float x = visible ? score[r] * s.scale + slope * float(k_pos - q_pos) : -INFINITY;
      const float tile_max = warp_max(x);
      if (tile_max == -INFINITY) continue;  // the same in every lane: every key masked for this query
      // Online softmax: rescale what was accumulated under the old maximum.
      const float new_max = fmaxf(m[r], tile_max);
      const float correction = expf(m[r] - new_max);
      const float p = visible ? expf(x - new_max) : 0.0f;
      l[r] = l[r] * correction + warp_sum(p);
      m[r] = new_max;
#pragma unroll
      for (int t = 0; t < kDims; ++t) acc[r][t] *= correction;
      for (int j = 0; j < k_rows; ++j) {
        const float pj = shuffle(p, j);
#pragma unroll
        for (int t = 0; t < kDims; ++t) {
          const int d = lane + t * kWarpSize;
          if (d < hd) acc[r][t] += pj * vs[j * ld + d];
        }
      }
    }
  }
#pragma unroll
  for (int r = 0; r < kPerWarp; ++r) {
    const int row = warp * kPerWarp + r;
    if (row >= q_rows) continue;
    const float inv = 1.0f / l[r];
    T* o = out + (b * s.seq + q0 + row) * s.out_stride + h * hd;
#pragma unroll
    for (int t = 0; t < kDims; ++t) {
      const int d = lane + t * kWarpSize;
      if (d < hd) o[d] = from_f32<T>(acc[r][t] * inv);
    }
    if (lane == 0) lse[(b * s.heads + h) * s.seq + q0 + row] = m[r] + logf(l[r]);
  }
}

// delta[b, h, t] = dO · O, the softmax-backward correction of each query; one warp each.
template <typename T>
__global__ void attention_delta_kernel(const T* d_out, const T* out, float* delta, AttentionShape s) {
  const int64_t item = int64_t(blockIdx.x) * kWarps + threadIdx.x / kWarpSize;
  if (item >= s.batch * s.seq * s.heads) return;
  const int lane = threadIdx.x % kWarpSize;
  const int64_t h = item % s.heads, t = (item / s.heads) % s.seq, b = item / (s.heads * s.seq);
  const int64_t offset = (b * s.seq + t) * s.out_stride + h * s.head_dim;
  float sum = 0.0f;
  for (int64_t d = lane; d < s.head_dim; d += kWarpSize) sum += to_f32(d_out[offset + d]) * to_f32(out[offset + d]);
  sum = warp_sum(sum);
  if (lane == 0) delta[(b * s.heads + h) * s.seq + t] = sum;
}

// dQ for a tile of 32 queries of one head: warps own 4 queries; lanes own keys
// while scoring, head dimensions while accumulating dQ += dS·K.
template <typename T, int kDims>
__global__ void __launch_bounds__(kThreads)
    attention_dq_kernel(const T* d_out, const T* qkv, const float* lse, const float* delta, T* d_qkv,
                        AttentionShape s) {
  float* smem = dynamic_shared<float>();
  __shared__ int first_key;
  const int hd = int(s.head_dim), ld = hd + 1;
  float* qs = smem;
  float* dos = qs + kTile * ld;
  float* ks = dos + kTile * ld;
  float* vs = ks + kTile * ld;
  const int64_t b = blockIdx.z, h = blockIdx.y, kvh = h / s.group;
  const int64_t q0 = int64_t(gridDim.x - 1 - blockIdx.x) * kTile;
  const int q_rows = int(min(int64_t(kTile), s.seq - q0));
  const int warp = threadIdx.x / kWarpSize, lane = threadIdx.x % kWarpSize;
  const T* base = qkv + b * s.seq * s.row_stride;
  const float slope = s.slopes ? s.slopes[h] : 0.0f;
  const float* lse_h = lse + (b * s.heads + h) * s.seq;
  const float* delta_h = delta + (b * s.heads + h) * s.seq;

  if (threadIdx.x == 0) first_key = int(q0);
  load_tile(qs, ld, base + q0 * s.row_stride + h * hd, s.row_stride, q_rows, hd);
  load_tile(dos, ld, d_out + (b * s.seq + q0) * s.out_stride + h * hd, s.out_stride, q_rows, hd);
  float acc[kPerWarp][kDims], row_lse[kPerWarp], row_delta[kPerWarp];
  int64_t first[kPerWarp];
#pragma unroll
  for (int r = 0; r < kPerWarp; ++r) {
    const int row = warp * kPerWarp + r;
#pragma unroll
    for (int t = 0; t < kDims; ++t) acc[r][t] = 0.0f;
    first[r] = row < q_rows ? window_start(s, b, q0 + row) : q0;
    row_lse[r] = row < q_rows ? lse_h[q0 + row] : 0.0f;
    row_delta[r] = row < q_rows ? delta_h[q0 + row] : 0.0f;
  }
  __syncthreads();
  if (lane == 0) {
#pragma unroll
    for (int r = 0; r < kPerWarp; ++r) atomicMin(&first_key, int(first[r]));
  }
  __syncthreads();

  const int64_t k_end = q0 + q_rows;
  for (int64_t k0 = int64_t(first_key) / kTile * kTile; k0 < k_end; k0 += kTile) {
    const int k_rows = int(min(int64_t(kTile), s.seq - k0));
    __syncthreads();
    load_tile(ks, ld, base + k0 * s.row_stride + (s.heads + kvh) * hd, s.row_stride, k_rows, hd);
    load_tile(vs, ld, base + k0 * s.row_stride + (s.heads + s.kv_heads + kvh) * hd, s.row_stride, k_rows, hd);
    __syncthreads();
    float score[kPerWarp], dp[kPerWarp];
#pragma unroll
    for (int r = 0; r < kPerWarp; ++r) score[r] = dp[r] = 0.0f;
    for (int d = 0; d < hd; ++d) {
      const float kd = ks[lane * ld + d], vd = vs[lane * ld + d];
#pragma unroll
      for (int r = 0; r < kPerWarp; ++r) {
        score[r] += qs[(warp * kPerWarp + r) * ld + d] * kd;
        dp[r] += dos[(warp * kPerWarp + r) * ld + d] * vd;
      }
    }
#pragma unroll
    for (int r = 0; r < kPerWarp; ++r) {
      const int row = warp * kPerWarp + r;
      const int64_t q_pos = q0 + row, k_pos = k0 + lane;
      const bool visible = row < q_rows && lane < k_rows && k_pos <= q_pos && k_pos >= first[r];
      const float p = visible ? expf(score[r] * s.scale + slope * float(k_pos - q_pos) - row_lse[r]) : 0.0f;
      const float ds = p * (dp[r] - row_delta[r]) * s.scale;  // ∂L/∂(q·k)
      for (int j = 0; j < k_rows; ++j) {
        const float dsj = shuffle(ds, j);
#pragma unroll
        for (int t = 0; t < kDims; ++t) {
          const int d = lane + t * kWarpSize;
          if (d < hd) acc[r][t] += dsj * ks[j * ld + d];
        }
      }
    }
  }
#pragma unroll
  for (int r = 0; r < kPerWarp; ++r) {
    const int row = warp * kPerWarp + r;
    if (row >= q_rows) continue;
    T* dq = d_qkv + (b * s.seq + q0 + row) * s.row_stride + h * hd;
#pragma unroll
    for (int t = 0; t < kDims; ++t) {
      const int d = lane + t * kWarpSize;
      if (d < hd) dq[d] = from_f32<T>(acc[r][t]);
    }
  }
}

// dK and dV for a tile of 32 keys of one key/value head, over every query head
// of its group and every query tile that sees it: warps own 4 keys; lanes own
// queries while scoring, head dimensions while accumulating.
template <typename T, int kDims>
__global__ void __launch_bounds__(kThreads)
    attention_dkv_kernel(const T* d_out, const T* qkv, const float* lse, const float* delta, T* d_qkv,
                         AttentionShape s) {
  float* smem = dynamic_shared<float>();
  __shared__ float probs[kTile][kTile + 1], dscores[kTile][kTile + 1];  // [query][key]
  const int hd = int(s.head_dim), ld = hd + 1;
  float* ks = smem;
  float* vs = ks + kTile * ld;
  float* qs = vs + kTile * ld;
  float* dos = qs + kTile * ld;
  const int64_t b = blockIdx.z, kvh = blockIdx.y, k0 = int64_t(blockIdx.x) * kTile;
  const int k_rows = int(min(int64_t(kTile), s.seq - k0));
  const int warp = threadIdx.x / kWarpSize, lane = threadIdx.x % kWarpSize;
  const T* base = qkv + b * s.seq * s.row_stride;

  load_tile(ks, ld, base + k0 * s.row_stride + (s.heads + kvh) * hd, s.row_stride, k_rows, hd);
  load_tile(vs, ld, base + k0 * s.row_stride + (s.heads + s.kv_heads + kvh) * hd, s.row_stride, k_rows, hd);
  float dk[kPerWarp][kDims], dv[kPerWarp][kDims];
#pragma unroll
  for (int c = 0; c < kPerWarp; ++c) {
#pragma unroll
    for (int t = 0; t < kDims; ++t) dk[c][t] = dv[c][t] = 0.0f;
  }
  const int64_t k_last = k0 + k_rows - 1;
  for (int64_t g = 0; g < s.group; ++g) {
    const int64_t h = kvh * s.group + g;
    const float slope = s.slopes ? s.slopes[h] : 0.0f;
    const float* lse_h = lse + (b * s.heads + h) * s.seq;
    const float* delta_h = delta + (b * s.heads + h) * s.seq;
    // Causal: only query tiles from this key tile on see its keys.
    for (int64_t q0 = k0; q0 < s.seq; q0 += kTile) {
      const int q_rows = int(min(int64_t(kTile), s.seq - q0));
      // Lane i is query q0 + i while scoring; packed samples may hide the whole tile.
      const int64_t q_pos = q0 + lane;
      const int64_t first = lane < q_rows ? window_start(s, b, q_pos) : k_last + 1;
      __syncthreads();  // the previous query tile is consumed
      if (!__syncthreads_or(first <= k_last)) continue;
      load_tile(qs, ld, base + q0 * s.row_stride + h * hd, s.row_stride, q_rows, hd);
      load_tile(dos, ld, d_out + (b * s.seq + q0) * s.out_stride + h * hd, s.out_stride, q_rows, hd);
      const float row_lse = lane < q_rows ? lse_h[q_pos] : 0.0f;
      const float row_delta = lane < q_rows ? delta_h[q_pos] : 0.0f;
      __syncthreads();
      float score[kPerWarp], dp[kPerWarp];
#pragma unroll
      for (int c = 0; c < kPerWarp; ++c) score[c] = dp[c] = 0.0f;
      for (int d = 0; d < hd; ++d) {
        const float qd = qs[lane * ld + d], od = dos[lane * ld + d];
#pragma unroll
        for (int c = 0; c < kPerWarp; ++c) {
          score[c] += qd * ks[(warp * kPerWarp + c) * ld + d];
          dp[c] += od * vs[(warp * kPerWarp + c) * ld + d];
        }
      }
#pragma unroll
      for (int c = 0; c < kPerWarp; ++c) {
        const int j = warp * kPerWarp + c;
        const int64_t k_pos = k0 + j;
        const bool visible = lane < q_rows && j < k_rows && k_pos <= q_pos && k_pos >= first;
        const float p = visible ? expf(score[c] * s.scale + slope * float(k_pos - q_pos) - row_lse) : 0.0f;
        probs[lane][j] = p;
        dscores[lane][j] = p * (dp[c] - row_delta) * s.scale;
      }
      // A warp reads back only the columns (keys) it wrote, but each lane reads
      // the rows other lanes wrote: on an H200, compute-sanitizer's racecheck
      // reported hazards here across a warp barrier (head sizes up to 32), so
      // the block's barrier (every thread is here) orders them.
      __syncthreads();
      for (int i = 0; i < q_rows; ++i) {
#pragma unroll
        for (int t = 0; t < kDims; ++t) {
          const int d = lane + t * kWarpSize;
          if (d >= hd) continue;
          const float od = dos[i * ld + d], qd = qs[i * ld + d];
#pragma unroll
          for (int c = 0; c < kPerWarp; ++c) {
            dv[c][t] += probs[i][warp * kPerWarp + c] * od;
            dk[c][t] += dscores[i][warp * kPerWarp + c] * qd;
          }
        }
      }
    }
  }
#pragma unroll
  for (int c = 0; c < kPerWarp; ++c) {
    const int j = warp * kPerWarp + c;
    if (j >= k_rows) continue;
    T* row = d_qkv + (b * s.seq + k0 + j) * s.row_stride;
#pragma unroll
    for (int t = 0; t < kDims; ++t) {
      const int d = lane + t * kWarpSize;
      if (d >= hd) continue;
      row[(s.heads + kvh) * hd + d] = from_f32<T>(dk[c][t]);
      row[(s.heads + s.kv_heads + kvh) * hd + d] = from_f32<T>(dv[c][t]);
    }
  }
}

constexpr int kDecodeWarps = 4;

// One block per (query head, row); its warps take every kDecodeWarps-th key with
// an online softmax each, then merge. Lanes own head dimensions.
template <typename T, int kDims>
__global__ void __launch_bounds__(kDecodeWarps * kWarpSize)
    attention_decode_kernel(const T* q, const T* k_cache, const T* v_cache, const int32_t* slots,
                            const int32_t* positions, const float* slopes, T* out, DecodeDims dims, float scale) {
  __shared__ float part_max[kDecodeWarps], part_sum[kDecodeWarps], part_acc[kDecodeWarps][kMaxHeadDim];
  const int64_t h = blockIdx.x, i = blockIdx.y;
  const int hd = int(dims.head_dim), warp = threadIdx.x / kWarpSize, lane = threadIdx.x % kWarpSize;
  const int64_t kv_width = dims.n_kv_heads * dims.head_dim, kvh = h / (dims.n_heads / dims.n_kv_heads);
  const int64_t position = positions[i], length = position + 1;
  const T* keys = k_cache + int64_t(slots[i]) * dims.capacity * kv_width + kvh * hd;
  const T* values = v_cache + int64_t(slots[i]) * dims.capacity * kv_width + kvh * hd;
  const float slope = slopes ? slopes[h] : 0.0f;
  float query[kDims], acc[kDims];
#pragma unroll
  for (int t = 0; t < kDims; ++t) {
    const int d = lane + t * kWarpSize;
    query[t] = d < hd ? to_f32(q[i * dims.q_row_stride + h * hd + d]) * scale : 0.0f;
    acc[t] = 0.0f;
  }
  float max = -INFINITY, sum = 0.0f;
  for (int64_t j = warp; j < length; j += kDecodeWarps) {
    float partial = 0.0f;
#pragma unroll
    for (int t = 0; t < kDims; ++t) {
      const int d = lane + t * kWarpSize;
      if (d < hd) partial += query[t] * to_f32(keys[j * kv_width + d]);
    }
    const float score = warp_sum(partial) + slope * float(j - position);
    const float new_max = fmaxf(max, score);
    const float correction = expf(max - new_max), p = expf(score - new_max);
    sum = sum * correction + p;
#pragma unroll
    for (int t = 0; t < kDims; ++t) {
      const int d = lane + t * kWarpSize;
      acc[t] = acc[t] * correction + (d < hd ? p * to_f32(values[j * kv_width + d]) : 0.0f);
    }
    max = new_max;
  }
  if (lane == 0) {
    part_max[warp] = max;
    part_sum[warp] = sum;
  }
#pragma unroll
  for (int t = 0; t < kDims; ++t) {
    const int d = lane + t * kWarpSize;
    if (d < hd) part_acc[warp][d] = acc[t];
  }
  __syncthreads();
  float total_max = -INFINITY;
  for (int w = 0; w < kDecodeWarps; ++w) total_max = fmaxf(total_max, part_max[w]);
  float total_sum = 0.0f;
  for (int w = 0; w < kDecodeWarps; ++w) {
    if (part_max[w] != -INFINITY) total_sum += part_sum[w] * expf(part_max[w] - total_max);
  }
  for (int d = threadIdx.x; d < hd; d += blockDim.x) {
    float o = 0.0f;
    for (int w = 0; w < kDecodeWarps; ++w) {
      if (part_max[w] != -INFINITY) o += part_acc[w][d] * expf(part_max[w] - total_max);
    }
    out[(i * dims.n_heads + h) * hd + d] = from_f32<T>(o / total_sum);
  }
}

// One thread per element of a row's KV heads: its key and its value.
template <typename T>
__global__ void kv_cache_write_kernel(const T* qkv, T* k_cache, T* v_cache, const int32_t* slots,
                                      const int32_t* positions, DecodeDims dims) {
  const int64_t width = dims.n_kv_heads * dims.head_dim, queries = dims.n_heads * dims.head_dim;
  HONE_ROW_STRIDE(i, dims.rows) {
    const int64_t cached = (int64_t(slots[i]) * dims.capacity + positions[i]) * width;
    const T* keys = qkv + i * dims.q_row_stride + queries;
    HONE_COLUMN_STRIDE(j, width) {
      k_cache[cached + j] = keys[j];
      v_cache[cached + j] = keys[width + j];
    }
  }
}

// Head counts and sizes these kernels take; the message names what is off.
void check_heads(const char* op, int64_t heads, int64_t kv_heads, int64_t head_dim) {
  if (heads <= 0 || kv_heads <= 0 || heads % kv_heads != 0) {
    fail_text(std::string(op) + ": " + std::to_string(heads) + " query heads cannot share " +
              std::to_string(kv_heads) + " key/value heads evenly");
  }
  if (head_dim < 1 || head_dim > kMaxHeadDim) {
    fail_text(std::string(op) + ": head_dim " + std::to_string(head_dim) + " is outside 1.." +
              std::to_string(kMaxHeadDim) + " on CUDA");
  }
}

AttentionShape shape_of(const AttentionDims& d, const float* slopes) {
  check_heads("attention", d.n_heads, d.n_kv_heads, d.head_dim);
  // The kernels take a sample per gridDim.z, which CUDA caps at 65535.
  if (d.batch > 65535) {
    fail_text("attention: a batch of " + std::to_string(d.batch) +
              " sequences is more than CUDA's 65535 a launch takes");
  }
  return AttentionShape{d.batch,
                        d.seq,
                        d.n_heads,
                        d.n_kv_heads,
                        d.head_dim,
                        d.n_heads / d.n_kv_heads,
                        (d.n_heads + 2 * d.n_kv_heads) * d.head_dim,
                        d.n_heads * d.head_dim,
                        float(d.scale),
                        slopes,
                        d.positions};
}

// Calls fn.template operator()<kDims>() with head_dim <= 32·kDims.
template <typename Fn>
void dispatch_head_dim(int64_t head_dim, Fn&& fn) {
  if (head_dim <= 32) fn.template operator()<1>();
  else if (head_dim <= 64) fn.template operator()<2>();
  else if (head_dim <= 128) fn.template operator()<4>();
  else fn.template operator()<8>();
}

// Dynamic shared memory of `tiles` padded [kTile][head_dim + 1] float tiles,
// raising the kernel's limit past the default 48 KiB where needed.
template <typename Kernel>
size_t shared_tiles(Kernel kernel, int tiles, int64_t head_dim, const char* name) {
  const size_t bytes = size_t(tiles) * kTile * size_t(head_dim + 1) * sizeof(float);
  cudaFuncAttributes attributes{};
  HONE_CUDA_CHECK(cudaFuncGetAttributes(&attributes, kernel));
  if (bytes + attributes.sharedSizeBytes > max_shared_memory_per_block()) {
    fail_text(std::string(name) + ": head_dim " + std::to_string(head_dim) + " needs " +
              std::to_string(bytes + attributes.sharedSizeBytes) + " bytes of shared memory per block; this GPU allows " +
              std::to_string(max_shared_memory_per_block()));
  }
  HONE_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(bytes)));
  return bytes;
}

}  // namespace

template <typename T>
void attention_forward(const T* qkv, T* out, float* lse, const float* alibi_slopes, const AttentionDims& dims) {
  const AttentionShape s = shape_of(dims, alibi_slopes);
  if (s.batch * s.seq == 0) return;
  if constexpr (std::is_same_v<T, bf16>) {
    if (cudnn_attention_forward(qkv, out, lse, alibi_slopes, dims)) return;
    if (mma_attention_fits(s, AttentionPass::forward, {qkv, out})) return mma_attention_forward(qkv, out, lse, s);
  }
  const dim3 grid(unsigned((s.seq + kTile - 1) / kTile), unsigned(s.heads), unsigned(s.batch));
  dispatch_head_dim(s.head_dim, [&]<int kDims>() {
    const auto kernel = attention_forward_kernel<T, kDims>;
    const size_t bytes = shared_tiles(kernel, 3, s.head_dim, "attention");
    HONE_LAUNCH(grid, kThreads, bytes, kernel)(qkv, out, lse, s);
    HONE_CUDA_LAUNCHED("attention_forward");
  });
}

template <typename T>
void attention_backward(const T* d_out, const T* qkv, const T* out, const float* lse, const float* alibi_slopes,
                        T* d_qkv, const AttentionDims& dims) {
  const AttentionShape s = shape_of(dims, alibi_slopes);
  if (s.batch * s.seq == 0) return;
  if constexpr (std::is_same_v<T, bf16>) {
    if (cudnn_attention_backward(d_out, qkv, out, lse, alibi_slopes, d_qkv, dims)) return;
  }
  const int64_t items = s.batch * s.seq * s.heads;
  DeviceBuffer delta(size_t(items) * sizeof(float));
  HONE_LAUNCH(unsigned((items + kWarps - 1) / kWarps), kThreads, 0, attention_delta_kernel<T>)(
      d_out, out, delta.as<float>(), s);
  HONE_CUDA_LAUNCHED("attention_backward (delta)");
  if constexpr (std::is_same_v<T, bf16>) {
    if (mma_attention_fits(s, AttentionPass::backward, {d_out, qkv, d_qkv})) {
      return mma_attention_backward(d_out, qkv, lse, delta.as<float>(), d_qkv, s);
    }
  }
  const unsigned tiles = unsigned((s.seq + kTile - 1) / kTile);
  dispatch_head_dim(s.head_dim, [&]<int kDims>() {
    const auto dq = attention_dq_kernel<T, kDims>;
    const size_t dq_bytes = shared_tiles(dq, 4, s.head_dim, "attention backward");
    HONE_LAUNCH(dim3(tiles, unsigned(s.heads), unsigned(s.batch)), kThreads, dq_bytes, dq)(
        d_out, qkv, lse, delta.as<float>(), d_qkv, s);
    HONE_CUDA_LAUNCHED("attention_backward (dq)");
    const auto dkv = attention_dkv_kernel<T, kDims>;
    const size_t dkv_bytes = shared_tiles(dkv, 4, s.head_dim, "attention backward");
    HONE_LAUNCH(dim3(tiles, unsigned(s.kv_heads), unsigned(s.batch)), kThreads, dkv_bytes, dkv)(
        d_out, qkv, lse, delta.as<float>(), d_qkv, s);
    HONE_CUDA_LAUNCHED("attention_backward (dk, dv)");
  });
}

template <typename T>
void attention_decode(const T* q, const T* k_cache, const T* v_cache, const int32_t* slots, const int32_t* positions,
                      const float* alibi_slopes, T* out, const DecodeDims& dims) {
  check_heads("attention decode", dims.n_heads, dims.n_kv_heads, dims.head_dim);
  if (dims.rows == 0) return;
  if (dims.rows > 65535) fail_text("attention decode: " + std::to_string(dims.rows) + " rows at once; at most 65535");
  const dim3 grid(unsigned(dims.n_heads), unsigned(dims.rows));
  dispatch_head_dim(dims.head_dim, [&]<int kDims>() {
    HONE_LAUNCH(grid, kDecodeWarps * kWarpSize, 0, attention_decode_kernel<T, kDims>)(
        q, k_cache, v_cache, slots, positions, alibi_slopes, out, dims, float(dims.scale));
    HONE_CUDA_LAUNCHED("attention_decode");
  });
}

template <typename T>
void kv_cache_write(const T* qkv, T* k_cache, T* v_cache, const int32_t* slots, const int32_t* positions,
                    const DecodeDims& dims) {
  const int64_t width = dims.n_kv_heads * dims.head_dim;
  if (dims.rows * width == 0) return;
  const RowsLaunch launch = rows_launch(dims.rows, width, kThreads);
  HONE_LAUNCH(launch.blocks, launch.threads, 0, kv_cache_write_kernel<T>)(
      qkv, k_cache, v_cache, slots, positions, dims);
  HONE_CUDA_LAUNCHED("kv_cache_write");
}

#define HONE_INSTANTIATE(T)                                                                                    \
  template void attention_forward<T>(const T*, T*, float*, const float*, const AttentionDims&);                \
  template void attention_backward<T>(const T*, const T*, const T*, const float*, const float*, T*,            \
                                      const AttentionDims&);                                                   \
  template void attention_decode<T>(const T*, const T*, const T*, const int32_t*, const int32_t*, const float*, \
                                    T*, const DecodeDims&);                                                 \
  template void kv_cache_write<T>(const T*, T*, T*, const int32_t*, const int32_t*, const DecodeDims&);
HONE_INSTANTIATE(float)
HONE_INSTANTIATE(bf16)
#undef HONE_INSTANTIATE

}  // namespace hone::kernels::cuda
