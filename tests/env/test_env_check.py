"""`invoke env.check`: every difference between the lock and the environment is listed."""

from __future__ import annotations

from pathlib import Path

from env.lock.lockfile import Lock, drift, installed_versions, read_lock


def _lock(pins: dict[str, str]) -> Lock:
    return Lock(python="3.11.7", pins=pins, variables={}, path=Path("environment.lock.yml"))


def test_installed_environment_matches_the_lock():
    assert drift(read_lock()) == []


def test_every_kind_of_drift_is_listed():
    lock = _lock({"torch": "2.13.0", "numpy": "2.4.6", "pandas": "3.1.1"})
    installed = {"torch": "2.14.1", "numpy": "2.4.6", "scipy": "1.17.1"}
    assert drift(lock, installed, python_version="3.11.9") == [
        "python: lock 3.11.7, running 3.11.9",
        "pandas: lock 3.1.1, not installed",
        "torch: lock 2.13.0, installed 2.14.1",
        "scipy: installed 1.17.1, not in the lock",
    ]


def test_local_build_label_is_the_same_release():
    # torch 2.13.0+cpu (this machine) and the CUDA wheel (the image) are both 2.13.0.
    lock = _lock({"torch": "2.13.0"})
    assert drift(lock, {"torch": "2.13.0+cpu"}, python_version="3.11.7") == []
    assert drift(lock, {"torch": "2.13.1+cpu"}, python_version="3.11.7") == ["torch: lock 2.13.0, installed 2.13.1+cpu"]


def test_names_are_compared_canonically():
    # The lock writes typing_extensions / MarkupSafe as pip freeze does.
    lock = read_lock()
    assert "typing-extensions" in lock.pins and "markupsafe" in lock.pins
    assert "typing-extensions" in installed_versions()
    lock = _lock({"typing-extensions": "4.16.0"})
    assert drift(lock, {"typing-extensions": "4.16.0"}, python_version="3.11.7") == []

