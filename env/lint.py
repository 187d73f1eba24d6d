"""``invoke lint``: ruff (lint and format) over the Python files, clang-format over the C++/CUDA ones.

The rules are in pyproject.toml ([tool.ruff]) and .clang-format. Both tools are
pinned in requirements/*.in and run from the environment's own bin folder, so
the versions that check are the locked ones.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from env.paths import REPO_ROOT

# What clang-format owns: every tracked C++ and CUDA source and header.
CXX_PATTERNS = ("*.c", "*.cc", "*.cpp", "*.cu", "*.cuh", "*.h", "*.hpp")


class LintError(Exception):
    """A tool is missing or the file list cannot be read; the message says which."""


@dataclass(frozen=True)
class Check:
    name: str
    command: list[str]


def tool(name: str) -> str:
    """``name`` from the running environment's bin folder, else from PATH."""
    beside = Path(sys.executable).parent / name
    if beside.is_file():
        return str(beside)
    if found := shutil.which(name):
        return found
    raise LintError(f"{name} is not installed - it is pinned in requirements/*.in; recreate the environment")


def cxx_files(repo: Path = REPO_ROOT) -> list[str]:
    """The tracked C++/CUDA files, relative to ``repo``."""
    done = subprocess.run(["git", "ls-files", "--", *CXX_PATTERNS], cwd=repo, capture_output=True, text=True)
    if done.returncode != 0:
        raise LintError(f"git ls-files failed in {repo}: {done.stderr.strip()}")
    return done.stdout.split()


def checks(fix: bool, repo: Path = REPO_ROOT) -> list[Check]:
    """The commands, in order; with ``fix`` each one rewrites the files instead of reporting."""
    ruff, clang_format = tool("ruff"), tool("clang-format")
    cxx = cxx_files(repo)
    if fix:
        return [
            Check("ruff check --fix", [ruff, "check", "--fix", "."]),
            Check("ruff format", [ruff, "format", "."]),
            Check("clang-format -i", [clang_format, "-i", *cxx]),
        ]
    return [
        Check("ruff check", [ruff, "check", "."]),
        Check("ruff format --check", [ruff, "format", "--check", "."]),
        Check("clang-format --dry-run", [clang_format, "--dry-run", "-Werror", *cxx]),
    ]


def lint(fix: bool = False, repo: Path = REPO_ROOT) -> list[str]:
    """Run every check (all of them, even after a failure); return the names of those that failed."""
    failed = []
    for check in checks(fix, repo):
        print(f"== {check.name}", flush=True)
        if subprocess.run(check.command, cwd=repo).returncode != 0:
            failed.append(check.name)
    return failed
