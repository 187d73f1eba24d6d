"""myops::fused_add_norm and fused_add_norm_inplace: values, framework integration and errors (CPU kernels).

The op's definition makes two exact checks possible besides the float64
reference: ``residual_out`` is ``x + residual`` as torch rounds it, and ``y``
is ``fused_norm`` of that sum, bit for bit (same reduction, same write).
"""

from __future__ import annotations

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode

import ops
from ops.dtypes import TORCH_DTYPES
from ops.norms import unfused_norm
from ops.reference import REFERENCE, TOLERANCES, make_inputs, reference_add_norm

# 1 and 3 (below any vector width), 127 (odd), 512 and 1024 (whole chunks of
# every width), 4097 (one past): the tail paths of both passes.
HIDDEN_SIZES = (1, 3, 127, 512, 1024, 4097)
EPS = 1e-6


def add_norm_inputs(shape, dtype, generator, requires_grad=False, device="cpu"):
    """x, residual, weight, bias: the residual stream carries a per-feature offset (it is no zero-mean noise).
    Drawn on the CPU, then moved to ``device``: the same seed gives the same values everywhere."""
    x, weight, bias = make_inputs(shape, dtype, generator, device=device, requires_grad=requires_grad)
    residual = make_inputs(shape, torch.float32, generator, distribution="features")[0].to(device, dtype)
    return x, residual.requires_grad_(requires_grad), weight, bias


def unfused_add_norm(x, residual, weight, bias, eps):
    s = x + residual
    return unfused_norm(s, weight, bias, eps), s


# --- values ---------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", TORCH_DTYPES, ids=str)
@pytest.mark.parametrize("hidden", HIDDEN_SIZES)
def test_matches_float64_reference_and_the_unfused_pair_exactly(dtype, hidden, generator):
    x, r, w, b = add_norm_inputs((3, 5, hidden), dtype, generator)
    y, s = ops.fused_add_norm(x, r, w, b, EPS)
    assert y.dtype == s.dtype == dtype and y.shape == s.shape == x.shape and y.is_contiguous() and s.is_contiguous()
    assert torch.equal(s, x + r), "residual_out differs from x + residual"
    assert torch.equal(y, ops.fused_norm(x + r, w, b, EPS)), "y differs from fused_norm(x + residual)"
    y_ref, s_ref = reference_add_norm(x, r, w, b, EPS)
    torch.testing.assert_close(s.double(), s_ref, **REFERENCE.exact.as_kwargs())
    torch.testing.assert_close(y.double(), y_ref, **TOLERANCES[dtype].as_kwargs())


@pytest.mark.parametrize("dtype", TORCH_DTYPES, ids=str)
@pytest.mark.parametrize("hidden", (3, 127, 4097))
def test_in_place_form_overwrites_both_inputs_with_the_functional_results(dtype, hidden, generator):
    x, r, w, b = add_norm_inputs((6, hidden), dtype, generator)
    y_expected, s_expected = ops.fused_add_norm(x, r, w, b, EPS)
    x_version, r_version = x._version, r._version
    returned = ops.fused_add_norm_inplace(x, r, w, b, EPS)
    assert returned[0] is x and returned[1] is r
    assert torch.equal(x, y_expected) and torch.equal(r, s_expected)
    assert x._version > x_version and r._version > r_version, "in-place op did not bump the version counters"


def test_in_place_form_writes_every_element(generator):
    # NaN-free inputs whose results are never NaN: any element left unwritten
    # keeps its input value, which differs from the result.
    x, r, w, b = add_norm_inputs((9, 257), torch.float32, generator)
    x_before, r_before = x.clone(), r.clone()
    ops.fused_add_norm_inplace(x, r, w, b, EPS)
    assert not (x == x_before).any() and not (r == r_before).any()


@pytest.mark.parametrize("dtype", TORCH_DTYPES, ids=str)
def test_non_contiguous_inputs_equal_contiguous_copies(dtype, generator):
    x, r, _, _ = add_norm_inputs((4, 130, 2), dtype, generator)
    _, _, w, b = add_norm_inputs((1, 130), dtype, generator)
    x_t, r_t = x.transpose(1, 2), r.transpose(1, 2)  # [4, 2, 130], the normalised dim strided
    assert not (x_t.is_contiguous() or r_t.is_contiguous())
    got = ops.fused_add_norm(x_t, r_t, w, b, EPS)
    expected = ops.fused_add_norm(x_t.contiguous(), r_t.contiguous(), w, b, EPS)
    assert all(torch.equal(g, e) for g, e in zip(got, expected, strict=True))


def test_many_rows_split_across_threads_match_single_thread(generator):
    x, r, w, b = add_norm_inputs((4096, 256), torch.float32, generator)
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(max(2, threads))
        multi = ops.fused_add_norm(x, r, w, b, EPS)
        torch.set_num_threads(1)
        single = ops.fused_add_norm(x, r, w, b, EPS)
    finally:
        torch.set_num_threads(threads)
    assert torch.equal(multi[0], single[0]) and torch.equal(multi[1], single[1])


@pytest.mark.parametrize("shape", [(0, 512), (2, 0, 64), (4, 0)])
def test_empty_inputs(shape, generator):
    x, r = torch.empty(shape), torch.empty(shape)
    w, b = make_inputs((1, shape[-1]), torch.float32, generator)[1:]
    y, s = ops.fused_add_norm(x, r, w, b, EPS)
    assert y.shape == s.shape == x.shape
    ops.fused_add_norm_inplace(x, r, w, b, EPS)


def test_non_finite_sum_stays_in_its_row(generator):
    x, r, w, b = add_norm_inputs((5, 33), torch.float32, generator)
    r[2, 7] = float("nan")
    y, s = ops.fused_add_norm(x, r, w, b, EPS)
    assert y[2].isnan().all() and s[2, 7].isnan()
    others = [i for i in range(5) if i != 2]
    assert torch.isfinite(y[others]).all() and torch.isfinite(s[others]).all()


# --- framework ------------------------------------------------------------------------------


def test_schemas_are_exactly_as_specified():
    assert str(torch.ops.myops.fused_add_norm.default._schema) == (
        "myops::fused_add_norm(Tensor x, Tensor residual, Tensor weight, Tensor bias, float eps) -> (Tensor, Tensor)"
    )
    assert str(torch.ops.myops.fused_add_norm_inplace.default._schema) == (
        "myops::fused_add_norm_inplace(Tensor(a!) x, Tensor(b!) residual, Tensor weight, Tensor bias, float eps) -> ()"
    )


@pytest.mark.parametrize("dtype", TORCH_DTYPES, ids=str)
@pytest.mark.parametrize("shape", [(8, 64), (2, 3, 127), (5, 4097)], ids=str)
@pytest.mark.parametrize("requires_grad", [False, True])
def test_opcheck(shape, dtype, requires_grad, generator, device):
    args = add_norm_inputs(shape, dtype, generator, requires_grad=requires_grad, device=device)
    torch.library.opcheck(torch.ops.myops.fused_add_norm.default, (*args, EPS))


@pytest.mark.parametrize("dtype", TORCH_DTYPES, ids=str)
def test_opcheck_in_place_form(dtype, generator, device):
    args = add_norm_inputs((6, 100), dtype, generator, device=device)
    torch.library.opcheck(torch.ops.myops.fused_add_norm_inplace.default, (*args, EPS))


def test_gradcheck_float64(generator, device):
    args = add_norm_inputs((3, 4, 9), torch.float64, generator, requires_grad=True, device=device)
    assert torch.autograd.gradcheck(lambda *a: ops.fused_add_norm(*a, 1e-5), args)


def test_gradgradcheck_float64(generator, device):
    args = add_norm_inputs((2, 7), torch.float64, generator, requires_grad=True, device=device)
    assert torch.autograd.gradgradcheck(lambda *a: ops.fused_add_norm(*a, 1e-5), args)


@pytest.mark.parametrize("output", ["y", "residual_out", "both"])
@pytest.mark.parametrize("which", ["x", "residual", "weight", "bias"])
def test_gradient_of_one_input_through_either_output(which, output, generator):
    # The residual output carries gradient too (the next block adds to it).
    names = ("x", "residual", "weight", "bias")
    inputs = dict(zip(names, add_norm_inputs((4, 33), torch.float64, generator), strict=True))
    g_y, g_s = (torch.randn(4, 33, dtype=torch.float64, generator=generator) for _ in range(2))

    def loss(fn, tensors):
        y, s = fn(*(tensors[n] for n in names), 1e-6)
        return {"y": (y * g_y).sum(), "residual_out": (s * g_s).sum(), "both": (y * g_y + s * g_s).sum()}[output]

    got_inputs = {n: t.clone().requires_grad_(n == which) for n, t in inputs.items()}
    ref_inputs = {n: t.clone().requires_grad_(n == which) for n, t in inputs.items()}
    (got,) = torch.autograd.grad(loss(ops.fused_add_norm, got_inputs), got_inputs[which], allow_unused=True)
    ref_loss = loss(unfused_add_norm, ref_inputs)
    if not ref_loss.requires_grad:  # weight and bias do not reach the residual output
        assert got is None or torch.count_nonzero(got) == 0
        return
    (ref,) = torch.autograd.grad(ref_loss, ref_inputs[which])
    torch.testing.assert_close(got, ref, **REFERENCE.fp64_grad.as_kwargs())


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16], ids=str)
def test_low_precision_gradients_match_float64(dtype, generator):
    args = add_norm_inputs((16, 96), dtype, generator, requires_grad=True)
    g_y, g_s = (torch.randn(16, 96, generator=generator).to(dtype) for _ in range(2))
    y, s = ops.fused_add_norm(*args, 1e-6)
    grads = torch.autograd.grad((y, s), args, (g_y, g_s))
    refs = [t.detach().double().requires_grad_() for t in args]
    x_ref, r_ref, w_ref, b_ref = refs
    # The op normalises the sum as it stores it, rounded to dtype (what torch's own add in dtype gives), and
    # passes gradients through that rounding unchanged. A reference that normalised the exact sum would
    # differ by the rounding (2**-9 of each element in bfloat16) times the sum over rows of |g * x_hat| in
    # the weight's gradient: an error of the reference, not of the op, so the reference rounds the sum too.
    exact = x_ref + r_ref
    s_ref = exact + (exact.to(dtype).double() - exact).detach()
    y_ref = unfused_norm(s_ref, w_ref, b_ref, 1e-6)
    ref_grads = torch.autograd.grad((y_ref, s_ref), refs, (g_y.double(), g_s.double()))
    # As fused_norm's: float32 math, one rounding to dtype, sums over 16 rows.
    rtol = {torch.float32: 1e-5, torch.bfloat16: 2e-2, torch.float16: 4e-3}[dtype]
    for got, ref in zip(grads, ref_grads, strict=True):
        assert got.dtype == dtype
        torch.testing.assert_close(got.double(), ref, rtol=rtol, atol=rtol)


def test_inference_call_builds_no_graph(generator):
    x, r, w, b = add_norm_inputs((2, 8), torch.float32, generator)
    y, s = ops.fused_add_norm(x, r, w, b, EPS)
    assert y.grad_fn is None and s.grad_fn is None
    r.requires_grad_(True)
    y, s = ops.fused_add_norm(x, r, w, b, EPS)
    assert y.grad_fn is not None and s.grad_fn is not None


@pytest.mark.parametrize("shape", [(4, 16), (2, 3, 5), (7,)], ids=str)
def test_fake_tensor_shapes_equal_real(shape, generator):
    args = add_norm_inputs(shape, torch.float32, generator)
    real = ops.fused_add_norm(*args, EPS)
    with FakeTensorMode() as mode:
        fake = torch.ops.myops.fused_add_norm.default(*(mode.from_tensor(t) for t in args), EPS)
    for f, r in zip(fake, real, strict=True):
        assert f.shape == r.shape and f.dtype == r.dtype and f.stride() == r.stride()


def test_fake_kernel_rejects_what_the_real_kernel_rejects():
    with FakeTensorMode():
        x, r, w = torch.empty(3, 8), torch.empty(3, 7), torch.empty(8)
        with pytest.raises(ValueError, match=r"residual must have the shape of x \[3, 8\], got \[3, 7\]"):
            torch.ops.myops.fused_add_norm.default(x, r, w, torch.empty(8), EPS)


# aot_eager traces with fake tensors (symbolic shapes) and functionalises, as inductor's front end does; inductor's
# own code generation (a C++ compile per graph) runs in the slow tier.
BACKENDS = ["aot_eager", pytest.param("inductor", marks=pytest.mark.slow)]


@pytest.mark.parametrize("backend", BACKENDS)
def test_torch_compile_with_dynamic_shapes(generator, backend):
    def block(x, r, w, b):
        y, s = ops.fused_add_norm(x, r, w, b, EPS)
        return torch.relu(y) * 2.0 + s

    compiled = torch.compile(block, dynamic=True, fullgraph=True, backend=backend)
    for rows in (3, 17):
        args = add_norm_inputs((rows, 48), torch.float32, generator)
        torch.testing.assert_close(compiled(*args), block(*args))


@pytest.mark.parametrize("backend", BACKENDS)
def test_torch_compile_functionalises_the_in_place_form(generator, backend):
    # The compiled graph must still leave x and residual overwritten, as eager does.
    def step(x, r, w, b):
        ops.fused_add_norm_inplace(x, r, w, b, EPS)
        return x * 2.0

    x, r, w, b = add_norm_inputs((5, 40), torch.float32, generator)
    y_expected, s_expected = ops.fused_add_norm(x, r, w, b, EPS)
    result = torch.compile(step, fullgraph=True, backend=backend)(x, r, w, b)
    torch.testing.assert_close(result, y_expected * 2.0)
    assert torch.equal(x, y_expected) and torch.equal(r, s_expected)


# --- errors ---------------------------------------------------------------------------------


@pytest.fixture
def good(generator):
    return add_norm_inputs((4, 16), torch.float32, generator)


@pytest.mark.parametrize("op", [ops.fused_add_norm, ops.fused_add_norm_inplace], ids=["functional", "inplace"])
def test_residual_shape_dtype_and_device(good, op):
    x, r, w, b = good
    with pytest.raises(ValueError, match=r"residual must have the shape of x \[4, 16\], got \[4, 15\]"):
        op(x, r[:, :15].contiguous(), w, b, EPS)
    with pytest.raises(TypeError, match=r"residual must have the dtype of x \(Float\), got Double"):
        op(x, r.double(), w, b, EPS)
    with pytest.raises(ValueError, match="weight must be a 1-D tensor of length x.size\\(-1\\) = 16"):
        op(x, r, w[:8], b, EPS)
    with pytest.raises(ValueError, match="eps must be a finite number >= 0"):
        op(x, r, w, b, -1.0)


def test_in_place_needs_contiguous_and_separate_tensors(good):
    x, r, w, b = good
    with pytest.raises(ValueError, match="residual must be contiguous"):
        ops.fused_add_norm_inplace(x, r.t().contiguous().t(), w, b, EPS)
    with pytest.raises(ValueError, match="x and residual must not share memory"):
        ops.fused_add_norm_inplace(x, x, w, b, EPS)
    flat = torch.cat([x.reshape(-1), w])
    with pytest.raises(ValueError, match="x must not share memory with weight or bias"):
        ops.fused_add_norm_inplace(flat[:64].view(4, 16), r, flat[48:64], b, EPS)


def test_in_place_refuses_tensors_that_require_grad(good):
    x, r, w, b = good
    w.requires_grad_(True)
    with pytest.raises(RuntimeError, match="fused_add_norm_inplace: has no backward"):
        ops.fused_add_norm_inplace(x, r, w, b, EPS)
    with torch.no_grad():
        ops.fused_add_norm_inplace(x, r, w, b, EPS)


def test_process_survives_and_next_call_works(good):
    x, r, w, b = good
    for _ in range(3):
        with pytest.raises(ValueError):
            ops.fused_add_norm(x, r, torch.ones(3), b, EPS)
    y, s = ops.fused_add_norm(x, r, w, b, EPS)
    assert torch.isfinite(y).all() and torch.isfinite(s).all()
