"""The build-time slowdown switch: $FUSEDBENCH_SLOWDOWN_PERCENT -> -DFUSED_NORM_SLOWDOWN_PERCENT, and the header."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from env.builder.config import SLOWDOWN_VARIABLE, slowdown_defines, torch_cxx_flags
from env.paths import csrc_dir


def test_the_switch_is_absent_unless_asked_for(monkeypatch):
    monkeypatch.delenv(SLOWDOWN_VARIABLE, raising=False)
    assert slowdown_defines() == [] and not any("SLOWDOWN" in f for f in torch_cxx_flags())
    monkeypatch.setenv(SLOWDOWN_VARIABLE, "0")
    assert slowdown_defines() == []
    monkeypatch.setenv(SLOWDOWN_VARIABLE, "10")
    assert slowdown_defines() == ["-DFUSED_NORM_SLOWDOWN_PERCENT=10"]
    assert "-DFUSED_NORM_SLOWDOWN_PERCENT=10" in torch_cxx_flags()  # so the build's fingerprint changes with it


@pytest.mark.parametrize("value", ["ten", "-5", "2.5", "1001"])
def test_a_bad_value_names_the_variable(monkeypatch, value):
    monkeypatch.setenv(SLOWDOWN_VARIABLE, value)
    with pytest.raises(ValueError, match=f"FUSEDBENCH_SLOWDOWN_PERCENT must be an integer percent.*{value}"):
        slowdown_defines()


PROGRAM = """
#include <chrono>
#include <cstdio>
#include "torch/slowdown.h"
int main() {
  using Clock = std::chrono::steady_clock;
  const auto begin = Clock::now();
  for (int i = 0; i < 200; ++i) {
    const fused_norm::CallSlowdown slowdown;
    const auto until = Clock::now() + std::chrono::microseconds(100);  // the call's own work
    while (Clock::now() < until) {
    }
  }
  const auto spent = std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - begin);
  std::printf("%d %lld\\n", fused_norm::kSlowdownPercent, static_cast<long long>(spent.count()));
}
"""


@pytest.mark.skipif(shutil.which("c++") is None, reason="no C++ compiler")
def test_the_header_compiles_to_nothing_at_zero_and_waits_at_a_percent(tmp_path):
    source = tmp_path / "probe.cc"
    source.write_text(PROGRAM)
    for percent in (None, 50):
        binary = tmp_path / f"probe{percent}"
        define = [] if percent is None else [f"-DFUSED_NORM_SLOWDOWN_PERCENT={percent}"]
        subprocess.run(
            ["c++", "-std=c++17", "-O2", f"-I{csrc_dir()}", *define, str(source), "-o", str(binary)], check=True
        )
        asked, micros = map(int, subprocess.run([binary], capture_output=True, text=True, check=True).stdout.split())
        assert asked == (percent or 0)
        # 200 calls of 100 us: at least 20 ms of work; at 50 %, at least half as much waited on top (a lower bound
        # only: the machine may be busy, which adds, never takes away).
        assert micros >= 20_000 * (1 + (percent or 0) / 100)
