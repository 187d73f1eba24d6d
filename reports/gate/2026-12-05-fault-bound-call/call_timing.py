"""One process's median time of the allocating fused call, and its page faults and CPU time per call.

    python call_timing.py THREADS SHAPE      (e.g. 1 8x128x1024)

Run under MALLOC_MMAP_THRESHOLD_=131072, so that every call's output is a fresh mapping (the regime the
gate's quick grid reached at this shape), with FUSEDBENCH_BUILD_DIR and PYTHONPATH naming the build
and the tree whose `ops` it loads.
"""

import resource
import statistics
import sys
import time

import torch

import ops  # noqa: F401  (registers torch.ops.myops)

torch.set_num_threads(int(sys.argv[1]))
shape = tuple(int(s) for s in sys.argv[2].split("x"))
x, w, b = torch.randn(*shape), torch.randn(shape[-1]), torch.randn(shape[-1])
fused_norm = torch.ops.myops.fused_norm
for _ in range(50):
    fused_norm(x, w, b, 1e-6)
calls, times = 400, []
before = resource.getrusage(resource.RUSAGE_SELF)
for _ in range(calls):
    started = time.perf_counter_ns()
    fused_norm(x, w, b, 1e-6)
    times.append(time.perf_counter_ns() - started)
after = resource.getrusage(resource.RUSAGE_SELF)
print(
    f"{statistics.median(times) / 1000:.0f}us minflt/call {(after.ru_minflt - before.ru_minflt) / calls:.0f} "
    f"sys/call {(after.ru_stime - before.ru_stime) / calls * 1e6:.0f}us "
    f"user/call {(after.ru_utime - before.ru_utime) / calls * 1e6:.0f}us"
)
