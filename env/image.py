"""`invoke docker.build` / `invoke docker.run`: the image from ./Dockerfile, built and run.

Two variants of one Dockerfile (build arg ``VARIANT``): ``cuda`` (the default)
and ``cpu``. The build args come from their one source each: the pins (the
sha256 of environment.lock.yml followed by requirements/<variant>.txt, and the
lock's ``TORCH_CUDA_ARCH_LIST``), git (the commit) and the Dockerfile's own ARG
defaults (the variant's base image and its digest), so the labels say exactly
what went in.

Two engines: Docker where a Docker engine answers; otherwise buildah (build)
and podman (run), which need no daemon. Commands are built as lists here and
only executed by :func:`run`.
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

from env.lock.lockfile import LOCK_PATH, read_lock, read_pins, requirements_path
from env.paths import REPO_ROOT, reports_dir
from env.repo import git_commit

DOCKERFILE = REPO_ROOT / "Dockerfile"
DEFAULT_TAG = "fusedbench:local"
DEFAULT_VARIANT = "cuda"
# Where the image writes reports (its FUSEDBENCH_REPORTS_DIR); the host folder is mounted there.
IMAGE_REPORTS_DIR = "/reports"
# The build args naming each variant's base image and its digest.
BASE_ARGS = {"cuda": ("CUDA_IMAGE", "CUDA_IMAGE_DIGEST"), "cpu": ("PYTHON_IMAGE", "PYTHON_IMAGE_DIGEST")}
DOCKER, PODMAN = "docker", "podman"
# podman runs containers with runc: crun refuses hosts whose cgroups are in hybrid mode.
PODMAN_RUN = [PODMAN, "--runtime", "runc", "run"]

_ARG = re.compile(r"^ARG\s+([A-Za-z_][A-Za-z0-9_]*)(?:=(.*))?$")


class DockerError(RuntimeError):
    """No engine can do what was asked; the message says why and what to do."""


def dockerfile_arg_defaults(dockerfile: Path = DOCKERFILE) -> dict[str, str]:
    """ARG name -> default value, as written in the Dockerfile (first definition wins)."""
    defaults: dict[str, str] = {}
    for line in dockerfile.read_text().splitlines():
        match = _ARG.match(line.strip())
        if match and match.group(2) is not None and match.group(1) not in defaults:
            defaults[match.group(1)] = match.group(2).strip().strip('"')
    return defaults


def lock_sha256(lock: Path = LOCK_PATH, requirements: Path | None = None, variant: str = DEFAULT_VARIANT) -> str:
    """sha256 of the lock followed by the variant's requirements file (scripts/create_env.sh's stamp)."""
    requirements = requirements or requirements_path(variant)
    return hashlib.sha256(lock.read_bytes() + requirements.read_bytes()).hexdigest()


def check_variant(variant: str) -> str:
    if variant not in BASE_ARGS:
        raise DockerError(f"--variant must be one of {', '.join(BASE_ARGS)}, got {variant!r}")
    return variant


def build_args(
    max_jobs: int | None = None,
    base_digest: str | None = None,
    variant: str = DEFAULT_VARIANT,
    torch_find_links: str | None = None,
) -> dict[str, str]:
    """The --build-arg values of `invoke docker.build`."""
    variant = check_variant(variant)
    defaults = dockerfile_arg_defaults()
    image_arg, digest_arg = BASE_ARGS[variant]
    args = {
        "VARIANT": variant,
        image_arg: defaults[image_arg],
        digest_arg: base_digest or defaults[digest_arg],
        "TORCH_CUDA_ARCH_LIST": read_lock().variables["TORCH_CUDA_ARCH_LIST"],
        "LOCK_SHA256": lock_sha256(variant=variant),
        "GIT_COMMIT": git_commit(),
    }
    if not re.fullmatch(r"sha256:[0-9a-f]{64}", args[digest_arg]):
        raise DockerError(f"base digest must look like sha256:<64 hex digits>, got {args[digest_arg]!r}")
    if max_jobs:
        args["MAX_JOBS"] = str(max_jobs)
    if torch_find_links:
        if variant != "cpu":
            raise DockerError(
                "--torch-find-links applies to the cpu variant only (the cuda variant's torch is on PyPI)"
            )
        args["TORCH_FIND_LINKS"] = torch_find_links
    uid = os.getuid()
    if uid != 0:  # reports in the mounted folder then belong to the host user
        args["FUSEDBENCH_UID"] = str(uid)
    return args


def _local_folder(location: str | None) -> Path | None:
    """``location`` as a folder on this machine, or None for a URL (or nothing)."""
    if not location or re.match(r"^[a-z][a-z0-9+.-]*://", location):
        return None
    folder = Path(location).resolve()
    if not folder.is_dir():
        raise DockerError(f"--torch-find-links must be a URL or an existing folder of wheels, got {location!r}")
    return folder


def build_command(
    tag: str = DEFAULT_TAG,
    max_jobs: int | None = None,
    base_digest: str | None = None,
    variant: str = DEFAULT_VARIANT,
    torch_find_links: str | None = None,
    engine: str = DOCKER,
    local_base: bool = False,
) -> list[str]:
    """`docker build`, or `buildah bud` (engine podman), of the Dockerfile with its build args.

    buildah only: a local folder of wheels as ``torch_find_links`` is
    bind-mounted into the build, read-only, at the same path, and
    ``local_base`` takes the base images from local storage, never pulling.
    Docker's builder can do neither.
    """
    folder = _local_folder(torch_find_links)
    args = build_args(max_jobs, base_digest, variant, str(folder) if folder else torch_find_links)
    if engine == DOCKER:
        if folder or local_base:
            raise DockerError(
                "docker build can neither mount a folder of wheels nor refuse to pull: give "
                "--torch-find-links a URL (default: PyTorch's CPU index), or build with buildah"
            )
        command = ["docker", "build"]
    else:
        # chroot isolation: RUN steps need no user namespace or cgroup set-up;
        # --layers: an unchanged step (the environment) is reused by the next build;
        # --jobs: the ORT headers stage downloads while the system stage installs;
        # --format=docker: the OCI format has no SHELL, and RUN steps need its pipefail.
        command = [
            "buildah",
            "bud",
            "--isolation=chroot",
            "--layers",
            "--jobs=2",
            "--format=docker",
            f"--pull={'never' if local_base else 'true'}",
        ]
        if folder:
            command += ["--volume", f"{folder}:{folder}:ro"]
    command += ["--file", str(DOCKERFILE), "--tag", tag]
    for name, value in args.items():
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


def run_command(
    task: list[str],
    tag: str = DEFAULT_TAG,
    reports: Path | None = None,
    gpus: bool | None = None,
    tty: bool | None = None,
    engine: str = DOCKER,
) -> list[str]:
    """`docker run` (or `podman run`) of one invoke task line in the image, the reports folder mounted."""
    if not task:
        raise DockerError("give the invoke task to run in the image, e.g. `invoke docker.run bench --baseline all`")
    reports = reports_dir(reports)
    gpus = host_has_gpu() if gpus is None else gpus
    tty = sys.stdout.isatty() if tty is None else tty
    command = ["docker", "run"] if engine == DOCKER else list(PODMAN_RUN)
    command += ["--rm", "--volume", f"{reports}:{IMAGE_REPORTS_DIR}"]
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
        result = subprocess.run(
            ["docker", "version", "--format", "{{.Server.Version}}"],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
    except subprocess.TimeoutExpired:
        return "the Docker engine did not answer within 60 s"
    if result.returncode != 0 or not result.stdout.strip():
        detail = (result.stderr.strip().splitlines() or ["no server version"])[-1]
        return (
            f"no Docker engine is reachable ({detail}). The client is installed but no daemon answers: "
            "start Docker, or set DOCKER_HOST to a reachable engine"
        )
    return None


def choose_engine() -> str:
    """docker where a Docker engine answers, else podman (with buildah) where both are installed."""
    problem = engine_problem()
    if problem is None:
        return DOCKER
    missing = [tool for tool in ("buildah", "podman") if shutil.which(tool) is None]
    if not missing:
        return PODMAN
    raise DockerError(
        f"{problem}; nor are buildah and podman, which need no daemon, installed "
        f"(missing: {', '.join(missing)}; Debian/Ubuntu: apt-get install buildah podman runc)"
    )


def _engine_of(command: list[str]) -> str:
    return DOCKER if command[0] == "docker" else PODMAN


# Options of a run line that take a value as the next word.
_RUN_OPTIONS_WITH_VALUE = {
    "--volume",
    "-v",
    "--gpus",
    "--env",
    "-e",
    "--user",
    "-u",
    "--uidmap",
    "--gidmap",
    "--runtime",
    "--mount",
    "--name",
    "--workdir",
    "-w",
}


def _image_of(run: list[str]) -> str:
    """The image of a :func:`run_command` line: the first word after `run` and its options."""
    words = iter(run[run.index("run") + 1 :])
    for word in words:
        if word in _RUN_OPTIONS_WITH_VALUE:
            next(words)
        elif not word.startswith("-"):
            return word
    raise DockerError(f"no image in {' '.join(run)}")


def _inspect_user(engine: str, tag: str) -> str:
    return subprocess.run(
        [engine, "image", "inspect", "--format", "{{.Config.User}}", tag], capture_output=True, text=True, check=False
    ).stdout.strip()


def _let_image_user_write(folder: Path, tag: str, engine: str) -> int | None:
    """As root on the host, hand the reports folder to the image's numeric user; return that uid.

    `invoke docker.build` bakes in the host user's uid, so for anyone but root
    the folder is already theirs; root's folder would be read-only to the
    image's non-root user.
    """
    if os.getuid() != 0:
        return None
    user = _inspect_user(engine, tag)
    if not user.split(":")[0].isdigit():
        return None
    os.chown(folder, int(user.split(":")[0]), -1)
    return int(user.split(":")[0])


def return_to_owner(folder: Path, owner: tuple[int, int], image_uid: int) -> int:
    """As root after the run: what the image's user owns under ``folder`` (and the folder) back to ``owner``.

    So the reports a root invocation writes belong to root, as its other
    files do, not to the image's uid. Files of anyone else are left alone.
    Returns how many paths changed owner.
    """
    changed = 0
    for path in [folder, *folder.rglob("*")]:
        if path.lstat().st_uid == image_uid:
            os.lchown(path, *owner)
            changed += 1
    return changed


@dataclass
class DockerRun:
    command: list[str]
    returncode: int


def run(command: list[str]) -> DockerRun:
    """Check the engine, then run ``command`` with its output going straight to the terminal."""
    engine = _engine_of(command)
    if engine == DOCKER:
        problem = engine_problem()
        if problem:
            raise DockerError(problem)
    elif shutil.which(command[0]) is None:
        raise DockerError(f"{command[0]} is not installed (Debian/Ubuntu: apt-get install buildah podman runc)")
    mount, owner, image_uid = None, None, None
    if "run" in command[:4]:
        mount = Path(command[command.index("--volume") + 1].rsplit(":", 1)[0])
        mount.mkdir(parents=True, exist_ok=True)
        owner = (mount.stat().st_uid, mount.stat().st_gid)
        image_uid = _let_image_user_write(mount, _image_of(command), engine)
    print("$ " + " ".join(command), flush=True)
    try:
        return DockerRun(command, subprocess.run(command, check=False).returncode)
    finally:
        if mount is not None and owner is not None and image_uid is not None:
            return_to_owner(mount, owner, image_uid)


def record_differences(record: dict, variant: str) -> list[str]:
    """Where a build's toolchain record (build/toolchain.json) differs from the lock: Python and the pinned packages."""
    pins = {name: pin.version for name, pin in read_pins(requirements_path(check_variant(variant))).items()}
    expected = {
        ("python", "version"): read_lock().python,
        ("torch", "version"): pins["torch"],
        ("onnx", "onnx"): pins["onnx"],
        ("onnx", "onnxruntime"): pins.get("onnxruntime-gpu", pins.get("onnxruntime")),
        ("onnx", "onnxscript"): pins["onnxscript"],
    }
    lines = []
    for (section, field), want in expected.items():
        found = (record.get(section) or {}).get(field)
        if found != want:
            lines.append(f"{section}.{field}: the lock pins {want}, the record says {found}")
    return lines


def main(argv: list[str]) -> int:
    """``python -m env.image RECORD VARIANT``: check a toolchain record against the lock (in the image)."""
    import json

    if len(argv) != 2:
        print("usage: python -m env.image build/toolchain.json cpu|cuda", file=sys.stderr)
        return 2
    record = json.loads(Path(argv[0]).read_text())
    if differences := record_differences(record, argv[1]):
        print("the toolchain record differs from the lock:\n  " + "\n  ".join(differences), file=sys.stderr)
        return 1
    print(
        f"toolchain record {argv[0]} matches the lock: Python {record['python']['version']}, "
        f"torch {record['torch']['version']}, onnxruntime {record['onnx']['onnxruntime']}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
