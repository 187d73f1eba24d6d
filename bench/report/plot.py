"""The report's PNG: per device, latency and achieved bandwidth vs input size per baseline (log axes), and the model."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only; never needs a display

import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402

from bench.plan.grid import shape_elements  # noqa: E402
from bench.report.targets import at_layout, op_layouts  # noqa: E402
from env.files import atomic_path  # noqa: E402
from ops.dtypes import DTYPES  # noqa: E402


def _size_bytes(frame: pd.DataFrame) -> pd.Series:
    # Bytes of x: copy limit rows move 2x, norm rows 2x + 2*hidden; x alone is the common axis.
    elements = frame["shape"].map(shape_elements)
    itemsize = frame["dtype"].map({d.name: d.itemsize for d in DTYPES})
    return elements * itemsize


# One colour per implementation (ORT routes in blues), one line style per calling convention.
_COLORS = {
    "copy": "black",
    "unfused": "tab:red",
    "native": "tab:orange",
    "compiled": "tab:purple",
    "fused": "tab:green",
    "fused_add": "tab:olive",
    "ort standard": "#08519c",
    "ort opset23": "#4292c6",
    "ort custom": "#9ecae1",
    "liger": "tab:brown",
}
_DASHED_VARIANTS = ("out", "iobinding", "graph")


def _style(baseline: str, variant: str) -> dict:
    if baseline == "copy":  # dotted: into a preallocated buffer; dash-dot: into a fresh output
        return {"color": "black", "linestyle": ":" if variant == "into_preallocated" else "-.", "linewidth": 2}
    route = variant.split("-")[0] if baseline == "ort" else ""
    color = _COLORS.get(f"{baseline} {route}".strip())
    dashed = any(variant.endswith(v) for v in _DASHED_VARIANTS)
    return {"color": color, "linestyle": "--" if dashed else "-", "marker": "s" if dashed else "o", "markersize": 4}


def _device_panels(axes, frame: pd.DataFrame, device: str) -> None:
    """One device's row of panels: latency and bandwidth against size, and the model-level bars; the op and copy
    rows at the headline's layout (the natural one where it was measured)."""
    frame = at_layout(frame, (op_layouts(frame) or [""])[0])
    op = frame[frame.workload.isin(["op", "limit"]) & ~frame.baseline.isin(["dispatch", "launch"])].copy()
    model = frame[frame.workload == "model"]
    serve = frame[frame.workload == "serve"]
    op["x_bytes"] = _size_bytes(op)
    latency, bandwidth = axes[0], axes[1]
    for (baseline, variant, dtype), rows in op.groupby(["baseline", "variant", "dtype"], sort=False):
        rows = rows.sort_values("x_bytes")
        label = f"{baseline}/{variant}" + ("" if dtype == "float32" else f" {dtype}")
        style = _style(baseline, variant)
        latency.plot(rows.x_bytes, rows.median_us, label=label, **style)
        bandwidth.plot(rows.x_bytes, rows.gbps, label=label, **style)
    for ax, ylabel, title in (
        (latency, "median per call (µs)", "latency vs size"),
        (bandwidth, "GB/s (read x, w, b + write y)", "achieved bandwidth vs size"),
    ):
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("bytes of x")
        ax.set_ylabel(ylabel)
        ax.set_title(f"{device}: {title}", fontsize=9)
        ax.grid(True, which="both", alpha=0.3)
    if len(op):  # a serving-only report has no op rows
        latency.legend(fontsize=7)
    else:
        latency.set_axis_off()
        bandwidth.set_axis_off()
    ax = axes[2]
    if len(model):
        labels = [f"{r.shape} {r.dtype} {r.baseline}/{r.variant}" for r in model.itertuples()]
        colors = [_style(r.baseline, r.variant)["color"] or "gray" for r in model.itertuples()]
        ax.barh(range(len(model)), model.median_us, xerr=model.iqr_us / 2, color=colors)
        ax.set_yticks(range(len(model)), labels, fontsize=7)
        ax.set_xscale("log")
        ax.set_xlabel("median per forward (µs); bars: IQR")
        ax.set_title(f"{device}: model level", fontsize=9)
        ax.invert_yaxis()
    else:
        ax.set_axis_off()
    if len(serve):
        serve_panel(axes[3], serve)
    else:
        axes[3].set_axis_off()


def serve_panel(ax, rows: pd.DataFrame) -> None:
    """Horizontal bars of req/s per configuration; P50/P99 (ms) as text on each bar."""
    labels = [f"{r.baseline}/{r.variant}" for r in rows.itertuples()]
    over = rows.sessions * rows.intra_op_threads > rows.physical_cores
    colors = [
        "tab:gray" if o else ("tab:green" if b == "fused" else "#2171b5")
        for o, b in zip(over, rows.baseline, strict=True)
    ]
    ax.barh(range(len(rows)), rows.requests_per_s, color=colors)
    for i, r in enumerate(rows.itertuples()):
        ax.text(
            r.requests_per_s, i, f" P50 {r.median_us / 1e3:.2f} / P99 {r.p99_us / 1e3:.2f} ms", va="center", fontsize=6
        )
    ax.set_yticks(range(len(rows)), labels, fontsize=6)
    ax.set_xlabel("requests/s (grey: sessions x threads > physical cores)")
    ax.set_title("serving")
    ax.invert_yaxis()


def write_plot(frame: pd.DataFrame, path: Path) -> Path:
    """One row of panels per device (cpu, then each GPU), in the order the run measured them."""
    devices = list(dict.fromkeys(frame.device))
    fig, axes = plt.subplots(len(devices), 4, figsize=(24, 5 * len(devices)), constrained_layout=True, squeeze=False)
    for row, device in zip(axes, devices, strict=True):
        _device_panels(row, frame[frame.device == device], device)
    threads = frame.threads.iloc[0] if len(frame) else "?"
    fig.suptitle(
        f"fusedbench {frame.timestamp_utc.iloc[0]} - {frame.cpu_model.iloc[0]}, {threads} threads", fontsize=10
    )
    with atomic_path(path) as tmp:
        fig.savefig(tmp, format="png", dpi=110)
    plt.close(fig)
    return path
