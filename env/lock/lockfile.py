"""environment.lock.yml: read it, compare the running environment with it, regenerate it.

The lock has three lists (see its header): the conda specs (Python and its
native libraries, exact builds), the pip list every machine installs, and the
``cuda-pip`` list (hashed) that only the CUDA variant installs on top.
scripts/lock_pins.py reads the same file without PyYAML; a test checks both
parsers agree.
"""

from __future__ import annotations

import hashlib
import os
import platform
import re
import subprocess
import sys
import sysconfig
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path

import yaml
from packaging.utils import canonicalize_name
from packaging.version import Version

from env.files import write_text_atomic
from env.paths import REPO_ROOT

LOCK_PATH = REPO_ROOT / "environment.lock.yml"
CUDA_SECTION = "cuda-pip"
VARIANTS = ("cpu", "cuda")
VARIANT_ENV = "FUSEDBENCH_TORCH_VARIANT"
# Distributions that are the project itself, never pinned.
NOT_PINNED = frozenset({"fusedbench"})

_PIN = re.compile(r"([A-Za-z0-9][A-Za-z0-9._-]*)==(\S+)")
_HASHED_PIN = re.compile(r"([A-Za-z0-9][A-Za-z0-9._-]*)==(\S+) --hash=sha256:([0-9a-f]{64})")
_CONDA_SPEC = re.compile(r"([A-Za-z0-9_][A-Za-z0-9._-]*)=([A-Za-z0-9._+!]+)=([A-Za-z0-9._+]+)")


@dataclass(frozen=True)
class Lock:
    python: str
    pins: dict[str, str]  # canonical name -> exact version (every machine)
    variables: dict[str, str]
    path: Path
    conda: dict[str, tuple[str, str]] = field(default_factory=dict)  # name -> (version, build)
    cuda_pins: dict[str, str] = field(default_factory=dict)  # canonical name -> version (CUDA variant)
    cuda_hashes: dict[str, str] = field(default_factory=dict)  # canonical name -> sha256 of the wheel

    def expected(self, variant: str) -> dict[str, str]:
        """Canonical name -> version that an environment of ``variant`` must hold."""
        check_variant(variant)
        return {**self.pins, **self.cuda_pins} if variant == "cuda" else dict(self.pins)


class LockError(ValueError):
    """The lock file is malformed, or cannot be regenerated from this environment."""


def check_variant(variant: str) -> str:
    if variant not in VARIANTS:
        raise LockError(f"{VARIANT_ENV} must be one of {VARIANTS}, got {variant!r}")
    return variant


def current_variant() -> str:
    """cpu (default) or cuda (the Docker image sets FUSEDBENCH_TORCH_VARIANT=cuda)."""
    return check_variant(os.environ.get(VARIANT_ENV, "cpu"))


def read_lock(path: Path = LOCK_PATH) -> Lock:
    return parse_lock(path.read_text(), path)


def parse_lock(text: str, path: Path = LOCK_PATH) -> Lock:
    """Parse the lock's text (``path`` only names it in errors and in the result)."""
    data = yaml.safe_load(text)
    if not isinstance(data, dict) or "dependencies" not in data:
        raise LockError(f"{path}: not a conda environment file (no 'dependencies')")
    conda: dict[str, tuple[str, str]] = {}
    pip_list = None
    for dep in data["dependencies"]:
        if isinstance(dep, dict) and "pip" in dep:
            pip_list = dep["pip"]
            continue
        match = _CONDA_SPEC.fullmatch(str(dep).strip())
        if not match:
            raise LockError(f"{path}: conda dependency {dep!r} is not an exact 'name=version=build' spec")
        conda[match.group(1)] = (match.group(2), match.group(3))
    if "python" not in conda or pip_list is None:
        raise LockError(f"{path}: needs 'python=X.Y.Z=BUILD' and a 'pip:' list under dependencies")
    pins: dict[str, str] = {}
    for entry in pip_list:
        match = _PIN.fullmatch(str(entry).strip())
        if not match:
            raise LockError(f"{path}: {entry!r} is not an exact 'name==version' pin")
        pins[canonicalize_name(match.group(1))] = match.group(2)
    cuda_pins: dict[str, str] = {}
    cuda_hashes: dict[str, str] = {}
    for entry in data.get(CUDA_SECTION) or []:
        match = _HASHED_PIN.fullmatch(str(entry).strip())
        if not match:
            raise LockError(f"{path}: {CUDA_SECTION} entry {entry!r} is not 'name==version --hash=sha256:HEX'")
        name = canonicalize_name(match.group(1))
        cuda_pins[name], cuda_hashes[name] = match.group(2), match.group(3)
    for name in cuda_pins.keys() & pins.keys():
        if Version(cuda_pins[name]) != Version(pins[name]):
            raise LockError(f"{path}: {name} is {pins[name]} in the pip list but {cuda_pins[name]} in {CUDA_SECTION}")
    variables = {str(k): str(v) for k, v in (data.get("variables") or {}).items()}
    return Lock(
        python=conda["python"][0],
        pins=pins,
        variables=variables,
        path=path,
        conda=conda,
        cuda_pins=cuda_pins,
        cuda_hashes=cuda_hashes,
    )


def site_packages() -> list[str]:
    """The environment's own package folders (venv or conda prefix)."""
    paths = sysconfig.get_paths()
    return sorted({paths["purelib"], paths["platlib"]})


def installed_distributions() -> dict[str, tuple[str, str]]:
    """Canonical name -> (name as the distribution spells it, version), running environment.

    Only the environment's site-packages are searched, not sys.path: once
    setuptools is imported it appends its private _vendor folder (packaging,
    wheel, jaraco.*, ...) to sys.path, and those copies are not installed.
    """
    found = {}
    for dist in metadata.distributions(path=site_packages()):
        name = dist.metadata["Name"]
        found[canonicalize_name(name)] = (name, dist.version)
    return found


def installed_versions() -> dict[str, str]:
    """Canonical name -> version of every distribution in the running environment."""
    return {name: version for name, (_, version) in installed_distributions().items()}


def _same_version(pinned: str, installed: str) -> bool:
    # A local label is a build variant of the same release (torch 2.13.0+cpu
    # here, the CUDA wheel in the image): `==2.13.0` admits both, as pip does.
    return Version(installed).public == Version(pinned).public if "+" not in pinned else installed == pinned


def drift(lock: Lock, installed: dict[str, str] | None = None, python_version: str | None = None,
          ignore: frozenset[str] = NOT_PINNED, variant: str | None = None) -> list[str]:
    """Every difference between the lock and the environment, one line each (empty: no drift)."""
    installed = installed_versions() if installed is None else installed
    python_version = python_version or platform.python_version()
    expected = lock.expected(variant or current_variant())
    lines = []
    if python_version != lock.python:
        lines.append(f"python: lock {lock.python}, running {python_version}")
    for name, version in sorted(expected.items()):
        if name not in installed:
            lines.append(f"{name}: lock {version}, not installed")
        elif not _same_version(version, installed[name]):
            lines.append(f"{name}: lock {version}, installed {installed[name]}")
    for name in sorted(set(installed) - set(expected) - ignore):
        lines.append(f"{name}: installed {installed[name]}, not in the lock")
    return lines


# --- regeneration (`invoke lock`) ---------------------------------------------


@dataclass
class LockUpdate:
    """What `invoke lock` changed in one list."""

    section: str
    added: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    changed: list[str] = field(default_factory=list)

    @property
    def empty(self) -> bool:
        return not (self.added or self.removed or self.changed)

    def summary(self) -> str:
        if self.empty:
            return f"{self.section}: unchanged"
        parts = [f"+{a}" for a in self.added] + [f"-{r}" for r in self.removed] + self.changed
        return f"{self.section}: " + ", ".join(parts)


def _pin_version(canonical: str, version: str) -> str:
    # torch's local label names the build variant (2.13.0+cpu here); the pin
    # must admit both the CPU and the CUDA build, so it keeps the release only.
    return Version(version).public if canonical == "torch" else version


def download_wheel_sha256(name: str, version: str) -> str:
    """sha256 of the Linux x86_64 cp311 wheel pip would install for ``name==version``.

    Uses `pip download` (the configured index) into a temporary folder, then
    hashes the file the way `pip hash` does. Only needed for a new or changed
    entry of the cuda-pip list; unchanged entries keep their recorded hash.
    """
    with tempfile.TemporaryDirectory() as tmp:
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--dest", tmp,
               "--platform", "manylinux_2_28_x86_64", "--platform", "manylinux2014_x86_64",
               "--python-version", "3.11", "--implementation", "cp", f"{name}=={version}"]
        result = subprocess.run(cmd, capture_output=True, text=True, check=False)
        files = list(Path(tmp).glob("*.whl"))
        if result.returncode != 0 or len(files) != 1:
            raise LockError(f"could not download {name}=={version} to hash it:\n{result.stdout}{result.stderr}")
        digest = hashlib.sha256()
        with files[0].open("rb") as wheel:
            for block in iter(lambda: wheel.read(1 << 20), b""):
                digest.update(block)
        return digest.hexdigest()


def _block_item_lines(lines: list[str], header: str, item_prefix: str) -> tuple[int, int]:
    """[start, end) of the item lines that follow ``header`` (comments inside stay outside the range)."""
    try:
        start = lines.index(header) + 1
    except ValueError as error:
        raise LockError(f"the lock has no {header.strip()!r} line") from error
    while start < len(lines) and lines[start].lstrip().startswith("#"):
        start += 1
    end = start
    while end < len(lines) and lines[end].startswith(item_prefix):
        end += 1
    if end < len(lines) and lines[end].startswith(" ") and lines[end].strip() and not lines[end].lstrip().startswith("#"):
        raise LockError(f"unexpected line in the {header.strip()!r} list: {lines[end]!r}")
    return start, end


def _diff(section: str, old: dict[str, str], new: dict[str, str]) -> LockUpdate:
    update = LockUpdate(section)
    update.added = [f"{n}=={new[n]}" for n in sorted(new.keys() - old.keys())]
    update.removed = [f"{n}=={old[n]}" for n in sorted(old.keys() - new.keys())]
    update.changed = [f"{n} {old[n]} -> {new[n]}" for n in sorted(old.keys() & new.keys()) if old[n] != new[n]]
    return update


def regenerate(
    path: Path = LOCK_PATH,
    variant: str | None = None,
    installed: dict[str, tuple[str, str]] | None = None,
    python_version: str | None = None,
    wheel_sha256: Callable[[str, str], str] = download_wheel_sha256,
) -> LockUpdate:
    """Rewrite one list of the lock from the running (resolved) environment.

    variant cpu (a CPU machine): the pip list becomes exactly what is
    installed. variant cuda (the image): the cuda-pip list becomes what is
    installed beyond the pip list, each with its wheel's sha256. Every other
    line of the file (comments, conda specs, the other list, variables) is
    kept byte for byte; the file is replaced atomically.
    """
    variant = check_variant(variant or current_variant())
    lock = read_lock(path)
    installed = installed_distributions() if installed is None else installed
    installed = {n: v for n, v in installed.items() if n not in NOT_PINNED}
    python_version = python_version or platform.python_version()
    if python_version != lock.python:
        raise LockError(
            f"the lock pins Python {lock.python} (with its conda build) but this is {python_version}; "
            "change the python=VERSION=BUILD line and the conda list by hand (where conda exists), then re-run"
        )
    lines = path.read_text().splitlines(keepends=True)
    if variant == "cpu":
        stray = sorted(n for n in installed if n in lock.cuda_pins and n not in lock.pins)
        if stray:
            raise LockError(f"CUDA-only packages are installed ({', '.join(stray)}): regenerate the pip list "
                            "in a CPU environment, or set FUSEDBENCH_TORCH_VARIANT=cuda to regenerate cuda-pip")
        new = {n: _pin_version(n, v) for n, (_, v) in installed.items()}
        start, end = _block_item_lines(lines, "  - pip:\n", "      - ")
        items = sorted((f"{installed[n][0]}=={new[n]}" for n in new), key=str.lower)
        lines[start:end] = [f"      - {item}\n" for item in items]
        update = _diff("pip", lock.pins, new)
    else:
        behind = [f"{n} (lock {v}, installed {installed[n][1] if n in installed else 'none'})"
                  for n, v in sorted(lock.pins.items()) if n not in installed or not _same_version(v, installed[n][1])]
        if behind:
            raise LockError("the pip list itself drifts from this environment - regenerate it on a CPU machine first: "
                            + ", ".join(behind))
        if "torch" not in installed:
            raise LockError("torch is not installed")
        new = {n: v for n, (_, v) in installed.items() if n not in lock.pins or n == "torch"}
        start, end = _block_item_lines(lines, f"{CUDA_SECTION}:\n", "  - ")
        entries = []
        for n in ["torch"] + sorted(set(new) - {"torch"}):
            same = lock.cuda_pins.get(n) == new[n] and n in lock.cuda_hashes
            digest = lock.cuda_hashes[n] if same else wheel_sha256(installed[n][0], new[n])
            entries.append(f"  - {n}=={new[n]} --hash=sha256:{digest}\n")
        lines[start:end] = entries
        update = _diff(CUDA_SECTION, lock.cuda_pins, new)
    text = "".join(lines)
    parse_lock(text, path)  # never write a file that does not read back
    write_text_atomic(path, text)
    return update
