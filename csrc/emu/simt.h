// SIMT emulation of the CUDA execution model on the CPU, for testing kernels
// on machines without a GPU.
//
// Force-included (-include simt.h) when a host C++17 compiler builds a .cu
// file: the kernel text stays as it is, only the launch goes through
// launch_kernel() (csrc/core/cuda_launch.h), which calls simt::launch().
//
// What a kernel sees:
//   * threadIdx / blockIdx / blockDim / gridDim / warpSize of the CUDA thread
//     that is running: every CUDA thread of a block is a fiber with its own
//     stack (simt.cpp), so a thread really stops at a barrier or a warp
//     collective while the others run;
//   * __syncthreads(): a barrier of the block's threads that have not
//     exited (since Volta, an exited thread no longer counts); a barrier
//     that a live thread never reaches ends the launch with an error naming
//     the kernel, block and threads, instead of hanging, and so do threads
//     of one block at __syncthreads() calls of different source lines (the
//     two branches of an `if`), naming both lines;
//   * __shfl_*_sync / __ballot_sync / __any_sync / __all_sync / __syncwarp: a
//     lane waits until every lane of the mask that has not exited is at the
//     same collective, and reads the others' values as they were at that
//     point. A lane outside its own mask, lanes of one mask waiting at
//     different collectives, or a read from a lane that is not in the mask or
//     has exited (undefined on the GPU) end the launch with an error;
//     __any_sync / __all_sync vote over the lanes of the mask that are live;
//     a shuffle of `width` < 32 lanes reads an earlier segment's lane and
//     gets its own value for a later one, as the programming guide says;
//   * __shared__ variables: function-local statics, one copy per library;
//     launches are serialised and the blocks of a launch run one after
//     another, so each block has the copy to itself while it runs. With the
//     race detector on, each block's shared memory starts as 0xff bytes (NaN
//     in every float type, -1 in integers; written on a granule's first
//     access in the block), and a read of a slot no thread of the block has
//     written is reported with its line;
//   * cache-hint loads and stores (__ldg, __ldcs, __stcs, ...): plain memory
//     accesses that check the natural alignment of the word, as the hardware
//     does (a misaligned 16-byte access is a fault there, not a slow load);
//   * half / bfloat16 conversions: CUDA's own cuda_fp16.h / cuda_bf16.h,
//     whose conversion functions are host-callable.
//   * atomics and fences: trivially atomic, since one thread runs at a time;
//     for the race detector, an atomic after a __threadfence() releases what
//     the thread did before the fence (not after it), and every atomic
//     acquires what was released at its address. Shuffles and votes order
//     no memory access; only __syncwarp() does among the lanes that meet.
// Scheduling (set_order): a thread yields at barriers, warp collectives and
// exit; the orders pick the next thread differently (lowest first, in turn,
// highest first, seeded random), and the stress order also yields at every
// shared-memory access. Where the kernel translation unit is built with
// -fsanitize=thread, its memory accesses reach a happens-before race detector
// (race_detector.h) that reports two unordered accesses whatever the order.
// Not emulated: timing, memory coalescing, real concurrency of warps, the
// hardware memory model beyond barriers, collectives and fences (there is one
// block in flight at a time), dynamic (extern) shared memory, inline PTX.
#pragma once

#define SIMT_EMULATOR 1

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <tuple>
#include <type_traits>
#include <utility>

namespace simt {

constexpr int kWarpSize = 32;
constexpr int kMaxThreadsPerBlock = 1024;

// The CUDA thread a fiber runs.
struct ThreadIndex {
  uint3 thread_idx;
  uint3 block_idx;
  dim3 block_dim;
  dim3 grid_dim;
};

const ThreadIndex& current();

// Ends the launch with `error`; `what` says what the kernel did. Never returns.
[[noreturn]] void fail(cudaError_t error, const char* what);

// Ends the launch when `p` is not a multiple of `alignment` (a fault on the GPU).
void check_alignment(const void* p, size_t alignment, const char* op);

// Warp collectives. `payload` is the lane's value (up to 8 bytes); for
// shuffles `src_lane` is the lane it reads (-1: its own value, as when
// __shfl_down_sync reads past the end). Returns the value read; for a ballot
// the bit mask of the lanes whose payload was non-zero; for any/all 0 or 1.
enum class Collective : int { kShuffle, kShuffleXor, kShuffleDown, kShuffleUp, kBallot, kSyncWarp, kAny, kAll };
uint64_t warp_collective(Collective kind, unsigned mask, uint64_t payload, int src_lane);

// Where a kernel calls __syncthreads() (file and line of the call).
struct BarrierSite {
  const char* file;
  int line;
};

// Barrier of the block's live threads; returns how many arrived with a non-zero
// predicate, and in `arrived` (if given) how many arrived. Threads waiting at
// another site end the launch with an error naming both sites.
int sync_threads(BarrierSite site, int predicate, int* arrived = nullptr);

// Release-acquire edges for the race detector: a fence arms the thread's next
// atomics as releases; an atomic on `p` acquires what earlier releases on `p` published.
void thread_fence();
void atomic_sync(const void* p);

// Test controls (also exported with C linkage by simt.cpp, for ctypes).
enum class Order : int {
  kRoundRobin = 0,  // each thread in turn runs to its next barrier or collective
  kWarpAhead = 1,   // the lowest runnable thread always runs: warp 0 gets as far as the barriers let it
  kReverse = 2,     // in turn from the highest index down, and the blocks from the last one
  kRandom = 3,      // a seeded random runnable thread at every yield point, the blocks in a random order
  kStress = 4,      // kRandom, and a thread also yields at every shared-memory access
};
void set_order(Order order);
// Seed of the random orders: the same seed replays the same interleaving.
void set_seed(uint64_t seed);
// Caps gridDim.x (0: no cap), so that grid-stride loops run more than once.
void set_max_grid_x(int64_t cap);

// Runs `body(bound)` once per CUDA thread of the grid; errors go to cudaGetLastError().
// `bound` (`bound_bytes` long) holds the launch's arguments; `pointers` lists the pointer arguments
// (position, value), so that a race report can name the buffer.
void run_grid(const void* kernel_address, dim3 grid, dim3 block, size_t shared_bytes, void (*body)(void*),
              const void* bound, size_t bound_bytes, const std::pair<int, const void*>* pointers, int npointers);

template <typename T>
void note_pointer(std::pair<int, const void*>* out, int& n, int position, const T& value) {
  if constexpr (std::is_pointer<T>::value) out[n++] = {position, static_cast<const void*>(value)};
}

template <typename... Params>
struct BoundKernel {
  void (*kernel)(Params...);
  std::tuple<std::decay_t<Params>...> args;
  static void run(void* self) {
    auto* b = static_cast<BoundKernel*>(self);
    std::apply(b->kernel, b->args);  // each thread gets the launch's copy of the arguments, as on the GPU
  }
};

template <typename... Params, typename... Args>
void launch(void (*kernel)(Params...), dim3 grid, dim3 block, size_t shared_bytes, cudaStream_t /*stream*/,
            Args&&... args) {
  static_assert(sizeof...(Params) == sizeof...(Args), "kernel launched with the wrong number of arguments");
  BoundKernel<Params...> bound{kernel, std::tuple<std::decay_t<Params>...>(std::forward<Args>(args)...)};
  std::pair<int, const void*> pointers[sizeof...(Params) + 1];
  int npointers = 0;
  std::apply(
      [&](const auto&... a) {
        int position = 0;
        (note_pointer(pointers, npointers, position++, a), ...);
      },
      bound.args);
  run_grid(reinterpret_cast<const void*>(kernel), grid, block, shared_bytes, &BoundKernel<Params...>::run, &bound,
           sizeof bound, pointers, npointers);
}

template <typename T>
uint64_t to_payload(T v) {
  static_assert(std::is_trivially_copyable<T>::value && sizeof(T) <= 8, "warp shuffles move values of up to 8 bytes");
  uint64_t p = 0;
  std::memcpy(&p, &v, sizeof(T));
  return p;
}

template <typename T>
T from_payload(uint64_t p) {
  T v;
  std::memcpy(&v, &p, sizeof(T));
  return v;
}

// Lane of the running thread within its warp (warps are formed from the linear thread index).
int lane_id();

// A GPU load or store of 2, 4, 8 or 16 bytes must be aligned to its size; other types to their alignment.
template <typename P>
constexpr size_t access_alignment() {
  return (sizeof(P) & (sizeof(P) - 1)) == 0 && sizeof(P) <= 16 ? sizeof(P) : alignof(P);
}

template <typename P>
__attribute__((always_inline)) inline P load(const P* p, const char* op) {
  check_alignment(p, access_alignment<P>(), op);
  return *p;
}

template <typename P>
__attribute__((always_inline)) inline void store(P* p, const P& v, const char* op) {
  check_alignment(p, access_alignment<P>(), op);
  *p = v;
}

// Lane a shuffle of `width`-lane segments reads (-1: its own value).
inline int segment_lane(int lane, int target, int width) {
  const int base = lane & ~(width - 1);
  return base + (target & (width - 1));
}

}  // namespace simt

// --- built-in variables ----------------------------------------------------------------

#define threadIdx (::simt::current().thread_idx)
#define blockIdx (::simt::current().block_idx)
#define blockDim (::simt::current().block_dim)
#define gridDim (::simt::current().grid_dim)
#define warpSize (::simt::kWarpSize)

// --- qualifiers ---------------------------------------------------------------------------

// The kernels' statics are their __shared__ variables: the runtime tells shared
// from global memory by the library's writable segment, where they live.
#undef __shared__
#define __shared__ static
#ifndef __launch_bounds__
#define __launch_bounds__(...)
#endif

// --- barriers and warp collectives ------------------------------------------------------

// Each call passes its own source line (the default arguments are evaluated
// at the call): CUDA allows __syncthreads() in conditional code only where
// the whole block takes the same branch, so threads of one block waiting at
// barriers of different lines is an error, not one barrier.
#define SIMT_CALL_SITE const char *file = __builtin_FILE(), int line = __builtin_LINE()
inline void __syncthreads(SIMT_CALL_SITE) { ::simt::sync_threads({file, line}, 0); }
inline int __syncthreads_count(int predicate, SIMT_CALL_SITE) { return ::simt::sync_threads({file, line}, predicate); }
inline int __syncthreads_and(int predicate, SIMT_CALL_SITE) {
  int arrived = 0;
  return ::simt::sync_threads({file, line}, predicate, &arrived) == arrived;
}
inline int __syncthreads_or(int predicate, SIMT_CALL_SITE) {
  return ::simt::sync_threads({file, line}, predicate) != 0;
}
#undef SIMT_CALL_SITE

// One emulated thread runs at a time and yields only at the points above, so
// memory is sequentially consistent and every read-modify-write is atomic. The
// atomics' own accesses are not instrumented (atomics never race with each
// other); what they order is declared to the race detector (atomic_sync).
#define SIMT_ATOMIC __attribute__((no_sanitize_thread))
inline void __threadfence() { ::simt::thread_fence(); }
inline void __threadfence_block() { ::simt::thread_fence(); }
template <typename T>
SIMT_ATOMIC T atomicAdd(T* p, T v) {
  ::simt::atomic_sync(p);
  const T old = *p;
  *p = old + v;
  return old;
}
template <typename T>
SIMT_ATOMIC T atomicMax(T* p, T v) {
  ::simt::atomic_sync(p);
  const T old = *p;
  *p = old < v ? v : old;
  return old;
}
template <typename T>
SIMT_ATOMIC T atomicMin(T* p, T v) {
  ::simt::atomic_sync(p);
  const T old = *p;
  *p = v < old ? v : old;
  return old;
}
template <typename T>
SIMT_ATOMIC T atomicExch(T* p, T v) {
  ::simt::atomic_sync(p);
  const T old = *p;
  *p = v;
  return old;
}
template <typename T>
SIMT_ATOMIC T atomicCAS(T* p, T compare, T v) {
  ::simt::atomic_sync(p);
  const T old = *p;
  if (old == compare) *p = v;
  return old;
}
// atomicInc as documented: ((old >= limit) ? 0 : old + 1).
SIMT_ATOMIC inline unsigned atomicInc(unsigned* p, unsigned limit) {
  ::simt::atomic_sync(p);
  const unsigned old = *p;
  *p = old >= limit ? 0u : old + 1u;
  return old;
}

inline void __syncwarp(unsigned mask = 0xffffffffu) {
  ::simt::warp_collective(::simt::Collective::kSyncWarp, mask, 0, -1);
}

template <typename T>
T __shfl_sync(unsigned mask, T var, int src_lane, int width = ::simt::kWarpSize) {
  const int src = ::simt::segment_lane(::simt::lane_id(), src_lane, width);
  return ::simt::from_payload<T>(
      ::simt::warp_collective(::simt::Collective::kShuffle, mask, ::simt::to_payload(var), src));
}

template <typename T>
T __shfl_xor_sync(unsigned mask, T var, int lane_mask, int width = ::simt::kWarpSize) {
  const int lane = ::simt::lane_id();
  const int target = lane ^ lane_mask;
  // A target in a later segment of `width` lanes reads the lane's own value;
  // one in an earlier segment is read (CUDA programming guide, __shfl_xor_sync).
  const int src = target <= (lane | (width - 1)) ? target : -1;
  return ::simt::from_payload<T>(
      ::simt::warp_collective(::simt::Collective::kShuffleXor, mask, ::simt::to_payload(var), src));
}

template <typename T>
T __shfl_down_sync(unsigned mask, T var, unsigned delta, int width = ::simt::kWarpSize) {
  const int lane = ::simt::lane_id();
  const int in_segment = (lane & (width - 1)) + static_cast<int>(delta);
  const int src = in_segment < width ? lane + static_cast<int>(delta) : -1;
  return ::simt::from_payload<T>(
      ::simt::warp_collective(::simt::Collective::kShuffleDown, mask, ::simt::to_payload(var), src));
}

template <typename T>
T __shfl_up_sync(unsigned mask, T var, unsigned delta, int width = ::simt::kWarpSize) {
  const int lane = ::simt::lane_id();
  const int in_segment = (lane & (width - 1)) - static_cast<int>(delta);
  const int src = in_segment >= 0 ? lane - static_cast<int>(delta) : -1;
  return ::simt::from_payload<T>(
      ::simt::warp_collective(::simt::Collective::kShuffleUp, mask, ::simt::to_payload(var), src));
}

inline unsigned __ballot_sync(unsigned mask, int predicate) {
  return static_cast<unsigned>(::simt::warp_collective(::simt::Collective::kBallot, mask, predicate != 0, -1));
}

// Votes over the live lanes of the mask: an exited lane neither blocks nor fails __all_sync.
inline int __any_sync(unsigned mask, int predicate) {
  return static_cast<int>(::simt::warp_collective(::simt::Collective::kAny, mask, predicate != 0, -1));
}

inline int __all_sync(unsigned mask, int predicate) {
  return static_cast<int>(::simt::warp_collective(::simt::Collective::kAll, mask, predicate != 0, -1));
}

// --- cache-hint loads and stores: plain accesses with the hardware's alignment rule -----
// Always inlined: the access is then the kernel's own instruction, so a race
// report's line table leads from it to the kernel's source line (an
// out-of-line copy, which a large kernel file at -O1 gets, has only this
// header's line to show).
#define SIMT_INLINE __attribute__((always_inline)) inline

template <typename T>
SIMT_INLINE T __ldg(const T* p) {
  return ::simt::load(p, "__ldg");
}
template <typename T>
SIMT_INLINE T __ldca(const T* p) {
  return ::simt::load(p, "__ldca");
}
template <typename T>
SIMT_INLINE T __ldcg(const T* p) {
  return ::simt::load(p, "__ldcg");
}
template <typename T>
SIMT_INLINE T __ldcs(const T* p) {
  return ::simt::load(p, "__ldcs");
}
template <typename T>
SIMT_INLINE T __ldlu(const T* p) {
  return ::simt::load(p, "__ldlu");
}
template <typename T>
SIMT_INLINE T __ldcv(const T* p) {
  return ::simt::load(p, "__ldcv");
}
template <typename T>
SIMT_INLINE void __stwb(T* p, T v) {
  ::simt::store(p, v, "__stwb");
}
template <typename T>
SIMT_INLINE void __stcg(T* p, T v) {
  ::simt::store(p, v, "__stcg");
}
template <typename T>
SIMT_INLINE void __stcs(T* p, T v) {
  ::simt::store(p, v, "__stcs");
}
template <typename T>
SIMT_INLINE void __stwt(T* p, T v) {
  ::simt::store(p, v, "__stwt");
}

// --- device math without a host counterpart -------------------------------------------------

inline float rsqrtf(float x) { return 1.0f / std::sqrt(x); }
inline double rsqrt(double x) { return 1.0 / std::sqrt(x); }
inline float __fdividef(float a, float b) { return a / b; }
inline float __frsqrt_rn(float x) { return 1.0f / std::sqrt(x); }
inline float __frcp_rn(float x) { return 1.0f / x; }
inline float __fsqrt_rn(float x) { return std::sqrt(x); }
inline float __fadd_rn(float a, float b) { return a + b; }
inline float __fmul_rn(float a, float b) { return a * b; }
inline float __fmaf_rn(float a, float b, float c) { return std::fma(a, b, c); }
inline double __dadd_rn(double a, double b) { return a + b; }
inline double __dmul_rn(double a, double b) { return a * b; }
inline double __fma_rn(double a, double b, double c) { return std::fma(a, b, c); }
