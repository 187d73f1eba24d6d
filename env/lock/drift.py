"""`invoke env.check`: every difference between the installed packages and requirements/<variant>.txt.

Both sides are read with the standard libraries: the installed distributions'
metadata with importlib.metadata, the pins with ``packaging`` (lockfile.py).
Versions are compared exactly, local labels included: torch 2.13.0+cpu does
not satisfy the CUDA variant's 2.13.0, although pip and uv would accept it as
"==2.13.0". The Python version comes from the conda part of the lock.
"""

from __future__ import annotations

import platform
import sys
import sysconfig
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

from packaging.utils import canonicalize_name
from packaging.version import Version

from env.lock.lockfile import Lock, LockError, current_variant, read_lock, read_pins, requirements_path

# The project itself, when installed with `pip install .`, is not a pin.
NOT_PINNED = frozenset({"fusedbench"})


class DriftError(LockError):
    """The environment differs from its pins; the message lists every difference."""


@dataclass(frozen=True)
class Drift:
    requirements: Path
    lines: list[str]


def installed_versions() -> dict[str, str]:
    """Canonical name -> version of every distribution installed in the running environment.

    Only the environment's own site-packages are searched, not sys.path: once
    setuptools is imported it appends its private _vendor folder (packaging,
    wheel, jaraco.*, ...) to sys.path, and those copies are not installed.
    """
    paths = sysconfig.get_paths()
    found = metadata.distributions(path=sorted({paths["purelib"], paths["platlib"]}))
    return {canonicalize_name(d.metadata["Name"]): d.version for d in found}


def compare(pinned: dict[str, str], installed: dict[str, str]) -> list[str]:
    """One line per package that is missing, at another version, or installed without a pin."""
    lines = []
    for name in sorted(pinned.keys() | installed.keys() - NOT_PINNED):
        if name not in installed:
            lines.append(f"{name}: pinned {pinned[name]}, not installed")
        elif name not in pinned:
            lines.append(f"{name}: installed {installed[name]}, not pinned")
        elif Version(installed[name]) != Version(pinned[name]):
            lines.append(f"{name}: pinned {pinned[name]}, installed {installed[name]}")
    return lines


def drift(
    lock: Lock | None = None,
    variant: str | None = None,
    installed: dict[str, str] | None = None,
    python_version: str | None = None,
) -> Drift:
    """Every difference between the environment and the lock + requirements of ``variant``."""
    lock = lock or read_lock()
    requirements = requirements_path(variant or current_variant())
    pinned = {name: pin.version for name, pin in read_pins(requirements).items()}
    python_version = python_version or platform.python_version()
    lines = [] if python_version == lock.python else [f"python: lock {lock.python}, running {python_version}"]
    return Drift(requirements, lines + compare(pinned, installed_versions() if installed is None else installed))


def check() -> str:
    """One line saying the environment matches; DriftError listing every difference otherwise."""
    found = drift()
    name = f"requirements/{found.requirements.name}"
    if found.lines:
        listed = "\n".join(f"  {line}" for line in found.lines)
        raise DriftError(f"the environment drifts from {name}:\n{listed}\n- run scripts/create_env.sh to re-sync")
    return f"environment matches {name} (python {platform.python_version()}, {len(installed_versions())} packages)"


def main() -> int:
    """`python -m env.lock.drift`: what scripts/create_env.sh runs after installing."""
    try:
        print(check())
    except LockError as error:
        print(error, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
