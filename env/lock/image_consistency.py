"""Do the lock, the Dockerfile and the installed environment agree on the versions that matter?

torch, onnxruntime-gpu and Python (lock vs running environment), the CUDA
major (Dockerfile base tag vs onnxruntime-gpu's build vs the CUDA wheels the
lock pins for torch), the cuDNN major (base tag carries cuDNN; onnxruntime-gpu
vs the pinned nvidia-cudnn wheel), TORCH_CUDA_ARCH_LIST (the lock's variable
is the one the image uses) and the install path (the Dockerfile calls
scripts/create_env.sh). Each check reads its facts from the files themselves,
so a test can point it at modified copies.
"""

from __future__ import annotations

import platform
import re
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

from packaging.version import Version

from env.lock.docker import DOCKERFILE, dockerfile_arg_defaults
from env.lock.lockfile import LOCK_PATH, installed_versions, read_lock

_CUDA_TAG = re.compile(r"^nvidia/cuda:(\d+)\.(\d+)\.(\d+)-(cudnn-)?devel-ubuntu(\d+\.\d+)$")
_DIGEST = re.compile(r"^sha256:[0-9a-f]{64}$")
_CU_SUFFIX = re.compile(r"-cu(\d+)$")


@dataclass(frozen=True)
class OrtCuda:
    """What the installed onnxruntime-gpu was built for."""

    cuda: str  # e.g. "13.0"
    cudnn_major: int

    @property
    def cuda_major(self) -> int:
        return int(self.cuda.split(".")[0])


def installed_ort_cuda(distribution: str = "onnxruntime-gpu") -> OrtCuda:
    """Read the CUDA and cuDNN versions from onnxruntime-gpu's files, without importing it."""
    dist = metadata.distribution(distribution)
    info = Path(dist.locate_file("onnxruntime/capi/build_and_package_info.py")).read_text()
    cuda = re.search(r"^cuda_version\s*=\s*'([\d.]+)'", info, re.M)
    init = Path(dist.locate_file("onnxruntime/__init__.py")).read_text()
    cudnn = sorted({int(m) for m in re.findall(r"libcudnn\.so\.(\d+)", init)})
    if not cuda or len(cudnn) != 1:
        raise ValueError(f"cannot tell the CUDA/cuDNN versions of {distribution} {dist.version}")
    return OrtCuda(cuda=cuda.group(1), cudnn_major=cudnn[0])


def problems(
    lock_path: Path = LOCK_PATH,
    dockerfile: Path = DOCKERFILE,
    installed: dict[str, str] | None = None,
    python_version: str | None = None,
    ort: OrtCuda | None = None,
) -> list[str]:
    """Every disagreement, one line each (empty: all agree)."""
    lock = read_lock(lock_path)
    installed = installed_versions() if installed is None else installed
    python_version = python_version or platform.python_version()
    ort = ort or installed_ort_cuda()
    found: list[str] = []

    # Lock vs the installed environment.
    if python_version != lock.python:
        found.append(f"python: lock {lock.python}, running {python_version}")
    for name in ("torch", "onnxruntime-gpu"):
        pinned, have = lock.pins.get(name), installed.get(name)
        if pinned is None:
            found.append(f"{name}: not pinned in the lock's pip list")
        elif have is None or Version(have).public != Version(pinned).public:
            found.append(f"{name}: lock {pinned}, installed {have}")
    if "torch" in lock.cuda_pins and lock.cuda_pins["torch"] != lock.pins.get("torch"):
        found.append(f"torch: pip list {lock.pins.get('torch')}, cuda-pip {lock.cuda_pins['torch']}")

    # The Dockerfile's base image.
    args = dockerfile_arg_defaults(dockerfile)
    tag = args.get("CUDA_IMAGE", "")
    match = _CUDA_TAG.match(tag)
    if not match:
        found.append(f"Dockerfile: CUDA_IMAGE {tag!r} is not an nvidia/cuda:X.Y.Z-[cudnn-]devel-ubuntuNN image")
        return found
    image_cuda_major = int(match.group(1))
    for arg in ("CUDA_IMAGE_DIGEST", "MICROMAMBA_IMAGE_DIGEST"):
        if not _DIGEST.match(args.get(arg, "")):
            found.append(f"Dockerfile: {arg} must be sha256:<64 hex>, got {args.get(arg)!r}")

    # CUDA major: base image, onnxruntime-gpu's build, torch's CUDA wheels.
    if ort.cuda_major != image_cuda_major:
        found.append(f"CUDA major: Dockerfile base {tag} is CUDA {image_cuda_major}, "
                     f"onnxruntime-gpu {installed.get('onnxruntime-gpu')} is built for CUDA {ort.cuda}")
    toolkit = lock.cuda_pins.get("cuda-toolkit")
    if toolkit is None:
        found.append("cuda-pip: no cuda-toolkit pin (torch's CUDA wheel requires one)")
    elif Version(toolkit).major != image_cuda_major:
        found.append(f"CUDA major: Dockerfile base {tag} is CUDA {image_cuda_major}, "
                     f"the lock's torch CUDA wheels are cuda-toolkit {toolkit}")
    for name in lock.cuda_pins:
        suffix = _CU_SUFFIX.search(name)
        if suffix and int(suffix.group(1)) != image_cuda_major:
            found.append(f"CUDA major: cuda-pip {name} is for CUDA {suffix.group(1)}, the base image is {image_cuda_major}")
    installed_torch = installed.get("torch", "")
    local = Version(installed_torch).local if installed_torch else None
    if local and local.startswith("cu") and int(local[2:-1]) != image_cuda_major:
        found.append(f"CUDA major: installed torch {installed_torch}, the base image is CUDA {image_cuda_major}")

    # cuDNN: the base image must carry it, and the pinned wheel must be what ORT loads.
    if not match.group(4):
        found.append(f"cuDNN: Dockerfile base {tag} has no cuDNN (onnxruntime-gpu needs cuDNN {ort.cudnn_major})")
    cudnn = next((v for n, v in lock.cuda_pins.items() if n.startswith("nvidia-cudnn")), None)
    if cudnn is None or Version(cudnn).major != ort.cudnn_major:
        found.append(f"cuDNN major: onnxruntime-gpu loads cuDNN {ort.cudnn_major}, the lock pins nvidia-cudnn {cudnn}")

    # TORCH_CUDA_ARCH_LIST comes from the lock: the ARG default equals it, the
    # build checks the ARG against the lock, and the ENV is that ARG.
    text = dockerfile.read_text()
    arch = lock.variables.get("TORCH_CUDA_ARCH_LIST")
    if args.get("TORCH_CUDA_ARCH_LIST") != arch:
        found.append(f"TORCH_CUDA_ARCH_LIST: Dockerfile default {args.get('TORCH_CUDA_ARCH_LIST')!r}, lock {arch!r}")
    if "scripts/lock_pins.py var TORCH_CUDA_ARCH_LIST" not in text:
        found.append("TORCH_CUDA_ARCH_LIST: the Dockerfile no longer checks its build arg against the lock")
    if not re.search(r"^ENV TORCH_CUDA_ARCH_LIST=\$\{TORCH_CUDA_ARCH_LIST\}", text, re.M):
        found.append("TORCH_CUDA_ARCH_LIST: the image's ENV is not the checked build arg")

    # The same install path as .ci/run and README.
    if not re.search(r"^\s*(?:&& )?scripts/create_env\.sh\b", text, re.M):
        found.append("Dockerfile: the environment is not created by scripts/create_env.sh")
    if not re.search(r"FUSEDBENCH_TORCH_VARIANT=cuda\b", text):
        found.append("Dockerfile: FUSEDBENCH_TORCH_VARIANT=cuda is not set, so the CUDA wheels would be missing")
    return found
