"""Content hashes of a build step's inputs, so that an unchanged step is skipped.

A step's key hashes the *contents* of its sources and of every project header
they include (followed transitively, as the compiler would find them), its
flags, and the toolchain facts it depends on. Timestamps are not used: a
checkout, a copy or ``touch`` that changes no byte does not rebuild anything,
and any changed byte does.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any

_INCLUDE = re.compile(r'^\s*#\s*include\s*([<"])([^>"]+)[>"]', re.M)


def include_closure(sources: Iterable[Path], include_dirs: Iterable[Path]) -> list[Path]:
    """``sources`` and every file they include that exists under the current folder or ``include_dirs``.

    Includes that resolve nowhere there (``<vector>``, ``<torch/library.h>``)
    belong to the toolchain and are covered by its facts instead.
    """
    include_dirs = [Path(d) for d in include_dirs]
    seen: dict[Path, None] = {}
    pending = [Path(s).resolve() for s in sources]
    while pending:
        path = pending.pop()
        if path in seen or not path.is_file():
            continue
        seen[path] = None
        for quote, name in _INCLUDE.findall(path.read_text(errors="replace")):
            # "x.h" is looked up beside the including file first, <x.h> only on the include path.
            candidates = ([path.parent] if quote == '"' else []) + include_dirs
            found = next((c / name for c in candidates if (c / name).is_file()), None)
            if found is not None:
                pending.append(found.resolve())
    return sorted(seen)


def files_digest(files: Iterable[Path], root: Path) -> dict[str, str]:
    """sha256 of each file, keyed by its path relative to ``root`` (so a copied tree hashes the same)."""
    digests = {}
    for path in files:
        path = Path(path)
        try:
            name = path.relative_to(root).as_posix()
        except ValueError:
            name = str(path)
        digests[name] = hashlib.sha256(path.read_bytes()).hexdigest()
    return digests


def text_digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def key_of(inputs: dict[str, Any]) -> str:
    """One hash for a step's inputs (any JSON-serialisable description)."""
    return text_digest(json.dumps(inputs, sort_keys=True, default=str))


def changed_inputs(before: dict[str, Any] | None, now: dict[str, Any]) -> list[str]:
    """The input groups that differ, with the entries that differ inside each ("sources: core/x.h")."""
    if not before:
        return ["no earlier build"]
    changed = []
    for group in sorted(set(before) | set(now)):
        old, new = before.get(group), now.get(group)
        if old == new:
            continue
        if isinstance(old, dict) and isinstance(new, dict):
            entries = sorted(k for k in set(old) | set(new) if old.get(k) != new.get(k))
            changed.append(f"{group}: {' '.join(entries)}")
        else:
            changed.append(group)
    return changed
