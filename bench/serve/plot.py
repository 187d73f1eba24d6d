"""A serving report's plot: the report's serving panel (bench/report/plot.py) and the sweep's knee."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from bench.report.plot import serve_panel
from bench.serve.configs import SWEEP_ROUTE


def knee_panel(ax, rows: pd.DataFrame) -> None:
    """Sweep throughput against sessions x threads, one line per client count; the core count marked."""
    sweep = rows[(rows.baseline == "ort") & rows.variant.str.startswith(f"{SWEEP_ROUTE}-pooled-")].copy()
    sweep["busy"] = sweep.sessions * sweep.intra_op_threads
    for clients, group in sweep.groupby("clients"):
        best = group.groupby("busy").requests_per_s.max().sort_index()
        ax.plot(best.index, best.values, marker="o", label=f"{clients} clients (best split per product)")
    if len(sweep):
        ax.axvline(int(sweep.physical_cores.iloc[0]), color="black", linestyle=":", label="physical cores")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("sessions x intra-op threads")
    ax.set_ylabel("requests/s")
    ax.set_title("sweep: where oversubscription starts")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7)


def write_serve_plot(frame: pd.DataFrame, path: Path) -> Path:
    """A serving report's PNG: the configurations' throughput and latency, and the sweep's knee."""
    import matplotlib

    matplotlib.use("Agg")  # files only; never needs a display
    import matplotlib.pyplot as plt

    from env.files import atomic_path

    rows = frame[frame.workload == "serve"]
    fig, axes = plt.subplots(1, 2, figsize=(14, 6), constrained_layout=True)
    serve_panel(axes[0], rows)
    knee_panel(axes[1], rows)
    fig.suptitle(f"fusedbench serving {frame.timestamp_utc.iloc[0]} - {frame.cpu_model.iloc[0]}", fontsize=10)
    with atomic_path(path) as tmp:
        fig.savefig(tmp, format="png", dpi=110)
    plt.close(fig)
    return path
