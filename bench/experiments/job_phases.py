"""Where one process of ``invoke bench`` spends its wall time: per process, per job and per variant phase.

    python -m bench.experiments.job_phases [--quick] [--baseline all] [--shapes 32x512x4096,...]
                                           [--process 0] [--threads 1] [--exports-ahead] [--out DIR]

Runs the jobs one worker process of a full run would (its round of
ROUNDS, at its page offset) in this process, with clocks around the steps
of bench/rounds.py: building a case's inputs, its float64 reference, that
reference made ready for comparing (``prepare``), each variant's set-up
(export, compile, session), the verification's comparison, the
warm-up, the block probe and the sampling loop (and whether sampling
stopped on the width or ran to the cap). Nothing about the measurement
changes: the clocks wrap the product's own functions from outside.

Written under --out: ``job_phases.csv`` (one line per variant and one per
job, the phases in seconds) and ``job_phases.md`` (the totals per phase,
per baseline and per shape).
"""

from __future__ import annotations

import argparse
import resource
import time
from collections import defaultdict
from collections.abc import Callable, Sequence
from contextlib import contextmanager
from pathlib import Path

PHASES = ("inputs", "reference", "prepare", "setup", "verify", "warmup", "block", "sampling", "other")


def _usage() -> tuple[int, float]:
    """This process's minor page faults and system CPU seconds so far (both threads' pools included)."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_minflt, usage.ru_stime


class _Clock:
    """Seconds per phase, charged to the variant (or, between variants, the job) being run."""

    def __init__(self) -> None:
        self.current: dict[str, float] = defaultdict(float)
        self.rows: list[dict] = []
        self._open: set[str] = set()

    @contextmanager
    def phase(self, name: str):
        if name in self._open:  # nested in itself (a case building its shared inputs): counted once
            yield
            return
        self._open.add(name)
        faults_before, system_before = _usage()
        began = time.perf_counter()
        try:
            yield
        finally:
            self._open.discard(name)
            self.current[name] += time.perf_counter() - began
            faults, system = _usage()
            self.current[f"faults {name}"] += faults - faults_before
            self.current[f"sys {name}"] += system - system_before

    def wrap(self, name: str, function: Callable) -> Callable:
        def wrapped(*args, **kwargs):
            with self.phase(name):
                return function(*args, **kwargs)

        return wrapped

    def take(self) -> dict[str, float]:
        taken, self.current = dict(self.current), defaultdict(float)
        return taken


def _instrument(clock: _Clock) -> None:
    """Wrap the product's steps (module attributes, looked up at call time) in the clock."""
    import bench.measure.timing as timing
    import bench.measure.verify as verify
    import bench.plan.workloads as workloads
    import bench.rounds as rounds

    for cls in (workloads.NormInputs, workloads.OpCase, workloads.AddNormCase, workloads.ModelCase):
        cls.create = classmethod(clock.wrap("inputs", cls.create.__func__))
        if hasattr(cls, "reference"):
            cls.reference = clock.wrap("reference", cls.reference)
    rounds.verify_outputs = clock.wrap("verify", rounds.verify_outputs)
    verify.prepare = clock.wrap("prepare", verify.prepare)  # a case's reference made ready for comparing
    timing.warm_up_timed = clock.wrap("warmup", timing.warm_up_timed)  # what measure() calls
    timing.block_size = clock.wrap("block", timing.block_size)
    measure = timing.measure

    def measured(call, config, resolution_ns, block=None):
        faults, system = _usage()
        result = measure(call, config, resolution_ns, block)
        faults_after, system_after = _usage()
        clock.current["faults sampling"] += faults_after - faults
        clock.current["sys sampling"] += system_after - system
        clock.current["sampling"] += result.wall_s
        clock.current["samples"] += len(result.samples_us)
        clock.current["capped"] += float(result.wall_s >= config.budget_s * 0.999)
        return result

    rounds.measure = measured


def _timed(job, clock: _Clock):
    """``job`` with a clock around each variant it yields (from the yield to the next request) and its set-up."""
    from dataclasses import replace

    from bench.plan.jobs import Job

    def measurements():
        for case, baseline, variant in job.measurements():
            faults, system = _usage()
            began = time.perf_counter()
            yield case, baseline, replace(variant, prepare=clock.wrap("setup", variant.prepare))
            phases = clock.take()
            phases["total"] = time.perf_counter() - began
            # The case's inputs are built before the first variant: charged to it, outside its total.
            phases["other"] = phases["total"] - sum(phases.get(p, 0.0) for p in PHASES[1:-1])
            faults_after, system_after = _usage()
            for measure, spent in (("faults", faults_after - faults), ("sys", system_after - system)):
                phases[f"{measure} other"] = spent - sum(phases.get(f"{measure} {p}", 0.0) for p in PHASES[1:-1])
            clock.rows.append({"kind": "variant", "variant": variant.name, **phases})

    return Job(job.label, measurements)


def run(options, page_offset: int, imported_torch: float, exports_ahead: bool = False) -> list[dict]:
    import tempfile

    import torch

    from bench.ab.driver import per_process
    from bench.measure.placement import set_page_offset
    from bench.measure.verify import CaseReferences
    from bench.plan.jobs import plan_jobs
    from bench.plan.options import default_threads
    from bench.rounds import Results, run_round, run_settings
    from bench.run import FULL_RUN_PROCESSES

    options = per_process(options, FULL_RUN_PROCESSES)
    set_page_offset(page_offset)
    torch.set_num_threads(options.threads or default_threads())
    settings = run_settings(options)
    clock = _Clock()
    _instrument(clock)
    rows = [{"kind": "process", "job": "import torch", "total": imported_torch}]
    results, references = Results(), CaseReferences()
    with tempfile.TemporaryDirectory(prefix="job-phases-") as tmp:
        if exports_ahead:  # as `invoke bench` does before its processes start: their ORT set-up then loads files
            from bench.plan.warm_exports import export_ahead

            print(export_ahead(options, Path(tmp)), flush=True)
        planned = time.perf_counter()
        jobs = plan_jobs(options, Path(tmp))
        rows.append({"kind": "process", "job": "import bench + plan", "total": time.perf_counter() - planned})
        for job in jobs:
            first = len(clock.rows)
            began = time.perf_counter()
            # Every worker runs its one round as round 0, one job a call, a case's prepared reference shared.
            run_round([_timed(job, clock)], 0, settings, results, references=references)
            total = time.perf_counter() - began
            for row in clock.rows[first:]:
                row["job"] = job.label
            leftover = clock.take()  # what ran outside any variant: the case's inputs for a copy job, gc
            rows += clock.rows[first:]
            rows.append({"kind": "job", "job": job.label, **leftover, "total": total})
            print(f"{total:7.2f} s  {job.label}", flush=True)
    return rows


def _table(rows: list[dict], key: Callable[[dict], str], title: str, measure: str = "") -> list[str]:
    """Per ``key``: the phases' wall seconds, or (``measure`` "faults" / "sys") their page faults / system seconds."""
    sums: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    for row in rows:
        if row["kind"] == "process":
            continue
        for phase in (*PHASES, "samples", "capped"):
            value = row.get(f"{measure} {phase}" if measure and phase in PHASES else phase, 0.0)
            sums[key(row)][phase] += 0.0 if value != value else value  # NaN: a column another row has
        sums[key(row)]["variants"] += row["kind"] == "variant"
    job_total = defaultdict(float)
    for row in rows:
        if row["kind"] == "job":
            job_total[key(row)] += row["total"]
    lines = [
        f"### {title}",
        "",
        "| | wall s | " + " | ".join(PHASES) + " | variants | capped |",
        "|---" * (len(PHASES) + 4) + "|",  # the name, the wall time, the phases, variants, capped
    ]
    for name, phase in sorted(sums.items(), key=lambda item: -job_total.get(item[0], 0.0)):
        scale = 1e-3 if measure == "faults" else 1.0  # faults in thousands
        cells = " | ".join(f"{phase[p] * scale:.1f}" for p in PHASES)
        lines.append(
            f"| {name} | {job_total.get(name, 0.0):.1f} | {cells} | {phase['variants']:.0f} | {phase['capped']:.0f} |"
        )
    return lines + [""]


def _shape(row: dict) -> str:
    return " ".join(row["job"].split(" ")[:2])


def _baseline(row: dict) -> str:
    words = row["job"].split(" ")
    return words[3] if len(words) > 3 and not row["job"].startswith("limit") else "limits"


def report(rows: list[dict], out: Path) -> str:
    import pandas as pd

    out.mkdir(parents=True, exist_ok=True)
    pd.DataFrame(rows).to_csv(out / "job_phases.csv", index=False)
    process = [f"| {r['job']} | {r['total']:.1f} |" for r in rows if r["kind"] == "process"]
    jobs = sum(r["total"] for r in rows if r["kind"] == "job")
    lines = ["### process", "", "| step | s |", "|---|---|", *process, f"| jobs | {jobs:.1f} |", ""]
    # Job rows carry the time outside variants (inputs of a copy job, gc); variant rows the rest.
    lines += _table(rows, _shape, "per workload and shape")
    lines += _table(rows, _baseline, "per baseline")
    lines += _table(rows, _shape, "minor page faults (thousands) per workload and shape", "faults")
    lines += _table(rows, _shape, "system CPU seconds per workload and shape", "sys")
    text = "\n".join(lines)
    (out / "job_phases.md").write_text(text + "\n")
    return text


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--baseline", default="all")
    parser.add_argument("--shapes", default="", help="op shapes (comma list); default the grid's")
    parser.add_argument("--process", type=int, default=0, help="which process of the full run (its page offset)")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--out", type=Path, default=Path("reports/job_phases"))
    parser.add_argument(
        "--exports-ahead",
        action="store_true",
        help="export the ORT variants' modules first, untimed, as the bench task does",
    )
    args = parser.parse_args(argv)
    from bench.measure.allocator import DEFAULT, set_malloc_policy

    set_malloc_policy(DEFAULT)  # before torch allocates, as a worker does
    began = time.perf_counter()
    import torch  # noqa: F401

    imported_torch = time.perf_counter() - began
    from bench.measure.placement import spread_offsets
    from bench.plan.grid import parse_shape
    from bench.plan.options import BenchOptions

    shapes = tuple(parse_shape(s) for s in args.shapes.split(",") if s.strip()) or None
    options = BenchOptions(
        baseline=args.baseline,
        quick=args.quick,
        threads=args.threads,
        op_shapes=shapes,
        add_norm_shapes=shapes if shapes else None,
        model_batches=() if shapes else None,
    )
    from bench.run import FULL_RUN_PROCESSES

    rows = run(options, spread_offsets(FULL_RUN_PROCESSES)[args.process], imported_torch, args.exports_ahead)
    print(report(rows, args.out))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
