"""A small pre-norm transformer encoder whose norms are pluggable.

Export, alignment and the benchmarks all run this one model, so every route
and every implementation is compared on the same weights:

    x -> N x [ x + attn(norm1(x)); x + ffn(norm2(x)) ] -> final norm

Input and output are ``[batch, seq, d_model]``. The attention is written with
plain matmul/softmax (no mask): it exports to a handful of standard ONNX ops
with dynamic batch and sequence dims, which every ONNX runtime (and
``onnx.reference``) can run; nothing in it depends on a fixed size.

Weights come from a seeded generator (``init_weights``), never from torch's
global RNG, so ``build_model(impl, seed=s)`` is the same model for every
``impl``; ``with_norm_impl`` copies a model's weights into another impl.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import torch
from torch import Tensor, nn

from ops.norms import Norm
from ops.reference import EPS, activations


@dataclass(frozen=True)
class ModelConfig:
    d_model: int = 128
    heads: int = 4
    layers: int = 2
    ffn_mult: int = 4
    eps: float = EPS

    def __post_init__(self) -> None:
        for name in ("d_model", "heads", "layers", "ffn_mult"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a positive integer, got {value!r}")
        if self.d_model % self.heads:
            raise ValueError(f"d_model ({self.d_model}) must be divisible by heads ({self.heads})")
        if not self.eps >= 0.0 or math.isinf(self.eps):
            raise ValueError(f"eps must be a finite number >= 0, got {self.eps!r}")

    @property
    def norm_count(self) -> int:
        """Norms in the model: two per block plus the final one."""
        return 2 * self.layers + 1


class SelfAttention(nn.Module):
    """Multi-head self-attention, unmasked, written with matmul and softmax."""

    def __init__(self, d_model: int, heads: int):
        super().__init__()
        self.heads = heads
        self.head_dim = d_model // heads
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.out = nn.Linear(d_model, d_model)

    def forward(self, x: Tensor) -> Tensor:
        # Sizes read from x (symbolic under export) and one reshape + permute
        # for q, k, v together: both exporters turn this into Shape/Gather/
        # Concat/Reshape that shape inference follows. (chunk + unflatten
        # leave the TorchScript exporter's unfolded Mod-of-constants behind,
        # and shape inference loses the output shape.)
        batch, seq, d_model = x.shape
        qkv = self.qkv(x).reshape(batch, seq, 3, self.heads, self.head_dim).permute(2, 0, 3, 1, 4)
        q, k, v = qkv[0], qkv[1], qkv[2]  # each [b, h, s, hd]
        scores = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(self.head_dim))
        mixed = torch.softmax(scores, dim=-1) @ v
        return self.out(mixed.transpose(1, 2).reshape(batch, seq, d_model))


class FeedForward(nn.Module):
    def __init__(self, d_model: int, hidden: int):
        super().__init__()
        self.up = nn.Linear(d_model, hidden)
        self.act = nn.GELU()
        self.down = nn.Linear(hidden, d_model)

    def forward(self, x: Tensor) -> Tensor:
        return self.down(self.act(self.up(x)))


class Block(nn.Module):
    """Pre-norm residual block: attention then feed-forward."""

    def __init__(self, config: ModelConfig, impl: str):
        super().__init__()
        self.norm1 = Norm(config.d_model, impl, config.eps)
        self.attn = SelfAttention(config.d_model, config.heads)
        self.norm2 = Norm(config.d_model, impl, config.eps)
        self.ffn = FeedForward(config.d_model, config.ffn_mult * config.d_model)

    def forward(self, x: Tensor) -> Tensor:
        x = x + self.attn(self.norm1(x))
        return x + self.ffn(self.norm2(x))


class SequenceModel(nn.Module):
    def __init__(self, config: ModelConfig, impl: str):
        super().__init__()
        self.config = config
        self.impl = impl
        self.blocks = nn.ModuleList(Block(config, impl) for _ in range(config.layers))
        self.final_norm = Norm(config.d_model, impl, config.eps)

    def forward(self, x: Tensor) -> Tensor:
        if not torch.jit.is_tracing():  # a Python check would be baked into a TorchScript trace
            torch._check(
                x.dim() == 3 and x.shape[-1] == self.config.d_model,
                lambda: f"x must have shape [batch, seq, {self.config.d_model}], got {list(x.shape)}",
            )
        if self.impl == "fused_add":
            return self._forward_residual_stream(x)
        for block in self.blocks:
            x = block(x)
        return self.final_norm(x)

    def _forward_residual_stream(self, x: Tensor) -> Tensor:
        """The same math with each residual add folded into the norm that reads its sum.

        Every norm but the first reads ``residual + delta``, where delta is an
        attention or feed-forward output; called with the residual, the norm
        returns its output and the sum, which carries on as the residual
        stream. The adds are those of ``Block.forward`` (one IEEE addition of
        the same two values each, and addition commutes), so the result equals
        the ``fused`` model's bit for bit.
        """
        blocks = list(self.blocks)
        h, residual = blocks[0].norm1(x), x
        for i, block in enumerate(blocks):
            h, residual = block.norm2(block.attn(h), residual)
            following = blocks[i + 1].norm1 if i + 1 < len(blocks) else self.final_norm
            h, residual = following(block.ffn(h), residual)
        return h

    def norms(self) -> list[Norm]:
        """The norms in execution order (block 0 norm1, norm2, block 1 ..., final)."""
        return [m for m in self.modules() if isinstance(m, Norm)]

    def extra_repr(self) -> str:
        return f"impl={self.impl!r}, {asdict(self.config)}"


_NORM_WEIGHT = (1.0, 0.1)  # (mean, std): near 1, as after training, but not exactly
_NORM_BIAS = (0.0, 0.05)  # small but non-zero, so a dropped bias shows


def _normal(shape: torch.Size, mean: float, std: float, g: torch.Generator) -> Tensor:
    return torch.randn(shape, generator=g, dtype=torch.float64).mul_(std).add_(mean)


@torch.no_grad()
def init_weights(model: SequenceModel, seed: int) -> None:
    """Deterministic weights at a realistic scale, from ``seed`` alone.

    Linear weights ~ N(0, 1/fan_in) keep activations O(1) through the blocks
    (the scale a trained model has); biases are small but non-zero so a
    dropped bias shows in the outputs. Norm weights sit near 1 and norm
    biases near 0, as after training, but not exactly, so that a swapped
    weight/bias or a missing scale changes the result.
    """
    g = torch.Generator().manual_seed(seed)
    for name, param in model.named_parameters():
        if ".norm" in name or name.startswith("final_norm"):
            mean, std = _NORM_WEIGHT if name.endswith("weight") else _NORM_BIAS
        elif name.endswith("weight"):
            mean, std = 0.0, 1.0 / math.sqrt(param.shape[1])
        else:
            mean, std = 0.0, 0.02
        param.copy_(_normal(param.shape, mean, std, g))


@torch.no_grad()
def build_norm(
    hidden: int, impl: str = "fused", eps: float = EPS, seed: int = 0, dtype: torch.dtype = torch.float32
) -> Norm:
    """One ``Norm`` with trained-looking weight and bias (same scale as the model's norms), in eval mode."""
    norm = Norm(hidden, impl, eps)
    g = torch.Generator().manual_seed(seed)
    norm.weight.copy_(_normal(norm.weight.shape, *_NORM_WEIGHT, g))
    norm.bias.copy_(_normal(norm.bias.shape, *_NORM_BIAS, g))
    return norm.to(dtype).eval()


def build_model(
    impl: str = "fused", config: ModelConfig | None = None, seed: int = 0, dtype: torch.dtype = torch.float32
) -> SequenceModel:
    """The model of ``config`` (default: :class:`ModelConfig`'s sizes) with its norms computed by ``impl``
    ("unfused" | "native" | "fused" | "fused_add": the fused op, with the residual adds folded into it), in eval
    mode."""
    model = SequenceModel(config or ModelConfig(), impl)
    init_weights(model, seed)
    return model.to(dtype).eval()


def with_norm_impl(model: SequenceModel, impl: str) -> SequenceModel:
    """A copy of ``model`` (same weights, dtype and mode) whose norms use ``impl``."""
    param = next(model.parameters())
    copy = SequenceModel(model.config, impl).to(dtype=param.dtype, device=param.device)
    copy.load_state_dict(model.state_dict())
    return copy.train(model.training)


def example_input(
    batch: int, seq: int, d_model: int, generator: torch.Generator | None = None, dtype: torch.dtype = torch.float32
) -> Tensor:
    """Activations as a norm in a trained model sees them: the residual stream of ops/reference.py
    (per-feature offset and scale, about 1 feature in 64 scaled x20)."""
    return activations((batch, seq, d_model), dtype, generator, distribution="features")
