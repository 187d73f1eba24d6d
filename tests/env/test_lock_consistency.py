"""The lock, the Dockerfile and the installed environment agree; both lock parsers agree;
`invoke lock` regenerates the lock faithfully. Every check is also run on a broken copy
to show that it fails."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from env.lock import image_consistency
from env.lock.docker import DOCKERFILE, build_args, dockerfile_arg_defaults
from env.lock.lockfile import (
    LOCK_PATH,
    LockError,
    current_variant,
    installed_distributions,
    installed_versions,
    read_lock,
    regenerate,
)
from env.paths import REPO_ROOT

LOCK_PINS = REPO_ROOT / "scripts" / "lock_pins.py"


def _copy(tmp_path: Path, source: Path, edit=None) -> Path:
    text = source.read_text()
    if edit is not None:
        changed = edit(text)
        assert changed != text, "the edit did not change the file"
        text = changed
    target = tmp_path / source.name
    target.write_text(text)
    return target


def _lock_pins(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(LOCK_PINS), *args], capture_output=True, text=True, input=stdin,
                          check=False)


# --- lock vs Dockerfile vs installed environment -------------------------------


def test_lock_dockerfile_and_environment_agree():
    assert image_consistency.problems() == []


@pytest.mark.parametrize(
    ("file", "edit", "expected"),
    [
        ("dockerfile", lambda t: t.replace("nvidia/cuda:13.0.1-cudnn-devel", "nvidia/cuda:12.8.1-cudnn-devel"),
         "CUDA major: Dockerfile base nvidia/cuda:12.8.1"),
        ("dockerfile", lambda t: t.replace("13.0.1-cudnn-devel", "13.0.1-devel"), "cuDNN: Dockerfile base"),
        ("dockerfile", lambda t: t.replace('ARG TORCH_CUDA_ARCH_LIST="8.0;9.0+PTX"', 'ARG TORCH_CUDA_ARCH_LIST="9.0"'),
         "TORCH_CUDA_ARCH_LIST: Dockerfile default '9.0'"),
        ("dockerfile", lambda t: t.replace("scripts/lock_pins.py var TORCH_CUDA_ARCH_LIST", "echo"),
         "no longer checks its build arg"),
        ("dockerfile", lambda t: t.replace("ENV TORCH_CUDA_ARCH_LIST=${TORCH_CUDA_ARCH_LIST}", "ENV TORCH_CUDA_ARCH_LIST=9.0"),
         "the image's ENV is not the checked build arg"),
        ("dockerfile", lambda t: t.replace("&& scripts/create_env.sh", "&& pip install -r requirements.txt"),
         "not created by scripts/create_env.sh"),
        ("dockerfile", lambda t: t.replace("FUSEDBENCH_TORCH_VARIANT=cuda", "FUSEDBENCH_TORCH_VARIANT=cpu"),
         "FUSEDBENCH_TORCH_VARIANT=cuda is not set"),
        ("dockerfile", lambda t: re.sub(r"ARG CUDA_IMAGE_DIGEST=sha256:[0-9a-f]+", "ARG CUDA_IMAGE_DIGEST=latest", t),
         "CUDA_IMAGE_DIGEST must be sha256"),
        ("lock", lambda t: t.replace("torch==2.13.0", "torch==2.14.0"), "torch: lock 2.14.0, installed 2.13.0"),
        ("lock", lambda t: t.replace("onnxruntime-gpu==1.31.1", "onnxruntime-gpu==1.30.0"),
         "onnxruntime-gpu: lock 1.30.0, installed 1.31.1"),
        ("lock", lambda t: t.replace("python=3.11.7=", "python=3.11.9="), "python: lock 3.11.9"),
        ("lock", lambda t: re.sub(r"cuda-toolkit==13\.0\.3\.0", "cuda-toolkit==12.8.1", t),
         "the lock's torch CUDA wheels are cuda-toolkit 12.8.1"),
        ("lock", lambda t: re.sub(r"nvidia-cudnn-cu13==9\.\S+", "nvidia-cudnn-cu13==8.9.7.29", t),
         "cuDNN major: onnxruntime-gpu loads cuDNN 9"),
        ("lock", lambda t: t.replace("nvidia-nccl-cu13==", "nvidia-nccl-cu12=="), "cuda-pip nvidia-nccl-cu12 is for CUDA 12"),
    ],
)
def test_each_disagreement_is_reported(tmp_path, file, edit, expected):
    lock = _copy(tmp_path, LOCK_PATH, edit if file == "lock" else None)
    dockerfile = _copy(tmp_path, DOCKERFILE, edit if file == "dockerfile" else None)
    found = image_consistency.problems(lock, dockerfile)
    assert any(expected in line for line in found), found


def test_torch_pinned_differently_in_the_two_lists_is_an_error(tmp_path):
    lock = _copy(tmp_path, LOCK_PATH, lambda t: t.replace("      - torch==2.13.0\n", "      - torch==2.14.0\n"))
    with pytest.raises(LockError, match="torch is 2.14.0 in the pip list but 2.13.0 in cuda-pip"):
        image_consistency.problems(lock)


def test_installed_versions_and_onnxruntime_build_are_checked(tmp_path):
    installed = dict(installed_versions(), torch="2.14.0+cpu")
    assert "torch: lock 2.13.0, installed 2.14.0+cpu" in image_consistency.problems(installed=installed)
    installed = dict(installed_versions(), torch="2.13.0+cu128")
    assert any("installed torch 2.13.0+cu128" in p for p in image_consistency.problems(installed=installed))
    ort12 = image_consistency.OrtCuda(cuda="12.8", cudnn_major=9)
    assert any("built for CUDA 12.8" in p for p in image_consistency.problems(ort=ort12))
    assert any("3.11.9" in p for p in image_consistency.problems(python_version="3.11.9"))


def test_onnxruntime_gpu_build_facts_are_read_from_its_files():
    ort = image_consistency.installed_ort_cuda()
    assert (ort.cuda_major, ort.cudnn_major) == (13, 9)  # FACTS.md: built for CUDA 13 + cuDNN 9


def test_image_arch_list_is_the_locks():
    # `invoke docker.build` passes the lock's value; the Dockerfile's default is the same.
    arch = read_lock().variables["TORCH_CUDA_ARCH_LIST"]
    assert build_args()["TORCH_CUDA_ARCH_LIST"] == arch
    assert dockerfile_arg_defaults()["TORCH_CUDA_ARCH_LIST"] == arch
    assert _lock_pins("var", "TORCH_CUDA_ARCH_LIST").stdout.strip() == arch


def test_dockerfile_arch_check_step_fails_on_a_mismatch(tmp_path):
    # Run the Dockerfile's own check step (the shell between `locked=` and `fi`)
    # natively, against the real lock, with a matching and a wrong build arg.
    text = DOCKERFILE.read_text()
    step = re.search(r"(locked=\$\(python3 .*?\n.*?fi) \\\n", text, re.S)
    assert step, "the TORCH_CUDA_ARCH_LIST check step is missing from the Dockerfile"
    script = step.group(1).replace("\\\n", "\n").replace("&& ", "")
    for value, ok in ((read_lock().variables["TORCH_CUDA_ARCH_LIST"], True), ("9.0", False)):
        result = subprocess.run(["bash", "-euo", "pipefail", "-c", script], cwd=REPO_ROOT, capture_output=True,
                                text=True, env={"PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin", "TORCH_CUDA_ARCH_LIST": value}, check=False)
        assert (result.returncode == 0) == ok, result.stderr


# --- the two parsers ---------------------------------------------------------------


def test_lock_pins_and_env_lock_parse_the_lock_identically():
    lock = read_lock()
    pins = _lock_pins("pins").stdout.split()
    assert {re.sub(r"[-_.]+", "-", p.split("==")[0]).lower(): p.split("==")[1] for p in pins} == lock.pins
    assert len(pins) == len(lock.pins)
    cuda = [line.split() for line in _lock_pins("cuda-pins").stdout.splitlines()]
    assert {n.split("==")[0]: (n.split("==")[1], h.removeprefix("--hash=sha256:")) for n, h in cuda} == {
        name: (version, lock.cuda_hashes[name]) for name, version in lock.cuda_pins.items()
    }
    conda = [line.split("=") for line in _lock_pins("conda-specs").stdout.splitlines()]
    assert {n: (v, b) for n, v, b in conda} == lock.conda
    assert _lock_pins("python").stdout.strip() == lock.python == "3.11.7"
    for name, value in lock.variables.items():
        assert _lock_pins("var", name).stdout.strip() == value


@pytest.mark.parametrize(
    "edit",
    [
        lambda t: t.replace("numpy==2.4.6", "numpy>=2.4"),  # not exact
        lambda t: t.replace("  - openssl=3.2.0=hd590300_1", "  - openssl>=3.2"),  # conda spec without a build
        lambda t: re.sub(r"(triton==3\.7\.1) --hash=sha256:[0-9a-f]+", r"\1", t),  # cuda pin without hash
        lambda t: t.replace("  - python=3.11.7=hab00c5b_1_cpython\n", ""),  # no python
    ],
)
def test_both_parsers_reject_the_same_broken_lock(tmp_path, edit):
    broken = _copy(tmp_path, LOCK_PATH, edit)
    with pytest.raises(LockError):
        read_lock(broken)
    assert _lock_pins("pins", str(broken)).returncode != 0


def test_conda_environment_check_catches_added_and_changed_packages():
    lock = read_lock()
    listed = [{"name": n, "version": v, "build_string": b, "channel": "conda-forge"} for n, (v, b) in lock.conda.items()]
    assert _lock_pins("check-conda", stdin=json.dumps(listed)).returncode == 0
    # pip-installed packages (channel pypi) are pip's business, not the solver's.
    with_pip = listed + [{"name": "numpy", "version": "2.4.6", "build_string": "pypi_0", "channel": "pypi"}]
    assert _lock_pins("check-conda", stdin=json.dumps(with_pip)).returncode == 0
    added = listed + [{"name": "pip", "version": "24.0", "build_string": "pyhd8ed1ab_0", "channel": "conda-forge"}]
    result = _lock_pins("check-conda", stdin=json.dumps(added))
    assert result.returncode != 0 and "pip: installed 24.0=pyhd8ed1ab_0, not in the lock" in result.stderr
    changed = [dict(p, build_string="h0000000_9") if p["name"] == "openssl" else p for p in listed]
    result = _lock_pins("check-conda", stdin=json.dumps(changed))
    assert result.returncode != 0 and "openssl: lock 3.2.0=hd590300_1, installed 3.2.0=h0000000_9" in result.stderr
    missing = [p for p in listed if p["name"] != "tk"]
    assert "tk: lock" in _lock_pins("check-conda", stdin=json.dumps(missing)).stderr


# --- `invoke lock` ----------------------------------------------------------------


def _never_download(name, version):
    raise AssertionError(f"{name}=={version} is already in the lock; its hash must be reused")


def _cpu_view() -> dict[str, tuple[str, str]]:
    """This environment as a CPU machine would have it (the CUDA-only wheels left out)."""
    lock = read_lock()
    return {n: v for n, v in installed_distributions().items() if n in lock.pins or n not in lock.cuda_pins}


def test_regenerating_from_this_environment_gives_the_committed_lock(tmp_path):
    # The list this environment's variant owns (pip on a CPU machine, cuda-pip in the image).
    copy = _copy(tmp_path, LOCK_PATH)
    update = regenerate(copy, variant=current_variant(), wheel_sha256=_never_download)
    assert update.empty, update.summary()
    assert copy.read_text() == LOCK_PATH.read_text()


def test_regeneration_rewrites_only_the_pip_list(tmp_path):
    def edit(text):
        text = text.replace("      - numpy==2.4.6\n", "      - numpy==2.3.0\n")
        text = text.replace("      - rich==15.0.0\n", "")
        return text.replace("      - tqdm==4.70.1\n", "      - tqdm==4.70.1\n      - left-pad==1.0.0\n")

    copy = _copy(tmp_path, LOCK_PATH, edit)
    update = regenerate(copy, variant="cpu", installed=_cpu_view())
    assert update.added == ["rich==15.0.0"]
    assert update.removed == ["left-pad==1.0.0"]
    assert update.changed == ["numpy 2.3.0 -> 2.4.6"]
    assert copy.read_text() == LOCK_PATH.read_text()  # comments, conda list, cuda-pip, variables kept


def test_regeneration_of_cuda_pip_hashes_only_new_versions(tmp_path):
    copy = _copy(tmp_path, LOCK_PATH)
    lock = read_lock(copy)
    installed = installed_distributions()
    installed.update({n: (n, v) for n, v in lock.cuda_pins.items()})
    installed["torch"] = ("torch", "2.13.0")
    installed["nvidia-nccl-cu13"] = ("nvidia-nccl-cu13", "2.30.1")
    asked = []

    def fake_sha256(name, version):
        asked.append((name, version))
        return "ab" * 32

    update = regenerate(copy, variant="cuda", installed=installed, wheel_sha256=fake_sha256)
    assert asked == [("nvidia-nccl-cu13", "2.30.1")]
    assert update.changed == ["nvidia-nccl-cu13 2.29.7 -> 2.30.1"]
    after = read_lock(copy)
    assert after.cuda_hashes["nvidia-nccl-cu13"] == "ab" * 32
    assert after.cuda_hashes["torch"] == lock.cuda_hashes["torch"]
    assert after.pins == lock.pins and after.conda == lock.conda


def test_regeneration_refuses_and_leaves_the_file_alone(tmp_path):
    copy = _copy(tmp_path, LOCK_PATH)
    before = copy.read_text()
    with pytest.raises(LockError, match="pins Python 3.11.7"):
        regenerate(copy, variant="cpu", installed=_cpu_view(), python_version="3.12.1")
    installed = dict(_cpu_view(), **{"nvidia-nccl-cu13": ("nvidia-nccl-cu13", "2.29.7")})
    with pytest.raises(LockError, match="CUDA-only packages are installed"):
        regenerate(copy, variant="cpu", installed=installed)

    def failing_sha256(name, version):
        raise LockError(f"could not download {name}=={version}")

    installed = installed_distributions()
    installed.update({n: (n, v) for n, v in read_lock(copy).cuda_pins.items()})
    installed["triton"] = ("triton", "3.8.0")
    with pytest.raises(LockError, match="could not download triton==3.8.0"):
        regenerate(copy, variant="cuda", installed=installed, wheel_sha256=failing_sha256)
    assert copy.read_text() == before
    assert [p.name for p in tmp_path.iterdir()] == [copy.name]  # no temporary file left behind


def test_setuptools_vendored_copies_are_not_installed_packages():
    # importing setuptools (cpp_extension does) puts setuptools/_vendor on sys.path;
    # its private packaging/wheel/jaraco copies must not look installed.
    import setuptools  # noqa: F401

    vendor = Path(setuptools.__file__).parent / "_vendor"
    assert str(vendor) in sys.path
    assert "jaraco-text" not in installed_versions() and "wheel" not in installed_versions()
    assert installed_versions()["packaging"] == read_lock().pins["packaging"]
