"""The float64 reference, made a chunk of rows at a time, against the norm's formula written out in float64."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import ops.reference as reference
from ops.reference import activations, make_inputs, reference_add_norm, reference_norm

EPS = 1e-6


def _formula(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, eps: float) -> torch.Tensor:
    """pow + mean + rsqrt over the whole tensor: another order of operations than the reference's."""
    x64 = x.double()
    return x64 / torch.sqrt(x64.pow(2).mean(-1, keepdim=True) + eps) * weight.double() + bias.double()


@pytest.fixture
def small_chunks(monkeypatch):
    # A few hundred elements a chunk, so that small tensors take the chunked path, with a last chunk cut short.
    monkeypatch.setattr(reference, "REFERENCE_CHUNK_ELEMENTS", 300)


@pytest.mark.parametrize(
    ("shape", "dtype"),
    [((3, 37, 64), torch.float32), ((5, 11, 96), torch.bfloat16), ((2, 700), torch.float16), ((9, 40), torch.float64)],
)
def test_chunked_norm_matches_the_formula(small_chunks, shape, dtype) -> None:
    x, weight, bias = make_inputs(shape, dtype, seed=3, distribution="features")
    got = reference_norm(x, weight, bias, EPS)
    assert got.dtype == torch.float64 and got.shape == x.shape
    assert bool(torch.isfinite(got).all())  # every element written (the output starts uninitialised)
    torch.testing.assert_close(got, _formula(x, weight, bias, EPS), rtol=1e-13, atol=1e-13)


def test_chunked_norm_of_a_strided_x(small_chunks) -> None:
    x, weight, bias = make_inputs((64, 48), torch.float32, seed=4, distribution="rows")
    strided = x.t().contiguous().t()  # the same values, column-major
    assert not strided.is_contiguous()
    torch.testing.assert_close(
        reference_norm(strided, weight, bias, EPS), _formula(x, weight, bias, EPS), rtol=1e-13, atol=1e-13
    )


def test_chunked_add_norm_stores_the_sum_rounded_once(small_chunks) -> None:
    x, weight, bias = make_inputs((4, 33, 80), torch.bfloat16, seed=5, distribution="features")
    residual = activations((4, 33, 80), torch.bfloat16, seed=6, distribution="features")
    y, s = reference_add_norm(x, residual, weight, bias, EPS)
    stored = (x.double() + residual.double()).to(torch.bfloat16)  # one rounding of the exact sum
    assert torch.equal(s, stored.double())
    torch.testing.assert_close(y, _formula(stored, weight, bias, EPS), rtol=1e-13, atol=1e-13)


def test_chunked_and_whole_paths_agree(monkeypatch) -> None:
    x, weight, bias = make_inputs((6, 50, 128), torch.float32, seed=7, distribution="features")
    residual = activations((6, 50, 128), torch.float32, seed=8, distribution="features")
    whole = reference_norm(x, weight, bias, EPS), *reference_add_norm(x, residual, weight, bias, EPS)
    monkeypatch.setattr(reference, "REFERENCE_CHUNK_ELEMENTS", 1000)
    chunked = reference_norm(x, weight, bias, EPS), *reference_add_norm(x, residual, weight, bias, EPS)
    for a, b in zip(whole, chunked, strict=True):
        assert torch.equal(a, b)  # each row is reduced alone either way: the same float64 operations


def test_arrays_in_array_out_and_full_shaped_weights(small_chunks) -> None:
    x, weight, bias = make_inputs((12, 64), torch.float32, seed=9)
    got = reference_norm(x.numpy(), weight.numpy(), bias.numpy(), EPS)
    assert isinstance(got, np.ndarray) and got.dtype == np.float64
    np.testing.assert_allclose(got, _formula(x, weight, bias, EPS).numpy(), rtol=1e-13, atol=1e-13)
    y, stored = reference_add_norm(x.numpy(), x.numpy(), weight.numpy(), bias.numpy(), EPS)  # arrays, as ORT's
    torch.testing.assert_close(y, _formula(stored, weight, bias, EPS), rtol=1e-13, atol=1e-13)
    assert torch.equal(stored, (2 * x).double())  # x + x is exact in float32
    full_weight = torch.rand(12, 64) + 0.5  # not [hidden]: made whole, not by rows
    torch.testing.assert_close(
        reference_norm(x, full_weight, bias, EPS), _formula(x, full_weight, bias, EPS), rtol=1e-13, atol=1e-13
    )
