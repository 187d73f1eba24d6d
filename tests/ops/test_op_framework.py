"""What the framework needs from the op: schema, fake kernels, autograd, compile."""

from __future__ import annotations

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode

import ops
from ops.dtypes import TORCH_DTYPES
from ops.norms import unfused_norm
from ops.reference import REFERENCE, make_inputs

OPCHECK_SHAPES = [(8, 64), (2, 3, 127), (1, 1), (5, 4097)]


def test_schema_is_exactly_as_specified():
    schema = str(torch.ops.myops.fused_norm.default._schema)
    assert schema == "myops::fused_norm(Tensor x, Tensor weight, Tensor bias, float eps) -> Tensor"
    out_schema = str(torch.ops.myops.fused_norm_out.default._schema)
    assert out_schema == "myops::fused_norm_out(Tensor x, Tensor weight, Tensor bias, float eps, Tensor(a!) out) -> ()"


@pytest.mark.parametrize("dtype", TORCH_DTYPES, ids=str)
@pytest.mark.parametrize("shape", OPCHECK_SHAPES, ids=str)
@pytest.mark.parametrize("requires_grad", [False, True])
def test_opcheck(shape, dtype, requires_grad, generator, device):
    # opcheck runs the schema, fake-tensor, autograd-registration and
    # aot_dispatch (torch.compile) checks against the real kernel.
    x, w, b = make_inputs(shape, dtype, generator, device=device, requires_grad=requires_grad)
    torch.library.opcheck(torch.ops.myops.fused_norm.default, (x, w, b, 1e-6))


@pytest.mark.parametrize("dtype", TORCH_DTYPES, ids=str)
def test_opcheck_out_variant(dtype, generator, device):
    x, w, b = make_inputs((6, 100), dtype, generator, device=device)
    out = torch.empty_like(x)
    torch.library.opcheck(torch.ops.myops.fused_norm_out.default, (x, w, b, 1e-5, out))


def test_gradcheck_float64(generator, device):
    x, w, b = make_inputs((3, 4, 9), torch.float64, generator, device=device, requires_grad=True)
    assert torch.autograd.gradcheck(lambda x, w, b: ops.fused_norm(x, w, b, 1e-5), (x, w, b))


def test_gradgradcheck_float64(generator, device):
    x, w, b = make_inputs((2, 7), torch.float64, generator, device=device, requires_grad=True)
    assert torch.autograd.gradgradcheck(lambda x, w, b: ops.fused_norm(x, w, b, 1e-5), (x, w, b))


@pytest.mark.parametrize("which", ["x", "weight", "bias"])
def test_gradient_of_one_input_only(which, generator, device):
    # needs_input_grad paths: only the requested gradient is computed.
    x, w, b = make_inputs((4, 33), torch.float64, generator, device=device)
    inputs = {"x": x, "weight": w, "bias": b}
    inputs[which].requires_grad_(True)
    g = torch.randn(4, 33, dtype=torch.float64, generator=generator).to(device)
    (grad,) = torch.autograd.grad(ops.fused_norm(inputs["x"], inputs["weight"], inputs["bias"], 1e-6), inputs[which], g)
    ref_inputs = {k: v.detach().clone().requires_grad_(k == which) for k, v in inputs.items()}
    (ref,) = torch.autograd.grad(
        unfused_norm(ref_inputs["x"], ref_inputs["weight"], ref_inputs["bias"], 1e-6), ref_inputs[which], g
    )
    torch.testing.assert_close(grad, ref, **REFERENCE.fp64_grad.as_kwargs())


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16], ids=str)
def test_low_precision_gradients_match_float64(dtype, generator, device):
    x, w, b = make_inputs((16, 96), dtype, generator, device=device, requires_grad=True)
    g = torch.randn(16, 96, generator=generator).to(device=device, dtype=dtype)
    grads = torch.autograd.grad(ops.fused_norm(x, w, b, 1e-6), (x, w, b), g)
    refs = [t.detach().double().requires_grad_() for t in (x, w, b)]
    ref_grads = torch.autograd.grad(unfused_norm(*refs, 1e-6), refs, g.double())
    # Gradients are computed in float32 and rounded once to dtype; weight and
    # bias gradients sum over 16 rows, so allow a few ulps of the output type.
    rtol = {torch.float32: 1e-5, torch.bfloat16: 2e-2, torch.float16: 4e-3}[dtype]
    for got, ref in zip(grads, ref_grads, strict=True):
        assert got.dtype == dtype
        torch.testing.assert_close(got.double(), ref, rtol=rtol, atol=rtol)


def test_inference_call_builds_no_graph(generator, device):
    x, w, b = make_inputs((2, 8), torch.float32, generator, device=device)
    y = ops.fused_norm(x, w, b, 1e-6)
    assert y.grad_fn is None and not y.requires_grad
    w.requires_grad_(True)
    assert ops.fused_norm(x, w, b, 1e-6).grad_fn is not None


@pytest.mark.parametrize("shape", [(4, 16), (2, 3, 5), (7,)], ids=str)
def test_fake_tensor_shapes_equal_real(shape, generator, device):
    x, w, b = make_inputs(shape, torch.float32, generator, device=device)
    real = ops.fused_norm(x, w, b, 1e-6)
    with FakeTensorMode() as mode:
        fx, fw, fb = (mode.from_tensor(t) for t in (x, w, b))
        fake = torch.ops.myops.fused_norm.default(fx, fw, fb, 1e-6)
    assert fake.shape == real.shape and fake.dtype == real.dtype and fake.stride() == real.stride()
    meta = torch.ops.myops.fused_norm.default(x.to("meta"), w.to("meta"), b.to("meta"), 1e-6)
    assert meta.shape == real.shape and meta.device.type == "meta"


def test_fake_kernel_rejects_what_the_real_kernel_rejects():
    with FakeTensorMode():
        x, w = torch.empty(3, 8), torch.empty(7)
        with pytest.raises(ValueError, match="weight must be a 1-D tensor of length x.size\\(-1\\) = 8"):
            torch.ops.myops.fused_norm.default(x, w, torch.empty(8), 1e-6)


def test_torch_compile_with_dynamic_shapes(generator, device):
    def block(x, w, b):
        return torch.relu(ops.fused_norm(x, w, b, 1e-6)) * 2.0

    compiled = torch.compile(block, dynamic=True, fullgraph=True)
    for rows in (3, 17):
        x, w, b = make_inputs((rows, 48), torch.float32, generator, device=device)
        torch.testing.assert_close(compiled(x, w, b), block(x, w, b))


def test_torch_compile_out_variant(generator, device):
    def into(x, w, b, out):
        ops.fused_norm_out(x, w, b, 1e-6, out)
        return out + 1

    x, w, b = make_inputs((5, 40), torch.float32, generator, device=device)
    out = torch.full_like(x, float("nan"))
    result = torch.compile(into, fullgraph=True)(x, w, b, out)
    torch.testing.assert_close(result, ops.fused_norm(x, w, b, 1e-6) + 1)
    torch.testing.assert_close(out, ops.fused_norm(x, w, b, 1e-6))
