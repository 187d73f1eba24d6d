"""`invoke env.lock`: compile requirements/<variant>.in into hashed requirements/<variant>.txt with uv.

uv resolves every variant for the lock's Python on Linux x86_64 (whatever
machine runs it), pins every package, transitive ones included, with the
sha256 of each of its files, and keeps the versions already pinned unless
asked to upgrade. Written here by hand, because no tool does it:

- the Python version and target platform come from the lock, so the pins
  and the conda part cannot disagree;
- for the cpu variant, pip's configured find-links are passed on (uv does
  not read pip's configuration): that is where a machine offers torch's
  ``+cpu`` wheel, which the public index does not carry. Never for cuda,
  where that wheel would satisfy ``torch==2.13.0`` in place of the CUDA build;
- the packages both variants pin must be pinned alike, checked after both
  are compiled.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from dataclasses import dataclass

from env.files import atomic_path
from env.lock.lockfile import REQUIREMENTS_DIR, VARIANTS, LockError, read_lock, read_pins, requirements_path
from env.lock.uv_install import pip_settings
from env.paths import REPO_ROOT

PLATFORM = "x86_64-manylinux_2_28"
COMPILE_COMMAND = "invoke env.lock"


@dataclass(frozen=True)
class Compiled:
    variant: str
    before: dict[str, str]
    after: dict[str, str]

    def summary(self) -> str:
        changes = [f"+{n}=={v}" for n, v in sorted(self.after.items()) if n not in self.before]
        changes += [f"-{n}=={v}" for n, v in sorted(self.before.items()) if n not in self.after]
        changes += [
            f"{n} {self.before[n]} -> {v}"
            for n, v in sorted(self.after.items())
            if n in self.before and self.before[n] != v
        ]
        return f"requirements/{self.variant}.txt: {len(self.after)} pins, " + (", ".join(changes) or "unchanged")


def uv_binary() -> str:
    """The uv the pins install (its wheel ships the binary)."""
    try:
        from uv import find_uv_bin
    except ImportError as error:
        raise LockError("uv is not installed in this environment - run scripts/create_env.sh") from error
    return find_uv_bin()


def pip_find_links() -> list[str]:
    """The find-links pip uses here ($PIP_FIND_LINKS over its configuration files)."""
    return pip_settings(sys.executable).get("find-links", "").split()


def compile_command(variant: str, output: str, upgrade: bool = False) -> list[str]:
    command = [
        uv_binary(),
        "pip",
        "compile",
        f"requirements/{variant}.in",
        "--output-file",
        output,
        "--generate-hashes",
        "--python-version",
        read_lock().python,
        "--python-platform",
        PLATFORM,
        "--custom-compile-command",
        COMPILE_COMMAND,
        "--quiet",
    ]
    for link in pip_find_links() if variant == "cpu" else []:
        command += ["--find-links", link]
    return command + (["--upgrade"] if upgrade else [])


def _versions(variant: str) -> dict[str, str]:
    path = requirements_path(variant)
    return {n: p.version for n, p in read_pins(path).items()} if path.exists() else {}


def compile_variant(variant: str, upgrade: bool = False) -> Compiled:
    """Recompile one variant; the file is replaced only when uv succeeds."""
    target = requirements_path(variant)
    before = _versions(variant)
    with atomic_path(target) as tmp:
        if target.exists():  # uv keeps the versions pinned in its output file
            shutil.copyfile(target, tmp)
        result = subprocess.run(
            compile_command(variant, str(tmp), upgrade), cwd=REPO_ROOT, capture_output=True, text=True, check=False
        )
        if result.returncode != 0:
            raise LockError(f"uv could not compile requirements/{variant}.in:\n{result.stderr.strip()}")
        read_pins(tmp)  # never keep a file that is not fully pinned and hashed
    return Compiled(variant, before, _versions(variant))


def shared_mismatches() -> list[str]:
    """Packages that both variants pin, at different versions or with different files."""
    cpu, cuda = (read_pins(requirements_path(v)) for v in VARIANTS)
    return [
        f"{name}: cpu {cpu[name].version}, cuda {cuda[name].version}"
        for name in sorted(cpu.keys() & cuda.keys() - {"torch"})
        if cpu[name] != cuda[name]
    ]


def regenerate(upgrade: bool = False) -> list[Compiled]:
    """Compile every variant, then check that the shared packages agree."""
    if not REQUIREMENTS_DIR.is_dir():
        raise LockError(f"{REQUIREMENTS_DIR} is missing")
    compiled = [compile_variant(variant, upgrade) for variant in VARIANTS]
    mismatches = shared_mismatches()
    if mismatches:
        raise LockError(
            "the variants pin shared packages differently - pin them in requirements/common.in:\n  "
            + "\n  ".join(mismatches)
        )
    return compiled
