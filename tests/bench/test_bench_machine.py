"""bench/measure/machine.py: the share of the CPU other processes used while something was timed."""

from __future__ import annotations

import math
import os
import subprocess
import sys
import time

from bench.measure.machine import CpuSnapshot, other_cpu_seconds, other_cpu_share, snapshot


def test_arithmetic_subtracts_this_process_and_clamps():
    before = CpuSnapshot(busy_s=100.0, own_s=10.0, wall_s=1000.0)
    # 2 s wall on 2 cores = 4 core-seconds; 3 busy, 1 of them ours -> others 2 s, a share of 2/4.
    assert other_cpu_seconds(before, CpuSnapshot(103.0, 11.0, 1002.0)) == 2.0
    assert other_cpu_share(2.0, 2.0, cores=2) == 0.5
    assert other_cpu_seconds(before, CpuSnapshot(100.5, 11.0, 1002.0)) == 0.0  # clock-tick rounding below zero
    assert math.isnan(other_cpu_seconds(before, CpuSnapshot(math.nan, 11.0, 1002.0)))
    assert math.isnan(other_cpu_share(0.0, 0.05, cores=2))  # too short a window for 10 ms ticks
    assert other_cpu_share(9.0, 2.0, cores=2) == 1.0


def _cpu_seconds_of(pid: int) -> float:
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime + stime


def test_a_busy_neighbour_is_counted_as_other():
    child = subprocess.Popen(
        [sys.executable, "-c", "import time\nend = time.time() + 3\nwhile time.time() < end: pass"]
    )
    try:
        time.sleep(0.3)  # let it start
        child_before, before = _cpu_seconds_of(child.pid), snapshot()
        end = time.perf_counter() + 1.0
        while time.perf_counter() < end:  # our own busy loop meanwhile: it is not "other"
            pass
        child_after, after = _cpu_seconds_of(child.pid), snapshot()
    finally:
        child.kill()
        child.wait()
    others_s = other_cpu_seconds(before, after)
    child_s = child_after - child_before
    assert child_s > 0.05  # the neighbour did run (however busy the machine is)
    # Everything the neighbour burned is attributed to others (give or take clock-tick rounding).
    assert others_s >= child_s - 0.05


# --- machine id and power policy ------------------------------------------------------------


def _write(path, text):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text + "\n")


def test_machine_id_is_a_stable_hash_of_the_file_not_the_id_itself(tmp_path, monkeypatch):
    import hashlib

    from bench.measure.machine import MACHINE_ID_ENV, machine_id

    monkeypatch.delenv(MACHINE_ID_ENV, raising=False)
    _write(tmp_path / "machine-id", "3d1219c7c4c5404aaa1f6d2a48adfda4")
    expected = hashlib.sha256(b"3d1219c7c4c5404aaa1f6d2a48adfda4").hexdigest()[:16]
    assert machine_id((tmp_path / "missing", tmp_path / "machine-id")) == expected
    assert "3d1219c7" not in expected
    assert machine_id((tmp_path / "missing",)) == "unknown"
    monkeypatch.setenv(MACHINE_ID_ENV, "given-id")
    assert machine_id((tmp_path / "machine-id",)) == "given-id"


def test_cpu_power_reads_cpufreq_and_says_what_is_not_exposed(tmp_path):
    from bench.measure.machine import NOT_EXPOSED, cpu_power

    for index in (0, 1):
        policy = tmp_path / "cpufreq" / f"policy{index}"
        _write(policy / "scaling_governor", "powersave")
        _write(policy / "energy_performance_preference", "balance_performance")
        _write(policy / "scaling_min_freq", "400000")
        _write(policy / "scaling_max_freq", "3700000" if index == 0 else "3500000")
        _write(policy / "scaling_cur_freq", "2900123")
    _write(tmp_path / "intel_pstate" / "no_turbo", "1")
    power = cpu_power(tmp_path)
    assert power.columns() == {
        "cpu_governor": "powersave",
        "cpu_epp": "balance_performance",
        "cpu_boost": "off",
        "cpu_freq_range_mhz": "400-3500,400-3700",
        "cpu_cur_mhz": "2900",
    }
    _write(tmp_path / "cpufreq" / "boost", "1")  # acpi-cpufreq / amd_pstate's switch wins where present
    assert cpu_power(tmp_path).boost == "on"
    bare = cpu_power(tmp_path / "nothing")  # a VM without cpufreq
    assert set(bare.columns().values()) == {NOT_EXPOSED}


def test_this_machine_is_described_in_every_report_row():
    from bench.measure.environment import environment_columns
    from bench.measure.machine import cpu_power

    env = environment_columns(1, "cpu", "20260101T000000Z")
    assert env["machine_id"] and env["machine_id"] != "unknown" or not os.path.exists("/etc/machine-id")
    assert {k: env[k] for k in cpu_power().columns()} == cpu_power().columns()


def test_gpu_facts_are_empty_for_the_cpu_and_not_exposed_without_nvml(monkeypatch):
    from bench.measure import machine

    assert machine.gpu_columns("cpu") == {"gpu_policy": "", "gpu_clocks": ""}
    monkeypatch.setitem(sys.modules, "pynvml", None)  # as on the CPU variant, where nvidia-ml-py is not installed
    machine._nvml_columns.cache_clear()
    columns = machine.gpu_columns("NVIDIA H100")
    machine._nvml_columns.cache_clear()
    assert columns == {
        "gpu_policy": "not exposed (nvidia-ml-py not installed)",
        "gpu_clocks": "not exposed (nvidia-ml-py not installed)",
    }
