"""Fresh environments outside the checkout, holding only what a deploying team installs.

A venv in a temporary folder gets the lock's pins of the packages the wheel
needs at run time (its Requires-Dist, onnxruntime and their dependencies,
each with the lock's hashes), then the wheel itself, from the file, with no
index: nothing else can slip in.
"""

from __future__ import annotations

import os
import subprocess
import sys
from importlib import metadata
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from env.lock.lockfile import requirements_path

# What a deploying team installs beside the wheel: the packages ops imports at run time.
# onnxruntime is left to the user by the wheel (setup.py's extras); the lock pins the GPU build's package.
RUNTIME_ROOTS = ("torch", "numpy", "onnx", "onnxscript", "onnxruntime-gpu")


def runtime_closure(roots: list[str]) -> set[str]:
    """Canonical names of ``roots`` and everything they require (no extras), as installed here."""
    seen: set[str] = set()
    todo = [canonicalize_name(r) for r in roots]
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        for line in metadata.requires(name) or []:
            requirement = Requirement(line)
            if requirement.marker is None or requirement.marker.evaluate({"extra": ""}):
                todo.append(canonicalize_name(requirement.name))
    return seen


def pinned_lines(names: set[str], variant: str = "cpu") -> str:
    """The hashed requirement entries of ``names`` from requirements/<variant>.txt, as they are written there."""
    entries = requirements_path(variant).read_text().replace("\\\n", " ").splitlines()
    picked = []
    for entry in entries:
        head = entry.split("==", 1)[0].strip()
        if head and not head.startswith("#") and canonicalize_name(head) in names:
            picked.append(entry.split(" #", 1)[0])
    found = {canonicalize_name(e.split("==", 1)[0].strip()) for e in picked}
    missing = names - found
    if missing:
        raise AssertionError(f"the lock pins none of {sorted(missing)}")
    return "\n".join(picked) + "\n"


def wheel_requirements(wheel: Path) -> list[str]:
    """The wheel's Requires-Dist entries outside any extra, as written."""
    import zipfile

    with zipfile.ZipFile(wheel) as archive:
        text = next(archive.read(n).decode() for n in archive.namelist() if n.endswith(".dist-info/METADATA"))
    names = []
    for line in text.splitlines():
        if line.startswith("Requires-Dist:"):
            requirement = Requirement(line.split(":", 1)[1].strip())
            if requirement.marker is None:
                names.append(str(requirement))
    return names


def clean_env() -> dict[str, str]:
    """This process's environment without anything that points back at the checkout."""
    return {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("FUSEDBENCH_") and k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME")
    }


def run(command: list[str], cwd: Path, timeout: int = 900) -> subprocess.CompletedProcess:
    return subprocess.run(
        command, cwd=cwd, env=clean_env(), capture_output=True, text=True, timeout=timeout, check=False
    )


def fresh_venv(folder: Path) -> Path:
    """A venv of this interpreter's Python with nothing installed but pip; returns its python."""
    done = run([sys.executable, "-m", "venv", str(folder)], cwd=folder.parent)
    assert done.returncode == 0, done.stderr
    return folder / "bin" / "python"


def install_runtime(python: Path, wheel: Path, work: Path) -> None:
    """The lock's runtime pins (hashed, no resolution), then the wheel with no index."""
    requirements = work / "runtime-requirements.txt"
    requirements.write_text(pinned_lines(runtime_closure(list(RUNTIME_ROOTS))))
    pins = run(
        [str(python), "-m", "pip", "install", "-q", "--require-hashes", "--no-deps", "-r", str(requirements)], work
    )
    assert pins.returncode == 0, pins.stdout[-3000:] + pins.stderr[-3000:]
    own = run([str(python), "-m", "pip", "install", "-q", "--no-index", str(wheel)], work)
    assert own.returncode == 0, own.stdout[-3000:] + own.stderr[-3000:]
