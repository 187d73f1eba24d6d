"""The pins: requirements/{cpu,cuda}.txt are exact, hashed and complete, agree on the packages
they share, agree with the CUDA of the Docker base image, and environment.lock.yml's pip
section installs them."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import pytest
import yaml
from packaging.markers import default_environment
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

from env.builder.config import pinned_cuda_arch_list
from env.image import dockerfile_arg_defaults
from env.lock import compile as lock_compile
from env.lock.drift import installed_versions
from env.lock.lockfile import LOCK_PATH, REQUIREMENTS_DIR, VARIANTS, LockError, read_lock, read_pins, requirements_path
from env.paths import REPO_ROOT


def _pins(variant: str):
    return read_pins(requirements_path(variant))


def _requirement_lines(path: Path) -> list[str]:
    """The lines that start a requirement (not comments, hashes or continuations)."""
    return [line for line in path.read_text().splitlines() if re.match(r"[A-Za-z0-9]", line)]


# --- every file: exact, hashed, complete -------------------------------------------


@pytest.mark.parametrize("variant", VARIANTS)
def test_every_requirement_is_exact_and_hashed(variant):
    path = requirements_path(variant)
    pins = read_pins(path)
    assert len(pins) == len(_requirement_lines(path))  # nothing read_pins skipped
    for name, pin in pins.items():
        assert pin.hashes and all(re.fullmatch(r"sha256:[0-9a-f]{64}", h) for h in pin.hashes), name


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda t: t.replace("numpy==2.4.6 \\", "numpy>=2.4.6 \\"), "'numpy>=2.4.6' must be an exact"),
        (
            lambda t: re.sub(r"(tqdm==4\.70\.1) \\\n(    --hash=\S+ \\\n)*    --hash=\S+\n", r"\1\n", t),
            "'tqdm==4.70.1' must be an exact 'name==version' pin with --hash",
        ),
        (lambda t: t.replace("numpy==2.4.6 \\", "numpy=2.4.6 \\"), "is not a requirement"),
    ],
)
def test_an_inexact_or_unhashed_pin_is_refused(tmp_path, edit, message):
    text = requirements_path("cpu").read_text()
    broken = edit(text)
    assert broken != text
    (tmp_path / "cpu.txt").write_text(broken)
    with pytest.raises(LockError, match=re.escape(message)):
        read_pins(tmp_path / "cpu.txt")


def test_this_environments_dependencies_are_all_pinned():
    # The closure, checked against the installed packages' own metadata (which
    # test_env_check shows equal the pins): every dependency that applies here
    # is pinned, so `pip install --no-deps` misses nothing.
    from env.lock.lockfile import current_variant

    pinned = _pins(current_variant())
    marker_env = dict(default_environment(), extra="")
    for name in pinned:
        for line in metadata.distribution(name).requires or []:
            requirement = Requirement(line)
            if requirement.marker is None or requirement.marker.evaluate(marker_env):
                assert canonicalize_name(requirement.name) in pinned, f"{name} needs {requirement}, not pinned"


@pytest.mark.parametrize("variant", VARIANTS)
def test_every_direct_pin_is_exact_and_compiled(variant):
    # The .in files pin the direct needs exactly, and the .txt holds each at that version.
    compiled = _pins(variant)
    for source in (REQUIREMENTS_DIR / "common.in", REQUIREMENTS_DIR / f"{variant}.in"):
        for line in source.read_text().splitlines():
            line = line.split("#", 1)[0].strip()
            if not line or line.startswith("-r "):
                continue
            requirement = Requirement(line)
            (spec,) = requirement.specifier
            assert spec.operator == "==", line
            assert compiled[canonicalize_name(requirement.name)].version == spec.version, line


# --- the two variants ------------------------------------------------------------


def test_shared_packages_are_pinned_alike():
    assert lock_compile.shared_mismatches() == []
    cpu, cuda = _pins("cpu"), _pins("cuda")
    assert len(cpu.keys() & cuda.keys()) > 40  # the shared part is most of each file


def test_a_shared_package_pinned_differently_is_found(tmp_path, monkeypatch):
    for variant in VARIANTS:
        text = requirements_path(variant).read_text()
        if variant == "cuda":
            text = text.replace("numpy==2.4.6 \\", "numpy==2.4.5 \\")
        (tmp_path / f"{variant}.txt").write_text(text)
    monkeypatch.setattr(lock_compile, "requirements_path", lambda variant: tmp_path / f"{variant}.txt")
    assert lock_compile.shared_mismatches() == ["numpy: cpu 2.4.6, cuda 2.4.5"]


def test_each_variant_has_its_torch_build_and_its_own_packages():
    cpu, cuda = _pins("cpu"), _pins("cuda")
    assert Version(cpu["torch"].version).local == "cpu" and len(cpu["torch"].hashes) == 1
    assert Version(cuda["torch"].version).local is None
    assert Version(cpu["torch"].version).public == cuda["torch"].version
    # the CUDA binary tools that read compiled objects without a GPU, in both
    for tool in ("nvidia-cuda-cuobjdump", "nvidia-cuda-nvdisasm"):
        assert Version(cpu[tool].version).major == 13 and cuda[tool] == cpu[tool]
    assert "liger-kernel" in cuda and "triton" in cuda and "triton" not in cpu
    assert not any(
        name.startswith("nvidia-") and name not in ("nvidia-cuda-cuobjdump", "nvidia-cuda-nvdisasm") for name in cpu
    ), "the CPU variant pulls in CUDA libraries"


def test_cuda_versions_agree_with_the_base_image():
    # No tool relates a Docker base image to wheel pins: the CUDA major of the
    # base tag, of torch's CUDA toolkit pin and of every -cuNN wheel must be one.
    tag = dockerfile_arg_defaults()["CUDA_IMAGE"]
    match = re.fullmatch(r"nvidia/cuda:(\d+)\.\d+\.\d+-cudnn-devel-ubuntu\d+\.\d+", tag)
    assert match, f"{tag} is not an nvidia/cuda cuDNN devel image"
    major = int(match.group(1))
    cuda = _pins("cuda")
    assert Version(cuda["cuda-toolkit"].version).major == major
    for name in cuda:
        suffix = re.search(r"-cu(\d+)$", name)
        assert suffix is None or int(suffix.group(1)) == major, name
    # onnxruntime-gpu (in both variants) is built for the same CUDA and the pinned cuDNN major.
    ort = metadata.distribution("onnxruntime-gpu")
    info = Path(ort.locate_file("onnxruntime/capi/build_and_package_info.py")).read_text()
    assert re.search(r"^cuda_version\s*=\s*'(\d+)\.", info, re.M).group(1) == str(major)
    cudnn = set(re.findall(r"libcudnn\.so\.(\d+)", Path(ort.locate_file("onnxruntime/__init__.py")).read_text()))
    assert cudnn == {str(Version(cuda["nvidia-cudnn-cu13"].version).major)}


# --- environment.lock.yml -------------------------------------------------------


def test_lock_is_a_conda_file_with_exact_builds_then_the_requirements():
    data = yaml.safe_load(LOCK_PATH.read_text())
    conda = [d for d in data["dependencies"] if isinstance(d, str)]
    assert all(re.fullmatch(r"[A-Za-z0-9_][\w.-]*=[\w.+!]+=[\w.+]+", spec) for spec in conda), conda
    assert read_lock().python == "3.11.7" == next(s for s in conda if s.startswith("python=")).split("=")[1]
    (pip_section,) = [d["pip"] for d in data["dependencies"] if isinstance(d, dict)]
    assert pip_section == ["--require-hashes", "-r requirements/${FUSEDBENCH_TORCH_VARIANT}.txt"]
    assert data["variables"]["TORCH_CUDA_ARCH_LIST"] == pinned_cuda_arch_list() == "8.0;9.0+PTX"


def test_pip_reads_the_locks_pip_section_as_this_variants_requirements(tmp_path):
    # conda writes the pip section to a requirements file and runs pip on it;
    # pip expands ${FUSEDBENCH_TORCH_VARIANT}. Offline, against this
    # environment: every pin must already be satisfied.
    from env.lock.lockfile import current_variant

    (pip_section,) = [d["pip"] for d in yaml.safe_load(LOCK_PATH.read_text())["dependencies"] if isinstance(d, dict)]
    section = REPO_ROOT / f".conda-pip-section-{os.getpid()}.txt"  # beside the lock, as conda writes it
    section.write_text("\n".join(pip_section) + "\n")
    try:
        for variant, ok in ((current_variant(), True), ("missing", False)):
            env = dict(os.environ, FUSEDBENCH_TORCH_VARIANT=variant, PIP_NO_INDEX="1", PIP_FIND_LINKS="")
            result = subprocess.run(
                [sys.executable, "-m", "pip", "install", "--dry-run", "--no-deps", "-r", str(section)],
                capture_output=True,
                text=True,
                env=env,
                cwd=tmp_path,
                check=False,
            )
            assert (result.returncode == 0) == ok, result.stdout + result.stderr
            if ok:
                satisfied = re.findall(r"^Requirement already satisfied: (\S+?)==", result.stdout, re.M)
                assert {canonicalize_name(n) for n in satisfied} == set(_pins(variant))
            else:
                assert "requirements/missing.txt" in result.stderr
    finally:
        section.unlink()


def test_installed_cuda_binary_tools_run():
    # cuobjdump and nvdisasm come from the pinned wheels, on every variant.
    import nvidia

    for tool in ("cuobjdump", "nvdisasm"):
        binary = Path(nvidia.__path__[0]) / "cu13" / "bin" / tool
        result = subprocess.run([str(binary), "--version"], capture_output=True, text=True, check=False)
        assert result.returncode == 0 and "Cuda compilation tools, release 13" in result.stdout, result.stdout
    assert "nvidia-cuda-cuobjdump" in installed_versions()


# --- `invoke env.lock` -------------------------------------------------------------


def test_compile_command_targets_the_locks_python_on_linux_with_hashes(monkeypatch):
    monkeypatch.setenv("PIP_FIND_LINKS", "/srv/wheels /srv/more-wheels")
    command = lock_compile.compile_command("cpu", "out.txt", upgrade=True)
    assert command[1:5] == ["pip", "compile", "requirements/cpu.in", "--output-file"]
    assert "--generate-hashes" in command and "--upgrade" in command
    assert command[command.index("--python-version") + 1] == read_lock().python
    assert command[command.index("--python-platform") + 1] == "x86_64-manylinux_2_28"
    assert [command[i + 1] for i, word in enumerate(command) if word == "--find-links"] == [
        "/srv/wheels",
        "/srv/more-wheels",
    ]
    # never for cuda: a local torch+cpu wheel would satisfy its torch==2.13.0
    assert "--find-links" not in lock_compile.compile_command("cuda", "out.txt")


def test_a_failed_compile_leaves_the_pins_alone(monkeypatch):
    before = {variant: requirements_path(variant).read_bytes() for variant in VARIANTS}
    monkeypatch.setattr(
        lock_compile,
        "compile_command",
        lambda variant, output, upgrade=False: ["bash", "-c", f"echo broken > {output}; echo no >&2; exit 1"],
    )
    with pytest.raises(LockError, match="uv could not compile requirements/cpu.in"):
        lock_compile.regenerate()
    assert {variant: requirements_path(variant).read_bytes() for variant in VARIANTS} == before
    assert sorted(p.name for p in REQUIREMENTS_DIR.iterdir()) == [
        "common.in",
        "cpu.in",
        "cpu.txt",
        "cuda.in",
        "cuda.txt",
    ]
