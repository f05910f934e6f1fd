#include "hone/kernels/cuda/attention_mma.hpp"

#if HONE_CUDA_EMULATOR
#include "hone/kernels/cuda/emulator/wmma.hpp"
#else
#include <cuda_bf16.h>
#include <mma.h>
#endif

#include <string>

#include "hone/kernels/cuda/common.cuh"

// FlashAttention-2 on the tensor cores through the warp matrix API (WMMA:
// 16×16×16 bf16 products with fp32 accumulators; rocWMMA has the same shape for
// a HIP build). Blocks of 4 warps own 64 queries (forward, dQ) or 64 keys (dK,
// dV), 16 rows per warp, and walk the other side in tiles of 64. A warp's
// products land in its own shared-memory scratch, where its lanes apply the
// mask and the softmax (two lanes per row, 32 columns each) before the next
// product reads them back as bf16.
//
// WMMA does not say which accumulator element holds which row. The forward
// pass rescales its output accumulators row by row (online softmax), so each
// warp loads a matrix of row numbers into an accumulator once and reads the
// row of element i from it: fragments of one type share one layout.

namespace hone::kernels::cuda {

namespace {

using namespace nvcuda;

constexpr int kRows = 64;     // queries (forward, dQ) or keys (dK, dV) per block
constexpr int kCols = 64;     // keys (forward, dQ) or queries (dK, dV) per inner tile
constexpr int kMmaWarps = 4;  // 16 rows each
constexpr int kMmaThreads = kMmaWarps * kWarpSize;
constexpr int kM = 16;        // WMMA tile side
constexpr int kScoreLd = kCols + 4;  // fp32 score rows (padding staggers banks)
constexpr int kProbLd = kCols + 8;   // bf16 probability rows

using mma_bf16 = __nv_bfloat16;
using FragA = wmma::fragment<wmma::matrix_a, kM, kM, kM, mma_bf16, wmma::row_major>;
using FragB = wmma::fragment<wmma::matrix_b, kM, kM, kM, mma_bf16, wmma::row_major>;
using FragBt = wmma::fragment<wmma::matrix_b, kM, kM, kM, mma_bf16, wmma::col_major>;  // a transposed row-major tile
using FragC = wmma::fragment<wmma::accumulator, kM, kM, kM, float>;

// A tile of head vectors in shared memory: kRows rows of D bf16, padded.
template <int D>
constexpr int kHeadLd = D + 8;
template <int D>
constexpr size_t kHeadTileBytes = size_t(kRows) * kHeadLd<D> * sizeof(mma_bf16);
// A warp's fp32 scratch: two score tiles, or its 16 output rows before they are stored.
template <int D>
constexpr int kScratchFloats = 2 * kM * kScoreLd > kM * (D + 4) ? 2 * kM * kScoreLd : kM * (D + 4);
constexpr size_t kProbTileBytes = size_t(kM) * kProbLd * sizeof(mma_bf16);

__device__ __forceinline__ mma_bf16 to_mma(float x) { return __float2bfloat16_rn(x); }

// Copies `rows` head vectors (row stride `stride` elements) into a padded tile
// in 16-byte pieces; rows past `rows` are zero.
template <int D>
__device__ void load_heads(mma_bf16* tile, const bf16* src, int64_t stride, int rows) {
  constexpr int kPieces = D / 8;
  for (int idx = threadIdx.x; idx < kRows * kPieces; idx += blockDim.x) {
    const int r = idx / kPieces, c = idx % kPieces;
    uint4 v = make_uint4(0, 0, 0, 0);
    if (r < rows) v = *reinterpret_cast<const uint4*>(src + r * stride + c * 8);
    *reinterpret_cast<uint4*>(tile + r * kHeadLd<D> + c * 8) = v;
  }
}

// scores[16][kCols] (ld kScoreLd) = rows (16 × D, row-major at ld kHeadLd) · colsᵀ (kCols × D).
template <int D>
__device__ void product_with_transposed(float* scores, const mma_bf16* rows, const mma_bf16* cols) {
#pragma unroll
  for (int n = 0; n < kCols / kM; ++n) {
    FragC c;
    wmma::fill_fragment(c, 0.0f);
#pragma unroll
    for (int k = 0; k < D / kM; ++k) {
      FragA a;
      FragBt b;
      wmma::load_matrix_sync(a, rows + k * kM, kHeadLd<D>);
      wmma::load_matrix_sync(b, cols + n * kM * kHeadLd<D> + k * kM, kHeadLd<D>);
      wmma::mma_sync(c, a, b, c);
    }
    wmma::store_matrix_sync(scores + n * kM, c, kScoreLd, wmma::mem_row_major);
  }
}

// acc[D/16] (16 × D) += probs (16 × kCols bf16, ld kProbLd) · heads (kCols × D).
template <int D>
__device__ void accumulate_product(FragC* acc, const mma_bf16* probs, const mma_bf16* heads) {
#pragma unroll
  for (int k = 0; k < kCols / kM; ++k) {
    FragA a;
    wmma::load_matrix_sync(a, probs + k * kM, kProbLd);
#pragma unroll
    for (int n = 0; n < D / kM; ++n) {
      FragB b;
      wmma::load_matrix_sync(b, heads + k * kM * kHeadLd<D> + n * kM, kHeadLd<D>);
      wmma::mma_sync(acc[n], a, b, acc[n]);
    }
  }
}

// Writes a warp's 16 accumulated rows, times `scale`, as bf16: rows < `rows`
// of dst (row stride `stride`), through the warp's fp32 scratch.
template <int D>
__device__ void store_rows(const FragC* acc, float scale, float* scratch, bf16* dst, int64_t stride, int rows) {
#pragma unroll
  for (int n = 0; n < D / kM; ++n) wmma::store_matrix_sync(scratch + n * kM, acc[n], D + 4, wmma::mem_row_major);
  __syncwarp();
  const int lane = threadIdx.x % kWarpSize;
  for (int r = 0; r < rows && r < kM; ++r) {
    for (int d = lane; d < D; d += kWarpSize) dst[r * stride + d] = from_f32<bf16>(scratch[r * (D + 4) + d] * scale);
  }
}

// Shared memory of a kernel: `head_tiles` head tiles, then per warp its fp32
// scratch and `prob_tiles` bf16 tiles, then `tail` bytes.
template <int D>
constexpr size_t shared_bytes(int head_tiles, int prob_tiles, size_t tail) {
  return head_tiles * kHeadTileBytes<D> +
         kMmaWarps * (kScratchFloats<D> * sizeof(float) + prob_tiles * kProbTileBytes) + tail;
}

// The score phase's view of one lane: row lane / 2 of its warp's 16, columns
// 32·(lane % 2) onwards. Pairs of lanes combine with one shuffle.
struct LaneCells {
  int row, col0;
  __device__ LaneCells() : row((threadIdx.x % kWarpSize) / 2), col0((threadIdx.x % 2) * (kCols / 2)) {}
};

__device__ __forceinline__ float pair_max(float v) { return fmaxf(v, shuffle_xor(v, 1)); }
__device__ __forceinline__ float pair_sum(float v) { return v + shuffle_xor(v, 1); }

template <int D>
__global__ void __launch_bounds__(kMmaThreads) mma_forward_kernel(const bf16* qkv, bf16* out, float* lse,
                                                                  AttentionShape s) {
  unsigned char* smem = dynamic_shared<unsigned char>();
  __shared__ int first_key;
  __shared__ float row_factor[kRows];  // per-tile rescale of the output rows, then 1/l
  mma_bf16* qs = reinterpret_cast<mma_bf16*>(smem);
  mma_bf16* ks = qs + kRows * kHeadLd<D>;
  mma_bf16* vs = ks + kRows * kHeadLd<D>;
  const int warp = threadIdx.x / kWarpSize, lane = threadIdx.x % kWarpSize;
  float* scores = reinterpret_cast<float*>(smem + 3 * kHeadTileBytes<D>) + warp * kScratchFloats<D>;
  mma_bf16* probs = reinterpret_cast<mma_bf16*>(smem + 3 * kHeadTileBytes<D> +
                                                kMmaWarps * kScratchFloats<D> * sizeof(float)) +
                    warp * kM * kProbLd;
  const int64_t b = blockIdx.z, h = blockIdx.y, kvh = h / s.group;
  const int64_t q0 = int64_t(gridDim.x - 1 - blockIdx.x) * kRows;  // the longest tiles start first
  const int q_rows = int(min(int64_t(kRows), s.seq - q0));
  const bf16* base = qkv + b * s.seq * s.row_stride;
  const float slope = s.slopes ? s.slopes[h] : 0.0f;
  const LaneCells cell;
  const int row = warp * kM + cell.row;  // of the block's 64
  const int64_t q_pos = q0 + row;
  const bool row_valid = row < q_rows;
  const int64_t first = row_valid ? window_start(s, b, q_pos) : q0;

  if (threadIdx.x == 0) first_key = int(q0);
  load_heads<D>(qs, base + q0 * s.row_stride + h * D, s.row_stride, q_rows);
  // Row numbers of the accumulator layout, from a matrix whose every element is its row.
  for (int i = lane; i < kM * kM; i += kWarpSize) scores[(i / kM) * kScoreLd + i % kM] = float(i / kM);
  __syncwarp();
  FragC row_of;
  wmma::load_matrix_sync(row_of, scores, kScoreLd, wmma::mem_row_major);
  FragC acc[D / kM];
#pragma unroll
  for (int n = 0; n < D / kM; ++n) wmma::fill_fragment(acc[n], 0.0f);
  float m = -INFINITY, l = 0.0f;
  __syncthreads();
  if (row_valid) atomicMin(&first_key, int(first));
  __syncthreads();

  const int64_t k_end = q0 + q_rows;  // causal: keys up to the tile's last query
  for (int64_t k0 = int64_t(first_key) / kCols * kCols; k0 < k_end; k0 += kCols) {
    const int k_rows = int(min(int64_t(kCols), s.seq - k0));
    __syncthreads();  // the previous tile is consumed
    load_heads<D>(ks, base + k0 * s.row_stride + (s.heads + kvh) * D, s.row_stride, k_rows);
    load_heads<D>(vs, base + k0 * s.row_stride + (s.heads + s.kv_heads + kvh) * D, s.row_stride, k_rows);
    __syncthreads();
    product_with_transposed<D>(scores, qs + warp * kM * kHeadLd<D>, ks);
    __syncwarp();
    // Mask, scale and online softmax of this lane's 32 cells.
    float* x = scores + cell.row * kScoreLd + cell.col0;
    float tile_max = -INFINITY;
    for (int j = 0; j < kCols / 2; ++j) {
      const int64_t k_pos = k0 + cell.col0 + j;
      const bool visible = row_valid && k_pos < k0 + k_rows && k_pos <= q_pos && k_pos >= first;
      x[j] = visible ? x[j] * s.scale + slope * float(k_pos - q_pos) : -INFINITY;
      tile_max = fmaxf(tile_max, x[j]);
    }
    const float new_max = fmaxf(m, pair_max(tile_max));
    // A row that sees no key of this tile keeps its sums (and adds zeros).
    const float base_max = new_max == -INFINITY ? 0.0f : new_max;
    float sum = 0.0f;
    mma_bf16* p = probs + cell.row * kProbLd + cell.col0;
    for (int j = 0; j < kCols / 2; ++j) {
      const float e = expf(x[j] - base_max);  // exp(-inf) = 0 for masked cells
      sum += e;
      p[j] = to_mma(e);
    }
    const float correction = expf(m - base_max);
    l = l * correction + pair_sum(sum);
    m = new_max;
    if (cell.col0 == 0) row_factor[row] = correction;
    __syncwarp();
#pragma unroll
    for (int n = 0; n < D / kM; ++n) {
#pragma unroll
      for (int i = 0; i < acc[n].num_elements; ++i) acc[n].x[i] *= row_factor[warp * kM + int(row_of.x[i])];
    }
    accumulate_product<D>(acc, probs, vs);
  }
  __syncwarp();  // the last tile's reads of row_factor are done
  if (cell.col0 == 0) row_factor[row] = row_valid ? 1.0f / l : 0.0f;
  if (row_valid && cell.col0 == 0) lse[(b * s.heads + h) * s.seq + q_pos] = m + logf(l);
  __syncwarp();
#pragma unroll
  for (int n = 0; n < D / kM; ++n) {
#pragma unroll
    for (int i = 0; i < acc[n].num_elements; ++i) acc[n].x[i] *= row_factor[warp * kM + int(row_of.x[i])];
  }
  __syncwarp();  // every lane has read the row numbers out of the scratch it reuses
  store_rows<D>(acc, 1.0f, scores, out + (b * s.seq + q0 + warp * kM) * s.out_stride + h * D, s.out_stride,
                q_rows - warp * kM);
}

// dQ for 64 queries of one head: per key tile, S = Q·Kᵀ and dP = dO·Vᵀ, then
// dS = P∘(dP − delta) in the lanes, then dQ += dS·K.
template <int D>
__global__ void __launch_bounds__(kMmaThreads) mma_dq_kernel(const bf16* d_out, const bf16* qkv, const float* lse,
                                                             const float* delta, bf16* d_qkv, AttentionShape s) {
  unsigned char* smem = dynamic_shared<unsigned char>();
  __shared__ int first_key;
  mma_bf16* qs = reinterpret_cast<mma_bf16*>(smem);
  mma_bf16* dos = qs + kRows * kHeadLd<D>;
  mma_bf16* ks = dos + kRows * kHeadLd<D>;
  mma_bf16* vs = ks + kRows * kHeadLd<D>;
  const int warp = threadIdx.x / kWarpSize;
  float* scores = reinterpret_cast<float*>(smem + 4 * kHeadTileBytes<D>) + warp * kScratchFloats<D>;
  float* dp = scores + kM * kScoreLd;
  mma_bf16* ds = reinterpret_cast<mma_bf16*>(smem + 4 * kHeadTileBytes<D> +
                                             kMmaWarps * kScratchFloats<D> * sizeof(float)) +
                 warp * kM * kProbLd;
  const int64_t b = blockIdx.z, h = blockIdx.y, kvh = h / s.group;
  const int64_t q0 = int64_t(gridDim.x - 1 - blockIdx.x) * kRows;
  const int q_rows = int(min(int64_t(kRows), s.seq - q0));
  const bf16* base = qkv + b * s.seq * s.row_stride;
  const float slope = s.slopes ? s.slopes[h] : 0.0f;
  const LaneCells cell;
  const int row = warp * kM + cell.row;
  const int64_t q_pos = q0 + row;
  const bool row_valid = row < q_rows;
  const int64_t first = row_valid ? window_start(s, b, q_pos) : q0;
  const float row_lse = row_valid ? lse[(b * s.heads + h) * s.seq + q_pos] : 0.0f;
  const float row_delta = row_valid ? delta[(b * s.heads + h) * s.seq + q_pos] : 0.0f;

  if (threadIdx.x == 0) first_key = int(q0);
  load_heads<D>(qs, base + q0 * s.row_stride + h * D, s.row_stride, q_rows);
  load_heads<D>(dos, d_out + (b * s.seq + q0) * s.out_stride + h * D, s.out_stride, q_rows);
  FragC acc[D / kM];
#pragma unroll
  for (int n = 0; n < D / kM; ++n) wmma::fill_fragment(acc[n], 0.0f);
  __syncthreads();
  if (row_valid) atomicMin(&first_key, int(first));
  __syncthreads();

  const int64_t k_end = q0 + q_rows;
  for (int64_t k0 = int64_t(first_key) / kCols * kCols; k0 < k_end; k0 += kCols) {
    const int k_rows = int(min(int64_t(kCols), s.seq - k0));
    __syncthreads();
    load_heads<D>(ks, base + k0 * s.row_stride + (s.heads + kvh) * D, s.row_stride, k_rows);
    load_heads<D>(vs, base + k0 * s.row_stride + (s.heads + s.kv_heads + kvh) * D, s.row_stride, k_rows);
    __syncthreads();
    product_with_transposed<D>(scores, qs + warp * kM * kHeadLd<D>, ks);
    product_with_transposed<D>(dp, dos + warp * kM * kHeadLd<D>, vs);
    __syncwarp();
    for (int j = 0; j < kCols / 2; ++j) {
      const int col = cell.col0 + j;
      const int64_t k_pos = k0 + col;
      const bool visible = row_valid && k_pos < k0 + k_rows && k_pos <= q_pos && k_pos >= first;
      const float x = scores[cell.row * kScoreLd + col] * s.scale + slope * float(k_pos - q_pos);
      const float p = visible ? expf(x - row_lse) : 0.0f;
      ds[cell.row * kProbLd + col] = to_mma(p * (dp[cell.row * kScoreLd + col] - row_delta));
    }
    __syncwarp();
    accumulate_product<D>(acc, ds, ks);
  }
  store_rows<D>(acc, s.scale, scores, d_qkv + (b * s.seq + q0 + warp * kM) * s.row_stride + h * D, s.row_stride,
                q_rows - warp * kM);
}

// dK and dV for 64 keys of one key/value head, over every query head of its
// group and every query tile that sees them: per query tile, Sᵀ = K·Qᵀ and
// dPᵀ = V·dOᵀ, then Pᵀ and dSᵀ in the lanes, then dV += Pᵀ·dO and dK += dSᵀ·Q.
template <int D>
__global__ void __launch_bounds__(kMmaThreads) mma_dkv_kernel(const bf16* d_out, const bf16* qkv, const float* lse,
                                                              const float* delta, bf16* d_qkv, AttentionShape s) {
  unsigned char* smem = dynamic_shared<unsigned char>();
  __shared__ float query_lse[kCols], query_delta[kCols];
  __shared__ int64_t query_first[kCols];
  mma_bf16* ks = reinterpret_cast<mma_bf16*>(smem);
  mma_bf16* vs = ks + kRows * kHeadLd<D>;
  mma_bf16* qs = vs + kRows * kHeadLd<D>;
  mma_bf16* dos = qs + kRows * kHeadLd<D>;
  const int warp = threadIdx.x / kWarpSize;
  float* scores = reinterpret_cast<float*>(smem + 4 * kHeadTileBytes<D>) + warp * kScratchFloats<D>;
  float* dp = scores + kM * kScoreLd;
  mma_bf16* probs = reinterpret_cast<mma_bf16*>(smem + 4 * kHeadTileBytes<D> +
                                                kMmaWarps * kScratchFloats<D> * sizeof(float)) +
                    warp * 2 * kM * kProbLd;
  mma_bf16* ds = probs + kM * kProbLd;
  const int64_t b = blockIdx.z, kvh = blockIdx.y, k0 = int64_t(blockIdx.x) * kRows;
  const int k_rows = int(min(int64_t(kRows), s.seq - k0));
  const int64_t k_last = k0 + k_rows - 1;
  const bf16* base = qkv + b * s.seq * s.row_stride;
  const LaneCells cell;
  const int64_t k_pos = k0 + warp * kM + cell.row;  // this lane's key in the score phase

  load_heads<D>(ks, base + k0 * s.row_stride + (s.heads + kvh) * D, s.row_stride, k_rows);
  load_heads<D>(vs, base + k0 * s.row_stride + (s.heads + s.kv_heads + kvh) * D, s.row_stride, k_rows);
  FragC dk[D / kM], dv[D / kM];
#pragma unroll
  for (int n = 0; n < D / kM; ++n) {
    wmma::fill_fragment(dk[n], 0.0f);
    wmma::fill_fragment(dv[n], 0.0f);
  }
  for (int64_t g = 0; g < s.group; ++g) {
    const int64_t h = kvh * s.group + g;
    const float slope = s.slopes ? s.slopes[h] : 0.0f;
    // Causal: only query tiles from this key tile on see its keys.
    for (int64_t q0 = k0; q0 < s.seq; q0 += kCols) {
      const int q_rows = int(min(int64_t(kCols), s.seq - q0));
      __syncthreads();  // the previous query tile is consumed
      bool sees = false;
      if (threadIdx.x < kCols) {
        const int i = threadIdx.x;
        const bool valid = i < q_rows;
        const int64_t first = valid ? window_start(s, b, q0 + i) : k_last + 1;
        query_first[i] = first;
        query_lse[i] = valid ? lse[(b * s.heads + h) * s.seq + q0 + i] : 0.0f;
        query_delta[i] = valid ? delta[(b * s.heads + h) * s.seq + q0 + i] : 0.0f;
        sees = first <= k_last;
      }
      // Packed samples may hide the whole tile from these keys.
      if (!__syncthreads_or(sees)) continue;
      load_heads<D>(qs, base + q0 * s.row_stride + h * D, s.row_stride, q_rows);
      load_heads<D>(dos, d_out + (b * s.seq + q0) * s.out_stride + h * D, s.out_stride, q_rows);
      __syncthreads();
      product_with_transposed<D>(scores, ks + warp * kM * kHeadLd<D>, qs);
      product_with_transposed<D>(dp, vs + warp * kM * kHeadLd<D>, dos);
      __syncwarp();
      for (int j = 0; j < kCols / 2; ++j) {
        const int i = cell.col0 + j;  // query q0 + i
        const int64_t q_pos = q0 + i;
        const bool visible = i < q_rows && k_pos <= k_last && k_pos <= q_pos && k_pos >= query_first[i];
        const float x = scores[cell.row * kScoreLd + i] * s.scale + slope * float(k_pos - q_pos);
        const float p = visible ? expf(x - query_lse[i]) : 0.0f;
        probs[cell.row * kProbLd + i] = to_mma(p);
        ds[cell.row * kProbLd + i] = to_mma(p * (dp[cell.row * kScoreLd + i] - query_delta[i]));
      }
      __syncwarp();
      accumulate_product<D>(dv, probs, dos);
      accumulate_product<D>(dk, ds, qs);
    }
  }
  bf16* rows = d_qkv + (b * s.seq + k0 + warp * kM) * s.row_stride;
  const int warp_rows = k_rows - warp * kM;
  store_rows<D>(dk, s.scale, scores, rows + (s.heads + kvh) * D, s.row_stride, warp_rows);
  __syncwarp();  // the scratch is reused
  store_rows<D>(dv, 1.0f, scores, rows + (s.heads + s.kv_heads + kvh) * D, s.row_stride, warp_rows);
}

// Whether one block of the kernel, with `bytes` of dynamic shared memory and its
// static share, fits this GPU (an H100 allows 227 KiB; compute capability 8.6
// and 8.9 parts, 99 KiB: too little for head size 128's backward kernels).
template <typename Kernel>
bool shared_fits(Kernel kernel, size_t bytes) {
  cudaFuncAttributes attributes{};
  HONE_CUDA_CHECK(cudaFuncGetAttributes(&attributes, kernel));
  return bytes + attributes.sharedSizeBytes <= max_shared_memory_per_block();
}

// Raises the kernel's dynamic shared memory limit to `bytes` (past the default
// 48 KiB); mma_attention_fits() has checked that this GPU has them.
template <typename Kernel>
void allow_shared(Kernel kernel, size_t bytes) {
  HONE_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(bytes)));
}

// Each kernel's dynamic shared memory: head tiles, then per warp the bf16 tiles.
template <int D>
constexpr size_t kForwardShared = shared_bytes<D>(3, 1, 0);
template <int D>
constexpr size_t kDqShared = shared_bytes<D>(4, 1, 0);
template <int D>
constexpr size_t kDkvShared = shared_bytes<D>(4, 2, 0);

// Calls fn.template operator()<D>() with the head size (64 or 128).
template <typename Fn>
void dispatch_mma_head_dim(int64_t head_dim, Fn&& fn) {
  if (head_dim == 64) fn.template operator()<64>();
  else fn.template operator()<128>();
}

unsigned tiles_of(int64_t seq) { return unsigned((seq + kRows - 1) / kRows); }

}  // namespace

bool mma_attention_fits(const AttentionShape& s, AttentionPass pass, std::initializer_list<const void*> buffers) {
  if (s.head_dim != 64 && s.head_dim != 128) return false;
  if (s.row_stride % 8 != 0 || s.out_stride % 8 != 0) return false;  // rows start on 16 bytes
  if (s.seq > (int64_t(1) << 30)) return false;                        // key positions are int in the kernels
  for (const void* p : buffers) {
    if (!aligned_to(p, 16)) return false;
  }
  if (compute_capability() < 80) return false;
  bool fits = false;
  dispatch_mma_head_dim(s.head_dim, [&]<int D>() {
    fits = pass == AttentionPass::forward
               ? shared_fits(mma_forward_kernel<D>, kForwardShared<D>)
               : shared_fits(mma_dq_kernel<D>, kDqShared<D>) && shared_fits(mma_dkv_kernel<D>, kDkvShared<D>);
  });
  return fits;
}

void mma_attention_forward(const bf16* qkv, bf16* out, float* lse, const AttentionShape& s) {
  dispatch_mma_head_dim(s.head_dim, [&]<int D>() {
    const auto kernel = mma_forward_kernel<D>;
    allow_shared(kernel, kForwardShared<D>);
    HONE_LAUNCH(dim3(tiles_of(s.seq), unsigned(s.heads), unsigned(s.batch)), kMmaThreads, kForwardShared<D>, kernel)(
        qkv, out, lse, s);
    HONE_CUDA_LAUNCHED("attention_forward (tensor cores)");
  });
}

void mma_attention_backward(const bf16* d_out, const bf16* qkv, const float* lse, const float* delta, bf16* d_qkv,
                            const AttentionShape& s) {
  dispatch_mma_head_dim(s.head_dim, [&]<int D>() {
    const auto dq = mma_dq_kernel<D>;
    allow_shared(dq, kDqShared<D>);
    HONE_LAUNCH(dim3(tiles_of(s.seq), unsigned(s.heads), unsigned(s.batch)), kMmaThreads, kDqShared<D>, dq)(
        d_out, qkv, lse, delta, d_qkv, s);
    HONE_CUDA_LAUNCHED("attention_backward (dq, tensor cores)");
    const auto dkv = mma_dkv_kernel<D>;
    allow_shared(dkv, kDkvShared<D>);
    HONE_LAUNCH(dim3(tiles_of(s.seq), unsigned(s.kv_heads), unsigned(s.batch)), kMmaThreads, kDkvShared<D>, dkv)(
        d_out, qkv, lse, delta, d_qkv, s);
    HONE_CUDA_LAUNCHED("attention_backward (dk, dv, tensor cores)");
  });
}

}  // namespace hone::kernels::cuda
