"""environment.lock.yml: read it, and compare the running environment with it."""

from __future__ import annotations

import platform
import re
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

import yaml
from packaging.utils import canonicalize_name
from packaging.version import Version

from env.paths import REPO_ROOT

LOCK_PATH = REPO_ROOT / "environment.lock.yml"


@dataclass(frozen=True)
class Lock:
    python: str
    pins: dict[str, str]  # canonical name -> exact version
    variables: dict[str, str]
    path: Path


class LockError(ValueError):
    """The lock file is malformed (not a conda env file with exact pip pins)."""


def read_lock(path: Path = LOCK_PATH) -> Lock:
    data = yaml.safe_load(path.read_text())
    if not isinstance(data, dict) or "dependencies" not in data:
        raise LockError(f"{path}: not a conda environment file (no 'dependencies')")
    python, pip_list = None, None
    for dep in data["dependencies"]:
        if isinstance(dep, str) and dep.startswith("python="):
            python = dep.split("=", 1)[1]
        elif isinstance(dep, dict) and "pip" in dep:
            pip_list = dep["pip"]
    if python is None or pip_list is None:
        raise LockError(f"{path}: needs 'python=X.Y.Z' and a 'pip:' list under dependencies")
    pins: dict[str, str] = {}
    for entry in pip_list:
        match = re.fullmatch(r"([A-Za-z0-9][A-Za-z0-9._-]*)==(\S+)", str(entry).strip())
        if not match:
            raise LockError(f"{path}: {entry!r} is not an exact 'name==version' pin")
        pins[canonicalize_name(match.group(1))] = match.group(2)
    variables = {str(k): str(v) for k, v in (data.get("variables") or {}).items()}
    return Lock(python=python, pins=pins, variables=variables, path=path)


def installed_versions() -> dict[str, str]:
    """Canonical name -> version of every distribution in the running environment."""
    return {canonicalize_name(d.metadata["Name"]): d.version for d in metadata.distributions()}


def _same_version(pinned: str, installed: str) -> bool:
    # A local label is a build variant of the same release (torch 2.13.0+cpu
    # here, the CUDA wheel in the image): `==2.13.0` admits both, as pip does.
    return Version(installed).public == Version(pinned).public if "+" not in pinned else installed == pinned


def drift(lock: Lock, installed: dict[str, str] | None = None, python_version: str | None = None,
          ignore: frozenset[str] = frozenset({"fusedbench"})) -> list[str]:
    """Every difference between the lock and the environment, one line each (empty: no drift)."""
    installed = installed_versions() if installed is None else installed
    python_version = python_version or platform.python_version()
    lines = []
    if python_version != lock.python:
        lines.append(f"python: lock {lock.python}, running {python_version}")
    for name, version in sorted(lock.pins.items()):
        if name not in installed:
            lines.append(f"{name}: lock {version}, not installed")
        elif not _same_version(version, installed[name]):
            lines.append(f"{name}: lock {version}, installed {installed[name]}")
    for name in sorted(set(installed) - set(lock.pins) - ignore):
        lines.append(f"{name}: installed {installed[name]}, not in the lock")
    return lines
