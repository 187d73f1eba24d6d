"""What a GPU check runs of ONNX Runtime on the CUDA provider, and why it skips what it cannot.

Items:
  * ``ort_cuda_tests``: the ORT library's CUDA kernel through the custom route with IO binding on device
    memory (both ops), and both ops' models by the standard (mapped), opset-23 and custom routes on the CUDA
    provider, each with its fused node in the optimised graph and 0 elements off the float64 reference;
  * ``bench_ort_cuda``: the benchmark's ORT baselines on the CUDA device, rows of the bench step;
  * ``serve_cuda``: the serving benchmark's sessions x threads sweep on CUDA.

They need a CUDA device, an onnxruntime whose CUDA provider creates sessions here (the GPU build:
onnxruntime-gpu; a machine with only the CPU build gets it carried in parts by scripts/gpu_check_offline.sh),
and the ORT library built with its CUDA kernel. ``ort_cuda_items`` says, per item, None (it runs) or why not.
"""

from __future__ import annotations

# The pytest selection of ``ort_cuda_tests`` (run with -m gpu); the GPU tests step leaves these out.
ORT_CUDA_TEST_FILES = [
    "tests/ops/test_cuda_op.py",
    "tests/ops/test_cuda_add_norm_op.py",
    "tests/ops/test_ort_routes_on_device.py",
]
ORT_CUDA_SELECTION = "ort_cuda or route_runs_fused"
SERVE_CUDA_MISSING = "bench.serve serves on the CPU provider only: it has no CUDA engine yet"


def ort_cuda_missing_reason(cuda: bool) -> str | None:
    """Why ONNX Runtime cannot run the op on CUDA in this process (None: it can)."""
    if not cuda:
        return "no CUDA device"
    try:
        import onnxruntime
    except ImportError as error:
        return f"onnxruntime is not importable: {error}"
    available = onnxruntime.get_available_providers()
    if "CUDAExecutionProvider" not in available:
        return (
            f"onnxruntime {onnxruntime.__version__} here is a CPU-only build (providers: {', '.join(available)}): "
            "carry onnxruntime-gpu to this machine (scripts/gpu_check_offline.sh bundle, docs/gpu-check.md)"
        )
    from env.builder.ort_runtime import cuda_provider_status

    usable, why = cuda_provider_status()
    if not usable:
        return why
    from env.builder import toolchain

    try:
        build = toolchain.read_record()["build"]
    except (OSError, KeyError, ValueError):
        return "no toolchain record: the build did not finish"
    if not build.get("ort_cuda_kernels"):
        return f"the ORT library was built without its CUDA kernel: {build.get('ort_cuda_kernels_reason', 'unknown')}"
    return None


def ort_cuda_items(cuda: bool) -> dict[str, str | None]:
    """Each item -> None where it runs here, else the reason it is skipped."""
    reason = ort_cuda_missing_reason(cuda)
    return {"ort_cuda_tests": reason, "bench_ort_cuda": reason, "serve_cuda": reason or SERVE_CUDA_MISSING}
