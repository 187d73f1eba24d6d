"""Why a CUDA test cannot run here (None when it can): no device, or a library built without CUDA kernels; and why
ONNX Runtime's CUDA route cannot."""

from __future__ import annotations

import pytest
import torch


def cuda_skip_reason() -> str | None:
    from bench.plan.devices import cuda_missing_reason

    reason = cuda_missing_reason()
    if reason is not None:
        return f"{reason}; these tests run on a GPU machine (`invoke gpu-check`)"
    import ops  # noqa: F401  (registers the op's kernels)

    if not torch._C._dispatch_has_kernel_for_dispatch_key("myops::fused_norm", "CUDA"):
        from env.builder import toolchain

        try:
            why = toolchain.read_record()["build"].get("torch_cuda_kernels_reason", "unknown")
        except (OSError, KeyError, ValueError):
            why = "no toolchain record"
        return f"the fused_norm library was built without CUDA kernels ({why}); rebuild with `invoke build`"
    return None


def ort_cuda_skip_reason() -> str | None:
    try:
        from env.builder import toolchain
        from env.builder.ort_runtime import cuda_provider_status
    except ImportError as error:
        return f"onnxruntime not importable: {error}"
    usable, why = cuda_provider_status()
    if not usable:
        return f"onnxruntime cannot run CUDA here: {why}"
    try:
        build = toolchain.read_record()["build"]
    except (OSError, ValueError):
        return "no toolchain record: run `invoke build`"
    if not build.get("ort_cuda_kernels"):
        return f"the ORT library was built without its CUDA kernel: {build.get('ort_cuda_kernels_reason')}"
    return None


def skip_without_ort_cuda() -> None:
    """Skip the calling test, saying why, where ONNX Runtime's CUDA route cannot run."""
    reason = ort_cuda_skip_reason()
    if reason:
        pytest.skip(reason)


def run_bound_on_cuda(session, inputs: dict[str, torch.Tensor], outputs: dict[str, torch.Tensor]) -> None:
    """Run an ORT session with every input and output bound to the given CUDA tensors (device 0), after the
    device has finished the work that made them."""
    binding = session.io_binding()
    for bind, tensors in ((binding.bind_input, inputs), (binding.bind_output, outputs)):
        for name, t in tensors.items():
            bind(name, "cuda", 0, str(t.dtype).removeprefix("torch."), list(t.shape), t.data_ptr())
    torch.cuda.synchronize()
    session.run_with_iobinding(binding)
