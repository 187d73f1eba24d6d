"""The residual add + norm on CUDA: every kernel variant of the add reached and
right, out of place and in place, the phase rules with residual and
residual_out, gradients against the CPU's, the caller's stream, and ONNX
Runtime's CUDA route against torch. opcheck, gradcheck and gradgradcheck of
both forms run on CUDA through the ``device`` fixture in
tests/ops/test_add_norm_op.py.

The CPU op's tests (tests/ops/test_add_norm_op.py) hold the exact identities
on the CPU; here the stored sum is checked bit for bit (one rounding of one
addition, the same on both devices) and y within the dtype's tolerance of the
float64 reference (nvcc fuses multiply-adds, so y may differ from the CPU's in
the last bits). All tests are marked ``gpu`` and skip, saying why, where torch
sees no CUDA device or the library was built without its CUDA kernels.
"""

from __future__ import annotations

import pytest
import torch

import ops
from ops.dtypes import TORCH_DTYPES, dtype_name
from ops.reference import REFERENCE, TOLERANCES, reference_add_norm
from tests.helpers.cuda_variants import build_probe, kernel_names, launched_kernels, read_variants
from tests.helpers.devices import cuda_skip_reason, run_bound_on_cuda, skip_without_ort_cuda
from tests.ops.test_add_norm_op import add_norm_inputs

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(cuda_skip_reason() is not None, reason=str(cuda_skip_reason()))]

DEVICE = "cuda"
ROWS = (3, 7)  # 21 rows: not a multiple of the 4 rows a warp-per-row block takes
EPS = 1e-6


def add_inputs(shape, dtype, generator, requires_grad=False):
    """x, residual, weight, bias on the device (tests/ops/test_add_norm_op.py's inputs)."""
    return add_norm_inputs(shape, dtype, generator, requires_grad=requires_grad, device=DEVICE)


def hidden_sizes(dtype: torch.dtype) -> list[int]:
    """Row lengths that reach every kernel family at the 16-byte width (in vectors: 1, 33, 65 for warp_rows' chunk
    variants, 129 and 4096 for block_rows, 4097 for the two-pass kernel), odd lengths with a head and a tail, and
    1, 33 and 65 vectors of each narrower width (8, 4 bytes, one element): the in-place calls below put residual at
    that phase, and only these lengths give warp_rows its 1, 2 and 4 chunks there."""
    esize = torch.empty((), dtype=dtype).element_size()
    w = 16 // esize
    sizes = [w * n for n in (1, 32, 33, 64, 65, 128, 129, 1000, 4096, 4097)] + [1023, 4097, 5001]
    for vec in sorted({bytes_ // esize for bytes_ in (8, 4) if bytes_ > esize} | {1}):
        sizes += [vec * n for n in (1, 33, 65) if vec * n not in sizes]
    return sizes


CASES = [(dtype, hidden) for dtype in TORCH_DTYPES for hidden in hidden_sizes(dtype)]
CASE_IDS = [f"{dtype_name(d)}-{h}" for d, h in CASES]


def at_phase(like: torch.Tensor, phase: int, fill: torch.Tensor | None = None) -> torch.Tensor:
    """A contiguous tensor shaped like ``like``, ``phase`` bytes past its 16-byte phase, NaN or ``fill``."""
    shift = phase // like.element_size()
    buffer = torch.full((like.numel() + shift,), float("nan"), dtype=like.dtype, device=like.device)
    out = buffer[shift:].view(like.shape)
    if fill is not None:
        out.copy_(fill)
    return out


def check(x, r, w, b, y, s) -> None:
    """y against the float64 reference within the dtype's tolerance, the sum bit for bit."""
    y_ref, _ = reference_add_norm(x, r, w, b, EPS)
    assert not y.isnan().any() and not s.isnan().any(), "elements never written"
    assert torch.equal(s, x + r), "residual_out differs from x + residual"
    torch.testing.assert_close(y.double().cpu(), y_ref.cpu(), **TOLERANCES[x.dtype].as_kwargs())


@pytest.mark.parametrize("dtype,hidden", CASES, ids=CASE_IDS)
def test_values_match_the_reference_out_of_place_and_in_place(dtype, hidden, generator):
    x, r, w, b = add_inputs((*ROWS, hidden), dtype, generator)
    y, s = ops.fused_add_norm(x, r, w, b, EPS)
    assert y.device == s.device == x.device and y.dtype == s.dtype == dtype and y.is_contiguous() and s.is_contiguous()
    check(x, r, w, b, y, s)
    # In place: y into x, the sum into residual; each element read by the thread that then writes it.
    xi, ri = x.clone(), r.clone()
    ops.fused_add_norm_inplace(xi, ri, w, b, EPS)
    check(x, r, w, b, xi, ri)


@pytest.mark.parametrize("dtype", TORCH_DTYPES, ids=str)
@pytest.mark.parametrize("stream", ["x", "residual"])
def test_x_or_residual_one_element_off_keeps_a_16_byte_body_in_place(dtype, stream, generator):
    # The in-place form with both x and residual (so y and residual_out) one element off a 16-byte boundary: same
    # phase for every stream, the 16-byte body with a head and a tail per row; one of them alone off: a narrower
    # vector. Either way every element right.
    x, r, w, b = add_inputs((*ROWS, 5001), dtype, generator)
    esize = x.element_size()
    for phases in ((esize, esize), (esize, 0) if stream == "x" else (0, esize)):
        xi, ri = at_phase(x, phases[0], x), at_phase(r, phases[1], r)
        ops.fused_add_norm_inplace(xi, ri, w, b, EPS)
        check(x, r, w, b, xi, ri)


@pytest.fixture(scope="module")
def variants(tmp_path_factory) -> dict:
    return read_variants(build_probe(tmp_path_factory.mktemp("probe")))


@pytest.mark.parametrize("dtype", TORCH_DTYPES, ids=str)
def test_every_add_variant_is_launched(dtype, variants, generator):
    # The profiler names each kernel launched: the lengths above at the 16-byte width, and in place with residual
    # 8 or 4 bytes or one element past x's phase (the narrower vectors every stream shares), reach every add_
    # variant; each result is checked too.
    from torch.profiler import ProfilerActivity, profile

    esize = torch.empty((), dtype=dtype).element_size()
    phases = sorted({p for p in (8, 4) if p > esize} | {esize})
    inputs = [add_inputs((*ROWS, h), dtype, generator) for h in hidden_sizes(dtype)]
    results = []
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for x, r, w, b in inputs:
            results.append(((x, r, w, b), ops.fused_add_norm(x, r, w, b, EPS)))
            for phase in phases:
                xi, ri = x.clone(), at_phase(r, phase, r)
                ops.fused_add_norm_inplace(xi, ri, w, b, EPS)
                results.append(((x, r, w, b), (xi, ri)))
        torch.cuda.synchronize()
    for (x, r, w, b), (y, s) in results:
        check(x, r, w, b, y, s)
    assert launched_kernels(prof, prefix="add_") == kernel_names(variants, dtype_name(dtype), prefix="add_")


# --- the framework on the device ----------------------------------------------------------


def test_gradients_match_the_cpu_op(generator):
    # The backward is built from ATen ops on the forward's outputs: on the device it must agree with the CPU's.
    cpu = [t.detach().cpu().requires_grad_() for t in add_inputs((4, 300), torch.float64, generator)]
    gpu = [t.detach().to(DEVICE).requires_grad_() for t in cpu]
    for args in (cpu, gpu):
        y, s = ops.fused_add_norm(*args, EPS)
        (y.sin().sum() + s.square().sum()).backward()
    for a, g in zip(cpu, gpu, strict=True):
        torch.testing.assert_close(g.grad.cpu(), a.grad, **REFERENCE.fp64_grad.as_kwargs())


@pytest.mark.parametrize("name", ["residual", "weight"])
def test_mismatched_devices(name, generator):
    x, r, w, b = add_inputs((4, 64), torch.float32, generator)
    args = {"residual": r, "weight": w}
    args[name] = args[name].cpu()
    with pytest.raises(RuntimeError, match=rf"{name} must be on the device of x \(cuda:0\), got cpu"):
        ops.fused_add_norm(x, args["residual"], args["weight"], b, EPS)


def test_runs_on_the_callers_current_stream(generator):
    # As the norm's test: behind a spin on a side stream, the op's outputs are still poisoned when the default
    # stream copies them.
    x, r, w, b = add_inputs((64, 4096), torch.float32, generator)
    xi, ri = x.clone(), r.clone()
    torch.cuda.synchronize()
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        torch.cuda._sleep(100_000_000)
        ops.fused_add_norm_inplace(xi, ri, w, b, EPS)
    snapshot = ri.clone()
    torch.cuda.current_stream().synchronize()
    unchanged = bool(torch.equal(snapshot, r))
    side.synchronize()
    assert unchanged, "the kernel did not wait for work queued on the current (side) stream"
    check(x, r, w, b, xi, ri)


# --- ONNX Runtime's CUDA route ----------------------------------------------------------


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16], ids=str)  # dtypes numpy names for the binding
@pytest.mark.parametrize("hidden", [512, 5001])
def test_ort_cuda_route_equals_torch(dtype, hidden, generator):
    skip_without_ort_cuda()
    from ops.ort.session import OrtConfig, create_session
    from tests.helpers.ort_test_models import single_add_norm_model

    x, r, w, b = add_inputs((*ROWS, hidden), dtype, generator)
    session = create_session(single_add_norm_model(dtype_name(dtype), epsilon=1e-5), OrtConfig(provider="cuda"))
    assert "CUDAExecutionProvider" in session.get_providers()
    # Same kernel, same inputs: ORT's outputs equal torch's bit for bit (epsilon as the float32 attribute).
    eps = float(torch.tensor(1e-5, dtype=torch.float32))
    y_expected, s_expected = ops.fused_add_norm(x, r, w, b, eps)
    y, s = torch.full_like(x, float("nan")), torch.full_like(x, float("nan"))
    run_bound_on_cuda(session, {"X": x, "residual": r, "weight": w, "bias": b}, {"Y": y, "S": s})
    assert torch.equal(y, y_expected) and torch.equal(s, s_expected)
