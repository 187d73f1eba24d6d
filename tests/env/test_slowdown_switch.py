"""The build-time slowdown switch: $FUSEDBENCH_SLOWDOWN_PERCENT -> -DFUSED_NORM_SLOWDOWN_PERCENT, and the header."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from env.builder.config import SLOWDOWN_TABLE_VARIABLE, SLOWDOWN_VARIABLE, slowdown_defines, torch_cxx_flags
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


# --- a calibration's per-row table ----------------------------------------------------------------

TABLE_PROGRAM = """
#include <cstdint>
#include <cstdio>
#include "torch/slowdown.h"
struct FakeTensor {  // the three facts the slowdown reads of an at::Tensor
  std::int64_t rows, width;
  int dtype;
  int64_t dim() const { return 2; }
  int64_t size(int) const { return width; }
  int64_t numel() const { return rows * width; }
  int scalar_type() const { return dtype; }
};
int main() {
  const FakeTensor calls[] = {{8, 512, 6}, {1024, 1024, 6}, {8, 512, 5}, {16, 512, 6}};
  for (const auto entry : {fused_norm::SlowdownEntry::kCall, fused_norm::SlowdownEntry::kOut}) {
    for (const FakeTensor& x : calls) {
      const fused_norm::CallSlowdown slowdown(x, entry);
      std::printf("%g ", slowdown.share());
    }
  }
}
"""


def _shares(tmp_path, monkeypatch, table_text: str | None, percent: str) -> list[float]:
    monkeypatch.setenv(SLOWDOWN_VARIABLE, percent)
    monkeypatch.delenv(SLOWDOWN_TABLE_VARIABLE, raising=False)
    if table_text is not None:
        (tmp_path / "table.csv").write_text(table_text)
        monkeypatch.setenv(SLOWDOWN_TABLE_VARIABLE, str(tmp_path / "table.csv"))
    defines = slowdown_defines(tmp_path / "build")
    (tmp_path / "probe.cc").write_text(TABLE_PROGRAM)
    binary = tmp_path / "probe"
    subprocess.run(
        ["c++", "-std=c++17", "-O2", f"-I{csrc_dir()}", *defines, str(tmp_path / "probe.cc"), "-o", str(binary)],
        check=True,
    )
    return [float(v) for v in subprocess.run([binary], capture_output=True, text=True, check=True).stdout.split()]


TABLE = "shape,dtype,percent\n1x8x512,float32,6.5\n8x128x1024,float32,10.9\n"


@pytest.mark.skipif(shutil.which("c++") is None, reason="no C++ compiler")
def test_a_calibrated_table_sets_each_named_rows_percent_and_the_rest_keep_the_asked_one(tmp_path, monkeypatch):
    # Rows by (rows, width, dtype): 1x8x512 is 8 rows of 512; the half-precision call and 16 rows are not named.
    # Without a variant column a row covers the allocating call and the out variant alike.
    assert _shares(tmp_path, monkeypatch, TABLE, "10") == [0.065, 0.109, 0.1, 0.1] * 2
    assert _shares(tmp_path, monkeypatch, None, "10") == [0.1, 0.1, 0.1, 0.1] * 2
    # Without the switch the table is not even read: no define, no wait.
    monkeypatch.setenv(SLOWDOWN_VARIABLE, "0")
    monkeypatch.setenv(SLOWDOWN_TABLE_VARIABLE, str(tmp_path / "table.csv"))
    assert slowdown_defines() == []


def test_another_table_is_another_define_so_the_build_is_redone(tmp_path, monkeypatch):
    monkeypatch.setenv(SLOWDOWN_VARIABLE, "10")
    table = tmp_path / "table.csv"
    monkeypatch.setenv(SLOWDOWN_TABLE_VARIABLE, str(table))
    table.write_text(TABLE)
    first = slowdown_defines(tmp_path)
    table.write_text(TABLE.replace("6.5", "6.6"))
    assert first != slowdown_defines(tmp_path) and f"-I{tmp_path / 'slowdown'}" in first


def test_a_bad_table_line_is_named(tmp_path, monkeypatch):
    monkeypatch.setenv(SLOWDOWN_VARIABLE, "10")
    (tmp_path / "table.csv").write_text("shape,dtype,percent\n1x8x512,float32,6.5\n1x8x512,int8,3\n")
    monkeypatch.setenv(SLOWDOWN_TABLE_VARIABLE, str(tmp_path / "table.csv"))
    with pytest.raises(ValueError, match=r"table.csv:3: needs shape"):
        slowdown_defines(tmp_path)


VARIANT_TABLE = (
    "shape,dtype,variant,percent\n"
    "1x8x512,float32,out,3.5\n"
    "1x8x512,float32,,6.5\n"  # either entry point, after the out variant's own row: that one still wins
    "8x128x1024,float32,call,10.9\n"
)


@pytest.mark.skipif(shutil.which("c++") is None, reason="no C++ compiler")
def test_a_row_may_name_the_entry_point_and_wins_over_a_row_for_either(tmp_path, monkeypatch):
    calls, outs = [0.065, 0.109, 0.1, 0.1], [0.035, 0.1, 0.1, 0.1]
    assert _shares(tmp_path, monkeypatch, VARIANT_TABLE, "10") == calls + outs


def test_a_table_with_an_unknown_variant_names_its_line(tmp_path, monkeypatch):
    (tmp_path / "table.csv").write_text("shape,dtype,variant,percent\n1x8x512,float32,both,3\n")
    monkeypatch.setenv(SLOWDOWN_VARIABLE, "10")
    monkeypatch.setenv(SLOWDOWN_TABLE_VARIABLE, str(tmp_path / "table.csv"))
    with pytest.raises(ValueError, match=r"table.csv:2: .*variant of call, out or empty"):
        slowdown_defines(tmp_path / "build")
