// Runs a grid the way CUDA defines it: every block, every thread of a block a fiber with its own
// stack, so that __syncthreads() and the warp-synchronous intrinsics suspend the caller until the
// threads they wait for arrive. Kernels without barriers cost one fiber switch per thread.
//
// Note [thread order]: threads start in an order drawn afresh for every block, and the threads a
// meeting point releases (a warp's lanes after a shuffle, the whole block after a barrier) go on
// in a fresh random order too (seeded by the launch and block, so a run is repeatable). Whether
// released threads run before the threads not started yet is also drawn per block. Shared arrays
// start each block filled with 0xff bytes. A thread that reads what another wrote without a
// barrier between them therefore reads poison or a stale value in most runs: a missing barrier
// fails a test instead of passing because the host happened to run the writer first.
//
// Meeting points are settled as threads arrive, in O(1) per thread: a warp intrinsic completes
// when the last lane its mask names arrives, a barrier when nothing else can run. A warp's lanes
// thus tend to run together between shuffles, which keeps switches cheap.
//
// Checked at every meeting point (a violation aborts the grid and fails the next synchronising call):
// - __syncthreads() must be reached by every thread of the block (which call is not checked: the
//   compiler may duplicate one barrier into several call sites);
// - a warp intrinsic's mask must name the calling lane and only lanes that exist and take part in
//   the same intrinsic; a shuffle must read a lane inside the mask;
// - static shared memory stays within sm_90's 48 KiB, static and dynamic together within 227 KiB.
//
// Note [cooperative grids]: a grid launched cooperatively (TG_LAUNCH_COOPERATIVE_KERNEL) has every
// block alive at once, each with its own threads, fibers and shared memory. Blocks take turns in
// a fresh random order each round; a block runs until every thread it has left waits at the grid
// barrier (cooperative_groups' grid.sync()), and when every block is parked there the barrier
// releases them all. A block that reads what another block wrote without the grid barrier between
// them therefore reads poison in some block (the blocks of a cycle cannot all run after the block
// they read). Checked: grid.sync() reached by every thread of every block, and only in a
// cooperative launch.
#include <sys/mman.h>
#include <unistd.h>

#include <boost/context/detail/fcontext.hpp>
#include <cstdio>
#include <cstring>
#include <exception>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "emulator.h"

#if defined(TG_EMU_ASAN)  // emulator.h
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>
#endif

namespace ctx = boost::context::detail;

namespace tapegrad_emu {

thread_local const ThreadIndex* tls_thread __attribute__((tls_model("initial-exec"))) = nullptr;

namespace {

// Fiber stacks: kernels are shallow, but sanitizers grow frames. A guard page below each stack
// turns an overflow into a fault instead of silent corruption.
constexpr size_t kStackBytes = 256 * 1024;

struct Stack {
  unsigned char* bottom = nullptr;  // lowest usable address
  size_t size = 0;
};

// Per OS thread; stacks are reused by later threads, blocks and grids, never unmapped.
class StackPool {
 public:
  Stack take() {
    if (!free_.empty()) {
      Stack s = free_.back();
      free_.pop_back();
      return s;
    }
    const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
    void* base =
        mmap(nullptr, kStackBytes + page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (base == MAP_FAILED) {
      std::fprintf(stderr, "[cuda emulator] cannot map a fiber stack\n");
      std::terminate();
    }
    mprotect(base, page, PROT_NONE);
    return Stack{static_cast<unsigned char*>(base) + page, kStackBytes};
  }
  void give(Stack s) { free_.push_back(s); }

 private:
  std::vector<Stack> free_;
};

thread_local StackPool tls_stacks;

enum class State { Ready, Running, AtBarrier, AtWarp, AtGrid, Done };

// A fiber runs threads of the block one after another until one of them suspends at a meeting
// point; that thread then owns the fiber, and a fresh fiber goes on with the threads not started
// yet. A kernel without meeting points thus runs a whole block on one fiber.
struct Fiber {
  Stack stack;
  ctx::fcontext_t context = nullptr;
};

struct Thread {
  ThreadIndex index{};
  unsigned lane = 0, warp = 0;
  State state = State::Ready;
  Fiber* fiber = nullptr;  // while suspended
  // The pending warp intrinsic.
  WarpOp op = WarpOp::SyncWarp;
  unsigned mask = 0;
  uint64_t value = 0, result = 0;
  int arg = 0, width = 32;
};

struct SharedSite {
  const void* key;
  size_t offset;
};

// What a fiber says when it hands control back to the scheduler.
enum class Handback : uintptr_t { Suspended = 1, Finished = 2 };

struct BlockRun {
  const LaunchConfig* config = nullptr;
  KernelTask* task = nullptr;
  int device = 0;
  std::vector<Thread> threads;
  std::vector<unsigned> start_order;  // threads in the order fibers start them
  size_t next_to_start = 0;
  std::vector<unsigned> ready;  // released by a meeting point, not resumed yet (taken from the back)
  // Per warp, bit = lane: lanes waiting in a warp intrinsic, lanes that exited, lanes that exist.
  std::vector<uint32_t> arrived, exited, exists;
  unsigned done = 0, at_barrier = 0, at_warp = 0, at_grid = 0;
  uint64_t rng = 0;
  bool released_first = false;  // whether released threads run before threads not started yet
  Thread* current = nullptr;
  ctx::fcontext_t scheduler = nullptr;
  const void* scheduler_bottom = nullptr;
  size_t scheduler_size = 0;
  // Static arrays from offset 0 (at most 48 KiB), then the launch's dynamic shared memory.
  std::unique_ptr<unsigned char[]> shared{new unsigned char[kStaticSharedLimit + kSharedOptinLimit + 64]};
  std::vector<SharedSite> sites;
  size_t shared_used = 0, shared_poisoned = 0;
  bool failed = false;
  std::string violation;
};

thread_local BlockRun* tls_block = nullptr;

const char* op_name(WarpOp op) {
  switch (op) {
    case WarpOp::Shfl:
      return "__shfl_sync";
    case WarpOp::ShflUp:
      return "__shfl_up_sync";
    case WarpOp::ShflDown:
      return "__shfl_down_sync";
    case WarpOp::ShflXor:
      return "__shfl_xor_sync";
    case WarpOp::Ballot:
      return "__ballot_sync";
    case WarpOp::Any:
      return "__any_sync";
    case WarpOp::All:
      return "__all_sync";
    case WarpOp::SyncWarp:
      return "__syncwarp";
  }
  return "?";
}

std::string hex(unsigned v) {
  char text[16];
  std::snprintf(text, sizeof text, "0x%08x", v);
  return text;
}

std::string where(const BlockRun& run, const Thread& t) {
  const uint3 b = t.index.block_idx, th = t.index.thread_idx;
  return "kernel " + std::string(run.config->kernel) + ", block (" + std::to_string(b.x) + "," + std::to_string(b.y) +
         "," + std::to_string(b.z) + "), thread (" + std::to_string(th.x) + "," + std::to_string(th.y) + "," +
         std::to_string(th.z) + ")";
}

void asan_start(void** fake_stack, const void* bottom, size_t size) {
#if defined(TG_EMU_ASAN)
  __sanitizer_start_switch_fiber(fake_stack, bottom, size);
#else
  (void)fake_stack, (void)bottom, (void)size;
#endif
}

void asan_finish(void* fake_stack, const void** bottom_old, size_t* size_old) {
#if defined(TG_EMU_ASAN)
  __sanitizer_finish_switch_fiber(fake_stack, bottom_old, size_old);
#else
  (void)fake_stack, (void)bottom_old, (void)size_old;
#endif
}

// In a fiber: back to the scheduler until resumed.
void suspend(BlockRun& run) {
  void* fake = nullptr;
  asan_start(&fake, run.scheduler_bottom, run.scheduler_size);
  ctx::transfer_t back =
      ctx::jump_fcontext(run.scheduler, reinterpret_cast<void*>(static_cast<uintptr_t>(Handback::Suspended)));
  asan_finish(fake, &run.scheduler_bottom, &run.scheduler_size);
  run.scheduler = back.fctx;
}

// In a fiber: the block cannot go on; run.violation says why. The scheduler never resumes it, so
// callers set the message in a statement of its own first: the temporaries of an unfinished full
// expression would never be destroyed (a leak LeakSanitizer reports).
[[noreturn]] void fail_in_fiber(BlockRun& run) {
  run.failed = true;
  for (;;) suspend(run);
}

void fiber_main(ctx::transfer_t from) {
  auto* run = static_cast<BlockRun*>(from.data);
  run->scheduler = from.fctx;
  asan_finish(nullptr, &run->scheduler_bottom, &run->scheduler_size);
  while (run->next_to_start < run->start_order.size() && !run->failed) {
    Thread& self = run->threads[run->start_order[run->next_to_start++]];
    run->current = &self;
    tls_thread = &self.index;
    self.state = State::Running;
    try {
      run->task->run_thread();
    } catch (const std::exception& e) {
      run->failed = true;
      run->violation = where(*run, self) + " threw: " + e.what();
    } catch (...) {
      run->failed = true;
      run->violation = where(*run, self) + " threw";
    }
    self.state = State::Done;
    ++run->done;
    run->exited[self.warp] |= 1u << self.lane;
  }
  asan_start(nullptr, run->scheduler_bottom, run->scheduler_size);  // this fiber's fake stack goes
  ctx::jump_fcontext(run->scheduler, reinterpret_cast<void*>(static_cast<uintptr_t>(Handback::Finished)));
  __builtin_unreachable();
}

thread_local std::vector<Fiber*> tls_idle_fibers;

// Every fiber ever made, reachable from a global for good: a thread that ran kernels may end
// with fibers in its idle list, and they are small enough to keep (no leak to report).
void remember(Fiber* fiber) {
  static auto* mutex = new std::mutex();
  static auto* all = new std::vector<Fiber*>();
  std::lock_guard<std::mutex> lock(*mutex);
  all->push_back(fiber);
}

// Runs `fiber` until it hands back; a suspended thread keeps it, a finished one frees it.
void switch_to(BlockRun& run, Fiber* fiber) {
  void* fake = nullptr;
  asan_start(&fake, fiber->stack.bottom, fiber->stack.size);
  ctx::transfer_t back = ctx::jump_fcontext(fiber->context, &run);
  asan_finish(fake, nullptr, nullptr);
  tls_thread = nullptr;
  if (static_cast<Handback>(reinterpret_cast<uintptr_t>(back.data)) == Handback::Finished) {
    fiber->context = nullptr;
    tls_idle_fibers.push_back(fiber);
    return;
  }
  fiber->context = back.fctx;
  run.current->fiber = fiber;
}

void start_fiber(BlockRun& run) {
  Fiber* fiber;
  if (!tls_idle_fibers.empty()) {
    fiber = tls_idle_fibers.back();
    tls_idle_fibers.pop_back();
  } else {
    fiber = new Fiber{tls_stacks.take(), nullptr};
    remember(fiber);
  }
  fiber->context = ctx::make_fcontext(fiber->stack.bottom + fiber->stack.size, fiber->stack.size, fiber_main);
  switch_to(run, fiber);
}

void resume(BlockRun& run, Thread& t) {
  Fiber* fiber = t.fiber;
  t.fiber = nullptr;
  run.current = &t;
  tls_thread = &t.index;
  t.state = State::Running;
  switch_to(run, fiber);
}

// A warp intrinsic's source lane for `lane`, or -1 when the intrinsic reads none.
int source_lane(const Thread& t) {
  const int lane = static_cast<int>(t.lane), w = t.width, base = lane & ~(w - 1);
  switch (t.op) {
    case WarpOp::Shfl:
      return base + (t.arg & (w - 1));
    case WarpOp::ShflUp:
      return lane - t.arg < base ? lane : lane - t.arg;
    case WarpOp::ShflDown:
      return lane + t.arg >= base + w ? lane : lane + t.arg;
    case WarpOp::ShflXor: {
      const int src = lane ^ t.arg;
      return src >= base + w ? lane : src;
    }
    default:
      return -1;
  }
}

uint64_t next_random(uint64_t& s) {
  s ^= s >> 12;
  s ^= s << 25;
  s ^= s >> 27;
  return s * 0x2545F4914F6CDD1DULL;
}

// A draw in [0, n) (multiply-shift: no division on this hot path).
unsigned draw_below(uint64_t& s, size_t n) {
  return static_cast<unsigned>(((next_random(s) >> 32) * static_cast<uint64_t>(n)) >> 32);
}

// Queues released threads in a fresh random order.
void release(BlockRun& run, unsigned* threads, size_t count) {
  for (size_t i = count; i > 1; --i) std::swap(threads[i - 1], threads[draw_below(run.rng, i)]);
  for (size_t i = 0; i < count; ++i) {
    run.threads[threads[i]].state = State::Ready;
    run.ready.push_back(threads[i]);
  }
}

// In the fiber of `t`, which has just arrived at a warp intrinsic: checks the intrinsic and, when
// every lane it names waits in the same intrinsic with the same mask, completes it for all of them.
void arrive_at_warp_op(BlockRun& run, Thread& t) {
  const unsigned n = static_cast<unsigned>(run.threads.size()), first = t.warp * kWarpSize;
  if ((t.mask & (1u << t.lane)) == 0) {
    run.violation = where(run, t) + ": " + op_name(t.op) + " with mask " + hex(t.mask) +
                    ", which leaves out the calling lane " + std::to_string(t.lane);
    fail_in_fiber(run);
  }
  if (t.width <= 0 || t.width > 32 || (t.width & (t.width - 1)) != 0) {
    run.violation =
        where(run, t) + ": " + op_name(t.op) + " with width " + std::to_string(t.width) + " (a power of two up to 32)";
    fail_in_fiber(run);
  }
  if (const uint32_t missing = t.mask & ~run.exists[t.warp]; missing != 0) {
    run.violation = where(run, t) + ": " + op_name(t.op) + " with mask " + hex(t.mask) + " names lane " +
                    std::to_string(__builtin_ctz(missing)) + ", which does not exist (the block has " +
                    std::to_string(n) + " threads)";
    fail_in_fiber(run);
  }
  if (const uint32_t gone = t.mask & run.exited[t.warp]; gone != 0) {
    run.violation = where(run, t) + ": " + op_name(t.op) + " with mask " + hex(t.mask) + " names lane " +
                    std::to_string(__builtin_ctz(gone)) + ", which has exited and does not take part";
    fail_in_fiber(run);
  }
  t.state = State::AtWarp;
  ++run.at_warp;
  run.arrived[t.warp] |= 1u << t.lane;
  if ((run.arrived[t.warp] & t.mask) != t.mask) return;
  for (unsigned b = 0; b < kWarpSize; ++b) {
    if ((t.mask & (1u << b)) == 0) continue;
    const Thread& other = run.threads[first + b];
    if (other.mask != t.mask || other.op != t.op) return;  // in another intrinsic: not complete (yet)
  }
  unsigned votes = 0;
  for (unsigned c = 0; c < kWarpSize; ++c)
    if ((t.mask & (1u << c)) != 0 && run.threads[first + c].value != 0) votes |= 1u << c;
  unsigned lanes[kWarpSize];
  size_t count = 0;
  for (unsigned b = 0; b < kWarpSize; ++b) {
    if ((t.mask & (1u << b)) == 0) continue;
    Thread& lane = run.threads[first + b];
    switch (lane.op) {
      case WarpOp::Ballot:
        lane.result = votes;
        break;
      case WarpOp::Any:
        lane.result = votes != 0;
        break;
      case WarpOp::All:
        lane.result = votes == t.mask;
        break;
      case WarpOp::SyncWarp:
        lane.result = 0;
        break;
      default: {
        const int src = source_lane(lane);
        if (src < 0 || (t.mask & (1u << src)) == 0) {
          run.violation = where(run, lane) + ": " + op_name(lane.op) + " reads lane " + std::to_string(src) +
                          ", which is not in the mask " + hex(t.mask);
          fail_in_fiber(run);
        }
        lane.result = run.threads[first + static_cast<unsigned>(src)].value;
      }
    }
    lanes[count++] = first + b;
  }
  run.arrived[t.warp] &= ~t.mask;
  run.at_warp -= static_cast<unsigned>(count);
  release(run, lanes, count);
}

// Nobody can move: say why.
std::string describe_deadlock(BlockRun& run) {
  for (Thread& t : run.threads) {
    if (t.state != State::AtWarp) continue;
    const unsigned first = t.warp * kWarpSize;
    for (unsigned b = 0; b < kWarpSize; ++b) {
      if ((t.mask & (1u << b)) == 0) continue;
      const Thread& other = run.threads[first + b];
      if (other.state == State::Done)
        return where(run, t) + ": " + op_name(t.op) + " with mask " + hex(t.mask) + " names lane " + std::to_string(b) +
               ", which has exited and does not take part";
      if (other.state == State::AtWarp && other.mask == t.mask && other.op == t.op) continue;
      std::string what = other.state == State::AtBarrier
                             ? "waits at __syncthreads()"
                             : std::string("is in ") + op_name(other.op) + " with mask " + hex(other.mask);
      return where(run, t) + ": " + op_name(t.op) + " with mask " + hex(t.mask) + " waits for lane " +
             std::to_string(b) + ", which " + what + " and does not take part";
    }
  }
  return "kernel " + std::string(run.config->kernel) + ": the block cannot make progress";
}

// Sets up one block: its threads, their start order, fresh poison in its shared memory.
void start_block(BlockRun& run, uint3 block, uint64_t seed) {
  const dim3 bd = run.config->block, gd = run.config->grid;
  const unsigned n = static_cast<unsigned>(run.threads.size());
  run.start_order.resize(n);
  for (unsigned i = 0; i < n; ++i) {
    Thread& t = run.threads[i];
    t = Thread{};
    t.lane = i % kWarpSize;
    t.warp = i / kWarpSize;
    t.index.thread_idx = uint3{i % bd.x, (i / bd.x) % bd.y, i / (bd.x * bd.y)};
    t.index.block_idx = block;
    t.index.block_dim = bd;
    t.index.grid_dim = gd;
    run.start_order[i] = i;
  }
  run.rng = seed;
  for (size_t i = n; i > 1; --i) std::swap(run.start_order[i - 1], run.start_order[draw_below(run.rng, i)]);
  run.released_first = (next_random(run.rng) >> 63) != 0;
  run.next_to_start = 0;
  run.ready.clear();
  const unsigned warps = (n + kWarpSize - 1) / kWarpSize;
  run.arrived.assign(warps, 0);
  run.exited.assign(warps, 0);
  run.exists.assign(warps, ~0u);
  if (n % kWarpSize != 0) run.exists[warps - 1] = (1u << (n % kWarpSize)) - 1;
  run.done = run.at_barrier = run.at_warp = run.at_grid = 0;
  std::memset(run.shared.get(), 0xff, run.shared_poisoned);
  std::memset(run.shared.get() + kStaticSharedLimit, 0xff, run.config->dynamic_shared_bytes);
  run.sites.clear();
  run.shared_used = 0;
}

enum class Progress { Done, AtGrid, Failed };

// Runs a started block until it finishes, every thread it has left waits at the grid barrier, or
// a violation (run.violation says which).
Progress advance_block(BlockRun& run) {
  const unsigned n = static_cast<unsigned>(run.threads.size());
  for (;;) {
    const bool can_start = run.next_to_start < n;
    if (!run.ready.empty() && (run.released_first || !can_start)) {
      const unsigned i = run.ready.back();
      run.ready.pop_back();
      resume(run, run.threads[i]);
    } else if (can_start) {
      start_fiber(run);
    } else if (run.done == n) {
      return Progress::Done;
    } else if (run.at_warp > 0) {  // lanes wait for lanes that will never come
      run.failed = true;
      run.violation = describe_deadlock(run);
    } else if (run.at_grid > 0) {  // the rest of the grid must come before this block goes on
      const Thread* waiting = nullptr;
      for (const Thread& t : run.threads)
        if (t.state == State::AtGrid) waiting = &t;
      if (run.at_barrier == 0 && run.done == 0) return Progress::AtGrid;
      run.failed = true;
      run.violation = where(run, *waiting) + ": grid.sync() is not reached by every thread of the block (" +
                      std::to_string(run.done) + " exited, " + std::to_string(run.at_barrier) +
                      " wait at __syncthreads() instead)";
    } else if (run.done > 0) {  // only barriers are left
      const Thread* waiting = nullptr;
      for (const Thread& t : run.threads)
        if (t.state == State::AtBarrier) waiting = &t;
      run.failed = true;
      run.violation = where(run, *waiting) + ": __syncthreads() is not reached by every thread of the block (" +
                      std::to_string(run.done) + " of " + std::to_string(n) + " threads exited instead)";
    } else {  // every thread waits at the barrier: release them all
      run.at_barrier = 0;
      std::vector<unsigned>& all = run.start_order;  // free again once every thread has started
      for (unsigned i = 0; i < n; ++i) all[i] = i;
      release(run, all.data(), n);
    }
    if (run.failed) return Progress::Failed;
  }
}

// Runs one block; false after a violation (run.violation says which).
bool run_block(BlockRun& run, uint3 block, uint64_t seed) {
  start_block(run, block, seed);
  return advance_block(run) == Progress::Done;
}

// Every thread of a parked block goes on past the grid barrier.
void release_grid(BlockRun& run) {
  std::vector<unsigned> waiting;
  for (unsigned i = 0; i < run.threads.size(); ++i)
    if (run.threads[i].state == State::AtGrid) waiting.push_back(i);
  run.at_grid = 0;
  release(run, waiting.data(), waiting.size());
}

// Gives back the fibers of threads a failed block left suspended (their frames are abandoned).
void abandon(BlockRun& run) {
  for (Thread& t : run.threads) {
    if (t.fiber != nullptr) {
#if defined(TG_EMU_ASAN)
      // The abandoned frames never returned: clear their stack redzones before the stack is reused.
      __asan_unpoison_memory_region(t.fiber->stack.bottom, t.fiber->stack.size);  // the macro is empty here
#endif
      tls_idle_fibers.push_back(t.fiber);
    }
    t.fiber = nullptr;
  }
}

BlockRun& block_run() {
  BlockRun* run = tls_block;
  if (run == nullptr) {
    std::fprintf(stderr, "[cuda emulator] a device intrinsic was called outside a kernel\n");
    std::terminate();
  }
  return *run;
}

}  // namespace

const ThreadIndex& thread_index_checked() {
  std::fprintf(stderr, "[cuda emulator] threadIdx/blockIdx/blockDim/gridDim read outside a kernel\n");
  std::terminate();
}

void sync_block() {
  BlockRun& run = block_run();
  run.current->state = State::AtBarrier;
  ++run.at_barrier;
  suspend(run);
}

uint64_t warp_exchange(WarpOp op, unsigned mask, uint64_t value, int arg, int width) {
  BlockRun& run = block_run();
  Thread& self = *run.current;
  self.op = op;
  self.mask = mask;
  self.value = value;
  self.arg = arg;
  self.width = width;
  arrive_at_warp_op(run, self);
  suspend(run);
  return self.result;
}

void sync_grid() {
  BlockRun& run = block_run();
  if (!run.config->cooperative) {
    run.violation = where(run, *run.current) + ": grid.sync() in a kernel not launched cooperatively";
    fail_in_fiber(run);
  }
  run.current->state = State::AtGrid;
  ++run.at_grid;
  suspend(run);
}

void* dynamic_shared() {
  BlockRun& run = block_run();
  return run.shared.get() + kStaticSharedLimit;
}

void* shared_array(const void* key, size_t bytes, size_t align, const char* name) {
  BlockRun& run = block_run();
  for (const SharedSite& s : run.sites)
    if (s.key == key) return run.shared.get() + s.offset;
  const size_t offset = (run.shared_used + align - 1) / align * align;
  if (offset + bytes > kStaticSharedLimit) {
    run.violation = where(run, *run.current) + ": static shared memory of " + std::to_string(offset + bytes) +
                    " bytes (array " + name + "), above sm_90's 48 KiB";
    fail_in_fiber(run);
  }
  if (offset + bytes + run.config->dynamic_shared_bytes > kSharedOptinLimit) {
    run.violation = where(run, *run.current) + ": static shared memory of " + std::to_string(offset + bytes) +
                    " bytes and " + std::to_string(run.config->dynamic_shared_bytes) +
                    " bytes of dynamic shared memory, above sm_90's 227 KiB per block";
    fail_in_fiber(run);
  }
  run.sites.push_back(SharedSite{key, offset});
  run.shared_used = offset + bytes;
  if (run.shared_used > run.shared_poisoned) {
    std::memset(run.shared.get() + run.shared_poisoned, 0xff, run.shared_used - run.shared_poisoned);
    run.shared_poisoned = run.shared_used;
  }
  return run.shared.get() + offset;
}

namespace {

// Note [cooperative grids].
bool run_cooperative_grid(const LaunchConfig& config, KernelTask& task, int device, uint64_t launch_id) {
  const dim3 g = config.grid;
  const size_t blocks = size_t(g.x) * g.y * g.z;
  std::vector<std::unique_ptr<BlockRun>> runs(blocks);
  BlockRun* saved = tls_block;
  for (size_t linear = 0; linear < blocks; ++linear) {
    runs[linear] = std::make_unique<BlockRun>();
    BlockRun& run = *runs[linear];
    run.config = &config;
    run.task = &task;
    run.device = device;
    run.threads.resize(size_t(config.block.x) * config.block.y * config.block.z);
    const uint3 b{static_cast<unsigned>(linear % g.x), static_cast<unsigned>((linear / g.x) % g.y),
                  static_cast<unsigned>(linear / (uint64_t(g.x) * g.y))};
    start_block(run, b, (launch_id * 0x9E3779B97F4A7C15ULL) ^ (linear * 0xBF58476D1CE4E5B9ULL) ^ 0x94D049BB133111EBULL);
  }
  std::vector<size_t> order(blocks);
  std::vector<bool> finished(blocks, false);
  uint64_t rng = launch_id * 0xD1B54A32D192ED03ULL + 1;
  std::string violation;
  for (;;) {
    for (size_t i = 0; i < blocks; ++i) order[i] = i;
    for (size_t i = blocks; i > 1; --i) std::swap(order[i - 1], order[draw_below(rng, i)]);
    size_t done = 0, parked = 0, some_done = 0, some_parked = 0;
    for (size_t i : order) {
      if (!finished[i]) {
        tls_block = runs[i].get();
        const Progress p = advance_block(*runs[i]);
        if (p == Progress::Failed) {
          violation = runs[i]->violation;
          break;
        }
        finished[i] = p == Progress::Done;
      }
      if (finished[i]) {
        ++done;
        some_done = i;
      } else {
        ++parked;
        some_parked = i;
      }
    }
    if (violation.empty() && done > 0 && parked > 0) {
      const uint3 gone = runs[some_done]->threads[0].index.block_idx;
      const uint3 waits = runs[some_parked]->threads[0].index.block_idx;
      violation = "kernel " + std::string(config.kernel) +
                  ": grid.sync() is not reached by every block of the grid: " + "block (" + std::to_string(gone.x) +
                  "," + std::to_string(gone.y) + "," + std::to_string(gone.z) + ") exited while block (" +
                  std::to_string(waits.x) + "," + std::to_string(waits.y) + "," + std::to_string(waits.z) + ") waits";
    }
    if (!violation.empty()) {
      for (auto& run : runs) abandon(*run);
      tls_block = saved;
      report_violation(device, violation);
      return false;
    }
    if (done == blocks) break;
    for (auto& run : runs) release_grid(*run);
  }
  tls_block = saved;
  return true;
}

}  // namespace

bool run_grid(const LaunchConfig& config, KernelTask& task, int device, uint64_t launch_id) {
  if (config.cooperative) return run_cooperative_grid(config, task, device, launch_id);
  BlockRun run;
  run.config = &config;
  run.task = &task;
  run.device = device;
  run.threads.resize(size_t(config.block.x) * config.block.y * config.block.z);
  BlockRun* saved = tls_block;
  tls_block = &run;
  const dim3 g = config.grid;
  const uint64_t blocks = uint64_t(g.x) * g.y * g.z;
  // Blocks in a scrambled but complete order (a stride coprime to the count): no kernel may rely on
  // block order.
  uint64_t stride = 1;
  if (blocks > 2) {
    stride = (0x9E3779B97F4A7C15ULL ^ launch_id) % blocks;
    auto gcd = [](uint64_t a, uint64_t b) {
      while (b != 0) a = std::exchange(b, a % b);
      return a;
    };
    while (stride == 0 || gcd(stride, blocks) != 1) stride = (stride + 1) % blocks;
  }
  bool ok = true;
  uint64_t linear = 0;
  for (uint64_t k = 0; k < blocks; ++k, linear = (linear + stride) % blocks) {
    const uint3 b{static_cast<unsigned>(linear % g.x), static_cast<unsigned>((linear / g.x) % g.y),
                  static_cast<unsigned>(linear / (uint64_t(g.x) * g.y))};
    uint64_t seed = (launch_id * 0x9E3779B97F4A7C15ULL) ^ (linear * 0xBF58476D1CE4E5B9ULL) ^ 0x94D049BB133111EBULL;
    if (!run_block(run, b, seed)) {
      abandon(run);
      report_violation(device, run.violation);
      ok = false;
      break;
    }
  }
  tls_block = saved;
  return ok;
}

}  // namespace tapegrad_emu
