"""The two test tiers: the command lines `invoke test` runs, and that they split the suite between them."""

from __future__ import annotations

import re
import subprocess

import pytest

from env.paths import REPO_ROOT
from env.tiers import (
    DURATIONS,
    NO_TESTS_COLLECTED,
    Pass,
    default_workers,
    passes,
    pytest_command,
    run_passes,
    tier_of,
)


def test_each_tier_selects_by_the_slow_marker_and_runs_its_timed_tests_alone():
    assert passes("fast", 2) == [Pass("not slow and not timed", 2), Pass("not slow and timed", 1)]
    assert passes("slow", 2) == [Pass("slow and not timed", 2), Pass("slow and timed", 1)]
    assert passes("all", 3) == [Pass("not timed", 3), Pass("timed", 1)]
    for step in passes("slow", 2):
        command = pytest_command(step)
        assert command[1:3] == ["-m", "pytest"] and f"--durations={DURATIONS}" in command
        assert command[command.index("-m", 3) + 1] == step.marker
    with_options = pytest_command(Pass("not slow", 2), k="ort and not pool", extra="-x --tb 'line'")
    assert with_options[-9:] == ["-k", "ort and not pool", "-n", "2", "--dist", "loadfile", "-x", "--tb", "line"]
    assert "-n" not in pytest_command(Pass("slow and timed", 1))


def test_untimed_tests_run_in_two_workers_where_two_cpus_are_usable(monkeypatch):
    monkeypatch.setattr("os.sched_getaffinity", lambda pid: {0, 1, 2, 3})
    assert default_workers() == 2 and [p.workers for p in passes("slow")] == [2, 1]
    monkeypatch.setattr("os.sched_getaffinity", lambda pid: {3})
    assert default_workers() == 1  # one usable CPU: a second worker would only share it


def test_flags_choose_the_tier():
    assert (tier_of(False, False), tier_of(True, False), tier_of(False, True)) == ("fast", "all", "slow")
    with pytest.raises(ValueError, match="--all and --slow-only"):
        tier_of(True, True)
    with pytest.raises(ValueError, match="tier must be one of fast, slow, all, got 'quick'"):
        passes("quick")


@pytest.mark.parametrize(
    ("statuses", "tier_status"),
    [
        ((0, 0), 0),
        ((0, NO_TESTS_COLLECTED), 0),  # a -k that names untimed tests only
        ((NO_TESTS_COLLECTED, 0), 0),
        ((NO_TESTS_COLLECTED, NO_TESTS_COLLECTED), NO_TESTS_COLLECTED),  # nothing selected at all
        ((1, 0), 1),
        ((0, 2), 2),  # interrupted
        ((NO_TESTS_COLLECTED, 1), 1),
    ],
)
def test_the_tier_fails_when_a_pass_fails_and_every_pass_runs(statuses, tier_status):
    ran = []

    def run(command):
        ran.append(command)
        return statuses[len(ran) - 1]

    assert run_passes(passes("slow", 2), run, k="gate") == tier_status
    assert len(ran) == 2 and all(c[c.index("-k") + 1] == "gate" for c in ran)


def test_the_slow_tier_takes_the_slow_tests_and_leaves_the_rest_to_the_fast_one():
    # One collection of a file with both kinds (each interpreter start imports torch): the slow tier
    # selects exactly its slow test; the fast tier ("not slow") is the rest of the file.
    path = "tests/env/test_build.py"
    done = subprocess.run(
        [*pytest_command(Pass("slow", 1)), "--collect-only", "-q", path],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    selected = [line for line in done.stdout.splitlines() if line.startswith(path + "::")]
    assert selected == [f"{path}::test_aot_build_loads_and_matches_jit"], done.stdout
    total = len(re.findall(r"^def (test_\w+)", (REPO_ROOT / path).read_text(), flags=re.MULTILINE))
    assert f"1/{total} tests collected ({total - 1} deselected)" in done.stdout, done.stdout


def test_the_timed_pass_holds_the_tests_that_judge_times_and_those_sharing_their_builds():
    done = subprocess.run(
        [*pytest_command(passes("slow", 1)[1]), "--collect-only", "-q", "tests/bench"],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    files = {line.split("::")[0] for line in done.stdout.splitlines() if "::" in line}
    assert files == {
        "tests/bench/test_bench_ab.py",
        "tests/bench/test_bench_gate.py",
        "tests/bench/test_serve_bench.py",
    }
    ab = [line for line in done.stdout.splitlines() if line.startswith("tests/bench/test_bench_ab.py::")]
    assert len(ab) == 3, done.stdout  # every test of the A/B module's scratch builds: one process builds them once
