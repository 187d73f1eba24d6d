"""`invoke docker.build` / `docker.run`: the commands carry the right build args, labels
sources, mounts and GPU flag; without a Docker engine the tasks say so clearly."""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from env import image as docker
from env.lock.lockfile import LOCK_PATH, read_lock, read_pins, requirements_path
from env.paths import REPO_ROOT


def _build_args(command: list[str]) -> dict[str, str]:
    values = [command[i + 1] for i, part in enumerate(command) if part == "--build-arg"]
    return dict(value.split("=", 1) for value in values)


def test_build_command_passes_the_lock_the_commit_and_the_pinned_base():
    command = docker.build_command("fusedbench:test", max_jobs=8)
    assert command[:2] == ["docker", "build"] and command[-1] == str(REPO_ROOT)
    assert command[command.index("--tag") + 1] == "fusedbench:test"
    args = _build_args(command)
    assert args["VARIANT"] == "cuda" and "PYTHON_IMAGE" not in args and "TORCH_FIND_LINKS" not in args
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


def test_cpu_variant_passes_its_own_base_and_pins():
    digest = "sha256:" + "ab" * 32
    args = _build_args(docker.build_command("fusedbench:cpu", base_digest=digest, variant="cpu"))
    assert args["VARIANT"] == "cpu"
    assert args["PYTHON_IMAGE"] == "python:3.11.7-slim-bookworm" and args["PYTHON_IMAGE_DIGEST"] == digest
    assert "CUDA_IMAGE" not in args and "CUDA_IMAGE_DIGEST" not in args
    pins = LOCK_PATH.read_bytes() + requirements_path("cpu").read_bytes()
    assert args["LOCK_SHA256"] == hashlib.sha256(pins).hexdigest()
    # the Dockerfile's default base digest for the variant, when none is given
    default = _build_args(docker.build_command(variant="cpu"))["PYTHON_IMAGE_DIGEST"]
    assert default == docker.dockerfile_arg_defaults()["PYTHON_IMAGE_DIGEST"]
    assert re.fullmatch(r"sha256:[0-9a-f]{64}", default)
    with pytest.raises(docker.DockerError, match="--variant must be one of cuda, cpu, got 'rocm'"):
        docker.build_command(variant="rocm")


def test_every_variant_has_a_system_stage_the_shared_stage_builds_on():
    text = (REPO_ROOT / "Dockerfile").read_text()
    assert re.search(r"^FROM \$\{VARIANT\}-system$", text, re.MULTILINE)
    for variant, (image, digest) in docker.BASE_ARGS.items():
        assert re.search(rf"^FROM \$\{{{image}\}}@\$\{{{digest}\}} AS {variant}-system$", text, re.MULTILINE), variant


def test_buildah_mounts_a_local_wheel_folder_and_never_pulls_a_local_base(tmp_path):
    command = docker.build_command(
        "fusedbench:cpu", variant="cpu", torch_find_links=str(tmp_path), engine=docker.PODMAN, local_base=True
    )
    assert command[:4] == ["buildah", "bud", "--isolation=chroot", "--layers"]
    assert "--pull=never" in command and "--format=docker" in command  # SHELL (pipefail) needs the docker format
    assert command[command.index("--volume") + 1] == f"{tmp_path}:{tmp_path}:ro"
    assert _build_args(command)["TORCH_FIND_LINKS"] == str(tmp_path)
    # a URL is only a build arg; without local_base buildah pulls what is missing as Docker does
    url = "https://download.pytorch.org/whl/cpu/torch/"
    command = docker.build_command(variant="cpu", torch_find_links=url, engine=docker.PODMAN)
    assert "--volume" not in command and "--pull=true" in command and _build_args(command)["TORCH_FIND_LINKS"] == url
    assert _build_args(docker.build_command(variant="cpu", torch_find_links=url))["TORCH_FIND_LINKS"] == url


def test_what_only_buildah_can_do_is_refused_for_docker_with_a_reason(tmp_path):
    with pytest.raises(docker.DockerError, match="docker build can neither mount a folder of wheels"):
        docker.build_command(variant="cpu", torch_find_links=str(tmp_path))
    with pytest.raises(docker.DockerError, match="nor refuse to pull"):
        docker.build_command(variant="cpu", local_base=True)
    with pytest.raises(docker.DockerError, match="must be a URL or an existing folder"):
        docker.build_command(variant="cpu", torch_find_links=str(tmp_path / "missing"), engine=docker.PODMAN)
    with pytest.raises(docker.DockerError, match="applies to the cpu variant only"):
        docker.build_command(variant="cuda", torch_find_links="https://example.invalid/wheels/")


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
    # PATH holds the environment, git and, where this machine has it, the docker
    # client: no daemon answers it, and neither buildah nor podman can be found.
    tools = tmp_path / "bin"
    tools.mkdir()
    for tool in ("docker", "git"):
        if found := shutil.which(tool):
            (tools / tool).symlink_to(found)
    env = {"PATH": f"{sys.prefix}/bin:{tools}", "DOCKER_HOST": f"unix://{tmp_path}/none.sock"}
    for args in (["docker.build"], ["docker.run", "--", "bench", "--quick"]):
        result = subprocess.run(
            [f"{sys.prefix}/bin/invoke", *args], cwd=REPO_ROOT, capture_output=True, text=True, env=env, check=False
        )
        assert result.returncode != 0
        assert f"{args[0]}: " in result.stderr, result.stderr  # the task's name, then what went wrong
        assert "no Docker engine" in result.stderr or "not installed" in result.stderr
        assert "nor are buildah and podman, which need no daemon, installed" in result.stderr


def test_the_image_is_found_in_a_run_line_whatever_the_options():
    for engine in (docker.DOCKER, docker.PODMAN):
        for gpus in (True, False):
            for tty in (True, False):
                command = docker.run_command(["bench", "--quick"], "fusedbench:abc", gpus=gpus, tty=tty, engine=engine)
                assert docker._image_of(command) == "fusedbench:abc"
                with_env = [*command[:-3], "--env", "A=1", "--volume", "/x:/y:ro", *command[-3:]]
                assert docker._image_of(with_env) == "fusedbench:abc"


def test_podman_runs_with_runc_and_the_same_mount(tmp_path):
    command = docker.run_command(
        ["bench", "--quick"], "fusedbench:cpu", tmp_path, gpus=False, tty=False, engine=docker.PODMAN
    )
    assert command[:5] == ["podman", "--runtime", "runc", "run", "--rm"]
    assert command[command.index("--volume") + 1] == f"{tmp_path}:/reports"
    assert command[-3:] == ["fusedbench:cpu", "bench", "--quick"]


def test_engine_is_docker_where_one_answers_else_podman_else_a_clear_error(monkeypatch):
    tools = {"docker", "buildah", "podman"}
    monkeypatch.setattr(docker.shutil, "which", lambda tool: f"/usr/bin/{tool}" if tool in tools else None)
    monkeypatch.setattr(docker, "engine_problem", lambda: None)
    assert docker.choose_engine() == docker.DOCKER
    monkeypatch.setattr(docker, "engine_problem", lambda: "no Docker engine is reachable (test)")
    assert docker.choose_engine() == docker.PODMAN
    tools.discard("buildah")
    with pytest.raises(
        docker.DockerError,
        match=r"no Docker engine is reachable \(test\); nor are buildah and "
        r"podman.*missing: buildah",
    ):
        docker.choose_engine()


def _record(**changes: str) -> dict:
    """A toolchain record as `invoke build` writes it, with the lock's values unless changed."""
    pins = {name: pin.version for name, pin in read_pins(requirements_path("cpu")).items()}
    record = {
        "python": {"version": read_lock().python},
        "torch": {"version": pins["torch"]},
        "onnx": {"onnx": pins["onnx"], "onnxruntime": pins["onnxruntime-gpu"], "onnxscript": pins["onnxscript"]},
    }
    for dotted, value in changes.items():
        section, field = dotted.split("__")
        record[section][field] = value
    return record


def test_toolchain_record_is_held_against_the_lock(tmp_path, capsys):
    assert docker.record_differences(_record(), "cpu") == []
    assert docker.record_differences(_record(python__version="3.11.2", torch__version="2.13.0"), "cpu") == [
        f"python.version: the lock pins {read_lock().python}, the record says 3.11.2",
        "torch.version: the lock pins 2.13.0+cpu, the record says 2.13.0",
    ]
    # the cuda variant pins torch's CUDA build: a CPU record differs from it
    assert docker.record_differences(_record(), "cuda") == [
        "torch.version: the lock pins 2.13.0, the record says 2.13.0+cpu"
    ]
    path = tmp_path / "toolchain.json"
    path.write_text(json.dumps(_record(onnx__onnxruntime="1.30.0")))
    assert docker.main([str(path), "cpu"]) == 1
    assert "onnx.onnxruntime: the lock pins 1.31.1, the record says 1.30.0" in capsys.readouterr().err
    path.write_text(json.dumps(_record()))
    assert docker.main([str(path), "cpu"]) == 0
    assert "matches the lock" in capsys.readouterr().out


@pytest.mark.parametrize("engine", [docker.DOCKER, docker.PODMAN])
def test_run_mounts_the_hosts_machine_id_so_containers_on_one_host_compare(tmp_path, engine):
    command = docker.run_command(["bench"], "fusedbench:test", tmp_path, gpus=False, tty=False, engine=engine)
    mount = "/etc/machine-id:/etc/machine-id:ro"
    assert (mount in command) == Path("/etc/machine-id").is_file()


@pytest.mark.skipif(not hasattr(os, "getuid") or os.getuid() != 0, reason="hands files between users: needs root")
def test_a_root_run_gets_its_reports_back_from_the_image_user(tmp_path, monkeypatch):
    # Root's reports folder is lent to the image's user for the run (uid 10001 here) and what that user wrote
    # comes back to the folder's owner afterwards; a file of another user stays as it was.
    reports = tmp_path / "reports"
    reports.mkdir()
    other = reports / "someone-else.txt"
    other.write_text("kept")
    os.chown(other, 4242, 4242)
    command = docker.run_command(
        ["bench", "--quick"], "fusedbench:cpu", reports, gpus=False, tty=False, engine="podman"
    )
    monkeypatch.setattr(docker.shutil, "which", lambda tool: f"/usr/bin/{tool}")
    monkeypatch.setattr(docker, "_inspect_user", lambda engine, tag: "10001")
    seen = {}

    def container(run, check):  # what the image's user does: write a report into the mounted folder
        seen["folder_uid"] = reports.stat().st_uid
        report = reports / "run.csv"
        report.write_text("workload,shape\n")
        os.chown(report, 10001, 10001)
        return subprocess.CompletedProcess(run, 0)

    monkeypatch.setattr(docker.subprocess, "run", container)
    assert docker.run(command).returncode == 0
    assert seen["folder_uid"] == 10001  # writable by the image's user while it runs
    assert (reports / "run.csv").stat().st_uid == 0 and reports.stat().st_uid == 0
    assert other.stat().st_uid == 4242
