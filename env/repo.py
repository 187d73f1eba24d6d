"""Facts about the checkout itself."""

from __future__ import annotations

import subprocess
from pathlib import Path

from env.paths import REPO_ROOT


def git_commit(repo: Path = REPO_ROOT) -> str:
    """HEAD's hash, with "-dirty" when tracked files differ from it; "unknown" outside a git checkout."""
    try:
        commit = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=repo, capture_output=True, text=True, check=True
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            cwd=repo,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return commit + ("-dirty" if dirty else "")
