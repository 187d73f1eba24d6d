"""Where the pins live and how to read them: environment.lock.yml and requirements/<variant>.txt.

environment.lock.yml is a conda environment file: the exact Python build and
its native libraries, then a pip section that installs
requirements/<variant>.txt, and `variables:` (TORCH_CUDA_ARCH_LIST).
requirements/cpu.txt and cuda.txt are hashed pip requirements files compiled
by uv from the .in files beside them (env/lock/compile.py).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import yaml
from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

from env.paths import REPO_ROOT

LOCK_PATH = REPO_ROOT / "environment.lock.yml"
REQUIREMENTS_DIR = REPO_ROOT / "requirements"
VARIANTS = ("cpu", "cuda")
VARIANT_ENV = "FUSEDBENCH_TORCH_VARIANT"


class LockError(ValueError):
    """A pin file is malformed or missing, or cannot be regenerated."""


@dataclass(frozen=True)
class Lock:
    """The conda part of environment.lock.yml."""

    path: Path
    python: str  # the exact Python version, e.g. "3.11.7"
    variables: dict[str, str]


@dataclass(frozen=True)
class Pin:
    version: str
    hashes: frozenset[str]  # "sha256:<hex>" of each file the pin admits


def check_variant(variant: str) -> str:
    if variant not in VARIANTS:
        raise LockError(f"{VARIANT_ENV} must be one of {VARIANTS}, got {variant!r}")
    return variant


def current_variant() -> str:
    """cpu (default) or cuda (the Docker image sets FUSEDBENCH_TORCH_VARIANT=cuda)."""
    return check_variant(os.environ.get(VARIANT_ENV, "cpu"))


def requirements_path(variant: str) -> Path:
    return REQUIREMENTS_DIR / f"{check_variant(variant)}.txt"


def read_lock(path: Path = LOCK_PATH) -> Lock:
    data = yaml.safe_load(path.read_text())
    if not isinstance(data, dict) or not isinstance(data.get("dependencies"), list):
        raise LockError(f"{path}: not a conda environment file (no 'dependencies' list)")
    python = [str(d) for d in data["dependencies"] if str(d).startswith("python=")]
    parts = python[0].split("=") if len(python) == 1 else []
    if len(parts) != 3:
        raise LockError(f"{path}: needs exactly one 'python=VERSION=BUILD' dependency, found {python}")
    variables = {str(k): str(v) for k, v in (data.get("variables") or {}).items()}
    return Lock(path=path, python=parts[1], variables=variables)


def read_pins(path: Path) -> dict[str, Pin]:
    """Canonical name -> exact pin of a hashed requirements file.

    Reads the standard format (backslash continuations, ``--hash`` options,
    comments) with ``packaging``; refuses anything but ``name==version`` with
    at least one hash, which is what ``pip install --require-hashes`` demands.
    """
    text = path.read_text().replace("\\\n", " ")
    pins: dict[str, Pin] = {}
    for line in text.splitlines():
        line = line.split(" #", 1)[0].strip()
        if not line or line.startswith("#"):
            continue
        spec, *options = line.split(" --hash=")
        try:
            requirement = Requirement(spec)
        except InvalidRequirement as error:
            raise LockError(f"{path.name}: {line[:60]!r} is not a requirement ({error})") from error
        specifiers = list(requirement.specifier)
        if len(specifiers) != 1 or specifiers[0].operator != "==" or not options:
            raise LockError(f"{path.name}: {spec.strip()!r} must be an exact 'name==version' pin with --hash")
        pins[canonicalize_name(requirement.name)] = Pin(specifiers[0].version, frozenset(o.strip() for o in options))
    if not pins:
        raise LockError(f"{path}: no pins")
    return pins
