"""The build: flags in the logged command lines, the toolchain record, the AOT path."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest

from env.builder import toolchain
from env.paths import REPO_ROOT, toolchain_record_path


@pytest.fixture(scope="module")
def record() -> dict:
    return json.loads(toolchain_record_path().read_text())


def test_record_has_every_fact(record):
    for key in (
        "compiler.version",
        "compiler.path",
        "compiler.default_cxx11_abi",
        "compiler.default_cxx_runtime",
        "torch.version",
        "torch.git_version",
        "torch.cxx11_abi",
        "torch.built_with_cxx_standard",
        "python.version",
        "onnx.onnxruntime",
        "onnx.onnx",
        "os.libc",
        "cpu.model",
        "build.cxx_standard",
        "build.cxx_flags",
        "build.cxx11_abi",
        "artifacts.torch_library",
    ):
        node = record
        for part in key.split("."):
            assert part in node, f"toolchain record lacks {key}"
            node = node[part]
        assert node not in (None, "", []), f"toolchain record has no value for {key}"
    assert record["build"]["cxx11_abi"] == record["torch"]["cxx11_abi"], "extension ABI flag differs from torch's"


def test_summary_table_lists_the_toolchain(record):
    table = toolchain.format_summary(record)
    for label in (
        "compiler",
        "C++ standard",
        "ABI flag",
        "torch",
        "nvcc",
        "TORCH_CUDA_ARCH_LIST",
        "onnxruntime",
        "Python",
        "CPU",
    ):
        assert label in table


def test_logged_compile_commands_use_the_pinned_flags(record):
    from pathlib import Path

    library = Path(record["artifacts"]["torch_library"])
    log = library.parent / ("compile_commands.log" if record["build"]["mode"] == "jit" else "tmp/compile_commands.log")
    commands = [line for line in log.read_text().splitlines() if " -c " in line]
    assert commands, f"no compiler command lines in {log}"
    for line in commands:
        assert "-O3" in line and "-std=c++20" in line, line
        assert "-march=native" not in line or os.environ.get("FUSEDBENCH_MARCH_NATIVE") == "1", line
        assert "-ffast-math" not in line, line
        assert f"-D_GLIBCXX_USE_CXX11_ABI={record['torch']['cxx11_abi']}" in line, line


@pytest.mark.slow  # a second compile of the torch library (seconds when ccache holds it from an earlier run)
def test_aot_build_loads_and_matches_jit(tmp_path):
    # Build with setup.py into a private build dir, then load that library
    # in a fresh interpreter and compare it with the JIT library's result.
    env = {k: v for k, v in os.environ.items() if not k.startswith("FUSEDBENCH_")}
    env["FUSEDBENCH_BUILD_DIR"] = str(tmp_path)
    # The ONNX Runtime library and the CUDA compile check are the same for
    # both modes: their step states from the JIT build, copied into the private
    # build dir, let `invoke build --aot` skip them while their inputs match
    # (the states point at the JIT build's outputs), so only the torch library
    # is compiled here.
    jit_state = toolchain_record_path().parent / "state"
    (tmp_path / "state").mkdir()
    for name in ("ort_library", "cuda_compile_check", "ort_cuda_decision"):
        if (jit_state / f"{name}.json").is_file():
            shutil.copy(jit_state / f"{name}.json", tmp_path / "state")
    built = subprocess.run(
        [sys.executable, "-m", "invoke", "build", "--aot"],
        cwd=REPO_ROOT,
        env=env,
        check=True,
        capture_output=True,
        text=True,
        timeout=600,
    )
    lines = built.stdout.splitlines()
    assert any(line.startswith("torch op library (aot): built in") for line in lines), built.stdout
    aot_record = json.loads((tmp_path / "toolchain.json").read_text())
    aot_library = aot_record["artifacts"]["torch_library"]
    assert aot_record["build"]["mode"] == "aot" and aot_library.startswith(str(tmp_path))
    script = (
        "import torch, ops\n"
        "g = torch.Generator().manual_seed(7)\n"
        "x = torch.randn(9, 300, generator=g); w = 1 + 0.1 * torch.randn(300, generator=g)\n"
        "b = 0.05 * torch.randn(300, generator=g)\n"
        "torch.save(ops.fused_norm(x, w, b, 1e-6), __import__('sys').argv[1])\n"
        "print(ops.torch_library_path())\n"
    )
    outputs = {}
    for name, build_dir in (("aot", tmp_path), ("jit", toolchain_record_path().parent)):
        run_env = {**env, "FUSEDBENCH_BUILD_DIR": str(build_dir)}
        out_file = tmp_path / f"{name}.pt"
        done = subprocess.run(
            [sys.executable, "-c", script, str(out_file)],
            cwd=REPO_ROOT,
            env=run_env,
            check=True,
            capture_output=True,
            text=True,
            timeout=120,
        )
        outputs[name] = out_file
        if name == "aot":
            assert done.stdout.strip() == aot_library
    import torch

    assert torch.equal(torch.load(outputs["aot"]), torch.load(outputs["jit"]))
