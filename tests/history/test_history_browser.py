"""The dashboard in a real browser: numbers against the store, marks drawn, click-through, offline, hostile text."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from rich.console import Console

from bench.history.cli import HistoryOptions, main
from bench.history.labels import DEFAULT_LABELS
from bench.history.site.data import row_slug
from bench.history.store import connect
from bench.history.synthetic import History, Machine, write_history
from env.paths import REPO_ROOT, build_dir
from tests.history.browser import FLAGS, Visit, open_page, require_chromium, wait_for_charts
from tests.history.fixtures import XEON, ZEN, seed_of

FUSED_CALL_ROW = ("op", "8x128x1024", "float32", "fused", "call", "cpu", "page_offset")
HOSTILE = {
    "host": '<img src=x onerror="window.__pwned=1">',
    "note": "<script>window.__pwned=2</script>",
    "cpu_model": '"><svg onload="window.__pwned=3">',
    "git_commit": "<b onmouseover=window.__pwned=4>c0ffee</b>",
}


@pytest.fixture(scope="module")
def browser():
    chromium = require_chromium()
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium, args=FLAGS)
        yield browser
        browser.close()


def _site(tmp: Path, history: History, labels=None) -> tuple[Path, Path]:
    reports = tmp / "reports"
    write_history(history, reports)
    db, site = tmp / "history.duckdb", tmp / "site"
    options = HistoryOptions(roots=[reports], db=db, labels=labels, site=site)
    assert main(options, Console(file=open("/dev/null", "w"))) == 0  # noqa: SIM115
    return db, site


@pytest.fixture(scope="module")
def fixture_site(tmp_path_factory, request):
    history = History((ZEN, XEON), commits=5, seed=seed_of(request))
    return _site(tmp_path_factory.mktemp("fixture"), history)


def test_overview_numbers_are_the_stores(browser, fixture_site):
    db, site = fixture_site
    con = connect(db)
    visit = Visit()
    page = open_page(browser, (site / "index.html").as_uri(), visit)
    assert wait_for_charts(page) == 2
    sections = page.locator("section.machine")
    assert sections.count() == 2
    for i in range(2):
        section = sections.nth(i)
        report = section.get_attribute("data-report")
        # the machine's latest run, asked of the store directly
        latest = con.execute(
            "SELECT report_id FROM runs WHERE machine_key = ? ORDER BY started_at DESC LIMIT 1",
            [section.get_attribute("data-machine")],
        ).fetchone()[0]
        assert report == latest
        medians = {
            (r[0], r[1], r[2]): r[3]
            for r in con.execute(
                "SELECT shape, baseline, variant, median_us FROM rows WHERE report_id = ? AND workload = 'op'", [report]
            ).fetchall()
        }
        shares = {
            (r[0], r[1]): r[2]
            for r in con.execute(
                "SELECT shape, variant, copy_share FROM rows WHERE report_id = ? AND baseline = 'fused'", [report]
            ).fetchall()
        }
        lines = section.locator("table.headline tbody tr")
        assert lines.count() == 3
        checked = 0
        for j in range(lines.count()):
            line = lines.nth(j)
            shape = line.locator("td").first.inner_text()
            for metric_cell in line.locator("td[data-metric]").all():
                metric, shown = metric_cell.get_attribute("data-metric"), metric_cell.inner_text()
                if metric == "fused_call_us":
                    expected = medians[(shape, "fused", "call")]
                elif metric.startswith("copy_share_"):
                    expected = shares[(shape, metric.removeprefix("copy_share_"))]
                else:
                    baseline, variant = metric.removeprefix("vs:").split("/")
                    expected = medians[(shape, baseline, variant)] / medians[(shape, "fused", "call")]
                assert float(metric_cell.get_attribute("data-value")) == pytest.approx(expected, rel=1e-12)
                assert shown.removesuffix("x") == f"{expected:.3f}"
                checked += 1
        assert checked == 3 * (3 + 4)  # median, two copy shares and four peers per shape
    assert "none: no REGRESSION" in page.locator("#regressions").inner_text()
    assert (visit.errors, visit.blocked) == ([], [])


def test_every_chart_draws_a_mark_per_point(browser, fixture_site):
    db, site = fixture_site
    con = connect(db)
    visit = Visit()
    page = open_page(browser, (site / "index.html").as_uri(), visit)
    wait_for_charts(page)
    for chart in page.locator(".chart").all():
        assert chart.locator(".barlayer .point path").count() == 3  # one bar per op shape
    points = con.execute(
        "SELECT count(*) FROM rows WHERE workload = ? AND shape = ? AND dtype = ? AND baseline = ? AND variant = ? "
        "AND device = ? AND layout = ?",
        list(FUSED_CALL_ROW),
    ).fetchone()[0]
    page = open_page(browser, (site / "rows" / f"{row_slug(FUSED_CALL_ROW)}.html").as_uri(), visit)
    assert wait_for_charts(page) == 1
    assert page.locator(".scatterlayer .trace").count() == 2  # a line per machine
    assert page.locator(".scatterlayer .points path.point").count() == points == 10
    assert page.locator(".errorbar").count() == points  # each run kept its samples: an interval each
    assert (visit.errors, visit.blocked) == ([], [])


def test_a_click_on_a_point_opens_its_report_and_hover_shows_its_run(browser, fixture_site):
    db, site = fixture_site
    con = connect(db)
    visit = Visit()
    page = open_page(browser, (site / "rows" / f"{row_slug(FUSED_CALL_ROW)}.html").as_uri(), visit)
    wait_for_charts(page)
    point = page.locator(".scatterlayer .trace").first.locator("path.point").last
    box = point.bounding_box()
    page.mouse.move(box["x"] + box["width"] / 2, box["y"] + box["height"] / 2)
    page.locator(".hoverlayer .hovertext").first.wait_for(timeout=5000)
    hover = page.locator("#row-chart-facts").inner_text()
    sha = re.search(r"commit ([0-9a-f]{10})", hover).group(1)
    assert "n 240 samples in 6 rounds" in hover and "on host vm" in hover
    with page.expect_navigation(timeout=10000):
        page.mouse.click(box["x"] + box["width"] / 2, box["y"] + box["height"] / 2)
    report_id = Path(page.url).stem
    assert page.url.endswith(f"/reports/{report_id}.html")
    run = con.execute("SELECT sha, path FROM runs WHERE report_id = ?", [report_id]).fetchone()
    assert run[0].startswith(sha)  # the point hovered is the report opened
    facts = page.locator("table.facts").inner_text()
    assert run[1] in facts
    rows = page.locator("table.rows tbody tr")
    assert rows.count() == con.execute("SELECT count(*) FROM rows WHERE report_id = ?", [report_id]).fetchone()[0]
    median = con.execute(
        "SELECT median_us FROM rows WHERE report_id = ? AND shape = '8x128x1024' AND baseline = 'fused' "
        "AND variant = 'call'",
        [report_id],
    ).fetchone()[0]
    shown = page.locator("tr", has_text="op 8x128x1024 float32 fused call cpu").locator('td[data-metric="median_us"]')
    assert float(shown.get_attribute("data-value")) == pytest.approx(median, rel=1e-12)
    assert (visit.errors, visit.blocked) == ([], [])


def test_every_page_loads_offline_without_console_errors(browser, fixture_site):
    _, site = fixture_site
    visit = Visit()
    pages = [site / "index.html", site / "machines.html", site / "ab.html"]
    pages += sorted((site / "rows").glob("*.html"))[:3] + sorted((site / "reports").glob("*.html"))[:3]
    for path in pages:
        page = open_page(browser, path.as_uri(), visit)
        wait_for_charts(page)
        assert page.locator("h1").inner_text()
        page.close()
    assert visit.errors == []
    assert visit.blocked == []  # nothing asked for the network: every script and style lies beside the pages


def test_hostile_text_is_shown_as_text_and_never_runs(browser, tmp_path, request):
    history = History(
        (Machine("hostile", "<i>id</i>", "x", host="h"),), commits=3, seed=seed_of(request), text=dict(HOSTILE)
    )
    labels = tmp_path / "labels.csv"
    folder = tmp_path / "reports" / "hostile"
    labels.write_text(f'folder,label,evidence\n{folder},"<img src=y onerror=window.__pwned=5>",x\n')
    _, site = _site(tmp_path, history, labels)
    visit = Visit()
    pages = [site / "index.html", site / "machines.html"] + sorted((site / "reports").glob("*.html"))[:1]
    pages += [site / "rows" / f"{row_slug(FUSED_CALL_ROW)}.html"]
    for path in pages:
        page = open_page(browser, path.as_uri(), visit)
        wait_for_charts(page)
        text = page.locator("body").inner_text()
        assert "<img src=y onerror=window.__pwned=5>" in text  # the label, as its characters
        if "reports" in path.parts or path.name == "machines.html":
            assert HOSTILE["host"] in text
        if "reports" in path.parts:
            assert HOSTILE["note"] in text and HOSTILE["cpu_model"] in text
        assert page.evaluate("typeof window.__pwned") == "undefined"
        assert page.evaluate(
            "document.querySelectorAll('img, svg[onload], b[onmouseover], script:not([src])').length"
        ) == (
            1  # the one JSON block: <script type=application/json>
        )
        if "rows" in path.parts:
            point = page.locator("path.point").first.bounding_box()
            page.mouse.move(point["x"] + point["width"] / 2, point["y"] + point["height"] / 2)
            page.locator(".hoverlayer .hovertext").first.wait_for(timeout=5000)
            hover = page.locator("#row-chart-facts").inner_text()
            assert HOSTILE["host"] in hover and HOSTILE["cpu_model"] in hover  # the facts panel shows the characters
            legend = page.locator(".legend .legendtext").first.text_content()
            assert legend.startswith("<img src=y onerror=window.__pwned=5>")  # so does the chart's legend
            assert page.evaluate("typeof window.__pwned") == "undefined"
        page.close()
    assert visit.errors == [] and visit.blocked == []


def test_the_committed_reports_show_every_machine_and_give_the_screenshot(browser, tmp_path):
    db, site = tmp_path / "history.duckdb", tmp_path / "site"
    options = HistoryOptions(roots=[REPO_ROOT / "reports"], db=db, labels=DEFAULT_LABELS, site=site)
    assert main(options, Console(file=open("/dev/null", "w"))) == 0  # noqa: SIM115
    visit = Visit()
    page = open_page(browser, (site / "index.html").as_uri(), visit)
    wait_for_charts(page)
    headings = page.locator("section.machine h2").all_inner_texts()
    for machine in ("AMD EPYC Zen 4 VM", "AMD EPYC Zen 5 VM", "NVIDIA H200 VM"):
        assert any(h.startswith(machine) for h in headings), headings
    gpu = page.locator("section.machine", has_text="NVIDIA H200 VM").locator("table.headline")
    assert "NVIDIA H200" in gpu.inner_text() and "bfloat16" in gpu.inner_text()
    shots = build_dir() / "history-screenshots"
    shots.mkdir(parents=True, exist_ok=True)
    page.set_viewport_size({"width": 1300, "height": 900})
    page.screenshot(path=str(shots / "overview.png"))
    # At page_offset: the layout every report from before the layout column measured, Zen 5's included.
    row = page.locator("ul.rows a", has_text="op 8x128x1024 float32 fused out cpu page_offset").first
    with page.expect_navigation():
        row.click()
    wait_for_charts(page)
    assert page.locator(".scatterlayer .trace").count() >= 3  # Zen 4, Zen 5 and more
    # The Zen 5 VM's line: traces are drawn in the legend's order.
    names = page.locator(".legend .legendtext").all_text_contents()
    zen5 = next(i for i, name in enumerate(names) if name.startswith("AMD EPYC Zen 5 VM"))
    point = page.locator(".scatterlayer .trace").nth(zen5).locator("path.point").last.bounding_box()
    page.mouse.move(point["x"] + point["width"] / 2, point["y"] + point["height"] / 2)
    page.locator(".hoverlayer .hovertext").first.wait_for(timeout=5000)
    assert "AMD EPYC Zen 5 VM" in page.locator("#row-chart-facts").inner_text()
    page.screenshot(path=str(shots / "row.png"))
    assert visit.errors == [] and visit.blocked == []
