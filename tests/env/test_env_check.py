"""`invoke env.check`: every difference between the installed packages and requirements/<variant>.txt
is listed, and any one fails the task."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from env.lock.drift import compare, drift, installed_versions
from env.lock.lockfile import current_variant, read_lock, read_pins, requirements_path
from env.paths import REPO_ROOT


def test_installed_environment_matches_its_requirements():
    found = drift()
    assert found.requirements == requirements_path(current_variant())
    assert found.lines == []


def test_every_kind_of_drift_is_listed():
    # The real pins and the real installed metadata, each changed in one way.
    pinned = {name: pin.version for name, pin in read_pins(requirements_path(current_variant())).items()}
    installed = installed_versions()
    pinned["numpy"] = "2.4.5"  # pinned differently
    del pinned["tqdm"]  # installed, not pinned
    pinned["left-pad"] = "1.0.0"  # pinned, not installed
    assert compare(pinned, installed) == [
        "left-pad: pinned 1.0.0, not installed",
        f"numpy: pinned 2.4.5, installed {installed['numpy']}",
        f"tqdm: installed {installed['tqdm']}, not pinned",
    ]


def test_a_local_label_is_a_different_build():
    # pip and uv take torch 2.13.0+cpu as satisfying ==2.13.0; the CUDA variant must not.
    assert compare({"torch": "2.13.0"}, {"torch": "2.13.0+cpu"}) == ["torch: pinned 2.13.0, installed 2.13.0+cpu"]
    assert compare({"torch": "2.13.0+cpu"}, {"torch": "2.13.0+cpu"}) == []
    # names and versions are compared in their normalized forms
    assert compare({"typing-extensions": "4.16.0"}, {"typing-extensions": "4.16"}) == []


def test_setuptools_vendored_copies_are_not_installed_packages():
    # importing setuptools (cpp_extension does) puts setuptools/_vendor on sys.path;
    # its private packaging/wheel/jaraco copies must not look installed.
    import setuptools  # noqa: F401

    assert str(Path(setuptools.__file__).parent / "_vendor") in sys.path
    assert "jaraco-text" not in installed_versions() and "wheel" not in installed_versions()


def test_python_version_is_compared_with_the_lock():
    lock = read_lock()
    assert drift(lock, python_version="3.11.9").lines[0] == f"python: lock {lock.python}, running 3.11.9"
    assert drift(lock, python_version=lock.python).lines == []


def test_the_task_fails_and_lists_the_drift_of_the_other_variant():
    # This environment holds the CPU build of torch and none of the CUDA
    # libraries, so against the CUDA variant's pins it drifts in many ways.
    other = "cuda" if current_variant() == "cpu" else "cpu"
    env = dict(os.environ, FUSEDBENCH_TORCH_VARIANT=other)
    result = subprocess.run(
        [f"{sys.prefix}/bin/invoke", "env.check"], cwd=REPO_ROOT, capture_output=True, text=True, env=env, check=False
    )
    assert result.returncode == 1, result.stdout + result.stderr
    assert f"drifts from requirements/{other}.txt" in result.stderr
    torch_line = "torch: pinned 2.13.0, installed 2.13.0+cpu" if other == "cuda" else "torch: pinned 2.13.0+cpu"
    assert torch_line in result.stderr
    assert "Traceback" not in result.stderr


def test_the_task_passes_on_this_environment():
    result = subprocess.run(
        [f"{sys.prefix}/bin/invoke", "env.check"], cwd=REPO_ROOT, capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"environment matches requirements/{current_variant()}.txt" in result.stdout


def test_a_bad_variant_is_a_clear_error(monkeypatch):
    monkeypatch.setenv("FUSEDBENCH_TORCH_VARIANT", "rocm")
    with pytest.raises(ValueError, match="FUSEDBENCH_TORCH_VARIANT must be one of"):
        drift()
