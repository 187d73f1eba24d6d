// Runtime of the SIMT emulator (simt.h): fibers, the block scheduler,
// barriers, warp collectives and the error record.
//
// Each CUDA thread of a block is a fiber on its own mmap'd stack (with a
// PROT_NONE guard page below it). Fibers switch only at __syncthreads(), at
// warp collectives and at exit; the scheduler picks the next runnable one in
// the configured order. A block whose threads all wait, with some never
// able to continue, is a deadlock: the launch ends with a message naming the
// kernel, the block and the threads, instead of hanging.
#include "simt.h"

#include <cxxabi.h>
#include <dlfcn.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>
#include <vector>

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>
#define SIMT_ASAN 1
#else
#define SIMT_ASAN 0
#endif

// x86-64 switches fibers with the few instructions below; other machines (or
// -DSIMT_USE_UCONTEXT, to check that path) use ucontext.
#if defined(__x86_64__) && !defined(SIMT_USE_UCONTEXT)
#define SIMT_ASM_SWITCH 1
#else
#define SIMT_ASM_SWITCH 0
#include <ucontext.h>
#endif

namespace simt {
namespace {

// --- context switch ----------------------------------------------------------------------
// swapcontext() makes two sigprocmask system calls per switch (about 5x the
// cost of the rest of a switch); the x86-64 switch below saves only what the
// ABI says a callee must preserve: rbx, rbp, r12-r15, the stack pointer and
// the SSE / x87 control words.

#if SIMT_ASM_SWITCH
extern "C" void simt_switch_context(void** save_sp, void* load_sp);
extern "C" void simt_fiber_trampoline();
asm(R"(
  .text
  .globl simt_switch_context
  .hidden simt_switch_context
  .type simt_switch_context, @function
simt_switch_context:
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
  .size simt_switch_context, .-simt_switch_context

  .globl simt_fiber_trampoline
  .hidden simt_fiber_trampoline
  .type simt_fiber_trampoline, @function
simt_fiber_trampoline:
  movq %rbx, %rdi
  callq *%r12
  ud2
  .size simt_fiber_trampoline, .-simt_fiber_trampoline
)");
#endif

enum class State : uint8_t { kRunnable, kAtBarrier, kAtWarp, kDone };

struct Fiber {
  void* sp = nullptr;  // saved stack pointer while switched out
#if !SIMT_ASM_SWITCH
  ucontext_t context;
#endif
  char* stack = nullptr;  // lowest usable byte
  size_t stack_size = 0;
  void* fake_stack = nullptr;  // ASan's per-fiber bookkeeping
  ThreadIndex index{};
  int linear = 0;
  int warp = 0;
  int lane = 0;
  State state = State::kRunnable;
  // The warp collective it waits at.
  Collective kind = Collective::kShuffle;
  unsigned mask = 0;
  uint64_t payload = 0;
  int src = -1;
  uint64_t result = 0;
};

constexpr int kMaxWarps = kMaxThreadsPerBlock / kWarpSize;
constexpr size_t kStackBytes = SIMT_ASAN ? (256u << 10) : (64u << 10);

struct LaunchRecord {
  std::string kernel;  // demangled name
  dim3 grid;           // as launched
  dim3 grid_run;       // after the test's cap
  dim3 block;
};

struct Runtime {
  Order order = Order::kRoundRobin;
  int64_t max_grid_x = 0;
  std::vector<LaunchRecord> launches;
  cudaError_t last_error = cudaSuccess;
  std::string last_message;

  std::vector<char*> stacks;  // pool, reused by every block
  std::vector<Fiber> fibers;
  int nthreads = 0;
  uint64_t runnable[kMaxThreadsPerBlock / 64] = {};
  unsigned waiting_at_warp[kMaxWarps] = {};  // lanes parked at a collective, per warp
  int at_barrier = 0;
  int barrier_count = 0;  // threads that arrived with a true predicate (__syncthreads_count)
  Fiber* running = nullptr;
  void* scheduler_sp = nullptr;
#if !SIMT_ASM_SWITCH
  ucontext_t scheduler_context;
#endif
  const void* scheduler_stack = nullptr;  // ASan: the launching thread's stack
  size_t scheduler_stack_size = 0;
  void* scheduler_fake_stack = nullptr;

  void (*body)(void*) = nullptr;
  void* bound = nullptr;
  const char* kernel = "";
  bool failed = false;
};

// One runtime per process: launches are serialised (launch_mutex), so one block
// is in flight at a time, which is also what makes __shared__ private to it.
Runtime rt;
std::mutex launch_mutex;

// --- names for messages ----------------------------------------------------------------------

const char* collective_name(Collective kind) {
  switch (kind) {
    case Collective::kShuffle:
      return "__shfl_sync";
    case Collective::kShuffleXor:
      return "__shfl_xor_sync";
    case Collective::kShuffleDown:
      return "__shfl_down_sync";
    case Collective::kShuffleUp:
      return "__shfl_up_sync";
    case Collective::kBallot:
      return "__ballot_sync/__any_sync/__all_sync";
    case Collective::kSyncWarp:
      return "__syncwarp";
  }
  return "?";
}

std::string format(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
std::string format(const char* fmt, ...) {
  char buf[512];
  va_list args;
  va_start(args, fmt);
  vsnprintf(buf, sizeof buf, fmt, args);
  va_end(args);
  return buf;
}

std::string thread_name(const Fiber& f) {
  return format("thread (%u,%u,%u) [warp %d lane %d]", f.index.thread_idx.x, f.index.thread_idx.y,
                f.index.thread_idx.z, f.warp, f.lane);
}

std::string where(const Fiber& f) {
  return format("%s of block (%u,%u,%u) of %s", thread_name(f).c_str(), f.index.block_idx.x, f.index.block_idx.y,
                f.index.block_idx.z, rt.kernel);
}

std::string kernel_name(const void* address) {
  Dl_info info{};
  if (dladdr(address, &info) == 0 || info.dli_sname == nullptr || info.dli_saddr != address) {
    return format("kernel at %p", address);
  }
  int status = 0;
  char* demangled = abi::__cxa_demangle(info.dli_sname, nullptr, nullptr, &status);
  std::string name = status == 0 && demangled ? demangled : info.dli_sname;
  std::free(demangled);
  // "void ns::kernel<float, 4, 2>(float const*, ...)" -> "ns::kernel<float, 4, 2>"
  if (name.rfind("void ", 0) == 0) name.erase(0, 5);
  int depth = 0;
  for (size_t i = 0; i < name.size(); ++i) {
    if (name[i] == '<') ++depth;
    if (name[i] == '>') --depth;
    if (name[i] == '(' && depth == 0) return name.substr(0, i);
  }
  return name;
}

// --- fibers --------------------------------------------------------------------------------------

void asan_start_switch(void** fake_stack_save, const void* bottom, size_t size) {
#if SIMT_ASAN
  __sanitizer_start_switch_fiber(fake_stack_save, bottom, size);
#else
  (void)fake_stack_save, (void)bottom, (void)size;
#endif
}

void asan_finish_switch(void* fake_stack_save, const void** bottom_old, size_t* size_old) {
#if SIMT_ASAN
  __sanitizer_finish_switch_fiber(fake_stack_save, bottom_old, size_old);
#else
  (void)fake_stack_save, (void)bottom_old, (void)size_old;
#endif
}

char* new_stack() {
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  void* base = mmap(nullptr, kStackBytes + page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                    -1, 0);
  if (base == MAP_FAILED) return nullptr;
  // A thread that overflows its stack hits this page and faults, instead of
  // silently writing into the neighbouring fiber's stack.
  mprotect(base, page, PROT_NONE);
  return static_cast<char*>(base) + page;
}

// Back in the scheduler: called from a fiber, with the fiber's state already set.
void switch_to_scheduler(bool exiting) {
  Fiber* f = rt.running;
  asan_start_switch(exiting ? nullptr : &f->fake_stack, rt.scheduler_stack, rt.scheduler_stack_size);
#if SIMT_ASM_SWITCH
  simt_switch_context(&f->sp, rt.scheduler_sp);
#else
  swapcontext(&f->context, &rt.scheduler_context);
#endif
  asan_finish_switch(f->fake_stack, nullptr, nullptr);
}

void complete_after_exit(int warp);

void fiber_main(Fiber* f) {
  asan_finish_switch(nullptr, &rt.scheduler_stack, &rt.scheduler_stack_size);
  rt.body(rt.bound);
  f->state = State::kDone;
  complete_after_exit(f->warp);
  switch_to_scheduler(/*exiting=*/true);
  std::abort();  // a finished fiber is never resumed
}

#if !SIMT_ASM_SWITCH
void fiber_entry(unsigned hi, unsigned lo) {
  fiber_main(reinterpret_cast<Fiber*>((static_cast<uintptr_t>(hi) << 32) | lo));
}
#endif

void prepare_fiber(Fiber& f) {
#if SIMT_ASAN
  // A fiber abandoned by a failed launch may have left its frames' redzones poisoned.
  ASAN_UNPOISON_MEMORY_REGION(f.stack, f.stack_size);
#endif
  f.fake_stack = nullptr;
#if SIMT_ASM_SWITCH
  auto* top = reinterpret_cast<uint64_t*>(f.stack + f.stack_size);  // 16-byte aligned
  uint64_t* sp = top - 8;
  uint32_t control[2] = {0, 0};
  asm volatile("stmxcsr %0" : "=m"(control[0]));
  asm volatile("fnstcw %0" : "=m"(control[1]));
  std::memcpy(&sp[0], control, sizeof control);
  sp[1] = sp[2] = sp[3] = 0;                             // r15, r14, r13
  sp[4] = reinterpret_cast<uint64_t>(&fiber_main);       // r12: called by the trampoline
  sp[5] = reinterpret_cast<uint64_t>(&f);                // rbx: its argument
  sp[6] = 0;                                             // rbp
  sp[7] = reinterpret_cast<uint64_t>(&simt_fiber_trampoline);  // return address
  f.sp = sp;
#else
  getcontext(&f.context);
  f.context.uc_stack.ss_sp = f.stack;
  f.context.uc_stack.ss_size = f.stack_size;
  f.context.uc_link = nullptr;
  const auto p = reinterpret_cast<uintptr_t>(&f);
  makecontext(&f.context, reinterpret_cast<void (*)()>(&fiber_entry), 2, static_cast<unsigned>(p >> 32),
              static_cast<unsigned>(p & 0xffffffffu));
#endif
}

void resume(Fiber& f) {
  rt.running = &f;
  asan_start_switch(&rt.scheduler_fake_stack, f.stack, f.stack_size);
#if SIMT_ASM_SWITCH
  simt_switch_context(&rt.scheduler_sp, f.sp);
#else
  swapcontext(&rt.scheduler_context, &f.context);
#endif
  asan_finish_switch(rt.scheduler_fake_stack, nullptr, nullptr);
  rt.running = nullptr;
}

// --- the runnable set ---------------------------------------------------------------------------

void set_runnable(int i) { rt.runnable[i / 64] |= uint64_t{1} << (i % 64); }
void clear_runnable(int i) { rt.runnable[i / 64] &= ~(uint64_t{1} << (i % 64)); }

// First runnable thread at index >= from, or -1.
int next_runnable(int from) {
  const int words = (rt.nthreads + 63) / 64;
  for (int w = from / 64; w < words; ++w) {
    uint64_t bits = rt.runnable[w];
    if (w == from / 64) bits &= ~uint64_t{0} << (from % 64);
    if (bits) return w * 64 + __builtin_ctzll(bits);
  }
  return -1;
}

int pick(int previous) {
  if (rt.order == Order::kWarpAhead) return next_runnable(0);
  const int after = previous + 1 < rt.nthreads ? next_runnable(previous + 1) : -1;
  return after >= 0 ? after : next_runnable(0);
}

// --- warp collectives ----------------------------------------------------------------------------

[[noreturn]] void fail_as(const Fiber& culprit, cudaError_t error, const char* what);

// Lanes of `warp` that exist in the block and have not exited: as in CUDA,
// a mask may name lanes that exited (or a partial warp's missing lanes);
// only the others must arrive, and reading from one of them is undefined.
unsigned live_lanes(int warp) {
  unsigned live = 0;
  const int base = warp * kWarpSize;
  for (int l = 0; l < kWarpSize && base + l < rt.nthreads; ++l) {
    if (rt.fibers[base + l].state != State::kDone) live |= 1u << l;
  }
  return live;
}

// Completes the collective (kind, mask) of `warp` when every live lane of the
// mask waits at it: each lane reads the others' values as they were at this point.
void complete_if_ready(int warp, unsigned mask, Collective kind) {
  const int base = warp * kWarpSize;
  const unsigned live = live_lanes(warp);
  unsigned present = 0;
  for (unsigned waiting = rt.waiting_at_warp[warp]; waiting; waiting &= waiting - 1) {
    const Fiber& lane = rt.fibers[base + __builtin_ctz(waiting)];
    if (lane.mask == mask && lane.kind == kind) present |= 1u << lane.lane;
  }
  if (present == 0 || present != (mask & live)) return;
  unsigned ballot = 0;
  for (unsigned m = present; m; m &= m - 1) {
    const Fiber& lane = rt.fibers[base + __builtin_ctz(m)];
    if (lane.payload != 0) ballot |= 1u << lane.lane;
  }
  for (unsigned m = present; m; m &= m - 1) {
    Fiber& lane = rt.fibers[base + __builtin_ctz(m)];
    if (kind == Collective::kBallot) {
      lane.result = ballot;
    } else if (lane.src < 0) {
      lane.result = lane.payload;
    } else if ((present >> lane.src & 1u) == 0) {
      const char* why = (mask >> lane.src & 1u) == 0                ? "is not in the mask"
                        : base + lane.src >= rt.nthreads            ? "does not exist in this block"
                                                                    : "has exited";
      fail_as(lane, cudaErrorIllegalInstruction,
              format("%s(mask=0x%08x): lane %d reads lane %d, which %s (undefined on the GPU)", collective_name(kind),
                     mask, lane.lane, lane.src, why).c_str());
    } else {
      lane.result = rt.fibers[base + lane.src].payload;
    }
  }
  for (unsigned m = present; m; m &= m - 1) {
    Fiber& lane = rt.fibers[base + __builtin_ctz(m)];
    lane.state = State::kRunnable;
    set_runnable(lane.linear);
  }
  rt.waiting_at_warp[warp] &= ~present;
}

// A lane that exits may be the last one its warp-mates' collectives wait for.
void complete_after_exit(int warp) {
  const int base = warp * kWarpSize;
  unsigned tried = 0;
  while (const unsigned candidates = rt.waiting_at_warp[warp] & ~tried) {
    const Fiber& first = rt.fibers[base + __builtin_ctz(candidates)];
    const unsigned mask = first.mask;
    const Collective kind = first.kind;
    for (unsigned w = rt.waiting_at_warp[warp]; w; w &= w - 1) {
      const Fiber& lane = rt.fibers[base + __builtin_ctz(w)];
      if (lane.mask == mask && lane.kind == kind) tried |= 1u << lane.lane;
    }
    complete_if_ready(warp, mask, kind);
  }
}

// --- errors ------------------------------------------------------------------------------------------

void record_error(cudaError_t error, const std::string& message) {
  if (rt.failed) return;  // the first error is the one that counts
  rt.failed = true;
  rt.last_error = error;
  rt.last_message = message;
}

// Ends the launch for an error of thread `culprit`, from whichever fiber is running.
[[noreturn]] void fail_as(const Fiber& culprit, cudaError_t error, const char* what) {
  record_error(error, std::string(what) + " in " + where(culprit));
  rt.running->state = State::kDone;
  switch_to_scheduler(/*exiting=*/true);
  std::abort();
}

std::string thread_list(const std::vector<int>& ids, size_t limit) {
  std::string out;
  for (size_t i = 0; i < ids.size() && i < limit; ++i) {
    const Fiber& f = rt.fibers[ids[i]];
    if (!out.empty()) out += ", ";
    out += thread_name(f);
    if (f.state == State::kDone) out += " exited";
    if (f.state == State::kAtWarp) out += format(" waits at %s(mask=0x%08x)", collective_name(f.kind), f.mask);
  }
  if (ids.size() > limit) out += format(" and %zu more", ids.size() - limit);
  return out;
}

std::string deadlock_message(const dim3& block_idx) {
  std::vector<int> at_barrier, elsewhere;
  for (int i = 0; i < rt.nthreads; ++i) {
    (rt.fibers[i].state == State::kAtBarrier ? at_barrier : elsewhere).push_back(i);
  }
  std::string head = format("deadlock in %s, block (%u,%u,%u): ", rt.kernel, block_idx.x, block_idx.y, block_idx.z);
  if (!at_barrier.empty()) {
    return head + format("%zu of %d threads wait at __syncthreads(), which these never reach: ", at_barrier.size(),
                         rt.nthreads) + thread_list(elsewhere, 8);
  }
  // Only warp collectives wait: name, for the first waiting lane, the lanes of its mask that never come.
  for (int i = 0; i < rt.nthreads; ++i) {
    const Fiber& f = rt.fibers[i];
    if (f.state != State::kAtWarp) continue;
    std::vector<int> missing;
    for (unsigned m = f.mask & live_lanes(f.warp); m; m &= m - 1) {
      const Fiber& lane = rt.fibers[f.warp * kWarpSize + __builtin_ctz(m)];
      if (lane.state != State::kAtWarp || lane.mask != f.mask || lane.kind != f.kind) missing.push_back(lane.linear);
    }
    return head + format("%s waits at %s(mask=0x%08x) for lanes that never arrive: ", thread_name(f).c_str(),
                         collective_name(f.kind), f.mask) + thread_list(missing, 8);
  }
  return head + "no thread can continue";
}

// --- one block ------------------------------------------------------------------------------------------

void run_block(const dim3& grid, const dim3& block, const dim3& block_idx) {
  rt.nthreads = static_cast<int>(block.x * block.y * block.z);
  std::fill(std::begin(rt.runnable), std::end(rt.runnable), 0);
  std::fill(std::begin(rt.waiting_at_warp), std::end(rt.waiting_at_warp), 0u);
  rt.at_barrier = 0;
  rt.barrier_count = 0;
  for (int i = 0; i < rt.nthreads; ++i) {
    Fiber& f = rt.fibers[i];
    f.stack = rt.stacks[i];
    f.stack_size = kStackBytes;
    f.linear = i;
    f.warp = i / kWarpSize;
    f.lane = i % kWarpSize;
    f.index.thread_idx = make_uint3(i % block.x, (i / block.x) % block.y, i / (block.x * block.y));
    f.index.block_idx = make_uint3(block_idx.x, block_idx.y, block_idx.z);
    f.index.block_dim = block;
    f.index.grid_dim = grid;
    f.state = State::kRunnable;
    prepare_fiber(f);
    set_runnable(i);
  }
  int previous = -1;
  for (;;) {
    const int next = pick(previous);
    if (next < 0) {
      for (int i = 0; i < rt.nthreads; ++i) {
        if (rt.fibers[i].state != State::kDone) {
          record_error(cudaErrorLaunchFailure, deadlock_message(block_idx));
          return;
        }
      }
      return;  // every thread finished
    }
    clear_runnable(next);
    resume(rt.fibers[next]);
    if (rt.failed) return;  // the fiber recorded an error: abandon the block
    previous = next;
  }
}

}  // namespace

// --- what kernels call ------------------------------------------------------------------------------------

const ThreadIndex& current() {
  if (rt.running == nullptr) {
    std::fprintf(stderr, "simt: a built-in variable (threadIdx, ...) was read outside a kernel\n");
    std::abort();
  }
  return rt.running->index;
}

int lane_id() {
  current();  // aborts outside a kernel
  return rt.running->lane;
}

void fail(cudaError_t error, const char* what) { fail_as(*rt.running, error, what); }

void check_alignment(const void* p, size_t alignment, const char* op) {
  if (reinterpret_cast<uintptr_t>(p) % alignment != 0) {
    const std::string what = format("misaligned address: %s needs %zu-byte alignment, got %p", op, alignment, p);
    fail(cudaErrorMisalignedAddress, what.c_str());
  }
}

int sync_threads(int predicate) {
  Fiber& f = *rt.running;
  f.state = State::kAtBarrier;
  rt.barrier_count += predicate != 0;
  if (++rt.at_barrier == rt.nthreads) {
    for (int i = 0; i < rt.nthreads; ++i) {
      if (rt.fibers[i].state == State::kAtBarrier) {
        rt.fibers[i].state = State::kRunnable;
        rt.fibers[i].result = static_cast<uint64_t>(rt.barrier_count);
        set_runnable(i);
      }
    }
    rt.at_barrier = 0;
    rt.barrier_count = 0;
  }
  switch_to_scheduler(false);
  return static_cast<int>(f.result);
}

uint64_t warp_collective(Collective kind, unsigned mask, uint64_t payload, int src_lane) {
  Fiber& f = *rt.running;
  const unsigned bit = 1u << f.lane;
  if ((mask & bit) == 0) {
    fail(cudaErrorIllegalInstruction,
         format("%s(mask=0x%08x) called by a lane the mask does not include", collective_name(kind), mask).c_str());
  }
  // Lanes already waiting at the same collective with the same mask are this one's group. A waiting lane
  // that this one needs, and that needs this one, at a different collective or mask can never meet it.
  const int base = f.warp * kWarpSize;
  for (unsigned waiting = rt.waiting_at_warp[f.warp]; waiting; waiting &= waiting - 1) {
    const Fiber& other = rt.fibers[base + __builtin_ctz(waiting)];
    if (other.mask == mask && other.kind == kind) continue;
    if ((other.mask & bit) != 0 && (mask >> other.lane & 1u) != 0) {
      fail(cudaErrorIllegalInstruction,
           format("%s(mask=0x%08x) while %s waits at %s(mask=0x%08x): the lanes of a mask must meet at the same "
                  "collective with the same mask",
                  collective_name(kind), mask, thread_name(other).c_str(), collective_name(other.kind), other.mask)
               .c_str());
    }
  }
  f.kind = kind;
  f.mask = mask;
  f.payload = payload;
  f.src = src_lane;
  f.state = State::kAtWarp;
  rt.waiting_at_warp[f.warp] |= bit;
  complete_if_ready(f.warp, mask, kind);
  switch_to_scheduler(false);
  return f.result;
}

void set_order(Order order) { rt.order = order; }
void set_max_grid_x(int64_t cap) { rt.max_grid_x = cap; }

void run_grid(const void* kernel_address, dim3 grid, dim3 block, size_t shared_bytes, void (*body)(void*),
              void* bound) {
  const std::lock_guard<std::mutex> lock(launch_mutex);
  LaunchRecord record{kernel_name(kernel_address), grid, grid, block};
  if (rt.max_grid_x > 0 && record.grid_run.x > rt.max_grid_x) record.grid_run.x = static_cast<unsigned>(rt.max_grid_x);
  rt.launches.push_back(record);
  rt.failed = false;
  rt.kernel = rt.launches.back().kernel.c_str();
  const uint64_t threads = uint64_t{block.x} * block.y * block.z;
  if (threads == 0 || threads > kMaxThreadsPerBlock || grid.x == 0 || grid.y == 0 || grid.z == 0) {
    record_error(cudaErrorInvalidConfiguration,
                 format("%s launched with grid (%u,%u,%u) and block (%u,%u,%u): a block has 1..%d threads, a grid "
                        "at least one block",
                        rt.kernel, grid.x, grid.y, grid.z, block.x, block.y, block.z, kMaxThreadsPerBlock));
    return;
  }
  if (shared_bytes != 0) {
    record_error(cudaErrorInvalidValue, format("%s launched with %zu bytes of dynamic shared memory, which the "
                                               "emulator does not provide", rt.kernel, shared_bytes));
    return;
  }
  while (rt.stacks.size() < threads) {
    char* stack = new_stack();
    if (stack == nullptr) {
      record_error(cudaErrorMemoryAllocation, "no memory for the emulated threads' stacks");
      return;
    }
    rt.stacks.push_back(stack);
  }
  if (rt.fibers.size() < threads) rt.fibers.resize(threads);
  rt.body = body;
  rt.bound = bound;
  const dim3 run = record.grid_run;
  for (unsigned z = 0; z < run.z && !rt.failed; ++z) {
    for (unsigned y = 0; y < run.y && !rt.failed; ++y) {
      for (unsigned x = 0; x < run.x && !rt.failed; ++x) run_block(run, block, dim3(x, y, z));
    }
  }
}

}  // namespace simt

// --- C interface: the CUDA runtime calls the kernels' host code makes, and test controls -----------------

extern "C" {

cudaError_t cudaGetLastError(void) {
  const cudaError_t error = simt::rt.last_error;
  simt::rt.last_error = cudaSuccess;
  return error;
}

cudaError_t cudaPeekAtLastError(void) { return simt::rt.last_error; }

__attribute__((visibility("default"))) void simt_set_order(int order) {
  simt::set_order(static_cast<simt::Order>(order));
}

__attribute__((visibility("default"))) void simt_set_max_grid_x(int64_t cap) { simt::set_max_grid_x(cap); }

// The message of the last launch's error ("" if it succeeded); copies at most cap - 1 bytes.
__attribute__((visibility("default"))) size_t simt_last_error_message(char* out, size_t cap) {
  const std::string& message = simt::rt.failed ? simt::rt.last_message : std::string();
  if (cap > 0) std::snprintf(out, cap, "%s", message.c_str());
  return message.size();
}

__attribute__((visibility("default"))) void simt_clear_launches(void) { simt::rt.launches.clear(); }

__attribute__((visibility("default"))) int simt_launch_count(void) {
  return static_cast<int>(simt::rt.launches.size());
}

// Launch i since the last simt_clear_launches: kernel name, gridDim.x as
// launched and as run (after the cap), blockDim.x.
__attribute__((visibility("default"))) int simt_launch_info(int i, char* name, size_t cap, int64_t* grid_x,
                                                            int64_t* grid_x_run, int64_t* block_x) {
  if (i < 0 || i >= static_cast<int>(simt::rt.launches.size())) return -1;
  const auto& record = simt::rt.launches[i];
  if (cap > 0) std::snprintf(name, cap, "%s", record.kernel.c_str());
  *grid_x = record.grid.x;
  *grid_x_run = record.grid_run.x;
  *block_x = record.block.x;
  return 0;
}

}  // extern "C"
