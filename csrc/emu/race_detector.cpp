// Happens-before race detector (race_detector.h): shadow cells, vector clocks
// and the ordering rules of barriers, collectives, fences and atomics.
#include "race_detector.h"

#include <algorithm>
#include <cstring>
#include <memory>
#include <unordered_map>
#include <vector>

namespace simt {
namespace races {
namespace {

constexpr int kWarp = 32;
constexpr uintptr_t kGranule = 2;  // the smallest element the kernels store; byte stores share a granule
constexpr uintptr_t kPageBytes = 4096;
constexpr size_t kCellsPerPage = kPageBytes / kGranule;

struct Epoch {
  uint32_t thread = kNoThread;
  uint32_t clock = 0;
  uint32_t pc = 0;
};

// The last write to a granule and the reads since it that are not ordered after each other.
struct Cell {
  uint32_t launch = 0;  // cells of an earlier launch count as empty
  Epoch write;
  Epoch read;
  uint32_t more_reads = 0;  // 1-based index into State::read_lists, 0: none
};

using Knowledge = std::unordered_map<uint32_t, uint32_t>;  // thread -> clock, beyond the block's own rules

struct ThreadClock {
  uint32_t clock = 1;
  uint32_t warp[kWarp] = {};  // what it knows of each lane of its warp
  std::unique_ptr<Knowledge> foreign;
  // What its last __threadfence() orders: everything the thread knew when it
  // reached the fence, and nothing after. Its later atomics release this.
  std::unique_ptr<Knowledge> fenced;
};

struct State {
  uint32_t launch = 0;
  int n = 0;          // threads per block
  uint32_t base = 0;  // first thread number of the running block
  std::vector<ThreadClock> threads;
  std::vector<uint32_t> floor;  // per thread: its clock when it last arrived at a barrier
  // Shared memory: one cell per granule of the section, reset per block.
  uintptr_t shared_lo = 0, shared_hi = 0;
  std::vector<Cell> shared_cells;
  // Global memory: cells per 4 KiB page, recycled at every launch.
  std::unordered_map<uintptr_t, Cell*> pages;
  std::vector<std::unique_ptr<Cell[]>> page_pool;
  size_t pages_used = 0;
  uintptr_t last_page = ~uintptr_t{0};
  Cell* last_cells = nullptr;
  std::vector<std::vector<Epoch>> read_lists;
  std::unordered_map<uintptr_t, Knowledge> released;  // per atomic address
  Conflict conflict;
};

State st;

void join(Knowledge& into, const Knowledge& from) {
  for (const auto& [thread, clock] : from) {
    uint32_t& c = into[thread];
    c = std::max(c, clock);
  }
}

Knowledge& foreign_of(ThreadClock& t) {
  if (!t.foreign) t.foreign = std::make_unique<Knowledge>();
  return *t.foreign;
}

// Is the access (thread, clock) ordered before everything thread `t` does now?
bool ordered(int t, uint32_t thread, uint32_t clock) {
  const uint32_t me = st.base + static_cast<uint32_t>(t);
  if (thread == me) return true;
  if (thread >= st.base && thread < st.base + static_cast<uint32_t>(st.n)) {
    const int u = static_cast<int>(thread - st.base);
    if (clock <= st.floor[u]) return true;
    if (u / kWarp == t / kWarp && clock <= st.threads[t].warp[u % kWarp]) return true;
  }
  const ThreadClock& tc = st.threads[t];
  if (tc.foreign) {
    const auto it = tc.foreign->find(thread);
    if (it != tc.foreign->end() && clock <= it->second) return true;
  }
  return false;
}

Cell* cell_of(uintptr_t address, bool shared) {
  if (shared) return &st.shared_cells[(address - st.shared_lo) / kGranule];
  const uintptr_t page = address / kPageBytes;
  if (page != st.last_page) {
    Cell*& cells = st.pages[page];
    if (cells == nullptr) {
      if (st.pages_used == st.page_pool.size()) st.page_pool.emplace_back(new Cell[kCellsPerPage]);
      cells = st.page_pool[st.pages_used++].get();  // stale cells of an earlier launch read as empty
    }
    st.last_page = page;
    st.last_cells = cells;
  }
  return &st.last_cells[(address % kPageBytes) / kGranule];
}

const Conflict* report(Conflict::Kind kind, uintptr_t address, bool shared, const Epoch& earlier, bool earlier_write,
                       const Epoch& later, bool later_write) {
  st.conflict = Conflict{};
  st.conflict.kind = kind;
  st.conflict.address = address;
  st.conflict.shared = shared;
  st.conflict.earlier = Access{earlier.thread, earlier.pc, earlier_write};
  st.conflict.later = Access{later.thread, later.pc, later_write};
  return &st.conflict;
}

const Conflict* check_cell(int t, Cell& c, uintptr_t address, bool write, bool shared, const Epoch& me) {
  if (c.launch != st.launch) {
    // Shared memory holds garbage at a block's start: its first access in the block sees 0xff bytes.
    if (shared) std::memset(reinterpret_cast<void*>(address & ~(kGranule - 1)), 0xff, kGranule);
    c = Cell{};
    c.launch = st.launch;
  }
  if (c.write.thread != kNoThread && !ordered(t, c.write.thread, c.write.clock)) {
    return report(Conflict::kRace, address, shared, c.write, true, me, write);
  }
  if (write) {
    if (c.read.thread != kNoThread && !ordered(t, c.read.thread, c.read.clock)) {
      return report(Conflict::kRace, address, shared, c.read, false, me, true);
    }
    if (c.more_reads != 0) {
      for (const Epoch& r : st.read_lists[c.more_reads - 1]) {
        if (!ordered(t, r.thread, r.clock)) return report(Conflict::kRace, address, shared, r, false, me, true);
      }
    }
    c.write = me;
    c.read = Epoch{};
    c.more_reads = 0;
    return nullptr;
  }
  if (shared && c.write.thread == kNoThread) {
    return report(Conflict::kUninitialisedShared, address, shared, Epoch{}, false, me, false);
  }
  // A read ordered after the previous one replaces it: a later write ordered
  // after this read is ordered after that one too.
  if (c.read.thread == kNoThread || c.read.thread == me.thread || ordered(t, c.read.thread, c.read.clock)) {
    c.read = me;
    return nullptr;
  }
  if (c.more_reads == 0) {
    st.read_lists.emplace_back();
    c.more_reads = static_cast<uint32_t>(st.read_lists.size());
  }
  auto& list = st.read_lists[c.more_reads - 1];
  list.erase(std::remove_if(list.begin(), list.end(),
                            [&](const Epoch& r) { return r.thread == me.thread || ordered(t, r.thread, r.clock); }),
             list.end());
  list.push_back(me);
  return nullptr;
}

}  // namespace

void begin_launch(int threads_per_block) {
  ++st.launch;
  st.n = threads_per_block;
  st.pages.clear();
  st.pages_used = 0;
  st.last_page = ~uintptr_t{0};
  st.read_lists.clear();
  st.released.clear();
  // Keep at most 16 MiB of shadow between launches; a larger launch allocates what it needs.
  if (st.page_pool.size() > 256) st.page_pool.resize(256);
}

void begin_block(uint32_t block, uintptr_t shared_lo, uintptr_t shared_hi) {
  st.base = block * static_cast<uint32_t>(st.n);
  st.threads.clear();
  st.threads.resize(st.n);
  st.floor.assign(st.n, 0);
  st.shared_lo = shared_lo & ~(kGranule - 1);
  st.shared_hi = shared_hi;
  st.shared_cells.assign((shared_hi - st.shared_lo + kGranule - 1) / kGranule, Cell{});  // untouched
}

const Conflict* access(int t, uintptr_t address, size_t size, bool write, bool shared, uint32_t pc) {
  const Epoch me{st.base + static_cast<uint32_t>(t), st.threads[t].clock, pc};
  const uintptr_t end = address + size;
  for (uintptr_t a = address & ~(kGranule - 1); a < end; a += kGranule) {
    const uintptr_t first = std::max(a, address);
    if (const Conflict* c = check_cell(t, *cell_of(a, shared), first, write, shared, me)) return c;
  }
  return nullptr;
}

void barrier(const int* arrived, int n) {
  bool any_foreign = false;
  for (int i = 0; i < n; ++i) {
    st.floor[arrived[i]] = st.threads[arrived[i]].clock;
    any_foreign |= st.threads[arrived[i]].foreign != nullptr;
  }
  if (any_foreign) {
    Knowledge all;
    for (int i = 0; i < n; ++i) {
      if (st.threads[arrived[i]].foreign) join(all, *st.threads[arrived[i]].foreign);
    }
    for (int i = 0; i < n; ++i) foreign_of(st.threads[arrived[i]]) = all;
  }
  for (int i = 0; i < n; ++i) ++st.threads[arrived[i]].clock;
}

void collective(int warp, unsigned lanes) {
  uint32_t joined[kWarp] = {};
  bool any_foreign = false;
  for (unsigned m = lanes; m; m &= m - 1) {
    const int lane = __builtin_ctz(m);
    ThreadClock& tc = st.threads[warp * kWarp + lane];
    for (int l = 0; l < kWarp; ++l) joined[l] = std::max(joined[l], tc.warp[l]);
    joined[lane] = std::max(joined[lane], tc.clock);
    any_foreign |= tc.foreign != nullptr;
  }
  Knowledge all;
  if (any_foreign) {
    for (unsigned m = lanes; m; m &= m - 1) {
      ThreadClock& tc = st.threads[warp * kWarp + __builtin_ctz(m)];
      if (tc.foreign) join(all, *tc.foreign);
    }
  }
  for (unsigned m = lanes; m; m &= m - 1) {
    ThreadClock& tc = st.threads[warp * kWarp + __builtin_ctz(m)];
    std::copy(std::begin(joined), std::end(joined), std::begin(tc.warp));
    if (any_foreign) foreign_of(tc) = all;
    ++tc.clock;
  }
}

void fence(int t) {
  ThreadClock& tc = st.threads[t];
  // Everything the thread knows now: its own accesses so far, what barriers,
  // its warp's collectives and earlier acquires ordered before them.
  auto known = std::make_unique<Knowledge>();
  (*known)[st.base + static_cast<uint32_t>(t)] = tc.clock;
  for (int u = 0; u < st.n; ++u) {
    if (st.floor[u] != 0) (*known)[st.base + u] = std::max((*known)[st.base + u], st.floor[u]);
  }
  const int first = t / kWarp * kWarp;
  for (int l = 0; l < kWarp && first + l < st.n; ++l) {
    if (tc.warp[l] != 0) (*known)[st.base + first + l] = std::max((*known)[st.base + first + l], tc.warp[l]);
  }
  if (tc.foreign) join(*known, *tc.foreign);
  tc.fenced = std::move(known);
  ++tc.clock;  // what the thread does after the fence is not ordered by it
}

void atomic(int t, uintptr_t address) {
  ThreadClock& tc = st.threads[t];
  Knowledge& object = st.released[address];
  if (!object.empty()) join(foreign_of(tc), object);
  // Release: what the thread's last fence ordered is ordered before whoever acquires `address` later.
  // A fence followed by any later atomic is a release pattern, so the snapshot stays until the next fence.
  if (tc.fenced) join(object, *tc.fenced);
}

}  // namespace races
}  // namespace simt
