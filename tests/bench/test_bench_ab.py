"""`bench --against REF` end to end: a deliberately slowed op is flagged (exit 1), the same commit twice is not.

A temporary repository holds this checkout as commit "clean" and, on top, a
"slow" commit whose CPU kernel computes every row SLOW_PASSES times (same
result, more time). Each side is built by its own `invoke build` and measured
by its own worker, interleaved, on a small grid (the fused op at one shape, one
thread) so that the test stays cheap on a 2-core CI machine.
"""

from __future__ import annotations

import io
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
from rich.console import Console

from bench import ab
from bench.compare import REGRESSION, compare_reports
from bench.report import SCHEMA_VERSION
from bench.run import BenchOptions
from env.paths import REPO_ROOT

pytestmark = pytest.mark.slow

KERNEL = "csrc/core/fused_norm_cpu.cpp"
ENTRY = "void cpu_forward_rows(const NormProblem& p, int64_t row_begin, int64_t row_end) {"
SLOW_PASSES = 16
SMALL_GRID = BenchOptions(baseline="fused", op_shapes=((1, 8, 512),), model_batches=(), threads=1, warmup=20, budget_s=0.6)


def _git(repo: Path, *args: str) -> str:
    command = ["git", "-c", "user.name=fusedbench test", "-c", "user.email=test@fusedbench.invalid", *args]
    return subprocess.run(command, cwd=repo, capture_output=True, text=True, check=True).stdout.strip()


def _slowed(source: str) -> str:
    assert ENTRY in source, f"{KERNEL} no longer has `{ENTRY}`: update the slowdown of this test"
    wrapper = (
        "void forward_rows_once(const NormProblem& p, int64_t row_begin, int64_t row_end);\n"
        f"{ENTRY}\n"
        f"  for (int pass = 0; pass < {SLOW_PASSES}; ++pass) forward_rows_once(p, row_begin, row_end);  // deliberately slow\n"
        "}\n"
        "void forward_rows_once(const NormProblem& p, int64_t row_begin, int64_t row_end) {"
    )
    return source.replace(ENTRY, wrapper)


def _build(tree: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("FUSEDBENCH_") and k != "PYTHONPATH"}
    env["FUSEDBENCH_BUILD_DIR"] = str(tree / "build")
    result = subprocess.run([sys.executable, "-m", "invoke", "build"], cwd=tree, env=env, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]


@pytest.fixture(scope="module")
def repo(tmp_path_factory) -> dict:
    """A repository with this checkout as "clean", a "slow" commit on top, and a commit without the A/B worker."""
    root = tmp_path_factory.mktemp("ab") / "repo"
    listed = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=REPO_ROOT, capture_output=True, check=True).stdout
    for name in filter(None, listed.decode().split("\0")):
        source = REPO_ROOT / name
        if source.is_file() and not source.is_symlink():
            (root / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, root / name)
    _git(root, "init", "--quiet")
    _git(root, "add", "--force", "-A")  # -f: env/build/ is tracked although .gitignore names build/
    _git(root, "commit", "--quiet", "-m", "clean")
    clean = _git(root, "rev-parse", "HEAD")
    _git(root, "rm", "--quiet", ab.WORKER)
    _git(root, "commit", "--quiet", "-m", "before A/B runs")
    old = _git(root, "rev-parse", "HEAD")
    _git(root, "checkout", "--quiet", clean)
    kernel = root / KERNEL
    kernel.write_text(_slowed(kernel.read_text()))
    _git(root, "commit", "--quiet", "-am", "slow")
    slow = _git(root, "rev-parse", "HEAD")
    _build(root)
    return {"root": root, "clean": clean, "slow": slow, "old": old}


def _run(repo: dict, ref: str, tmp_path: Path) -> tuple[ab.AbResult, str]:
    console = Console(file=io.StringIO(), width=250)
    options = BenchOptions(**{**vars(SMALL_GRID), "out_dir": tmp_path})
    result = ab.run_ab(ref, options, console, new=ab.Tree(repo["root"], repo["root"] / "build"))
    return result, console.file.getvalue()


def test_a_slowed_op_is_flagged_against_the_clean_commit(repo, tmp_path):
    result, text = _run(repo, repo["clean"], tmp_path)
    assert result.code == 1, text
    comparison = compare_reports(result.base_csv, result.new_csv)
    flagged = {r.key[3:5] for r in comparison.regressions}  # (baseline, variant); the device follows
    assert flagged == {("fused", "call"), ("fused", "out")}, text  # the op's two rows, nothing else
    for row in comparison.regressions:
        assert row.ratio > 2 and row.best_round_ratio > 2  # 16 passes over each row instead of 1
    # Each side is its own build of its own commit, in its own folder.
    base_build = repo["root"] / "build" / "ab" / repo["clean"] / "build"
    assert (base_build / "toolchain.json").is_file() and (repo["root"] / "build" / "toolchain.json").is_file()
    assert (repo["root"] / "build" / "ab" / repo["clean"] / "src" / KERNEL).read_text() != (repo["root"] / KERNEL).read_text()
    commits = {p.parent.name: set(pd.read_csv(p).git_commit) for p in result.folder.glob("*/*.csv")}
    assert commits == {"new": {repo["slow"]}, "base": {repo["clean"]}}
    assert (result.folder / "compare.txt").read_text().count("REGRESSION") == 2
    assert "round 6/6" in text and "2 regression(s)" in text


def test_the_same_commit_against_itself_has_no_regression(repo, tmp_path):
    _git(repo["root"], "checkout", "--quiet", repo["clean"])
    try:
        _build(repo["root"])  # the clean kernel into the NEW build folder; BASE's build is reused
        result, text = _run(repo, "HEAD", tmp_path)
    finally:
        _git(repo["root"], "checkout", "--quiet", repo["slow"])
    assert result.code == 0, text
    comparison = compare_reports(result.base_csv, result.new_csv)
    assert len(comparison.rows) == 6 and not [r for r in comparison.rows if r.verdict == REGRESSION], text
    assert "0 regression(s) - OK" in (result.folder / "compare.txt").read_text()


def test_a_ref_before_ab_support_is_skipped_with_the_reason(repo, tmp_path):
    result, text = _run(repo, repo["old"], tmp_path)
    assert result.code == 0 and result.new_csv is None
    assert "A/B skipped" in text and f"REF {repo['old'][:12]} predates A/B runs" in text
    assert not (repo["root"] / "build" / "ab" / repo["old"] / "build").exists()  # skipped before building


def test_a_ref_of_another_report_schema_is_skipped_with_the_reason(repo, tmp_path):
    root = repo["root"]
    _git(root, "checkout", "--quiet", repo["clean"])
    try:
        report = root / "bench" / "report.py"
        report.write_text(report.read_text().replace(f"SCHEMA_VERSION = {SCHEMA_VERSION}", f"SCHEMA_VERSION = {SCHEMA_VERSION + 1}"))
        _git(root, "commit", "--quiet", "-am", "another schema")
        other = _git(root, "rev-parse", "HEAD")
    finally:
        _git(root, "checkout", "--quiet", repo["slow"])
    result, text = _run(repo, other, tmp_path)
    assert result.code == 0 and result.new_csv is None
    assert f"writes report schema {SCHEMA_VERSION + 1}, this checkout reads {SCHEMA_VERSION}" in text
    assert f"schema {SCHEMA_VERSION + 1}" in (result.folder / "compare.txt").read_text()


def test_a_ref_that_is_not_a_commit_is_a_clear_error(repo, tmp_path):
    with pytest.raises(ab.AbError, match="'no-such-branch' is not a commit of"):
        _run(repo, "no-such-branch", tmp_path)
    with pytest.raises(ab.AbError, match="must name a commit"):
        _run(repo, "--help", tmp_path)
