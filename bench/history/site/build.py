"""``--site DIR``: the whole static site written into DIR, openable from disk and from any static host.

index.html (overview), machines.html, ab.html and ab/<run>.html (A/B runs),
rows/<row>.html (one row over the runs), reports/<id>.html (one report's
rows), and assets/: plotly.min.js copied from the plotly package (the site
fetches nothing from any network), app.js and style.css. Each row's data lives
in its own page, so the overview's size follows the grid and the machines,
not the number of reports.
"""

from __future__ import annotations

import math
import shutil
from collections.abc import Sequence
from pathlib import Path

import duckdb
import pandas as pd
import plotly

from bench.history.regressions import advisory_regressions, open_regressions
from bench.history.site import data, pages
from bench.history.sources import INSUFFICIENT, KEY_COLUMNS, judge_units, row_alpha

ASSETS = Path(__file__).parent / "assets"
PLOTLY_JS = Path(plotly.__file__).parent / "package_data" / "plotly.min.js"
# Runs per series on a row's chart and in its table, per machine on the machines page: the latest ones. A page
# then stays under a few MB at any length of history; the store and its Parquet export keep every run.
MAX_POINTS = 1000
MAX_LISTED = 300


def build_site(
    con: duckdb.DuckDBPyConnection,
    out: Path,
    ab_threshold: float,
    changes: pd.DataFrame,
    advisory: Sequence[Path] = (),
) -> Path:
    """The static site under ``out``; reports under an ``advisory`` folder are listed apart (never open).

    ``ab_threshold``: the practical threshold the A/B runs' pages judge their paired sides at (the paired run's,
    not the history's: its two builds shared their processes' time, so their rows do not drift apart).
    """
    out = Path(out)
    for folder in ("rows", "reports", "ab", "assets"):
        if (out / folder).exists():
            shutil.rmtree(out / folder)
        (out / folder).mkdir(parents=True)
    shutil.copy(PLOTLY_JS, out / "assets" / "plotly.min.js")
    for asset in ("app.js", "style.css"):
        shutil.copy(ASSETS / asset, out / "assets" / asset)

    runs = data.runs(con)
    by_id = {r["report_id"]: r for r in runs.to_dict("records")}  # report_id -> its run's facts
    labels = dict(zip(runs.machine_key, runs.label, strict=False))
    options = {r.options_key: data.options_text({"threads": r.threads, "torch": r.torch}) for r in runs.itertuples()}
    keys = data.row_keys(con)
    row_links = {key: f"rows/{data.row_slug(key)}.html" for key in keys}
    judged = (
        data.judgements(con)
        .merge(runs[["report_id", "label", "sha", "dirty", "started_at", "path"]], on="report_id", how="left")
        .sort_values(["started_at", "path"])
    )
    changes = changes.assign(label=changes["machine_key"].map(labels)) if len(changes) else changes.assign(label=[])

    _write_rows(con, out, keys, by_id, options, judged, changes)
    _write_reports(con, out, by_id, judged, row_links)
    _write_ab(con, out, by_id, row_links, ab_threshold)
    (out / "machines.html").write_text(pages.machines_page(data.machines(con), runs, MAX_LISTED), encoding="utf-8")
    machines = []
    for r in data.latest_headline_runs(con).itertuples():
        run = by_id[r.report_id]
        machines.append(
            {
                "machine_key": r.machine_key,
                "label": run["label"],
                "options": options[r.options_key],
                "subject": run["subject"],
                "run": run,
                "headline": data.headline(con, r.report_id),
                "targets": data.targets(con, r.report_id),
            }
        )
    machines.sort(key=lambda m: (m["label"], m["options"]))
    index = out / "index.html"
    shown = advisory_regressions(con, advisory) if advisory else None
    overview = pages.overview(machines, open_regressions(con, advisory), changes, keys, row_links, shown)
    index.write_text(overview, encoding="utf-8")
    return index


def _hover(p, run, options: str) -> list[str]:
    interval = "" if math.isnan(p.ci_low_us) else f" (95 % of units: {p.ci_low_us:.3f}-{p.ci_high_us:.3f})"
    return [
        f"{run['label']} · {options}",
        f"commit {pages.commit_text(p.sha, p.dirty)} {run['subject'] or ''}".strip(),
        f"run {p.started_at:%Y-%m-%d %H:%M} UTC on host {run['host']}",
        f"CPU {run['cpu_model']}" + (f" · GPUs {run['gpus']}" if run["gpus"] else ""),
        f"median {p.median_us:.3f} µs{interval}",
        f"n {int(p.n)} samples in {int(p.rounds)} rounds; {int(p.units)} units kept",
    ]


def _write_rows(con, out: Path, keys, by_id, options, judged: pd.DataFrame, changes: pd.DataFrame) -> None:
    points = data.series_points(con)
    judged_by_key = dict(iter(judged.groupby(list(KEY_COLUMNS), sort=False)))
    changes_by_key = dict(iter(changes.groupby(list(KEY_COLUMNS), sort=False))) if len(changes) else {}
    for key, group in points.groupby(list(KEY_COLUMNS), sort=False):
        series = []
        for (_, options_key), s in group.groupby(["machine_key", "options_key"], sort=False):
            s = s.iloc[-MAX_POINTS:]  # the latest runs: a page's size stays bounded however long the history
            run_of = [by_id[i] for i in s.report_id]
            has_interval = s.units.ge(2).any()
            series.append(
                {
                    "name": f"{run_of[0]['label']} · {options[options_key]}",
                    "x": [f"{t:%Y-%m-%dT%H:%M:%S}" for t in s.started_at],
                    "y": s.median_us.tolist(),
                    "lo": [None if math.isnan(v) else v for v in s.ci_low_us] if has_interval else None,
                    "hi": [None if math.isnan(v) else v for v in s.ci_high_us] if has_interval else None,
                    "hover": [
                        _hover(p, run, options[options_key]) for p, run in zip(s.itertuples(), run_of, strict=True)
                    ],
                    "links": [f"../reports/{i}.html" for i in s.report_id],
                }
            )
        key = tuple(key)
        html = pages.row_page(
            key,
            series,
            judged_by_key.get(key, judged.iloc[:0]).iloc[-MAX_LISTED:],
            changes_by_key.get(key, changes.iloc[:0]),
        )
        (out / "rows" / f"{data.row_slug(key)}.html").write_text(html, encoding="utf-8")


def _write_reports(con, out: Path, by_id: dict, judged: pd.DataFrame, row_links) -> None:
    judged_by_report = dict(iter(judged.groupby("report_id", sort=False)))
    rows = con.execute("SELECT * FROM rows").df()
    for report_id, report_rows in rows.groupby("report_id", sort=False):
        run = by_id[report_id]
        report_rows = report_rows.sort_values(list(KEY_COLUMNS))
        html = pages.report_page(run, report_rows, judged_by_report.get(report_id, judged.iloc[:0]), row_links)
        (out / "reports" / f"{report_id}.html").write_text(html, encoding="utf-8")


def _write_ab(con, out: Path, by_id, row_links, threshold: float) -> None:
    entries = []
    for ab in data.ab_runs(con).itertuples():
        base_rows, new_rows = data.rows_of(con, ab.base_id), data.rows_of(con, ab.new_id)
        base_units, new_units = data.units_of(con, ab.base_id), data.units_of(con, ab.new_id)
        merged = base_rows.merge(new_rows, on=list(KEY_COLUMNS), suffixes=("_base", "_new"))
        keys = [tuple(getattr(r, c) for c in KEY_COLUMNS) for r in merged.itertuples()]
        counted = sum(k in base_units and k in new_units and k[0] != "limit" for k in keys)
        lines = []
        for r, key in zip(merged.itertuples(), keys, strict=True):
            if key in base_units and key in new_units:
                j = judge_units(base_units[key], new_units[key], threshold, row_alpha(0.05, counted), paired=True)
                ratio, low, high, verdict = j.ratio, j.ci_low, j.ci_high, j.verdict
            else:
                ratio, low, high, verdict = math.nan, math.nan, math.nan, INSUFFICIENT
            lines.append(
                {
                    "key": key,
                    "base_us": r.median_us_base,
                    "new_us": r.median_us_new,
                    "median_ratio": r.median_us_new / r.median_us_base,
                    "ratio": ratio,
                    "ci_low": low,
                    "ci_high": high,
                    "verdict": verdict,
                }
            )
        slug = data.ab_slug(ab.ab_run)
        base, new = by_id[ab.base_id], by_id[ab.new_id]
        (out / "ab" / f"{slug}.html").write_text(
            pages.ab_page(ab.ab_run, base, new, lines, row_links), encoding="utf-8"
        )
        entries.append((ab.ab_run, f"ab/{slug}.html", f"{base['started_at']}"))
    (out / "ab.html").write_text(pages.ab_index(entries), encoding="utf-8")
