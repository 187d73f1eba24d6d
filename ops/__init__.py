"""fused_norm: a fused RMS norm with weight and bias, as a PyTorch custom op.

``import ops`` loads the compiled library (``invoke build`` makes it) and makes
``torch.ops.myops.fused_norm`` and ``torch.ops.myops.fused_norm_out`` available,
and the fused residual add + norm ``torch.ops.myops.fused_add_norm`` and
``fused_add_norm_inplace``, with fake kernels and autograd registered.
"""

from ops._library import (
    LibraryLoadError,
    LibraryNotBuiltError,
    load_torch_library,
    ort_library_path,
    torch_library_path,
)

load_torch_library()

from ops.op import (  # noqa: E402  (needs the library loaded)
    fused_add_norm,
    fused_add_norm_inplace,
    fused_norm,
    fused_norm_out,
)

__all__ = [
    "LibraryLoadError",
    "LibraryNotBuiltError",
    "fused_add_norm",
    "fused_add_norm_inplace",
    "fused_norm",
    "fused_norm_out",
    "ort_library_path",
    "torch_library_path",
]
