"""README.md and docs/*.md: every repository path, module, link and invoke task (with its options) they name exists."""

from __future__ import annotations

import glob
import re
import subprocess
import sys
from pathlib import Path

import pytest

from env.paths import REPO_ROOT

DOCUMENTS = [REPO_ROOT / "README.md", *sorted((REPO_ROOT / "docs").glob("*.md"))]
README_MAX_LINES = 250

# Where repository paths start; build outputs (build/), the environment (.venv) and
# machine paths (/sys, ~/.cache) are not in the repository and are not checked.
_TOP = r"(?:csrc|ops|bench|env|scripts|tests|docs|reports|requirements|\.ci|\.github)"
_PATH = re.compile(rf"(?<![\w./~$-]){_TOP}/[\w./{{}},*-]*")
_ROOT_FILES = (
    "tasks.py",
    "setup.py",
    "pyproject.toml",
    "environment.lock.yml",
    "Dockerfile",
    ".clang-format",
    ".hadolint.yaml",
    ".dockerignore",
    ".gitignore",
)
_LINK = re.compile(r"\]\(([^)\s]+)\)")
_PACKAGE = r"((?:ops|bench|env|tests)(?:\.\w+)*)"
_IMPORT = re.compile(rf"^\s*(?:from\s+{_PACKAGE}\s+import|import\s+{_PACKAGE})", re.M)
# `invoke NAME ...` or `with_env.sh NAME ...`, up to the end of the code span, the line or a comment.
_COMMAND = re.compile(r"(?:\binvoke|with_env\.sh|docker\.run\s+--)\s+([a-z][\w.-]*)([^`\n#|]*)")


def _text(doc: Path) -> str:
    return doc.read_text(encoding="utf-8")


def code(text: str) -> list[str]:
    """The fenced blocks and inline code spans: where commands are written (prose may say "invoke a task")."""
    fenced = re.findall(r"^```[^\n]*\n(.*?)^```", text, re.M | re.S)
    rest = re.sub(r"^```[^\n]*\n.*?^```", "", text, flags=re.M | re.S)
    return fenced + re.findall(r"`([^`]+)`", rest)


def _expand(path: str) -> list[str]:
    """``a/{b,c}.py`` -> ``a/b.py``, ``a/c.py``."""
    match = re.search(r"\{([^{}]*)\}", path)
    if not match:
        return [path]
    return [
        e for part in match.group(1).split(",") for e in _expand(path[: match.start()] + part + path[match.end() :])
    ]


def _exists(path: str) -> bool:
    path = path.rstrip(".,;:")
    if "*" in path:
        return bool(glob.glob(str(REPO_ROOT / path)))
    return (REPO_ROOT / path).exists()


def mentioned_paths(text: str) -> set[str]:
    # A path that continues with a <placeholder> names something a run writes, not a file of the repository.
    raws = [m.group(0) for m in _PATH.finditer(text) if not text.startswith("<", m.end())]
    paths = {p for raw in raws for p in _expand(raw.rstrip(".,;:"))}
    paths |= {name for name in _ROOT_FILES if re.search(rf"(?<![\w/.-]){re.escape(name)}(?![\w-])", text)}
    return {p for p in paths if "<" not in p and not p.endswith(".so")}


def layout_paths(text: str) -> set[str]:
    """The README's layout block: each file named on a folder's lines, under that folder."""
    block = re.search(r"## Layout\n+```\n(.*?)```", text, re.S)
    if not block:
        return set()
    paths, folder = set(), ""
    for line in block.group(1).splitlines():
        if line and not line[0].isspace():
            folder = line.split()[0]
        if folder.endswith("/"):
            paths |= {folder + name for name in re.findall(r"(?<![\w/.])([\w-]+\.(?:py|sh|cc|cu|h))\b", line)}
    return paths


def tasks() -> dict[str, set[str]]:
    """Every task name users can type (aliases included) -> its long option names."""
    from tasks import ns

    options: dict[str, set[str]] = {}
    for name in ns.task_names:
        task = ns[name]
        # The names invoke parses (`all_` is typed `--all`), not the Python parameters.
        flags = {n.replace("_", "-") for arg in task.get_arguments() for n in arg.names if len(n) > 1}
        for alias in (name, *ns.task_names[name]):
            options[alias] = flags | {"help"}
    return options


@pytest.mark.parametrize("doc", DOCUMENTS, ids=lambda d: d.relative_to(REPO_ROOT).as_posix())
def test_every_path_named_exists(doc):
    text = _text(doc)
    named = mentioned_paths(text) | (layout_paths(text) if doc.name == "README.md" else set())
    missing = sorted(p for p in named if not _exists(p))
    assert not missing, f"{doc.name} names paths that do not exist: {missing}"


@pytest.mark.parametrize("doc", DOCUMENTS, ids=lambda d: d.relative_to(REPO_ROOT).as_posix())
def test_every_link_and_module_resolves(doc):
    text, problems = _text(doc), []
    for target in _LINK.findall(text):
        if re.match(r"[a-z]+://", target):
            continue
        file, _, anchor = target.partition("#")
        linked = (doc.parent / file).resolve() if file else doc
        if not linked.exists():
            problems.append(f"link {target}: no such file")
        elif anchor and anchor not in _anchors(linked.read_text(encoding="utf-8")):
            problems.append(f"link {target}: no heading with that anchor in {linked.name}")
    for groups in _IMPORT.findall(text):
        module = next(g for g in groups if g)
        base = REPO_ROOT / module.replace(".", "/")
        if not (base.with_suffix(".py").exists() or (base / "__init__.py").exists()):
            problems.append(f"module {module}: no such file")
    assert not problems, f"{doc.name}: " + "; ".join(problems)


def _uncommented(piece: str) -> str:
    return re.sub(r"(^|\s)#.*$", "", piece, flags=re.M)


def _anchors(markdown: str) -> set[str]:
    """GitHub's heading anchors: lower case, punctuation dropped, spaces to hyphens."""
    headings = re.findall(r"^#+\s+(.+)$", markdown, re.M)
    return {re.sub(r"[^\w\- ]", "", h.strip().lower()).replace(" ", "-") for h in headings}


@pytest.mark.parametrize("doc", DOCUMENTS, ids=lambda d: d.relative_to(REPO_ROOT).as_posix())
def test_every_invoke_task_and_option_named_exists(doc):
    known, problems = tasks(), []
    commands = [c for piece in code(_text(doc)) for c in _COMMAND.findall(_uncommented(piece))]
    assert commands or doc.name in ("variables.md",), f"{doc.name} names no task: is the pattern still right?"
    for name, rest in commands:
        if name not in known:
            problems.append(f"task {name!r}")
            continue
        own = rest.split(" -- ")[0]
        flags = re.findall(r"(?<![\w-])--([a-z][\w-]*)", own)
        problems += [f"{name} --{flag}" for flag in flags if flag not in known[name]]
    assert not problems, f"{doc.name} names tasks or options that do not exist: {problems}"


def test_readme_fits_a_screen_and_links_every_document():
    readme = _text(REPO_ROOT / "README.md")
    assert len(readme.splitlines()) <= README_MAX_LINES
    linked = set(_LINK.findall(readme))
    unlinked = [d.name for d in DOCUMENTS[1:] if f"docs/{d.name}" not in linked]
    assert not unlinked, f"README.md does not link {unlinked}"


def test_the_checks_find_what_is_missing(tmp_path):
    # The patterns above must catch a wrong path, a wrong task and a wrong option, or the tests prove nothing.
    text = "See `bench/nope.py`, csrc/core/{fused_norm.h,gone.h} and `invoke bench --no-such-flag`; `invoke nope`."
    assert {"bench/nope.py", "csrc/core/gone.h", "csrc/core/fused_norm.h"} <= mentioned_paths(text)
    assert not _exists("bench/nope.py") and not _exists("csrc/core/gone.h") and _exists("csrc/core/fused_norm.h")
    block = "\n```\ninvoke ort.client --x  # invoke not-this\n```\n"
    found = [c for piece in code(text + block) for c in _COMMAND.findall(_uncommented(piece))]
    assert found == [("ort.client", " --x "), ("bench", " --no-such-flag"), ("nope", "")]
    assert "no-such-flag" not in tasks()["bench"] and "baseline" in tasks()["bench"]
    assert layout_paths("## Layout\n\n```\nbench/   run.py (x), nope.py\n         verify.py\n```") == {
        "bench/run.py",
        "bench/nope.py",
        "bench/verify.py",
    }


def test_every_variable_the_code_reads_is_in_the_table():
    listed = _text(REPO_ROOT / "docs" / "variables.md")
    files = subprocess.run(["git", "ls-files"], cwd=REPO_ROOT, capture_output=True, text=True, check=True)
    tracked = files.stdout.split()
    sources = [REPO_ROOT / f for f in tracked if not f.endswith(".md") and (REPO_ROOT / f).is_file()]
    used = {v for path in sources for v in re.findall(r"FUSEDBENCH_[A-Z0-9_]+", path.read_text(errors="replace"))}
    assert used, "no FUSEDBENCH_ variable found: is the pattern still right?"
    missing = sorted(v for v in used if f"`{v}`" not in listed)
    assert not missing, f"docs/variables.md has no row for {missing}"


def test_the_baseline_option_lists_every_registered_baseline():
    # The names are typed from the help text; a baseline added without it there is one users cannot find.
    # Read from `invoke bench --help`: building a task's arguments pops its help entries, so the
    # in-process `Task.help` is empty once another test has listed the options.
    from bench.plan.registry import all_baselines

    shown = subprocess.run(
        [sys.executable, "-m", "invoke", "bench", "--help"], cwd=REPO_ROOT, capture_output=True, text=True, timeout=300
    )
    assert shown.returncode == 0, shown.stderr
    lines = shown.stdout.splitlines()
    start = next(i for i, line in enumerate(lines) if "--baseline" in line)
    end = next((i for i in range(start + 1, len(lines)) if lines[i].lstrip().startswith("-")), len(lines))
    listed = " ".join(lines[start:end]).split(":")[-1]
    assert [name.strip() for name in listed.split(",")] == list(all_baselines())
