// Tensors, views, device copies, memory accounting and arenas.
#include <algorithm>
#include <cstdio>
#include <fstream>
#include <string>

#include "hone/core/arena.hpp"
#include "support/check.hpp"

namespace hone::test {
namespace {

TEST(Tensor, ViewsShareStorage) {
  Tensor t = Tensor::from(std::vector<float>{0, 1, 2, 3, 4, 5}, {2, 3});
  EXPECT_EQ(t.numel(), 6);
  EXPECT_EQ(t.shape().str(), "[2, 3]");
  Tensor row = t[1];
  EXPECT_EQ(row.shape(), Shape({3}));
  EXPECT_EQ(row.to_vector<float>(), (std::vector<float>{3, 4, 5}));
  row.data<float>()[0] = 30;
  EXPECT_EQ(t.to_vector<float>()[3], 30);
  Tensor flat = t.view({6});
  EXPECT_EQ(flat.slice(2, {2}).to_vector<float>(), (std::vector<float>{2, 30}));
  EXPECT_THROW(t.view({4}), Error);
  EXPECT_THROW(t.slice(5, {2}), Error);
  EXPECT_THROW(t.data<double>(), Error);  // the dtype is checked on access
}

TEST(Tensor, CopiesAndConversions) {
  Tensor a = Tensor::from(std::vector<int32_t>{1, -2, 3}, {3});
  Tensor b = a.clone();
  b.data<int32_t>()[0] = 7;
  EXPECT_EQ(a.to_vector<int64_t>(), (std::vector<int64_t>{1, -2, 3}));
  EXPECT_EQ(b.to_vector<double>(), (std::vector<double>{7, -2, 3}));
  Tensor z = Tensor::zeros({2, 2}, DType::bf16);
  EXPECT_EQ(z.to_vector<float>(), (std::vector<float>{0, 0, 0, 0}));
  EXPECT_THROW(a.copy_from(Tensor::zeros({2}, DType::i32)), Error);
  // Onto itself: nothing to do. Overlapping ranges: a bug of the caller (a
  // GPU's copies are undefined on them), whatever the CPU's memmove would do.
  a.copy_from(a);
  EXPECT_EQ(a.to_vector<int64_t>(), (std::vector<int64_t>{1, -2, 3}));
  EXPECT_THROW(a.slice(0, {2}).copy_from(a.slice(1, {2})), Error);
}

TEST(Allocator, TracksCurrentAndPeakBytes) {
  Allocator& cpu = allocator_for(Device::cpu());
  const size_t before = cpu.stats().allocated;
  cpu.reset_peak();
  {
    Tensor big = Tensor::empty({1000}, DType::f32);
    EXPECT_EQ(cpu.stats().allocated, before + 4000);
    Tensor bigger = Tensor::empty({500}, DType::f64);
    EXPECT_EQ(cpu.stats().peak_allocated, before + 8000);
  }
  EXPECT_EQ(cpu.stats().allocated, before);
  EXPECT_EQ(cpu.stats().peak_allocated, before + 8000);
  cpu.reset_peak();
  EXPECT_EQ(cpu.stats().peak_allocated, before);
}

TEST(Allocator, LargeFillsAndCopiesCoverEveryByte) {
  // Above 4 MiB they run in pieces across the threads; an odd size leaves a
  // short last piece.
  Allocator& cpu = allocator_for(Device::cpu());
  const size_t bytes = (size_t(9) << 20) + 3;
  std::vector<unsigned char> source(bytes), copy(bytes, 0);
  for (size_t i = 0; i < bytes; ++i) source[i] = static_cast<unsigned char>(i * 7 + 1);
  cpu.copy_from_host(copy.data(), source.data(), bytes);
  EXPECT_EQ(copy, source);
  cpu.zero(copy.data(), bytes);
  EXPECT_EQ(std::count(copy.begin(), copy.end(), 0), std::ptrdiff_t(bytes));
}

// The size of the AnonHugePages of the mapping of /proc/self/smaps that holds
// `address`, in KiB; -1 when none lists it.
int64_t anon_huge_kib_at(const void* address) {
  std::ifstream smaps("/proc/self/smaps");
  const auto target = reinterpret_cast<uintptr_t>(address);
  bool inside = false;
  for (std::string line; std::getline(smaps, line);) {
    uintptr_t begin = 0, end = 0;
    if (std::sscanf(line.c_str(), "%lx-%lx ", &begin, &end) == 2) {  // a mapping's first line
      inside = begin <= target && target < end;
    } else if (inside && line.starts_with("AnonHugePages:")) {
      return std::stoll(line.substr(14));
    }
  }
  return -1;
}

TEST(Allocator, LargeBuffersStartOnHugePages) {
  Tensor big = Tensor::zeros({int64_t(16) << 20}, DType::u8);  // 16 MiB, touched by the zeroing
  EXPECT_EQ(reinterpret_cast<uintptr_t>(big.data<uint8_t>()) % (uintptr_t(2) << 20), 0u);
  std::ifstream thp("/sys/kernel/mm/transparent_hugepage/enabled");
  std::string modes;
  std::getline(thp, modes);
  if (modes.empty() || modes.find("[never]") != std::string::npos)
    GTEST_SKIP() << "transparent huge pages are off on this machine: only the alignment was checked";
  EXPECT_GT(anon_huge_kib_at(big.data<uint8_t>()), 0) << "THP modes: " << modes;
}

TEST(Allocator, UnknownDeviceIsAnError) {
  EXPECT_THROW(parse_device("tpu"), Error);
  EXPECT_EQ(parse_device("cuda:1"), Device::cuda(1));
#ifndef HONE_WITH_CUDA
  EXPECT_THROW(Tensor::empty({4}, DType::f32, Device::cuda(0)), Error);
#endif
}

TEST(Arena, MeasuringAndRealPassesAgreeAndAlign) {
  auto plan = [](Arena& arena) {
    std::vector<Tensor> ts;
    ts.push_back(arena.take({3}, DType::bf16));
    ts.push_back(arena.take({5, 7}, DType::f32));
    ts.push_back(arena.take({1}, DType::f64));
    return ts;
  };
  Arena measure;
  auto undefined = plan(measure);
  EXPECT_FALSE(undefined[0].defined());
  Arena real(measure.bytes_used(), Device::cpu());
  auto ts = plan(real);
  EXPECT_EQ(real.bytes_used(), measure.bytes_used());
  for (const Tensor& t : ts) {
    EXPECT_EQ(reinterpret_cast<uintptr_t>(t.raw()) % 64, 0u);  // the host allocator's alignment
    EXPECT_EQ((static_cast<const std::byte*>(t.raw()) - static_cast<const std::byte*>(ts[0].raw())) % 256, 0);
  }
  EXPECT_EQ(ts[1].shape(), Shape({5, 7}));
  EXPECT_EQ(ts[1].dtype(), DType::f32);
}

// Two sets of tensors never live at once share memory: the second set starts
// where the first did, and the arena ends after the longer one.
TEST(Arena, ReusedMemoryOverlapsAndTheEndIsTheFurthest) {
  Arena arena(4096, Device::cpu());
  const Tensor before = arena.take({16}, DType::f32);
  const size_t mark = arena.mark();
  const Tensor first = arena.take({100}, DType::f32);
  const size_t first_end = arena.bytes_used();
  arena.reuse_from(mark);
  const Tensor second = arena.take({8}, DType::f64), third = arena.take({200}, DType::f32);
  EXPECT_EQ(second.raw(), first.raw());
  const size_t furthest = arena.bytes_used();
  EXPECT_GT(furthest, first_end);
  arena.reuse_from(mark);
  arena.take({4}, DType::f32);
  EXPECT_EQ(arena.bytes_used(), furthest);  // a shorter set leaves the end where it was
  arena.reuse_end();
  const Tensor after = arena.take({1}, DType::f32);
  EXPECT_GE(static_cast<const std::byte*>(after.raw()),
            static_cast<const std::byte*>(third.raw()) + third.nbytes());
  EXPECT_EQ(static_cast<const std::byte*>(before.raw()) + 256, static_cast<const std::byte*>(first.raw()));
}

TEST(DType, NamesRoundTrip) {
  for (DType d : {DType::f32, DType::bf16, DType::f16, DType::f64}) EXPECT_EQ(parse_dtype(dtype_name(d)), d);
  EXPECT_EQ(parse_dtype("float32"), DType::f32);
  EXPECT_THROW(parse_dtype("fp9"), Error);
}

}  // namespace
}  // namespace hone::test
