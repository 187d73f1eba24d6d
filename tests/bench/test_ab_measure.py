"""bench/ab_measure.py: the injected slowdown lands in the op's impl, compiles, and is sized by the call's period."""

from __future__ import annotations

import shutil
import subprocess
import sysconfig

import pytest
import torch.utils.cpp_extension as cpp_extension

from bench.ab_measure import GAP_CAP_US, GAP_INSIDE_SHARE, IMPL, slowed_impl
from env.paths import REPO_ROOT


def test_both_entries_get_the_wait_and_nothing_else_changes():
    source = (REPO_ROOT / IMPL).read_text()
    slowed = slowed_impl(source, 10)
    assert slowed.count("const InjectedWait injected_wait;") == 2
    assert "constexpr double kInjectedShare = 0.1;" in slowed
    assert f"constexpr std::chrono::nanoseconds kGapCap{{{GAP_CAP_US * 1000}}};" in slowed
    assert f"constexpr double kGapInsideShare = {GAP_INSIDE_SHARE!r};" in slowed
    # Every line of the op's source is still there, in order: only lines were added.
    kept = iter(slowed.splitlines())
    assert all(any(line == other for other in kept) for line in source.splitlines())


def test_a_changed_impl_is_refused_with_the_file_to_update():
    with pytest.raises(SystemExit, match="cannot place the injected wait - update bench/ab_measure.py"):
        slowed_impl("// an impl without the expected entry lines\n", 10)


@pytest.mark.slow  # a compile against torch's headers: 10-25 s on 2 cores
@pytest.mark.skipif(shutil.which("c++") is None, reason="no C++ compiler (c++) on PATH")
def test_the_slowed_impl_compiles(tmp_path):
    path = tmp_path / "slowed.cpp"
    path.write_text(slowed_impl((REPO_ROOT / IMPL).read_text(), 20))
    includes = [f"-I{p}" for p in cpp_extension.include_paths()] + [f"-I{sysconfig.get_paths()['include']}"]
    command = ["c++", "-std=c++20", "-fsyntax-only", f"-I{REPO_ROOT / 'csrc/torch'}", *includes, str(path)]
    result = subprocess.run(command, capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stderr[-2000:]


def test_rejudge_reads_each_recorded_run_and_marks_a_missing_one(tmp_path, generator):
    import numpy as np
    import pandas as pd

    from bench.ab_measure import FIELDS, rejudge
    from tests.helpers.bench_synthetic import in_rounds, make_key, synthetic_report

    rng = np.random.default_rng(int(generator.initial_seed()))
    key = make_key(shape="1x8x512", baseline="fused", workload="op")
    folder = tmp_path / "run1"
    for side, scale in (("base", 1.0), ("new", 2.0)):  # twice as slow in every unit: a regression of the op
        (folder / side).mkdir(parents=True)
        synthetic_report(folder / side / "pooled.csv", {key: in_rounds(scale * 10 * rng.lognormal(0, 0.02, 400), 4)})
    rows = [
        {
            **dict.fromkeys(FIELDS, ""),
            "kind": "slow10",
            "run": 1,
            "threshold": 0.05,
            "regressions": 0,
            "folder": folder,
        },
        {
            **dict.fromkeys(FIELDS, ""),
            "kind": "aa",
            "run": 1,
            "threshold": 0.1,
            "regressions": 0,
            "folder": tmp_path / "gone",
        },
    ]
    pd.DataFrame(rows, columns=FIELDS).to_csv(tmp_path / "results.csv", index=False)
    frame = rejudge(tmp_path)
    assert list(frame.now) == [1, "n/a"] and list(frame.now_op) == [1, "n/a"]
    text = (tmp_path / "rejudged.md").read_text()
    assert "| slow10 | 1 | 0 | 1 | 1 |" in text and "| aa | 1 | 0 | n/a | n/a |" in text
