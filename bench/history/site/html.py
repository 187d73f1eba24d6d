"""HTML pieces: every text from a report goes through ``esc`` (shown as text), every datum through ``json_block``.

A report's text fields (host, note, commit subject, even a row key) are data
from outside: a hostname like ``<img onerror=...>`` must show as those
characters. So no page builds markup from them without escaping, the page
data travels as JSON in a non-executable script block with ``<``, ``>`` and
``&`` escaped, and the charts' hover labels are escaped again in app.js
before Plotly reads them as its own small markup.
"""

from __future__ import annotations

import html
import json
import math

# No network, no inline script: the only scripts are the site's own two files.
CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; "
    "font-src 'self' data:; connect-src 'none'; base-uri 'none'; form-action 'none'"
)


def esc(value) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    return html.escape(str(value), quote=True)


def number(value: float, digits: int = 3) -> str:
    return "-" if value is None or (isinstance(value, float) and math.isnan(value)) else f"{value:.{digits}f}"


def _clean(value):
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {str(k): _clean(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_clean(v) for v in value]
    return value


def json_block(data) -> str:
    text = json.dumps(_clean(data), separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    for raw, escaped in (
        ("&", "\\u0026"),
        ("<", "\\u003c"),
        (">", "\\u003e"),
        ("\u2028", "\\u2028"),
        ("\u2029", "\\u2029"),
    ):
        text = text.replace(raw, escaped)
    return f'<script type="application/json" id="page-data">{text}</script>'


def page(title: str, body: str, data: dict | None = None, depth: int = 0) -> str:
    """A whole page; ``depth``: folders below the site's root (links and assets are relative: it opens from disk)."""
    up = "../" * depth
    nav = " · ".join(
        f'<a href="{up}{href}">{name}</a>'
        for href, name in (("index.html", "overview"), ("machines.html", "machines"), ("ab.html", "A/B runs"))
    )
    return f"""<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="{CSP}">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{esc(title)} - fusedbench history</title>
<link rel="stylesheet" href="{up}assets/style.css">
</head>
<body>
<nav>fusedbench history: {nav}</nav>
<main>
<h1>{esc(title)}</h1>
{body}
</main>
{json_block(data or {"charts": []})}
<script src="{up}assets/plotly.min.js"></script>
<script src="{up}assets/app.js"></script>
</body>
</html>
"""


def table(headers: list[str], rows: list[list[str]], cls: str = "") -> str:
    """``rows`` hold ready HTML cells (escape text with esc before)."""
    head = "".join(f"<th>{esc(h)}</th>" for h in headers)
    body = "\n".join("<tr>" + "".join(cells) + "</tr>" for cells in rows)
    return f'<table class="{esc(cls)}"><thead><tr>{head}</tr></thead><tbody>\n{body}\n</tbody></table>'


def cell(text: str, value: float | None = None, metric: str = "", cls: str = "") -> str:
    """A table cell of escaped text; a number's exact value rides along in data-value for checks."""
    attrs = f' class="{esc(cls)}"' if cls else ""
    if metric:
        attrs += f' data-metric="{esc(metric)}"'
    if value is not None and not (isinstance(value, float) and math.isnan(value)):
        attrs += f' data-value="{value!r}"'
    return f"<td{attrs}>{text}</td>"
