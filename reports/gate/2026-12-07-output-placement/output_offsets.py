"""Where the allocating fused call's output lands in its page, in one worker of a quick run.

    PYTHONPATH=. python reports/gate/2026-12-07-output-placement/output_offsets.py K   # K: the worker, 0-2

Plans the quick grid as a worker of a three-process run does (its page offset, two threads), runs the jobs of
op 1x8x512 and prints, for each of them, the offset into a page of every verified call's output.
"""

import sys
import tempfile
from pathlib import Path

from bench.measure.allocator import DEFAULT, set_malloc_policy

set_malloc_policy(DEFAULT)  # before torch allocates, as a worker does

import torch  # noqa: E402

import bench.rounds as rounds  # noqa: E402
from bench.ab.driver import per_process  # noqa: E402
from bench.measure.placement import set_page_offset, spread_offsets  # noqa: E402
from bench.measure.verify import CaseReferences  # noqa: E402
from bench.plan.jobs import plan_jobs  # noqa: E402
from bench.plan.options import BenchOptions  # noqa: E402
from bench.rounds import Results, run_round, run_settings  # noqa: E402

worker = int(sys.argv[1])
torch.set_num_threads(2)
options = per_process(BenchOptions(baseline="all", quick=True, threads=2), 3)
set_page_offset(spread_offsets(3)[worker])
seen: list[int] = []
verify_outputs = rounds.verify_outputs


def recording(output, reference, tolerance):
    first = output[0] if isinstance(output, (list, tuple)) else output
    address = first.data_ptr() if hasattr(first, "data_ptr") else first.__array_interface__["data"][0]
    seen.append(address % 4096)
    return verify_outputs(output, reference, tolerance)


rounds.verify_outputs = recording
settings, results, references = run_settings(options), Results(), CaseReferences()
with tempfile.TemporaryDirectory() as workdir:
    for job in plan_jobs(options, Path(workdir)):
        if not job.label.startswith("op 1x8x512"):
            continue
        before = len(seen)
        run_round([job], 0, settings, results, references=references)
        if job.label.endswith(("unfused", "fused")):
            print(worker, job.label, "output offsets in page:", seen[before:])
