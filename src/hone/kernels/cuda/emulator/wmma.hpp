#pragma once
// The warp matrix API (nvcuda::wmma) of the CUDA emulator, for the tensor-core
// attention: 16×16×16 tiles of bf16 with fp32 accumulators. Like CUDA, it does
// not say which lane holds which element of a fragment; here lane l holds
// elements l, l + 32, ..., l + 224 of the tile in row-major order, for every
// fragment type (a kernel that assumed another layout would fail its tests).
// mma_sync gathers the warp's operands in the emulator's memory. The calls wait
// for the warp's other lanes but order no memory between them (as on a GPU: a
// lane that reads what another stored needs __syncwarp between).
#include "hone/core/dtype.hpp"
#include "hone/kernels/cuda/emulator/emulator.hpp"

struct __nv_bfloat16 {
  uint16_t bits;
};

inline __nv_bfloat16 __float2bfloat16_rn(float x) { return {hone::float_to_bf16(x).bits}; }

namespace hone::kernels::cuda::emulator {
// d[i] += (A·B) at this lane's element i, where each lane gives its elements of
// the 16×16 tiles A and B in a fragment's order (emulator.cpp).
void warp_tile_product(const float* a, const float* b, float* d);
}  // namespace hone::kernels::cuda::emulator

namespace nvcuda::wmma {

struct matrix_a {};
struct matrix_b {};
struct accumulator {};
struct row_major {};
struct col_major {};
enum layout_t { mem_row_major, mem_col_major };

namespace detail {

inline constexpr int kLaneElements = 256 / 32;

inline float to_float(float x) { return x; }
inline float to_float(__nv_bfloat16 x) { return hone::bf16_to_float(hone::bf16{x.bits}); }

// The tile element (row, column) of this lane's element i.
inline int row_of(int i) { return (i * 32 + hone::kernels::cuda::emulator::lane()) / 16; }
inline int col_of(int i) { return (i * 32 + hone::kernels::cuda::emulator::lane()) % 16; }

}  // namespace detail

template <typename Use, int M, int N, int K, typename T, typename Layout = void>
struct fragment {
  static_assert(M == 16 && N == 16 && K == 16, "the emulator has 16x16x16 tiles only");
  static constexpr int num_elements = detail::kLaneElements;
  T x[num_elements];
};

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
  hone::kernels::cuda::emulator::warp_converge();
}

template <typename T>
void load_matrix_sync(fragment<accumulator, 16, 16, 16, T>& f, const T* p, unsigned ldm, layout_t layout) {
  for (int i = 0; i < f.num_elements; ++i) {
    const int r = detail::row_of(i), c = detail::col_of(i);
    f.x[i] = layout == mem_col_major ? p[size_t(c) * ldm + size_t(r)] : p[size_t(r) * ldm + size_t(c)];
  }
  hone::kernels::cuda::emulator::warp_converge();
}

template <typename T>
void store_matrix_sync(T* p, const fragment<accumulator, 16, 16, 16, T>& f, unsigned ldm, layout_t layout) {
  for (int i = 0; i < f.num_elements; ++i) {
    const int r = detail::row_of(i), c = detail::col_of(i);
    (layout == mem_col_major ? p[size_t(c) * ldm + size_t(r)] : p[size_t(r) * ldm + size_t(c)]) = f.x[i];
  }
  hone::kernels::cuda::emulator::warp_converge();
}

// d = a·b + c, products and sums in fp32 (d may be c).
template <typename T, typename LayoutA, typename LayoutB>
void mma_sync(fragment<accumulator, 16, 16, 16, float>& d, const fragment<matrix_a, 16, 16, 16, T, LayoutA>& a,
              const fragment<matrix_b, 16, 16, 16, T, LayoutB>& b, const fragment<accumulator, 16, 16, 16, float>& c) {
  float a_elements[detail::kLaneElements], b_elements[detail::kLaneElements];
  for (int i = 0; i < detail::kLaneElements; ++i) {
    a_elements[i] = detail::to_float(a.x[i]);
    b_elements[i] = detail::to_float(b.x[i]);
    d.x[i] = c.x[i];
  }
  hone::kernels::cuda::emulator::warp_tile_product(a_elements, b_elements, d.x);
}

}  // namespace nvcuda::wmma
