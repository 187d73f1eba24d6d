"""Ahead-of-time build of the fused_norm torch op library (the delivery path).

    pip install --no-build-isolation .          # installs ops/ with ops/_C.abi3.so
    invoke build --aot                          # same compile, into build/aot

Sources and flags come from env/builder/config.py, shared with the JIT build.
--no-build-isolation matters: the extension must compile against the torch
that will load it, not a fresh copy pip would download for the build.
"""

import sys
from pathlib import Path

from setuptools import setup
from torch.utils.cpp_extension import BuildExtension, CppExtension, CUDAExtension

sys.path.insert(0, str(Path(__file__).resolve().parent))
from env.builder.config import CXX_STANDARD_PORTABLE, torch_extension_spec  # noqa: E402

spec = torch_extension_spec()
extension_class = CUDAExtension if spec.with_cuda else CppExtension

setup(
    name="fusedbench",
    version="0.1.0",
    description="fused_norm: a fused RMS norm as a PyTorch custom op and an ONNX Runtime custom op",
    packages=["ops", "env"],
    ext_modules=[
        extension_class(
            "ops._C",
            sources=spec.relative_sources(),
            include_dirs=[str(d) for d in spec.include_dirs],
            extra_link_args=spec.ld_flags,
            extra_compile_args={"cxx": spec.cxx_flags, "nvcc": spec.nvcc_flags or [f"-std={CXX_STANDARD_PORTABLE}"]},
            # The library is loaded with torch.ops.load_library, never
            # imported, so it uses no Python C API and can be abi3.
            py_limited_api=True,
        )
    ],
    cmdclass={"build_ext": BuildExtension},
    options={"bdist_wheel": {"py_limited_api": "cp311"}},
    python_requires="==3.11.*",
)
