"""The slowdown switch of bench.experiments.ab_measure: the builder sets it, the wait it compiles in is sized."""

from __future__ import annotations

import shutil
import subprocess
import sysconfig

import pytest
import torch.utils.cpp_extension as cpp_extension

from bench.experiments.ab_measure import parse_percents
from env.builder.config import SLOWDOWN_VARIABLE, slowdown_defines, torch_cxx_flags
from env.paths import REPO_ROOT, csrc_dir

# A call that spins INSIDE_US inside, wrapped in the injected wait; prints how long the call took in all,
# over the time inside, for calls made back to back (the gap between them counts as the call's period too).
_PROGRAM = r"""
#include <chrono>
#include <cstdio>
#include "injected_slowdown.h"
using Clock = std::chrono::steady_clock;
static void call(std::chrono::microseconds inside) {
  FUSED_NORM_INJECTED_WAIT();
  const auto until = Clock::now() + inside;
  while (Clock::now() < until) {
  }
}
int main() {
  const std::chrono::microseconds inside{2000};
  double smallest = 1e9;
  for (int i = 0; i < 20; ++i) {
    const auto start = Clock::now();
    call(inside);
    const double ratio = std::chrono::duration<double, std::micro>(Clock::now() - start).count() / inside.count();
    smallest = ratio < smallest ? ratio : smallest;
  }
  std::printf("%.4f\n", smallest);
}
"""


def _smallest_ratio(tmp_path, *defines: str) -> float:
    source = tmp_path / "wait.cpp"
    source.write_text(_PROGRAM)
    exe = tmp_path / "wait"
    include = f"-I{csrc_dir() / 'torch'}"
    subprocess.run(["c++", "-std=c++17", "-O2", include, *defines, str(source), "-o", str(exe)], check=True)
    return float(subprocess.run([str(exe)], capture_output=True, text=True, check=True).stdout)


@pytest.mark.skipif(shutil.which("c++") is None, reason="no C++ compiler (c++) on PATH")
def test_the_switch_makes_every_call_at_least_that_percent_slower(tmp_path):
    # The wait runs until now + share x (inside + gap): a lower bound that no load on the machine can break.
    assert _smallest_ratio(tmp_path, "-DFUSED_NORM_SLOWDOWN_PERCENT=30") >= 1.30


@pytest.mark.skipif(shutil.which("c++") is None, reason="no C++ compiler (c++) on PATH")
def test_without_the_switch_the_wait_is_not_compiled_in():
    header = (csrc_dir() / "torch" / "injected_slowdown.h").read_text()
    assert "#define FUSED_NORM_INJECTED_WAIT() static_cast<void>(0)" in header
    impl = (csrc_dir() / "torch" / "torch_cpu_impl.cpp").read_text()
    assert impl.count("FUSED_NORM_INJECTED_WAIT();") == 2  # both CPU entry points


def test_the_builder_sets_the_definition_from_the_variable(monkeypatch):
    monkeypatch.delenv(SLOWDOWN_VARIABLE, raising=False)
    assert slowdown_defines() == [] and not any("SLOWDOWN" in f for f in torch_cxx_flags())
    monkeypatch.setenv(SLOWDOWN_VARIABLE, "0")
    assert slowdown_defines() == []
    monkeypatch.setenv(SLOWDOWN_VARIABLE, "15")
    assert "-DFUSED_NORM_SLOWDOWN_PERCENT=15" in torch_cxx_flags()
    for bad in ("-5", "ten", "1.5"):
        monkeypatch.setenv(SLOWDOWN_VARIABLE, bad)
        with pytest.raises(ValueError, match=SLOWDOWN_VARIABLE):
            slowdown_defines()


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
