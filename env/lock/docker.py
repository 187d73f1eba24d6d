"""`invoke docker.build` / `invoke docker.run`: the image from ./Dockerfile, built and run.

The build args come from their one source each: the pins (the sha256 of
environment.lock.yml followed by requirements/cuda.txt, and the lock's
``TORCH_CUDA_ARCH_LIST``), git (the commit) and the Dockerfile's own ARG
defaults (the base image and its digest), so the labels say exactly what went
in. Commands are built as lists here and only executed by :func:`run`.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from env.lock.lockfile import LOCK_PATH, read_lock, requirements_path
from env.paths import REPO_ROOT
from env.repo import git_commit

DOCKERFILE = REPO_ROOT / "Dockerfile"
DEFAULT_TAG = "fusedbench:local"
# Where the image writes reports (its FUSEDBENCH_REPORTS_DIR); the host folder is mounted there.
IMAGE_REPORTS_DIR = "/reports"

_ARG = re.compile(r'^ARG\s+([A-Za-z_][A-Za-z0-9_]*)(?:=(.*))?$')


class DockerError(RuntimeError):
    """Docker cannot do what was asked; the message says why and what to do."""


def dockerfile_arg_defaults(dockerfile: Path = DOCKERFILE) -> dict[str, str]:
    """ARG name -> default value, as written in the Dockerfile (first definition wins)."""
    defaults: dict[str, str] = {}
    for line in dockerfile.read_text().splitlines():
        match = _ARG.match(line.strip())
        if match and match.group(2) is not None and match.group(1) not in defaults:
            defaults[match.group(1)] = match.group(2).strip().strip('"')
    return defaults


def lock_sha256(lock: Path = LOCK_PATH, requirements: Path | None = None) -> str:
    """sha256 of the lock followed by the image's requirements file (scripts/create_env.sh's stamp)."""
    requirements = requirements or requirements_path("cuda")
    return hashlib.sha256(lock.read_bytes() + requirements.read_bytes()).hexdigest()


def build_args(max_jobs: int | None = None, base_digest: str | None = None) -> dict[str, str]:
    """The --build-arg values of `invoke docker.build`."""
    defaults = dockerfile_arg_defaults()
    args = {
        "CUDA_IMAGE": defaults["CUDA_IMAGE"],
        "CUDA_IMAGE_DIGEST": base_digest or defaults["CUDA_IMAGE_DIGEST"],
        "TORCH_CUDA_ARCH_LIST": read_lock().variables["TORCH_CUDA_ARCH_LIST"],
        "LOCK_SHA256": lock_sha256(),
        "GIT_COMMIT": git_commit(),
    }
    if not re.fullmatch(r"sha256:[0-9a-f]{64}", args["CUDA_IMAGE_DIGEST"]):
        raise DockerError(f"base digest must look like sha256:<64 hex digits>, got {args['CUDA_IMAGE_DIGEST']!r}")
    if max_jobs:
        args["MAX_JOBS"] = str(max_jobs)
    uid = os.getuid()
    if uid != 0:  # reports in the mounted folder then belong to the host user
        args["FUSEDBENCH_UID"] = str(uid)
    return args


def build_command(tag: str = DEFAULT_TAG, max_jobs: int | None = None, base_digest: str | None = None) -> list[str]:
    command = ["docker", "build", "--file", str(DOCKERFILE), "--tag", tag]
    for name, value in build_args(max_jobs, base_digest).items():
        command += ["--build-arg", f"{name}={value}"]
    return command + [str(REPO_ROOT)]


def host_has_gpu() -> bool:
    """True when `nvidia-smi -L` lists a GPU (then the container gets --gpus all)."""
    if shutil.which("nvidia-smi") is None:
        return False
    try:
        result = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=30, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return result.returncode == 0 and "GPU" in result.stdout


def run_command(task: list[str], tag: str = DEFAULT_TAG, reports: Path | None = None,
                gpus: bool | None = None, tty: bool | None = None) -> list[str]:
    """`docker run` of one invoke task line in the image, the reports folder mounted."""
    if not task:
        raise DockerError("give the invoke task to run in the image, e.g. `invoke docker.run bench --baseline all`")
    reports = (reports or REPO_ROOT / "reports").resolve()
    gpus = host_has_gpu() if gpus is None else gpus
    tty = sys.stdout.isatty() if tty is None else tty
    command = ["docker", "run", "--rm", "--volume", f"{reports}:{IMAGE_REPORTS_DIR}"]
    # The host's machine id (read-only): reports name the machine by its hash, the same in every container.
    command += ["--volume", "/etc/machine-id:/etc/machine-id:ro"] if Path("/etc/machine-id").is_file() else []
    if gpus:
        command += ["--gpus", "all"]
    if tty:
        command += ["--tty"]
    return command + [tag, *task]


def engine_problem() -> str | None:
    """None when a Docker engine answers; otherwise why not, in one message."""
    if shutil.which("docker") is None:
        return "the docker client is not installed (install Docker Engine or Docker Desktop)"
    try:
        result = subprocess.run(["docker", "version", "--format", "{{.Server.Version}}"], capture_output=True,
                                text=True, timeout=60, check=False)
    except subprocess.TimeoutExpired:
        return "the Docker engine did not answer within 60 s"
    if result.returncode != 0 or not result.stdout.strip():
        detail = (result.stderr.strip().splitlines() or ["no server version"])[-1]
        return (f"no Docker engine is reachable ({detail}). The client is installed but no daemon answers: "
                "start Docker, or set DOCKER_HOST to a reachable engine")
    return None


def _image_of(run: list[str]) -> str:
    """The image of a :func:`run_command` line: the first word after the options."""
    words = iter(run[2:])
    for word in words:
        if word in ("--volume", "--gpus"):
            next(words)
        elif not word.startswith("--"):
            return word
    raise DockerError(f"no image in {' '.join(run)}")


def _let_image_user_write(folder: Path, tag: str) -> None:
    """As root on the host, hand the reports folder to the image's numeric user.

    `invoke docker.build` bakes in the host user's uid, so for anyone but root
    the folder is already theirs; root's folder would be read-only to the
    image's non-root user.
    """
    if os.getuid() != 0:
        return
    user = subprocess.run(["docker", "image", "inspect", "--format", "{{.Config.User}}", tag],
                          capture_output=True, text=True, check=False).stdout.strip()
    if user.split(":")[0].isdigit():
        os.chown(folder, int(user.split(":")[0]), -1)


@dataclass
class DockerRun:
    command: list[str]
    returncode: int


def run(command: list[str]) -> DockerRun:
    """Check the engine, then run ``command`` with its output going straight to the terminal."""
    problem = engine_problem()
    if problem:
        raise DockerError(problem)
    if command[:2] == ["docker", "run"]:
        mount = Path(command[command.index("--volume") + 1].rsplit(":", 1)[0])
        mount.mkdir(parents=True, exist_ok=True)
        _let_image_user_write(mount, _image_of(command))
    print("$ " + " ".join(command), flush=True)
    return DockerRun(command, subprocess.run(command, check=False).returncode)
