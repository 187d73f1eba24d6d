// The CPU's cache sizes as the CPU kernel wants them (fused_norm::CpuCaches),
// read from the OS. Kept out of csrc/core, which is math only: each
// framework adapter asks here once and passes the sizes in its problems.
#pragma once

#include "../core/fused_norm.h"

namespace fused_norm {

// The data caches Linux describes for cpu0 (/sys/devices/system/cpu/cpu0/
// cache/index*/), each overridden by an environment variable when set:
// FUSED_NORM_L2_BYTES and FUSED_NORM_LLC_BYTES, in bytes (0 or a value that
// is not a positive number: not known). The overrides serve a machine whose
// share of a cache differs from what it reports, and tests of the streamed
// stores on small tensors. Read on the first call; every later call returns
// the same sizes.
const CpuCaches& cpu_caches();

// The same reading from a sysfs-like tree at `cache_dir` (the folder holding
// index0/, index1/, ...) and these override texts (null: unset). For tests.
CpuCaches read_cpu_caches(const char* cache_dir, const char* l2_override, const char* llc_override);

}  // namespace fused_norm
