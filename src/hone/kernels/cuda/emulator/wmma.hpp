#pragma once
// The warp matrix API (nvcuda::wmma) of the CUDA emulator, for the tensor-core
// attention: 16×16×16 tiles of bf16 with fp32 accumulators. Like CUDA, it does
// not say which lane holds which element of a fragment; here lane l holds
// elements l, l + 32, ..., l + 224 of the tile in row-major order, for every
// fragment type (a kernel that assumed another layout would fail its tests).
// mma_sync gathers the warp's operands in the warp's scratch.
#include "hone/core/dtype.hpp"
#include "hone/kernels/cuda/emulator/emulator.hpp"

struct __nv_bfloat16 {
  uint16_t bits;
};

inline __nv_bfloat16 __float2bfloat16_rn(float x) { return {hone::float_to_bf16(x).bits}; }

namespace hone::kernels::cuda::emulator {
// The running warp's scratch, kWarpScratchBytes of it.
inline constexpr size_t kWarpScratchBytes = 2 * 256 * sizeof(float);
void* warp_scratch();
}  // namespace hone::kernels::cuda::emulator

namespace nvcuda::wmma {

struct matrix_a {};
struct matrix_b {};
struct accumulator {};
struct row_major {};
struct col_major {};
enum layout_t { mem_row_major, mem_col_major };

template <typename Use, int M, int N, int K, typename T, typename Layout = void>
struct fragment {
  static_assert(M == 16 && N == 16 && K == 16, "the emulator has 16x16x16 tiles only");
  static constexpr int num_elements = 256 / 32;
  T x[num_elements];
};

namespace detail {

inline float to_float(float x) { return x; }
inline float to_float(__nv_bfloat16 x) { return hone::bf16_to_float(hone::bf16{x.bits}); }

// The tile element (row, column) of this lane's element i.
inline int row_of(int i) { return (i * 32 + hone::kernels::cuda::emulator::lane()) / 16; }
inline int col_of(int i) { return (i * 32 + hone::kernels::cuda::emulator::lane()) % 16; }

}  // namespace detail

template <typename Use, typename T, typename Layout, typename V>
void fill_fragment(fragment<Use, 16, 16, 16, T, Layout>& f, V value) {
  for (T& x : f.x) x = T(value);
}

// Operands: element (r, c) of the tile is p[r·ldm + c] row-major, p[c·ldm + r] column-major.
template <typename Use, typename T, typename Layout>
void load_matrix_sync(fragment<Use, 16, 16, 16, T, Layout>& f, const T* p, unsigned ldm) {
  constexpr bool kColumns = std::is_same_v<Layout, col_major>;
  for (int i = 0; i < f.num_elements; ++i) {
    const int r = detail::row_of(i), c = detail::col_of(i);
    f.x[i] = kColumns ? p[size_t(c) * ldm + size_t(r)] : p[size_t(r) * ldm + size_t(c)];
  }
  __syncwarp();
}

template <typename T>
void load_matrix_sync(fragment<accumulator, 16, 16, 16, T>& f, const T* p, unsigned ldm, layout_t layout) {
  for (int i = 0; i < f.num_elements; ++i) {
    const int r = detail::row_of(i), c = detail::col_of(i);
    f.x[i] = layout == mem_col_major ? p[size_t(c) * ldm + size_t(r)] : p[size_t(r) * ldm + size_t(c)];
  }
  __syncwarp();
}

template <typename T>
void store_matrix_sync(T* p, const fragment<accumulator, 16, 16, 16, T>& f, unsigned ldm, layout_t layout) {
  for (int i = 0; i < f.num_elements; ++i) {
    const int r = detail::row_of(i), c = detail::col_of(i);
    (layout == mem_col_major ? p[size_t(c) * ldm + size_t(r)] : p[size_t(r) * ldm + size_t(c)]) = f.x[i];
  }
  __syncwarp();
}

// d = a·b + c, products and sums in fp32 (d may be c).
template <typename T, typename LayoutA, typename LayoutB>
void mma_sync(fragment<accumulator, 16, 16, 16, float>& d, const fragment<matrix_a, 16, 16, 16, T, LayoutA>& a,
              const fragment<matrix_b, 16, 16, 16, T, LayoutB>& b, const fragment<accumulator, 16, 16, 16, float>& c) {
  float* tiles = static_cast<float*>(hone::kernels::cuda::emulator::warp_scratch());  // a, then b, row-major
  for (int i = 0; i < a.num_elements; ++i) {
    const int at = detail::row_of(i) * 16 + detail::col_of(i);
    tiles[at] = detail::to_float(a.x[i]);
    tiles[256 + at] = detail::to_float(b.x[i]);
  }
  __syncwarp();
  for (int i = 0; i < d.num_elements; ++i) {
    const int r = detail::row_of(i), col = detail::col_of(i);
    float sum = c.x[i];
    for (int k = 0; k < 16; ++k) sum += tiles[r * 16 + k] * tiles[256 + k * 16 + col];
    d.x[i] = sum;
  }
  __syncwarp();  // before the scratch is written again
}

}  // namespace nvcuda::wmma
