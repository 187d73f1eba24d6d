"""scripts/gpu_check_offline.sh carries a wheel too large for one call in parts: split here, one `receive` per
call there, then `unpack` reassembles it, checks its sha256 and installs it into a folder of its own.

A small wheel made here stands in for onnxruntime-gpu (the real one is 255 MB; its run is in
reports/gpu/bundle-dry-run/), split into parts of a few KiB. The machine's `python3` is this environment's.
"""

from __future__ import annotations

import base64
import hashlib
import os
import random
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from env.paths import REPO_ROOT

SCRIPT = REPO_ROOT / "scripts" / "gpu_check_offline.sh"
PART_BYTES = 4096


def make_wheel(folder: Path, payload: bytes) -> Path:
    """A valid pure-Python wheel of package `carried_demo` holding `payload` as data."""
    wheel = folder / "carried_demo-1.0-py3-none-any.whl"
    files = {
        "carried_demo/__init__.py": (
            b"from pathlib import Path\nPAYLOAD = (Path(__file__).parent / 'payload.bin').read_bytes()\n"
        ),
        "carried_demo/payload.bin": payload,
        "carried_demo-1.0.dist-info/METADATA": b"Metadata-Version: 2.1\nName: carried-demo\nVersion: 1.0\n",
        "carried_demo-1.0.dist-info/WHEEL": (
            b"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
        ),
    }
    record = []
    for name, data in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        record.append(f"{name},sha256={digest},{len(data)}")
    record.append("carried_demo-1.0.dist-info/RECORD,,")
    with zipfile.ZipFile(wheel, "w", zipfile.ZIP_STORED) as z:  # stored: the payload keeps its size
        for name, data in files.items():
            z.writestr(name, data)
        z.writestr("carried_demo-1.0.dist-info/RECORD", "\n".join(record) + "\n")
    return wheel


def script(*args: str, stage: Path) -> subprocess.CompletedProcess:
    env = {
        **os.environ,
        "FUSEDBENCH_ORT_STAGE": str(stage),
        "FUSEDBENCH_PART_BYTES": str(PART_BYTES),
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",  # the machine's python3
    }
    return subprocess.run(["bash", str(SCRIPT), *args], capture_output=True, text=True, env=env, timeout=300)


@pytest.fixture
def split_bundle(tmp_path):
    payload = random.Random(7).randbytes(5 * PART_BYTES + 123)  # incompressible: the wheel spans 6+ parts
    wheel = make_wheel(tmp_path, payload)
    bundle = tmp_path / "bundle"
    stage = tmp_path / "stage"
    done = script("split", str(wheel), str(bundle), stage=stage)
    assert done.returncode == 0, done.stderr
    manifest = dict(line.split("=", 1) for line in (bundle / "ort-gpu" / "manifest").read_text().splitlines())
    return bundle, stage, wheel, payload, manifest


def test_parts_received_in_turn_unpack_into_the_wheel_installed(split_bundle):
    bundle, stage, wheel, payload, manifest = split_bundle
    count = int(manifest["parts"])
    assert count == -(-wheel.stat().st_size // PART_BYTES) and count >= 6
    assert manifest["sha256"] == hashlib.sha256(wheel.read_bytes()).hexdigest()
    parts = sorted((bundle.parent / "bundle-parts").iterdir())
    assert [p.name for p in parts] == [f"part-{i:02d}" for i in range(count)]
    assert all(p.stat().st_size <= PART_BYTES for p in parts)

    for k in range(count):
        done = script("receive", str(bundle), str(k), stage=stage)
        assert done.returncode == 0, done.stderr
        assert f"part {k + 1} of {count}" in done.stdout
    done = script("unpack", str(bundle), stage=stage)
    assert done.returncode == 0, done.stderr
    site = Path(done.stdout.strip())
    assert site == stage / "site" and f"sha256 {manifest['sha256']} as recorded" in done.stderr
    imported = subprocess.run(
        [sys.executable, "-c", "import carried_demo, sys; sys.stdout.buffer.write(carried_demo.PAYLOAD)"],
        capture_output=True,
        env={**os.environ, "PYTHONPATH": str(site)},
        check=True,
    )
    assert imported.stdout == payload


def test_a_machine_handed_back_between_calls_says_start_over(split_bundle):
    bundle, stage, _, _, manifest = split_bundle
    for k in range(3):
        assert script("receive", str(bundle), str(k), stage=stage).returncode == 0
    for path in stage.iterdir():  # a fresh machine: /tmp is empty
        path.unlink()
    done = script("receive", str(bundle), "3", stage=stage)
    assert done.returncode == 3
    assert "part(s) 0 1 2 of the ONNX Runtime GPU wheel are missing" in done.stderr
    assert "Start over from part 0" in done.stderr
    assert not (stage / "part-03").exists()
    done = script("unpack", str(bundle), stage=stage)
    assert done.returncode == 3 and "Start over from part 0" in done.stderr
    # Part 0 starts over: the same calls then succeed.
    for k in range(int(manifest["parts"])):
        assert script("receive", str(bundle), str(k), stage=stage).returncode == 0
    assert script("unpack", str(bundle), stage=stage).returncode == 0


def test_a_changed_part_is_refused(split_bundle):
    bundle, stage, _, _, manifest = split_bundle
    for k in range(int(manifest["parts"])):
        assert script("receive", str(bundle), str(k), stage=stage).returncode == 0
    part = stage / "part-02"
    part.write_bytes(b"x" + part.read_bytes()[1:])
    done = script("unpack", str(bundle), stage=stage)
    assert done.returncode == 3 and "part(s) 2 " in done.stderr, done.stderr
    carried = bundle.parent / "bundle-parts" / "part-00"  # changed on its way: refused before it is staged
    carried.write_bytes(b"y" + carried.read_bytes()[1:])
    done = script("receive", str(bundle), "0", stage=stage)
    assert done.returncode == 2 and "does not have the sha256 the manifest records" in done.stderr
    assert not (stage / "part-00").exists()


def test_receive_checks_its_arguments(split_bundle):
    bundle, stage, _, _, manifest = split_bundle
    done = script("receive", str(bundle), manifest["parts"], stage=stage)
    assert done.returncode == 2 and f"K must be 0..{int(manifest['parts']) - 1}" in done.stderr
    done = script("receive", str(bundle.parent / "elsewhere"), "0", stage=stage)
    assert done.returncode == 2 and "no ONNX Runtime GPU parts" in done.stderr
