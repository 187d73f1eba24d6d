"""The one locator of the CUDA toolkit: nvcc, its release, its include and library folders.

Every build step (the torch extension's CUDA decision, the ONNX Runtime
library's CUDA provider, the compile check, the emulator build, the toolchain
record) and ``invoke gpu-check`` ask here, so they agree on which toolkit a
machine has. nvcc is looked for where torch's extension builder looks: PATH,
then $CUDA_HOME/bin, $CUDA_PATH/bin, /usr/local/cuda/bin.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

NOT_FOUND = "nvcc not found (PATH, $CUDA_HOME/bin, $CUDA_PATH/bin, /usr/local/cuda/bin)"
_RELEASE = re.compile(r"release ([\d.]+), (V[\d.]+)")


@dataclass(frozen=True)
class CudaToolkit:
    home: Path
    nvcc: Path
    version: str | None  # "13.0 (V13.0.88)"; None when nvcc --version says nothing readable
    include_dir: Path
    library_dir: Path | None  # the folder holding libcudart.so; None in a toolkit without it

    @property
    def has_headers(self) -> bool:
        return (self.include_dir / "cuda_runtime_api.h").is_file()


def find_nvcc() -> Path | None:
    """nvcc from PATH, else from $CUDA_HOME, $CUDA_PATH or /usr/local/cuda (torch's extension builder's order)."""
    if found := shutil.which("nvcc"):
        return Path(found)
    for root in (os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda"):
        if root and (Path(root) / "bin" / "nvcc").is_file():
            return Path(root) / "bin" / "nvcc"
    return None


def nvcc_version(nvcc: Path) -> str | None:
    """ "13.0 (V13.0.88)" from ``nvcc --version``."""
    out = subprocess.run([str(nvcc), "--version"], capture_output=True, text=True, check=False).stdout
    match = _RELEASE.search(out)
    return f"{match.group(1)} ({match.group(2)})" if match else None


def _home(nvcc: Path) -> Path:
    """$CUDA_HOME, else the folder nvcc itself reports (it may be a wrapper script elsewhere), else its parent."""
    if home := os.environ.get("CUDA_HOME"):
        return Path(home)
    dry = subprocess.run(
        [str(nvcc), "--dryrun", "-c", "-x", "cu", os.devnull, "-o", os.devnull],
        capture_output=True,
        text=True,
        check=False,
    )
    if match := re.search(r"^#\$ _HERE_=(.+)$", dry.stdout + dry.stderr, re.M):
        return Path(match.group(1).strip()).parent
    return nvcc.resolve().parent.parent


def find_cuda_toolkit() -> CudaToolkit | None:
    """This machine's CUDA toolkit, or None when there is no nvcc (:data:`NOT_FOUND` says where it was looked for)."""
    nvcc = find_nvcc()
    if nvcc is None:
        return None
    home = _home(nvcc)
    library_dir = next((home / d for d in ("lib64", "lib") if (home / d / "libcudart.so").exists()), None)
    return CudaToolkit(home, nvcc, nvcc_version(nvcc), home / "include", library_dir)


def cuda_include_dir() -> Path | None:
    """The folder of cuda_runtime_api.h, or None when there is no toolkit or it has no headers."""
    toolkit = find_cuda_toolkit()
    return toolkit.include_dir if toolkit and toolkit.has_headers else None
