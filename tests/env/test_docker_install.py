"""The Dockerfile, scripts/create_env.sh and CI install through the same pins: the lock and
requirements/<variant>.txt, with uv (or `pip install --require-hashes --no-deps`), every file's hash checked."""

from __future__ import annotations

import hashlib
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from env.image import DOCKERFILE, lock_sha256
from env.lock.lockfile import LOCK_PATH, read_lock, requirements_path
from env.paths import REPO_ROOT

CREATE_ENV = REPO_ROOT / "scripts" / "create_env.sh"


def _fake_prefix(tmp_path: Path, uv_status: int = 0) -> tuple[Path, Path]:
    """An environment prefix whose python only records how it was called (and keeps the files it was given with
    -r); asked to install with uv, it exits with ``uv_status``."""
    prefix = tmp_path / "env"
    (prefix / "bin").mkdir(parents=True)
    calls = tmp_path / "calls.log"
    python = prefix / "bin" / "python"
    python.write_text(
        f'#!/bin/bash\necho "$*" >> "{calls}"\n'
        f'case "$*" in *" -r "*) cp "${{@: -1}}" "{tmp_path}/given-$(basename "${{@: -1}}")" ;; esac\n'
        f'case "$2" in env.lock.uv_install) exit {uv_status} ;; esac\n'
    )
    python.chmod(0o755)
    return prefix, calls


def _create_env(prefix: Path, variant: str, installer: str | None = None) -> subprocess.CompletedProcess:
    env = {"PATH": "/usr/bin:/bin", "FUSEDBENCH_ENV": str(prefix), "FUSEDBENCH_TORCH_VARIANT": variant}
    if installer:
        env["FUSEDBENCH_INSTALLER"] = installer
    return subprocess.run(["bash", str(CREATE_ENV)], capture_output=True, text=True, env=env, check=False)


def _pip_install(requirements: Path | str) -> str:
    return f"-m pip install --require-hashes --no-deps --no-compile -r {requirements}"


_AFTER_INSTALL = [
    # byte-compiled in a process per core, where the environment's Python puts packages
    '-c import sysconfig; print(sysconfig.get_paths()["purelib"])',
    # (this stand-in Python names no folder); the packages' own test suites, and plotly's modules past its top
    # level and narwhals (nothing imports them), left as source
    "-m compileall -q -j 0 -x /tests?/|/plotly/[^/]+/|/narwhals/ ",
    "-m pip check",
    "-m env.lock.drift",  # the same comparison as `invoke env.check`
]


def _uv_steps(prefix: Path, variant: str, lines: list[str]) -> list[str]:
    """The two uv steps of ``lines`` with the temporary file's folder taken out."""
    uv_file = re.sub(r" -r \S*/uv\.txt$", " -r <tmp>/uv.txt", lines[0])
    assert lines[1] == f"-m env.lock.uv_install {prefix}/bin/uv {prefix}/bin/python {requirements_path(variant)}"
    return [uv_file, lines[1]]


@pytest.mark.parametrize("variant", ["cpu", "cuda"])
def test_create_env_installs_the_variants_file_with_hashes_and_stamps_it(tmp_path, variant):
    prefix, calls = _fake_prefix(tmp_path)
    result = _create_env(prefix, variant)
    assert result.returncode == 0, result.stderr
    lines = calls.read_text().splitlines()
    # uv first, from its own hashed entry of the requirements file, by pip; then the file, by uv
    assert _uv_steps(prefix, variant, lines) == [_pip_install("<tmp>/uv.txt"), lines[1]]
    assert lines[2:] == _AFTER_INSTALL
    entry = (tmp_path / "given-uv.txt").read_text().splitlines()
    hashes = re.findall(
        r"^uv==\S+ \\\n((?:    --hash=sha256:[0-9a-f]{64}(?: \\)?\n)+)", requirements_path(variant).read_text(), re.M
    )
    assert entry[0].startswith("uv==") and entry[1:] == hashes[0].splitlines()
    # The stamp is the pins' sha256 (the image's build arg for cuda), so a
    # re-run does nothing until the lock or the requirements file changes.
    stamp = (prefix / ".fusedbench-lock.sha256").read_text().split()
    pins = hashlib.sha256(LOCK_PATH.read_bytes() + requirements_path(variant).read_bytes()).hexdigest()
    assert stamp == [pins, variant]
    if variant == "cuda":
        assert stamp[0] == lock_sha256()
    calls.unlink()
    assert _create_env(prefix, variant).returncode == 0 and not calls.exists()
    (prefix / ".fusedbench-lock.sha256").write_text("0" * 64 + f" {variant}\n")
    assert _create_env(prefix, variant).returncode == 0 and calls.exists()


def test_create_env_installs_with_pip_when_asked_or_when_uv_cannot_honour_pips_settings(tmp_path):
    prefix, calls = _fake_prefix(tmp_path / "asked")
    assert _create_env(prefix, "cpu", installer="pip").returncode == 0
    assert calls.read_text().splitlines() == [_pip_install(requirements_path("cpu")), *_AFTER_INSTALL]
    prefix, calls = _fake_prefix(tmp_path / "fallback", uv_status=3)  # env/lock/uv_install.py's FALLBACK_STATUS
    assert _create_env(prefix, "cpu").returncode == 0
    lines = calls.read_text().splitlines()
    assert lines[2:] == [_pip_install(requirements_path("cpu")), *_AFTER_INSTALL]
    prefix, calls = _fake_prefix(tmp_path / "failed", uv_status=1)  # uv fails: pip installs the pins after all
    result = _create_env(prefix, "cpu")
    assert result.returncode == 0 and "uv could not install the pins" in result.stderr, result.stderr
    assert calls.read_text().splitlines()[2:] == [_pip_install(requirements_path("cpu")), *_AFTER_INSTALL]
    prefix, calls = _fake_prefix(tmp_path / "unknown")
    result = _create_env(prefix, "cpu", installer="conda")
    assert result.returncode == 1 and "FUSEDBENCH_INSTALLER must be uv or pip" in result.stderr


def test_create_env_refuses_an_unknown_variant(tmp_path):
    prefix, calls = _fake_prefix(tmp_path)
    result = _create_env(prefix, "rocm")
    assert result.returncode == 1 and "FUSEDBENCH_TORCH_VARIANT must be cpu or cuda" in result.stderr
    assert not calls.exists()


def test_create_env_gives_the_solver_exactly_the_locks_conda_specs(tmp_path):
    # The lines of create_env.sh that list the conda specs (solver input) and
    # the Python version (venv path), run against the lock; YAML is the reference.
    script = CREATE_ENV.read_text()
    step = script[script.index("# The lock's exact conda specs") : script.index('[ -n "$python_version" ]')]
    result = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", step + 'echo "$python_version"'],
        capture_output=True,
        text=True,
        env={"PATH": "/usr/bin:/bin", "lock": str(LOCK_PATH), "tmp": str(tmp_path)},
        check=True,
    )
    conda = [d for d in yaml.safe_load(LOCK_PATH.read_text())["dependencies"] if isinstance(d, str)]
    assert (tmp_path / "conda-specs.txt").read_text().splitlines() == conda
    assert result.stdout.strip() == read_lock().python


def test_dockerfile_installs_the_variants_pins_through_create_env():
    text = DOCKERFILE.read_text()
    assert re.search(r"^COPY environment\.lock\.yml \./$", text, re.M)
    assert re.search(r"^COPY requirements/ requirements/$", text, re.M)
    # one variant build arg, cuda by default, is the variant create_env.sh installs
    assert re.search(r"^ARG VARIANT=cuda$", text, re.MULTILINE)
    assert re.search(r"^ENV .*\n(?:\s+.*\n)*?\s+FUSEDBENCH_TORCH_VARIANT=\$\{VARIANT\} \\$", text, re.MULTILINE)
    assert re.search(r"^\s+&& scripts/create_env\.sh \\$", text, re.M)
    # No second install path for the pins: pip's one other use installs the project's own wheel, without an index.
    pip_lines = re.findall(r"^(?:RUN|\s+&&).*\bpip\b.*$", text, re.M)
    assert pip_lines == ["RUN pip install --no-index dist/fusedbench-*.whl \\"], pip_lines
    # The environment layer gets the pins, the scripts and the lock reader only.
    copies = re.findall(
        r"^COPY (?!--)(.+) \S+$",
        text[text.index("# 1. The environment") : text.index("scripts/create_env.sh \\")],
        re.M,
    )
    assert copies == ["environment.lock.yml", "requirements/", "env/__init__.py env/paths.py", "env/lock/", "scripts/"]


def _dockerfile_step(start: str) -> str:
    """The shell of one `&& ...` step of the environment RUN, from ``start`` to its closing `fi`."""
    text = DOCKERFILE.read_text()
    step = re.search(rf"({re.escape(start)}.*?\bfi)( \\)?\n", text, re.S)
    assert step, f"the step starting {start!r} is missing from the Dockerfile"
    return re.sub(r"\s*\\\n\s*&& ", "\n", step.group(1)).replace("\\\n", "\n")


@pytest.mark.parametrize("variant", ["cpu", "cuda"])
@pytest.mark.parametrize("good", [True, False])
def test_dockerfile_checks_the_pins_build_arg(good, variant):
    script = _dockerfile_step("pins=$(cat")
    value = lock_sha256(variant=variant) if good else lock_sha256(variant={"cpu": "cuda", "cuda": "cpu"}[variant])
    env = {"PATH": "/usr/bin:/bin", "LOCK_SHA256": value, "FUSEDBENCH_TORCH_VARIANT": variant}
    result = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", script], cwd=REPO_ROOT, capture_output=True, text=True, env=env, check=False
    )
    assert (result.returncode == 0) == good, result.stderr
    assert good or f"the build arg LOCK_SHA256 is {value}" in result.stderr


@pytest.mark.parametrize("variant", ["cpu", "cuda"])
def test_dockerfile_gives_pip_the_torch_source_for_the_cpu_variant_only(tmp_path, variant):
    # The step that sets pip's find-links, followed by a stand-in for create_env.sh that reports it.
    text = DOCKERFILE.read_text()
    step = re.search(r"&& (if \[ \"\$\{FUSEDBENCH_TORCH_VARIANT\}\" = cpu \].*?fi) \\\n", text).group(1)
    script = step + '\necho "find-links=${PIP_FIND_LINKS:-none}"'
    env = {"PATH": "/usr/bin:/bin", "FUSEDBENCH_TORCH_VARIANT": variant, "TORCH_FIND_LINKS": str(tmp_path)}
    result = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", script], capture_output=True, text=True, env=env, check=True
    )
    assert result.stdout.strip() == f"find-links={tmp_path if variant == 'cpu' else 'none'}"


@pytest.mark.parametrize("good", [True, False])
def test_dockerfile_checks_the_arch_list_build_arg(good):
    # Run natively with this environment's python, as the image runs it with its own.
    script = _dockerfile_step("locked=$(python")
    value = read_lock().variables["TORCH_CUDA_ARCH_LIST"] if good else "9.0"
    env = {"PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin", "TORCH_CUDA_ARCH_LIST": value}
    result = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", script], cwd=REPO_ROOT, capture_output=True, text=True, env=env, check=False
    )
    assert (result.returncode == 0) == good, result.stderr
    assert good or "differs from the lock's '8.0;9.0+PTX'" in result.stderr


def test_ci_and_the_workflow_install_through_create_env():
    ci = (REPO_ROOT / ".ci" / "run").read_text()
    assert "scripts/with_env.sh" in ci and "pip install" not in ci
    assert "scripts/create_env.sh" in (REPO_ROOT / "scripts" / "with_env.sh").read_text()
    workflow = (REPO_ROOT / ".github" / "workflows" / "bench.yml").read_text()
    assert "run: scripts/create_env.sh" in workflow and "pip install" not in workflow
    assert os.access(CREATE_ENV, os.X_OK)
