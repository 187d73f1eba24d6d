"""gpu-check's time limit and its sanitizer selection (the GPU steps themselves run on a GPU machine)."""

from __future__ import annotations

import subprocess
import sys
import time

from bench.gpu_check import KERNEL_TESTS, MIN_STEP_S, SANITIZER_SELECTION, GpuCheckOptions, run_pytest, step_bench
from env.paths import REPO_ROOT


def options_with_seconds_left(tmp_path, left: float) -> GpuCheckOptions:
    options = GpuCheckOptions(out=tmp_path, time_limit_s=100.0)
    options.started = time.monotonic() - (100.0 - left)
    return options


def test_without_a_limit_every_step_has_time():
    assert GpuCheckOptions().time_left() == float("inf")


def test_a_pytest_run_that_cannot_have_its_minimum_is_skipped_saying_so(tmp_path):
    options = options_with_seconds_left(tmp_path, MIN_STEP_S["pytest"] - 5)
    result = run_pytest(options, "gpu_tests", ["-m", "gpu", "tests"])
    assert result["status"].startswith("skipped (time limit: ") and result["status"].endswith(" s left)")
    assert not (tmp_path / "gpu_tests.log").exists()  # nothing was started


def test_a_pytest_run_gets_at_most_the_time_left(tmp_path, monkeypatch):
    # A run that would take 60 s, with 5.5 s left (and a 2 s minimum): stopped at the time left, not at
    # --test-timeout (900 s).
    monkeypatch.setitem(MIN_STEP_S, "pytest", 2.0)
    (tmp_path / "test_sleeps.py").write_text("import time\n\ndef test_sleeps():\n    time.sleep(60)\n")
    options = options_with_seconds_left(tmp_path, 5.5)
    started = time.monotonic()
    result = run_pytest(options, "slow", [str(tmp_path / "test_sleeps.py")])
    assert result["status"] == "timed out after 5 s", result
    assert time.monotonic() - started < 15


def test_the_benchmark_is_skipped_when_less_than_its_minimum_is_left(tmp_path):
    options = options_with_seconds_left(tmp_path, MIN_STEP_S["bench"] - 1)
    assert step_bench(options, cuda=False)["status"].startswith("skipped (time limit: ")


def test_the_sanitizer_selection_reaches_every_variant_and_alignment_test_and_not_the_huge_rows():
    listed = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-m", "gpu", "-k", SANITIZER_SELECTION, *KERNEL_TESTS],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        check=False,
    ).stdout
    names = {line.split("::")[1].split("[")[0] for line in listed.splitlines() if "::" in line}
    assert {
        "test_every_variant_is_launched",
        "test_every_add_variant_is_launched",
        "test_misaligned_pointers_fall_back_correctly",
        "test_out_with_a_storage_offset_keeps_a_vector_path",
        "test_x_or_residual_one_element_off_keeps_a_16_byte_body_in_place",
    } <= names, names
    assert "test_more_than_2_to_the_31_elements" not in names
