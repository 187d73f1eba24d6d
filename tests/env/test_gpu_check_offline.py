"""scripts/gpu_check_offline.sh: a bundle made here runs gpu-check with no registry, on that machine's Python.

Here the CPU path (--dry-run) stands in for the GPU machine: what is checked is that the bundle holds the
pinned wheels and the verified header cache, and that `run` installs the wheels privately and leaves
gpu-check's summary in OUT. It skips the build: gpu-check sets CUDA_HOME for torch's extension builder,
which would make this checkout's next build start over.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from env.builder.ort_headers import NPM_PACKAGE, NPM_VERSION, npm_source_id
from env.paths import REPO_ROOT

SCRIPT = REPO_ROOT / "scripts" / "gpu_check_offline.sh"


def pinned(name: str) -> str:
    lock = (REPO_ROOT / "requirements" / "cuda.txt").read_text().splitlines()
    return next(line.split()[0] for line in lock if line.startswith(f"{name}=="))


@pytest.mark.slow  # downloads from the package index
def test_bundle_then_run_leaves_the_summary_in_out(tmp_path):
    bundle = tmp_path / "bundle"
    made = subprocess.run(
        ["bash", str(SCRIPT), "bundle", str(bundle), "--no-ort-gpu"], capture_output=True, text=True, check=False
    )
    assert made.returncode == 0, made.stderr[-2000:]
    wheels = sorted(p.name for p in (bundle / "wheels").glob("*.whl"))
    for name in ("invoke", "liger-kernel"):
        version = pinned(name).split("==")[1]
        assert any(w.startswith(f"{name.replace('-', '_')}-{version}-") for w in wheels), (name, wheels)
    headers = bundle / "cache" / "ort-headers" / npm_source_id()
    assert (headers / "onnxruntime_c_api.h").is_file()

    # The machine's own python3: here the environment's, first on PATH.
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    out = tmp_path / "out"
    ran = subprocess.run(
        ["bash", str(SCRIPT), "run", str(bundle), str(out), "--dry-run", "--skip-build", "--no-tests", "--no-bench"],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
        check=False,
    )
    assert ran.returncode == 0, ran.stdout[-3000:] + ran.stderr[-2000:]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["steps"]["build"]["status"] == "skipped (--skip-build)"
    assert summary["steps"]["bench"]["status"] == "skipped (--no-bench)"
    assert summary["dry_run"] is True
    record = json.loads((out / "toolchain.json").read_text())
    assert record["build"]["ort_headers"]["source"] == f"npm:{NPM_PACKAGE}@{NPM_VERSION}"


def test_run_without_its_arguments_says_how_to_call_it():
    done = subprocess.run(["bash", str(SCRIPT), "run"], capture_output=True, text=True, check=False)
    assert done.returncode == 2
    assert "usage:" in done.stderr and "run DIR OUT" in done.stderr
