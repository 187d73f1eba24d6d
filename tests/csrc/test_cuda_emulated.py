"""The CUDA kernels of csrc/core/fused_norm_cuda.cu executed on the CPU by the
SIMT emulator (csrc/emu), on every test run, GPU or not.

Every variant the launch plan can pick runs for every dtype, on row lengths
around each plan threshold, on the 16-byte vector path (all pointers aligned)
and the narrower ones (x or y 8 or 4 bytes or one element off), on odd row
lengths and element offsets that split each row into a scalar head, a
16-byte body and a scalar tail, with weight and bias off x's phase, with
rows sharing blocks and grids capped below the row count, in every
scheduling order (lowest thread first, in turn, in reverse, and seeded random
orders; tests/conftest.py --emu-seeds sets how many seeds) with the race
detector on. Each case checks that no two threads' accesses race, the kernel
the plan picked, every output element against the float64 reference, and the
guard bytes around every buffer.

The residual add + norm runs the same kernel families (add_warp_rows_kernel,
...) on the same cases, out of place and in place (y into x, the sum into
residual), with residual and residual_out taking part in the phases: its
stored sum must be x + residual in the dtype bit for bit, its y the float64
reference's norm of that sum within the dtype's tolerance.
"""

from __future__ import annotations

import math
import re

import pytest
import torch

from ops.dtypes import TORCH_DTYPES
from ops.reference import TOLERANCES, make_inputs, reference_norm
from tests.helpers.cuda_variants import kernel_names
from tests.helpers.emulated_kernels import (
    DTYPE_NAMES,
    IN_PLACE,
    SCHEDULE_KINDS,
    Case,
    check_case,
    check_case_in_schedules,
    expected_launches,
    load_emulated_kernels,
    one_torch_thread,
    plan_variants,
    schedules,
    standard_cases,
)

pytestmark = pytest.mark.cuda_emulated


@pytest.fixture(scope="module", autouse=True)
def _one_torch_thread():
    with one_torch_thread():
        yield


@pytest.fixture(scope="module")
def kernels():
    return load_emulated_kernels()


@pytest.fixture(scope="module")
def variants() -> dict:
    return plan_variants()


def run_standard_cases(kernels, variants, generator, dtype, op: str, kinds=tuple(SCHEDULE_KINDS)) -> set[str]:
    """The standard cases of ``op`` in the schedules of ``kinds`` (the inputs and the reference made once per case);
    returns the kernels that ran."""
    cases = standard_cases(dtype, variants, op)
    orders = [order for kind in kinds for order in schedules(kind, generator)]
    problems, ran = [], set()
    for case, expected in zip(cases, expected_launches(cases), strict=True):
        found, launch = check_case_in_schedules(kernels, case, orders, generator, expected)
        problems += found
        if launch is not None:
            ran.add(launch.kernel)
    assert not problems, f"{len(problems)} problems in {len(cases)} cases:\n" + "\n".join(problems[:20])
    return ran


@pytest.mark.parametrize("dtype", TORCH_DTYPES, ids=lambda d: DTYPE_NAMES[d])
def test_every_variant_matches_the_reference(kernels, variants, generator, dtype):
    ran = run_standard_cases(kernels, variants, generator, dtype, "norm")
    # The cases cover the whole table of variants for this dtype (vector and scalar paths).
    assert ran == kernel_names(variants, DTYPE_NAMES[dtype])


@pytest.mark.parametrize("op", ["add", "add_inplace"])
@pytest.mark.parametrize("dtype", TORCH_DTYPES, ids=lambda d: DTYPE_NAMES[d])
def test_every_add_norm_variant_matches_the_reference(kernels, variants, generator, dtype, op):
    # The same cases with one of x, residual, residual_out and y (in place: x or residual) moved to narrow the
    # vector, so that every width of every family runs the add, with its sum stored and normalised. Three
    # schedule kinds, not five: the reduction they order is the norm's (above, in all five), and the race
    # detector reports an access of another thread's element (the add's new risk, in place) in any order.
    ran = run_standard_cases(kernels, variants, generator, dtype, op, kinds=("warp_ahead", "reverse", "random"))
    assert ran == kernel_names(variants, DTYPE_NAMES[dtype], prefix="add_")


def test_one_block_loops_over_all_rows(kernels, generator):
    # gridDim.x = 1: each kernel's grid-stride loop covers 7 rows (warp kernels: 2 rows per warp,
    # a fourth warp with one), reusing the shared-memory slots row after row.
    cases = [Case(torch.float32, 7, hidden, None, 1) for hidden in (96, 1000, 4096, 16388)]
    cases += [Case(torch.bfloat16, 7, hidden, "x", 1) for hidden in (33, 1000, 5000)]
    orders = [order for kind in SCHEDULE_KINDS for order in schedules(kind, generator)]
    problems = []
    for case, expected in zip(cases, expected_launches(cases), strict=True):
        assert expected.grid > 1 or case.rows <= 4, case  # the cap really shrinks the grid
        problems += check_case_in_schedules(kernels, case, orders, generator, expected)[0]
    assert not problems, "\n".join(problems)


def test_only_x_and_y_at_different_phases_take_the_scalar_path(kernels, generator):
    # Same shape: aligned, and weight or bias one element off x's phase, run 16-byte vectors (the parameters
    # element by element); x or y alone one element off (one element index, two phases) one element at a time.
    operands = (None, "weight", "bias", "x", "y")
    expected = expected_launches([Case(torch.float16, 3, 128, o) for o in operands])
    assert [e.kernel for e in expected] == ["warp_rows_kernel<Half, 8, 1>"] * 3 + ["warp_rows_kernel<Half, 1, 4>"] * 2
    for operand, launch in zip(operands, expected, strict=True):
        problems, ran = check_case(kernels, Case(torch.float16, 3, 128, operand), "warp_ahead", generator, launch)
        assert not problems and ran == launch, problems


# Odd row lengths and element offsets: each row splits into a scalar head up to x's 16-byte boundary, a body of
# 16-byte vectors and a scalar tail (fused_norm_cuda.cu). 9 rows of an odd length start at every phase a 16-byte
# word has for the type (row r at base + r * hidden elements).
ODD_LENGTHS = (5001, 4097, 1023)


def vector_of(kernel: str) -> int:
    """Elements per vector of a variant: 'block_rows_kernel<BFloat16, 8, 4>' -> 8 (add_ kernels alike)."""
    return int(re.fullmatch(r"\w+<\w+, (\d+)(, \d+)?>", kernel).group(1))


ELEMENT_OFFSET_LAYOUTS = [
    (),  # every buffer 16-byte aligned: only the odd length moves the rows' phases
    (("x", 1), ("y", 1)),
    (("x", 3), ("y", 3)),
    (("x", 1), ("y", 1), ("weight", 3), ("bias", 1)),
    (("x", 3), ("y", 3), ("weight", 3), ("bias", 3)),  # weight and bias at x's phase in row 0
]


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32], ids=lambda d: DTYPE_NAMES[d])
@pytest.mark.parametrize("hidden", ODD_LENGTHS)
def test_odd_lengths_and_offsets_keep_the_16_byte_body(kernels, generator, dtype, hidden):
    esize = torch.empty((), dtype=dtype).element_size()
    cases = [Case(dtype, 9, hidden, None, 2 * (i % 2), 0, offsets) for i, offsets in enumerate(ELEMENT_OFFSET_LAYOUTS)]
    orders = ["warp_ahead", "reverse", *schedules("random", generator)]
    problems = []
    for case, expected in zip(cases, expected_launches(cases), strict=True):
        # x and y share their phase in every layout: the 16-byte variant, whatever the length and the offsets.
        assert vector_of(expected.kernel) == 16 // esize, (str(case), expected)
        found, ran = check_case_in_schedules(kernels, case, orders, generator, expected)
        problems += found
        assert found or ran == expected, (str(case), ran)
    assert not problems, f"{len(problems)} problems:\n" + "\n".join(problems[:20])


def with_add_streams(offsets: tuple[tuple[str, int], ...], op: str) -> tuple[tuple[str, int], ...]:
    """A norm layout for the add: residual at x's offset and residual_out at y's (in place they are x's and
    residual's buffers, y's and residual_out's offsets go to those)."""
    named = dict(offsets)
    extra = {"residual": named.get("x", 0), "residual_out": named.get("y", 0)}
    out = {**named, **{k: v for k, v in extra.items() if v}}
    if op == "add_inplace":
        out = {k: v for k, v in out.items() if k not in IN_PLACE}
    return tuple(out.items())


@pytest.mark.parametrize("op", ["add", "add_inplace"])
@pytest.mark.parametrize("dtype", TORCH_DTYPES, ids=lambda d: DTYPE_NAMES[d])
@pytest.mark.parametrize("hidden", ODD_LENGTHS)
def test_add_norm_odd_lengths_and_offsets_keep_the_16_byte_body(kernels, generator, dtype, hidden, op):
    # The norm's layouts with residual beside x and residual_out beside y: every stream shares x's phase, so
    # the 16-byte variant, with a head and a tail per row; in place each element is read, then written, by one
    # thread (the race detector would name any other).
    esize = torch.empty((), dtype=dtype).element_size()
    cases = [
        Case(dtype, 9, hidden, None, 2 * (i % 2), 0, with_add_streams(offsets, op), op=op)
        for i, offsets in enumerate(ELEMENT_OFFSET_LAYOUTS)
    ]
    orders = ["warp_ahead", "reverse", *schedules("random", generator)]
    problems = []
    for case, expected in zip(cases, expected_launches(cases), strict=True):
        assert expected.kernel.startswith("add_") and vector_of(expected.kernel) == 16 // esize, (str(case), expected)
        found, ran = check_case_in_schedules(kernels, case, orders, generator, expected)
        problems += found
        assert found or ran == expected, (str(case), ran)
    assert not problems, f"{len(problems)} problems:\n" + "\n".join(problems[:20])


@pytest.mark.parametrize("op", ["add", "add_inplace"])
def test_residual_off_x_phase_steps_the_add_norm_down(kernels, generator, op):
    # residual (or, out of place, residual_out) at another phase than x narrows the vector as y does for the
    # norm: one element index, two phases. bf16 residual one element off: one element per access; two
    # elements from x (the other streams with x): 4-byte vectors; float32 residual_out one element off: one
    # element per access.
    outputs_beside_x = (("y", 1), ("residual_out", 1)) if op == "add" else ()
    cases = [
        Case(torch.bfloat16, 9, 5001, None, 2, 0, (("residual", 1),), op=op),
        Case(torch.bfloat16, 9, 5001, None, 0, 0, (("x", 1), ("residual", 3), *outputs_beside_x), op=op),
    ]
    widths = [1, 2]
    if op == "add":
        cases.append(Case(torch.float32, 9, 1023, None, 0, 0, (("residual_out", 1),), op=op))
        widths.append(1)
    expected = expected_launches(cases)
    assert [vector_of(e.kernel) for e in expected] == widths, expected
    for case, launch in zip(cases, expected, strict=True):
        problems, ran = check_case(kernels, case, "warp_ahead", generator, launch)
        assert not problems and ran == launch, problems


@pytest.mark.parametrize("dtype", TORCH_DTYPES, ids=lambda d: DTYPE_NAMES[d])
def test_add_norm_is_the_norm_of_its_stored_sum_bit_for_bit(kernels, generator, dtype):
    # The emulator runs both ops' kernels from the same source without fused multiply-adds: the add's y must be
    # the norm kernel's y of the stored sum exactly (same family, width, split and order per thread), out of place
    # and in place, in every family (64, 1000 and 20000 elements reach warp_rows, block_rows and streaming_rows
    # for every dtype; 1023 and 5001 a head and a tail per row).
    for hidden in (64, 1000, 1023, 5001, 20000):
        x, weight, bias = make_inputs((9, hidden), dtype, generator)
        residual = make_inputs((9, hidden), torch.float32, generator, distribution="features")[0].to(dtype)
        s, y, y_norm = (torch.full_like(x, float("nan")) for _ in range(3))
        ptrs = {"x": x, "residual": residual, "weight": weight, "bias": bias, "residual_out": s, "y": y}
        run = [kernels.forward({k: t.data_ptr() for k, t in ptrs.items()}, 9, hidden, 1e-5, dtype, "warp_ahead", 2)]
        norm = {"x": s, "weight": weight, "bias": bias, "y": y_norm}
        run.append(kernels.forward({k: t.data_ptr() for k, t in norm.items()}, 9, hidden, 1e-5, dtype, "warp_ahead", 2))
        xi, ri = x.clone(), residual.clone()
        in_place = {"x": xi, "residual": ri, "weight": weight, "bias": bias, "residual_out": ri, "y": xi}
        run.append(
            kernels.forward({k: t.data_ptr() for k, t in in_place.items()}, 9, hidden, 1e-5, dtype, "reverse", 2)
        )
        assert all(rc == 0 for rc, _, _ in run), [message for _, message, _ in run]
        assert run[0][2][0].kernel == "add_" + run[1][2][0].kernel, (run[0][2], run[1][2])
        assert torch.equal(s.view(torch.uint8), (x + residual).view(torch.uint8)), hidden
        assert torch.equal(y.view(torch.uint8), y_norm.view(torch.uint8)), hidden
        assert torch.equal(xi.view(torch.uint8), y.view(torch.uint8)) and torch.equal(ri, s), hidden


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32], ids=lambda d: DTYPE_NAMES[d])
def test_identical_rows_at_the_same_16_byte_phase_give_the_same_bits(kernels, generator, dtype):
    # The GPU's rule for a row's position (docs/cuda-kernels.md): the row is split among threads from x's first
    # 16-byte boundary on, so identical rows at the same phase take the same split and order, and rows of a
    # length whose bytes are not a multiple of 16 return to row 0's phase every 16 / gcd(16, row bytes) rows.
    # Each length reaches a different family (warp_rows, block_rows, streaming_rows); every row stays within
    # the dtype's tolerance of row 0.
    esize = torch.empty((), dtype=dtype).element_size()
    for hidden in (33, 777, 2305, 20001):
        period = 16 // math.gcd(16, hidden * esize)
        x, weight, bias = make_inputs((1, hidden), dtype, generator)
        rows = x.expand(2 * period + 1, hidden).contiguous()
        y = torch.full_like(rows, float("nan"))
        ptrs = {"x": rows, "weight": weight, "bias": bias, "y": y}
        rc, message, _ = kernels.forward(
            {k: t.data_ptr() for k, t in ptrs.items()}, rows.shape[0], hidden, 1e-5, dtype, "round_robin", 0
        )
        assert rc == 0, message
        for r in (period, 2 * period):
            assert torch.equal(y[r].view(torch.uint8), y[0].view(torch.uint8)), (hidden, r)
        torch.testing.assert_close(y, y[0].expand_as(y), **TOLERANCES[dtype].as_kwargs())


@pytest.mark.parametrize("offset", [1, 3])
def test_x_and_y_at_different_phases_step_down_to_the_widest_shared_access(kernels, generator, offset):
    # bf16 x one or three elements off, y aligned: 2 bytes apart, so one element per access; x three elements
    # and y one element off: 4 bytes apart, 4-byte vectors with a head per row.
    cases = [
        Case(torch.bfloat16, 9, 5001, None, 2, 0, (("x", offset),)),
        Case(torch.bfloat16, 9, 5001, None, 0, 0, (("x", offset), ("y", 4 - offset))),
        Case(torch.float32, 9, 1023, None, 0, 0, (("y", offset),)),
    ]
    expected = expected_launches(cases)
    assert [vector_of(e.kernel) for e in expected] == [1, 2, 1], expected
    for case, launch in zip(cases, expected, strict=True):
        problems, ran = check_case(kernels, case, "warp_ahead", generator, launch)
        assert not problems and ran == launch, problems


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=lambda d: DTYPE_NAMES[d])
def test_16_bit_conversions_are_bit_exact(kernels, generator, dtype):
    # Widening: every one of the 65,536 bit patterns (NaNs: any NaN, payloads may differ).
    bits = torch.arange(-(2**15), 2**15, dtype=torch.int32).to(torch.int16)
    expected = bits.view(dtype).float()
    got = kernels.to_float(bits, dtype)
    nan = torch.isnan(expected)
    assert torch.equal(torch.isnan(got), nan)
    assert torch.equal(got[~nan].view(torch.int32), expected[~nan].view(torch.int32))
    # Narrowing, round to nearest even: random float32 patterns over every exponent, the exact midpoints
    # between neighbouring 16-bit values (ties), and values around overflow and the subnormal range.
    random_bits = torch.randint(-(2**31), 2**31, (1 << 20,), dtype=torch.int64, generator=generator)
    lower = bits[~nan].view(dtype).float()
    upper = (bits[~nan].to(torch.int32) + 1).to(torch.int16).view(dtype).float()
    ties = ((lower.double() + upper.double()) / 2).float()
    values = torch.cat(
        [
            random_bits.to(torch.int32).view(torch.float32),
            ties,
            lower,
            torch.tensor(
                [
                    65504.0,
                    65519.996,
                    65520.0,
                    2.0**-24,
                    2.0**-25,
                    3 * 2.0**-26,
                    3.4e38,
                    0.0,
                    -0.0,
                    float("inf"),
                    float("-inf"),
                ]
            ),
        ]
    )
    values = values[~torch.isnan(values)]
    got = kernels.from_float(values, dtype)
    expected = values.to(dtype)
    nan = torch.isnan(expected)
    assert not nan.any()  # NaN inputs were left out: a finite or infinite input never becomes NaN
    mismatch = got != expected.view(torch.int16)
    assert not mismatch.any(), f"{int(mismatch.sum())} mismatches, e.g. {values[mismatch][:5].tolist()}"


@pytest.mark.parametrize("kind", SCHEDULE_KINDS)
def test_a_non_finite_row_stays_in_its_row(kernels, generator, kind):
    # One block does all 9 rows (grid capped at 1), so rows share every shared-memory slot in turn: a NaN
    # or inf in row 3 or 5 must give exactly the reference's NaNs in that row and leave the others exact.
    for order, hidden in [(o, h) for o in schedules(kind, generator) for h in (64, 33, 1000, 4096, 20000)]:
        x, weight, bias = make_inputs((9, hidden), torch.float32, generator)
        x[3, hidden // 2] = float("nan")
        x[5, 0] = float("inf")
        y = torch.zeros_like(x)
        ptrs = {"x": x.data_ptr(), "weight": weight.data_ptr(), "bias": bias.data_ptr(), "y": y.data_ptr()}
        rc, message, _ = kernels.forward(ptrs, 9, hidden, 1e-6, torch.float32, order, 1)
        assert rc == 0, f"[{order}] {message}"
        ref = reference_norm(x, weight, bias, 1e-6)
        assert torch.equal(torch.isnan(y), torch.isnan(ref)), hidden
        assert torch.isnan(y[3]).all() and not torch.isnan(y[[0, 1, 2, 4, 6, 7, 8]]).any(), hidden
        finite = ~torch.isnan(ref)
        torch.testing.assert_close(y.double()[finite], ref[finite], **TOLERANCES[torch.float32].as_kwargs())
