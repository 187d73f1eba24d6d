"""Child process of the hostile-graph corpus: loads and runs cases in ONNX Runtime with the custom-op library.

    python hostile_worker.py FOLDER LIBRARY FIRST LAST

Runs cases FIRST..LAST-1 of FOLDER/manifest.json in order. Before each case it
prints ``begin <index>`` and after it one JSON line with the outcome, flushed,
so the parent knows which case a crash or a hang happened in and starts a new
worker after it. Imports only numpy and onnxruntime: a fresh worker is up in
well under a second.

Outcomes: ``correct`` / ``wrong`` (the session ran; outputs against the
float64 references), ``op_error`` (the op's own error, at session creation or
run: its message starts with the op's name), ``ort_refused`` (ONNX Runtime
refused the graph or the feeds before the op ran), ``unverified`` (ran, but
the case has nothing to check the result against).
"""

from __future__ import annotations

import json
import os
import re
import sys
from pathlib import Path

import numpy as np
import onnxruntime as ort

# The op's own messages start with its name, after ORT's prefix for the stage that failed.
OP_ERROR = re.compile(r"(Status Message|initialization|failed): (fused_norm|fused_add_norm): ")


def session_options(library: str) -> ort.SessionOptions:
    options = ort.SessionOptions()
    options.register_custom_ops_library(library)
    options.intra_op_num_threads = 1
    options.log_severity_level = 4  # the corpus is malformed on purpose: ORT's warnings are expected
    return options


def classify_error(error: Exception, stage: str) -> dict:
    message = str(error)
    own = OP_ERROR.search(message) is not None
    return {
        "outcome": "op_error" if own else "ort_refused",
        "stage": stage,
        "error_type": type(error).__name__,
        "message": message[:500],
    }


def compare(outputs: list, case: dict, arrays) -> dict:
    references = [arrays[f"ref:{i}"] for i in range(sum(k.startswith("ref:") for k in arrays.files))]
    if references:
        if len(outputs) != len(references):
            return {"outcome": "wrong", "message": f"{len(outputs)} outputs, {len(references)} references"}
        worst = 0.0
        for output, reference in zip(outputs, references, strict=True):
            output = np.asarray(output)
            if output.shape != reference.shape:
                return {"outcome": "wrong", "message": f"shape {output.shape}, reference {reference.shape}"}
            if output.size == 0:
                continue
            error = np.abs(output.astype(np.float64) - reference)
            bound = case["atol"] + case["rtol"] * np.abs(reference)
            if not bool((error <= bound).all()):  # a NaN fails
                return {"outcome": "wrong", "message": f"max error {float(np.nanmax(error)):.3g} beyond the bound"}
            worst = max(worst, float(error.max()))
        return {"outcome": "correct", "max_error": worst}
    if case["empty_shape"] is not None:
        shapes = [list(np.asarray(o).shape) for o in outputs]
        if all(s == case["empty_shape"] for s in shapes):
            return {"outcome": "correct", "max_error": 0.0}
        return {"outcome": "wrong", "message": f"output shapes {shapes}, expected {case['empty_shape']}"}
    return {"outcome": "unverified"}


def run_case(folder: Path, library: str, case: dict) -> dict:
    stem = folder / f"{case['index']:04d}"
    arrays = np.load(f"{stem}.npz")
    feeds = {k.removeprefix("feed:"): arrays[k] for k in arrays.files if k.startswith("feed:")}
    try:
        session = ort.InferenceSession(
            f"{stem}.onnx", sess_options=session_options(library), providers=["CPUExecutionProvider"]
        )
    except Exception as error:  # ORT raises its own pybind exception types
        return classify_error(error, "load")
    try:
        outputs = session.run(None, feeds)
    except Exception as error:
        return classify_error(error, "run")
    return compare(outputs, case, arrays)


def main() -> None:
    folder, library, first, last = Path(sys.argv[1]), sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    manifest = json.loads((folder / "manifest.json").read_text())
    for case in manifest[first:last]:
        print(f"begin {case['index']}", flush=True)
        result = run_case(folder, library, case)
        print(json.dumps({"index": case["index"], **result}), flush=True)
    # What this worker checks ended with its last case. Ending the process here skips the interpreter's and the
    # C++ runtime's exit handlers: there onnxruntime's Python module frees a string that one of its own threads may
    # still read (AddressSanitizer caught it once, under load: a heap-use-after-free whose every frame is in
    # onnxruntime_pybind11_state, freed by __run_exit_handlers), which is not the library under test.
    sys.stdout.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
