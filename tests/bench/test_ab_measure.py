"""bench.experiments.ab_measure: its options, the slowed impl compiling, and its rejudging of recorded runs.

The switch itself (the builder's definition and the header's wait) is tested in tests/env/test_slowdown_switch.py.
"""

from __future__ import annotations

import shutil
import subprocess
import sysconfig

import pytest
import torch.utils.cpp_extension as cpp_extension

from bench.experiments.ab_measure import parse_percents
from env.paths import REPO_ROOT, csrc_dir


def test_slowdowns_are_whole_percents():
    assert parse_percents("10, 20") == [10, 20]
    for bad in ("", "0", "10.5", "ten", "101"):
        with pytest.raises(ValueError, match="--slowdowns"):
            parse_percents(bad)


@pytest.mark.slow  # a compile against torch's headers: 10-25 s on 2 cores
@pytest.mark.skipif(shutil.which("c++") is None, reason="no C++ compiler (c++) on PATH")
def test_the_slowed_impl_compiles():
    includes = [f"-I{p}" for p in cpp_extension.include_paths()] + [f"-I{sysconfig.get_paths()['include']}"]
    impl = REPO_ROOT / "csrc" / "torch" / "torch_cpu_impl.cpp"
    command = ["c++", "-std=c++20", "-fsyntax-only", "-DFUSED_NORM_SLOWDOWN_PERCENT=20", f"-I{csrc_dir()}"]
    command += [f"-I{csrc_dir() / 'torch'}", *includes, str(impl)]
    result = subprocess.run(command, capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stderr[-2000:]


def test_rejudge_reads_each_recorded_run_and_marks_a_missing_one(tmp_path, generator):
    import numpy as np
    import pandas as pd

    from bench.experiments.ab_measure import FIELDS, rejudge
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
