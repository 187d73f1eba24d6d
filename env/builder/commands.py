"""Running one build command: its whole output to a log file, a BuildError with the log's tail on failure."""

from __future__ import annotations

import subprocess
from pathlib import Path

from env.paths import REPO_ROOT


class BuildError(RuntimeError):
    """A compile step failed; the message carries the log's tail and its path."""


def run_logged(cmd: list[str], log_path: Path, cwd: Path = REPO_ROOT, env: dict | None = None) -> None:
    """Run ``cmd`` with stdout+stderr written to ``log_path``; raise BuildError on failure."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with log_path.open("w") as log:
        log.write("$ " + " ".join(cmd) + "\n")
        log.flush()
        proc = subprocess.run(cmd, cwd=cwd, stdout=log, stderr=subprocess.STDOUT, env=env, check=False)
    if proc.returncode != 0:
        tail = "\n".join(log_path.read_text(errors="replace").splitlines()[-60:])
        raise BuildError(f"{cmd[0]} failed (exit {proc.returncode}); last lines of {log_path}:\n{tail}")
