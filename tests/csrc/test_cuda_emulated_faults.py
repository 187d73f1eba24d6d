"""Proof that the emulated kernel tests can fail: faults injected into copies
of fused_norm_cuda.cu (tests/helpers/kernel_faults.py) must each be caught by
the same value checks test_cuda_emulated.py runs, while the unmodified kernels
pass them (and the race detector) in every fixed order; the race detector
must name the lines of a removed barrier and of reused shared slots in every
schedule; the emulator must report a deadlock and a bad shuffle mask by name;
and AddressSanitizer must catch a vector load past a row's end, on every
vector width.

The faulted copies compile in parallel, and each object is cached under
build/cuda_emulated/ by the hash of its source text and flags: a rerun, or a
copy whose text is unchanged, compiles nothing.
"""

from __future__ import annotations

import os
import subprocess

import pytest
import torch

from env.builder.config import core_cuda_sources
from env.builder.cuda_emulation import build_many
from tests.helpers.emulated_kernels import (
    ORDERS,
    SCHEDULE_KINDS,
    Case,
    EmulatedKernels,
    check_case,
    expected_launches,
    load_emulated_kernels,
    one_torch_thread,
    plan_variants,
    schedules,
    standard_cases,
)
from tests.helpers.kernel_faults import (
    BARRIER_IN_A_BRANCH,
    FAULTS,
    HALF_WARP_SHUFFLE_MASK,
    LANE_EXITS_BEFORE_THE_REDUCTION,
    ROW_TAIL_OVERREAD,
    ROWS_SHARED_BY_TWO_WARPS,
    SHARED_SLOTS_REUSED,
    Fault,
    FaultPatternError,
)

pytestmark = pytest.mark.cuda_emulated


@pytest.fixture(scope="module", autouse=True)
def _one_torch_thread():
    with one_torch_thread():
        yield


EMULATOR_CHECKS = [BARRIER_IN_A_BRANCH, LANE_EXITS_BEFORE_THE_REDUCTION, HALF_WARP_SHUFFLE_MASK, SHARED_SLOTS_REUSED]


@pytest.fixture(scope="module")
def kernels() -> EmulatedKernels:
    return load_emulated_kernels()  # skips where CUDA's headers are missing


# The faults the fast tier's tests use; the others' copies are compiled for the slow tier only (a fresh checkout
# compiles each copy, 5-10 s on 2 cores, before the content cache has it).
FAST_FAULTS = [FAULTS[0], SHARED_SLOTS_REUSED, ROWS_SHARED_BY_TWO_WARPS]


def _build_faults(faults: list[Fault], directory) -> dict[str, EmulatedKernels]:
    """The faults' builds, compiled a core's worth at a time (cached under build/cuda_emulated/)."""
    copies = [fault.write_copy(core_cuda_sources()[0], directory) for fault in faults]
    libraries = build_many(copies, workers=max(2, os.cpu_count() or 2))
    return {fault.name: EmulatedKernels(lib) for fault, lib in zip(faults, libraries, strict=True)}


@pytest.fixture(scope="module")
def faulted(kernels, tmp_path_factory) -> dict[str, EmulatedKernels]:
    return _build_faults(FAST_FAULTS, tmp_path_factory.mktemp("faulted"))


@pytest.fixture(scope="module")
def all_faulted(kernels, faulted, tmp_path_factory) -> dict[str, EmulatedKernels]:
    rest = [f for f in FAULTS + EMULATOR_CHECKS if f.name not in faulted]
    return {**faulted, **_build_faults(rest, tmp_path_factory.mktemp("faulted-rest"))}


def cases_of(op: str) -> list[tuple[Case, object]]:
    """The float32 cases of test_cuda_emulated.py for ``op``: every variant, both paths, every operand misaligned."""
    cases = standard_cases(torch.float32, plan_variants(), op)
    return list(zip(cases, expected_launches(cases), strict=True))


@pytest.fixture(scope="module")
def detection_cases() -> list[tuple[Case, object]]:
    return cases_of("norm")


def first_problem(
    kernels: EmulatedKernels, cases, generator, orders=tuple(ORDERS), detect_races: bool = True
) -> str | None:
    for order in orders:
        for case, expected in cases:
            problems, _ = check_case(kernels, case, order, generator, expected, detect_races)
            if problems:
                return problems[0]
    return None


def source_line(text: str) -> str:
    """ "fused_norm_cuda.cu:N" for the one line of the kernels holding ``text`` (the faults keep line numbers)."""
    lines = core_cuda_sources()[0].read_text().splitlines()
    (number,) = [i for i, line in enumerate(lines, start=1) if text in line]
    return f"{core_cuda_sources()[0].name}:{number}"


@pytest.fixture(scope="module")
def _clean_runs() -> dict:
    return {}


def clean_problems_of(runs: dict, kernels, cases, generator, op: str) -> list[str]:
    """The detection cases of ``op`` on the unmodified kernels: run once per module and op."""
    if op not in runs:
        runs[op] = [
            p
            for order in ORDERS
            for case, expected in cases
            for p in check_case(kernels, case, order, generator, expected)[0]
        ]
    return runs[op]


@pytest.fixture
def clean_problems(_clean_runs, kernels, detection_cases, generator) -> list[str]:
    """The norm's detection cases on the unmodified kernels, with the first test's generator."""
    return clean_problems_of(_clean_runs, kernels, detection_cases, generator, "norm")


@pytest.mark.parametrize(
    "fault",
    [f if f in FAST_FAULTS else pytest.param(f, marks=pytest.mark.slow) for f in FAULTS],
    ids=lambda f: f.name.replace(" ", "-"),
)
def test_injected_fault_is_caught(request, _clean_runs, kernels, generator, fault: Fault):
    faulted = request.getfixturevalue("faulted" if fault in FAST_FAULTS else "all_faulted")
    # The unmodified kernels pass the very same cases (those of the fault's op), so what fails below is the
    # fault. The value checks alone (detector off) must catch every fault: they are what a race-free wrong
    # kernel meets.
    cases = request.getfixturevalue("detection_cases") if fault.op == "norm" else cases_of(fault.op)
    clean = clean_problems_of(_clean_runs, kernels, cases, generator, fault.op)
    assert not clean, "the unmodified kernels fail the detection cases:\n" + "\n".join(clean[:10])
    problem = first_problem(faulted[fault.name], cases, generator, detect_races=False)
    assert problem is not None, f"fault {fault.name!r} was not caught by any emulated case"
    assert fault.symptom in problem, problem


def test_the_warp_ahead_order_exposes_a_race_round_robin_hides(faulted, clean_problems, detection_cases, generator):
    # Why the values alone need several orders: with one set of shared slots per block, each thread reads its
    # slot before any thread moves on when threads take turns, but a warp that runs ahead overwrites it.
    assert not clean_problems, "\n".join(clean_problems[:10])
    racy = faulted[SHARED_SLOTS_REUSED.name]
    assert first_problem(racy, detection_cases, generator, orders=("round_robin",), detect_races=False) is None
    problem = first_problem(racy, detection_cases, generator, orders=("warp_ahead",), detect_races=False)
    assert problem is not None and SHARED_SLOTS_REUSED.symptom in problem, problem


@pytest.mark.parametrize("kind", SCHEDULE_KINDS)
@pytest.mark.parametrize("fault", [FAULTS[0], SHARED_SLOTS_REUSED], ids=["barrier-removed", "slots-reused"])
def test_the_race_detector_names_the_racing_lines_in_every_order(faulted, generator, fault, kind):
    # What the values show only in some orders, the detector reports in all: the write of a warp's partial
    # sum and the read of it (or, where no thread wrote the slot yet, the read of the unwritten slot).
    write, read = source_line("partials[warp] = v"), source_line("partials[lane]")
    cases = [Case(torch.float32, 7, 1000, None, 1), Case(torch.float32, 3, 20000, None, 1)]  # block and streaming
    for order in schedules(kind, generator):
        for case, expected in zip(cases, expected_launches(cases), strict=True):
            problems, _ = check_case(faulted[fault.name], case, order, generator, expected)
            assert problems, f"{fault.name} [{order}] {case}: not reported"
            problem = problems[0]
            assert f"in fused_norm::cuda_kernels::{expected.kernel.split('<')[0]}<float" in problem, problem
            assert read in problem, problem
            assert ("data race" in problem and write in problem) or "uninitialised shared memory" in problem, problem


@pytest.mark.parametrize("kind", SCHEDULE_KINDS)
def test_a_global_race_names_the_kernels_line_not_the_cache_hint_helpers(faulted, generator, kind):
    # Two warps of a block write one row's y through store_streaming's __stcs: the report names that line of the
    # kernels, not the emulator's __stcs in simt.h (which an out-of-line copy of the helper would show).
    store = source_line("__stcs(reinterpret_cast<word_t<P>*>(p), w);")
    cases = [Case(torch.float32, 9, 512, None, 1), Case(torch.bfloat16, 9, 72, None, 1)]  # warp_rows, 16 and 2 bytes
    for order in schedules(kind, generator):
        for case, expected in zip(cases, expected_launches(cases), strict=True):
            problems, _ = check_case(faulted[ROWS_SHARED_BY_TWO_WARPS.name], case, order, generator, expected)
            assert problems, f"[{order}] {case}: not reported"
            problem = problems[0]
            assert "data race in fused_norm::cuda_kernels::warp_rows_kernel<" in problem, problem
            assert "on global memory" in problem and "of kernel argument 3)" in problem, problem  # y
            assert problem.count(f"at {store} (") == 2 and "simt.h" not in problem, problem


@pytest.mark.slow  # a fault copy of its own to compile (see FAST_FAULTS)
def test_a_barrier_not_every_thread_reaches_is_reported(all_faulted, generator):
    case = Case(torch.float32, 2, 1000)  # block_rows_kernel, 64 threads (250 vectors of 4)
    # Detector off: it would first report lane 1 reading a slot warp 1 has not written yet.
    problems, _ = check_case(all_faulted[BARRIER_IN_A_BRANCH.name], case, "round_robin", generator, detect_races=False)
    (problem,) = problems
    # The kernel, the block and the threads that never arrive are named.
    assert "deadlock in fused_norm::cuda_kernels::block_rows_kernel<float, 4, 4>" in problem, problem
    assert "block (0,0,0)" in problem and "2 of 64 threads wait at __syncthreads()" in problem, problem
    assert "thread (1,0,0) [warp 0 lane 1] waits at __shfl_xor_sync(mask=0xffffffff)" in problem, problem


@pytest.mark.slow  # a fault copy of its own to compile (see FAST_FAULTS)
def test_a_shuffle_reading_an_exited_lane_is_reported(all_faulted, generator):
    # As in CUDA, the other lanes' shuffle goes ahead without the exited lane 5, but lane 21 reads it (xor 16).
    problems, _ = check_case(
        all_faulted[LANE_EXITS_BEFORE_THE_REDUCTION.name], Case(torch.float32, 1, 64), "warp_ahead", generator
    )
    (problem,) = problems
    assert (
        "__shfl_xor_sync(mask=0xffffffff): lane 21 reads lane 5, which has exited (undefined on the GPU) in "
        "thread (21,0,0) [warp 0 lane 21] of block (0,0,0) of fused_norm::cuda_kernels::warp_rows_kernel<float, 4, 1>"
    ) in problem, problem


@pytest.mark.slow  # a fault copy of its own to compile (see FAST_FAULTS)
def test_a_shuffle_reading_outside_its_mask_is_reported(all_faulted, generator):
    problems, _ = check_case(
        all_faulted[HALF_WARP_SHUFFLE_MASK.name], Case(torch.float32, 1, 64), "warp_ahead", generator
    )
    (problem,) = problems
    # Lanes 0-15 meet first; lane 0's xor partner 16 is outside their mask: undefined on the GPU, an error here.
    assert "__shfl_xor_sync(mask=0x0000ffff): lane 0 reads lane 16, which is not in the mask" in problem, problem
    assert (
        "thread (0,0,0) [warp 0 lane 0] of block (0,0,0) of fused_norm::cuda_kernels::warp_rows_kernel<float, 4, 1>"
        in problem
    ), problem


@pytest.mark.slow
def test_address_sanitizer_catches_a_vector_load_past_the_row_end(kernels, tmp_path):
    copy = ROW_TAIL_OVERREAD.write_copy(core_cuda_sources()[0], tmp_path)
    clean, overread = build_many([core_cuda_sources()[0], copy], sanitize=True)
    # (dtype, rows, hidden, offset): float32 rows of 33 vectors (warp kernel, 2 chunks), of 1000 vectors (block
    # kernel) and of 4097 vectors (streaming), float16 and float64 rows of 33 vectors, a bfloat16 row on the
    # scalar path; each buffer exactly its size and aligned to 16 bytes.
    aligned = [(0, 5, 132, 0), (0, 3, 4000, 0), (0, 2, 16388, 0), (2, 4, 264, 0), (1, 3, 66, 0), (3, 3, 31, 0)]
    # Every operand 8 or 4 bytes past a 16-byte boundary: the 8- and 4-byte vector paths of the warp, block and
    # streaming kernels, and the scalar path of float32 at 4 bytes off.
    offset = [
        (0, 5, 132, 8),
        (0, 3, 2000, 8),
        (0, 2, 16388, 8),
        (2, 4, 264, 8),
        (2, 3, 264, 4),
        (3, 5, 4000, 4),
        (0, 5, 132, 4),
    ]
    ok = run_probe(clean, aligned + offset)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert ok.stdout.splitlines() == [f"ok dtype {d} rows {r} hidden {h} offset {o}" for d, r, h, o in aligned + offset]
    for problems in (aligned, offset[:1]):
        # On the 16-byte path, and on the 8-byte path alone: each is run under the sanitizer, and caught.
        bad = run_probe(overread, problems)
        assert bad.returncode != 0, bad.stdout
        assert "ERROR: AddressSanitizer: heap-buffer-overflow" in bad.stderr, bad.stderr[-3000:]
        assert "warp_rows_kernel" in bad.stderr, bad.stderr[-3000:]  # the report's stack names the kernel


def run_probe(probe, problems: list[tuple[int, int, int, int]]) -> subprocess.CompletedProcess:
    args = [str(v) for problem in problems for v in problem]
    return subprocess.run([str(probe), *args], capture_output=True, text=True, timeout=300, check=False)


def test_a_fault_whose_pattern_is_gone_fails_loudly():
    # After a kernel rewrite that moves the code, the fault must not quietly build an unchanged copy.
    source = core_cuda_sources()[0].read_text()
    for fault in FAULTS + EMULATOR_CHECKS + [ROW_TAIL_OVERREAD, ROWS_SHARED_BY_TWO_WARPS]:
        assert fault.apply(source) != source
    with pytest.raises(FaultPatternError, match="block barrier removed.*matches 0 times"):
        FAULTS[0].apply(source.replace("__syncthreads();", "__syncthreads_count(1);"))
    with pytest.raises(FaultPatternError, match="matches 2 times"):
        FAULTS[0].apply(source + "\n// __syncthreads();\n")
