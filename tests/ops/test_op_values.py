"""Values of myops::fused_norm on every device against an independent float64 reference."""

from __future__ import annotations

import math

import pytest
import torch

import ops
from ops.dtypes import TORCH_DTYPES
from ops.reference import REFERENCE, TOLERANCES, make_inputs, reference_norm

# Hidden sizes: 1 and 3 (below any vector width), 127 (odd, not a multiple
# of 4/8/16/32 lanes), 512 and 1024 (exact multiples), 4097 (one past).
HIDDEN_SIZES = (1, 3, 127, 512, 1024, 4097)


@pytest.mark.parametrize("dtype", TORCH_DTYPES, ids=str)
@pytest.mark.parametrize("hidden", HIDDEN_SIZES)
def test_matches_float64_reference(dtype, hidden, generator, device):
    x, w, b = make_inputs((3, 5, hidden), dtype, generator, device=device)
    y = ops.fused_norm(x, w, b, 1e-6)
    assert y.dtype == dtype and y.shape == x.shape and y.is_contiguous()
    torch.testing.assert_close(y.double(), reference_norm(x, w, b, 1e-6), **TOLERANCES[dtype].as_kwargs())


@pytest.mark.parametrize("dtype", TORCH_DTYPES, ids=str)
def test_out_variant_writes_every_element(dtype, generator, device):
    x, w, b = make_inputs((7, 129), dtype, generator, device=device)
    out = torch.full_like(x, float("nan"))
    returned = ops.fused_norm_out(x, w, b, 1e-5, out)
    assert returned is out
    assert not out.isnan().any(), "some output elements were never written"
    torch.testing.assert_close(out.double(), reference_norm(x, w, b, 1e-5), **TOLERANCES[dtype].as_kwargs())


@pytest.mark.parametrize("dtype", TORCH_DTYPES, ids=str)
def test_out_variant_with_strided_inputs(dtype, generator):
    # Strided x, weight and bias that share no byte with out are read as
    # their contiguous copies would be (they are not "sharing memory").
    x, w, b = make_inputs((6, 2 * 129), dtype, generator)
    xs, ws, bs = x[:, ::2], w[::2], b[1::2]
    assert not (xs.is_contiguous() or ws.is_contiguous() or bs.is_contiguous())
    out = torch.full(xs.shape, float("nan"), dtype=dtype)
    ops.fused_norm_out(xs, ws, bs, 1e-5, out)
    assert not out.isnan().any(), "some output elements were never written"
    torch.testing.assert_close(out.double(), reference_norm(xs, ws, bs, 1e-5), **TOLERANCES[dtype].as_kwargs())


def test_out_in_the_gap_between_rows_of_a_strided_x(generator):
    # x's rows sit at [0, h) and [3h, 4h) of one buffer, out fills [h, 3h):
    # the spans interleave but no element is shared, so the call is valid
    # and must leave x untouched.
    h = 64
    x_src, w, b = make_inputs((2, 3 * h), torch.float32, generator)
    buffer = x_src.clone()
    x = buffer[:, :h]
    out = buffer.view(-1)[h : 3 * h].view(2, h)
    x_before = x.clone()
    expected = reference_norm(x_before, w[:h], b[:h], 1e-6)
    ops.fused_norm_out(x, w[:h], b[:h], 1e-6, out)
    assert torch.equal(x, x_before)
    torch.testing.assert_close(out.double(), expected, **TOLERANCES[torch.float32].as_kwargs())


@pytest.mark.parametrize("eps", [0.0, 1e-12, 1e-5, 0.5])
def test_eps_enters_the_formula(eps, generator, device):
    # Small-magnitude rows make eps matter: mean(x^2) ~ 1e-4.
    x, w, b = make_inputs((4, 64), torch.float64, generator, device=device)
    x = x * 1e-2 / x.abs().max()
    torch.testing.assert_close(ops.fused_norm(x, w, b, eps), reference_norm(x, w, b, eps), **REFERENCE.fp64.as_kwargs())


def test_many_rows_split_across_threads_match_single_thread(generator):
    # 4096 rows x 256 = 1M elements: at::parallel_for splits this into many
    # tasks. The per-row arithmetic is identical, so results must be bitwise
    # equal to a single-threaded run.
    x, w, b = make_inputs((4096, 256), torch.float32, generator)
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(max(2, threads))
        multi = ops.fused_norm(x, w, b, 1e-6)
        torch.set_num_threads(1)
        single = ops.fused_norm(x, w, b, 1e-6)
    finally:
        torch.set_num_threads(threads)
    assert torch.equal(multi, single)
    torch.testing.assert_close(multi.double(), reference_norm(x, w, b, 1e-6), **TOLERANCES[torch.float32].as_kwargs())


@pytest.mark.parametrize("dtype", TORCH_DTYPES, ids=str)
def test_non_contiguous_inputs_equal_contiguous_copy(dtype, generator, device):
    x, w, b = make_inputs((6, 130, 2), dtype, generator, device=device)
    x_t = x.transpose(1, 2)  # [6, 2, 130], last dim stride 2
    assert not x_t.is_contiguous()
    w_big, b_big = make_inputs((1, 260), dtype, generator, device=device)[1:]
    w_s, b_s = w_big[::2], b_big[1::2]  # strided parameters
    expected = ops.fused_norm(x_t.contiguous(), w_s.contiguous(), b_s.contiguous(), 1e-6)
    assert torch.equal(ops.fused_norm(x_t, w_s, b_s, 1e-6), expected)


@pytest.mark.parametrize("shape", [(0, 512), (2, 0, 64), (4, 0)])
def test_empty_inputs(shape, generator, device):
    x = torch.empty(shape, device=device)
    w, b = make_inputs((1, shape[-1]), torch.float32, generator, device=device)[1:]
    y = ops.fused_norm(x, w, b, 1e-6)
    assert y.shape == x.shape and y.dtype == x.dtype


@pytest.mark.parametrize("dtype", TORCH_DTYPES, ids=str)
@pytest.mark.parametrize("poison", [float("nan"), float("inf")])
def test_non_finite_value_stays_in_its_row(dtype, poison, generator, device):
    x, w, b = make_inputs((5, 33), dtype, generator, device=device)
    x[2, 7] = poison
    y = ops.fused_norm(x, w, b, 1e-6)
    # The poisoned row follows IEEE rules exactly like the reference: a NaN
    # makes mean(x^2) NaN, so the whole row is NaN; an inf makes the scale
    # rsqrt(inf) = 0, so that element is inf * 0 = NaN and the rest equal bias.
    torch.testing.assert_close(
        y[2].double(), reference_norm(x[2], w, b, 1e-6), equal_nan=True, **TOLERANCES[dtype].as_kwargs()
    )
    assert y[2, 7].isnan()
    if poison != poison:  # NaN
        assert y[2].isnan().all()
    others = torch.cat([y[:2], y[3:]])
    assert torch.isfinite(others).all(), "a non-finite value leaked into other rows"
    ref = reference_norm(torch.cat([x[:2], x[3:]]), w, b, 1e-6)
    torch.testing.assert_close(others.double(), ref, **TOLERANCES[dtype].as_kwargs())


def test_one_dimensional_x(generator, device):
    x, w, b = make_inputs((257,), torch.float32, generator, device=device)
    torch.testing.assert_close(
        ops.fused_norm(x, w, b, 1e-6).double(), reference_norm(x, w, b, 1e-6), **REFERENCE.fp32.as_kwargs()
    )


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=str)
def test_sixteen_bit_round_trip_is_exact_for_every_bit_pattern(dtype, generator, device):
    # weight = 0 makes y = 0 + bias, computed in float: the kernel's 16-bit
    # load and store must reproduce every one of the 65536 bias bit patterns
    # (subnormals, infinities); NaNs must stay NaN.
    bits = torch.arange(-(2**15), 2**15, dtype=torch.int32).to(torch.int16)
    bias = bits.view(dtype).to(device)
    hidden = bias.numel()
    x = torch.randn(2, hidden, generator=generator).to(device=device, dtype=dtype)
    y = ops.fused_norm(x, torch.zeros(hidden, dtype=dtype, device=device), bias, 1e-6)
    nan, zero = bias.isnan(), bias == 0
    exact = ~nan & ~zero
    assert torch.equal(y[:, exact].view(torch.int16), bias[exact].view(torch.int16).expand(2, -1))
    assert y[:, nan].isnan().all()
    # (+-0 * w) + (-0) is +0 or -0 depending on x's sign, as IEEE says.
    assert (y[:, zero] == 0).all()


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=str)
def test_sixteen_bit_store_rounds_like_torch(dtype, generator, device):
    # Rows of +-2^m with a power-of-two width and eps = 0 make every step
    # exact: mean(x^2) = 2^2m, its root 2^m, so x_hat = +-1 exactly and
    # y = +-float(w) + float(b), rounded once to 16 bits at the store. That
    # must equal torch's own float -> 16-bit conversion (round to nearest
    # even) of the same float value, bit for bit, across many magnitudes.
    rows, hidden = 64, 4096
    exponents = torch.randint(-6, 7, (rows, 1), generator=generator).float()
    signs = torch.where(torch.rand(rows, hidden, generator=generator) < 0.5, -1.0, 1.0)
    x = (signs * torch.pow(2.0, exponents)).to(dtype)
    spread = torch.exp(torch.empty(hidden).uniform_(-9, 9, generator=generator))
    w = (torch.randn(hidden, generator=generator) * spread).to(dtype)
    b = (torch.randn(hidden, generator=generator) * spread.flip(0)).to(dtype)
    y = ops.fused_norm(x.to(device), w.to(device), b.to(device), 0.0).cpu()
    expected = (signs * w.float() + b.float()).to(dtype)
    assert torch.equal(y.view(torch.int16), expected.view(torch.int16))


@pytest.mark.parametrize("dtype", TORCH_DTYPES, ids=str)
def test_result_of_a_row_does_not_depend_on_its_position(dtype, generator, device):
    # CPU: 5 identical rows: rows 0-3 go through the 4-row blocked write, row 4
    # through the single-row tail. Without -ffp-contract=off the compiler
    # fuses a multiply-add in one loop and not the other, and a few percent of
    # rows differ by 1 ulp in float16; 200 row contents make that visible.
    # CUDA: a row is split among threads from x's first 16-byte boundary on
    # (a head, 16-byte vectors, a tail), so its reduction order follows its
    # 16-byte phase: rows at the same phase are bit-identical, and a row of a
    # length whose bytes are not a multiple of 16 takes a new phase each row,
    # repeating every `period` rows; at other phases it may differ in the last
    # bit (within the dtype's tolerance).
    esize = torch.empty((), dtype=dtype).element_size()
    for _ in range(200):
        hidden = int(torch.randint(1, 3000, (1,), generator=generator))
        x, w, b = make_inputs((1, hidden), dtype, generator, device=device)
        period = 4 if device == "cpu" else 16 // math.gcd(16, hidden * esize)
        y = ops.fused_norm(x.expand(period + 1, hidden).contiguous(), w, b, 1e-6)
        assert torch.equal(y[period], y[0]), f"hidden {hidden}: row {period} differs from row 0"
        torch.testing.assert_close(y, y[0].expand_as(y), **TOLERANCES[dtype].as_kwargs())
