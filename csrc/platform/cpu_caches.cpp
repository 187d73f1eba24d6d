#include "cpu_caches.h"

#include <cstdio>
#include <cstdlib>
#include <string>

namespace fused_norm {
namespace {

// The first line of a small text file, empty if it cannot be read.
std::string first_line(const std::string& path) {
  std::string line;
  if (FILE* f = std::fopen(path.c_str(), "r")) {
    char buffer[64];
    if (std::fgets(buffer, sizeof buffer, f)) line = buffer;
    std::fclose(f);
  }
  return line;
}

// A size override: unset keeps `otherwise`; a value that is not a positive
// number means "not known" (0).
int64_t override_or(const char* text, int64_t otherwise) {
  if (text == nullptr) return otherwise;
  const long long value = std::strtoll(text, nullptr, 10);
  return value > 0 ? static_cast<int64_t>(value) : int64_t{0};
}

}  // namespace

// Not sysconf: glibc adds up every instance in the package on some CPUs (384
// MiB for twelve 32 MiB L3s on an AMD EPYC), where the kernel wants one.
CpuCaches read_cpu_caches(const char* cache_dir, const char* l2_override, const char* llc_override) {
  CpuCaches sizes;
  int64_t top_level = 0;
  for (int index = 0; index < 16; ++index) {
    const std::string dir = std::string(cache_dir) + "/index" + std::to_string(index) + "/";
    const std::string level = first_line(dir + "level");
    if (level.empty()) break;
    if (first_line(dir + "type").rfind("Instruction", 0) == 0) continue;
    const std::string text = first_line(dir + "size");  // "512K", "32768K"
    char* unit = nullptr;
    int64_t value = std::strtoll(text.c_str(), &unit, 10);
    if (unit && *unit == 'K') value <<= 10;
    if (unit && *unit == 'M') value <<= 20;
    const int64_t this_level = std::strtoll(level.c_str(), nullptr, 10);
    if (value <= 0) continue;
    if (this_level == 2) sizes.level2 = value;
    if (this_level > top_level) top_level = this_level, sizes.last_level = value;
  }
  sizes.level2 = override_or(l2_override, sizes.level2);
  sizes.last_level = override_or(llc_override, sizes.last_level);
  return sizes;
}

const CpuCaches& cpu_caches() {
  static const CpuCaches caches = read_cpu_caches(
      "/sys/devices/system/cpu/cpu0/cache", std::getenv("FUSED_NORM_L2_BYTES"), std::getenv("FUSED_NORM_LLC_BYTES"));
  return caches;
}

}  // namespace fused_norm
