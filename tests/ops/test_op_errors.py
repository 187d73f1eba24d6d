"""Bad input gets an error that names the argument and the expectation, on every device."""

from __future__ import annotations

import pytest
import torch

import ops
from ops.reference import make_inputs


@pytest.fixture
def good(generator, device):
    return make_inputs((4, 16), torch.float32, generator, device=device)


def test_integer_x(good, device):
    _, w, b = good
    with pytest.raises(TypeError, match="x must be float32, float64, float16 or bfloat16, got Int"):
        ops.fused_norm(torch.ones(4, 16, dtype=torch.int32, device=device), w.int(), b.int(), 1e-6)


def test_zero_dim_x(good, device):
    with pytest.raises(ValueError, match="x must have at least 1 dimension"):
        ops.fused_norm(
            torch.tensor(1.0, device=device), torch.ones(1, device=device), torch.zeros(1, device=device), 1e-6
        )


@pytest.mark.parametrize("name", ["weight", "bias"])
@pytest.mark.parametrize("bad_shape", [(15,), (17,), (1, 16), ()])
def test_parameter_length(good, name, bad_shape, device):
    x, w, b = good
    args = {"weight": w, "bias": b}
    args[name] = torch.ones(bad_shape, device=device)
    with pytest.raises(ValueError, match=rf"{name} must be a 1-D tensor of length x.size\(-1\) = 16, got shape"):
        ops.fused_norm(x, args["weight"], args["bias"], 1e-6)


@pytest.mark.parametrize("name", ["weight", "bias"])
def test_parameter_dtype(good, name):
    x, w, b = good
    args = {"weight": w, "bias": b}
    args[name] = args[name].double()
    with pytest.raises(TypeError, match=rf"{name} must have the dtype of x \(Float\), got Double"):
        ops.fused_norm(x, args["weight"], args["bias"], 1e-6)


@pytest.mark.parametrize("name", ["weight", "bias"])
def test_parameter_device(good, name):
    # The meta device is a second real device for the dispatcher, on any machine.
    x, w, b = good
    args = {"weight": w, "bias": b}
    args[name] = args[name].to("meta")
    with pytest.raises(RuntimeError, match=rf"{name} must be on the device of x \({x.device}\), got meta"):
        ops.fused_norm(x, args["weight"], args["bias"], 1e-6)


@pytest.mark.parametrize("eps", [-1e-6, float("nan"), float("inf")])
def test_eps(good, eps):
    with pytest.raises(ValueError, match="eps must be a finite number >= 0"):
        ops.fused_norm(*good, eps)


def test_out_wrong_shape(good, device):
    with pytest.raises(ValueError, match=r"out must have the shape of x \[4, 16\], got \[4, 15\]"):
        ops.fused_norm_out(*good, 1e-6, torch.empty(4, 15, device=device))


def test_out_wrong_dtype(good, device):
    with pytest.raises(TypeError, match=r"out must have the dtype of x \(Float\), got Half"):
        ops.fused_norm_out(*good, 1e-6, torch.empty(4, 16, dtype=torch.half, device=device))


def test_out_not_contiguous(good, device):
    with pytest.raises(ValueError, match="out must be contiguous"):
        ops.fused_norm_out(*good, 1e-6, torch.empty(16, 4, device=device).t())


def test_out_aliasing_x(good):
    x, w, b = good
    with pytest.raises(ValueError, match="out must not share memory with x, weight or bias"):
        ops.fused_norm_out(x, w, b, 1e-6, x)


def test_out_overlapping_one_element_of_a_strided_x(generator):
    # x's rows at [0, h) and [3h, 4h) of one buffer; out covers [h + 1, 3h + 1),
    # which holds x[1, 0] and nothing else of x.
    h = 16
    buffer = make_inputs((2, 3 * h), torch.float32, generator)[0]
    x = buffer[:, :h]
    out = buffer.view(-1)[h + 1 : 3 * h + 1].view(2, h)
    w, b = torch.ones(h), torch.zeros(h)
    with pytest.raises(ValueError, match="out must not share memory with x, weight or bias"):
        ops.fused_norm_out(x, w, b, 1e-6, out)


@pytest.mark.parametrize("name", ["weight", "bias"])
def test_out_overlapping_a_strided_parameter(good, name):
    # The parameter is every other element of out's own buffer.
    x, w, b = good
    buffer = torch.zeros(2 * x.numel(), device=x.device)
    out = buffer[: x.numel()].view(x.shape)
    args = {"weight": w, "bias": b}
    args[name] = buffer[: 2 * x.shape[-1] : 2]
    with pytest.raises(ValueError, match="out must not share memory with x, weight or bias"):
        ops.fused_norm_out(x, args["weight"], args["bias"], 1e-6, out)


def test_process_survives_and_next_call_works(good, device):
    for _ in range(3):
        with pytest.raises(ValueError):
            ops.fused_norm(good[0], torch.ones(3, device=device), good[2], 1e-6)
    y = ops.fused_norm(*good, 1e-6)
    assert torch.isfinite(y).all()
