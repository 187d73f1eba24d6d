"""What only the CUDA path has: every kernel variant reached and right (row
lengths chosen per variant, checked with the profiler), the alignment paths,
the caller's stream, device guards, and ONNX Runtime's CUDA route against torch.

The device-independent tests (values, opcheck, gradients, strides, empty and
non-finite inputs, compile) run on CUDA through the ``device`` fixture in
tests/ops/test_op_values.py and test_op_framework.py. All tests here are marked
``gpu`` and skip, saying why, where torch sees no CUDA device or the library was
built without its CUDA kernels.
"""

from __future__ import annotations

import ctypes
import math

import pytest
import torch

import ops
from ops.dtypes import TORCH_DTYPES, dtype_name
from ops.reference import TOLERANCES, make_inputs, reference_norm
from tests.helpers.cuda_variants import build_probe, kernel_names, launched_kernels, read_variants
from tests.helpers.devices import cuda_skip_reason, run_bound_on_cuda, skip_without_ort_cuda

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(cuda_skip_reason() is not None, reason=str(cuda_skip_reason()))]

DEVICE = "cuda"
ROWS = (3, 7)  # 21 rows: not a multiple of the 4 rows a warp-per-row block takes


def vector_width(dtype: torch.dtype) -> int:
    return 16 // torch.empty((), dtype=dtype).element_size()


def hidden_sizes(dtype: torch.dtype) -> list[int]:
    """Row lengths that reach every kernel variant (fused_norm_cuda_plan.h) at every vector width.

    16-byte path, in vectors of 16 / sizeof(T) elements: 1 and 32 (a warp,
    one vector per lane), 33 and 64 (two), 65 and 128 (four), 129 (a block of
    64 threads), 1000, 4096 (1024 threads x 4), 4097 (the two-pass kernel).
    Lengths that are not a multiple of the vector: the same thresholds counted
    in 8-byte, 4-byte and one-element units (odd counts), which take the
    16-byte body with a scalar head and tail per row. The narrower vectors are
    reached with `out` at another phase than x (test_every_variant_is_launched
    checks that every variant is)."""
    esize = torch.empty((), dtype=dtype).element_size()
    w = vector_width(dtype)
    sizes = [w * n for n in (1, 32, 33, 64, 65, 128, 129, 1000, 4096, 4097)]
    odd_counts = (1, 3, 31, 33, 63, 65, 127, 129, 1001, 4095, 4097, 5001)
    for vec in sorted({bytes_ // esize for bytes_ in (8, 4) if bytes_ > esize} | {1}):
        sizes += [vec * n for n in odd_counts]
    return sizes


CASES = [(dtype, hidden) for dtype in TORCH_DTYPES for hidden in hidden_sizes(dtype)]
CASE_IDS = [f"{dtype_name(d)}-{h}" for d, h in CASES]


def cuda_inputs(shape, dtype, generator, requires_grad=False):
    return make_inputs(shape, dtype, generator, device=DEVICE, requires_grad=requires_grad)


def misaligned_copy(t: torch.Tensor) -> torch.Tensor:
    """A contiguous copy of ``t`` whose data pointer is one element past a 16-byte boundary."""
    buffer = torch.empty(t.numel() + 1, dtype=t.dtype, device=t.device)
    view = buffer[1:].view(t.shape)
    view.copy_(t)
    assert view.is_contiguous() and view.data_ptr() % 16 != 0
    return view


def out_at_phase(x: torch.Tensor, phase: int) -> torch.Tensor:
    """A contiguous tensor shaped like ``x`` starting ``phase`` bytes past a 16-byte boundary."""
    shift = phase // x.element_size()
    buffer = torch.empty(x.numel() + shift, dtype=x.dtype, device=x.device)
    out = buffer[shift:].view(x.shape)
    assert (out.data_ptr() - x.data_ptr()) % 16 == phase
    return out


def nan_like(t: torch.Tensor) -> torch.Tensor:
    return torch.full_like(t, float("nan"), memory_format=torch.contiguous_format)


@pytest.mark.parametrize("dtype,hidden", CASES, ids=CASE_IDS)
def test_values_match_float64_reference(dtype, hidden, generator):
    x, w, b = cuda_inputs((*ROWS, hidden), dtype, generator)
    expected = reference_norm(x, w, b, 1e-6)

    y = ops.fused_norm(x, w, b, 1e-6)
    assert y.dtype == dtype and y.shape == x.shape and y.is_contiguous() and y.device == x.device
    torch.testing.assert_close(y.double(), expected, **TOLERANCES[dtype].as_kwargs())

    # Out variant into a NaN-poisoned buffer: every element must be written,
    # and by the same kernel (bitwise equal to the allocating call).
    out = nan_like(x)
    ops.fused_norm_out(x, w, b, 1e-6, out)
    assert not out.isnan().any(), f"{int(out.isnan().sum())} output elements never written"
    assert torch.equal(out, y)


@pytest.mark.parametrize("dtype", TORCH_DTYPES, ids=str)
@pytest.mark.parametrize("units", [32, 129, 4097], ids=lambda n: f"{n}vectors")
def test_misaligned_pointers_fall_back_correctly(dtype, units, generator):
    # x and out one element off alignment (the 16-byte body after a scalar head per row), and weight and bias
    # one element off x's phase (read element by element): every element written and right.
    hidden = vector_width(dtype) * units
    x, w, b = cuda_inputs((*ROWS, hidden), dtype, generator)
    x_off, out = misaligned_copy(x), misaligned_copy(nan_like(x))
    ops.fused_norm_out(x_off, w, b, 1e-6, out)
    assert not out.isnan().any()
    torch.testing.assert_close(out.double(), reference_norm(x, w, b, 1e-6), **TOLERANCES[dtype].as_kwargs())
    y = ops.fused_norm(x, misaligned_copy(w), misaligned_copy(b), 1e-6)
    torch.testing.assert_close(y.double(), reference_norm(x, w, b, 1e-6), **TOLERANCES[dtype].as_kwargs())


@pytest.mark.parametrize("offset_bytes", [8, 4])
def test_out_with_a_storage_offset_keeps_a_vector_path(offset_bytes, generator):
    # bf16 out 8 or 4 bytes past a 16-byte boundary: 8- or 4-byte vectors.
    x, w, b = cuda_inputs((*ROWS, 4096), torch.bfloat16, generator)
    shift = offset_bytes // 2
    buffer = torch.full((x.numel() + shift,), float("nan"), dtype=torch.bfloat16, device=DEVICE)
    out = buffer[shift:].view(x.shape)
    assert out.data_ptr() % 16 == offset_bytes
    ops.fused_norm_out(x, w, b, 1e-6, out)
    assert not out.isnan().any()
    torch.testing.assert_close(out.double(), reference_norm(x, w, b, 1e-6), **TOLERANCES[torch.bfloat16].as_kwargs())


@pytest.mark.parametrize("dtype", TORCH_DTYPES, ids=str)
def test_out_variant_with_strided_inputs_on_cuda(dtype, generator):
    # Strided x, weight and bias (sharing no byte with out) give the result of
    # their contiguous copies; every element of out is written.
    x, w, b = cuda_inputs((6, 2 * 1000), dtype, generator)
    xs, ws, bs = x[:, ::2], w[::2], b[1::2]
    out = torch.full(xs.shape, float("nan"), dtype=dtype, device=DEVICE)
    ops.fused_norm_out(xs, ws, bs, 1e-5, out)
    assert not out.isnan().any()
    assert torch.equal(out, ops.fused_norm(xs.contiguous(), ws.contiguous(), bs.contiguous(), 1e-5))
    torch.testing.assert_close(out.double(), reference_norm(xs, ws, bs, 1e-5), **TOLERANCES[dtype].as_kwargs())


# rows x hidden past 2^31 elements, one shape per kernel (warp_rows,
# block_rows, streaming_rows): element offsets must be 64-bit everywhere.
HUGE_SHAPES = [((1 << 31) // 64 + 3, 64), ((1 << 31) // 8192 + 3, 8192), ((1 << 31) // 65536 + 3, 65536)]


@pytest.mark.parametrize("shape", HUGE_SHAPES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_more_than_2_to_the_31_elements(shape, generator):
    rows, hidden = shape
    assert rows * hidden > 2**31
    free, _ = torch.cuda.mem_get_info()
    if free < 4 * rows * hidden * 2 + (1 << 30):
        pytest.skip(f"needs {4 * rows * hidden * 2 >> 30} GiB free on the device, {free >> 30} GiB are")
    _, w, b = cuda_inputs((1, hidden), torch.bfloat16, generator)
    x = torch.randn(rows, hidden, device=DEVICE, dtype=torch.bfloat16)
    out = torch.full_like(x, float("nan"))
    ops.fused_norm_out(x, w, b, 1e-6, out)
    assert not out.isnan().any(), f"{int(out.isnan().sum())} output elements never written"
    # The rows on both sides of element 2^31 and the last ones, against float64.
    for first in (0, (1 << 31) // hidden - 1, rows - 3):
        sl = slice(first, first + 3)
        torch.testing.assert_close(
            out[sl].double(), reference_norm(x[sl], w, b, 1e-6), **TOLERANCES[torch.bfloat16].as_kwargs()
        )
    del x, out


def _loaded_cudart():
    """The libcudart this process (torch and the op library) uses, via ctypes; None if not found."""
    torch.cuda.init()
    with open("/proc/self/maps") as maps:
        paths = {line.split()[-1] for line in maps if "libcudart.so" in line}
    return ctypes.CDLL(sorted(paths)[0]) if len(paths) == 1 else None


def test_an_earlier_pending_error_is_not_reported_as_the_launch_failure(generator):
    cudart = _loaded_cudart()
    if cudart is None:
        pytest.skip("libcudart is not loaded exactly once in this process (linked statically?)")
    x, w, b = cuda_inputs((4, 512), torch.float32, generator)
    # An invalid device ordinal: a failed runtime call leaves its error pending.
    assert cudart.cudaSetDevice(ctypes.c_int(10_000)) != 0
    with pytest.raises(RuntimeError, match=r"not launched: an earlier CUDA error is pending .*cudaErrorInvalidDevice"):
        ops.fused_norm(x, w, b, 1e-6)
    # Reading it cleared it (it was not sticky): the next call runs.
    torch.testing.assert_close(
        ops.fused_norm(x, w, b, 1e-6).double(), reference_norm(x, w, b, 1e-6), **TOLERANCES[torch.float32].as_kwargs()
    )


@pytest.fixture(scope="module")
def variants(tmp_path_factory) -> dict:
    return read_variants(build_probe(tmp_path_factory.mktemp("probe")))


@pytest.mark.parametrize("dtype", TORCH_DTYPES, ids=str)
def test_every_variant_is_launched(dtype, variants, generator):
    # The profiler names each kernel launched: the value tests above must
    # reach every compiled variant, or some kernel goes untested.
    from torch.profiler import ProfilerActivity, profile

    inputs = [cuda_inputs((*ROWS, h), dtype, generator) for h in hidden_sizes(dtype)]
    # out at 8 or 4 bytes or one element past x's phase: the narrower vectors x and y share.
    esize = torch.empty((), dtype=dtype).element_size()
    phases = sorted({p for p in (8, 4) if p > esize} | {esize})
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for x, w, b in inputs:
            ops.fused_norm(x, w, b, 1e-6)
            for phase in phases:
                ops.fused_norm_out(x, w, b, 1e-6, out_at_phase(x, phase))
        torch.cuda.synchronize()
    assert launched_kernels(prof) == kernel_names(variants, dtype_name(dtype))


def test_runs_on_the_callers_current_stream(generator):
    # Queue a ~50 ms spin on a side stream, then the op on that stream. If
    # the op ignored the current stream it would run at once on the default
    # stream; on the side stream it waits behind the spin, so a copy made on
    # the default stream meanwhile still sees the NaN poison.
    x, w, b = cuda_inputs((64, 4096), torch.float32, generator)
    out = nan_like(x)
    torch.cuda.synchronize()
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        torch.cuda._sleep(100_000_000)  # cycles: 50 ms at 2 GHz
        ops.fused_norm_out(x, w, b, 1e-6, out)
    snapshot = out.clone()  # default stream: not ordered after `side`
    torch.cuda.current_stream().synchronize()
    still_poisoned = bool(snapshot.isnan().all())
    side.synchronize()
    assert still_poisoned, "the kernel did not wait for work queued on the current (side) stream"
    torch.testing.assert_close(out.double(), reference_norm(x, w, b, 1e-6), **TOLERANCES[torch.float32].as_kwargs())


@pytest.mark.parametrize("name", ["weight", "bias"])
def test_mismatched_devices(name, generator):
    x, w, b = cuda_inputs((4, 64), torch.float32, generator)
    args = {"weight": w, "bias": b}
    args[name] = args[name].cpu()
    with pytest.raises(RuntimeError, match=rf"{name} must be on the device of x \(cuda:0\), got cpu"):
        ops.fused_norm(x, args["weight"], args["bias"], 1e-6)
    # And the other way round: x on the CPU, one parameter on the GPU.
    with pytest.raises(RuntimeError, match=r"must be on the device of x \(cpu\), got cuda:0"):
        ops.fused_norm(x.cpu(), w if name == "weight" else w.cpu(), b if name == "bias" else b.cpu(), 1e-6)


def test_out_on_another_device(generator):
    x, w, b = cuda_inputs((4, 64), torch.float32, generator)
    with pytest.raises(RuntimeError, match=r"out must be on the device of x \(cuda:0\), got cpu"):
        ops.fused_norm_out(x, w, b, 1e-6, torch.empty(4, 64))


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two CUDA devices")
def test_second_device_runs_there(generator):
    x, w, b = (t.to("cuda:1") for t in cuda_inputs((16, 768), torch.float32, generator))
    y = ops.fused_norm(x, w, b, 1e-6)  # current device stays cuda:0
    assert y.device == torch.device("cuda:1")
    torch.testing.assert_close(y.double(), reference_norm(x, w, b, 1e-6), **TOLERANCES[torch.float32].as_kwargs())


# --- ONNX Runtime's CUDA route ----------------------------------------------------------


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16], ids=str)
@pytest.mark.parametrize("hidden", [512, 4097])
def test_ort_cuda_route_equals_torch(dtype, hidden, generator):
    skip_without_ort_cuda()
    import onnxruntime as ort

    from ops.ort.session import OrtConfig, create_session
    from tests.helpers.ort_test_models import single_node_model

    x, w, b = cuda_inputs((*ROWS, hidden), dtype, generator)
    model = single_node_model(dtype_name(dtype), epsilon=1e-5)
    session = create_session(model, OrtConfig(provider="cuda"))
    # Same kernel, same inputs: ORT's output must equal torch's bit for bit.
    # (epsilon is a float attribute in ONNX: pass torch the same float32 value.)
    eps = float(torch.tensor(1e-5, dtype=torch.float32))
    expected = ops.fused_norm(x, w, b, eps).cpu()
    out = nan_like(x)
    run_bound_on_cuda(session, {"X": x, "weight": w, "bias": b}, {"Y": out})
    assert torch.equal(out.cpu(), expected)
    assert math.isfinite(float(out.float().abs().max()))
    assert "CUDAExecutionProvider" in session.get_providers() and ort.get_device() == "GPU"
