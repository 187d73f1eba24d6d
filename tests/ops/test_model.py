"""The sequence model: same weights whatever the norm impl, the impls agree, gradients flow."""

from __future__ import annotations

import pytest
import torch

import ops  # noqa: F401  (loads the op library)
from ops.model import ModelConfig, build_model, build_norm, example_input, with_norm_impl
from ops.norms import Norm
from ops.reference import REFERENCE

SMALL = ModelConfig(d_model=48, heads=3, layers=2)


def _reference(seed: int) -> torch.nn.Module:
    """The unfused composition in float64: the independent reference."""
    return build_model("unfused", seed=seed, dtype=torch.float64, config=SMALL)


def test_same_seed_same_weights_for_every_impl():
    models = {impl: build_model(impl, seed=3, config=SMALL) for impl in ("unfused", "native", "fused", "fused_add")}
    states = {impl: m.state_dict() for impl, m in models.items()}
    for impl in ("native", "fused", "fused_add"):
        assert states[impl].keys() == states["unfused"].keys()
        for name, value in states["unfused"].items():
            assert torch.equal(states[impl][name], value), f"{impl}: {name} differs"
    assert all(norm.impl == "fused" for norm in models["fused"].norms())
    assert len(models["fused"].norms()) == SMALL.norm_count == 5


def test_seed_changes_weights_and_scale_is_realistic():
    a, b = build_model("fused", seed=0, config=SMALL), build_model("fused", seed=1, config=SMALL)
    assert not torch.equal(a.blocks[0].attn.qkv.weight, b.blocks[0].attn.qkv.weight)
    norm_weights = torch.cat([n.weight for n in a.norms()])
    norm_biases = torch.cat([n.bias for n in a.norms()])
    assert abs(norm_weights.mean().item() - 1.0) < 0.05 and 0.05 < norm_weights.std().item() < 0.2
    assert norm_biases.abs().min().item() >= 0.0 and 0.01 < norm_biases.std().item() < 0.1
    assert (norm_biases != 0).all()
    for linear in (a.blocks[0].attn.qkv, a.blocks[1].ffn.down):
        fan_in = linear.weight.shape[1]
        assert linear.weight.std().item() == pytest.approx(fan_in**-0.5, rel=0.15)
        assert (linear.bias != 0).all()


@pytest.mark.parametrize("impl", ["unfused", "native", "fused", "fused_add"])
def test_impls_match_float64_reference(impl, generator):
    model = build_model(impl, seed=5, config=SMALL)
    reference = _reference(5)
    for batch, seq in ((1, 1), (2, 9), (3, 33)):
        x = example_input(batch, seq, SMALL.d_model, generator)
        with torch.no_grad():
            y = model(x)
            expected = reference(x.double())
        assert y.shape == x.shape and y.dtype == torch.float32
        # float32 through two blocks vs float64: a few float32 ulp per op.
        torch.testing.assert_close(y.double(), expected, **REFERENCE.fp32_model.as_kwargs())


def test_fused_float64_equals_unfused_float64(generator):
    fused = build_model("fused", seed=2, dtype=torch.float64, config=SMALL)
    x = example_input(2, 7, SMALL.d_model, generator, torch.float64)
    with torch.no_grad():
        torch.testing.assert_close(fused(x), _reference(2)(x), **REFERENCE.fp64.as_kwargs())


def test_with_norm_impl_copies_weights_mode_and_dtype():
    model = build_model("unfused", seed=4, dtype=torch.float64, config=SMALL).train()
    copy = with_norm_impl(model, "fused")
    assert copy.impl == "fused" and copy.training and next(copy.parameters()).dtype == torch.float64
    assert all(n.impl == "fused" for n in copy.norms())
    for (name, a), (_, b) in zip(model.named_parameters(), copy.named_parameters(), strict=True):
        assert torch.equal(a, b), name
        assert a.data_ptr() != b.data_ptr(), f"{name} is shared, not copied"


def test_fused_gradients_match_unfused(generator):
    """A backward pass through the fused op gives the unfused composition's gradients (float64)."""
    fused = build_model("fused", seed=6, dtype=torch.float64, config=SMALL).train()
    unfused = with_norm_impl(fused, "unfused")
    x = example_input(2, 5, SMALL.d_model, generator, torch.float64)
    grad_out = torch.randn(x.shape, generator=generator, dtype=torch.float64)
    grads = {}
    for name, model in (("fused", fused), ("unfused", unfused)):
        xi = x.clone().requires_grad_(True)
        (model(xi) * grad_out).sum().backward()
        grads[name] = {"x": xi.grad, **{n: p.grad for n, p in model.named_parameters()}}
    for key, expected in grads["unfused"].items():
        got = grads["fused"][key]
        assert got is not None and torch.isfinite(got).all(), key
        torch.testing.assert_close(
            got, expected, **REFERENCE.fp64_model.as_kwargs(), msg=lambda m, key=key: f"{key}: {m}"
        )
    # The norms' own parameters receive gradient (the op is not a dead end).
    assert all(n.weight.grad.abs().sum() > 0 and n.bias.grad.abs().sum() > 0 for n in fused.norms())


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_residual_adds_folded_into_the_norms_change_no_bit(dtype, generator):
    # fused_add_norm(x, r) is fused_norm(x + r) bit for bit, and the folded
    # model adds in Block.forward's order: the outputs must be identical.
    fused = build_model("fused", seed=7, config=SMALL, dtype=dtype)
    folded = with_norm_impl(fused, "fused_add")
    x = example_input(3, 11, SMALL.d_model, generator, dtype)
    with torch.no_grad():
        assert torch.equal(folded(x), fused(x))


def test_folded_residual_gradients_match_unfused(generator):
    folded = build_model("fused_add", seed=8, dtype=torch.float64, config=SMALL).train()
    unfused = with_norm_impl(folded, "unfused")
    x = example_input(2, 5, SMALL.d_model, generator, torch.float64)
    grad_out = torch.randn(x.shape, generator=generator, dtype=torch.float64)
    grads = {}
    for name, model in (("folded", folded), ("unfused", unfused)):
        xi = x.clone().requires_grad_(True)
        (model(xi) * grad_out).sum().backward()
        grads[name] = {"x": xi.grad, **{n: p.grad for n, p in model.named_parameters()}}
    for key, expected in grads["unfused"].items():
        torch.testing.assert_close(
            grads["folded"][key], expected, **REFERENCE.fp64_model.as_kwargs(), msg=lambda m, k=key: f"{k}: {m}"
        )


def test_build_norm_weights_and_dtype():
    norm = build_norm(77, "fused", eps=1e-5, seed=1, dtype=torch.float16)
    assert isinstance(norm, Norm) and norm.weight.dtype == torch.float16 and norm.eps == 1e-5
    assert torch.equal(norm.weight, build_norm(77, "fused", eps=1e-5, seed=1, dtype=torch.float16).weight)
    assert 0.9 < norm.weight.float().mean().item() < 1.1 and (norm.bias != 0).all()


def test_example_input_is_not_centred_nor_unit():
    x = example_input(64, 32, 256, torch.Generator().manual_seed(0))
    per_feature_mean = x.mean(dim=(0, 1))
    per_feature_std = x.std(dim=(0, 1))
    assert per_feature_mean.abs().max() > 0.5  # offsets
    assert per_feature_std.max() > 5 * per_feature_std.median()  # outlier features


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"d_model": 10, "heads": 3}, "divisible by heads"),
        ({"layers": 0}, "layers must be a positive integer"),
        ({"eps": -1.0}, "eps must be a finite number"),
    ],
)
def test_bad_config_is_rejected(kwargs, message):
    with pytest.raises(ValueError, match=message):
        build_model("fused", ModelConfig(**kwargs))


def test_bad_input_and_impl_are_rejected():
    model = build_model("fused", config=SMALL)
    with pytest.raises(RuntimeError, match=r"x must have shape \[batch, seq, 48\]"):
        model(torch.randn(2, 3, 47))
    with pytest.raises(ValueError, match="norm implementation must be one of"):
        build_model("fastest", config=SMALL)
