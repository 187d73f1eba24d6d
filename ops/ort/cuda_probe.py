"""Whether onnxruntime's CUDA execution provider really runs here, and why not.

onnxruntime-gpu lists ``CUDAExecutionProvider`` as available even where the
CUDA libraries are missing, then falls back to CPU with only a log line.
Creating a one-node session that asks for CUDA tells the truth, and ORT's log
says which library is missing. The probe runs in a child process (this file
run as a script): loading the CUDA provider pulls in hundreds of MB of
libraries and an error log the caller does not want.

Only the standard library is imported at module level, so the build tooling
runs this same file as a script before the op library exists.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
from functools import lru_cache
from pathlib import Path

PROBE_SCRIPT = Path(__file__).resolve()


def last_error(log: str) -> str | None:
    """The informative part of ORT's log: the dlopen error if there is one, else the last line."""
    text = re.sub(r"\x1b\[[0-9;]*m", "", log)
    if match := re.search(r"with error: (.+)", text):
        return match.group(1).strip()
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1] if lines else None


def _probe() -> tuple[bool, str]:
    """Runs in the child: a CUDA session of one Identity node, with ORT's log captured from fd 2."""
    import onnxruntime as ort
    from onnx import TensorProto, helper

    available = ort.get_available_providers()
    if "CUDAExecutionProvider" not in available:
        return False, f"this onnxruntime build has no CUDA execution provider (available: {', '.join(available)})"
    graph = helper.make_graph(
        [helper.make_node("Identity", ["x"], ["y"])],
        "cuda_probe",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=10)
    with tempfile.TemporaryFile() as log:
        saved = os.dup(2)
        os.dup2(log.fileno(), 2)
        try:
            session = ort.InferenceSession(
                model.SerializeToString(), providers=["CUDAExecutionProvider", "CPUExecutionProvider"]
            )
            providers, failure = session.get_providers(), None
        except Exception as error:  # ORT raises its own pybind exception types
            providers, failure = [], str(error)
        finally:
            os.dup2(saved, 2)
            os.close(saved)
        log.seek(0)
        logged = log.read().decode(errors="replace")
    if failure is not None:
        return False, f"a CUDA session could not be created: {last_error(failure) or failure}"
    if "CUDAExecutionProvider" in providers:
        return True, f"onnxruntime {ort.__version__} creates CUDAExecutionProvider sessions"
    return False, (
        f"CUDAExecutionProvider is listed by onnxruntime {ort.__version__} but a session requesting it fell back "
        f"to {', '.join(providers)}: {last_error(logged) or 'no reason logged'}"
    )


@lru_cache(maxsize=1)
def cuda_provider_status() -> tuple[bool, str]:
    """(usable, why): the probe's answer, asked once per process."""
    return run_probe(sys.executable)


def run_probe(python: str) -> tuple[bool, str]:
    """Run this file as a script under ``python`` and read its one-line JSON answer."""
    done = subprocess.run([python, str(PROBE_SCRIPT)], capture_output=True, text=True, timeout=300, check=False)
    lines = done.stdout.strip().splitlines()
    if done.returncode != 0 or not lines:
        return False, f"the CUDA probe failed: {last_error(done.stderr) or f'exit status {done.returncode}'}"
    usable, why = json.loads(lines[-1])
    return bool(usable), str(why)


if __name__ == "__main__":
    print(json.dumps(_probe()))
