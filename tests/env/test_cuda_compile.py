"""The CUDA kernels without a GPU: the launch plan (host C++), the compile for
every pinned architecture, and ptxas's resource report (no spills, launchable)."""

from __future__ import annotations

import json
import os
import warnings
from pathlib import Path

import pytest

from env.builder import cuda as cuda_build
from env.builder import steps
from env.builder.config import pinned_cuda_arch_list, use_pinned_cuda_arch_list
from env.builder.ptxas import PtxasReportError, parse_ptxas_report
from env.builder.toolkit import NOT_FOUND, find_cuda_toolkit
from tests.helpers.cuda_variants import KERNEL_TYPES, build_probe, kernel_names, plans, read_variants

needs_nvcc = pytest.mark.skipif(
    find_cuda_toolkit() is None,
    reason=f"{NOT_FOUND}: the CUDA compile check needs it",
)


# --- the launch plan, through a host-only probe ---------------------------------


@pytest.fixture(scope="module")
def probe(tmp_path_factory):
    return build_probe(tmp_path_factory.mktemp("probe"))


@pytest.fixture(scope="module")
def variants(probe) -> dict:
    return read_variants(probe)


# Every row length up to past the largest register-resident variant of the
# 2-byte types (1024 threads x 4 chunks x 8 elements = 32768), plus far ones.
HIDDEN_SIZES = list(range(1, 4200)) + list(range(4200, 33000, 7)) + [32767, 32768, 32769, 65536, 1 << 20]


ALIGNMENTS = (1, 2, 4, 8, 16)


def expected_vec(elem_bytes: int, alignment: int, widths: list[int]) -> int:
    """The widest vector (bytes in ``widths``) x's distance to y allows; the row length plays no part (each row
    has a scalar head and tail)."""
    for width in sorted(widths, reverse=True):
        if elem_bytes <= width <= alignment:
            return width // elem_bytes
    return 1


def test_plan_covers_each_row_with_the_smallest_variant(probe, variants):
    warp_chunks = variants["warp_rows_kernel"]
    (block_chunks,) = variants["block_rows_kernel"]
    max_threads = variants["max_threads"]
    cases = [(3, h, b, a) for h in HIDDEN_SIZES for b in (2, 4, 8) for a in (1, 8, 16)]
    for p in plans(probe, cases):
        assert p["vec"] == expected_vec(p["elem_bytes"], p["alignment"], variants["vector_widths"]), p
        nvec = p["hidden"] // p["vec"]  # body vectors at most (none is split off a row end: head and tail)
        if p["kernel"] == "warp_rows_kernel":
            # The fewest chunks per lane that still cover the row.
            assert p["chunks"] == min(c for c in warp_chunks if 32 * c >= nvec), p
            assert p["threads"] == 32 * p["rows_per_block"], p
        elif p["kernel"] == "block_rows_kernel":
            assert nvec > 32 * max(warp_chunks), p  # a warp could not hold it
            assert p["chunks"] == block_chunks and p["rows_per_block"] == 1, p
            assert p["threads"] % 32 == 0 and 64 <= p["threads"] <= max_threads, p
            assert p["threads"] * block_chunks >= nvec, p  # covered
            assert p["threads"] == 64 or (p["threads"] - 32) * block_chunks < nvec, p  # and no idle warp
        else:
            assert p["kernel"] == "streaming_rows_kernel", p
            assert nvec > max_threads * block_chunks and p["threads"] == variants["streaming_threads"], p
        assert p["blocks"] == -(-p["rows"] // p["rows_per_block"]), p


def test_plan_reaches_every_variant_and_every_width(probe, variants):
    cases = [(1, h, b, a) for h in HIDDEN_SIZES for b in (2, 4, 8) for a in ALIGNMENTS]
    reached = {
        (p["kernel"], p["chunks"], p["vec"] * p["elem_bytes"] if p["vec"] > 1 else 0, p["elem_bytes"])
        for p in plans(probe, cases)
    }
    expected = {
        (k, c or 0, width, b)
        for k, cs in variants.items()
        if k.endswith("_kernel")
        for c in cs
        for b in (2, 4, 8)
        for width in [0] + [w for w in variants["vector_widths"] if w > b]
    }
    assert reached == expected


def test_plan_clamps_the_grid_and_loops_over_rows(probe):
    (p,) = plans(probe, [(1 << 40, 64, 4, 16)])
    assert p["blocks"] == 2**31 - 1  # gridDim.x limit; the kernels stride over the rest


def test_x_and_y_apart_step_down_one_width_at_a_time_and_odd_lengths_do_not(probe):
    # bf16 rows of 512: 16-byte vectors when x and y are a multiple of 16 bytes apart;
    # 8, 4 or 2 bytes apart keep 8- and 4-byte vectors.
    got = [p["vec"] for p in plans(probe, [(8, 512, 2, a) for a in (16, 8, 4, 2)])]
    assert got == [8, 4, 2, 1]
    # Row lengths that 16 bytes do not divide keep 16-byte vectors (a scalar head and tail per row), in the
    # same kernel as the next multiple below.
    got = plans(probe, [(8, h, 2, 16) for h in (5000, 5004, 5002, 5001, 5007)])
    assert [p["vec"] for p in got] == [8] * 5
    assert len({(p["kernel"], p["threads"]) for p in got}) == 1


# --- the architecture list ---------------------------------------------------------


def test_arch_list_is_pinned_with_ampere_hopper_and_ptx():
    targets = [t.name for t in cuda_build.arch_targets(pinned_cuda_arch_list())]
    assert {"sm_80", "sm_90"} <= set(targets)
    assert any(t.startswith("compute_") for t in targets), "the newest arch must also ship as PTX"


def test_arch_targets_parse_like_cpp_extension():
    targets = cuda_build.arch_targets("8.0;9.0+PTX")
    assert [(t.name, t.gencode, t.machine_code) for t in targets] == [
        ("sm_80", "arch=compute_80,code=sm_80", True),
        ("sm_90", "arch=compute_90,code=sm_90", True),
        ("compute_90", "arch=compute_90,code=compute_90", False),
    ]
    assert [t.name for t in cuda_build.arch_targets("8.6 9.0a")] == ["sm_86", "sm_90a"]
    with pytest.raises(cuda_build.CudaCheckError, match="Hopper"):
        cuda_build.arch_targets("Hopper")


def test_environment_cannot_override_the_pinned_arch_list(monkeypatch):
    monkeypatch.setenv("TORCH_CUDA_ARCH_LIST", "7.5")
    with pytest.warns(UserWarning, match="ignored"):
        value = use_pinned_cuda_arch_list()
    assert value == pinned_cuda_arch_list()
    assert os.environ["TORCH_CUDA_ARCH_LIST"] == value
    monkeypatch.setenv("TORCH_CUDA_ARCH_LIST", value)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        use_pinned_cuda_arch_list()  # the same value: silent


# --- ptxas report parsing ------------------------------------------------------------

SAMPLE_REPORT = """\
ptxas info    : 0 bytes gmem
ptxas info    : Compiling entry function '_Z1kPf' for 'sm_80'
ptxas info    : Function properties for _Z1kPf
    8 bytes stack frame, 16 bytes spill stores, 8 bytes spill loads
ptxas info    : Used 48 registers, used 1 barriers, 256 bytes smem, 408 bytes cmem[0]
ptxas info    : Compiling entry function '_Z1gv' for 'sm_90'
ptxas info    : Function properties for _Z1gv
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 21 registers, used 0 barriers
"""


def test_parse_ptxas_report():
    parsed = parse_ptxas_report(SAMPLE_REPORT)
    assert parsed == [
        (
            "_Z1kPf",
            "sm_80",
            {
                "stack_frame_bytes": 8,
                "spill_store_bytes": 16,
                "spill_load_bytes": 8,
                "registers": 48,
                "barriers": 1,
                "shared_bytes": 256,
                "constant_bytes": 408,
            },
        ),
        (
            "_Z1gv",
            "sm_90",
            {
                "stack_frame_bytes": 0,
                "spill_store_bytes": 0,
                "spill_load_bytes": 0,
                "registers": 21,
                "barriers": 0,
                "shared_bytes": 0,
                "constant_bytes": 0,
            },
        ),
    ]
    with pytest.raises(PtxasReportError, match="incomplete"):
        parse_ptxas_report(SAMPLE_REPORT.replace("Used 21 registers", "Used registers"))


# --- the real compile ---------------------------------------------------------------------


@pytest.fixture(scope="module")
def check(tmp_path_factory):
    # The build's own check while its inputs (sources, flags, nvcc, build code)
    # are unchanged since: compiling again would give the same objects and
    # report. Otherwise (no build, or an edit since) a fresh check here.
    fragment = steps.up_to_date_fragment("cuda_compile_check")
    entry = fragment["build"].get("cuda_resource_report", {}) if fragment else {}
    if entry.get("status") == "compiled":
        report_path = Path(entry["json"])
        return cuda_build.CudaCheckResult(report_path, Path(entry["log"]), json.loads(report_path.read_text()))
    return cuda_build.compile_check(tmp_path_factory.mktemp("cuda"))


@needs_nvcc
def test_kernels_compile_for_every_pinned_target(check):
    expected = [t.name for t in cuda_build.arch_targets(pinned_cuda_arch_list())]
    objects = {o["target"]: o["path"] for o in check.report["objects"]}
    assert sorted(objects) == sorted(expected)
    for target, path in objects.items():
        assert Path(path).stat().st_size > 0, target
    assert check.log_path.read_text().count("Compiling entry function") == len(check.report["kernels"])


@needs_nvcc
def test_every_variant_is_compiled_for_every_machine_target(check, variants):
    machine = check.report["summary"]["machine_code_targets"]
    assert machine, "no machine-code target in the pinned list"
    # the norm's kernels and the residual add + norm's (add_*) of the same families
    expected = set().union(
        *(kernel_names(variants, dtype, prefix) for dtype in KERNEL_TYPES for prefix in ("", "add_"))
    )
    for arch in machine:
        compiled = {k["kernel"] for k in check.report["kernels"] if k["arch"] == arch}
        assert compiled == expected, (
            f"{arch}: missing {sorted(expected - compiled)}, unexpected {sorted(compiled - expected)}"
        )


@needs_nvcc
def test_no_kernel_spills_or_uses_local_memory(check):
    offenders = [
        f"{k['kernel']} [{k['arch']}]: {k['spill_store_bytes']} B spill stores, {k['spill_load_bytes']} B spill "
        f"loads, {k['stack_frame_bytes']} B stack frame"
        for k in check.report["kernels"]
        if k["spill_store_bytes"] or k["spill_load_bytes"] or k["stack_frame_bytes"]
    ]
    assert not offenders, "\n".join(offenders)
    assert check.report["summary"]["spilling_kernels"] == []


@needs_nvcc
def test_every_kernel_fits_its_largest_launch(check, variants):
    # An SM has 64K registers; a block of 1024 threads may use 64 each at
    # most, or the launch fails with "too many resources requested".
    # Shared memory is the 2 x 32 reduction slots, far under 48 KB.
    for k in check.report["kernels"]:
        threads = {
            "warp_rows": 128,
            "block_rows": variants["max_threads"],
            "streaming_rows": variants["streaming_threads"],
        }[k["kernel"].split("_kernel")[0].removeprefix("add_")]
        assert k["registers"] * threads <= 65536, k
        assert k["registers"] <= 255 and k["shared_bytes"] <= 48 * 1024, k


@needs_nvcc
def test_adapters_compile_against_the_available_headers(check):
    adapters = check.report["adapters"]
    assert adapters["torch_cuda_impl"]["status"] == "compiled", adapters["torch_cuda_impl"]
    ort = adapters["ort_cuda_op"]
    if ort["status"] == "skipped":
        pytest.skip(f"ORT CUDA op not compiled: {ort['reason']}")
    assert ort["status"] == "compiled", ort
