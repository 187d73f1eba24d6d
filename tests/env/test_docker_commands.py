"""`invoke docker.build` / `docker.run`: the commands carry the right build args, labels
sources, mounts and GPU flag; without a Docker engine the tasks say so clearly."""

from __future__ import annotations

import hashlib
import subprocess
import sys

import pytest

from env.lock import docker
from env.lock.lockfile import LOCK_PATH, read_lock, requirements_path
from env.paths import REPO_ROOT


def _build_args(command: list[str]) -> dict[str, str]:
    values = [command[i + 1] for i, part in enumerate(command) if part == "--build-arg"]
    return dict(value.split("=", 1) for value in values)


def test_build_command_passes_the_lock_the_commit_and_the_pinned_base():
    command = docker.build_command("fusedbench:test", max_jobs=8)
    assert command[:2] == ["docker", "build"] and command[-1] == str(REPO_ROOT)
    assert command[command.index("--tag") + 1] == "fusedbench:test"
    args = _build_args(command)
    # the pins the image installs: the lock, then the CUDA variant's requirements
    pins = LOCK_PATH.read_bytes() + requirements_path("cuda").read_bytes()
    assert args["LOCK_SHA256"] == hashlib.sha256(pins).hexdigest()
    assert args["TORCH_CUDA_ARCH_LIST"] == read_lock().variables["TORCH_CUDA_ARCH_LIST"]
    assert args["CUDA_IMAGE"] == "nvidia/cuda:13.0.1-cudnn-devel-ubuntu24.04"
    assert args["CUDA_IMAGE_DIGEST"] == docker.dockerfile_arg_defaults()["CUDA_IMAGE_DIGEST"]
    assert args["MAX_JOBS"] == "8"
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO_ROOT, capture_output=True, text=True).stdout.strip()
    assert args["GIT_COMMIT"].removesuffix("-dirty") == head
    # every build arg is declared in the Dockerfile (a typo would be silently unused)
    declared = set(docker.dockerfile_arg_defaults())
    assert set(args) - {"FUSEDBENCH_UID"} <= declared and "FUSEDBENCH_UID" in declared


def test_build_command_rejects_a_malformed_digest():
    with pytest.raises(docker.DockerError, match="sha256:<64 hex digits>"):
        docker.build_command(base_digest="sha256:1234")


def test_run_command_mounts_reports_and_adds_gpus_only_when_asked(tmp_path):
    command = docker.run_command(["bench", "--baseline", "all"], "fusedbench:test", tmp_path, gpus=True, tty=False)
    assert command[:3] == ["docker", "run", "--rm"]
    assert command[command.index("--volume") + 1] == f"{tmp_path}:/reports"
    assert command[command.index("--gpus") + 1] == "all"
    assert command[-4:] == ["fusedbench:test", "bench", "--baseline", "all"]
    assert "--gpus" not in docker.run_command(["bench"], gpus=False, tty=False)
    # the image writes its reports where the folder is mounted
    assert "FUSEDBENCH_REPORTS_DIR=/reports" in (REPO_ROOT / "Dockerfile").read_text()
    with pytest.raises(docker.DockerError, match="give the invoke task"):
        docker.run_command([])


def test_no_engine_is_a_clear_error(monkeypatch, tmp_path):
    # Point the client at a socket nobody serves: whatever this machine has,
    # no engine answers there.
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/no-engine.sock")
    problem = docker.engine_problem()
    assert problem is not None
    assert "no Docker engine is reachable" in problem or "docker client is not installed" in problem
    with pytest.raises(docker.DockerError):
        docker.run(docker.run_command(["bench"], reports=tmp_path / "reports", gpus=False, tty=False))
    assert not (tmp_path / "reports").exists()  # nothing was done


def test_invoke_tasks_report_the_missing_engine(tmp_path):
    env = {"PATH": f"{sys.prefix}/bin:/usr/local/bin:/usr/bin:/bin", "DOCKER_HOST": f"unix://{tmp_path}/none.sock"}
    for args in (["docker.build"], ["docker.run", "--", "bench", "--quick"]):
        result = subprocess.run([f"{sys.prefix}/bin/invoke", *args], cwd=REPO_ROOT, capture_output=True, text=True,
                                env=env, check=False)
        assert result.returncode != 0
        assert f"{args[0]}: " in result.stderr, result.stderr  # the task's name, then what went wrong
        assert "no Docker engine" in result.stderr or "not installed" in result.stderr


def test_the_image_is_found_in_a_run_line_whatever_the_options():
    for gpus in (True, False):
        for tty in (True, False):
            command = docker.run_command(["bench", "--quick"], "fusedbench:abc", gpus=gpus, tty=tty)
            assert docker._image_of(command) == "fusedbench:abc"


def test_run_mounts_the_hosts_machine_id_so_containers_on_one_host_compare(tmp_path):
    from pathlib import Path

    command = docker.run_command(["bench"], "fusedbench:test", tmp_path, gpus=False, tty=False)
    mount = "/etc/machine-id:/etc/machine-id:ro"
    assert (mount in command) == Path("/etc/machine-id").is_file()
