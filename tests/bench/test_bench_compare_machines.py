"""bench/stats/compare.py refuses reports from different machines, naming each differing fact (exit 3)."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
from invoke import Context, Exit
from rich.console import Console

import tasks
from bench.report.schema import SCHEMA_VERSION
from bench.stats.compare import EXIT_MACHINES_DIFFER, MACHINE_COLUMNS, compare_reports, main
from env.paths import REPO_ROOT
from tests.helpers.bench_synthetic import as_earlier_schema, lognormal, make_key, synthetic_report

HERE = {
    "machine_id": "3f2a9c0d1e4b5a6c",
    "cpu_model": "AMD EPYC 9B14",
    "threads": 2,
    "cpu_allocator": "default",
    "thp": "enabled=madvise defrag=madvise",
    "torch": "2.13.0+cpu",
    "onnxruntime": "1.31.1",
    "cpu_governor": "performance",
    "cpu_epp": "performance",
    "cpu_boost": "on",
    "cpu_freq_range_mhz": "1500-3700",
    "gpu_policy": "",
    "cpu_vendor": "AuthenticAMD",
    "cpu_family": "25",
    "cpu_model_number": "17",
    "cpu_stepping": "1",
    "cpu_microcode": "0x1000065",
    "cpu_caches": "L1d 32K, L1i 32K, L2 1024K, L3 32768K",
    "cpu_flags_hash": "fb86c92f4654060a",
    "hypervisor": "Google Compute Engine",
    "memory_gib": "24",
    "gpu_model": "",
}


@pytest.fixture
def rng(generator):
    return np.random.default_rng(int(generator.initial_seed()))


def _run(base, new, **kwargs) -> tuple[int, str]:
    console = Console(record=True, width=250)
    code = main(str(base), str(new), console=console, **kwargs)
    return code, console.export_text()


def _pair(tmp_path, rng, there: dict, slower: float = 1.0, layout: str = "natural"):
    key = make_key(layout=layout)
    # The device is part of a row's key: a report of another device has its rows under that device.
    new_key = make_key(device=str(there.get("device", key.device)), layout=layout)
    base = synthetic_report(tmp_path / "base.csv", {key: lognormal(rng, 10.0, 600)}, environment=HERE)
    new = synthetic_report(
        tmp_path / "new.csv", {new_key: lognormal(rng, 10.0 * slower, 600)}, environment={**HERE, **there}
    )
    return base, new


def test_every_machine_fact_is_checked():
    assert set(MACHINE_COLUMNS) == set(HERE)


def test_two_containers_on_one_host_compare_although_their_hostnames_differ(tmp_path, rng):
    # Each `docker run` gets a random hostname; the machine id is the host's.
    base, new = _pair(tmp_path, rng, {"host": "4f9a1b2c3d4e"})
    code, text = _run(base, new)
    assert code == 0 and "different machines" not in text and "host:" in text  # shown as an environment change


def test_a_governor_change_is_refused_and_named(tmp_path, rng):
    base, new = _pair(tmp_path, rng, {"cpu_governor": "powersave"})
    code, text = _run(base, new)
    assert code == EXIT_MACHINES_DIFFER and "cpu_governor: performance -> powersave" in text


def test_states_read_at_run_time_are_not_machine_facts(tmp_path, rng):
    # The current CPU frequency and GPU clocks are states: recorded, never a reason to refuse.
    base, new = _pair(tmp_path, rng, {"cpu_cur_mhz": "2200", "gpu_clocks": "sm_mhz=1410 mem_mhz=1593"})
    assert _run(base, new)[0] == 0


def test_reports_over_different_device_sets_compare_on_the_devices_they_share(tmp_path, rng):
    cpu, gpu = make_key(), make_key(device="NVIDIA H100")
    policy = {gpu: {"gpu_policy": "app_sm_mhz=1980 power_limit_w=700 persistence=on compute_mode=0 ecc=on"}}
    base = synthetic_report(tmp_path / "base.csv", {cpu: lognormal(rng, 10.0, 600)}, environment=HERE)
    both = synthetic_report(
        tmp_path / "both.csv",
        {cpu: lognormal(rng, 10.0, 600), gpu: lognormal(rng, 3.0, 600)},
        environment=HERE,
        row_environment=policy,
    )
    comparison = compare_reports(base, both)
    # The GPU rows' policy is no difference (BASE has no GPU rows): the CPU rows are compared, the GPU rows listed.
    assert comparison.machine_differences == [] and [r.key for r in comparison.rows] == [cpu]
    assert comparison.only_in_new == [gpu]
    lower_limit = {gpu: {"gpu_policy": "app_sm_mhz=1980 power_limit_w=500 persistence=on compute_mode=0 ecc=on"}}
    other_gpu = synthetic_report(
        tmp_path / "other.csv",
        {cpu: lognormal(rng, 10.0, 600), gpu: lognormal(rng, 3.0, 600)},
        environment=HERE,
        row_environment=lower_limit,
    )
    differences = compare_reports(both, other_gpu).machine_differences
    assert len(differences) == 1 and differences[0].startswith("gpu_policy:") and "power_limit_w=500" in differences[0]


@pytest.mark.parametrize(
    "there",
    [
        {"cpu_model": "Intel Xeon Platinum 8481C"},
        {"threads": 4},
        {"cpu_allocator": "thp"},
        {"thp": "enabled=always defrag=madvise"},
        {"torch": "2.12.0+cpu"},
        {"onnxruntime": "1.30.0"},
        {"machine_id": "77e0b1c2d3f4a5b6"},
        {"cpu_governor": "powersave"},
        {"cpu_epp": "balance_power"},
        {"cpu_boost": "off"},
        {"cpu_freq_range_mhz": "1500-2200"},
        {"cpu_family": "26"},
        {"cpu_model_number": "2"},
        {"cpu_stepping": "0"},
        {"cpu_microcode": "0xb002110"},
        {"cpu_caches": "L1d 48K, L1i 32K, L2 1024K, L3 32768K"},
        {"cpu_flags_hash": "0123456789abcdef"},
        {"hypervisor": "none"},
        {"memory_gib": "16"},
    ],
)
def test_a_differing_machine_fact_is_refused_and_named(tmp_path, rng, there):
    base, new = _pair(tmp_path, rng, there)
    ((column, value),) = there.items()
    code, text = _run(base, new)
    assert code == EXIT_MACHINES_DIFFER == 3
    assert f"{column}: {HERE[column]} -> {value}" in text
    assert "different machines" in text and "--against" in text and "--allow-different-machines" in text
    assert "rows compared" not in text  # no table, no verdicts
    for other in set(HERE) - {column}:
        assert f"{other}:" not in text  # only what differs is named


def test_several_differing_facts_are_all_named(tmp_path, rng):
    there = {"cpu_model": "Intel Xeon", "thp": "enabled=always defrag=never", "threads": 8}
    base, new = _pair(tmp_path, rng, there)
    differences = compare_reports(base, new).machine_differences
    assert differences == [
        "cpu_model: AMD EPYC 9B14 -> Intel Xeon",
        "threads: 2 -> 8",
        "thp: enabled=madvise defrag=madvise -> enabled=always defrag=never",
    ]


def test_allowed_comparison_prints_the_table_under_a_warning_and_judges_it(tmp_path, rng):
    base, new = _pair(tmp_path, rng, {"cpu_model": "Intel Xeon"}, slower=1.5)
    code, text = _run(base, new, allow_different_machines=True)
    assert code == 1 and "REGRESSION" in text and "1 rows compared, 1 regression(s)" in text
    assert text.count("WARNING: different machines") == 2  # above and below the table
    assert "cpu_model: AMD EPYC 9B14 -> Intel Xeon" in text
    base, same = _pair(tmp_path, rng, {"cpu_model": "Intel Xeon"}, slower=1.0)
    code, text = _run(base, same, allow_different_machines=True)
    assert code == 0 and "WARNING: different machines" in text


def test_same_machine_has_no_warning(tmp_path, rng):
    base, new = _pair(tmp_path, rng, {"git_commit": "abc"})  # another build on the same machine: compared as usual
    code, text = _run(base, new)
    assert code == 0 and "WARNING" not in text and "git_commit: synthetic -> abc" in text


@pytest.mark.parametrize("version", [3, SCHEMA_VERSION + 1])
def test_a_report_of_a_schema_this_code_does_not_read_is_a_clear_error(tmp_path, rng, version):
    good = synthetic_report(tmp_path / "good.csv", {make_key(): lognormal(rng, 5, 30)})
    old = synthetic_report(tmp_path / "old.csv", {make_key(): lognormal(rng, 5, 30)}, schema_version=version)
    code, text = _run(old, good)
    assert code == 2 and f"report schema version [{version}]" in text and "reads versions 4, 5, 6, 7" in text


@pytest.mark.parametrize("version", [4, 5])
def test_a_report_of_an_earlier_schema_is_refused_unless_forced(tmp_path, rng, version):
    # Before schema 7 every op row was measured at the process's page offset: it pairs with that layout's row.
    base, new = _pair(tmp_path, rng, {}, slower=1.5, layout="page_offset")
    as_earlier_schema(base, version)
    code, text = _run(base, new)
    assert code == EXIT_MACHINES_DIFFER and "cannot be told apart" in text and "--force" in text
    assert "BASE is a report of an earlier schema and lacks machine_id" in text and "cpu_family" in text
    assert "rows compared" not in text
    code, text = _run(base, new, force=True)
    assert code == 1 and "WARNING: forced" in text and "1 rows compared, 1 regression(s)" in text
    # The facts both record are still compared: a forced comparison is refused on those.
    base, other = _pair(tmp_path, rng, {"cpu_model": "Intel Xeon"}, layout="page_offset")
    as_earlier_schema(base, version)
    code, text = _run(base, other, force=True)
    assert code == EXIT_MACHINES_DIFFER and "cpu_model: AMD EPYC 9B14 -> Intel Xeon" in text


def test_two_reports_of_one_earlier_schema_compare_their_machine_ids(tmp_path, rng):
    base, new = _pair(tmp_path, rng, {"machine_id": "77e0b1c2d3f4a5b6"})
    as_earlier_schema(base, 5), as_earlier_schema(new, 5)
    assert compare_reports(base, new).machine_differences == [
        "machine_id: schema 5: 3f2a9c0d1e4b5a6c -> schema 5: 77e0b1c2d3f4a5b6"
    ]


def test_cli_refuses_then_allows(tmp_path, rng, capsys):
    base, new = _pair(tmp_path, rng, {"cpu_model": "Intel Xeon"}, slower=1.5)
    # The command line once (an interpreter start costs seconds), the option through the task itself.
    command = [sys.executable, "-m", "invoke", "--search-root", str(REPO_ROOT), "bench.compare"]
    refused = subprocess.run([*command, str(base), str(new)], capture_output=True, text=True, cwd=tmp_path)
    assert refused.returncode == 3 and "cpu_model: AMD EPYC 9B14 -> Intel Xeon" in refused.stdout
    with pytest.raises(Exit) as allowed:
        tasks.compare(Context(), str(base), str(new), allow_different_machines=True)
    shown = capsys.readouterr().out
    assert allowed.value.code == 1 and "WARNING: different machines" in shown and "REGRESSION" in shown


def test_a_slower_limit_row_is_shown_but_not_counted(tmp_path, rng):
    limit, op = make_key(workload="limit", baseline="copy", variant="into_preallocated"), make_key()
    base = synthetic_report(tmp_path / "a.csv", {limit: lognormal(rng, 1.4, 2000), op: lognormal(rng, 3.0, 2000)})
    new = synthetic_report(tmp_path / "b.csv", {limit: lognormal(rng, 1.6, 2000), op: lognormal(rng, 3.0, 2000)})
    comparison = compare_reports(base, new)
    assert [r.key for r in comparison.limit_changes] == [limit] and comparison.regressions == []
    code, text = _run(base, new)
    assert code == 0 and "limit rows slower in NEW" in text and "copy/into_preallocated 8x128x1024" in text
    slower_op = synthetic_report(tmp_path / "c.csv", {limit: lognormal(rng, 1.4, 2000), op: lognormal(rng, 3.6, 2000)})
    assert _run(base, slower_op)[0] == 1


def test_the_layout_is_part_of_the_row_key(tmp_path, rng):
    # One op row at both layouts; only the natural one slower in NEW: each layout is judged against its own.
    natural, placed = make_key(), make_key(layout="page_offset")
    base = synthetic_report(
        tmp_path / "base.csv",
        {natural: lognormal(rng, 10.0, 600), placed: lognormal(rng, 20.0, 600)},
        environment=HERE,
    )
    new = synthetic_report(
        tmp_path / "new.csv",
        {natural: lognormal(rng, 15.0, 600), placed: lognormal(rng, 20.0, 600)},
        environment=HERE,
    )
    comparison = compare_reports(base, new)
    ratios = {r.key[-1]: r.ratio for r in comparison.rows}
    assert ratios["natural"] == pytest.approx(1.5, rel=0.03) and ratios["page_offset"] == pytest.approx(1.0, rel=0.03)
    assert [r.key for r in comparison.regressions] == [natural]


def test_a_report_from_before_the_layout_pairs_its_rows_with_the_page_offset(tmp_path, rng):
    # A schema-6 report measured the op at the page offset: its row meets NEW's page_offset row, and NEW's
    # natural row has nothing to be compared with.
    base = synthetic_report(
        tmp_path / "base.csv", {make_key(layout="page_offset"): lognormal(rng, 10.0, 600)}, environment=HERE
    )
    as_earlier_schema(base, 6)
    samples = {make_key(): lognormal(rng, 30.0, 600), make_key(layout="page_offset"): lognormal(rng, 10.0, 600)}
    new = synthetic_report(tmp_path / "new.csv", samples, environment=HERE)
    comparison = compare_reports(base, new)
    assert [r.key for r in comparison.rows] == [make_key(layout="page_offset")]
    assert comparison.rows[0].ratio == pytest.approx(1.0, rel=0.03)
    assert comparison.only_in_new == [make_key()] and comparison.only_in_base == []
