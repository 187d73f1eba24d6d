"""bench/hardware.py: the facts that tell machines apart, read from /proc and sysfs, and compare refusing on them."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from bench.measure import hardware, machine
from bench.measure.environment import machine_columns
from bench.report.schema import COLUMNS, read_report
from bench.stats import compare
from env.builder.toolchain import cpu_model
from env.paths import REPO_ROOT

ZEN5_REPORT = REPO_ROOT / "reports" / "targets" / "2026-12-04-zen5" / "20261204T060530Z-vm.csv"

# The first block of /proc/cpuinfo of a 2-vCPU Zen 5 VM (family 26, as its report's folder says) that names
# its CPU "AMD EPYC", as the Zen 4 VMs of the same image do.
ZEN5_CPUINFO = """processor\t: 0
vendor_id\t: AuthenticAMD
cpu family\t: 26
model\t\t: 2
model name\t: AMD EPYC
stepping\t: 1
microcode\t: 0xb002110
flags\t\t: fpu vme avx2 avx512f avx512_bf16 avx512vl hypervisor

processor\t: 1
vendor_id\t: AuthenticAMD
"""
ZEN5_CACHES = {
    "index0": ("1", "Data", "48K"),
    "index1": ("1", "Instruction", "32K"),
    "index2": ("2", "Unified", "1024K"),
}
ZEN5_CACHES["index3"] = ("3", "Unified", "32768K")


def _fake_machine(root: Path, cpuinfo: str, caches: dict[str, tuple[str, str, str]], mem_kib: int) -> dict[str, str]:
    (root / "proc").mkdir(parents=True)
    (root / "proc" / "cpuinfo").write_text(cpuinfo)
    (root / "proc" / "meminfo").write_text(f"MemTotal:       {mem_kib} kB\nMemFree:  1 kB\n")
    for index, (level, kind, size) in caches.items():
        folder = root / "cache" / index
        folder.mkdir(parents=True)
        for name, value in (("level", level), ("type", kind), ("size", size)):
            (folder / name).write_text(value + "\n")
    return hardware.cpu_facts(root / "proc" / "cpuinfo", root / "cache", root / "proc" / "meminfo", root / "dmi")


def test_the_cpu_facts_are_read_from_cpuinfo_and_sysfs(tmp_path):
    facts = _fake_machine(tmp_path, ZEN5_CPUINFO, ZEN5_CACHES, 16 * 2**20 - 300_000)
    assert facts == {
        "cpu_vendor": "AuthenticAMD",
        "cpu_family": "26",
        "cpu_model_number": "2",
        "cpu_stepping": "1",
        "cpu_microcode": "0xb002110",
        "cpu_caches": "L1d 48K, L1i 32K, L2 1024K, L3 32768K",
        "cpu_flags_hash": facts["cpu_flags_hash"],
        "hypervisor": f"yes ({machine.NOT_EXPOSED})",  # a VM that hides its platform (no DMI here)
        "memory_gib": "16",
    }
    # The flags' hash is of the sorted set: the order /proc lists them in does not matter, one flag more does.
    shuffled = ZEN5_CPUINFO.replace("fpu vme avx2", "avx2 vme fpu")
    assert _fake_machine(tmp_path / "b", shuffled, ZEN5_CACHES, 16 * 2**20)["cpu_flags_hash"] == facts["cpu_flags_hash"]
    more = ZEN5_CPUINFO.replace("avx2 ", "avx2 avx_vnni ")
    assert _fake_machine(tmp_path / "c", more, ZEN5_CACHES, 16 * 2**20)["cpu_flags_hash"] != facts["cpu_flags_hash"]
    bare = ZEN5_CPUINFO.replace(" hypervisor", "")
    assert _fake_machine(tmp_path / "d", bare, ZEN5_CACHES, 16 * 2**20)["hypervisor"] == "none"


def test_a_machine_that_hides_everything_says_so(tmp_path):
    facts = hardware.cpu_facts(tmp_path / "none", tmp_path / "none", tmp_path / "none", tmp_path / "none")
    assert set(facts.values()) == {machine.NOT_EXPOSED, "none"}


def test_the_machine_id_tells_apart_two_vms_of_one_image(tmp_path, monkeypatch):
    monkeypatch.delenv(machine.MACHINE_ID_ENV, raising=False)
    image_id = tmp_path / "machine-id"
    image_id.write_text("4c4c4544004d3510804bb3c04f4e3332\n")
    zen5 = _fake_machine(tmp_path / "zen5", ZEN5_CPUINFO, ZEN5_CACHES, 24 * 2**20)
    zen4_cpuinfo = ZEN5_CPUINFO.replace(": 26", ": 25").replace("model\t\t: 2", "model\t\t: 17")
    zen4 = _fake_machine(tmp_path / "zen4", zen4_cpuinfo, {**ZEN5_CACHES, "index0": ("1", "Data", "32K")}, 24 * 2**20)
    assert hardware.machine_id(zen5, (image_id,)) != hardware.machine_id(zen4, (image_id,))
    assert hardware.machine_id(zen5, (image_id,)) == hardware.machine_id(dict(zen5), (image_id,))  # stable
    other_host = tmp_path / "other-id"
    other_host.write_text("0f0e0d0c0b0a09080706050403020100\n")
    assert hardware.machine_id(zen5, (image_id,)) != hardware.machine_id(zen5, (other_host,))


def _this_machine_frame(threads: int) -> pd.DataFrame:
    """This machine's facts in a one-row report frame of this schema (the timing columns do not matter here)."""
    row = {name: "x" for name, dtype, _ in COLUMNS if dtype == "string"}
    row.update(machine_columns("cpu"))
    from bench.measure.allocator import cpu_allocator

    row.update(threads=threads, cpu_model=cpu_model())
    row.update(cpu_allocator=cpu_allocator(), thp=machine.transparent_huge_pages(), **machine.cpu_power().columns())
    row.update(device="cpu", gpu_policy="", gpu_model="")
    return pd.DataFrame([row])


def test_the_committed_zen5_report_is_refused_against_this_machine():
    # The Zen 5 report is of schema 5: it recorded no hardware facts, and its machine id hashed /etc/machine-id
    # alone, which the Zen 4 development VMs share (seen: 0035969ec53f6e7f on both). By those facts the two
    # machines can be the same; compare says which facts it lacks and refuses unless forced.
    zen5 = read_report(ZEN5_REPORT)
    assert zen5.attrs["schema_version"] == 5
    here = _this_machine_frame(threads=int(zen5.threads.iloc[0]))
    lacking = compare.earlier_schema(zen5, here)
    assert len(lacking) == 1 and lacking[0].startswith("BASE is a report of an earlier schema")
    for fact in hardware.HARDWARE_COLUMNS + ("machine_id",):
        assert fact in lacking[0]
    comparison = compare.Comparison(rows=[], earlier_schema=lacking)
    assert compare.print_comparison(comparison, 0.03, 0.05, _console()) == compare.EXIT_MACHINES_DIFFER
    # What the earlier schema did record tells nothing apart at equal threads: its machine id and CPU name are
    # those this machine's schema-5 report would carry (when this is a VM of the same image).
    old_style = {"machine_id": machine.machine_id(), "cpu_model": here.cpu_model.iloc[0]}
    if old_style == {"machine_id": "0035969ec53f6e7f", "cpu_model": "AMD EPYC"}:
        assert zen5.machine_id.iloc[0] == "schema 5: 0035969ec53f6e7f" and zen5.cpu_model.iloc[0] == "AMD EPYC"
    # Forced, the facts both record are compared, the ones only this schema has are not.
    assert not any(d.startswith(("machine_id", "cpu_family")) for d in compare._machine_differences(zen5, here))


def test_the_zen5_machines_facts_are_refused_against_this_machine(tmp_path):
    # The same VM measured today: its facts (family 26, 48 KiB L1d, per its report's folder) against this
    # machine's, with the same /etc/machine-id, CPU name and threads: refused, naming what differs.
    zen5_facts = _fake_machine(tmp_path, ZEN5_CPUINFO, ZEN5_CACHES, 24 * 2**20)
    here = _this_machine_frame(threads=1)
    if here.cpu_family.iloc[0] == "26" and here.cpu_caches.iloc[0] == zen5_facts["cpu_caches"]:
        pytest.skip("this machine is a Zen 5 with the same caches: there is nothing to tell apart")
    zen5 = here.copy()
    zen5.update(pd.DataFrame([{**zen5_facts, "machine_id": hardware.machine_id(zen5_facts)}]))
    differences = compare._machine_differences(zen5, here)
    named = {d.split(":")[0] for d in differences}
    assert "machine_id" in named and named & {"cpu_family", "cpu_caches", "cpu_model_number"}
    assert "threads" not in named and "cpu_model" not in named


def _console():
    from rich.console import Console

    return Console(record=True, width=200)
