"""A commit's subject and date, from the repository the reports were made in, where it has that commit.

One ``git cat-file --batch`` process answers every commit at once (a history
of thousands of reports would otherwise start thousands of processes). A
commit the repository lacks (another clone's, a synthetic one) keeps an empty
subject and date.
"""

from __future__ import annotations

import datetime as dt
import subprocess
from collections.abc import Iterable
from pathlib import Path

from env.paths import REPO_ROOT


def split_commit(value: str) -> tuple[str, bool]:
    """'<sha>-dirty' -> (sha, True): the report's commit, and whether the work tree had changes."""
    dirty = value.endswith("-dirty")
    return (value[: -len("-dirty")] if dirty else value), dirty


def describe(shas: Iterable[str], repo: Path = REPO_ROOT) -> dict[str, tuple[str, str]]:
    """sha -> (subject, committer date ISO 8601) for each sha the repository has."""
    shas = [s for s in dict.fromkeys(shas) if s and all(c in "0123456789abcdef" for c in s)]
    if not shas:
        return {}
    try:
        result = subprocess.run(
            ["git", "-C", str(repo), "cat-file", "--batch"],
            input=("\n".join(shas) + "\n").encode(),
            capture_output=True,
            check=False,
            timeout=120,
        )
    except (OSError, subprocess.TimeoutExpired):
        return {}
    return _parse_batch(result.stdout, shas)


def _parse_batch(output: bytes, shas: list[str]) -> dict[str, tuple[str, str]]:
    found, position = {}, 0
    for sha in shas:
        end = output.index(b"\n", position)
        header = output[position:end].decode(errors="replace").split()
        position = end + 1
        if len(header) != 3:  # "<sha> missing" or "ambiguous"
            continue
        size = int(header[2])
        body = output[position : position + size].decode(errors="replace")
        position += size + 1
        if header[1] == "commit":
            found[sha] = _subject_and_date(body)
    return found


def _subject_and_date(body: str) -> tuple[str, str]:
    head, _, message = body.partition("\n\n")
    date = ""
    for line in head.splitlines():
        if line.startswith("committer "):
            parts = line.rsplit(" ", 2)
            seconds, offset = int(parts[1]), parts[2]
            hours, minutes = int(offset[1:3]), int(offset[3:5])
            zone = dt.timezone((-1 if offset[0] == "-" else 1) * dt.timedelta(hours=hours, minutes=minutes))
            date = dt.datetime.fromtimestamp(seconds, zone).isoformat()
    return message.strip().splitlines()[0] if message.strip() else "", date
