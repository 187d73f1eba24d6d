"""bench/gate.py: the base CI gates against, the trailers that accept a regression, and the gate's verdict."""

from __future__ import annotations

import io
import math

import pytest
from rich.console import Console

from bench.ab import gate, scratch
from bench.stats import compare
from tests.helpers.bench_synthetic import make_key


def _commit(repo, name: str, message: str) -> str:
    (repo / name).write_text(name)
    scratch.git("add", name, cwd=repo)
    scratch.git("commit", "--quiet", "-m", message, cwd=repo)
    return scratch.git("rev-parse", "HEAD", cwd=repo)


@pytest.fixture
def repo(tmp_path):
    root = tmp_path / "repo"
    root.mkdir()
    scratch.git("init", "--quiet", cwd=root)
    commits = [_commit(root, f"f{i}", f"commit {i}") for i in range(4)]
    return root, commits


def test_the_base_is_the_landed_tag_when_present_else_the_tracked_file(repo):
    root, commits = repo
    with pytest.raises(gate.GateError, match="neither the tag fusedbench/landed nor .ci/base"):
        gate.find_base(root)
    gate.write_base(commits[1][:7], root)  # a short hash is written in full
    assert (root / ".ci" / "base").read_text() == commits[1] + "\n"
    assert gate.find_base(root) == gate.Base(commits[1], ".ci/base")
    scratch.git("tag", gate.LANDED_TAG, commits[2], cwd=root)
    assert gate.find_base(root) == gate.Base(commits[2], "tag fusedbench/landed")


def test_a_base_that_is_not_an_ancestor_of_head_or_not_a_commit_is_refused(repo):
    root, commits = repo
    scratch.git("checkout", "--quiet", "-b", "side", commits[0], cwd=root)
    elsewhere = _commit(root, "g", "on a side branch")
    scratch.git("checkout", "--quiet", "-", cwd=root)
    (root / ".ci").mkdir()
    (root / ".ci" / "base").write_text(elsewhere + "\n")
    with pytest.raises(gate.GateError, match="not an ancestor of HEAD"):
        gate.find_base(root)
    (root / ".ci" / "base").write_text("0" * 40 + "\n")
    with pytest.raises(gate.GateError, match="not a commit of this clone"):
        gate.find_base(root)
    with pytest.raises(gate.GateError, match="not a commit"):
        gate.write_base("no-such-ref", root)


def test_trailers_after_the_base_accept_regressions(repo):
    root, commits = repo
    _commit(
        root,
        "slow",
        "kernel: checks every row's eps\n\nThe checks cost a few percent on small rows.\n\n"
        "Accept-Regression: fused/* op 1x8x512 float32 cpu: per-row eps checks, wanted\n"
        "Accept-Regression: ort/custom-run op *: the node validates its inputs",
    )
    found = gate.acceptances(commits[3], root)
    assert [(a.glob, a.reason) for a in found] == [
        ("fused/* op 1x8x512 float32 cpu", "per-row eps checks, wanted"),
        ("ort/custom-run op *", "the node validates its inputs"),
    ]
    assert gate.acceptances(scratch.git("rev-parse", "HEAD", cwd=root), root) == []  # nothing after HEAD
    _commit(root, "bad", "x\n\nAccept-Regression: fused/call op *")
    with pytest.raises(gate.GateError, match="needs `<row glob>: <reason>`"):
        gate.acceptances(commits[3], root)


def _row(key, verdict):
    nan = math.nan
    return compare.RowComparison(key, 1.0, 1.1, 1.1, 1.05, 1.15, 10, True, nan, verdict)


def test_an_accepted_regression_passes_the_gate_and_is_reported_an_unaccepted_one_fails_it():
    small, large = make_key(shape="1x8x512"), make_key(shape="8x128x1024")
    comparison = compare.Comparison(rows=[_row(small, compare.REGRESSION), _row(large, compare.SAME)])
    accepted = [gate.Acceptance("fused/* op 1x8x512 *", "wanted", "a" * 40)]
    decision = gate.decide(comparison, compare.EXIT_REGRESSION, accepted)
    assert decision.code == compare.EXIT_OK and decision.failing == []
    assert decision.accepted == [("fused/call op 1x8x512 float32 cpu", accepted[0])]
    console = Console(file=io.StringIO(), width=200)
    gate.report(decision, console)
    assert "accepted regression fused/call op 1x8x512 float32 cpu: wanted (Accept-Regression in aaaaaaaaaaaa)" in (
        console.file.getvalue()
    )
    both = compare.Comparison(rows=[_row(small, compare.REGRESSION), _row(large, compare.REGRESSION)])
    decision = gate.decide(both, compare.EXIT_REGRESSION, accepted)
    assert decision.code == compare.EXIT_REGRESSION and decision.failing == ["fused/call op 8x128x1024 float32 cpu"]
    # A run that failed for another reason (a wrong output) stays failed, whatever is accepted.
    assert gate.decide(compare.Comparison(rows=[]), compare.EXIT_REGRESSION, accepted).code == compare.EXIT_REGRESSION


def test_the_committed_base_is_an_ancestor_of_this_checkout():
    # CI's fresh clone of main gates against it: it must name a commit of this history.
    from env.paths import REPO_ROOT

    if not (REPO_ROOT / ".git").exists():
        pytest.skip("not a git checkout (an image's copy of the tree)")
    base = gate.find_base(REPO_ROOT)
    assert len(base.sha) == 40


# --- the real gate on a seeded slowdown (slow) ---------------------------------------------------


@pytest.mark.slow
@pytest.mark.timed  # the gate's verdict on measured times: nothing else on the cores
def test_a_commit_that_makes_the_op_ten_percent_slower_fails_the_gate(ab_repo, tmp_path):
    """The scratch repository's landed commit (clean), then a commit that turns the build-time slowdown switch to
    10 %: the gate, measuring the fused op's rows as the quick A/B run does, fails; a trailer accepting them
    passes it."""
    import pandas as pd

    from bench.ab import driver as ab
    from bench.measure.placement import spread_offsets
    from bench.plan.options import BenchOptions

    root = ab_repo["root"]
    assert gate.find_base(root).sha == ab_repo["clean"]
    assert scratch.git("rev-parse", "HEAD", cwd=root) == ab_repo["slow"]
    console = Console(file=io.StringIO(), width=2000)
    options = BenchOptions(baseline="fused", quick=True, model_batches=(), out_dir=tmp_path / "reports")
    code = gate.run_gate(console, repo=root, new=ab.Tree(root, root / "build"), options=options)
    text = console.file.getvalue()
    assert code == compare.EXIT_REGRESSION, text
    failing = [line for line in text.splitlines() if line.startswith("gate:") and "regression(s)" in line]
    assert failing and "fused/call op" in failing[0] and "Accept-Regression" in failing[0], text
    # Each side is its own commit's build, measured in fresh processes, a pair at each page offset.
    folder = max((tmp_path / "reports" / "ab").iterdir())
    first = [p for p in folder.glob("*/process*/*.csv") if p.parent.parent.parent == folder]
    commits = {p.parent.parent.name: set(pd.read_csv(p).git_commit) for p in first}
    assert commits == {"new": {ab_repo["slow"]}, "base": {ab_repo["clean"]}}, commits
    processes = pd.read_csv(folder / "processes.csv")
    pairs = len(processes) // 2
    assert pairs == ab.PROCESSES["quick"] and processes.pid.nunique() == 2 * pairs
    assert list(processes.page_offset) == [offset for offset in spread_offsets(pairs) for _ in (0, 1)]
    # Accepted on purpose, the same measurement passes the gate, each row named with the reason.
    accepting = "x\n\nAccept-Regression: fused/* op *: measured on purpose"
    scratch.git("commit", "--quiet", "--allow-empty", "-m", accepting, cwd=root)
    try:
        comparison = ab.rejudge_folder(folder, compare.DEFAULT_THRESHOLD)
        decision = gate.decide(comparison, compare.EXIT_REGRESSION, gate.acceptances(ab_repo["clean"], root))
        assert decision.code == compare.EXIT_OK and decision.accepted and not decision.failing
    finally:
        scratch.git("checkout", "--quiet", ab_repo["slow"], cwd=root)  # the other tests' HEAD


def test_a_row_name_names_a_layout_other_than_the_natural_one():
    placed = make_key(shape="1x8x512", layout="page_offset")
    assert gate.row_name(make_key(shape="1x8x512")) == "fused/call op 1x8x512 float32 cpu"
    assert gate.row_name(placed) == "fused/call op 1x8x512 float32 cpu page_offset"
    # A glob of the natural row leaves the page offset's regression failing; a trailing * takes both.
    comparison = compare.Comparison(rows=[_row(placed, compare.REGRESSION)])
    exact = [gate.Acceptance("fused/call op 1x8x512 float32 cpu", "wanted", "a" * 40)]
    assert gate.decide(comparison, compare.EXIT_REGRESSION, exact).failing == [gate.row_name(placed)]
    wide = [gate.Acceptance("fused/call op 1x8x512 float32 cpu*", "wanted", "a" * 40)]
    assert gate.decide(comparison, compare.EXIT_REGRESSION, wide).code == compare.EXIT_OK
