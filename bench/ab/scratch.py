"""Source trees and builds apart from this checkout: git calls, REF checkouts, scratch repositories, isolated builds.

Everything that compares builds needs the same few steps: check a commit out
somewhere without touching this repository, make a throwaway repository from
this checkout (to commit a deliberate change on top), and build a tree into its
own folder so no build sees another's libraries. `bench --against`, the
measurement of its error rates (bench/experiments/ab_measure.py) and the A/B tests all use
these functions.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from bench.processes.worker import OPS_ROOT_VARIABLE
from env.builder.config import (
    CORE_VERSIONS_VARIABLE,
    SLOWDOWN_TABLE_VARIABLE,
    SLOWDOWN_VARIABLE,
    benchmark_core_versions,
)
from env.builder.cuda import SKIP_VARIABLE
from env.paths import REPO_ROOT

# Variables that point a process at one build's outputs or sources: a side's process gets its own, never the caller's.
BUILD_VARIABLES = (
    "FUSEDBENCH_BUILD_DIR",
    "FUSEDBENCH_TORCH_LIBRARY",
    "FUSEDBENCH_ORT_LIBRARY",
    "FUSEDBENCH_CSRC_DIR",
    "PYTHONPATH",
    OPS_ROOT_VARIABLE,  # whose ops package a worker measures: set per side by the driver
    SLOWDOWN_VARIABLE,  # a slowed build is asked for by name (build's variables), never inherited
    SLOWDOWN_TABLE_VARIABLE,
)
_IDENTITY = ("-c", "user.name=fusedbench", "-c", "user.email=fusedbench@localhost.invalid")


class ScratchError(RuntimeError):
    """A git call or a build failed; the message says which and why."""


def git(*args: str, cwd: Path = REPO_ROOT) -> str:
    """``git ARGS`` in ``cwd`` (commits get a fixed identity); its stdout, or ScratchError with its stderr."""
    result = subprocess.run(["git", *_IDENTITY, *args], check=False, cwd=cwd, capture_output=True, text=True)
    if result.returncode:
        raise ScratchError(f"`git {' '.join(args)}` in {cwd} failed: {result.stderr.strip()}")
    return result.stdout.strip()


def clean_checkout_of(src: Path, sha: str) -> bool:
    """Whether ``src`` is a checkout of ``sha`` with no change to a tracked file."""
    try:
        return git("rev-parse", "HEAD", cwd=src) == sha and not git(
            "status", "--porcelain", "--untracked-files=no", cwd=src
        )
    except ScratchError:
        return False


def checkout(sha: str, src: Path, repo: Path = REPO_ROOT) -> Path:
    """Commit ``sha`` of ``repo`` at ``src``: reused when it is that commit, untouched; else cloned afresh.

    A ``git clone --shared`` borrows the objects and writes nothing into ``repo``
    (``git worktree add`` would register the tree there and leave a stale entry
    when interrupted). It is cloned to a temporary name and renamed, so a half
    clone is never reused.
    """
    if src.is_dir():
        if clean_checkout_of(src, sha):
            return src
        shutil.rmtree(src)
    partial = src.with_name(src.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    src.parent.mkdir(parents=True, exist_ok=True)
    git("clone", "--quiet", "--shared", "--no-checkout", str(repo), str(partial))
    git("checkout", "--quiet", "--detach", sha, cwd=partial)
    partial.rename(src)
    return src


def snapshot(dest: Path, source: Path = REPO_ROOT, message: str = "clean") -> str:
    """A new repository at ``dest`` whose one commit is ``source``'s work tree as it is; returns the commit.

    Tracked and untracked-but-not-ignored files are copied (what a commit of the
    work tree would hold), so uncommitted changes are measured too.
    """
    listed = subprocess.run(
        ["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=source, capture_output=True, check=True
    ).stdout
    for name in filter(None, listed.decode().split("\0")):
        path = source / name
        if path.is_file() and not path.is_symlink():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(path, dest / name)
    git("init", "--quiet", cwd=dest)
    git("add", "--force", "-A", cwd=dest)  # --force: env/builder/ is tracked although .gitignore names build/
    git("commit", "--quiet", "-m", message, cwd=dest)
    return git("rev-parse", "HEAD", cwd=dest)


def commit_change(repo: Path, path: str, text: str, message: str) -> str:
    """Write ``text`` to ``repo/path`` and commit it; returns the new commit."""
    (repo / path).write_text(text)
    git("commit", "--quiet", "-am", message, cwd=repo)
    return git("rev-parse", "HEAD", cwd=repo)


def side_env(build: Path | None) -> dict[str, str]:
    """The environment of a process working on one tree.

    With ``build``, only that build is visible (no library, source or build
    folder of the caller's leaks in); without, the caller's environment as it is
    (this checkout, run as a plain `invoke bench` would run).
    """
    env = dict(os.environ)
    if build is not None:
        env = {k: v for k, v in env.items() if k not in BUILD_VARIABLES}
        env["FUSEDBENCH_BUILD_DIR"] = str(build)
    return env


def build(tree: Path, build_dir: Path, log: Path, variables: dict[str, str] | None = None) -> None:
    """``tree``'s own `invoke build` into ``build_dir``, output to ``log``; ScratchError with its tail on failure.

    ``variables``: set for the build alone (an experiment's slowdown switch, env/builder/config.py). Its kernel
    core holds the versions a benchmark's build of this checkout holds (config.benchmark_core_versions), so the two
    sides of a comparison are built alike; a tree from before that choice existed builds all its versions.
    """
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "w") as out:
        result = subprocess.run(
            [sys.executable, "-m", "invoke", "build"],
            check=False,
            cwd=tree,
            # Its libraries, not its CUDA check: the check builds nothing a benchmark loads.
            env={
                **side_env(build_dir),
                SKIP_VARIABLE: "1",
                CORE_VERSIONS_VARIABLE: benchmark_core_versions(),
                **(variables or {}),
            },
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    if result.returncode:
        tail = "".join(log.read_text(errors="replace").splitlines(keepends=True)[-15:])
        raise ScratchError(f"building {tree} failed (exit {result.returncode}); last lines of {log}:\n{tail}")
