// CUDA kernels of the fused RMS norm, behind fused_norm::cuda_forward, and of
// the fused residual add + norm, behind fused_norm::cuda_add_forward.
//
//   y[r, :] = x[r, :] * rsqrt(mean(x[r, :]^2) + eps) * weight + bias
//   residual_out = x + residual (rounded to T); y = the norm of residual_out
//
// Both ops run the same kernel families from the same row routines; only the
// streams a row reads and writes differ (NormStreams, AddNormStreams): the
// add is folded into the row's loads, its sum stored as residual_out and
// normalised as stored, and residual and residual_out share x's phase and
// vector width the way y does.
//
// Framework-free: CUDA headers and the core headers only, so the torch
// adapter (csrc/torch/torch_cuda_impl.cpp) and the ONNX Runtime CUDA op
// (csrc/ort/ort_cuda_op.cc) launch the very same kernels on their own streams.
//
// Why the kernels look the way they do
// ------------------------------------
// The op does about 4 FLOPs per element and moves sizeof(T) bytes in and
// sizeof(T) bytes out, i.e. it is bound by DRAM bandwidth by two orders of
// magnitude on any GPU. The best it can do is read x once, write y once, and
// keep enough bytes in flight to cover DRAM latency. Hence:
//   * A row is loaded into registers once, its sum of squares reduced (fp32,
//     or fp64 for double), and the output computed from the registers: no
//     second DRAM pass over x. Only rows longer than one block's registers
//     (kStreamingRows) read x twice, the second time mostly from L2.
//   * All of a row's loads are in flight at once: the register kernels issue
//     every load of the row (a load loop) before the first arithmetic on a
//     loaded value (a compute loop), so a row costs one memory latency. The
//     held row stays packed in machine words: a 16-bit element unpacked to
//     float early takes a whole register.
//   * Enough threads per SM to cover HBM latency: register caps chosen for
//     the resident blocks each kernel needs (fused_norm_cuda_plan.h). The
//     machine-code test (tests/csrc/test_cuda_machine_code.py) checks load
//     rounds, access widths, spills and blocks per SM on the sm_90 SASS.
//   * Loads and stores are 16 bytes per thread (LDG.128/STG.128), coalesced
//     across the warp: fewer, wider memory transactions reach full bandwidth
//     with fewer threads. Each row is a scalar head up to x's first 16-byte
//     boundary, a body of 16-byte vectors and a scalar tail, so an odd row
//     length (bf16 rows of 5001) or x and y both at an odd element keep the
//     16-byte body; the head is computed per row, as rows of an odd length
//     start at different phases. Only x and y at different phases step down
//     to the widest access both allow (8, 4 bytes or one element): one
//     element index must be in the same thread for both. The width is an
//     explicit run-time choice in launch_for_type().
//   * Weight and bias are read at x's phase, not with a head of their own:
//     element j of a row meets weight[j] in the thread that holds x[j]. With
//     heads of their own their vectors would start at other elements than
//     x's, and every vector would need a second load or a shuffle to line
//     up. They stay in L1/L2 (every row reads them), so in the rows where
//     their phase differs from x's (rows of an odd length, or weight at
//     another offset than x) they are read element by element, which costs
//     load instructions but no DRAM bytes; in the others, in vectors.
//   * x is read and y written with the streaming cache hint (evict first):
//     each byte is touched once, and leaving it out of L2 keeps weight and
//     bias (read by every row) resident.
//   * Reduction: warp shuffles, then one shared-memory slot per warp and a
//     second shuffle round in every warp (no second barrier).
// The variants and their thresholds live in fused_norm_cuda_plan.h.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <cstring>

#include "cuda_launch.h"
#include "fused_norm.h"
#include "fused_norm_cuda_plan.h"
#include "numeric_types.h"

// A per-kernel register cap (nvcc's __maxnreg__); unlike __launch_bounds__'s
// minimum blocks it does not bound the block size, so block_rows keeps its
// 1024-thread launches. Host compilers (the CPU emulator) ignore it.
#if defined(__CUDACC__)
#define FUSED_NORM_MAX_REGISTERS(n) __maxnreg__(n)
#else
#define FUSED_NORM_MAX_REGISTERS(n)
#endif

namespace fused_norm {
namespace cuda_kernels {

using cuda_plan::kMaxThreads;
using cuda_plan::kWarpRowsPerBlock;
using cuda_plan::kWarpRowsThreads;
using cuda_plan::kWarpSize;

// --- element conversions ------------------------------------------------------
// The storage types are bare uint16_t (numeric_types.h); on the device their
// bits are reinterpreted as __half / __nv_bfloat16 and converted with the
// hardware intrinsics (torch builds with __CUDA_NO_HALF_CONVERSIONS__, so
// nothing implicit is available, nor wanted).

template <typename T>
struct Elem;

template <>
struct Elem<float> {
  using acc_t = float;
  static __device__ __forceinline__ float load(float v) { return v; }
  static __device__ __forceinline__ float store(float v) { return v; }
};

template <>
struct Elem<double> {
  using acc_t = double;
  static __device__ __forceinline__ double load(double v) { return v; }
  static __device__ __forceinline__ double store(double v) { return v; }
};

template <>
struct Elem<Half> {
  using acc_t = float;
  static __device__ __forceinline__ float load(Half v) { return __half2float(__ushort_as_half(v.bits)); }
  static __device__ __forceinline__ Half store(float v) { return Half{__half_as_ushort(__float2half_rn(v))}; }
};

template <>
struct Elem<BFloat16> {
  using acc_t = float;
  static __device__ __forceinline__ float load(BFloat16 v) { return __bfloat162float(__ushort_as_bfloat16(v.bits)); }
  static __device__ __forceinline__ BFloat16 store(float v) {
    return BFloat16{__bfloat16_as_ushort(__float2bfloat16_rn(v))};
  }
};

__device__ __forceinline__ float inverse_rms(float mean_sq, float eps) { return 1.0f / sqrtf(mean_sq + eps); }
__device__ __forceinline__ double inverse_rms(double mean_sq, double eps) { return 1.0 / sqrt(mean_sq + eps); }

// --- vectors of VEC elements, moved as one machine word -------------------------

template <typename T, int VEC>
struct alignas(sizeof(T) * VEC) Pack {
  T v[VEC];
};

// The integer type of the same size, for which the cache-hint intrinsics exist.
template <int BYTES>
struct Word;
template <>
struct Word<2> {
  using type = unsigned short;
};
template <>
struct Word<4> {
  using type = unsigned int;
};
template <>
struct Word<8> {
  using type = uint2;
};
template <>
struct Word<16> {
  using type = uint4;
};

template <typename P>
using word_t = typename Word<sizeof(P)>::type;

// Read once, never again: evict-first.
template <typename P>
__device__ __forceinline__ P load_streaming(const P* p) {
  const word_t<P> w = __ldcs(reinterpret_cast<const word_t<P>*>(p));
  P out;
  memcpy(&out, &w, sizeof(P));
  return out;
}

// Read by every row (weight, bias): read-only path, cached.
template <typename P>
__device__ __forceinline__ P load_cached(const P* p) {
  const word_t<P> w = __ldg(reinterpret_cast<const word_t<P>*>(p));
  P out;
  memcpy(&out, &w, sizeof(P));
  return out;
}

// Read twice, the second time soon: cached in L2 only, not in L1.
template <typename P>
__device__ __forceinline__ P load_l2(const P* p) {
  const word_t<P> w = __ldcg(reinterpret_cast<const word_t<P>*>(p));
  P out;
  memcpy(&out, &w, sizeof(P));
  return out;
}

template <typename P>
__device__ __forceinline__ void store_streaming(P* p, const P& value) {
  word_t<P> w;
  memcpy(&w, &value, sizeof(P));
  __stcs(reinterpret_cast<word_t<P>*>(p), w);
}

// Register kernels hold a row as machine words (word_t), not as Packs: a
// Pack of 16-bit elements is split by the compiler into one 32-bit register
// per element, twice the registers of the packed words.
template <typename P>
__device__ __forceinline__ word_t<P> load_cached_word(const P* p) {
  return __ldg(reinterpret_cast<const word_t<P>*>(p));
}

template <typename P, typename W>
__device__ __forceinline__ P unpack(const W& word) {
  static_assert(sizeof(P) == sizeof(W), "a word holds exactly one vector");
  P out;
  memcpy(&out, &word, sizeof(P));
  return out;
}

// Makes the compiler forget what it knows about a held word. After the sum
// of squares it would otherwise keep every element already converted to
// float (one register per element) until the output loop instead of
// converting again there, which is cheaper than the registers. Device code
// only: the host emulator needs no such hint.
__device__ __forceinline__ void forget_conversions(unsigned int& w) {
#if defined(__CUDA_ARCH__)
  asm volatile("" : "+r"(w));
#endif
}
__device__ __forceinline__ void forget_conversions(unsigned short& w) {
#if defined(__CUDA_ARCH__)
  asm volatile("" : "+h"(w));
#endif
}
__device__ __forceinline__ void forget_conversions(uint2& w) {
  forget_conversions(w.x);
  forget_conversions(w.y);
}
__device__ __forceinline__ void forget_conversions(uint4& w) {
  forget_conversions(w.x);
  forget_conversions(w.y);
  forget_conversions(w.z);
  forget_conversions(w.w);
}

// --- reductions ---------------------------------------------------------------------

// Sum over the 32 lanes; every lane gets the total. All lanes must be active.
template <typename A>
__device__ __forceinline__ A warp_sum(A v) {
#pragma unroll
  for (int offset = kWarpSize / 2; offset > 0; offset /= 2) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}

// Sum over the block (blockDim.x a multiple of 32); every thread gets the
// total. `partials` ([32] in shared memory) must not be rewritten before all
// threads have returned, which callers ensure by alternating two buffers: a
// warp can only reach the next use of one buffer after passing the barrier
// of the other.
template <typename A>
__device__ __forceinline__ A block_sum(A v, A* partials /* [32] */) {
  const int lane = threadIdx.x % kWarpSize;
  const int warp = threadIdx.x / kWarpSize;
  v = warp_sum(v);
  if (lane == 0) partials[warp] = v;
  __syncthreads();
  const int warps = blockDim.x / kWarpSize;
  return warp_sum(lane < warps ? partials[lane] : A(0));
}

// --- kernels -----------------------------------------------------------------------

// y = x * inv_rms * w + b for one vector, computed in the accumulation type.
template <typename T, int VEC, typename A>
__device__ __forceinline__ Pack<T, VEC> scale_shift(const Pack<T, VEC>& x, const Pack<T, VEC>& w, const Pack<T, VEC>& b,
                                                    A inv_rms) {
  using E = Elem<T>;
  Pack<T, VEC> out;
#pragma unroll
  for (int j = 0; j < VEC; ++j) out.v[j] = E::store(E::load(x.v[j]) * inv_rms * E::load(w.v[j]) + E::load(b.v[j]));
  return out;
}

template <typename T, int VEC, typename A>
__device__ __forceinline__ A sum_squares(const Pack<T, VEC>& x) {
  A s = A(0);
#pragma unroll
  for (int j = 0; j < VEC; ++j) {
    const A v = Elem<T>::load(x.v[j]);
    s += v * v;
  }
  return s;
}

// s = x + r for one vector held as a machine word: added in the accumulation
// type and rounded to T once, as the CPU kernel adds (fused_norm_cpu.cpp,
// add_store_squares), so the stored sum is the CPU op's bit for bit (a lone
// addition: nothing for nvcc to contract).
template <typename T, typename W>
__device__ __forceinline__ W add_words(const W& x, const W& r) {
  using E = Elem<T>;
  using P = Pack<T, sizeof(W) / sizeof(T)>;
  const P a = unpack<P>(x);
  const P b = unpack<P>(r);
  P s;
#pragma unroll
  for (int j = 0; j < static_cast<int>(sizeof(W) / sizeof(T)); ++j)
    s.v[j] = E::store(E::load(a.v[j]) + E::load(b.v[j]));
  return unpack<W>(s);
}

// --- the streams of a row: the norm's and the add + norm's -------------------------
//
// The kernels' row code is one for both ops; a Streams type says where a row's
// values come from and where they go. Both have x (whose 16-byte boundaries
// split every row) and y; the add + norm also reads residual and writes
// residual_out = x + residual, whose norm y is. Every stream shares x's phase
// (launch_for_type picks the vector so), so one element index is one vector
// boundary in all of them.
//
// In place (y is x, residual_out is residual), each element is read and then
// written by one thread, in that order, and by no other: x and residual are
// loaded in the load loop, the sum is stored in the compute loop after every
// load of the row, y after the reduction (the streaming kernel's second pass
// reads back the sum the same thread stored in its first). The add's kernels
// keep __restrict__ off the four streams, so the compiler must assume they
// alias and keeps each load of an element ahead of the stores after it.

// A row's loaded words at one element index: x's, and the residual's for the add.
template <typename W, bool kAdd>
struct Loaded {
  W x;
};
template <typename W>
struct Loaded<W, true> {
  W x;
  W r;
};

template <typename T>
struct NormStreams {
  static constexpr bool kAdd = false;
  const T* x;  // [rows, hidden]
  T* y;        // [rows, hidden]

  // The streams `offset` elements further on (a row, or a row's body).
  __device__ __forceinline__ NormStreams at(int64_t offset) const { return {x + offset, y + offset}; }
  // Word i (a vector, or one element, by W's size) from here on.
  template <typename W, typename I>
  __device__ __forceinline__ void load(Loaded<W, kAdd>& l, I i) const {
    l.x = __ldcs(reinterpret_cast<const W*>(x) + i);
  }
  // The row's value from them: x itself.
  template <typename W, typename I>
  __device__ __forceinline__ W value(const Loaded<W, kAdd>& l, I) const {
    return l.x;
  }
  // The streaming kernel's vector (or element) i: pass 1 reads x cached in L2 only, pass 2 for the last time
  // (evict-first).
  template <typename P, typename I>
  __device__ __forceinline__ void first_pass(P& v, I i) const {
    v = load_l2(reinterpret_cast<const P*>(x) + i);
  }
  template <typename P, typename I>
  __device__ __forceinline__ void second_pass(P& v, I i) const {
    v = load_streaming(reinterpret_cast<const P*>(x) + i);
  }
};

template <typename T>
struct AddNormStreams {
  static constexpr bool kAdd = true;
  const T* x;         // [rows, hidden]
  const T* residual;  // [rows, hidden]
  T* residual_out;    // [rows, hidden]; may be residual
  T* y;               // [rows, hidden]; may be x

  __device__ __forceinline__ AddNormStreams at(int64_t offset) const {
    return {x + offset, residual + offset, residual_out + offset, y + offset};
  }
  template <typename W, typename I>
  __device__ __forceinline__ void load(Loaded<W, kAdd>& l, I i) const {
    l.x = __ldcs(reinterpret_cast<const W*>(x) + i);
    l.r = __ldcs(reinterpret_cast<const W*>(residual) + i);
  }
  // The row's value: the sum rounded to T, stored as residual_out (read once, evict-first); the norm is taken
  // of this rounded value, not of the unrounded sum.
  template <typename W, typename I>
  __device__ __forceinline__ W value(const Loaded<W, kAdd>& l, I i) const {
    const W s = add_words<T>(l.x, l.r);
    __stcs(reinterpret_cast<W*>(residual_out) + i, s);
    return s;
  }
  // Pass 1 reads x and residual for their only time and stores the sum cached in L2 (st.global.cg), where
  // pass 2 reads it back: the stored, rounded sum, written by this same thread, whatever residual was.
  template <typename P, typename I>
  __device__ __forceinline__ void first_pass(P& v, I i) const {
    using W = word_t<P>;
    const W s =
        add_words<T>(__ldcs(reinterpret_cast<const W*>(x) + i), __ldcs(reinterpret_cast<const W*>(residual) + i));
    __stcg(reinterpret_cast<W*>(residual_out) + i, s);
    v = unpack<P>(s);
  }
  template <typename P, typename I>
  __device__ __forceinline__ void second_pass(P& v, I i) const {
    v = load_streaming(reinterpret_cast<const P*>(residual_out) + i);
  }
};

// --- a row: scalar head, vector body, scalar tail ---------------------------------

// How a row of `hidden` elements starting at `row` splits at x's vector
// boundaries: `head` elements before the first one (fewer than VEC), `body`
// whole vectors, `tail` elements after them (fewer than VEC). The head and
// tail ("edge") elements, fewer than 2 * VEC <= 32, go one each to threads
// 0, 1, ... of the row, which every variant has: thread t < edges() holds
// element edge(t).
template <typename I>
struct RowSplit {
  int head;
  I body;
  int tail;
  I tail_start;  // first element of the tail

  __device__ __forceinline__ int edges() const { return head + tail; }
  __device__ __forceinline__ I edge(int t) const { return t < head ? I(t) : tail_start + (t - head); }
};

template <typename T, int VEC, typename I>
__device__ __forceinline__ RowSplit<I> split_row(const T* row, I hidden) {
  RowSplit<I> s;
  if constexpr (VEC == 1) {
    // Every element is on a boundary (launch_for_type checks): no head, no tail.
    s.head = 0;
    s.body = hidden;
    s.tail = 0;
    s.tail_start = hidden;
    return s;
  }
  constexpr unsigned kBytes = sizeof(T) * VEC;
  const unsigned past = static_cast<unsigned>(reinterpret_cast<uintptr_t>(row) % kBytes);
  const I head = past == 0 ? I(0) : static_cast<I>((kBytes - past) / sizeof(T));
  s.head = static_cast<int>(head < hidden ? head : hidden);
  s.body = (hidden - s.head) / VEC;
  s.tail_start = s.head + s.body * VEC;
  s.tail = static_cast<int>(hidden - s.tail_start);
  return s;
}

// Whether `a` and `b` are a whole number of VEC-element vectors apart: then
// weight (or bias) is vector-aligned wherever the row of x is.
template <typename T, int VEC>
__device__ __forceinline__ bool same_phase(const T* a, const T* b) {
  // One-element vectors: always (every element is aligned to its size).
  return VEC == 1 || (reinterpret_cast<uintptr_t>(a) - reinterpret_cast<uintptr_t>(b)) % (sizeof(T) * VEC) == 0;
}

// VEC elements of weight or bias from `p`, which is vector-aligned where
// `vector` is true (one cached load), else element by element.
template <typename T, int VEC>
__device__ __forceinline__ word_t<Pack<T, VEC>> load_params_word(const T* p, bool vector) {
  using P = Pack<T, VEC>;
  using S = Pack<T, 1>;
  if (vector) return load_cached_word(reinterpret_cast<const P*>(p));
  P v;
#pragma unroll
  for (int j = 0; j < VEC; ++j) v.v[j] = load_cached(reinterpret_cast<const S*>(p + j)).v[0];
  word_t<P> w;
  memcpy(&w, &v, sizeof(P));
  return w;
}

// sum + x[e] * x[e] for one head or tail element held as a machine word
// (one fused multiply-add into the running sum).
template <typename T, typename A>
__device__ __forceinline__ A add_square(A sum, const word_t<Pack<T, 1>>& x) {
  const A v = Elem<T>::load(unpack<Pack<T, 1>>(x).v[0]);
  return sum + v * v;
}

// y[e] of one head or tail element; its weight and bias are read element-wise.
template <typename T, typename A>
__device__ __forceinline__ void store_element(T* y, const Pack<T, 1>& x, const T* w, const T* b, A inv_rms) {
  using S = Pack<T, 1>;
  store_streaming(reinterpret_cast<S*>(y), scale_shift<T, 1, A>(x, load_cached(reinterpret_cast<const S*>(w)),
                                                                load_cached(reinterpret_cast<const S*>(b)), inv_rms));
}

// The reduction over a row's threads: its warp, or its block (one of two sets
// of shared slots, alternating between consecutive rows: see block_sum).
struct WarpSum {
  template <typename A>
  __device__ __forceinline__ A operator()(A v) const {
    return warp_sum(v);
  }
};
template <typename A>
struct BlockSum {
  A* partials;  // [32] in shared memory
  __device__ __forceinline__ A operator()(A v) const { return block_sum(v, partials); }
};

// Register kernels (warp_rows, block_rows) share one row routine:
//   1. a load loop that only issues loads: every vector of the row a thread
//      holds is in flight at once, so a row costs one memory latency;
//   2. a compute loop (the row's values: for the add, the sum, stored as
//      residual_out; their squares), the reduction, then the output loop.
// A load and the arithmetic on it in the same guarded chunk would let the
// compiler wait for each chunk's load before issuing the next one.
//
// Thread t of the row's `threads` (a warp's lanes, or a block) holds vectors
// t, t + threads, ... (CHUNKS of them), so consecutive threads touch
// consecutive words, and the row's edge element t if it has one. kHeld:
// weight and bias are at x's phase and ride with x in the load loop (see
// warp_rows_kernel); else they are read after the reduction, in vectors where
// `params_vec`, else element by element. Two instances, so that neither has a
// guard nested in the load loop's guard: the join of nested guards makes the
// compiler copy loaded registers, and a copy waits for its load (a second
// round).
template <typename T, int VEC, int CHUNKS, bool kHeld, typename Streams, typename A, typename RowSum>
__device__ __forceinline__ void register_row(const Streams& row, const T* __restrict__ weight,
                                             const T* __restrict__ bias, int hidden, int t, int threads,
                                             bool params_vec, A inv_hidden, A eps, const RowSum& row_sum) {
  using P = Pack<T, VEC>;
  using S = Pack<T, 1>;
  const RowSplit<int> split = split_row<T, VEC>(row.x, hidden);
  const int nvec = split.body;
  const Streams body = row.at(split.head);  // [nvec] vectors of each stream
  P* yr = reinterpret_cast<P*>(body.y);     // [nvec]
  const T* wrow = weight + split.head;      // [nvec * VEC]
  const T* brow = bias + split.head;        // [nvec * VEC]
  // Zero-initialised: a guarded load then writes straight into the register
  // that holds the vector after the guard. Without a value on the other path
  // the compiler copies the loaded register at the join, and a copy waits for
  // its load, splitting the row's loads into several rounds (float64 split
  // them without).
  Loaded<word_t<P>, Streams::kAdd> xv[CHUNKS] = {};
  word_t<P> wr[CHUNKS] = {}, br[CHUNKS] = {};
  Loaded<word_t<S>, Streams::kAdd> xe = {};  // this thread's edge element, if any
#pragma unroll
  for (int i = 0; i < CHUNKS; ++i) {
    const int c = t + i * threads;
    if (c < nvec) {
      body.load(xv[i], c);
      if constexpr (kHeld) {
        wr[i] = load_cached_word(reinterpret_cast<const P*>(wrow) + c);
        br[i] = load_cached_word(reinterpret_cast<const P*>(brow) + c);
      }
    }
  }
  // One-element vectors have no edge elements (split_row), and no code for them.
  const bool has_edge = VEC > 1 && t < split.edges();
  if constexpr (VEC > 1) {  // after the body's loads, which issue first
    if (has_edge) row.load(xe, split.edge(t));
  }
  // Fixed order per thread: body, then the edge element. Without one (every
  // row on a vector boundary) this is the sum of the body alone. The edge
  // is summed unconditionally: a guarded sum shares the load's guard, and
  // the compiler moves both ahead of the body's loads.
  A sum_sq = A(0);
#pragma unroll
  for (int i = 0; i < CHUNKS; ++i) {
    const int c = t + i * threads;
    if (c < nvec) {
      xv[i].x = body.value(xv[i], c);
      sum_sq += sum_squares<T, VEC, A>(unpack<P>(xv[i].x));
    }
  }
  if constexpr (VEC > 1) {
    if constexpr (Streams::kAdd) {  // the add stores its sum: only a thread that has an edge element
      if (has_edge) xe.x = row.value(xe, split.edge(t));
    }
    // xe.x is zero without an edge element: adds exactly nothing.
    sum_sq = add_square<T, A>(sum_sq, xe.x);
  }
  if constexpr (sizeof(T) == 2) {  // only 16-bit elements are converted
#pragma unroll
    for (int i = 0; i < CHUNKS; ++i) forget_conversions(xv[i].x);
  }
  const A inv_rms = inverse_rms(row_sum(sum_sq) * inv_hidden, eps);
#pragma unroll
  for (int i = 0; i < CHUNKS; ++i) {
    const int c = t + i * threads;
    if (c < nvec) {
      if constexpr (!kHeld) {
        wr[i] = load_params_word<T, VEC>(wrow + c * VEC, params_vec);
        br[i] = load_params_word<T, VEC>(brow + c * VEC, params_vec);
      }
      store_streaming(yr + c, scale_shift<T, VEC, A>(unpack<P>(xv[i].x), unpack<P>(wr[i]), unpack<P>(br[i]), inv_rms));
    }
  }
  if (has_edge) {
    const int e = split.edge(t);
    store_element(row.y + e, unpack<S>(xe.x), weight + e, bias + e, inv_rms);
  }
}

// One warp per row, kWarpRowsPerBlock rows per block. Lane l holds vectors
// l, l + 32, ..., l + 32 * (CHUNKS - 1) of its row, and for the shorter rows
// weight and bias with it: short rows are latency-bound, so their loads share
// x's round trip.
template <typename T, int VEC, int CHUNKS, typename Streams>
__device__ __forceinline__ void warp_rows(const Streams& streams, const T* __restrict__ weight,
                                          const T* __restrict__ bias, int64_t rows, int hidden,
                                          typename Elem<T>::acc_t eps) {
  using A = typename Elem<T>::acc_t;
  using P = Pack<T, VEC>;
  // Weight and bias ride with x when what a lane then holds fits the register
  // cap: x (and the residual), weight and bias of at most 96 bytes, i.e. up to
  // 32 bytes of x per lane for the norm and 16 for the add (24 registers), and
  // the row is at their phase; longer rows load them after the reduction. Not
  // for one-double vectors: ptxas copies each loaded double at the guard's
  // join, and a copy waits for its load, so held parameters would cost a round
  // per chunk instead of one after the reduction.
  constexpr int kHeldBytes = (Streams::kAdd ? 4 : 3) * CHUNKS * static_cast<int>(sizeof(P));
  constexpr bool kHoldParams = kHeldBytes <= 96 && !(sizeof(T) == 8 && VEC == 1);
  const A inv_hidden = A(1) / static_cast<A>(hidden);
  const int lane = threadIdx.x % kWarpSize;

  // The row index is the same for all lanes of a warp, so the loop and the
  // shuffles inside it run with the whole warp converged.
  const int64_t first = static_cast<int64_t>(blockIdx.x) * kWarpRowsPerBlock + threadIdx.x / kWarpSize;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * kWarpRowsPerBlock;
  for (int64_t row = first; row < rows; row += stride) {
    const Streams r = streams.at(row * hidden);
    const bool params_vec = same_phase<T, VEC>(r.x, weight) && same_phase<T, VEC>(r.x, bias);
    if (kHoldParams && params_vec) {
      register_row<T, VEC, CHUNKS, kHoldParams>(r, weight, bias, hidden, lane, kWarpSize, params_vec, inv_hidden, eps,
                                                WarpSum{});
    } else {
      register_row<T, VEC, CHUNKS, false>(r, weight, bias, hidden, lane, kWarpSize, params_vec, inv_hidden, eps,
                                          WarpSum{});
    }
  }
}

// One block per row; thread t holds vectors t, t + blockDim.x, ... of the
// row (CHUNKS of them). Weight and bias are loaded after the reduction (they
// stay in L1/L2: every row reads them), which keeps the kernel within
// kBlockRowsMaxRegisters: at 48, 5 blocks of 256 threads fit an SM (64K
// registers), 1280 threads with CHUNKS x 16 bytes of x in flight each.
template <typename T, int VEC, int CHUNKS, typename Streams>
__device__ __forceinline__ void block_rows(const Streams& streams, const T* __restrict__ weight,
                                           const T* __restrict__ bias, int64_t rows, int hidden,
                                           typename Elem<T>::acc_t eps) {
  using A = typename Elem<T>::acc_t;
  __shared__ A partials[2][kWarpSize];
  const A inv_hidden = A(1) / static_cast<A>(hidden);

  int parity = 0;
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x, parity ^= 1) {
    const Streams r = streams.at(row * hidden);
    const bool params_vec = same_phase<T, VEC>(r.x, weight) && same_phase<T, VEC>(r.x, bias);
    register_row<T, VEC, CHUNKS, false>(r, weight, bias, hidden, static_cast<int>(threadIdx.x),
                                        static_cast<int>(blockDim.x), params_vec, inv_hidden, eps,
                                        BlockSum<A>{partials[parity]});
  }
}

// One block per row, for rows longer than a block's registers hold
// (> kMaxThreads * kBlockRowsChunks vectors): two passes over the row. Pass 1
// reads the row's values cached in L2 (the norm: x, ld.global.cg; the add:
// x and residual for their only time, their sum stored to L2), so that pass 2,
// which reads them for the last time (evict-first), finds them there. Both
// passes move whole vectors, four per thread in flight. kStreamingThreads
// threads and at least 2 blocks per SM: while one block waits at its row's
// barrier, another's loads keep the SM's memory pipe busy.
template <typename T, int VEC, typename Streams>
__device__ __forceinline__ void streaming_rows(const Streams& streams, const T* __restrict__ weight,
                                               const T* __restrict__ bias, int64_t rows, int64_t hidden,
                                               typename Elem<T>::acc_t eps) {
  using A = typename Elem<T>::acc_t;
  using P = Pack<T, VEC>;
  using S = Pack<T, 1>;
  __shared__ A partials[2][kWarpSize];
  const int t = threadIdx.x;
  const A inv_hidden = A(1) / static_cast<A>(hidden);

  int parity = 0;
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x, parity ^= 1) {
    const Streams r = streams.at(row * hidden);
    const RowSplit<int64_t> split = split_row<T, VEC>(r.x, hidden);
    const int64_t nvec = split.body;
    const Streams body = r.at(split.head);  // [nvec] vectors of each stream
    P* yr = reinterpret_cast<P*>(body.y);   // [nvec]
    const T* wrow = weight + split.head;    // [nvec * VEC]
    const T* brow = bias + split.head;      // [nvec * VEC]
    const bool params_vec = same_phase<T, VEC>(r.x, weight) && same_phase<T, VEC>(r.x, bias);
    const bool has_edge = VEC > 1 && t < split.edges();
    // Fixed order per thread: body, then the edge element (the body alone without one).
    A sum_sq = A(0);
#pragma unroll 4
    for (int64_t c = threadIdx.x; c < nvec; c += blockDim.x) {
      P v;
      body.first_pass(v, c);
      sum_sq += sum_squares<T, VEC, A>(v);
    }
    if (has_edge) {
      S v;
      r.first_pass(v, split.edge(t));
      sum_sq += sum_squares<T, 1, A>(v);
    }
    const A inv_rms = inverse_rms(block_sum(sum_sq, partials[parity]) * inv_hidden, eps);
#pragma unroll 4
    for (int64_t c = threadIdx.x; c < nvec; c += blockDim.x) {
      P v;
      body.second_pass(v, c);
      store_streaming(yr + c,
                      scale_shift<T, VEC, A>(v, unpack<P>(load_params_word<T, VEC>(wrow + c * VEC, params_vec)),
                                             unpack<P>(load_params_word<T, VEC>(brow + c * VEC, params_vec)), inv_rms));
    }
    if (has_edge) {
      const int64_t e = split.edge(t);
      S v;
      r.second_pass(v, e);
      store_element(r.y + e, v, weight + e, bias + e, inv_rms);
    }
  }
}

// --- the kernels: each family once per op -----------------------------------------
//
// The norm's kernels take x and y __restrict__; the add + norm's only weight
// and bias, since its in-place form passes y = x and residual_out = residual.

template <typename T, int VEC, int CHUNKS>
__global__ void __launch_bounds__(kWarpRowsThreads, cuda_plan::kWarpRowsMinBlocksPerSm)
    warp_rows_kernel(const T* __restrict__ x,       // [rows, hidden]
                     const T* __restrict__ weight,  // [hidden]
                     const T* __restrict__ bias,    // [hidden]
                     T* __restrict__ y,             // [rows, hidden]
                     int64_t rows, int hidden, typename Elem<T>::acc_t eps) {
  // __launch_bounds__(128, 8) caps registers at 64: 8 blocks (1024 threads)
  // per SM, which the packed (not yet converted) vectors fit without spills.
  warp_rows<T, VEC, CHUNKS>(NormStreams<T>{x, y}, weight, bias, rows, hidden, eps);
}

// The add's rows of 4 chunks of 16-byte vectors run fewer blocks (fused_norm_cuda_plan.h).
template <typename T, int VEC, int CHUNKS>
__global__ void __launch_bounds__(kWarpRowsThreads, cuda_plan::add_warp_rows_min_blocks(sizeof(T), VEC, CHUNKS))
    add_warp_rows_kernel(const T* x, const T* residual, const T* __restrict__ weight, const T* __restrict__ bias,
                         T* residual_out, T* y, int64_t rows, int hidden, typename Elem<T>::acc_t eps) {
  warp_rows<T, VEC, CHUNKS>(AddNormStreams<T>{x, residual, residual_out, y}, weight, bias, rows, hidden, eps);
}

template <typename T, int VEC, int CHUNKS>
__global__ void FUSED_NORM_MAX_REGISTERS(VEC == 1 ? cuda_plan::kBlockRowsScalarMaxRegisters
                                                  : cuda_plan::kBlockRowsMaxRegisters)
    block_rows_kernel(const T* __restrict__ x,       // [rows, hidden]
                      const T* __restrict__ weight,  // [hidden]
                      const T* __restrict__ bias,    // [hidden]
                      T* __restrict__ y,             // [rows, hidden]
                      int64_t rows, int hidden, typename Elem<T>::acc_t eps) {
  block_rows<T, VEC, CHUNKS>(NormStreams<T>{x, y}, weight, bias, rows, hidden, eps);
}

template <typename T, int VEC, int CHUNKS>
__global__ void FUSED_NORM_MAX_REGISTERS(cuda_plan::add_block_rows_max_registers(VEC))
    add_block_rows_kernel(const T* x, const T* residual, const T* __restrict__ weight, const T* __restrict__ bias,
                          T* residual_out, T* y, int64_t rows, int hidden, typename Elem<T>::acc_t eps) {
  block_rows<T, VEC, CHUNKS>(AddNormStreams<T>{x, residual, residual_out, y}, weight, bias, rows, hidden, eps);
}

template <typename T, int VEC>
__global__ void __launch_bounds__(cuda_plan::kStreamingThreads, cuda_plan::kStreamingMinBlocksPerSm)
    streaming_rows_kernel(const T* __restrict__ x,       // [rows, hidden]
                          const T* __restrict__ weight,  // [hidden]
                          const T* __restrict__ bias,    // [hidden]
                          T* __restrict__ y,             // [rows, hidden]
                          int64_t rows, int64_t hidden, typename Elem<T>::acc_t eps) {
  streaming_rows<T, VEC>(NormStreams<T>{x, y}, weight, bias, rows, hidden, eps);
}

template <typename T, int VEC>
__global__ void __launch_bounds__(cuda_plan::kStreamingThreads, cuda_plan::kStreamingMinBlocksPerSm)
    add_streaming_rows_kernel(const T* x, const T* residual, const T* __restrict__ weight, const T* __restrict__ bias,
                              T* residual_out, T* y, int64_t rows, int64_t hidden, typename Elem<T>::acc_t eps) {
  streaming_rows<T, VEC>(AddNormStreams<T>{x, residual, residual_out, y}, weight, bias, rows, hidden, eps);
}

// --- host side: dispatch from run-time sizes to compile-time variants ----------

// Each op's kernels of one element type and vector width.
template <typename T, int VEC>
struct NormKernels {
  template <int CHUNKS>
  static auto warp_rows() {
    return &warp_rows_kernel<T, VEC, CHUNKS>;
  }
  static auto block_rows() { return &block_rows_kernel<T, VEC, cuda_plan::kBlockRowsChunks>; }
  static auto streaming_rows() { return &streaming_rows_kernel<T, VEC>; }
};

template <typename T, int VEC>
struct AddNormKernels {
  template <int CHUNKS>
  static auto warp_rows() {
    return &add_warp_rows_kernel<T, VEC, CHUNKS>;
  }
  static auto block_rows() { return &add_block_rows_kernel<T, VEC, cuda_plan::kBlockRowsChunks>; }
  static auto streaming_rows() { return &add_streaming_rows_kernel<T, VEC>; }
};

// Launches the planned kernel of `Kernels` through `launch(kernel, hidden)`,
// which passes the op's arguments (hidden as the kernel takes it).
template <typename Kernels, typename Launch>
cudaError_t launch_planned(const cuda_plan::LaunchPlan& plan, int64_t hidden, const Launch& launch) {
  // Register kernels index a row with int: their rows are at most
  // kMaxThreads * kBlockRowsChunks * 16 bytes long.
  const int row_hidden = static_cast<int>(hidden);
  switch (plan.kernel) {
    case cuda_plan::Kernel::kWarpRows:
      switch (plan.chunks) {
        case 1: launch(Kernels::template warp_rows<1>(), row_hidden); break;
        case 2: launch(Kernels::template warp_rows<2>(), row_hidden); break;
        case 4: launch(Kernels::template warp_rows<4>(), row_hidden); break;
        default: return cudaErrorInvalidConfiguration;
      }
      break;
    case cuda_plan::Kernel::kBlockRows:
      static_assert(cuda_plan::kBlockRowsChunks == 4, "block_rows_kernel is instantiated for 4 chunks");
      launch(Kernels::block_rows(), row_hidden);
      break;
    case cuda_plan::Kernel::kStreamingRows: launch(Kernels::streaming_rows(), hidden); break;
  }
  // A launch error (bad configuration, no kernel image for this GPU) is
  // reported here; a fault inside the kernel surfaces at the caller's next
  // synchronisation, as for every CUDA op.
  return cudaGetLastError();
}

template <typename T, int VEC>
cudaError_t launch_variant(const NormProblem& p, const cuda_plan::LaunchPlan& plan, cudaStream_t stream) {
  using A = typename Elem<T>::acc_t;
  const T* x = static_cast<const T*>(p.x);
  const T* w = static_cast<const T*>(p.weight);
  const T* b = static_cast<const T*>(p.bias);
  T* y = static_cast<T*>(p.y);
  const A eps = static_cast<A>(p.eps);
  const dim3 grid(static_cast<unsigned int>(plan.blocks));
  const dim3 block(static_cast<unsigned int>(plan.threads));
  return launch_planned<NormKernels<T, VEC>>(plan, p.hidden, [&](auto kernel, auto hidden) {
    launch_kernel(kernel, grid, block, 0, stream, x, w, b, y, p.rows, hidden, eps);
  });
}

template <typename T, int VEC>
cudaError_t launch_variant(const AddNormProblem& p, const cuda_plan::LaunchPlan& plan, cudaStream_t stream) {
  using A = typename Elem<T>::acc_t;
  const NormProblem& n = p.norm;
  const T* x = static_cast<const T*>(n.x);
  const T* r = static_cast<const T*>(p.residual);
  const T* w = static_cast<const T*>(n.weight);
  const T* b = static_cast<const T*>(n.bias);
  T* s = static_cast<T*>(p.residual_out);
  T* y = static_cast<T*>(n.y);
  const A eps = static_cast<A>(n.eps);
  const dim3 grid(static_cast<unsigned int>(plan.blocks));
  const dim3 block(static_cast<unsigned int>(plan.threads));
  return launch_planned<AddNormKernels<T, VEC>>(plan, n.hidden, [&](auto kernel, auto hidden) {
    launch_kernel(kernel, grid, block, 0, stream, x, r, w, b, s, y, n.rows, hidden, eps);
  });
}

inline uint64_t address_of(const void* p) { return reinterpret_cast<uintptr_t>(p); }

inline const NormProblem& norm_of(const NormProblem& p) { return p; }
inline const NormProblem& norm_of(const AddNormProblem& p) { return p.norm; }

// Every operand's address, or'ed: its low bits are clear where all of them are aligned that far.
inline uint64_t addresses_of(const NormProblem& p) {
  return address_of(p.x) | address_of(p.weight) | address_of(p.bias) | address_of(p.y);
}
inline uint64_t addresses_of(const AddNormProblem& p) {
  return addresses_of(p.norm) | address_of(p.residual) | address_of(p.residual_out);
}

// The distance of every stream to x (bitwise XOR of the addresses), or'ed: a
// power of two divides each distance where it divides this. The streams are
// y for the norm, and residual and residual_out too for the add + norm: all
// are accessed at x's element index in one thread, so a vector boundary of
// x must be one of each.
inline uint64_t phase_distances(const NormProblem& p) { return address_of(p.x) ^ address_of(p.y); }
inline uint64_t phase_distances(const AddNormProblem& p) {
  const uint64_t x = address_of(p.norm.x);
  return phase_distances(p.norm) | (x ^ address_of(p.residual)) | (x ^ address_of(p.residual_out));
}

template <typename T, typename Problem>
cudaError_t launch_for_type(const Problem& p, cudaStream_t stream) {
  // Elements are accessed at their own size at least (the head and the tail).
  if (addresses_of(p) % sizeof(T) != 0) return cudaErrorMisalignedAddress;
  // Each row's head brings x to a vector boundary; the other streams are on
  // one at the same element when they are a whole number of vectors from x.
  // make_plan picks the widest vector for which that holds. Weight and bias
  // are read at x's phase and do not narrow it (the kernels check their
  // phase per row).
  const uint64_t relative = phase_distances(p);
  const NormProblem& n = norm_of(p);
  const cuda_plan::LaunchPlan plan =
      cuda_plan::make_plan(n.rows, n.hidden, sizeof(T), cuda_plan::alignment_of(relative));
  const int bytes = plan.vec * static_cast<int>(sizeof(T));
  if (bytes == 16) return launch_variant<T, 16 / sizeof(T)>(p, plan, stream);
  if constexpr (sizeof(T) < 8) {
    if (bytes == 8) return launch_variant<T, 8 / sizeof(T)>(p, plan, stream);
  }
  if constexpr (sizeof(T) < 4) {
    if (bytes == 4) return launch_variant<T, 4 / sizeof(T)>(p, plan, stream);
  }
  return launch_variant<T, 1>(p, plan, stream);
}

inline bool has_null_operand(const NormProblem& p) {
  return p.x == nullptr || p.weight == nullptr || p.bias == nullptr || p.y == nullptr;
}
inline bool has_null_operand(const AddNormProblem& p) {
  return has_null_operand(p.norm) || p.residual == nullptr || p.residual_out == nullptr;
}

// cuda_forward and cuda_add_forward: the checks, then one launch.
template <typename Problem>
int forward(const Problem& p, void* stream, bool* error_was_pending) {
  const NormProblem& n = norm_of(p);
  if (error_was_pending != nullptr) *error_was_pending = false;
  if (n.rows < 0 || n.hidden < 0) return static_cast<int>(cudaErrorInvalidValue);
  if (n.rows == 0 || n.hidden == 0) return static_cast<int>(cudaSuccess);  // nothing to write
  if (has_null_operand(p)) return static_cast<int>(cudaErrorInvalidValue);
  if (!is_known_dtype(n.dtype)) return static_cast<int>(cudaErrorInvalidValue);
  // cudaGetLastError after the launch reports the launch's error, but also
  // any error still pending from earlier work; read that first.
  const cudaError_t earlier = cudaGetLastError();
  if (earlier != cudaSuccess) {
    if (error_was_pending != nullptr) *error_was_pending = true;
    return static_cast<int>(earlier);
  }
  cudaStream_t s = static_cast<cudaStream_t>(stream);
  const cudaError_t err = visit(n.dtype, [&](auto tag) { return launch_for_type<typename decltype(tag)::type>(p, s); });
  return static_cast<int>(err);
}

}  // namespace cuda_kernels

int cuda_forward(const NormProblem& p, void* stream, bool* error_was_pending) {
  return cuda_kernels::forward(p, stream, error_was_pending);
}

int cuda_add_forward(const AddNormProblem& p, void* stream, bool* error_was_pending) {
  return cuda_kernels::forward(p, stream, error_was_pending);
}

}  // namespace fused_norm
