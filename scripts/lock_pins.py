#!/usr/bin/env python3
"""Print the pip pins and variables of environment.lock.yml, using only the standard library.

Bootstrap helper for scripts/create_env.sh, which runs before any package is
installed (so no PyYAML). It reads the one shape the lock uses (a ``- pip:``
list of ``name==version`` lines, a ``variables:`` mapping) and refuses
anything it does not understand rather than guessing. env/lock.py parses the
same file with PyYAML, and a test checks both agree.

    lock_pins.py pins [LOCK]              one requirement per line
    lock_pins.py var NAME [LOCK]          value of variables.NAME
    lock_pins.py python [LOCK]            the pinned Python version
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

DEFAULT_LOCK = Path(__file__).resolve().parent.parent / "environment.lock.yml"
PIN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*==[A-Za-z0-9.+!_-]+$")


def parse(text: str) -> tuple[list[str], dict[str, str], str]:
    pins: list[str] = []
    variables: dict[str, str] = {}
    python = ""
    section = None
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.split("#", 1)[0].rstrip() if not raw.lstrip().startswith("#") else ""
        if not line.strip():
            continue
        if not line.startswith(" "):
            section = line.rstrip(":").strip()
            continue
        item = line.strip()
        if section == "dependencies":
            if item == "- pip:":
                section = "pip"
            elif m := re.fullmatch(r"- python=(\S+)", item):
                python = m.group(1)
        elif section == "pip":
            if not item.startswith("- "):
                raise SystemExit(f"lock line {number}: expected '- name==version', got {raw!r}")
            pin = item[2:].strip()
            if not PIN.match(pin):
                raise SystemExit(f"lock line {number}: {pin!r} is not an exact 'name==version' pin")
            pins.append(pin)
        elif section == "variables":
            key, _, value = item.partition(":")
            variables[key.strip()] = value.strip().strip('"').strip("'")
    if not pins:
        raise SystemExit("the lock has no pip pins")
    return pins, variables, python


def main(argv: list[str]) -> None:
    if not argv or argv[0] not in ("pins", "var", "python"):
        raise SystemExit(__doc__)
    cmd = argv[0]
    rest = argv[1:]
    name = rest.pop(0) if cmd == "var" else None
    lock = Path(rest[0]) if rest else DEFAULT_LOCK
    pins, variables, python = parse(lock.read_text())
    if cmd == "pins":
        print("\n".join(pins))
    elif cmd == "python":
        print(python)
    else:
        if name not in variables:
            raise SystemExit(f"variable {name} is not set in {lock}")
        print(variables[name])


if __name__ == "__main__":
    main(sys.argv[1:])
