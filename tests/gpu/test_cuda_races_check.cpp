// The CUDA emulator's race check (-DHONE_EMULATOR_CHECK=RACES, docs/cuda.md):
// ThreadSanitizer reports two threads of a block that touch the same memory
// with no barrier between them that orders memory on a GPU, and two blocks that
// do (nothing orders them: neighbours at every other launch, any two blocks
// with probability 1/2 at the others), and only those. Each racy
// kernel runs in a death test: the check stops the process at the first race
// (exit status 66) with a report naming the kernel.
#include <gtest/gtest.h>

#include <vector>

#include "hone/kernels/cuda/common.cuh"
#include "hone/kernels/cuda/emulator/wmma.hpp"

namespace hone::kernels::cuda {
namespace {

// What lies between a thread's write to its slot and its read of another's.
enum class Between { nothing, shuffle, warp_barrier, block_barrier, block_barrier_or };

// Each thread writes its slot, then reads its neighbour's (lane ^ 1: the same warp).
template <Between kBetween>
__global__ void neighbour_reads(float* out) {
  __shared__ float slots[64];
  slots[threadIdx.x] = float(threadIdx.x);
  float zero = 0.0f;
  if constexpr (kBetween == Between::shuffle) zero = shuffle_xor(0.0f, 1);
  if constexpr (kBetween == Between::warp_barrier) warp_sync();
  if constexpr (kBetween == Between::block_barrier) __syncthreads();
  if constexpr (kBetween == Between::block_barrier_or) zero = float(__syncthreads_or(0));
  out[threadIdx.x] = slots[threadIdx.x ^ 1] + zero;
}

// Threads of different warps: the first warp writes, the second reads.
template <Between kBetween>
__global__ void other_warp_reads(float* out) {
  __shared__ float slots[32];
  if (threadIdx.x < 32) slots[threadIdx.x] = float(threadIdx.x);
  if constexpr (kBetween == Between::warp_barrier) warp_sync();
  if constexpr (kBetween == Between::block_barrier) __syncthreads();
  if (threadIdx.x >= 32) out[threadIdx.x - 32] = slots[threadIdx.x - 32];
}

// Runs one of the kernels above on one block of 64 threads; it writes at most 64 outputs.
template <auto kKernel>
std::vector<float> run_on_64_threads() {
  std::vector<float> out(64);
  HONE_LAUNCH(1, 64, 0, kKernel)(out.data());
  HONE_CUDA_LAUNCHED("a test kernel");
  return out;
}

// A warp loads a tile into a fragment, stores it to shared memory through the
// warp matrix API and reads it back transposed: each lane reads elements that
// other lanes stored.
template <bool kWarpBarrier>
__global__ void transposed_tile(const float* in, float* out) {
  __shared__ float tile[16 * 16];
  nvcuda::wmma::fragment<nvcuda::wmma::accumulator, 16, 16, 16, float> values;
  nvcuda::wmma::load_matrix_sync(values, in, 16, nvcuda::wmma::mem_row_major);
  nvcuda::wmma::store_matrix_sync(tile, values, 16, nvcuda::wmma::mem_row_major);
  if constexpr (kWarpBarrier) warp_sync();
  for (unsigned i = threadIdx.x; i < 16 * 16; i += kWarpSize) out[i] = tile[i % 16 * 16 + i / 16];
}

// The tile's elements are 0, 1, ..., 255 in row-major order.
template <bool kWarpBarrier>
std::vector<float> run_transposed_tile() {
  std::vector<float> in(16 * 16), out(16 * 16);
  for (size_t i = 0; i < in.size(); ++i) in[i] = float(i);
  HONE_LAUNCH(1, kWarpSize, 0, transposed_tile<kWarpBarrier>)(in.data(), out.data());
  HONE_CUDA_LAUNCHED("transposed_tile");
  return out;
}

// The block's smallest odd thread index, by atomicMin on a shared variable.
__global__ void smallest_odd(int* out) {
  __shared__ int smallest;
  if (threadIdx.x == 0) smallest = 1 << 30;
  __syncthreads();
  if (threadIdx.x % 2 == 1) atomicMin(&smallest, int(threadIdx.x));
  __syncthreads();
  if (threadIdx.x == 0) *out = smallest;
}

// Each block writes 32 outputs, `stride` after the previous block's (blocks
// counted along x, then y): with a stride of 31, a block's last output is the
// next one's first.
__global__ void block_rows(float* out, int stride) {
  const unsigned block = blockIdx.y * gridDim.x + blockIdx.x;
  out[block * unsigned(stride) + threadIdx.x] = float(block);
}

std::vector<float> run_block_rows(dim3 grid, int stride) {
  std::vector<float> out(grid.x * grid.y * 32);
  HONE_LAUNCH(grid, 32, 0, block_rows)(out.data(), stride);
  HONE_CUDA_LAUNCHED("block_rows");
  return out;
}

// Block b writes row b % `rows` of 32 outputs (blocks counted along x, then
// y): with fewer rows than blocks, blocks `rows` apart write the same row, as
// a grid-stride loop's blocks do when its stride is `rows` blocks.
__global__ void rows_modulo(float* out, unsigned rows) {
  const unsigned block = blockIdx.y * gridDim.x + blockIdx.x;
  out[block % rows * 32 + threadIdx.x] = float(block);
}

std::vector<float> run_rows_modulo(dim3 grid, unsigned rows) {
  std::vector<float> out(rows * 32);
  HONE_LAUNCH(grid, 32, 0, rows_modulo)(out.data(), rows);
  HONE_CUDA_LAUNCHED("rows_modulo");
  return out;
}

// The smallest odd block index, by atomicMin on a global variable.
__global__ void smallest_odd_block(int* out) {
  if (threadIdx.x == 0 && blockIdx.x % 2 == 1) atomicMin(out, int(blockIdx.x));
}

class CudaRacecheck : public testing::Test {
 protected:
  // Each death test runs in a new process of this binary (no fork of a process
  // with ThreadSanitizer's threads).
  void SetUp() override { GTEST_FLAG_SET(death_test_style, "threadsafe"); }
};

constexpr int kRaceExit = 66;  // ThreadSanitizer's exit status

TEST_F(CudaRacecheck, BarriersThatOrderMemoryLeaveNothingToReport) {
  for (const std::vector<float>& out : {run_on_64_threads<neighbour_reads<Between::block_barrier>>(),
                                        run_on_64_threads<neighbour_reads<Between::block_barrier_or>>(),
                                        run_on_64_threads<neighbour_reads<Between::warp_barrier>>()}) {
    for (int t = 0; t < 64; ++t) EXPECT_EQ(out[size_t(t)], float(t ^ 1));
  }
  const std::vector<float> other_warp = run_on_64_threads<other_warp_reads<Between::block_barrier>>();
  for (int t = 0; t < 32; ++t) EXPECT_EQ(other_warp[size_t(t)], float(t));
  const std::vector<float> transposed = run_transposed_tile<true>();
  for (int i = 0; i < 16 * 16; ++i) EXPECT_EQ(transposed[size_t(i)], float(i % 16 * 16 + i / 16));
  int smallest = 0;
  HONE_LAUNCH(1, 96, 0, smallest_odd)(&smallest);
  HONE_CUDA_LAUNCHED("smallest_odd");
  EXPECT_EQ(smallest, 1);  // and atomics on the same variable are no race
}

TEST_F(CudaRacecheck, BlocksThatTouchDisjointMemoryOrAtomicsLeaveNothingToReport) {
  const std::vector<float> rows = run_block_rows(dim3(2, 2), 32);
  for (size_t i = 0; i < rows.size(); ++i) EXPECT_EQ(rows[i], float(i / 32));
  const std::vector<float> modulo = run_rows_modulo(dim3(8), 8);
  for (size_t i = 0; i < modulo.size(); ++i) EXPECT_EQ(modulo[i], float(i / 32));
  int smallest = 1 << 30;
  HONE_LAUNCH(6, 32, 0, smallest_odd_block)(&smallest);
  HONE_CUDA_LAUNCHED("smallest_odd_block");
  EXPECT_EQ(smallest, 1);
}

TEST_F(CudaRacecheck, ReportsBlocksThatWriteTheSameMemory) {
  EXPECT_EXIT(run_block_rows(dim3(4, 1), 31), testing::ExitedWithCode(kRaceExit),
              "ThreadSanitizer: data race.*block_rows");
  EXPECT_EXIT(run_block_rows(dim3(1, 4), 31), testing::ExitedWithCode(kRaceExit),
              "ThreadSanitizer: data race.*block_rows");
}

// Block (x, y) writes row x + y of 32 outputs: diagonal neighbours, (1, 0)
// and (0, 1), write the same row.
__global__ void diagonal_rows(float* out) { out[(blockIdx.x + blockIdx.y) * 32 + threadIdx.x] = float(blockIdx.y); }

void run_diagonal_rows() {
  std::vector<float> out(3 * 32);
  HONE_LAUNCH(dim3(2, 2), 32, 0, diagonal_rows)(out.data());
  HONE_CUDA_LAUNCHED("diagonal_rows");
}

// Blocks 2 apart along x, 4 apart along y, 32 apart along x, and diagonal
// neighbours, writing the same row: the race check puts each pair on
// different host threads with probability 1/2 at every odd launch of the
// kernel (docs/cuda.md); within its first eight, as its hash falls.
TEST_F(CudaRacecheck, ReportsBlocksAnEvenDistanceApartThatWriteTheSameMemory) {
  constexpr int kLaunches = 8;
  EXPECT_EXIT(
      {
        for (int launch = 0; launch < kLaunches; ++launch) run_rows_modulo(dim3(3), 2);
      },
      testing::ExitedWithCode(kRaceExit), "ThreadSanitizer: data race.*rows_modulo.*second host thread");
  EXPECT_EXIT(
      {
        for (int launch = 0; launch < kLaunches; ++launch) run_rows_modulo(dim3(1, 5), 4);
      },
      testing::ExitedWithCode(kRaceExit), "ThreadSanitizer: data race.*rows_modulo");
  EXPECT_EXIT(
      {
        for (int launch = 0; launch < kLaunches; ++launch) run_rows_modulo(dim3(33), 32);
      },
      testing::ExitedWithCode(kRaceExit), "ThreadSanitizer: data race.*rows_modulo");
  EXPECT_EXIT(
      {
        for (int launch = 0; launch < kLaunches; ++launch) run_diagonal_rows();
      },
      testing::ExitedWithCode(kRaceExit), "ThreadSanitizer: data race.*diagonal_rows");
}

TEST_F(CudaRacecheck, ReportsAReadOfAnotherThreadsWriteWithoutABarrier) {
  EXPECT_EXIT(run_on_64_threads<neighbour_reads<Between::nothing>>(), testing::ExitedWithCode(kRaceExit),
              "ThreadSanitizer: data race.*neighbour_reads");
}

TEST_F(CudaRacecheck, AShuffleOrdersNoMemory) {
  EXPECT_EXIT(run_on_64_threads<neighbour_reads<Between::shuffle>>(), testing::ExitedWithCode(kRaceExit),
              "ThreadSanitizer: data race.*neighbour_reads");
}

TEST_F(CudaRacecheck, AWarpBarrierOrdersNothingForOtherWarps) {
  EXPECT_EXIT(run_on_64_threads<other_warp_reads<Between::warp_barrier>>(), testing::ExitedWithCode(kRaceExit),
              "ThreadSanitizer: data race.*other_warp_reads");
}

TEST_F(CudaRacecheck, TheWarpMatrixApiOrdersNoMemoryBetweenLanes) {
  EXPECT_EXIT(run_transposed_tile<false>(), testing::ExitedWithCode(kRaceExit),
              "ThreadSanitizer: data race.*transposed_tile");
}

}  // namespace
}  // namespace hone::kernels::cuda
