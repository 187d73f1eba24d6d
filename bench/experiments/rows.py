"""The rows the slowdown experiments make slower and count: the fused op's own rows on the op workload."""

from __future__ import annotations

from collections.abc import Sequence

OP_WORKLOAD = "op"
OP_BASELINE = "fused"  # the rows that run torch.ops.myops.fused_norm(_out)


def is_op_row(key: Sequence[str]) -> bool:
    """A report row's key (KEY_COLUMNS' values) is one of the fused op's rows on the op workload."""
    return key[0] == OP_WORKLOAD and key[3] == OP_BASELINE
