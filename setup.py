"""The wheel: the op package with its torch op library and its ONNX Runtime library.

    invoke dist                                  # builds dist/*.whl and the C++ package (env/dist.py)
    pip install --no-build-isolation .          # the same build, installed at once (after `invoke build`)
    invoke build --aot                          # only the torch op library, into build/aot

The wheel holds every ``ops`` subpackage, the torch op library (ops/_C.abi3.so),
the ONNX Runtime custom-op library (ops/libfused_norm_ort.so, built by
``invoke build``: its own toolchain resolves ORT's headers) and ops/toolchain.json,
the facts an unloadable library is diagnosed against. Nothing of the build
tooling (``env``) is installed. Sources and flags come from env/builder/config.py,
shared with the JIT build. --no-build-isolation matters: the extension must
compile against the torch that will load it, not a fresh copy pip would
download for the build; Requires-Dist pins that torch.
"""

import json
import re
import shutil
import sys
from pathlib import Path

from setuptools import find_packages, setup
from setuptools.command.build_py import build_py
from torch.utils.cpp_extension import BuildExtension, CppExtension, CUDAExtension

ROOT = Path(__file__).resolve().parent
sys.path.insert(0, str(ROOT))
from env.builder.config import CORE_VERSIONS_VARIABLE, CXX_STANDARD_PORTABLE, core_versions, torch_extension_spec  # noqa: E402
from env.builder.toolchain import runtime_facts  # noqa: E402
from env.lock.lockfile import read_pins, requirements_path  # noqa: E402
from env.paths import build_dir, toolchain_record_path  # noqa: E402

VERSION = re.search(r'__version__ = "([^"]+)"', (ROOT / "ops" / "_version.py").read_text()).group(1)
ORT_LIBRARY_NAME = "libfused_norm_ort.so"


def torch_requirement() -> str:
    """torch==<the version built against>: the op library links its C++ ABI, which changes every release.

    The local label (+cpu) is left off so the CPU and the CUDA build of that
    release both satisfy it.
    """
    import torch

    return "torch==" + torch.__version__.split("+")[0]


def runtime_requirements() -> list[str]:
    """numpy, onnx and onnxscript at least at the lock's pins (the versions tested)."""
    pins = read_pins(requirements_path("cpu"))
    return [f"{name}>={pins[name].version}" for name in ("numpy", "onnx", "onnxscript")]


def onnxruntime_extras() -> dict[str, list[str]]:
    """Either onnxruntime package, at least 1.N for the C API version N of the headers the library was built with.

    The two packages install the same module; the one already installed is the
    user's choice, so neither is required. Empty before the first ``invoke
    build`` (``invoke build --aot`` runs this file for the extension alone).
    """
    record_path = toolchain_record_path()
    record = json.loads(record_path.read_text()) if record_path.is_file() else {}
    api_version = (record.get("build", {}).get("ort_headers") or {}).get("api_version")
    if api_version is None:
        return {}
    return {"cpu": [f"onnxruntime>=1.{api_version}"], "gpu": [f"onnxruntime-gpu>=1.{api_version}"]}


class BuildPyWithOrtLibrary(build_py):
    """Copies the ONNX Runtime library of the last ``invoke build`` and the toolchain facts into ops/."""

    def run(self):
        super().run()
        package = Path(self.build_lib) / "ops"
        shutil.copy2(ort_library(), package / ORT_LIBRARY_NAME)
        facts = runtime_facts()
        (package / "toolchain.json").write_text(json.dumps(facts, indent=2, sort_keys=True) + "\n")


def ort_library() -> Path:
    record_path = toolchain_record_path()
    record = json.loads(record_path.read_text()) if record_path.is_file() else {}
    library = record.get("artifacts", {}).get("ort_library")
    if not library or not Path(library).is_file():
        sys.exit(
            f"setup.py: the ONNX Runtime library is not built ({record_path} names none): "
            "run `invoke build` first, or `invoke dist`, which builds everything the wheel holds"
        )
    return Path(library)


# setuptools' own intermediate folders, apart from invoke build's outputs.
SETUPTOOLS_DIR = build_dir() / "setuptools"
SETUPTOOLS_DIR.mkdir(parents=True, exist_ok=True)

# A delivered library runs on any x86-64 CPU: it carries every kernel version and the loader picks one.
if core_versions() != "all":
    sys.exit(f"setup.py: a delivered build carries every kernel version; unset {CORE_VERSIONS_VARIABLE}")
spec = torch_extension_spec()
extension_class = CUDAExtension if spec.with_cuda else CppExtension

setup(
    name="fusedbench",
    version=VERSION,
    description="fused_norm: a fused RMS norm as a PyTorch custom op and an ONNX Runtime custom op",
    packages=find_packages(include=["ops", "ops.*"]),
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
    cmdclass={"build_ext": BuildExtension, "build_py": BuildPyWithOrtLibrary},
    install_requires=[torch_requirement(), *runtime_requirements()],
    extras_require=onnxruntime_extras(),
    options={
        "bdist_wheel": {"py_limited_api": "cp311"},
        "build": {"build_base": str(SETUPTOOLS_DIR)},
        "egg_info": {"egg_base": str(SETUPTOOLS_DIR)},
    },
    python_requires="==3.11.*",
    zip_safe=False,
)
