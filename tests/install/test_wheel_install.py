"""The wheel, installed into a fresh environment outside the checkout, runs everything a deploying team uses.

Only the lock's runtime pins and the wheel are installed; the check runs from
a temporary folder, so nothing of the source tree (csrc/, build/, env/) can be
found. Both ops on the CPU, the model exported by every route and run in ONNX
Runtime with the library from the installed package, each against float64.
"""

from __future__ import annotations

import json
import shutil
import zipfile
from pathlib import Path

import pytest

from env.dist import audit_wheel, build_wheel, check_wheel_contents
from env.lock.lockfile import read_pins, requirements_path
from tests.helpers.install_envs import RUNTIME_ROOTS, fresh_venv, install_runtime, run, wheel_requirements

pytestmark = pytest.mark.slow  # a wheel build and an environment of about 1 GB: minutes on 2 cores

CHECK_SCRIPT = Path(__file__).with_name("installed_check.py")


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    return build_wheel(tmp_path_factory.mktemp("dist"))


@pytest.fixture(scope="module")
def installed(wheel, tmp_path_factory) -> Path:
    work = tmp_path_factory.mktemp("deploy")
    python = fresh_venv(work / "venv")
    install_runtime(python, wheel, work)
    return python


def test_the_wheel_holds_every_subpackage_and_both_libraries(wheel):
    assert check_wheel_contents(wheel) == []
    names = zipfile.ZipFile(wheel).namelist()
    assert not [n for n in names if n.startswith("env/")]
    assert wheel.name.endswith("-cp311-abi3-linux_x86_64.whl")


def test_auditwheel_finds_a_plain_linux_wheel_that_needs_torchs_libraries(wheel):
    # torch's libraries are external by design (never vendored), so no manylinux policy can hold.
    audit = audit_wheel(wheel)
    assert audit.policy == "linux_x86_64", audit.report
    assert "libc10.so" in audit.external["ops/_C.abi3.so"], audit.external
    assert "ops/libfused_norm_ort.so" not in audit.external  # the ORT library needs nothing of torch


def test_the_wheel_pins_the_torch_it_was_built_against(wheel):
    requirements = wheel_requirements(wheel)
    torch_pin = read_pins(requirements_path("cpu"))["torch"].version.split("+")[0]
    assert f"torch=={torch_pin}" in requirements, requirements
    # Everything else it needs at run time is among the packages the fresh environment gets.
    assert {r.split(">")[0].split("=")[0] for r in requirements} <= set(RUNTIME_ROOTS), requirements


def test_installed_package_runs_ops_export_and_ort_from_outside_the_tree(installed, tmp_path):
    script = tmp_path / "check.py"
    shutil.copy2(CHECK_SCRIPT, script)
    done = run([str(installed), str(script), str(tmp_path)], cwd=tmp_path)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    facts = json.loads(done.stdout.strip().splitlines()[-1])
    site = installed.parent.parent / "lib"
    # Everything from the installed package, nothing from the checkout or the tooling.
    for key in ("ops_file", "torch_library", "ort_library"):
        assert Path(facts[key]).is_relative_to(site), (key, facts[key])
    assert Path(facts["ort_library"]).name == "libfused_norm_ort.so"
    assert Path(facts["ort_library"]).parent == Path(facts["ops_file"]).parent
    assert facts["modules"] == []
    checks = {**facts["ops"], **facts["routes"]}
    assert len(facts["ops"]) == 6 and len(facts["routes"]) == 6, sorted(checks)
    failed = {name: c for name, c in checks.items() if not c["within"]}
    assert not failed, failed


def test_the_installed_environment_has_no_tooling_package(installed, tmp_path):
    done = run([str(installed), "-c", "import env"], cwd=tmp_path)
    assert done.returncode != 0 and "No module named 'env'" in done.stderr
