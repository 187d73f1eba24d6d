#!/usr/bin/env python3
"""Print the pins and variables of environment.lock.yml, using only the standard library.

Bootstrap helper for scripts/create_env.sh (and the Dockerfile), which run
before any package is installed (so no PyYAML). It reads the one shape the
lock uses and refuses anything it does not understand rather than guessing:

    dependencies:            conda specs ``- name=version=build``, then
      - pip:                 a list of ``- name==version`` lines
    cuda-pip:                ``- name==version --hash=sha256:HEX`` lines
    variables:               ``NAME: value`` lines

env/lock/lockfile.py parses the same file with PyYAML, and a test checks both agree.

    lock_pins.py pins [LOCK]              pip list, one requirement per line
    lock_pins.py cuda-pins [LOCK]         cuda-pip list, requirement-file lines with --hash
    lock_pins.py conda-specs [LOCK]       conda specs, name=version=build per line
    lock_pins.py python [LOCK]            the pinned Python version
    lock_pins.py var NAME [LOCK]          value of variables.NAME
    lock_pins.py check-conda [LOCK]       read `micromamba/conda list --json` on stdin;
                                          fail unless it is exactly the conda specs
"""

from __future__ import annotations

import json
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

DEFAULT_LOCK = Path(__file__).resolve().parent.parent / "environment.lock.yml"
PIN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*==[A-Za-z0-9.+!_-]+$")
HASHED_PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*==[A-Za-z0-9.+!_-]+) --hash=sha256:([0-9a-f]{64})$")
CONDA_SPEC = re.compile(r"^([A-Za-z0-9_][A-Za-z0-9._-]*)=([A-Za-z0-9._+!]+)=([A-Za-z0-9._+]+)$")
KNOWN_SECTIONS = ("name", "channels", "dependencies", "pip", "cuda-pip", "variables")


@dataclass
class ParsedLock:
    pins: list[str] = field(default_factory=list)  # "name==version"
    cuda_pins: list[tuple[str, str]] = field(default_factory=list)  # ("name==version", sha256)
    conda: list[tuple[str, str, str]] = field(default_factory=list)  # (name, version, build)
    variables: dict[str, str] = field(default_factory=dict)

    @property
    def python(self) -> str:
        return next((version for name, version, _ in self.conda if name == "python"), "")


def _fail(number: int, raw: str, expected: str) -> SystemExit:
    return SystemExit(f"lock line {number}: expected {expected}, got {raw!r}")


def parse(text: str) -> ParsedLock:
    lock = ParsedLock()
    section = None
    for number, raw in enumerate(text.splitlines(), 1):
        if raw.lstrip().startswith("#") or not raw.strip():
            continue
        line = raw.split(" #", 1)[0].rstrip()
        if not line.startswith(" "):
            key, _, value = line.partition(":")
            section = key.strip()
            if section not in KNOWN_SECTIONS:
                raise _fail(number, raw, f"a top-level key among {KNOWN_SECTIONS}")
            continue
        item = line.strip()
        if section in ("dependencies", "pip") and item == "- pip:":
            section = "pip"
        elif section == "dependencies":
            match = CONDA_SPEC.match(item[2:].strip()) if item.startswith("- ") else None
            if not match:
                raise _fail(number, raw, "'- name=version=build' (an exact conda spec)")
            lock.conda.append(match.groups())
        elif section == "pip":
            pin = item[2:].strip() if item.startswith("- ") else ""
            if not PIN.match(pin):
                raise _fail(number, raw, "'- name==version' (an exact pip pin)")
            lock.pins.append(pin)
        elif section == "cuda-pip":
            match = HASHED_PIN.match(item[2:].strip()) if item.startswith("- ") else None
            if not match:
                raise _fail(number, raw, "'- name==version --hash=sha256:HEX'")
            lock.cuda_pins.append((match.group(1), match.group(2)))
        elif section == "variables":
            key, sep, value = item.partition(":")
            if not sep:
                raise _fail(number, raw, "'NAME: value'")
            lock.variables[key.strip()] = value.strip().strip('"').strip("'")
    if not lock.pins:
        raise SystemExit("the lock has no pip pins")
    if not lock.python:
        raise SystemExit("the lock pins no python=VERSION=BUILD under dependencies")
    return lock


def conda_mismatches(lock: ParsedLock, listed: list[dict]) -> list[str]:
    """Differences between the lock's conda specs and a `conda list --json` (empty: equal)."""
    want = {name: (version, build) for name, version, build in lock.conda}
    have = {p["name"]: (p["version"], p.get("build_string", p.get("build", ""))) for p in listed}
    lines = []
    for name in sorted(want.keys() | have.keys()):
        if name not in have:
            lines.append(f"{name}: lock {'='.join(want[name])}, not installed")
        elif name not in want:
            # pip-installed packages show up with channel "pypi"; they are checked by pip.
            if not any(p["name"] == name and p.get("channel") == "pypi" for p in listed):
                lines.append(f"{name}: installed {'='.join(have[name])}, not in the lock (the solver added it)")
        elif have[name] != want[name]:
            lines.append(f"{name}: lock {'='.join(want[name])}, installed {'='.join(have[name])}")
    return lines


def main(argv: list[str]) -> None:
    commands = ("pins", "cuda-pins", "conda-specs", "python", "var", "check-conda")
    if not argv or argv[0] not in commands:
        raise SystemExit(__doc__)
    cmd, rest = argv[0], argv[1:]
    name = rest.pop(0) if cmd == "var" and rest else None
    if cmd == "var" and name is None:
        raise SystemExit("usage: lock_pins.py var NAME [LOCK]")
    lock_path = Path(rest[0]) if rest else DEFAULT_LOCK
    lock = parse(lock_path.read_text())
    if cmd == "pins":
        print("\n".join(lock.pins))
    elif cmd == "cuda-pins":
        if not lock.cuda_pins:
            raise SystemExit(f"{lock_path} has no cuda-pip list")
        print("\n".join(f"{pin} --hash=sha256:{digest}" for pin, digest in lock.cuda_pins))
    elif cmd == "conda-specs":
        print("\n".join(f"{n}={v}={b}" for n, v, b in lock.conda))
    elif cmd == "python":
        print(lock.python)
    elif cmd == "check-conda":
        problems = conda_mismatches(lock, json.load(sys.stdin))
        if problems:
            raise SystemExit("conda environment differs from the lock:\n  " + "\n  ".join(problems))
        print(f"conda packages match the lock ({len(lock.conda)} exact builds)")
    else:
        if name not in lock.variables:
            raise SystemExit(f"variable {name} is not set in {lock_path}")
        print(lock.variables[name])


if __name__ == "__main__":
    main(sys.argv[1:])
