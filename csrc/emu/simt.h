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
//   * __syncthreads(): a barrier of the block's threads; a barrier that not
//     every thread reaches ends the launch with an error naming the kernel,
//     block and threads, instead of hanging;
//   * __shfl_*_sync / __ballot_sync / __any_sync / __all_sync / __syncwarp: a
//     lane waits until every lane of the mask that has not exited is at the
//     same collective, and reads the others' values as they were at that
//     point. A lane outside its own mask, lanes of one mask waiting at
//     different collectives, or a read from a lane that is not in the mask or
//     has exited (undefined on the GPU) end the launch with an error;
//   * __syncthreads() is stricter than some GPUs: a thread that exits while
//     others wait at a barrier is reported as a deadlock;
//   * __shared__ variables: function-local statics, one copy per process;
//     launches are serialised and the blocks of a launch run one after
//     another, so each block has the copy to itself while it runs. Like the
//     hardware's, it is not cleared between blocks: a slot read before it is
//     written holds what an earlier block or row left there;
//   * cache-hint loads and stores (__ldg, __ldcs, __stcs, ...): plain memory
//     accesses that check the natural alignment of the word, as the hardware
//     does (a misaligned 16-byte access is a fault there, not a slow load);
//   * half / bfloat16 conversions: CUDA's own cuda_fp16.h / cuda_bf16.h,
//     whose conversion functions are host-callable.
//   * atomics and fences: trivially atomic, since one thread runs at a time.
// Not emulated: timing, memory coalescing, real concurrency of warps, the
// hardware memory model (there is one block in flight at a time), dynamic
// (extern) shared memory, inline PTX.
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
// __shfl_down_sync reads past the end). Returns the value read, or for
// ballot/any/all the bit mask of the lanes whose payload was non-zero.
enum class Collective : int { kShuffle, kShuffleXor, kShuffleDown, kShuffleUp, kBallot, kSyncWarp };
uint64_t warp_collective(Collective kind, unsigned mask, uint64_t payload, int src_lane);

// Barrier of the block; returns how many threads arrived with a non-zero predicate.
int sync_threads(int predicate);

// Test controls (also exported with C linkage by simt.cpp, for ctypes).
enum class Order : int {
  kRoundRobin = 0,  // each thread in turn runs to its next barrier or collective
  kWarpAhead = 1,   // the lowest runnable thread always runs: warp 0 gets as far as the barriers let it
};
void set_order(Order order);
// Caps gridDim.x (0: no cap), so that grid-stride loops run more than once.
void set_max_grid_x(int64_t cap);

// Runs `body(bound)` once per CUDA thread of the grid; errors go to cudaGetLastError().
void run_grid(const void* kernel_address, dim3 grid, dim3 block, size_t shared_bytes, void (*body)(void*),
              void* bound);

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
  run_grid(reinterpret_cast<const void*>(kernel), grid, block, shared_bytes, &BoundKernel<Params...>::run, &bound);
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
P load(const P* p, const char* op) {
  check_alignment(p, access_alignment<P>(), op);
  return *p;
}

template <typename P>
void store(P* p, const P& v, const char* op) {
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

#undef __shared__
#define __shared__ static
#ifndef __launch_bounds__
#define __launch_bounds__(...)
#endif

// --- barriers and warp collectives ------------------------------------------------------

inline void __syncthreads() { ::simt::sync_threads(0); }
inline int __syncthreads_count(int predicate) { return ::simt::sync_threads(predicate); }
inline int __syncthreads_and(int predicate) {
  return ::simt::sync_threads(predicate) == static_cast<int>(blockDim.x * blockDim.y * blockDim.z);
}
inline int __syncthreads_or(int predicate) { return ::simt::sync_threads(predicate) != 0; }

// One emulated thread runs at a time and only yields at barriers and warp
// collectives, so memory is sequentially consistent and every read-modify-write is atomic.
inline void __threadfence() {}
inline void __threadfence_block() {}
template <typename T>
T atomicAdd(T* p, T v) {
  const T old = *p;
  *p = old + v;
  return old;
}
template <typename T>
T atomicMax(T* p, T v) {
  const T old = *p;
  *p = old < v ? v : old;
  return old;
}
template <typename T>
T atomicMin(T* p, T v) {
  const T old = *p;
  *p = v < old ? v : old;
  return old;
}
template <typename T>
T atomicExch(T* p, T v) {
  const T old = *p;
  *p = v;
  return old;
}
template <typename T>
T atomicCAS(T* p, T compare, T v) {
  const T old = *p;
  if (old == compare) *p = v;
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
  // A target outside the lane's own segment of `width` lanes reads its own value.
  const int src = (target & ~(width - 1)) == (lane & ~(width - 1)) ? target : -1;
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

inline int __any_sync(unsigned mask, int predicate) { return __ballot_sync(mask, predicate) != 0; }

inline int __all_sync(unsigned mask, int predicate) { return __ballot_sync(mask, predicate) == mask; }

// --- cache-hint loads and stores: plain accesses with the hardware's alignment rule -----

template <typename T>
T __ldg(const T* p) { return ::simt::load(p, "__ldg"); }
template <typename T>
T __ldca(const T* p) { return ::simt::load(p, "__ldca"); }
template <typename T>
T __ldcg(const T* p) { return ::simt::load(p, "__ldcg"); }
template <typename T>
T __ldcs(const T* p) { return ::simt::load(p, "__ldcs"); }
template <typename T>
T __ldlu(const T* p) { return ::simt::load(p, "__ldlu"); }
template <typename T>
T __ldcv(const T* p) { return ::simt::load(p, "__ldcv"); }
template <typename T>
void __stwb(T* p, T v) { ::simt::store(p, v, "__stwb"); }
template <typename T>
void __stcg(T* p, T v) { ::simt::store(p, v, "__stcg"); }
template <typename T>
void __stcs(T* p, T v) { ::simt::store(p, v, "__stcs"); }
template <typename T>
void __stwt(T* p, T v) { ::simt::store(p, v, "__stwt"); }

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
