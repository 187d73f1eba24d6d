"""The gate's sides measured by one harness: a REF side runs this checkout's bench code with REF's ops and libraries.

A "REF" here is a git repository holding a copy of this checkout's ``ops``
package and a build folder holding copies of this checkout's built libraries,
so every path the worker reports tells which tree it came from.
"""

from __future__ import annotations

import io
import json
import shutil
from dataclasses import asdict
from pathlib import Path

import pytest
from rich.console import Console

from bench.ab import driver as ab
from bench.ab import scratch
from bench.plan.options import BenchOptions
from bench.processes.worker import OPS_ROOT_VARIABLE
from env.paths import REPO_ROOT, toolchain_record_path


def _ref_tree(root: Path) -> tuple[Path, Path, str]:
    """A REF tree (its own commit) with this checkout's ops package, and a build folder with copies of its
    libraries named by its own toolchain record; returns (tree, build, commit)."""
    record = json.loads(toolchain_record_path().read_text())
    artifacts = record.get("artifacts", {})
    if not {"torch_library", "ort_library"} <= set(artifacts):
        pytest.skip("this checkout is not built (`invoke build`): no libraries to copy")
    tree, build = root / "src", root / "build"
    shutil.copytree(REPO_ROOT / "ops", tree / "ops", ignore=shutil.ignore_patterns("__pycache__", "*.so"))
    (tree / "README").write_text("a REF for the harness tests\n")
    scratch.git("init", "--quiet", cwd=tree)
    scratch.git("add", "-A", cwd=tree)
    scratch.git("commit", "--quiet", "-m", "ref", cwd=tree)
    build.mkdir()
    copies = {}
    for name in ("torch_library", "ort_library"):
        source = Path(artifacts[name])
        copies[name] = str(build / source.name)
        shutil.copy2(source, copies[name])
    (build / "toolchain.json").write_text(json.dumps({**record, "artifacts": {**artifacts, **copies}}))
    return tree, build, scratch.git("rev-parse", "HEAD", cwd=tree)


def test_the_ref_worker_measures_ref_libraries_and_ops_with_this_checkouts_harness(tmp_path):
    tree, build, commit = _ref_tree(tmp_path / "ref")
    worker = ab.Worker("BASE", REPO_ROOT, build, tmp_path / "base.log", ops=tree)
    try:
        where = worker.ask({"do": "where"})
    finally:
        worker.close()
    # The harness is this checkout's ...
    assert Path(where["bench"]).resolve() == REPO_ROOT / "bench" / "processes" / "worker.py", where
    assert Path(where["env"]).resolve() == REPO_ROOT / "env" / "paths.py", where
    # ... the measured code is REF's: its package, the libraries of its build, its commit in the report.
    assert Path(where["ops"]).resolve() == (tree / "ops" / "__init__.py").resolve(), where
    assert Path(where["torch_library"]).resolve().parent == build.resolve(), where
    assert Path(where["ort_library"]).resolve().parent == build.resolve(), where
    assert where["commit"] == commit


def test_without_an_ops_tree_the_worker_measures_its_own():
    worker = ab.Worker("NEW", REPO_ROOT, None, Path("/dev/null"))
    try:
        where = worker.ask({"do": "where"})
    finally:
        worker.close()
    assert Path(where["ops"]).resolve() == REPO_ROOT / "ops" / "__init__.py"
    assert Path(where["bench"]).resolve() == REPO_ROOT / "bench" / "processes" / "worker.py"


def test_a_ref_whose_ops_lack_what_the_harness_imports_is_a_harness_mismatch_naming_it(tmp_path):
    tree, build, _ = _ref_tree(tmp_path / "ref")
    dtypes = tree / "ops" / "dtypes.py"
    dtypes.write_text(dtypes.read_text().replace("def parse_dtypes(", "def parse_dtypes_renamed("))
    worker = ab.Worker("BASE", REPO_ROOT, build, tmp_path / "base.log", ops=tree)
    options = {k: v for k, v in asdict(BenchOptions(quick=True, baseline="fused")).items() if k != "out_dir"}
    try:
        with pytest.raises(ab.HarnessMismatch, match="BASE side lacks .*parse_dtypes"):
            worker.ask({"do": "plan", "options": options, "workdir": str(tmp_path / "cache")})
    finally:
        worker.close()


def test_the_ops_tree_is_never_inherited_by_a_side(monkeypatch, tmp_path):
    monkeypatch.setenv(OPS_ROOT_VARIABLE, "/caller/tree")
    assert OPS_ROOT_VARIABLE not in scratch.side_env(tmp_path / "build")


def test_an_unknown_harness_is_refused():
    with pytest.raises(ab.AbError, match="harness must be 'own' or 'head'"):
        ab.run_ab("HEAD", BenchOptions(quick=True), Console(file=io.StringIO()), harness="theirs")


def _small_repo(root: Path, with_ops: bool) -> str:
    root.mkdir(parents=True)
    if with_ops:
        (root / "ops").mkdir()
        (root / "ops" / "__init__.py").write_text("")
    (root / "README").write_text("x\n")
    scratch.git("init", "--quiet", cwd=root)
    scratch.git("add", "-A", cwd=root)
    scratch.git("commit", "--quiet", "-m", "ref", cwd=root)
    return scratch.git("rev-parse", "HEAD", cwd=root)


@pytest.mark.parametrize("lacks", [False, True])
def test_the_gate_mode_measures_ref_with_heads_harness_and_falls_back_to_refs_own_when_it_lacks(
    tmp_path, monkeypatch, lacks
):
    repo = tmp_path / "repo"
    sha = _small_repo(repo, with_ops=True)
    calls = []

    def measure(sides, *args, **kwargs):
        calls.append(sides)
        if lacks and len(calls) == 1:
            raise ab.HarnessMismatch("the BASE side lacks what this checkout's harness calls: ImportError: x")
        return ab.AbResult(0)

    monkeypatch.setattr(ab, "build_ref", lambda *args: None)
    monkeypatch.setattr(ab, "measure_and_judge", measure)
    monkeypatch.setattr(ab, "_own_worker_refused", lambda *args: "")
    console = Console(file=io.StringIO(), width=250)
    new = ab.Tree(repo, repo / "build")
    result = ab.run_ab(
        sha,
        BenchOptions(quick=True, out_dir=tmp_path / "out"),
        console,
        new=new,
        ref_cache=tmp_path / "c",
        harness=ab.HARNESS_HEAD,
    )
    src = tmp_path / "c" / sha / "src"
    build = src / "build"  # REF's build inside its checkout, where ccache maps its compiles onto this checkout's
    # First HEAD's tree with REF's build and ops; on a mismatch, REF's own tree, said and recorded.
    assert calls[0] == {"NEW": new, "BASE": ab.Tree(repo, build, ops=src)}
    assert len(calls) == (2 if lacks else 1) and result.code == 0
    text = console.file.getvalue()
    if lacks:
        assert calls[1] == {"NEW": new, "BASE": ab.Tree(src, build)}
        assert "lacks what this checkout's harness calls: ImportError: x" in text and "its own harness" in text
        assert "ImportError: x" in next((tmp_path / "out" / "ab").glob("*/harness.txt")).read_text()
    else:
        assert "its own harness" not in text


def test_a_ref_without_an_ops_package_is_measured_by_its_own_harness(tmp_path, monkeypatch):
    repo = tmp_path / "repo"
    sha = _small_repo(repo, with_ops=False)
    calls = []
    monkeypatch.setattr(ab, "build_ref", lambda *args: None)
    monkeypatch.setattr(ab, "measure_and_judge", lambda sides, *a, **k: calls.append(sides) or ab.AbResult(0))
    monkeypatch.setattr(ab, "_own_worker_refused", lambda *args: "")
    console = Console(file=io.StringIO(), width=250)
    ab.run_ab(
        sha,
        BenchOptions(quick=True, out_dir=tmp_path / "out"),
        console,
        new=ab.Tree(repo),
        ref_cache=tmp_path / "c",
        harness=ab.HARNESS_HEAD,
    )
    assert calls == [
        {"NEW": ab.Tree(repo), "BASE": ab.Tree(tmp_path / "c" / sha / "src", tmp_path / "c" / sha / "src" / "build")}
    ]
    assert "BASE has no ops/__init__.py" in console.file.getvalue()
