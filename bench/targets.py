"""Issue 4's performance targets, judged on one report (fp32 rows; ratios within the run)."""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

DISPATCH_BOUND = "1x8x512"
BANDWIDTH_SHAPES = ("8x128x1024", "32x512x4096")  # cache-resident and memory-bound
MODEL_MARGIN = 1.05  # "measurably faster": at least 5 % beyond equal medians


@dataclass(frozen=True)
class Target:
    name: str
    met: bool | None  # None: the rows it needs were not measured
    detail: str


def _median(frame: pd.DataFrame, workload: str, shape: str, baseline: str, variant: str) -> float | None:
    hit = frame[(frame.workload == workload) & (frame["shape"] == shape) & (frame.baseline == baseline) & (frame.variant == variant)]
    return float(hit.median_us.iloc[0]) if len(hit) else None


def _judge(name: str, checks: list[tuple[str, bool]]) -> Target:
    if not checks:
        return Target(name, None, "rows not in this report")
    return Target(name, all(ok for _, ok in checks), "; ".join(text for text, _ in checks))


def evaluate_targets(frame: pd.DataFrame) -> list[Target]:
    fp32 = frame[frame.dtype == "float32"]
    op_shapes = list(dict.fromkeys(fp32.loc[fp32.workload == "op", "shape"]))
    targets = []

    checks = []
    for shape in op_shapes:
        unfused, fused = _median(fp32, "op", shape, "unfused", "call"), _median(fp32, "op", shape, "fused", "call")
        if unfused and fused:
            need = 5.0 if shape == DISPATCH_BOUND else 3.0
            checks.append((f"{shape} {unfused / fused:.1f}x (need {need:g}x)", unfused / fused >= need))
    targets.append(_judge("fused vs unfused", checks))

    checks = []
    for shape in op_shapes:
        fused = _median(fp32, "op", shape, "fused", "call")
        for peer in ("compiled", "native"):
            other = _median(fp32, "op", shape, peer, "call")
            if fused and other:
                checks.append((f"{shape} {peer}/fused {other / fused:.2f}", fused < other))
    targets.append(_judge("fused faster than compiled and native", checks))

    checks = []
    for shape in BANDWIDTH_SHAPES:
        hit = fp32[(fp32.workload == "op") & (fp32["shape"] == shape) & (fp32.baseline == "fused") & (fp32.variant == "out")]
        if len(hit):
            share = float(hit.copy_share.iloc[0])
            checks.append((f"{shape} {100 * share:.0f}% of copy (need 80%)", share >= 0.8))
    targets.append(_judge("fused out variant vs copy bandwidth", checks))

    checks = []
    ort = fp32[fp32.baseline == "ort"]
    for (workload, shape), rows in ort.groupby(["workload", "shape"], sort=False):
        for mode in ("run", "iobinding"):
            standard = _median(rows, workload, shape, "ort", f"standard-{mode}")
            custom = _median(rows, workload, shape, "ort", f"custom-{mode}")
            if standard and custom:
                checks.append((f"{workload} {shape} {mode} custom/standard {custom / standard:.2f}", custom <= 1.10 * standard))
    targets.append(_judge("ORT custom library within 10% of ORT standard", checks))

    model = fp32[fp32.workload == "model"]
    checks = []
    if len(model):
        small = min(model["shape"].unique(), key=lambda s: shape_size(s))
        unfused, fused = _median(model, "model", small, "unfused", "call"), _median(model, "model", small, "fused", "call")
        if unfused and fused:
            checks.append((f"{small} unfused/fused {unfused / fused:.2f} (need >= {MODEL_MARGIN})", unfused / fused >= MODEL_MARGIN))
    targets.append(_judge("model: fused faster than unfused at the small batch", checks))
    return targets


def shape_size(shape: str) -> int:
    size = 1
    for dim in shape.split("x"):
        size *= int(dim)
    return size
