"""env/builder/cuda_emulation.py: the host build of the CUDA kernels for the SIMT emulator."""

from __future__ import annotations

import pytest

from env.builder import cuda_emulation


def test_missing_cuda_headers_give_a_clear_error(monkeypatch):
    monkeypatch.setattr(cuda_emulation, "_cuda_include_dir", lambda: None)
    with pytest.raises(cuda_emulation.EmulationBuildError, match="CUDA headers .* not found.*install the CUDA toolkit"):
        cuda_emulation.build_emulated_kernels()


def test_missing_kernel_source_is_named(tmp_path):
    with pytest.raises(cuda_emulation.EmulationBuildError, match="nope.cu does not exist"):
        cuda_emulation.build_emulated_kernels(tmp_path / "nope.cu")


def test_a_compile_error_shows_the_log_tail(tmp_path):
    try:
        cuda_emulation.cuda_headers()
    except cuda_emulation.EmulationBuildError as error:
        pytest.skip(str(error))
    broken = tmp_path / "broken.cu"
    broken.write_text("__global__ void k() { this is not C++; }\n")
    with pytest.raises(cuda_emulation.BuildError, match="failed.*last lines of"):
        cuda_emulation.build_emulated_kernels(broken)


def test_builds_are_cached_by_content(tmp_path):
    try:
        first = cuda_emulation.build_emulated_kernels()
    except cuda_emulation.EmulationBuildError as error:
        pytest.skip(str(error))
    copy = tmp_path / "fused_norm_cuda.cu"
    copy.write_text(cuda_emulation.core_cuda_sources()[0].read_text())
    assert cuda_emulation.build_emulated_kernels(copy) == first  # same text, same library, nothing recompiled
    copy.write_text(copy.read_text() + "\n// an edit\n")
    assert cuda_emulation.build_emulated_kernels(copy) != first
