"""The two test tiers: the command lines `invoke test` runs, and that they split the suite between them."""

from __future__ import annotations

import re
import subprocess

import pytest

from env.paths import REPO_ROOT
from env.tiers import DURATIONS, default_workers, pytest_command, tier_of


def test_each_tier_selects_by_the_slow_marker_and_prints_durations():
    fast, slow, every = (pytest_command(t) for t in ("fast", "slow", "all"))
    assert fast[-2:] == ["-m", "not slow"] and slow[-2:] == ["-m", "slow"]
    assert every.count("-m") == 1  # python -m pytest only
    for command in (fast, slow, every):
        assert command[1:3] == ["-m", "pytest"] and f"--durations={DURATIONS}" in command
    with_options = pytest_command("fast", k="ort and not pool", workers=2, extra="-x --tb 'line'")
    assert with_options[-9:] == ["-k", "ort and not pool", "-n", "2", "--dist", "loadfile", "-x", "--tb", "line"]
    assert "-n" not in pytest_command("fast", workers=1)


def test_only_the_fast_tier_runs_in_two_workers_by_default(monkeypatch):
    monkeypatch.setattr("os.sched_getaffinity", lambda pid: {0, 1, 2, 3})
    assert [default_workers(t) for t in ("fast", "slow", "all")] == [2, 1, 1]
    monkeypatch.setattr("os.sched_getaffinity", lambda pid: {3})
    assert default_workers("fast") == 1  # one usable CPU: a second worker would only share it


def test_flags_choose_the_tier():
    assert (tier_of(False, False), tier_of(True, False), tier_of(False, True)) == ("fast", "all", "slow")
    with pytest.raises(ValueError, match="--all and --slow-only"):
        tier_of(True, True)
    with pytest.raises(ValueError, match="tier must be one of fast, slow, all, got 'quick'"):
        pytest_command("quick")


def test_the_slow_tier_takes_the_slow_tests_and_leaves_the_rest_to_the_fast_one():
    # One collection of a file with both kinds (each interpreter start imports torch): the slow tier
    # selects exactly its slow test; the fast tier ("not slow") is the rest of the file.
    path = "tests/env/test_build.py"
    done = subprocess.run(
        [*pytest_command("slow"), "--collect-only", "-q", path],
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
