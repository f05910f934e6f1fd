// The CUDA emulator's launches (threads as fibers) and runtime calls; see
// emulator.hpp for what it models and what it checks.
#include "hone/kernels/cuda/emulator/emulator.hpp"
#include "hone/kernels/cuda/emulator/wmma.hpp"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <deque>
#include <exception>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <unordered_map>
#include <vector>

#include "hone/core/error.hpp"

#if !defined(__x86_64__)
#error "the CUDA emulator switches its threads in x86-64 assembly"
#endif

#if HONE_EMULATOR_CHECK_RACES
#include <sanitizer/tsan_interface.h>

// Stop at the first race, with its report: the test that ran it fails there.
// Only the kernels' own loads and stores count: memcpy and memset called by
// CPU code (OpenMP's threads, whose barriers ThreadSanitizer does not see)
// would be reported against them. An allocation too large for any memory is
// cudaMalloc's out-of-memory error (tests ask for one), not the sanitizer's.
extern "C" const char* __tsan_default_options() {
  return "halt_on_error=1:ignore_interceptors_accesses=1:allocator_may_return_null=1";
}
#endif

#if HONE_EMULATOR_CHECK_MEMORY
#include <sanitizer/asan_interface.h>

// Leaks are not the kernels' to find; an allocation too large for any memory
// is cudaMalloc's out-of-memory error (tests ask for one), not the sanitizer's.
extern "C" const char* __asan_default_options() { return "detect_leaks=0:allocator_may_return_null=1"; }
#endif

thread_local uint3 threadIdx, blockIdx;
thread_local dim3 blockDim, gridDim;

// A copy or memset queued on a stream (emulator.hpp, "Streams"); a stream is
// its queue, oldest first, and an event where its stream's queue ended when it
// was recorded.
struct QueuedWork {
  uint64_t id = 0;  // from one counter for all streams: later work, higher id
  void* dst = nullptr;
  const void* src = nullptr;  // null: a memset of `value`
  size_t bytes = 0;
  int value = 0;
  std::vector<unsigned char> source_at_start;  // the source when the copy could first run (empty: unknown)
};

struct CUstream_st {
  std::string name;
  std::deque<QueuedWork> queue;
  uint64_t last = 0;  // the id of the last work queued
};

struct CUevent_st {
  CUstream_st* stream = nullptr;  // null: never recorded
  uint64_t through = 0;           // complete once the stream's work up to this id has run
  bool timing = true;             // not created with cudaEventDisableTiming
  std::chrono::steady_clock::time_point recorded;
};

namespace hone::kernels::cuda::emulator {

namespace {

constexpr int kWarpSize = 32;
constexpr int kMaxThreads = 1024;
// A thread's stack: kernels keep small arrays there (accumulators, fragments).
// Untouched pages cost nothing; the lowest is a guard, so an overflow faults.
constexpr size_t kStackBytes = size_t(256) << 10;

// Race checking (-DHONE_EMULATOR_CHECK=RACES, docs/cuda.md): the kernels are
// compiled with ThreadSanitizer, this file is not. Each thread of a block is a
// fiber of ThreadSanitizer's own, and switching between them orders nothing:
// what one thread writes and another reads or writes is a race unless a barrier
// that orders memory on a GPU lies between them. The barriers below say so to
// ThreadSanitizer (publish what this thread did, observe what the others did);
// shuffles and the warp matrix API's calls do not (CUDA promises them no
// memory ordering). The host thread that runs a block publishes what it wrote
// before the block starts and observes what the block's threads wrote after it
// ends; a launch's blocks run on two host threads (SecondHostThread, below),
// so that races between blocks are seen too.
thread_local bool t_second_host_thread = false;  // on SecondHostThread's
#if HONE_EMULATOR_CHECK_RACES
constexpr bool kCheckRaces = true;
// Named by the thread's index in its block (threadIdx linearized), which reports show.
void* new_race_fiber(int thread) {
  void* fiber = __tsan_create_fiber(0);
  const char* block = t_second_host_thread ? " of a block on the second host thread" : "";
  __tsan_set_fiber_name(fiber, ("thread " + std::to_string(thread) + block).c_str());
  return fiber;
}
void drop_race_fiber(void* fiber) { __tsan_destroy_fiber(fiber); }
void* current_race_fiber() { return __tsan_get_current_fiber(); }
void enter_race_fiber(void* fiber) { __tsan_switch_to_fiber(fiber, __tsan_switch_to_fiber_no_sync); }
void publish(void* sync) { __tsan_release(sync); }
void observe(void* sync) { __tsan_acquire(sync); }
#else
constexpr bool kCheckRaces = false;
void* new_race_fiber(int) { return nullptr; }
void drop_race_fiber(void*) {}
void* current_race_fiber() { return nullptr; }
void enter_race_fiber(void*) {}
void publish(void*) {}
void observe(void*) {}
#endif

// Switching threads: saves the callee-saved registers and the floating-point
// control words on the current stack, stores the stack pointer in *from, and
// resumes the thread whose stack pointer is `to`. (glibc's swapcontext also
// saves the signal mask, a system call per switch: most of a test's time.)
extern "C" void hone_emulator_switch(void** from, void* to);
asm(R"(
  .text
  .p2align 4
  .type hone_emulator_switch, @function
hone_emulator_switch:
  pushq %rbp
  pushq %rbx
  pushq %r12
  pushq %r13
  pushq %r14
  pushq %r15
  subq $8, %rsp
  stmxcsr (%rsp)
  fnstcw 4(%rsp)
  movq %rsp, (%rdi)
  movq %rsi, %rsp
  ldmxcsr (%rsp)
  fldcw 4(%rsp)
  addq $8, %rsp
  popq %r15
  popq %r14
  popq %r13
  popq %r12
  popq %rbx
  popq %rbp
  ret
  .size hone_emulator_switch, .-hone_emulator_switch
)");

struct Fiber {
  void* sp = nullptr;     // where it was switched out
  void* stack = nullptr;  // mapped once, reused by every launch
  void* race_fiber = nullptr;
  uint3 index{};
  int warp = 0, lane = 0;
  bool done = false;
};

struct Warp {
  int lanes = 0;  // threads in it (the block's last warp may have fewer than 32)
  int live = 0;   // of them, not yet returned
  int arrived = 0;
  uint64_t generation = 0;
  char ordered[2];  // the race check's sync objects of __syncwarp, by generation (only their addresses count)
  uint64_t slots[kWarpSize] = {};
  float tiles[2][16 * 16];  // the warp matrix API's operands
};

// The block that runs now on this thread, and where its fibers switch to.
struct Block {
  std::vector<Fiber> fibers;
  std::vector<Warp> warps;
  std::vector<unsigned char> shared;  // dynamic shared memory
  int live = 0, arrived = 0;
  uint64_t generation = 0;
  int any_accumulated = 0, any = 0;  // __syncthreads_or's predicate: gathering, and the last result
  uint64_t progress = 0;             // barriers passed and threads returned: a round without any is a deadlock
  std::string fault;                 // set by a thread the emulator stopped
  Fiber* running = nullptr;
  const std::function<void()>* thread = nullptr;
  void* scheduler = nullptr;  // the host thread's stack pointer while a fiber runs
  void* scheduler_race_fiber = nullptr;
  char ordered[2];         // the race check's sync objects of __syncthreads, by generation
  char started, finished;  // and of the host thread's writes before the block, the block's after
};

thread_local Block t_block;

Fiber& running() { return *t_block.running; }

// Back to the host thread, which runs no instrumented code until it switches
// to the next thread: ThreadSanitizer's fiber stays the yielding thread's.
void yield() { hone_emulator_switch(&running().sp, t_block.scheduler); }

// Stops the running thread for good; the launch then fails with `message`.
[[noreturn]] void stop(const std::string& message) {
  t_block.fault = message;
  running().done = true;
  yield();
  __builtin_unreachable();
}

// Lets the threads waiting at the block's barrier (or the warp's) go on.
void release(Block& b) {
  b.arrived = 0;
  b.any = b.any_accumulated;
  b.any_accumulated = 0;
  ++b.generation;
  ++b.progress;
}

void release(Warp& w) {
  w.arrived = 0;
  ++w.generation;
  ++t_block.progress;
}

void fiber_main() {
  observe(&t_block.started);
  (*t_block.thread)();
  Fiber& f = running();
  f.done = true;
  Warp& w = t_block.warps[size_t(f.warp)];
  --w.live;
  --t_block.live;
  ++t_block.progress;
  // Barriers count the threads that have not returned (as a GPU's __syncthreads
  // does): those that wait for the others may now be complete.
  if (w.arrived > 0 && w.arrived == w.live) release(w);
  if (t_block.arrived > 0 && t_block.arrived == t_block.live) release(t_block);
  yield();
}

void* map_stack() {
  void* stack = mmap(nullptr, kStackBytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  HONE_CHECK(stack != MAP_FAILED, "CUDA emulator: cannot map a thread stack of {} bytes", kStackBytes);
  HONE_CHECK(mprotect(stack, size_t(getpagesize()), PROT_NONE) == 0, "CUDA emulator: cannot protect a stack guard");
  return stack;
}

// A new thread's stack, made to look like a switched-out thread's whose switch
// returns into fiber_main: its return address, then the six saved registers
// (zero) and the host thread's floating-point control words.
void start_at_fiber_main(Fiber& f) {
  auto* top = reinterpret_cast<uint64_t*>(static_cast<char*>(f.stack) + kStackBytes);  // 16-byte aligned
  uint64_t* sp = top - 9;
  uint32_t control[2];
  asm volatile("stmxcsr %0\n\tfnstcw %1" : "=m"(control[0]), "=m"(control[1]));
  std::memcpy(sp, control, sizeof control);
  for (int r = 1; r <= 6; ++r) sp[r] = 0;
  sp[7] = reinterpret_cast<uint64_t>(&fiber_main);  // entered with rsp ≡ 8 (mod 16), as after a call
  sp[8] = 0;                                        // fiber_main never returns
  f.sp = sp;
}

std::string where(const uint3& block) {
  return "block (" + std::to_string(block.x) + ", " + std::to_string(block.y) + ", " + std::to_string(block.z) + ")";
}

// Once the block is over (a launch is over before the host goes on), the host
// thread observes what its threads wrote: published from each thread's race
// check fiber by the host thread, as a thread the emulator stopped never runs
// again. Nothing orders one thread of the block before another.
void gather(Block& b, int threads) {
  for (int t = 0; t < threads; ++t) {
    enter_race_fiber(b.fibers[size_t(t)].race_fiber);
    publish(&b.finished);
  }
  enter_race_fiber(b.scheduler_race_fiber);
  observe(&b.finished);
}

// A block the emulator stopped leaves threads in the middle of their code:
// their race-check fibers are replaced, as their call stacks will not unwind.
void abandon(Block& b, int threads) {
  gather(b, threads);
  for (size_t t = 0; t < b.fibers.size(); ++t) {
    if (b.fibers[t].race_fiber == nullptr) continue;
    drop_race_fiber(b.fibers[t].race_fiber);
    b.fibers[t].race_fiber = new_race_fiber(int(t));
  }
}

// Runs the block blockIdx of the current launch to its end.
void run_block(const std::function<void()>& thread, int threads) {
  Block& b = t_block;
  b.thread = &thread;
  b.live = threads;
  b.arrived = 0;
  b.any_accumulated = b.any = 0;
  b.fault.clear();
  const int warps = (threads + kWarpSize - 1) / kWarpSize;
  b.warps.assign(size_t(warps), Warp{});
  for (int w = 0; w < warps; ++w) {
    b.warps[size_t(w)].lanes = b.warps[size_t(w)].live = std::min(kWarpSize, threads - w * kWarpSize);
  }
  while (b.fibers.size() < size_t(threads)) {
    Fiber& f = b.fibers.emplace_back();
    f.stack = map_stack();
    f.race_fiber = new_race_fiber(int(b.fibers.size()) - 1);
  }
  b.scheduler_race_fiber = current_race_fiber();
  publish(&b.started);
  for (int t = 0; t < threads; ++t) {
    Fiber& f = b.fibers[size_t(t)];
    const unsigned linear = unsigned(t);
    f.index = {linear % blockDim.x, linear / blockDim.x % blockDim.y, linear / (blockDim.x * blockDim.y)};
    f.warp = t / kWarpSize;
    f.lane = t % kWarpSize;
    f.done = false;
    start_at_fiber_main(f);
  }
  for (int remaining = threads; remaining > 0;) {
    const uint64_t progress = b.progress;
    remaining = 0;
    for (int t = 0; t < threads; ++t) {
      Fiber& f = b.fibers[size_t(t)];
      if (f.done) continue;
      b.running = &f;
      threadIdx = f.index;
      enter_race_fiber(f.race_fiber);
      hone_emulator_switch(&b.scheduler, f.sp);
      if (!b.fault.empty()) {
        abandon(b, threads);
        fail("CUDA emulator: {}, thread {}: {}", where(blockIdx), t, b.fault);
      }
      remaining += f.done ? 0 : 1;
    }
    if (remaining > 0 && b.progress == progress) {
      abandon(b, threads);
      int at_warp = 0;
      for (const Warp& w : b.warps) at_warp += w.arrived;
      fail("CUDA emulator: {} deadlocks: of its {} threads still running, {} wait at __syncthreads and {} at a warp "
           "barrier (__syncwarp or a shuffle), each for threads that wait elsewhere",
           where(blockIdx), remaining, b.arrived, at_warp);
    }
  }
  gather(b, threads);
}

bool fits_limits(const Launch& l) {
  const uint64_t threads = uint64_t(l.block.x) * l.block.y * l.block.z;
  return threads >= 1 && threads <= kMaxThreads && l.block.x <= 1024 && l.block.y <= 1024 && l.block.z <= 64 &&
         l.grid.x >= 1 && l.grid.y >= 1 && l.grid.z >= 1 && l.grid.x <= 0x7fffffffu && l.grid.y <= 65535 &&
         l.grid.z <= 65535 && l.shared_bytes <= size_t(kMaxSharedMemoryPerBlock);
}

thread_local cudaError_t t_last_error = cudaSuccess;

cudaError_t failed(cudaError_t error) {
  t_last_error = error;
  return error;
}

// Which of the race check's two host threads runs block (x, y, z) at a
// kernel's n-th launch (from 0). At even n the second runs the blocks whose
// coordinates' sum is odd, so neighbours along any axis (and any two blocks
// whose sums differ by an odd number) are on different host threads. At odd n
// it runs a pseudo-random half, from a hash of the coordinates and n, so any
// two blocks are with probability 1/2 at each such launch: diagonal
// neighbours, whose sums are equal, and blocks an even distance apart too.
bool on_second_host_thread(unsigned x, unsigned y, unsigned z, uint64_t launch) {
  if (launch % 2 == 0) return (x + y + z) % 2 == 1;
  auto mix = [](uint64_t h) {  // SplitMix64's finalizer
    h = (h ^ (h >> 30)) * 0xbf58476d1ce4e5b9u;
    h = (h ^ (h >> 27)) * 0x94d049bb133111ebu;
    return h ^ (h >> 31);
  };
  return mix(x + mix(y + mix(z + mix(launch)))) >> 63;
}

// Which of a launch's blocks a host thread runs: all, or the race check's
// first or second host thread's (on_second_host_thread).
enum class Blocks { all, first_host_thread, second_host_thread };

// Runs the launch's `blocks` on the calling thread, one after the other;
// `launch_number` is the kernel's count of launches before this one.
void run_blocks(const Launch& launch, const std::function<void()>& thread, Blocks blocks, uint64_t launch_number = 0) {
  gridDim = launch.grid;
  blockDim = launch.block;
  const int threads = int(launch.block.x * launch.block.y * launch.block.z);
  for (unsigned z = 0; z < launch.grid.z; ++z) {
    for (unsigned y = 0; y < launch.grid.y; ++y) {
      for (unsigned x = 0; x < launch.grid.x; ++x) {
        if (blocks != Blocks::all &&
            on_second_host_thread(x, y, z, launch_number) != (blocks == Blocks::second_host_thread)) {
          continue;
        }
        blockIdx = {x, y, z};
        t_block.shared.assign(launch.shared_bytes, 0xff);
        run_block(thread, threads);
      }
    }
  }
}

// The race check's second host thread (one for each that launches kernels):
// it runs its blocks of a launch (on_second_host_thread) while the launching
// thread runs the others, and nothing that
// ThreadSanitizer sees orders one host thread's blocks before the other's until
// the launch ends (the two meet through atomics in this file, which is not
// instrumented), so a race between them is reported. Each host thread's own
// blocks are ordered, as its __shared__ variables and fibers serve them all.
class SecondHostThread {
 public:
  SecondHostThread() : worker_([this] { work(); }) {}

  ~SecondHostThread() {
    post(kQuit);
    worker_.join();
  }

  // Runs its blocks of `launch`, the kernel's launch `number`, while the
  // calling thread runs the others; returns when both are done, rethrowing the
  // first failure.
  void run(const Launch& launch, const std::function<void()>& thread, uint64_t number) {
    launch_ = &launch;
    thread_ = &thread;
    number_ = number;
    publish(&launched_);
    post(kRun);
    std::exception_ptr fault;
    try {
      run_blocks(launch, thread, Blocks::first_host_thread, number);
    } catch (...) {
      fault = std::current_exception();
    }
    state_.wait(kRun);
    observe(&finished_);
    if (fault == nullptr) fault = worker_fault_;
    worker_fault_ = nullptr;
    if (fault != nullptr) std::rethrow_exception(fault);
  }

 private:
  static constexpr int kIdle = 0, kRun = 1, kQuit = 2;

  void post(int state) {
    state_.store(state);
    state_.notify_all();
  }

  void work() {
    t_second_host_thread = true;
    for (;;) {
      state_.wait(kIdle);
      if (state_.load() == kQuit) return;
      observe(&launched_);
      try {
        run_blocks(*launch_, *thread_, Blocks::second_host_thread, number_);
      } catch (...) {
        worker_fault_ = std::current_exception();
      }
      publish(&finished_);
      post(kIdle);
    }
  }

  std::atomic<int> state_{kIdle};
  const Launch* launch_ = nullptr;
  const std::function<void()>* thread_ = nullptr;
  uint64_t number_ = 0;
  std::exception_ptr worker_fault_;
  char launched_ = 0, finished_ = 0;  // sync objects: the launching thread's writes before, the worker's after
  std::thread worker_;                // last: started once the rest is ready
};

// What the emulator keeps of a kernel (by its kernel_address).
struct KernelRecord {
  int max_dynamic_shared = 48 * 1024;  // CUDA's, until cudaFuncSetAttribute raises it
  uint64_t launches = 0;
};

struct KernelRecords {
  std::mutex mutex;
  std::unordered_map<const void*, KernelRecord> of;
};

KernelRecords& kernel_records() {
  static KernelRecords records;
  return records;
}

// Counts a launch of `kernel`; returns its record as it was before.
KernelRecord count_launch(const void* kernel) {
  KernelRecords& records = kernel_records();
  const std::lock_guard lock(records.mutex);
  KernelRecord& record = records.of[kernel];
  const KernelRecord before = record;
  ++record.launches;
  return before;
}

// The streams (emulator.hpp, "Streams"), under one lock; the legacy default
// stream (a null cudaStream_t) is one of them.
struct Streams {
  std::mutex mutex;
  uint64_t next_id = 1;
  int created = 0;
  CUstream_st legacy{.name = "the legacy default stream"};
  std::vector<CUstream_st*> live{&legacy};

  CUstream_st& of(cudaStream_t stream) { return stream != nullptr ? *stream : legacy; }
  bool is_live(const CUstream_st* stream) const { return std::find(live.begin(), live.end(), stream) != live.end(); }
};

Streams& streams() {
  static Streams* instance = new Streams;  // never destroyed: tensors freed during exit mark their bytes
  return *instance;
}

bool overlap(const void* a, size_t a_bytes, const void* b, size_t b_bytes) {
  const auto* x = static_cast<const unsigned char*>(a);
  const auto* y = static_cast<const unsigned char*>(b);
  return a_bytes != 0 && b_bytes != 0 && x < y + b_bytes && y < x + a_bytes;
}

// A queued copy whose source changed since it could first run fails, found
// as it runs or after other work (`when`, `what` and `name` say which: kept
// apart so that no text is made unless it fails): whatever wrote there, that
// work or host code before it, did not wait for the copy, which on a GPU may
// read either value. Reported once: the copy's kept source is dropped.
void check_source(QueuedWork& work, const CUstream_st& stream, std::string_view when, std::string_view what = {},
                  std::string_view name = {}) {
  const std::vector<unsigned char>& then = work.source_at_start;
  if (then.empty()) return;
  const auto changed = std::mismatch(then.begin(), then.end(), static_cast<const unsigned char*>(work.src)).first;
  if (changed == then.end()) return;
  const ptrdiff_t byte = changed - then.begin();
  work.source_at_start.clear();
  fail("CUDA emulator: byte {} of the source of a copy of {} bytes (from {} to {}) queued on {} changed, found {}{}{}: "
       "whatever wrote it did not wait for the copy, which on a GPU may read either value (cudaStreamWaitEvent on an "
       "event recorded after the copy, or a synchronize, orders them)",
       byte, work.bytes, work.src, work.dst, stream.name, when, what, name);
}

// Every queued copy's source, after the work that `what` and `name` name.
void check_queued_sources(Streams& all, std::string_view what, std::string_view name) {
  for (CUstream_st* stream : all.live) {
    for (QueuedWork& work : stream->queue) check_source(work, *stream, "after ", what, name);
  }
}

// Runs the oldest work queued on `stream`.
void run_oldest(Streams& all, CUstream_st& stream) {
  QueuedWork work = std::move(stream.queue.front());
  stream.queue.pop_front();
  check_source(work, stream, "as it ran");
  if (work.src == nullptr) std::memset(work.dst, work.value, work.bytes);
  else std::memcpy(work.dst, work.src, work.bytes);
  check_queued_sources(all, work.src == nullptr ? "a memset on " : "a copy on ", stream.name);
}

void run_through(Streams& all, CUstream_st& stream, uint64_t id) {
  while (!stream.queue.empty() && stream.queue.front().id <= id) run_oldest(all, stream);
}

// Queues a copy (src given) or a memset on `stream`. On a GPU it may start at
// once, as far as the work queued before it on its stream allows: unless that
// work writes the copy's source, the source is kept and must not change until
// the copy runs (check_queued_sources); unless it reads the destination, the
// destination holds 0xff bytes (NaN) until then.
void enqueue(cudaStream_t handle, void* dst, const void* src, size_t bytes, int value) {
  if (bytes == 0) return;
  Streams& all = streams();
  const std::lock_guard lock(all.mutex);
  CUstream_st& stream = all.of(handle);
  QueuedWork work{.id = all.next_id++, .dst = dst, .src = src, .bytes = bytes, .value = value};
  const bool in_place = src != nullptr && overlap(src, bytes, dst, bytes);  // undefined for a copy; kept as it is
  const std::deque<QueuedWork>& before = stream.queue;
  const bool source_pending = src != nullptr && std::any_of(before.begin(), before.end(), [&](const auto& w) {
                                return overlap(w.dst, w.bytes, src, bytes);
                              });
  const bool destination_read = std::any_of(before.begin(), before.end(), [&](const auto& w) {
    return w.src != nullptr && overlap(w.src, w.bytes, dst, bytes);
  });
  if (src != nullptr && !source_pending && !in_place) {
    const auto* first = static_cast<const unsigned char*>(src);
    work.source_at_start.assign(first, first + bytes);
  }
  stream.last = work.id;
  stream.queue.push_back(std::move(work));
  if (!destination_read && !in_place) {
    std::memset(dst, 0xff, bytes);
    check_queued_sources(all, src == nullptr ? "a memset queued on " : "a copy queued on ", stream.name);
  }
}

void run_all_queued() {
  Streams& all = streams();
  const std::lock_guard lock(all.mutex);
  for (CUstream_st* stream : all.live) run_through(all, *stream, UINT64_MAX);
}

// The copies and memsets queued on `stream` (null: the legacy default stream) run now.
void run_queued(cudaStream_t stream) {
  Streams& all = streams();
  const std::lock_guard lock(all.mutex);
  run_through(all, all.of(stream), UINT64_MAX);
}

}  // namespace

void in_place_of_stream(cudaStream_t stream, std::string_view what, std::string_view name,
                        const std::function<void()>& work) {
  run_queued(stream);
  work();
  Streams& all = streams();
  const std::lock_guard lock(all.mutex);
  check_queued_sources(all, what, name);
}

int max_dynamic_shared(const void* kernel) {
  KernelRecords& records = kernel_records();
  const std::lock_guard lock(records.mutex);
  const auto record = records.of.find(kernel);
  return record == records.of.end() ? KernelRecord{}.max_dynamic_shared : record->second.max_dynamic_shared;
}

void set_max_dynamic_shared(const void* kernel, int bytes) {
  KernelRecords& records = kernel_records();
  const std::lock_guard lock(records.mutex);
  records.of[kernel].max_dynamic_shared = bytes;
}

namespace {

void run_launch(const Launch& launch, const std::function<void()>& thread) {
  if (!fits_limits(launch)) {
    failed(cudaErrorInvalidConfiguration);
    return;
  }
  const KernelRecord kernel = count_launch(launch.kernel);
  if (launch.shared_bytes > size_t(kernel.max_dynamic_shared)) {
    failed(cudaErrorInvalidValue);  // what a GPU answers: within the device's limit, past the kernel's
    return;
  }
  if (!kCheckRaces || uint64_t(launch.grid.x) * launch.grid.y * launch.grid.z == 1) {
    run_blocks(launch, thread, Blocks::all);
    return;
  }
  thread_local SecondHostThread second;  // made (its host thread started) at the first such launch
  second.run(launch, thread, kernel.launches);
}

}  // namespace

void run(const Launch& launch, const std::function<void()>& thread) {
  in_place_of_stream(launch.stream, "kernel ", launch.name, [&] { run_launch(launch, thread); });
}

int lane() { return running().lane; }

namespace {

// Waits at a barrier of `group` (the block or a warp). With `orders_memory`,
// each thread sees after it what every other did before it: the sync object is
// one of two by generation, so a thread already at the next barrier cannot
// publish to one that a slower thread has yet to observe.
template <typename Group>
void wait_at_barrier(Group& group, bool orders_memory) {
  const uint64_t generation = group.generation;
  void* ordered = &group.ordered[generation % 2];
  if (orders_memory) publish(ordered);
  if (++group.arrived == group.live) release(group);
  else while (group.generation == generation) yield();
  if (orders_memory) observe(ordered);
}

Warp& running_warp() { return t_block.warps[size_t(running().warp)]; }

}  // namespace

int block_barrier(int predicate) {
  t_block.any_accumulated |= predicate != 0;
  wait_at_barrier(t_block, true);
  return t_block.any;
}

void warp_barrier() { wait_at_barrier(running_warp(), true); }

void warp_converge() { wait_at_barrier(running_warp(), false); }

uint64_t warp_exchange(uint64_t value, int source) {
  const Fiber& f = running();
  Warp& w = t_block.warps[size_t(f.warp)];
  if (w.live != w.lanes) {
    stop("a shuffle in warp " + std::to_string(f.warp) + ", of whose " + std::to_string(w.lanes) + " lanes " +
         std::to_string(w.lanes - w.live) + " have returned (undefined on a GPU)");
  }
  if (source < 0 || source >= w.lanes) {
    stop("a shuffle reads lane " + std::to_string(source) + " of warp " + std::to_string(f.warp) + ", which has " +
         std::to_string(w.lanes) + " lanes");
  }
  w.slots[f.lane] = value;
  warp_converge();
  const uint64_t result = w.slots[source];
  warp_converge();  // before any lane writes its next value
  return result;
}

void* dynamic_shared_memory() { return t_block.shared.data(); }

#if HONE_EMULATOR_CHECK_MEMORY
// Unpoisoning never takes bytes back from AddressSanitizer's shadow (it only
// widens a partly addressable 8-byte granule), so marking a tensor owned
// leaves an overlapping one that an arena reused the bytes for owned as well.
void mark_owned(void* bytes, size_t count) { __asan_unpoison_memory_region(bytes, count); }

// The queued work that touches the bytes runs first (on a GPU it runs before
// the memory's next owner uses it): the work would otherwise run into poison.
void mark_unowned(void* bytes, size_t count) {
  Streams& all = streams();
  {
    const std::lock_guard lock(all.mutex);
    for (CUstream_st* stream : all.live) {
      const auto last = std::find_if(stream->queue.rbegin(), stream->queue.rend(), [&](const QueuedWork& work) {
        return overlap(work.dst, work.bytes, bytes, count) || (work.src && overlap(work.src, work.bytes, bytes, count));
      });
      if (last != stream->queue.rend()) run_through(all, *stream, last->id);
    }
  }
  __asan_poison_memory_region(bytes, count);
}
#else
void mark_owned(void*, size_t) {}
void mark_unowned(void*, size_t) {}
#endif

void check_aligned(const void* address, size_t bytes) {
  if (reinterpret_cast<uintptr_t>(address) % bytes == 0) return;
  stop("a " + std::to_string(bytes) + "-byte access at an address that is not " + std::to_string(bytes) +
       "-byte aligned (a GPU stops the kernel: misaligned address)");
}

void warp_tile_product(const float* a, const float* b, float* d) {
  Warp& w = running_warp();
  for (int i = 0; i < nvcuda::wmma::detail::kLaneElements; ++i) {
    const int at = nvcuda::wmma::detail::row_of(i) * 16 + nvcuda::wmma::detail::col_of(i);
    w.tiles[0][at] = a[i];
    w.tiles[1][at] = b[i];
  }
  warp_converge();
  for (int i = 0; i < nvcuda::wmma::detail::kLaneElements; ++i) {
    const int r = nvcuda::wmma::detail::row_of(i), c = nvcuda::wmma::detail::col_of(i);
    for (int k = 0; k < 16; ++k) d[i] += w.tiles[0][r * 16 + k] * w.tiles[1][k * 16 + c];
  }
  warp_converge();  // before the tiles are written again
}

}  // namespace hone::kernels::cuda::emulator

namespace emulator = hone::kernels::cuda::emulator;

const char* cudaGetErrorName(cudaError_t error) {
  switch (error) {
    case cudaSuccess: return "cudaSuccess";
    case cudaErrorInvalidValue: return "cudaErrorInvalidValue";
    case cudaErrorMemoryAllocation: return "cudaErrorMemoryAllocation";
    case cudaErrorInvalidConfiguration: return "cudaErrorInvalidConfiguration";
    case cudaErrorInvalidDevice: return "cudaErrorInvalidDevice";
    case cudaErrorInvalidResourceHandle: return "cudaErrorInvalidResourceHandle";
    case cudaErrorNotReady: return "cudaErrorNotReady";
  }
  return "cudaErrorUnknown";
}

const char* cudaGetErrorString(cudaError_t error) {
  switch (error) {
    case cudaSuccess: return "no error";
    case cudaErrorInvalidValue: return "invalid argument";
    case cudaErrorMemoryAllocation: return "out of memory";
    case cudaErrorInvalidConfiguration: return "invalid configuration argument";
    case cudaErrorInvalidDevice: return "invalid device ordinal";
    case cudaErrorInvalidResourceHandle: return "invalid resource handle";
    case cudaErrorNotReady: return "device not ready";
  }
  return "unknown error";
}

cudaError_t cudaGetLastError() {
  const cudaError_t error = emulator::t_last_error;
  emulator::t_last_error = cudaSuccess;
  return error;
}

cudaError_t cudaGetDeviceCount(int* count) {
  *count = 1;
  return cudaSuccess;
}

cudaError_t cudaSetDevice(int device) { return device == 0 ? cudaSuccess : emulator::failed(cudaErrorInvalidDevice); }

// The device described is an H100's: compute capability 9.0, 227 KiB of shared
// memory per block, so that every kernel path a Hopper GPU takes runs here.
cudaError_t cudaDeviceGetAttribute(int* value, cudaDeviceAttr attribute, int device) {
  if (device != 0) return emulator::failed(cudaErrorInvalidDevice);
  switch (attribute) {
    case cudaDevAttrComputeCapabilityMajor: *value = 9; return cudaSuccess;
    case cudaDevAttrComputeCapabilityMinor: *value = 0; return cudaSuccess;
    case cudaDevAttrMaxSharedMemoryPerBlockOptin: *value = emulator::kMaxSharedMemoryPerBlock; return cudaSuccess;
  }
  return emulator::failed(cudaErrorInvalidValue);
}

cudaError_t cudaMalloc(void** ptr, size_t bytes) {
  constexpr size_t kAlignment = 256;  // cudaMalloc's
  *ptr = std::aligned_alloc(kAlignment, (bytes + kAlignment - 1) / kAlignment * kAlignment);
  return *ptr != nullptr ? cudaSuccess : emulator::failed(cudaErrorMemoryAllocation);
}

// As on a GPU, it waits for all queued work first.
cudaError_t cudaFree(void* ptr) {
  emulator::run_all_queued();
  std::free(ptr);
  return cudaSuccess;
}

cudaError_t cudaMemGetInfo(size_t* free, size_t* total) {
  const size_t page = size_t(sysconf(_SC_PAGESIZE));
  *free = size_t(sysconf(_SC_AVPHYS_PAGES)) * page;
  *total = size_t(sysconf(_SC_PHYS_PAGES)) * page;
  return cudaSuccess;
}

cudaError_t cudaHostRegister(void*, size_t, unsigned) { return cudaSuccess; }
cudaError_t cudaHostUnregister(void*) { return cudaSuccess; }

// A blocking copy: queued on the legacy default stream and run at once.
cudaError_t cudaMemcpy(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind) {
  cudaMemcpyAsync(dst, src, bytes, kind);
  emulator::run_queued(nullptr);
  return cudaSuccess;
}

// Copies from and to pageable host memory are queued too (a GPU does those in
// the call, mostly): hone synchronizes after them anyway.
cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t bytes, cudaMemcpyKind, cudaStream_t stream) {
  emulator::enqueue(stream, dst, src, bytes, 0);
  return cudaSuccess;
}

cudaError_t cudaMemsetAsync(void* dst, int value, size_t bytes, cudaStream_t stream) {
  emulator::enqueue(stream, dst, nullptr, bytes, value);
  return cudaSuccess;
}

cudaError_t cudaStreamCreateWithFlags(cudaStream_t* stream, unsigned) {
  emulator::Streams& all = emulator::streams();
  const std::lock_guard lock(all.mutex);
  *stream = new CUstream_st{.name = "stream " + std::to_string(++all.created)};
  all.live.push_back(*stream);
  return cudaSuccess;
}

// Its queued work runs first; events recorded on it stay complete.
cudaError_t cudaStreamDestroy(cudaStream_t stream) {
  emulator::run_queued(stream);
  emulator::Streams& all = emulator::streams();
  const std::lock_guard lock(all.mutex);
  std::erase(all.live, stream);
  delete stream;
  return cudaSuccess;
}

cudaError_t cudaStreamSynchronize(cudaStream_t stream) {
  emulator::run_queued(stream);
  return cudaSuccess;
}

namespace {

// The recorded stream's work up to the event runs now, if the stream still exists.
void complete(cudaEvent_t event) {
  emulator::Streams& all = emulator::streams();
  const std::lock_guard lock(all.mutex);
  if (event->stream != nullptr && all.is_live(event->stream)) {
    emulator::run_through(all, *event->stream, event->through);
  }
}

}  // namespace

// The event's work runs now (on a GPU it may have ended this early), so all
// that the waiting stream runs later comes after it.
cudaError_t cudaStreamWaitEvent(cudaStream_t, cudaEvent_t event, unsigned) {
  complete(event);
  return cudaSuccess;
}

cudaError_t cudaEventCreateWithFlags(cudaEvent_t* event, unsigned flags) {
  *event = new CUevent_st{.timing = (flags & cudaEventDisableTiming) == 0};
  return cudaSuccess;
}

cudaError_t cudaEventCreate(cudaEvent_t* event) { return cudaEventCreateWithFlags(event, 0); }

cudaError_t cudaEventDestroy(cudaEvent_t event) {
  delete event;
  return cudaSuccess;
}

cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream) {
  emulator::Streams& all = emulator::streams();
  const std::lock_guard lock(all.mutex);
  event->stream = &all.of(stream);
  event->through = event->stream->last;
  event->recorded = std::chrono::steady_clock::now();
  return cudaSuccess;
}

// Complete: its work runs now.
cudaError_t cudaEventQuery(cudaEvent_t event) {
  complete(event);
  return cudaSuccess;
}

cudaError_t cudaEventSynchronize(cudaEvent_t event) {
  complete(event);
  return cudaSuccess;
}

cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t end) {
  if (!start->timing || !end->timing || start->stream == nullptr || end->stream == nullptr) {
    return emulator::failed(cudaErrorInvalidResourceHandle);
  }
  *ms = std::chrono::duration<float, std::milli>(end->recorded - start->recorded).count();
  return cudaSuccess;
}
