// Runtime of the SIMT emulator (simt.h): fibers, the block scheduler,
// barriers, warp collectives, the memory-access hooks of the race detector
// and the error record.
//
// Each CUDA thread of a block is a fiber on its own stack (with a PROT_NONE
// guard page below it; all stacks lie in one mapping, so that an access to a
// fiber's own stack is told from shared and global memory with two
// compares). Fibers switch only at __syncthreads(), at warp collectives and
// at exit (and, in the stress order, at shared-memory accesses); the
// scheduler picks the next runnable one in the configured order. A block
// whose threads all wait, with some never able to continue, is a deadlock:
// the launch ends with a message naming the kernel, the block and the
// threads, instead of hanging.
#include "simt.h"

#include "race_detector.h"

#include <cxxabi.h>
#include <dlfcn.h>
#include <link.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <mutex>
#include <numeric>
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
  BarrierSite barrier{"", 0};  // the __syncthreads() it waits at
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
  uint64_t seed = 1;
  uint64_t rng = 1;  // state of the random orders
  bool detect_races = false;
  int64_t max_grid_x = 0;
  std::vector<LaunchRecord> launches;
  cudaError_t last_error = cudaSuccess;
  std::string last_message;

  char* stack_region = nullptr;  // kMaxThreadsPerBlock stacks, each above its guard page
  size_t stack_stride = 0;
  std::vector<Fiber> fibers;
  int nthreads = 0;
  int exited = 0;
  uint64_t runnable[kMaxThreadsPerBlock / 64] = {};
  unsigned waiting_at_warp[kMaxWarps] = {};  // lanes parked at a collective, per warp
  int at_barrier = 0;
  int first_at_barrier = -1;  // the thread that opened the barrier now filling: all others must be at its site
  int barrier_count = 0;      // threads that arrived with a true predicate (__syncthreads_count)
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
  size_t bound_bytes = 0;
  std::vector<std::pair<int, const void*>> pointers;  // the launch's pointer arguments, for race reports
  const char* kernel = "";
  bool failed = false;
  // This library's writable segment: the only memory the kernels' translation
  // unit has there is its statics, i.e. the __shared__ variables.
  uintptr_t shared_lo = 0, shared_hi = 0;
};

// One runtime per process: launches are serialised (launch_mutex), so one block
// is in flight at a time, which is also what makes __shared__ private to it.
Runtime rt;
std::mutex launch_mutex;

// --- names for messages ----------------------------------------------------------------------

const char* collective_name(Collective kind) {
  switch (kind) {
    case Collective::kShuffle: return "__shfl_sync";
    case Collective::kShuffleXor: return "__shfl_xor_sync";
    case Collective::kShuffleDown: return "__shfl_down_sync";
    case Collective::kShuffleUp: return "__shfl_up_sync";
    case Collective::kBallot: return "__ballot_sync/__any_sync/__all_sync";
    case Collective::kSyncWarp: return "__syncwarp";
    case Collective::kAny: return "__any_sync";
    case Collective::kAll: return "__all_sync";
  }
  return "?";
}

std::string format(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
std::string format(const char* fmt, ...) {
  char buf[4096];  // a race report names two threads, two lines and a kernel
  va_list args;
  va_start(args, fmt);
  vsnprintf(buf, sizeof buf, fmt, args);
  va_end(args);
  return buf;
}

// "dir/file.cu" -> "file.cu", as the race reports name files.
const char* base_name(const char* path) {
  const char* slash = std::strrchr(path, '/');
  return slash == nullptr ? path : slash + 1;
}

std::string thread_name(const Fiber& f) {
  return format("thread (%u,%u,%u) [warp %d lane %d]", f.index.thread_idx.x, f.index.thread_idx.y, f.index.thread_idx.z,
                f.warp, f.lane);
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

// Finds this library's writable segment (where the kernels' __shared__ statics live), once.
void find_shared_segment() {
  if (rt.shared_hi != 0) return;
  Dl_info info{};
  if (dladdr(reinterpret_cast<const void*>(&find_shared_segment), &info) == 0) return;
  struct Search {
    uintptr_t base, lo, hi;
  } search{reinterpret_cast<uintptr_t>(info.dli_fbase), 0, 0};
  dl_iterate_phdr(
      [](dl_phdr_info* object, size_t, void* data) {
        auto* s = static_cast<Search*>(data);
        if (object->dlpi_addr != s->base) return 0;
        for (int i = 0; i < object->dlpi_phnum; ++i) {
          const ElfW(Phdr) & h = object->dlpi_phdr[i];
          if (h.p_type == PT_LOAD && (h.p_flags & PF_W) != 0) {
            s->lo = object->dlpi_addr + h.p_vaddr;
            s->hi = s->lo + h.p_memsz;
          }
        }
        return 1;
      },
      &search);
  rt.shared_lo = search.lo;
  rt.shared_hi = search.hi;
}

// Reserves every stack a block can need, once (untouched pages cost nothing).
bool reserve_stacks() {
  if (rt.stack_region != nullptr) return true;
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  const size_t stride = kStackBytes + page;
  void* base = mmap(nullptr, stride * kMaxThreadsPerBlock, PROT_READ | PROT_WRITE,
                    MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (base == MAP_FAILED) return false;
  // A thread that overflows its stack hits its guard page and faults, instead
  // of silently writing into the neighbouring fiber's stack.
  for (int i = 0; i < kMaxThreadsPerBlock; ++i) mprotect(static_cast<char*>(base) + i * stride, page, PROT_NONE);
  rt.stack_region = static_cast<char*>(base);
  rt.stack_stride = stride;
  return true;
}

bool on_a_stack(uintptr_t a) {
  const auto lo = reinterpret_cast<uintptr_t>(rt.stack_region);
  return a - lo < rt.stack_stride * kMaxThreadsPerBlock;
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
void complete_barrier_if_ready();

void fiber_main(Fiber* f) {
  asan_finish_switch(nullptr, &rt.scheduler_stack, &rt.scheduler_stack_size);
  rt.body(rt.bound);
  f->state = State::kDone;
  ++rt.exited;
  complete_after_exit(f->warp);
  complete_barrier_if_ready();  // an exited thread no longer counts at a barrier
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
  sp[1] = sp[2] = sp[3] = 0;                                   // r15, r14, r13
  sp[4] = reinterpret_cast<uint64_t>(&fiber_main);             // r12: called by the trampoline
  sp[5] = reinterpret_cast<uint64_t>(&f);                      // rbx: its argument
  sp[6] = 0;                                                   // rbp
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

// Last runnable thread at index <= from, or -1.
int previous_runnable(int from) {
  for (int w = from / 64; w >= 0; --w) {
    uint64_t bits = rt.runnable[w];
    if (w == from / 64 && from % 64 != 63) bits &= (uint64_t{1} << (from % 64 + 1)) - 1;
    if (bits) return w * 64 + 63 - __builtin_clzll(bits);
  }
  return -1;
}

uint64_t next_random() {  // splitmix64
  uint64_t z = (rt.rng += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

int pick(int previous) {
  switch (rt.order) {
    case Order::kWarpAhead: return next_runnable(0);
    case Order::kReverse: {
      const int before = previous > 0 ? previous_runnable(previous - 1) : -1;
      return before >= 0 ? before : previous_runnable(rt.nthreads - 1);
    }
    case Order::kRandom:
    case Order::kStress: {
      int count = 0;
      const int words = (rt.nthreads + 63) / 64;
      for (int w = 0; w < words; ++w) count += __builtin_popcountll(rt.runnable[w]);
      if (count == 0) return -1;
      int k = static_cast<int>(next_random() % static_cast<uint64_t>(count));
      for (int w = 0; w < words; ++w) {
        uint64_t bits = rt.runnable[w];
        const int c = __builtin_popcountll(bits);
        if (k >= c) {
          k -= c;
          continue;
        }
        for (; k > 0; --k) bits &= bits - 1;
        return w * 64 + __builtin_ctzll(bits);
      }
      return -1;
    }
    case Order::kRoundRobin:
    default: {
      const int after = previous + 1 < rt.nthreads ? next_runnable(previous + 1) : -1;
      return after >= 0 ? after : next_runnable(0);
    }
  }
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
  // Only __syncwarp() orders memory among the lanes that meet; a shuffle or a
  // vote exchanges registers and orders no memory access.
  if (rt.detect_races && kind == Collective::kSyncWarp) races::collective(warp, present);
  for (unsigned m = present; m; m &= m - 1) {
    Fiber& lane = rt.fibers[base + __builtin_ctz(m)];
    if (kind == Collective::kBallot) {
      lane.result = ballot;
    } else if (kind == Collective::kAny) {
      lane.result = ballot != 0;
    } else if (kind == Collective::kAll) {
      lane.result = ballot == present;  // the live lanes of the mask
    } else if (lane.src < 0) {
      lane.result = lane.payload;
    } else if ((present >> lane.src & 1u) == 0) {
      const char* why = (mask >> lane.src & 1u) == 0     ? "is not in the mask"
                        : base + lane.src >= rt.nthreads ? "does not exist in this block"
                                                         : "has exited";
      fail_as(lane, cudaErrorIllegalInstruction,
              format("%s(mask=0x%08x): lane %d reads lane %d, which %s (undefined on the GPU)", collective_name(kind),
                     mask, lane.lane, lane.src, why)
                  .c_str());
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
    return head +
           format("%zu of %d threads wait at __syncthreads(), which these never reach: ", at_barrier.size(),
                  rt.nthreads) +
           thread_list(elsewhere, 8);
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
    return head +
           format("%s waits at %s(mask=0x%08x) for lanes that never arrive: ", thread_name(f).c_str(),
                  collective_name(f.kind), f.mask) +
           thread_list(missing, 8);
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
  rt.exited = 0;
  if (rt.detect_races) {
    const uint32_t linear = block_idx.x + grid.x * (block_idx.y + grid.y * block_idx.z);
    races::begin_block(linear, rt.shared_lo, rt.shared_hi);
  }
  for (int i = 0; i < rt.nthreads; ++i) {
    Fiber& f = rt.fibers[i];
    f.stack = rt.stack_region + i * rt.stack_stride + (rt.stack_stride - kStackBytes);
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
  int previous = rt.order == Order::kReverse ? rt.nthreads : -1;
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

// The barrier completes when every live thread waits at it: each gets the
// predicate count (low half of its result) and the number that arrived (high half).
void complete_barrier_if_ready() {
  if (rt.at_barrier == 0 || rt.at_barrier != rt.nthreads - rt.exited) return;
  std::vector<int> arrived;
  arrived.reserve(rt.at_barrier);
  for (int i = 0; i < rt.nthreads; ++i) {
    if (rt.fibers[i].state == State::kAtBarrier) arrived.push_back(i);
  }
  if (rt.detect_races) races::barrier(arrived.data(), static_cast<int>(arrived.size()));
  const uint64_t result = static_cast<uint64_t>(rt.at_barrier) << 32 | static_cast<uint32_t>(rt.barrier_count);
  for (int i : arrived) {
    rt.fibers[i].state = State::kRunnable;
    rt.fibers[i].result = result;
    set_runnable(i);
  }
  rt.at_barrier = 0;
  rt.barrier_count = 0;
}

// Source location of `pc` (relative to this library), as "file:line (function)", via addr2line.
std::string source_line(uint32_t pc) {
  Dl_info info{};
  if (dladdr(reinterpret_cast<const void*>(&source_line), &info) == 0 || info.dli_fname == nullptr) return "?";
  // The pc is a return address from the hook: the access is the instruction before it.
  const std::string command = format("addr2line -C -f -i -e '%s' 0x%x 2>/dev/null", info.dli_fname, pc - 1);
  FILE* out = popen(command.c_str(), "r");
  if (out == nullptr) return "?";
  std::vector<std::string> lines;
  char buf[2048];
  while (std::fgets(buf, sizeof buf, out) != nullptr) {
    std::string l(buf);
    while (!l.empty() && (l.back() == '\n' || l.back() == '\r')) l.pop_back();
    lines.push_back(l);
  }
  pclose(out);
  // Pairs of (function, file:line), innermost first; the emulator's own
  // headers (an inlined __ldg, say) are skipped for the kernel's line.
  std::string chosen, inner;
  for (size_t i = 0; i + 1 < lines.size(); i += 2) {
    std::string file = lines[i + 1];
    const size_t space = file.find(' ');
    if (space != std::string::npos) file.erase(space);
    const size_t slash = file.rfind('/');
    const std::string shown = slash == std::string::npos ? file : file.substr(slash + 1);
    if (inner.empty()) inner = shown;
    if (shown.rfind("simt.h:", 0) == 0) continue;
    std::string function = lines[i];
    const size_t paren = function.find('(');
    if (paren != std::string::npos) function.erase(paren);
    chosen = shown + " (" + function + ")";
    break;
  }
  return chosen.empty() ? (inner.empty() ? "?" : inner) : chosen;
}

// Name of the shared variable holding `address` and the offset in it, from the library's symbol table.
std::string shared_variable(uintptr_t address) {
  Dl_info info{};
  if (dladdr(reinterpret_cast<const void*>(&shared_variable), &info) == 0 || info.dli_fname == nullptr) return "?";
  const uintptr_t offset = address - reinterpret_cast<uintptr_t>(info.dli_fbase);
  const std::string command = format("nm -C -S --defined-only '%s' 2>/dev/null", info.dli_fname);
  FILE* out = popen(command.c_str(), "r");
  if (out == nullptr) return "?";
  std::string found = "?";
  char buf[4096];
  while (std::fgets(buf, sizeof buf, out) != nullptr) {
    unsigned long long start = 0, size = 0;
    char type = 0;
    int used = 0;
    if (std::sscanf(buf, "%llx %llx %c %n", &start, &size, &type, &used) < 3) continue;
    if (offset < start || offset >= start + size) continue;
    std::string name(buf + used);
    while (!name.empty() && (name.back() == '\n' || name.back() == ' ')) name.pop_back();
    const size_t colons = name.rfind("::");
    found = format("__shared__ %s, byte %llu", (colons == std::string::npos ? name : name.substr(colons + 2)).c_str(),
                   static_cast<unsigned long long>(offset - start));
    break;
  }
  pclose(out);
  return found;
}

// The pointer argument `address` most likely lies in: the closest one at or below it.
std::string global_buffer(uintptr_t address) {
  const std::pair<int, const void*>* best = nullptr;
  for (const auto& p : rt.pointers) {
    const auto base = reinterpret_cast<uintptr_t>(p.second);
    if (base <= address && (best == nullptr || base > reinterpret_cast<uintptr_t>(best->second))) best = &p;
  }
  if (best == nullptr) return "global memory";
  return format("global memory, byte %llu of kernel argument %d",
                static_cast<unsigned long long>(address - reinterpret_cast<uintptr_t>(best->second)), best->first);
}

std::string thread_of(uint32_t thread) {
  const uint32_t n = static_cast<uint32_t>(rt.nthreads);
  const uint32_t block = thread / n, t = thread % n;
  const dim3 b = rt.fibers[0].index.block_dim;
  const dim3 g = rt.fibers[0].index.grid_dim;
  return format("thread (%u,%u,%u) [warp %u lane %u] of block (%u,%u,%u)", t % b.x, t / b.x % b.y, t / (b.x * b.y),
                t / kWarpSize, t % kWarpSize, block % g.x, block / g.x % g.y, block / (g.x * g.y));
}

[[noreturn]] void report_conflict(const races::Conflict& c, size_t size) {
  const std::string where_ = c.shared ? shared_variable(c.address) : global_buffer(c.address);
  std::string what;
  if (c.kind == races::Conflict::kUninitialisedShared) {
    what = format(
        "read of uninitialised shared memory in %s: %s reads %zu bytes at %p (%s) at %s, which no thread "
        "of its block has written",
        rt.kernel, thread_of(c.later.thread).c_str(), size, reinterpret_cast<void*>(c.address), where_.c_str(),
        source_line(c.later.pc).c_str());
  } else {
    what = format(
        "data race in %s on %s memory at %p (%s): %s by %s at %s and %s by %s at %s, with no barrier, "
        "__syncwarp() or fence between them",
        rt.kernel, c.shared ? "shared" : "global", reinterpret_cast<void*>(c.address), where_.c_str(),
        c.earlier.write ? "write" : "read", thread_of(c.earlier.thread).c_str(), source_line(c.earlier.pc).c_str(),
        c.later.write ? "write" : "read", thread_of(c.later.thread).c_str(), source_line(c.later.pc).c_str());
  }
  record_error(cudaErrorLaunchFailure, what);
  rt.running->state = State::kDone;
  switch_to_scheduler(/*exiting=*/true);
  std::abort();
}

uint32_t code_offset(const void* pc) {
  static const uintptr_t base = [] {
    Dl_info info{};
    dladdr(reinterpret_cast<const void*>(&code_offset), &info);
    return reinterpret_cast<uintptr_t>(info.dli_fbase);
  }();
  return static_cast<uint32_t>(reinterpret_cast<uintptr_t>(pc) - base);
}

// A memory access of the running thread, from the instrumented kernel code.
void memory_access(const void* p, size_t size, bool write, const void* pc) {
  Fiber* f = rt.running;
  if (f == nullptr || rt.failed) return;  // host code of the kernel translation unit, or an abandoned block
  const auto a = reinterpret_cast<uintptr_t>(p);
  if (on_a_stack(a)) return;  // a thread's own locals
  const auto bound = reinterpret_cast<uintptr_t>(rt.bound);
  if (a - bound < rt.bound_bytes) return;  // the launch's arguments, read by every thread
  const auto fibers = reinterpret_cast<uintptr_t>(rt.fibers.data());
  if (a - fibers < rt.fibers.size() * sizeof(Fiber)) return;  // threadIdx and friends
  const bool shared = a - rt.shared_lo < rt.shared_hi - rt.shared_lo;
  if (shared && rt.order == Order::kStress) {  // let another thread in between any two shared accesses
    f->state = State::kRunnable;
    set_runnable(f->linear);
    switch_to_scheduler(false);
  }
  if (!rt.detect_races) return;
  if (const races::Conflict* c = races::access(f->linear, a, size, write, shared, code_offset(pc))) {
    report_conflict(*c, size);
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

int sync_threads(BarrierSite site, int predicate, int* arrived) {
  Fiber& f = *rt.running;
  if (rt.at_barrier == 0) {
    rt.first_at_barrier = f.linear;
  } else {
    // Every waiting thread is at the first one's site (the first thread elsewhere fails here).
    const Fiber* waiting = &rt.fibers[rt.first_at_barrier];
    if (waiting->barrier.line != site.line || std::strcmp(waiting->barrier.file, site.file) != 0) {
      const dim3 b = f.index.block_idx;
      record_error(cudaErrorLaunchFailure,
                   format("barriers at different lines in %s, block (%u,%u,%u): %s reaches __syncthreads() at %s:%d "
                          "while %s waits at __syncthreads() at %s:%d; the threads of a block must all reach the "
                          "same barrier (on the GPU: a hang or a wrong result)",
                          rt.kernel, b.x, b.y, b.z, thread_name(f).c_str(), base_name(site.file), site.line,
                          thread_name(*waiting).c_str(), base_name(waiting->barrier.file), waiting->barrier.line));
      f.state = State::kDone;
      switch_to_scheduler(/*exiting=*/true);
      std::abort();
    }
  }
  f.barrier = site;
  f.state = State::kAtBarrier;
  rt.barrier_count += predicate != 0;
  ++rt.at_barrier;
  complete_barrier_if_ready();
  switch_to_scheduler(false);
  if (arrived != nullptr) *arrived = static_cast<int>(f.result >> 32);
  return static_cast<int>(f.result & 0xffffffffu);
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
void set_seed(uint64_t seed) { rt.seed = seed; }

void thread_fence() {
  if (rt.detect_races && rt.running != nullptr) races::fence(rt.running->linear);
}

void atomic_sync(const void* p) {
  if (rt.detect_races && rt.running != nullptr) races::atomic(rt.running->linear, reinterpret_cast<uintptr_t>(p));
}
void set_max_grid_x(int64_t cap) { rt.max_grid_x = cap; }

void run_grid(const void* kernel_address, dim3 grid, dim3 block, size_t shared_bytes, void (*body)(void*),
              const void* bound, size_t bound_bytes, const std::pair<int, const void*>* pointers, int npointers) {
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
                                               "emulator does not provide",
                                               rt.kernel, shared_bytes));
    return;
  }
  find_shared_segment();
  if (!reserve_stacks()) {
    record_error(cudaErrorMemoryAllocation, "no memory for the emulated threads' stacks");
    return;
  }
  if (rt.fibers.size() < kMaxThreadsPerBlock) rt.fibers.resize(kMaxThreadsPerBlock);
  rt.body = body;
  rt.bound = const_cast<void*>(bound);
  rt.bound_bytes = bound_bytes;
  rt.pointers.assign(pointers, pointers + npointers);
  rt.rng = rt.seed;  // each launch replays from the seed
  if (rt.detect_races) races::begin_launch(static_cast<int>(threads));
  // The blocks run one at a time, in index order, reversed, or shuffled.
  const dim3 run = record.grid_run;
  std::vector<uint32_t> blocks(static_cast<size_t>(run.x) * run.y * run.z);
  std::iota(blocks.begin(), blocks.end(), 0u);
  if (rt.order == Order::kReverse) std::reverse(blocks.begin(), blocks.end());
  if (rt.order == Order::kRandom || rt.order == Order::kStress) {
    for (size_t i = blocks.size(); i > 1; --i) std::swap(blocks[i - 1], blocks[next_random() % i]);
  }
  for (size_t i = 0; i < blocks.size() && !rt.failed; ++i) {
    const uint32_t b = blocks[i];
    run_block(run, block, dim3(b % run.x, b / run.x % run.y, b / (run.x * run.y)));
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

__attribute__((visibility("default"))) void simt_set_seed(uint64_t seed) { simt::set_seed(seed); }

// 1: check every access of the instrumented kernels for races (a library built without
// -fsanitize=thread has nothing to check); 0: off.
__attribute__((visibility("default"))) void simt_set_race_detection(int on) { simt::rt.detect_races = on != 0; }

// The compiler's ThreadSanitizer instrumentation of the kernel translation unit
// calls these; they feed the race detector instead of the ThreadSanitizer runtime
// (left out where the runtime itself is linked, -fsanitize=thread, to compare the two).
#if !defined(__SANITIZE_THREAD__)
#define SIMT_HOOK(bytes)                                                                                            \
  void __tsan_read##bytes(void* p) { simt::memory_access(p, bytes, false, __builtin_return_address(0)); }           \
  void __tsan_write##bytes(void* p) { simt::memory_access(p, bytes, true, __builtin_return_address(0)); }           \
  void __tsan_unaligned_read##bytes(void* p) { simt::memory_access(p, bytes, false, __builtin_return_address(0)); } \
  void __tsan_unaligned_write##bytes(void* p) { simt::memory_access(p, bytes, true, __builtin_return_address(0)); }
SIMT_HOOK(1)
SIMT_HOOK(2)
SIMT_HOOK(4)
SIMT_HOOK(8)
SIMT_HOOK(16)
#undef SIMT_HOOK
void __tsan_read_range(void* p, unsigned long size) {
  simt::memory_access(p, size, false, __builtin_return_address(0));
}
void __tsan_write_range(void* p, unsigned long size) {
  simt::memory_access(p, size, true, __builtin_return_address(0));
}
void __tsan_init(void) {}
void __tsan_func_entry(void*) {}
void __tsan_func_exit(void) {}
void __tsan_vptr_update(void**, void*) {}
void __tsan_vptr_read(void**) {}
#endif

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
