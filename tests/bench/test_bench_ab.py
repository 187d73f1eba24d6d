"""`bench --against REF`: process design and statistics with fake workers (fast); the real two-build path (slow).

Fast tier: a fake worker answers the driver as bench/processes/worker.py does and
writes a real report whose samples come from a known distribution; each of its
processes carries its own offset (the bias a process's buffer layout or thread
placement gives it), so whether a process-level bias reads as a build effect is
tested directly. The driver's guards (deadlines, options a REF lacks, the
environment a side's process gets) are tested on their own.

Slow tier: the scratch repository of tests/bench/conftest.py (this checkout as
commit "clean", a "slow" commit with the build-time slowdown switch on, a commit
without the A/B worker) and its two builds, made once per session and shared
with the gate's test, which holds the slowed commit against the clean one.
"""

from __future__ import annotations

import io
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from rich.console import Console

from bench.ab import driver as ab
from bench.ab import scratch
from bench.plan.options import BenchOptions
from bench.processes.worker import PROTOCOL
from bench.report.schema import SCHEMA_VERSION, RowSamples, read_samples
from bench.rounds import run_settings
from bench.stats.compare import INCONCLUSIVE, REGRESSION, SAME, compare_reports
from env.paths import REPO_ROOT
from tests.helpers.bench_synthetic import make_key, synthetic_report

KEYS = [make_key(shape=s, baseline=b) for s in ("1x8x512", "8x128x1024") for b in ("fused", "unfused")]
MEDIANS = {k: 10.0 * (i + 1) for i, k in enumerate(KEYS)}
JOBS = 3


class FakeWorker:
    """Speaks the worker protocol in-process; samples = median x the process's offset x lognormal noise."""

    def __init__(
        self,
        label: str,
        log: Path,
        offset: float,
        rng: np.random.Generator,
        fields=None,
        protocol: int = PROTOCOL,
        turns_per_job: int = 3,
        timeline: list[str] | None = None,
    ) -> None:
        self.label, self.log, self.offset, self.rng = label, log, offset, rng
        self.fields = fields or list(vars(BenchOptions()))
        self.hello = {"protocol": protocol, "schema_version": SCHEMA_VERSION}
        self.jobs_run: list[int] = []
        self.plan: dict = {}
        self.turns_per_job, self.turns_left = turns_per_job, 0
        self.timeline = timeline if timeline is not None else []  # one entry per turn run, shared by the workers
        self._sent: list[dict] = []
        self.paused = False
        self.peers: list[FakeWorker] = []

    def pause(self) -> None:
        self.paused = True

    def resume(self) -> None:
        self.paused = False

    def send(self, request: dict) -> None:
        assert not self.paused, "a request sent to a stopped worker"
        self._sent.append(request)

    def receive(self, what: str) -> dict:
        request = self._sent.pop(0)
        assert request["do"] in (what, "go")
        return self.ask(request)

    def ask(self, request: dict) -> dict:
        what = request["do"]
        if what == "fields":
            return {"options": self.fields}
        if what == "plan":
            self.plan = request
            return {"jobs": JOBS, "rounds": request["options"]["rounds"], "pid": 0}
        if what == "job":
            self.jobs_run.append(request["index"])
            if request.get("turns"):
                assert self.hello["protocol"] >= ab.TURNS_SINCE_PROTOCOL and self.turns_left == 0
                if not self.turns_per_job:  # every variant skipped: nothing timed, no turn asked for
                    return {"seconds": 0.0}
                self.turns_left = self.turns_per_job
                return {"turn": "waiting"}
            self.timeline.append(f"{self.label}{request['index']}")
            return {"seconds": 0.01}
        if what == "go":
            assert self.turns_left > 0, "a turn given to a worker that has no job"
            assert all(peer.paused for peer in self.peers if peer.turns_left), "a waiting peer was left running"
            self.timeline.append(f"{self.label}{self.jobs_run[-1]}")
            self.turns_left -= 1
            return {"turn": "waiting"} if self.turns_left else {"seconds": 0.01 * self.turns_per_job}
        if what == "record":
            assert self.jobs_run == list(range(JOBS))  # every job, once, in order
            noise = {k: self.rng.lognormal(0, 0.05, 200) for k in MEDIANS}
            samples = {k: RowSamples.single_round(m * self.offset * noise[k]) for k, m in MEDIANS.items()}
            csv = synthetic_report(Path(request["out_dir"]) / "report.csv", samples)
            return {"csv": str(csv), "failures": [], "skipped": []}
        raise AssertionError(what)

    def close(self) -> None:
        pass


def _measure(tmp_path: Path, offsets: dict[str, list[float]], seed: int, processes: int = 4):
    rng = np.random.default_rng(seed)
    started: list[FakeWorker] = []

    def start(label: str, tree: ab.Tree, log: Path) -> FakeWorker:
        worker = FakeWorker(label, log, offsets[label][len([w for w in started if w.label == label])], rng)
        started.append(worker)
        return worker

    sides = {"NEW": ab.Tree(tmp_path / "new"), "BASE": ab.Tree(tmp_path / "base")}
    console = Console(file=io.StringIO(), width=200)
    measured = ab.measure_processes(sides, BenchOptions(quick=True), processes, tmp_path / f"run{seed}", console, start)
    return measured, started


def test_processes_start_in_alternating_pairs_with_their_own_page_offsets(tmp_path):
    measured, started = _measure(tmp_path, {"NEW": [1.0] * 4, "BASE": [1.0] * 4}, seed=1)
    assert [w.label for w in started] == ["NEW", "BASE", "BASE", "NEW", "NEW", "BASE", "BASE", "NEW"]
    offsets = [w.plan["page_offset"] for w in started]
    assert offsets == [0, 0, 1024, 1024, 2048, 2048, 3072, 3072]  # one per pair, spread over the page
    assert all(w.plan["options"]["rounds"] == 4 for w in started)  # each process takes 1/4 of the budget
    log = pd.read_csv(tmp_path / "run1" / "processes.csv")
    assert list(log.page_offset) == offsets and list(log.side) == [w.label for w in started]
    # Pooled: one round per process, so compare sees 4 units a side.
    for label in ("NEW", "BASE"):
        samples = read_samples(measured.csv[label])
        assert sorted(samples) == sorted(KEYS)
        assert all(sorted(np.unique(s.rounds)) == [0, 1, 2, 3] and len(s.values) == 800 for s in samples.values())


@pytest.mark.parametrize("seed", range(3))
def test_a_20_percent_offset_of_one_process_is_never_a_regression(tmp_path, seed):
    # One of NEW's processes is 20 % slower, as a process with an unlucky layout is; the builds are the same.
    measured, _ = _measure(tmp_path, {"NEW": [1.2, 1.0, 1.0, 1.0], "BASE": [1.0] * 4}, seed)
    comparison = compare_reports(measured.csv["BASE"], measured.csv["NEW"], paired=True)
    verdicts = {r.verdict for r in comparison.rows}
    assert verdicts <= {SAME, INCONCLUSIVE} and not comparison.regressions
    assert all(r.units == 4 and r.paired for r in comparison.rows)


@pytest.mark.parametrize("odd", [0, 9])
def test_at_ten_pairs_one_odd_process_is_trimmed_and_a_slowdown_in_all_is_still_flagged(tmp_path, odd):
    # As a quick A/B run: 10 pairs. One of NEW's processes 20 % slower (an unlucky process) is trimmed off,
    # so identical builds read SAME; a 20 % slowdown of every NEW process is flagged on every row.
    offsets = [1.2 if index == odd else 1.0 for index in range(10)]
    measured, _ = _measure(tmp_path / "aa", {"NEW": offsets, "BASE": [1.0] * 10}, seed=odd, processes=10)
    comparison = compare_reports(measured.csv["BASE"], measured.csv["NEW"], paired=True)
    assert {r.verdict for r in comparison.rows} == {SAME} and all(r.units == 10 for r in comparison.rows)
    # Trimmed, the odd process leaves no trace (judged by the mean, as below 10 pairs, this fails).
    assert all(abs(r.ratio - 1) < 0.01 and r.ci_high - r.ci_low < 0.03 for r in comparison.rows), comparison.rows
    slowed = [1.2 * offset for offset in offsets]
    measured, _ = _measure(tmp_path / "slow", {"NEW": slowed, "BASE": [1.0] * 10}, seed=odd, processes=10)
    comparison = compare_reports(measured.csv["BASE"], measured.csv["NEW"], paired=True)
    assert {r.verdict for r in comparison.rows} == {REGRESSION}


def _peers(tmp_path: Path, new_turns: int, base_turns: int) -> tuple[FakeWorker, FakeWorker, list[str]]:
    """A NEW and a BASE fake worker that see each other, taking the given turns per job; their shared timeline."""
    timeline: list[str] = []
    rng = np.random.default_rng(0)
    new, base = (
        FakeWorker(label, tmp_path, 1.0, rng, turns_per_job=n, timeline=timeline)
        for label, n in (("NEW", new_turns), ("BASE", base_turns))
    )
    new.peers, base.peers = [base], [new]
    return new, base, timeline


def test_the_two_sides_of_a_job_take_turns_one_at_a_time(tmp_path):
    new, base, timeline = _peers(tmp_path, 3, 5)
    assert ab.takes_turns([new, base])
    replies = ab.run_job_in_turns([base, new], job=2)
    # BASE first (the order given), then alternating; NEW's job ends after its third turn and BASE keeps
    # the CPU for its last two.
    assert timeline == ["BASE2", "NEW2", "BASE2", "NEW2", "BASE2", "NEW2", "BASE2", "BASE2"]
    assert {label: reply["seconds"] for label, reply in replies.items()} == pytest.approx({"NEW": 0.03, "BASE": 0.05})


def test_a_side_whose_job_times_nothing_takes_no_turn_and_the_other_side_runs_alone(tmp_path):
    new, base, timeline = _peers(tmp_path, 0, 2)
    replies = ab.run_job_in_turns([new, base], job=1)
    assert timeline == ["BASE1", "BASE1"]
    assert replies == {"NEW": {"seconds": 0.0}, "BASE": {"seconds": pytest.approx(0.02)}}


def test_a_ref_from_before_turn_taking_runs_its_jobs_after_this_checkouts(tmp_path):
    timeline: list[str] = []
    rng = np.random.default_rng(0)
    started: list[FakeWorker] = []

    def start(label: str, tree: ab.Tree, log: Path) -> FakeWorker:
        old = label == "BASE"
        started.append(FakeWorker(label, log, 1.0, rng, protocol=2 if old else PROTOCOL, timeline=timeline))
        return started[-1]

    sides = {"NEW": ab.Tree(tmp_path / "new"), "BASE": ab.Tree(tmp_path / "base")}
    console = Console(file=io.StringIO(), width=200)
    measured = ab.measure_processes(sides, BenchOptions(quick=True), 2, tmp_path / "run", console, start)
    assert measured.csv["NEW"] is not None and measured.csv["BASE"] is not None
    # Whole jobs, one after the other, alternating which side goes first: pair 1 starts NEW, pair 2 BASE.
    pair_1 = ["NEW0", "BASE0", "BASE1", "NEW1", "NEW2", "BASE2"]
    pair_2 = ["BASE0", "NEW0", "NEW1", "BASE1", "BASE2", "NEW2"]
    assert timeline == pair_1 + pair_2
    ab.check_compatible(started[1].hello, "a" * 40)  # protocol 2 is still spoken


def test_a_20_percent_slowdown_in_every_process_is_a_regression(tmp_path):
    measured, _ = _measure(tmp_path, {"NEW": [1.2] * 4, "BASE": [1.0] * 4}, seed=7)
    comparison = compare_reports(measured.csv["BASE"], measured.csv["NEW"], paired=True)
    assert [r.verdict for r in comparison.rows] == [REGRESSION] * len(KEYS)
    assert all(1.15 < r.ratio < 1.25 for r in comparison.rows)


def test_the_same_offset_in_one_process_of_the_old_single_process_design_was_a_regression(tmp_path):
    # Why processes are the unit: with one process a side, the same process bias is in every sample.
    measured, _ = _measure(tmp_path, {"NEW": [1.2, 1.2], "BASE": [1.0, 1.0]}, seed=3, processes=2)
    # Each row at 95 %, as that design judged them (alpha per row = family-wise alpha / rows).
    comparison = compare_reports(measured.csv["BASE"], measured.csv["NEW"], alpha=0.05 * len(KEYS), paired=True)
    assert comparison.row_alpha == pytest.approx(0.05)
    assert {r.verdict for r in comparison.rows} == {REGRESSION}


# --- the driver's guards (fast) -------------------------------------------------------------


def test_a_worker_that_hangs_is_stopped_at_the_deadline_with_its_log(tmp_path):
    hello = f'{{"protocol": {PROTOCOL}, "schema_version": {SCHEMA_VERSION}}}'
    script = (
        f"import sys, time; print({hello!r}, flush=True); print('stuck', file=sys.stderr, flush=True); time.sleep(60)"
    )
    command = [sys.executable, "-c", script]
    worker = ab.Worker("BASE", tmp_path, None, tmp_path / "base.log", command=command, timeout_s=2.0)
    try:
        with pytest.raises(ab.AbError, match=r"did not answer 'plan' within 2 s and was stopped(.|\n)*stuck"):
            worker.ask({"do": "plan"})
        assert worker.process.poll() is not None  # killed, not left running
    finally:
        worker.close()


TURN_TAKER = """
import json, sys, threading, time
print(json.dumps({"protocol": PROTOCOL, "schema_version": SCHEMA}), flush=True)
def spin():  # an idle pool thread that spins instead of sleeping
    while True:
        pass
threading.Thread(target=spin, daemon=True).start()
for line in sys.stdin:
    if json.loads(line)["do"] != "job":
        break
    cpu, own = time.process_time(), 0.0
    for turn in range(3):
        print(json.dumps({"turn": "waiting"}), flush=True)
        assert json.loads(sys.stdin.readline())["do"] == "go"
        began = time.perf_counter()
        while time.perf_counter() - began < 0.05:
            pass
        own += time.perf_counter() - began
    print(json.dumps({"seconds": own, "cpu": time.process_time() - cpu}), flush=True)
"""


def test_a_waiting_worker_is_stopped_with_all_its_threads(tmp_path):
    # Each stand-in worker has a thread that spins all the time. Stopped while the other takes its turn,
    # a worker uses about as much CPU as its own turns last; left running, its spinning thread would add
    # the other's turns too.
    script = TURN_TAKER.replace("PROTOCOL", str(PROTOCOL)).replace("SCHEMA", str(SCHEMA_VERSION))
    workers = [
        ab.Worker(label, tmp_path, None, tmp_path / f"{label}.log", command=[sys.executable, "-c", script])
        for label in ("NEW", "BASE")
    ]
    try:
        replies = ab.run_job_in_turns(workers, job=0)
        assert not any(worker.paused for worker in workers)
        for label, reply in replies.items():
            assert reply["seconds"] >= 0.15
            assert reply["cpu"] < 1.5 * reply["seconds"], (label, reply)
    finally:
        for worker in workers:
            worker.close()
    assert all(worker.process.poll() is not None for worker in workers)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the parent-death signal is Linux's")
def test_a_stopped_worker_dies_with_a_killed_driver(tmp_path):
    # A driver killed while a worker waits stopped for its turn cannot wake it: the worker must go too.
    driver = (
        "import sys, time; from pathlib import Path; from bench.ab import driver as ab\n"
        f"w = ab.Worker('NEW', Path({str(REPO_ROOT)!r}), None, Path({str(tmp_path / 'new.log')!r}))\n"
        "w.pause(); print(w.process.pid, flush=True); time.sleep(120)\n"
    )
    process = subprocess.Popen([sys.executable, "-c", driver], cwd=REPO_ROOT, stdout=subprocess.PIPE, text=True)
    worker_pid = int(process.stdout.readline())
    _wait_for_state(worker_pid, ("T",))  # SIGSTOP takes effect asynchronously
    process.kill()
    process.wait()
    _wait_for_state(worker_pid, (None, "Z"))  # gone, or a zombie about to be reaped


def _wait_for_state(pid: int, states: tuple[str | None, ...], timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while _state(pid) not in states and time.monotonic() < deadline:
        time.sleep(0.02)
    assert _state(pid) in states, f"process {pid} is in state {_state(pid)}, not one of {states}"


def _state(pid: int) -> str | None:
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except FileNotFoundError:
        return None
    return next(line.split()[1] for line in status.splitlines() if line.startswith("State:"))


def test_a_worker_that_dies_is_reported_with_its_exit_code(tmp_path):
    command = [sys.executable, "-c", "import sys; print('boom', file=sys.stderr); sys.exit(3)"]
    with pytest.raises(ab.AbError, match=r"exited \(code 3\)(.|\n)*boom"):
        ab.Worker("NEW", tmp_path, None, tmp_path / "new.log", command=command, timeout_s=60.0)


def test_an_option_a_ref_lacks_skips_the_run_when_set_and_is_dropped_at_its_default():
    known = [name for name in vars(BenchOptions()) if name != "l2_flush"]  # a REF from before --l2-flush
    plan = ab.plan_for(BenchOptions(quick=True), known, "BASE")
    assert "l2_flush" not in plan and plan["quick"] is True and "out_dir" not in plan
    with pytest.raises(ab.Skipped, match="BASE's bench has no option 'l2_flush' \\(set to True here\\)"):
        ab.plan_for(BenchOptions(l2_flush=True), known, "BASE")


def test_a_side_sees_only_its_own_build_and_sources(monkeypatch, tmp_path):
    # With FUSEDBENCH_CSRC_DIR inherited, REF's build would compile the caller's sources.
    for name in scratch.BUILD_VARIABLES:
        monkeypatch.setenv(name, f"/caller/{name}")
    env = scratch.side_env(tmp_path / "build")
    assert env["FUSEDBENCH_BUILD_DIR"] == str(tmp_path / "build")
    assert not {"FUSEDBENCH_CSRC_DIR", "FUSEDBENCH_TORCH_LIBRARY", "FUSEDBENCH_ORT_LIBRARY", "PYTHONPATH"} & set(env)
    assert scratch.side_env(None)["FUSEDBENCH_CSRC_DIR"] == "/caller/FUSEDBENCH_CSRC_DIR"  # this checkout: as it is


def test_each_process_times_a_variant_for_the_process_budget_unless_the_run_set_its_own():
    per = ab.per_process(BenchOptions(quick=True), 10, 0.125)
    settings = run_settings(per)
    assert per.rounds == 10 and settings.round_config(0).budget_s == pytest.approx(0.125)
    # Without a process budget a process takes its share of the mode's budget (a plain run in processes).
    assert run_settings(ab.per_process(BenchOptions(quick=True), 5)).round_config(0).budget_s == pytest.approx(0.05)
    # A budget the caller set is the whole run's, shared out whatever the process budget.
    own = ab.per_process(BenchOptions(quick=True, budget_s=0.02), 4, 0.125)
    assert run_settings(own).round_config(0).budget_s == pytest.approx(0.005)


def test_a_process_sample_floor_is_its_share_capped_where_few_processes_share_it():
    from bench.plan.options import MIN_SAMPLES, ROUND_FLOOR_CAP

    floors = {n: run_settings(ab.per_process(BenchOptions(), n)).round_config(0).min_samples for n in (1, 3, 12, 24)}
    # A full run's three processes: 4 each, not ceil(20 / 3) = 7; A/B pairs keep their shares of 20.
    assert floors == {1: ROUND_FLOOR_CAP, 3: ROUND_FLOOR_CAP, 12: 2, 24: 1}
    assert -(-MIN_SAMPLES // 3) > ROUND_FLOOR_CAP >= -(-MIN_SAMPLES // 12)


def test_an_incompatible_ref_is_skipped_with_the_reason():
    with pytest.raises(ab.Skipped, match="speaks protocol 1"):
        ab.check_compatible({"protocol": 1, "schema_version": SCHEMA_VERSION}, "a" * 40)
    with pytest.raises(ab.Skipped, match=f"writes report schema {SCHEMA_VERSION + 1}, this checkout reads 4, 5, 6, 7:"):
        ab.check_compatible({"protocol": PROTOCOL, "schema_version": SCHEMA_VERSION + 1}, "a" * 40)
    # A REF of an earlier schema this checkout reads (migrated) takes part: both sides run on this machine.
    ab.check_compatible({"protocol": PROTOCOL, "schema_version": SCHEMA_VERSION - 1}, "a" * 40)


# --- the real two-build path (slow) ---------------------------------------------------------

SMALL_GRID = BenchOptions(
    baseline="fused", op_shapes=((1, 8, 512),), model_batches=(), threads=1, warmup=20, budget_s=0.6
)
PROCESSES = 4  # as quick mode: with 2 the t interval has 1 degree of freedom and misses even a 3x slowdown


def _run(repo: dict, ref: str, tmp_path: Path, new: ab.Tree | None = None) -> tuple[ab.AbResult, str]:
    console = Console(file=io.StringIO(), width=250)
    options = BenchOptions(**{**vars(SMALL_GRID), "out_dir": tmp_path})
    new = new or ab.Tree(repo["root"], repo["root"] / "build")
    result = ab.run_ab(ref, options, console, new=new, processes=PROCESSES)
    return result, console.file.getvalue()


# Timed: an A/A verdict on measured times. The module's other slow tests share its scratch repository's builds
# (tests/bench/conftest.py), so they run in the same pass, not built again in another worker.
@pytest.mark.slow
@pytest.mark.timed
def test_the_same_commit_against_itself_has_no_regression(ab_repo, tmp_path, monkeypatch):
    # NEW is REF's own checkout and build: identical code, measured through the whole path. A row it leaves a
    # suspect is measured again in as many pairs as the first stage: the confirmation's 20 pairs buy power that
    # identical code has no use for, and its path runs the same.
    monkeypatch.setattr(ab, "CONFIRM_PROCESSES", PROCESSES)
    ref = ab.Tree(ab_repo["ref"] / "src", ab.ref_build_dir(ab_repo["ref"] / "src"))
    result, text = _run(ab_repo, ab_repo["clean"], tmp_path, new=ref)
    assert result.code == 0, text
    comparison = compare_reports(result.base_csv, result.new_csv, paired=True)
    # Three dispatch floors; at each of the two layouts the two copies and the op's two variants.
    assert len(comparison.rows) == 3 + 2 * 4 and not comparison.regressions, text
    assert {r.key[-1] for r in comparison.rows if r.key[0] == "op"} == {"natural", "page_offset"}
    assert "0 regression(s) - OK" in (result.folder / "compare.txt").read_text()
    # REF was built for its libraries alone: the CUDA compile check, which builds nothing the run loads, skipped.
    check = [line for line in (ab_repo["ref"] / "build.log").read_text().splitlines() if "CUDA compile check" in line]
    assert len(check) == 1 and "skipped (FUSEDBENCH_SKIP_CUDA_CHECK=1" in check[0], check


@pytest.mark.slow
@pytest.mark.timed
def test_a_ref_before_ab_support_is_skipped_with_the_reason(ab_repo, tmp_path):
    result, text = _run(ab_repo, ab_repo["old"], tmp_path)
    assert result.code == 0 and result.new_csv is None
    assert "A/B skipped" in text and f"REF {ab_repo['old'][:12]} predates A/B runs" in text
    old_src = ab_repo["root"] / "build" / "ab" / ab_repo["old"] / "src"
    assert not ab.ref_build_dir(old_src).exists()  # skipped before building


@pytest.mark.slow
@pytest.mark.timed
def test_a_ref_of_another_report_schema_is_skipped_with_the_reason(ab_repo, tmp_path):
    root = ab_repo["root"]
    scratch.git("checkout", "--quiet", ab_repo["clean"], cwd=root)
    try:
        report = (root / "bench" / "report" / "schema.py").read_text()
        changed = report.replace(f"SCHEMA_VERSION = {SCHEMA_VERSION}", f"SCHEMA_VERSION = {SCHEMA_VERSION + 1}")
        other = scratch.commit_change(root, "bench/report/schema.py", changed, "another schema")
    finally:
        scratch.git("checkout", "--quiet", ab_repo["slow"], cwd=root)
    result, text = _run(ab_repo, other, tmp_path)
    assert result.code == 0 and result.new_csv is None
    assert f"writes report schema {SCHEMA_VERSION + 1}, this checkout reads 4, 5, 6, {SCHEMA_VERSION}" in text
    assert f"schema {SCHEMA_VERSION + 1}" in (result.folder / "compare.txt").read_text()


def test_a_ref_that_is_not_a_commit_is_a_clear_error(tmp_path):
    options = BenchOptions(**{**vars(SMALL_GRID), "out_dir": tmp_path})
    with pytest.raises(ab.AbError, match="'no-such-branch' is not a commit of"):
        ab.run_ab("no-such-branch", options, Console(file=io.StringIO()), new=ab.Tree(REPO_ROOT))
    with pytest.raises(ab.AbError, match="must name a commit"):
        ab.run_ab("--help", options, Console(file=io.StringIO()), new=ab.Tree(REPO_ROOT))


class _VariantsThatWaitForTurns:
    """A worker's side whose job runs three variants, each waiting for its turn first, and takes any Exception of
    one variant as that variant's failure (as bench/run.py does)."""

    def __init__(self, *args) -> None:
        self.jobs = [0]
        self.settings = type("Settings", (), {"rounds": 1})()

    def job(self, round_index: int, index: int, turns) -> dict:
        for _ in range(3):
            try:
                turns.begin()
            except Exception:  # noqa: BLE001 - the benchmark's own rule for one variant's failure
                continue
        return {"seconds": 0.0}


def test_quit_sent_while_a_worker_waits_for_its_turn_ends_it_at_once(monkeypatch):
    # Worker.close() sends "quit" to a worker that may be blocked waiting for its turn; it must leave then, not
    # take "quit" as one variant's failure and wait again until the driver's deadline.
    import json
    import os
    import threading

    from bench.processes import worker as ab_worker

    monkeypatch.setattr(ab_worker, "_Side", _VariantsThatWaitForTurns)
    monkeypatch.setattr("bench.measure.turns.move_to_timing_cpu", lambda: None)
    to_worker_r, to_worker_w = os.pipe()
    from_worker_r, from_worker_w = os.pipe()
    requests, writer = os.fdopen(to_worker_r), os.fdopen(to_worker_w, "w")
    replies, reader = os.fdopen(from_worker_w, "w"), os.fdopen(from_worker_r)
    served = threading.Thread(target=ab_worker.serve, args=(requests, replies), daemon=True)
    served.start()
    assert json.loads(reader.readline())["protocol"] == PROTOCOL
    for request in ({"do": "plan", "options": {}}, {"do": "job", "round": 0, "index": 0, "turns": True}):
        writer.write(json.dumps(request) + "\n")
        writer.flush()
        reader.readline()  # the plan's reply; then the job's first {"turn": "waiting"}
    writer.write(json.dumps({"do": "quit"}) + "\n")
    writer.flush()
    served.join(timeout=5)
    alive = served.is_alive()
    writer.close()  # an EOF unblocks a worker that kept waiting, so the thread ends either way
    served.join(timeout=5)
    assert not alive, "the worker took 'quit' for a failed variant and waited for its turn again"


def test_a_ref_from_before_the_allocator_option_measures_with_the_fixed_policy_it_always_had():
    # Such a REF's worker fixes glibc's mmap threshold whatever it is sent: the A/B run asks for that policy, so
    # the option is dropped for it; asked for glibc's default, it could not comply, and the run is skipped.
    known = [name for name in vars(BenchOptions()) if name != "allocator"]
    plan = ab.plan_for(BenchOptions(quick=True, allocator="fixed-mmap"), known, "BASE")
    assert "allocator" not in plan and plan["quick"] is True
    with pytest.raises(ab.Skipped, match="BASE's bench has no option 'allocator' \\(set to 'default' here\\)"):
        ab.plan_for(BenchOptions(allocator="default"), known, "BASE")


def test_a_ref_from_before_the_layouts_option_measures_the_page_offset_on_both_sides():
    # Such a REF placed every op case at the process's page offset: a run of every layout measures that one on
    # both sides (else the sides would plan different grids); one that asks for the natural layout is skipped.
    new = list(vars(BenchOptions()))
    old = [name for name in new if name != "layouts"]
    options = ab.common_layouts(BenchOptions(quick=True), [new, old])
    assert options.layouts == "page_offset"
    assert "layouts" not in ab.plan_for(options, old, "BASE") and ab.plan_for(options, new, "NEW")["layouts"] == (
        "page_offset"
    )
    assert ab.common_layouts(BenchOptions(quick=True), [new, new]).layouts == "all"
    with pytest.raises(ab.Skipped, match="BASE's bench has no option 'layouts' \\(set to 'natural' here\\)"):
        ab.plan_for(ab.common_layouts(BenchOptions(layouts="natural"), [new, old]), old, "BASE")
