// Happens-before race detector of the SIMT emulator (used by simt.cpp only).
//
// A data race is two accesses to the same bytes from different CUDA threads,
// at least one a write, that no barrier, __syncwarp() or fence-and-atomic
// orders. The detector keeps, for every 2-byte granule of memory a kernel
// touched during the launch, the last write and the reads since it, each as
// (thread, that thread's clock, code address), and decides whether each new
// access is ordered after them:
//   * program order: the same thread;
//   * __syncthreads(): every access a live thread made before arriving is
//     ordered before every access after the barrier (one "floor" clock per
//     thread of the block: its clock at its last barrier);
//   * __syncwarp(): the lanes that meet join their knowledge of their warp's
//     lanes (a 32-entry vector clock). Shuffles and votes exchange registers
//     and order no memory access (CUDA documents memory ordering for
//     __syncwarp only);
//   * __threadfence() then an atomic on p publishes on p what the thread knew
//     at the fence (not what it did between the fence and the atomic); any
//     later atomic on p (by any thread of any block) acquires it.
// The verdict does not depend on the order the threads ran in. Blocks never
// synchronise with each other except through such atomics, so global memory
// written by one block and read by another without them is a race too.
// Shared memory is fresh at each block's start: a read of a shared granule
// no thread of the block has written is reported as well.
#pragma once

#include <cstddef>
#include <cstdint>

namespace simt {
namespace races {

constexpr uint32_t kNoThread = 0xffffffffu;

// One side of a reported conflict. `thread` is block * threads_per_block + linear thread index.
struct Access {
  uint32_t thread = kNoThread;
  uint32_t pc = 0;  // code address, relative to the library's load address
  bool write = false;
};

struct Conflict {
  enum Kind { kRace, kUninitialisedShared } kind = kRace;
  uintptr_t address = 0;  // first conflicting byte
  bool shared = false;
  Access earlier;  // kRace only
  Access later;
};

// A new launch: every earlier access happened before it (the host waited for the previous launch).
void begin_launch(int threads_per_block);
// A new block (blocks run one at a time); shared memory [shared_lo, shared_hi) starts unwritten.
void begin_block(uint32_t block, uintptr_t shared_lo, uintptr_t shared_hi);

// An access of `size` bytes at `address` by thread `t` of the running block.
// Returns nullptr, or the first conflict (valid until the next call).
const Conflict* access(int t, uintptr_t address, size_t size, bool write, bool shared, uint32_t pc);

// Thread `t` leaves a barrier that every thread in `arrived` (count n) reached.
void barrier(const int* arrived, int n);
// Lanes `lanes` (a bit mask) of warp `warp` complete a __syncwarp() together.
void collective(int warp, unsigned lanes);
// Thread `t` passes __threadfence(): its later atomics release what it knows now.
void fence(int t);
void atomic(int t, uintptr_t address);

}  // namespace races
}  // namespace simt
