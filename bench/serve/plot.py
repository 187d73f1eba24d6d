"""The report's serving panel: throughput per configuration, with P50 and P99 latency beside it."""

from __future__ import annotations

import pandas as pd


def serve_panel(ax, rows: pd.DataFrame) -> None:
    """Horizontal bars of req/s per configuration; P50/P99 (ms) as text on each bar."""
    labels = [f"{r.baseline}/{r.variant}" for r in rows.itertuples()]
    over = rows.sessions * rows.intra_op_threads > rows.physical_cores
    colors = ["tab:gray" if o else ("tab:green" if b == "fused" else "#2171b5") for o, b in zip(over, rows.baseline)]
    ax.barh(range(len(rows)), rows.requests_per_s, color=colors)
    for i, r in enumerate(rows.itertuples()):
        ax.text(r.requests_per_s, i, f" P50 {r.median_us / 1e3:.2f} / P99 {r.p99_us / 1e3:.2f} ms", va="center", fontsize=6)
    ax.set_yticks(range(len(rows)), labels, fontsize=6)
    ax.set_xlabel("requests/s (grey: sessions x threads > physical cores)")
    ax.set_title("serving")
    ax.invert_yaxis()
