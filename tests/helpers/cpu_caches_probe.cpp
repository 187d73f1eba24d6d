// Prints what csrc/platform/cpu_caches.cpp reads from a sysfs-like tree:
//
//   cpu_caches_probe CACHE_DIR [L2_OVERRIDE|-] [LLC_OVERRIDE|-]
//
// ("-" or absent: the override is unset), as "level2 N last_level N".
#include <cstdio>
#include <cstring>

#include "platform/cpu_caches.h"

int main(int argc, char** argv) {
  if (argc < 2) return 2;
  auto arg = [&](int i) -> const char* { return argc > i && std::strcmp(argv[i], "-") != 0 ? argv[i] : nullptr; };
  const fused_norm::CpuCaches caches = fused_norm::read_cpu_caches(argv[1], arg(2), arg(3));
  std::printf("level2 %lld last_level %lld\n", static_cast<long long>(caches.level2),
              static_cast<long long>(caches.last_level));
  return 0;
}
