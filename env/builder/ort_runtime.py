"""What the installed onnxruntime can do, observed from its own shared library.

Two facts decide how the custom-op library is built and used:

* the highest C API version the runtime serves: a library compiled against
  headers of API version N asks ``OrtApiBase::GetApi(N)`` and loads into any
  runtime whose maximum is >= N. We ask the runtime's ``libonnxruntime.so``
  directly (``GetApi(n)`` returns NULL past its maximum) and cross-check with
  the release rule of ORT 1.x (1.m serves API m, true since 1.7);
* whether the CUDA execution provider really runs. onnxruntime-gpu lists
  ``CUDAExecutionProvider`` as "available" even on a machine without the CUDA
  libraries and then falls back to CPU with only a log line; creating a
  session that asks for CUDA tells the truth, and ORT's log says which
  library is missing.

The probes run in a child process: ORT prints a line to stderr for every
unsupported API version it is asked for, and loading the CUDA provider pulls
in hundreds of MB of libraries (and an error log) we do not want in the caller.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from env.paths import REPO_ROOT

# The highest API version probed; far above any ORT 1.x release.
_PROBE_LIMIT = 1000


@dataclass(frozen=True)
class RuntimeApi:
    version: str  # the runtime's own version string, e.g. "1.31.1"
    api_version: int  # the highest OrtApi version it serves
    library: Path
    how: str  # one line: how api_version was established


def onnxruntime_capi_dir() -> Path:
    """The installed onnxruntime's capi/ folder (found without importing onnxruntime)."""
    spec = importlib.util.find_spec("onnxruntime")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("onnxruntime is not installed in this Python environment")
    return Path(next(iter(spec.submodule_search_locations))) / "capi"


def runtime_library() -> Path:
    """The runtime's C library (libonnxruntime.so.<version>), which exports OrtGetApiBase."""
    candidates = sorted(onnxruntime_capi_dir().glob("libonnxruntime.so*"))
    if not candidates:
        raise RuntimeError(f"no libonnxruntime.so* in {onnxruntime_capi_dir()}; cannot query the ORT C API version")
    return candidates[-1]


_API_PROBE = r"""
import ctypes, json, sys
lib = ctypes.CDLL(sys.argv[1])
class OrtApiBase(ctypes.Structure):
    _fields_ = [("GetApi", ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_uint32)),
                ("GetVersionString", ctypes.CFUNCTYPE(ctypes.c_char_p))]
lib.OrtGetApiBase.restype = ctypes.POINTER(OrtApiBase)
base = lib.OrtGetApiBase().contents
# Versions are served as one contiguous range 1..max: find max by bisection.
lo, hi = 0, int(sys.argv[2])
while lo < hi:
    mid = (lo + hi + 1) // 2
    if base.GetApi(mid):
        lo = mid
    else:
        hi = mid - 1
print(json.dumps({"version": base.GetVersionString().decode(), "api_version": lo}))
"""


@lru_cache(maxsize=1)
def runtime_api() -> RuntimeApi:
    """The running onnxruntime's version and highest C API version (probed, then cross-checked)."""
    library = runtime_library()
    probe = subprocess.run(
        [sys.executable, "-c", _API_PROBE, str(library), str(_PROBE_LIMIT)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    if probe.returncode != 0:
        raise RuntimeError(f"could not query the C API of {library}:\n{probe.stderr.strip()}")
    facts = json.loads(probe.stdout.strip().splitlines()[-1])
    version, api_version = facts["version"], int(facts["api_version"])
    if api_version < 1:
        raise RuntimeError(f"{library} (onnxruntime {version}) serves no C API version at all")
    how = f"OrtGetApiBase()->GetApi(n) of {library.name} is non-NULL for n <= {api_version}"
    major, minor = _major_minor(version)
    if major == 1 and minor is not None:
        if minor != api_version:
            # Not fatal (the probe is the truth), but worth seeing in the record.
            how += f"; differs from the 1.x release rule (1.{minor} -> API {minor})"
        else:
            how += f"; agrees with the 1.x release rule (1.{minor} -> API {minor})"
    return RuntimeApi(version=version, api_version=api_version, library=library, how=how)


def _major_minor(version: str) -> tuple[int | None, int | None]:
    parts = version.split(".")
    try:
        return int(parts[0]), int(parts[1])
    except (IndexError, ValueError):
        return None, None


@lru_cache(maxsize=1)
def cuda_provider_status() -> tuple[bool, str]:
    """Whether onnxruntime's CUDA execution provider really runs here, and why not.

    Runs the op package's probe (ops/ort/cuda_probe.py) as a script: the same
    question sessions ask, answered before the op library is built.
    """
    done = subprocess.run(
        [sys.executable, str(REPO_ROOT / "ops" / "ort" / "cuda_probe.py")],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    lines = done.stdout.strip().splitlines()
    if done.returncode != 0 or not lines:
        tail = done.stderr.strip().splitlines()[-1:] or [f"exit status {done.returncode}"]
        return False, f"the CUDA probe failed: {tail[0]}"
    usable, why = json.loads(lines[-1])
    return bool(usable), str(why)


__all__ = ["RuntimeApi", "cuda_provider_status", "onnxruntime_capi_dir", "runtime_api", "runtime_library"]
