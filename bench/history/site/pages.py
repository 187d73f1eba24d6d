"""The pages of the site, each a function from plain values (site/data.py) to HTML text (site/html.py)."""

from __future__ import annotations

import math

import pandas as pd

from bench.history.changepoints import MIN_SHIFT
from bench.history.site.html import cell, esc, number, page, table
from bench.history.sources import INSUFFICIENT, KEY_COLUMNS

KEY_HEADERS = list(KEY_COLUMNS)


def key_text(key) -> str:
    return " ".join(str(k) for k in key)


def commit_text(sha: str, dirty: bool) -> str:
    return (sha[:10] if sha else "?") + ("-dirty" if dirty else "")


def row_cell(key: tuple, row_links: dict, up: str = "") -> str:
    return cell(f'<a href="{up}{esc(row_links.get(key, ""))}">{esc(key_text(key))}</a>')


def verdict_cell(verdict: str) -> str:
    cls = "insufficient" if verdict == INSUFFICIENT else verdict
    return cell(esc(verdict), cls=cls, metric="verdict")


def _regression_table(regressions: pd.DataFrame, row_links: dict, table_id: str) -> str:
    body = [
        [
            cell(esc(r.label)),
            row_cell(tuple(getattr(r, c) for c in KEY_COLUMNS), row_links),
            cell(f'<a href="reports/{esc(r.report_id)}.html">{esc(commit_text(r.sha, False))}</a>'),
            cell(number(r.ratio), r.ratio, "ratio"),
            cell(f"{number(r.ci_low)}-{number(r.ci_high)}"),
        ]
        for r in regressions.itertuples()
    ]
    return table(["machine", "row", "report", "ratio", "interval"], body, table_id)


def overview(
    machines: list[dict],
    regressions: pd.DataFrame,
    changes: pd.DataFrame,
    rows: list[tuple],
    row_links: dict,
    advisory: pd.DataFrame | None = None,
) -> str:
    """``machines``: per machine and options, its label, run, headline frame and targets (build.py).

    ``regressions``: what the history's check fails on; ``advisory``: the REGRESSION rows of advisory
    reports (a CI run's own), listed apart since they fail nothing.
    """
    parts, charts = [], []
    parts.append(
        "<p>Each machine's latest run of the fused op: its median against every other baseline at the same shape, "
        "dtype and device of that run (peer median / fused median: above 1, fused is faster), the fused rows' share "
        "of the copy, and the declared targets judged on that one run's rows (a run of 16-bit rows only answers "
        "few of them; <code>invoke bench.targets</code> judges several runs of a machine together). Ratios are read "
        "within one run, never across machines.</p>"
    )
    summary = []
    for index, m in enumerate(machines):
        met = sum(t[1] is True for t in m["targets"])
        missed = sum(t[1] is False for t in m["targets"])
        summary.append(
            [
                cell(f'<a href="#machine-{index}">{esc(m["label"])}</a>'),
                cell(esc(m["options"])),
                cell(esc(str(m["run"]["started_at"]))),
                cell(f"{met} met, {missed} missed", cls="missed" if missed else "met"),
            ]
        )
    parts.append(table(["machine", "options", "latest run", "targets"], summary, "summary"))
    for index, m in enumerate(machines):
        run = m["run"]
        head = m["headline"]
        parts.append(
            f'<section class="machine" id="machine-{index}" data-machine="{esc(m["machine_key"])}" '
            f'data-report="{esc(run["report_id"])}">'
            f"<h2>{esc(m['label'])} <small>({esc(m['options'])})</small></h2>"
            f'<p>latest run <a href="reports/{esc(run["report_id"])}.html">{esc(str(run["started_at"]))}</a>, '
            f"commit <code>{esc(commit_text(run['sha'], run['dirty']))}</code> {esc(m['subject'])}</p>"
        )
        peers = sorted({p for line in head.get("peers", pd.Series(dtype=object)) for p in line}) if len(head) else []
        headers = ["shape", "dtype", "device", "fused/call µs", "copy share call", "copy share out"]
        body = []
        for line in head.to_dict("records") if len(head) else []:
            cells = [cell(esc(line[c])) for c in ("shape", "dtype", "device")]
            cells.append(cell(number(line["fused_call_us"]), line["fused_call_us"], "fused_call_us"))
            cells.append(cell(number(line["copy_share_call"]), line["copy_share_call"], "copy_share_call"))
            cells.append(cell(number(line["copy_share_out"]), line["copy_share_out"], "copy_share_out"))
            for peer in peers:
                value = line["peers"].get(peer, math.nan)
                cells.append(cell(number(value) + ("x" if not math.isnan(value) else ""), value, f"vs:{peer}"))
            body.append(cells)
        parts.append(table(headers + [f"vs {p}" for p in peers], body, "headline"))
        chart_id = f"headline-{index}"
        parts.append(
            f'<div class="chart bars" id="{chart_id}"></div><div class="facts-panel" id="{chart_id}-facts"></div>'
        )
        if "unfused/call" in peers:
            lines = [line for line in head.to_dict("records") if "unfused/call" in line["peers"]]
            charts.append(
                {
                    "id": chart_id,
                    "kind": "bar",
                    "ytitle": "unfused / fused median (x)",
                    "traces": [
                        {
                            "name": "fused vs unfused",
                            "x": [f"{line['shape']} {line['dtype']} {line['device']}" for line in lines],
                            "y": [line["peers"]["unfused/call"] for line in lines],
                            "hover": [
                                [
                                    f"{line['shape']} {line['dtype']} {line['device']}",
                                    f"{line['peers']['unfused/call']:.3f}x",
                                ]
                                for line in lines
                            ],
                            "links": [
                                row_links.get(
                                    (
                                        "op",
                                        line["shape"],
                                        line["dtype"],
                                        "fused",
                                        "call",
                                        line["device"],
                                        line["layout"],
                                    ),
                                    "",
                                )
                                for line in lines
                            ],
                        }
                    ],
                }
            )
        else:
            parts[-1] = ""
        targets = m["targets"]
        if targets:
            body = [
                [
                    cell(esc(name)),
                    cell(
                        "met" if met else ("not measured" if met is None else "MISSED"),
                        cls="met" if met else ("unmeasured" if met is None else "missed"),
                        metric="target",
                    ),
                    cell(esc(detail)),
                ]
                for name, met, detail in targets
            ]
            met = sum(t[1] is True for t in targets)
            missed = sum(t[1] is False for t in targets)
            parts.append(f"<h3>targets: {met} met, {missed} missed</h3>" + table(["target", "", "measured"], body))
        parts.append("</section>")
    parts.append("<h2>open regressions</h2>")
    if regressions.empty:
        parts.append('<p id="regressions">none: no REGRESSION in the latest report of any machine and run options</p>')
    else:
        parts.append(_regression_table(regressions, row_links, "regressions"))
    if advisory is not None:
        parts.append("<h2>advisory reports</h2>")
        parts.append(
            "<p>Reports held as advisory (a CI run's own): each judged against its machine's previous report, "
            "shown here and never failing the check.</p>"
        )
        if advisory.empty:
            parts.append('<p id="advisory">none: no REGRESSION against their previous</p>')
        else:
            parts.append(_regression_table(advisory, row_links, "advisory"))
    parts.append("<h2>level shifts</h2>")
    if changes.empty:
        parts.append(f"<p>none of {MIN_SHIFT:.0%} or more</p>")
    else:
        body = [
            [
                cell(esc(c.label)),
                row_cell(tuple(getattr(c, k) for k in KEY_COLUMNS), row_links),
                cell(f'<a href="reports/{esc(c.report_id)}.html">{esc(commit_text(c.sha, c.dirty))}</a>'),
                cell(number(c.size) + "x", c.size, "size"),
                cell(esc(c.points)),
            ]
            for c in changes.itertuples()
        ]
        parts.append(table(["machine", "row", "from commit", "size", "points"], body, "changes"))
    parts.append('<h2>rows</h2><ul class="rows">')
    parts.extend(f'<li><a href="{esc(row_links[key])}">{esc(key_text(key))}</a></li>' for key in rows)
    parts.append("</ul>")
    return page("overview", "\n".join(parts), {"charts": charts})


def row_page(key: tuple, series: list[dict], judged: pd.DataFrame, changes: pd.DataFrame) -> str:
    """One row over the runs: a line per machine and options; hover facts; a click opens the report."""
    traces = []
    for s in series:
        traces.append({k: s[k] for k in ("name", "x", "y", "lo", "hi", "hover", "links")})
    parts = [
        "<p>Median per call (µs) of each run, with the 95 % interval of its units' geometric mean where the run kept "
        "its samples. Hover a point for its run; click it to open that report.</p>",
        '<div class="chart" id="row-chart"></div>',
        '<div class="facts-panel" id="row-chart-facts">hover a point: its run shows here</div>',
    ]
    if not changes.empty:
        body = [
            [cell(esc(c.label)), cell(esc(commit_text(c.sha, c.dirty))), cell(number(c.size) + "x", c.size, "size")]
            for c in changes.itertuples()
        ]
        parts.append("<h2>level shifts</h2>" + table(["machine", "from commit", "size"], body))
    if not judged.empty:
        body = [
            [
                cell(esc(j.label)),
                cell(f'<a href="../reports/{esc(j.report_id)}.html">{esc(commit_text(j.sha, j.dirty))}</a>'),
                cell(number(j.median_ratio), j.median_ratio, "median_ratio"),
                cell(number(j.ratio), j.ratio, "ratio"),
                cell("-" if math.isnan(j.ci_low) else f"{number(j.ci_low)}-{number(j.ci_high)}"),
                verdict_cell(j.verdict),
            ]
            for j in judged.itertuples()
        ]
        parts.append(
            "<h2>each run against the previous of its machine and options</h2>"
            + table(["machine", "run", "median ratio", "units ratio", "interval", "verdict"], body, "judgements")
        )
    data = {
        "charts": [
            {"id": "row-chart", "kind": "line", "ytitle": "median µs", "xtitle": "run start (UTC)", "traces": traces}
        ]
    }
    return page(key_text(key), "\n".join(parts), data, depth=1)


def report_page(run: dict, rows: pd.DataFrame, judged: pd.DataFrame, row_links: dict) -> str:
    facts = [
        ("machine", run["label"]),
        ("CPU", run["cpu_model"]),
        ("GPUs", run["gpus"]),
        ("machine id", run["machine_id"]),
        ("host", run["host"]),
        ("started (UTC)", run["started_at"]),
        ("commit", commit_text(run["sha"], run["dirty"])),
        ("commit subject", run["subject"]),
        ("threads", run["threads"]),
        ("torch / onnxruntime", f"{run['torch']} / {run['onnxruntime']}"),
        ("allocator", run["cpu_allocator"]),
        ("file", run["path"]),
        ("schema version", run["schema_version"]),
        ("A/B side", f"{run['ab_side']} of {run['ab_run']}" if run["ab_side"] else ""),
        ("samples kept", "yes" if run["has_units"] else "no"),
    ]
    verdicts = {tuple(getattr(j, c) for c in KEY_COLUMNS): j for j in judged.itertuples()}
    body = []
    for r in rows.itertuples():
        key = tuple(getattr(r, c) for c in KEY_COLUMNS)
        j = verdicts.get(key)
        body.append(
            [cell(f'<a href="../{esc(row_links[key])}">{esc(key_text(key))}</a>')]
            + [cell(number(getattr(r, c)), getattr(r, c), c) for c in ("median_us", "p99_us", "iqr_us", "copy_share")]
            + [cell(esc(int(r.n)), float(r.n), "n"), cell(esc(r.note))]
            + ([verdict_cell(j.verdict), cell(number(j.ratio), j.ratio, "ratio")] if j else [cell("first"), cell("-")])
        )
    html_rows = table(
        ["row", "median µs", "p99 µs", "IQR µs", "copy share", "n", "note", "vs previous", "units ratio"], body, "rows"
    )
    facts_html = table(["fact", "value"], [[cell(esc(k)), cell(esc(v))] for k, v in facts], "facts")
    return page(f"{run['label']}: {run['started_at']}", facts_html + "<h2>rows</h2>" + html_rows, depth=1)


def ab_page(folder: str, base: dict, new: dict, lines: list[dict], row_links: dict) -> str:
    facts = table(
        ["side", "commit", "report"],
        [
            [
                cell(esc(name)),
                cell(esc(commit_text(r["sha"], r["dirty"])) + " " + esc(r["subject"])),
                cell(f'<a href="../reports/{esc(r["report_id"])}.html">{esc(r["path"])}</a>'),
            ]
            for name, r in (("BASE", base), ("NEW", new))
        ],
        "facts",
    )
    body = [
        [
            cell(f'<a href="../{esc(row_links[line["key"]])}">{esc(key_text(line["key"]))}</a>'),
            cell(number(line["base_us"]), line["base_us"], "base_us"),
            cell(number(line["new_us"]), line["new_us"], "new_us"),
            cell(number(line["median_ratio"]), line["median_ratio"], "median_ratio"),
            cell(number(line["ratio"]), line["ratio"], "ratio"),
            cell("-" if math.isnan(line["ci_low"]) else f"{number(line['ci_low'])}-{number(line['ci_high'])}"),
            verdict_cell(line["verdict"]),
        ]
        for line in lines
    ]
    verdicts = table(
        ["row", "BASE µs", "NEW µs", "median ratio", "units ratio (paired)", "interval", "verdict"], body, "verdicts"
    )
    return page(f"A/B run {folder}", facts + verdicts, depth=1)


def ab_index(entries: list[tuple[str, str, str]]) -> str:
    if not entries:
        return page("A/B runs", "<p>no A/B run (a folder with base/pooled.csv and new/pooled.csv) ingested</p>")
    items = "".join(f'<li><a href="{esc(href)}">{esc(folder)}</a> {esc(when)}</li>' for folder, href, when in entries)
    return page("A/B runs", f'<ul class="ab">{items}</ul>')


def machines_page(machines: pd.DataFrame, runs: pd.DataFrame, listed: int) -> str:
    parts = []
    for m in machines.itertuples():
        mine = runs[runs.machine_key == m.machine_key]
        older = max(0, len(mine) - listed)
        mine = mine.iloc[-listed:]
        facts = table(
            ["fact", "value"],
            [
                [cell(esc(k)), cell(esc(v))]
                for k, v in (("machine id", m.machine_id), ("CPU", m.cpu_model), ("GPUs", m.gpus), ("runs", m.runs))
            ],
            "facts",
        )
        body = [
            [
                cell(f'<a href="reports/{esc(r.report_id)}.html">{esc(str(r.started_at))}</a>'),
                cell(esc(commit_text(r.sha, r.dirty))),
                cell(esc(r.subject)),
                cell(esc(r.threads)),
                cell(esc(r.host)),
                cell(esc(r.path)),
            ]
            for r in mine.itertuples()
        ]
        parts.append(
            f'<section class="machine" data-machine="{esc(m.machine_key)}"><h2>{esc(m.label)}</h2>{facts}'
            + (f"<p>the latest {listed} runs; {older} older ones are in the store</p>" if older else "")
            + table(["run", "commit", "subject", "threads", "host", "file"], body, "runs")
            + "</section>"
        )
    return page("machines", "\n".join(parts))
