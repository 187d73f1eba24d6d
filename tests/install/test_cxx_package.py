"""The C++ package, unpacked outside the tree, builds a host with CMake find_package that serves a model correctly.

The host is csrc/ort/examples/package_client.cc: it registers the library the
package's CMake target names, runs the custom-route model (myops::fused_norm
nodes) and compares its output with the float64 model's, written by Python.
"""

from __future__ import annotations

import subprocess
import tarfile
from pathlib import Path

import pytest
import torch

from env.builder.ort_runtime import runtime_library
from env.builder.toolchain import read_record
from env.dist import build_cxx_package
from env.paths import csrc_dir
from ops._library import ort_library_path
from ops.model import ModelConfig, build_model, example_input
from ops.onnx.export import export_model
from ops.reference import make_generator, model_tolerance

pytestmark = pytest.mark.slow  # compiling against the ORT C++ headers: about 40 s on 2 cores

CONFIG = ModelConfig(d_model=64, heads=2, layers=2)
BATCH, SEQ = 2, 8


@pytest.fixture(scope="module")
def package(tmp_path_factory) -> Path:
    """The tarball ``invoke dist`` writes, made from this build's library, unpacked into a temporary folder."""
    out = tmp_path_factory.mktemp("dist")
    api_version = int(read_record()["build"]["ort_headers"]["api_version"])
    tarball = build_cxx_package(ort_library_path(), api_version, out)
    with tarfile.open(tarball) as archive:
        archive.extractall(out / "unpacked", filter="data")
    (root,) = (out / "unpacked").iterdir()
    assert root.name == tarball.name.removesuffix(".tar.gz")
    return root


def onnxruntime_for_cmake(folder: Path) -> Path:
    """libonnxruntime.so and its soname beside each other: the wheel's file carries only its versioned name."""
    folder.mkdir(parents=True, exist_ok=True)
    for name in ("libonnxruntime.so", "libonnxruntime.so.1"):
        (folder / name).symlink_to(runtime_library())
    return folder / "libonnxruntime.so"


def configure_and_build(package: Path, build: Path, *extra: str) -> subprocess.CompletedProcess:
    headers = read_record()["build"]["ort_headers"]["path"]
    configure = subprocess.run(
        [
            "cmake",
            "-S",
            str(csrc_dir() / "ort" / "examples"),
            "-B",
            str(build),
            f"-DCMAKE_PREFIX_PATH={package}",
            f"-DONNXRUNTIME_INCLUDE_DIR={headers}",
            f"-DONNXRUNTIME_LIBRARY={onnxruntime_for_cmake(build.parent / 'ort-lib')}",
            "-DCMAKE_BUILD_TYPE=Release",
            *extra,
        ],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    if configure.returncode != 0:
        return configure
    return subprocess.run(
        ["cmake", "--build", str(build), "-j", "2"], capture_output=True, text=True, timeout=600, check=False
    )


@pytest.fixture(scope="module")
def client(package, tmp_path_factory) -> Path:
    build = tmp_path_factory.mktemp("client") / "build"
    done = configure_and_build(package, build)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return build / "package_client"


@pytest.fixture(scope="module")
def model_files(tmp_path_factory) -> dict[str, Path | str]:
    """The custom-route model, an input, and the float64 model's output for it."""
    work = tmp_path_factory.mktemp("model")
    model = build_model("fused", CONFIG, seed=7)
    x = example_input(BATCH, SEQ, CONFIG.d_model, make_generator(8))
    exported = export_model(model, x, "custom", work / "custom.onnx")
    with torch.no_grad():
        reference = build_model("unfused", CONFIG, seed=7, dtype=torch.float64)(x.double())
    (work / "x.f32").write_bytes(x.numpy().tobytes())
    (work / "reference.f64").write_bytes(reference.numpy().tobytes())
    tol = model_tolerance(torch.float32)
    return {
        "model": exported.path,
        "x": work / "x.f32",
        "reference": work / "reference.f64",
        "dims": f"{BATCH},{SEQ},{CONFIG.d_model}",
        "atol": repr(tol.atol),
        "rtol": repr(tol.rtol),
    }


def run_client(client: Path, files: dict, model: Path | None = None) -> subprocess.CompletedProcess:
    args = [model or files["model"], files["x"], files["reference"], files["dims"], files["atol"], files["rtol"]]
    return subprocess.run([str(client), *map(str, args)], capture_output=True, text=True, timeout=300, check=False)


def test_the_package_holds_library_header_cmake_config_and_readme(package):
    assert (package / "lib" / "libfused_norm_ort.so").is_file()
    header = (package / "include" / "fused_norm_ort" / "fused_norm_ort.h").read_text()
    assert 'kDomain = "myops"' in header and 'kOpName = "fused_norm"' in header and "RegisterCustomOps" in header
    cmake = package / "lib" / "cmake" / "fused_norm_ort"
    assert {p.name for p in cmake.iterdir()} == {"fused_norm_ortConfig.cmake", "fused_norm_ortConfigVersion.cmake"}
    readme = (package / "README.md").read_text()
    assert "find_package(fused_norm_ort" in readme and "@" not in readme


def test_the_host_built_with_find_package_matches_the_float64_model(client, model_files, package):
    done = run_client(client, model_files)
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"{BATCH * SEQ * CONFIG.d_model} elements" in done.stdout and " 0 beyond" in done.stdout
    # The library registered is the package's, found through its CMake target.
    assert str(package / "lib" / "libfused_norm_ort.so") in done.stdout


def test_the_host_sees_a_wrong_model(client, model_files, tmp_path):
    import onnx

    model = onnx.load(model_files["model"])
    node = next(n for n in model.graph.node if n.op_type == "fused_norm")
    next(a for a in node.attribute if a.name == "epsilon").f = 10.0
    wrong = tmp_path / "wrong-eps.onnx"
    onnx.save(model, wrong)
    done = run_client(client, model_files, wrong)
    assert done.returncode == 1, done.stdout + done.stderr
    assert " 0 beyond" not in done.stdout


def test_find_package_refuses_a_newer_release_than_the_package(package, tmp_path):
    done = configure_and_build(package, tmp_path / "build", "-DFUSED_NORM_ORT_VERSION=99.0")
    assert done.returncode != 0
    assert "fused_norm_ort" in done.stderr and "99.0" in done.stderr
