"""Whether a two-thread workload gets its second core, process by process, over time.

    python -m bench.experiments.thread_state [--processes 20] [--seconds 10] [--out reports/power_curves/thread_state]

Separate reports of one commit disagreed on the rows that run on both vCPUs (ONNX Runtime's sessions, the
model rows), each process landing on one of two levels about 1.2-1.7x apart. This runs ``--processes``
fresh processes one after the other; each times the same matrix product at two threads and at one, second by
second, and reads the machine's steal time (/proc/stat) over its run. A process whose two-thread time sits
at its one-thread time did not get its second core. Writes ``thread_state.csv``: one line per process and
second (`process`, `second`, `threads`, `median_us`), and ``processes.csv``: per process, the medians of
both, their ratio (the speed-up the second thread gave) and the steal seconds per vCPU over the process.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd

from env.paths import reports_dir

# The child: a product of the model rows' size (32 x 128 tokens by 128 features into 512), timed per second.
CHILD = r"""
import json, sys, time, torch
seconds = float(sys.argv[1])
a, m = torch.randn(32 * 128, 128), torch.randn(128, 512)
def work():
    return torch.relu(a @ m) @ m.t()
def steal():
    with open("/proc/stat") as f:
        return int(f.readline().split()[8])
lines, before = [], steal()
for threads in (2, 1):
    torch.set_num_threads(threads)
    for _ in range(20):
        work()
    for second in range(int(seconds)):
        times, end = [], time.perf_counter() + 1.0
        while time.perf_counter() < end:
            start = time.perf_counter(); work(); times.append(time.perf_counter() - start)
        times.sort()
        lines.append({"second": second, "threads": threads, "median_us": times[len(times) // 2] * 1e6})
print(json.dumps({"lines": lines, "steal_jiffies": steal() - before}))
"""


def one_process(seconds: float) -> dict:
    done = subprocess.run([sys.executable, "-c", CHILD, str(seconds)], capture_output=True, text=True, check=True)
    return json.loads(done.stdout)


def summarise(lines: pd.DataFrame, steal: dict[int, float]) -> pd.DataFrame:
    per = lines.groupby(["process", "threads"]).median_us.median().unstack("threads")
    return pd.DataFrame(
        {
            "process": per.index,
            "two_threads_us": per[2].to_numpy(),
            "one_thread_us": per[1].to_numpy(),
            "speedup": (per[1] / per[2]).to_numpy(),
            "steal_s_per_vcpu": [steal[p] for p in per.index],
        }
    )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--processes", type=int, default=20)
    parser.add_argument("--seconds", type=float, default=10.0, help="seconds of timing per thread count")
    parser.add_argument("--out", type=Path, default=reports_dir() / "power_curves" / "thread_state")
    args = parser.parse_args(argv)
    if args.processes < 1 or args.seconds < 1:
        parser.error("--processes and --seconds must be >= 1")
    ticks, vcpus = os.sysconf("SC_CLK_TCK"), os.cpu_count() or 1
    lines, steal = [], {}
    for process in range(args.processes):
        started = time.strftime("%H:%M:%S", time.gmtime())
        found = one_process(args.seconds)
        lines += [{"process": process, "started_utc": started, **line} for line in found["lines"]]
        steal[process] = found["steal_jiffies"] / ticks / vcpus
    frame = pd.DataFrame(lines)
    summary = summarise(frame, steal)
    args.out.mkdir(parents=True, exist_ok=True)
    frame.to_csv(args.out / "thread_state.csv", index=False, float_format="%.1f")
    summary.to_csv(args.out / "processes.csv", index=False, float_format="%.3f")
    print(summary.to_string(index=False, float_format=lambda v: f"{v:.2f}"))


if __name__ == "__main__":
    main()
