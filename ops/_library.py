"""Find and load the compiled libraries, and explain why when that fails.

Search order for each library (torch op, ONNX Runtime custom ops):
  1. $FUSEDBENCH_TORCH_LIBRARY / $FUSEDBENCH_ORT_LIBRARY (an explicit path);
  2. inside this package: ops/_C*.so and ops/libfused_norm_ort.so (an installed wheel);
  3. the library named by the last ``invoke build`` in build/toolchain.json.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import torch

from ops._paths import PACKAGE_DIR as _PACKAGE_DIR
from ops._paths import toolchain_record_path

# The ONNX Runtime custom-op library's file name, in the wheel and in build/ort.
ORT_LIBRARY_NAME = "libfused_norm_ort.so"


class LibraryNotBuiltError(ImportError):
    """No built library was found; the message says which command builds it."""


class LibraryLoadError(ImportError):
    """A built library exists but does not load; the message names the toolchain drift."""


def _recorded_artifact(name: str) -> Path | None:
    record = toolchain_record_path()
    if not record.exists():
        return None
    path = json.loads(record.read_text()).get("artifacts", {}).get(name)
    return Path(path) if path else None


def torch_library_path() -> Path:
    """Path of the torch op library that ``import ops`` loads."""
    explicit = os.environ.get("FUSEDBENCH_TORCH_LIBRARY")
    if explicit:
        return Path(explicit)
    installed = sorted(_PACKAGE_DIR.glob("_C*.so"))
    if installed:
        return installed[0]
    recorded = _recorded_artifact("torch_library")
    if recorded is not None and recorded.exists():
        return recorded
    raise LibraryNotBuiltError(
        "the fused_norm torch library is not built: run `invoke build` (JIT, into build/jit) "
        "or `invoke build --aot` (setup.py, into build/aot) first"
        + (f"; {recorded} is named in {toolchain_record_path()} but missing" if recorded else "")
    )


def ort_library_path() -> Path:
    """Path of the ONNX Runtime custom-op library (domain ``myops``): the installed one, else ``invoke build``'s."""
    explicit = os.environ.get("FUSEDBENCH_ORT_LIBRARY")
    if explicit:
        return Path(explicit)
    packaged = _PACKAGE_DIR / ORT_LIBRARY_NAME
    if packaged.is_file():
        return packaged
    recorded = _recorded_artifact("ort_library")
    if recorded is not None and recorded.exists():
        return recorded
    raise LibraryNotBuiltError(
        "the ONNX Runtime custom-op library is not built: run `invoke build` first"
        + (f"; {recorded} is named in {toolchain_record_path()} but missing" if recorded else "")
    )


def load_torch_library() -> Path:
    """Load the op library into torch (registers torch.ops.myops.*); idempotent."""
    path = torch_library_path()
    if str(path) in torch.ops.loaded_libraries:
        return path
    try:
        torch.ops.load_library(str(path))
    except OSError as error:
        # Typical: "undefined symbol: _ZN3c10..." after torch was upgraded.
        from ops._diagnosis import explain_load_failure

        record = _PACKAGE_DIR / "toolchain.json" if path.parent == _PACKAGE_DIR else toolchain_record_path()
        raise LibraryLoadError(explain_load_failure(path, error, record)) from error
    return path
