// Round trip of one cache line between CPU 0 and CPU 1, in windows: how far apart the host has put two vCPUs.
//
//   core_pingpong WINDOWS [ROUND_TRIPS]   -> one line: each window's mean round trip in nanoseconds
//
// Thread A (pinned to CPU 1) writes an odd value and spins until thread B (pinned to CPU 0) has answered with
// the next even one. Each window is ROUND_TRIPS (default 200000) such trips. Used by core_placement.py.
#include <pthread.h>
#include <sched.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>

namespace {

alignas(64) std::atomic<long> line{0};
constexpr long kStop = -1;

bool pin_to(int cpu) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  return pthread_setaffinity_np(pthread_self(), sizeof set, &set) == 0;
}

void answer() {
  pin_to(0);
  for (;;) {
    long value;
    while (((value = line.load(std::memory_order_acquire)) & 1) == 0) {
    }
    if (value == kStop) return;
    line.store(value + 1, std::memory_order_release);
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: core_pingpong WINDOWS [ROUND_TRIPS]\n");
    return 2;
  }
  const int windows = std::atoi(argv[1]);
  const long trips = argc > 2 ? std::atol(argv[2]) : 200000;
  std::thread other(answer);
  if (!pin_to(1)) {
    std::fprintf(stderr, "core_pingpong: cannot pin to CPU 1 (needs two CPUs)\n");
    line.store(kStop);
    other.join();
    return 2;
  }
  long value = 0;
  for (int w = 0; w < windows; ++w) {
    const auto start = std::chrono::steady_clock::now();
    for (long i = 0; i < trips; ++i) {
      line.store(value + 1, std::memory_order_release);
      while (line.load(std::memory_order_acquire) != value + 2) {
      }
      value += 2;
    }
    const std::chrono::duration<double, std::nano> took = std::chrono::steady_clock::now() - start;
    std::printf("%s%.1f", w ? " " : "", took.count() / trips);
  }
  std::printf("\n");
  line.store(kStop, std::memory_order_release);
  other.join();
  return 0;
}
