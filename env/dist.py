"""`invoke dist`: the two delivery artifacts, built from the last ``invoke build``.

    dist/fusedbench-<version>-cp311-abi3-linux_x86_64.whl   pip users and the image
    dist/fused_norm_ort-<version>-linux-x86_64.tar.gz        C++ hosts of ONNX Runtime (CMake package)

The wheel is built by pip (``pip wheel --no-build-isolation``, setup.py)
against the environment's torch, which its metadata then pins. ``auditwheel
show`` checks it and the answer is kept beside it
(dist/<wheel>.auditwheel.txt): which platform policy it meets, and why not a
manylinux one. The C++ package holds the same ONNX Runtime library as the
wheel, the public header and a relocatable CMake package config.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import tarfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

from env.builder.commands import BuildError, run_logged
from env.files import write_text_atomic
from env.paths import REPO_ROOT, build_dir, csrc_dir

ORT_LIBRARY_NAME = "libfused_norm_ort.so"
PACKAGE_NAME = "fused_norm_ort"


def dist_dir() -> Path:
    return REPO_ROOT / "dist"


def version() -> str:
    """The release version (ops/_version.py; setup.py reads the same line)."""
    text = (REPO_ROOT / "ops" / "_version.py").read_text()
    return re.search(r'__version__ = "([^"]+)"', text).group(1)


# --- the wheel ------------------------------------------------------------------


def build_wheel(out: Path) -> Path:
    """pip's wheel of this checkout, against the running environment's torch, moved into ``out``."""
    work = build_dir() / "dist" / "wheel"
    shutil.rmtree(work, ignore_errors=True)
    # setup.py's intermediate folder: setuptools rebuilds an extension only when
    # a listed source is newer, blind to the headers; the wheel compiles afresh.
    shutil.rmtree(build_dir() / "setuptools", ignore_errors=True)
    work.mkdir(parents=True)
    run_logged(
        [sys.executable, "-m", "pip", "wheel", "--no-build-isolation", "--no-deps", "--no-index", "-w", str(work), "."],
        build_dir() / "dist" / "wheel.log",
    )
    wheels = sorted(work.glob("*.whl"))
    if len(wheels) != 1:
        raise BuildError(f"pip wheel made {len(wheels)} wheels in {work}, expected one")
    out.mkdir(parents=True, exist_ok=True)
    for old in out.glob("fusedbench-*.whl*"):
        old.unlink()
    return Path(shutil.move(str(wheels[0]), out / wheels[0].name))


def check_wheel_contents(wheel: Path) -> list[str]:
    """Problems with what the wheel holds: both libraries, every ops subpackage, nothing of the tooling."""
    names = zipfile.ZipFile(wheel).namelist()
    problems = []
    for required in ("ops/__init__.py", f"ops/{ORT_LIBRARY_NAME}", "ops/toolchain.json"):
        if required not in names:
            problems.append(f"{required} is missing")
    if not any(re.fullmatch(r"ops/_C[^/]*\.so", n) for n in names):
        problems.append("the torch op library ops/_C*.so is missing")
    for package in sorted(p.parent.relative_to(REPO_ROOT).as_posix() for p in (REPO_ROOT / "ops").rglob("__init__.py")):
        if f"{package}/__init__.py" not in names:
            problems.append(f"subpackage {package} is missing")
    tops = sorted({n.split("/")[0] for n in names if not n.split("/")[0].endswith(".dist-info")})
    if tops != ["ops"]:
        problems.append(f"top-level entries besides ops: {', '.join(t for t in tops if t != 'ops')}")
    return problems


@dataclass(frozen=True)
class WheelAudit:
    policy: str  # the platform tag auditwheel finds the wheel consistent with
    external: dict[str, list[str]]  # library in the wheel -> libraries it needs from torch
    report: str  # auditwheel's own words


def needed_libraries(library: Path) -> list[str]:
    """DT_NEEDED entries of a shared library (readelf)."""
    out = subprocess.run(["readelf", "-d", str(library)], capture_output=True, text=True, check=True).stdout
    return re.findall(r"\(NEEDED\)\s+Shared library: \[([^\]]+)\]", out)


_TORCH_LIBRARY = re.compile(r"lib(c10|torch|shm)[^/]*\.so")


def audit_wheel(wheel: Path) -> WheelAudit:
    """``auditwheel show``'s policy, and the torch libraries that keep the wheel from a manylinux tag."""
    done = subprocess.run(
        [sys.executable, "-m", "auditwheel", "show", str(wheel)], capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        raise BuildError(f"auditwheel show {wheel.name} failed:\n{done.stderr.strip() or done.stdout.strip()}")
    text = " ".join(done.stdout.split())
    match = re.search(r'consistent with the following platform tag: "([^"]+)"', text)
    if not match:
        raise BuildError(f"auditwheel show printed no platform tag:\n{done.stdout}")
    external = {}
    work = build_dir() / "dist" / "audit"
    shutil.rmtree(work, ignore_errors=True)
    with zipfile.ZipFile(wheel) as archive:
        for name in archive.namelist():
            if name.endswith(".so"):
                needed = [
                    lib for lib in needed_libraries(Path(archive.extract(name, work))) if _TORCH_LIBRARY.match(lib)
                ]
                if needed:
                    external[name] = needed
    return WheelAudit(policy=match.group(1), external=external, report=done.stdout.strip())


def audit_text(wheel: Path, audit: WheelAudit) -> str:
    listed = "\n".join(f"  {name}: {', '.join(libs)}" for name, libs in audit.external.items()) or "  (none)"
    return (
        f"{wheel.name}: platform policy {audit.policy}\n\n"
        "Why not manylinux: the torch op library links torch's own shared libraries,\n"
        f"{listed}\n"
        "which torch loads before this library (`import torch` comes first). They are external by design:\n"
        "vendoring them (auditwheel repair) would put a second copy of torch's runtime in the process.\n"
        "The wheel pins the torch release whose C++ ABI it was built against (Requires-Dist torch==).\n"
        "The symbol versions it needs from the system are listed below (glibc, libstdc++, libgomp).\n\n"
        f"auditwheel show:\n{audit.report}\n"
    )


# --- the C++ package ------------------------------------------------------------


def _render(template: Path, values: dict[str, str]) -> str:
    text = template.read_text()
    for key, value in values.items():
        text = text.replace(f"@{key}@", value)
    return text


def build_cxx_package(ort_library: Path, api_version: int, out: Path) -> Path:
    """dist/fused_norm_ort-<version>-linux-x86_64.tar.gz: lib/, include/, lib/cmake/fused_norm_ort/, README.md."""
    release = version()
    name = f"{PACKAGE_NAME}-{release}-linux-x86_64"
    stage = build_dir() / "dist" / name
    shutil.rmtree(stage, ignore_errors=True)
    package_sources = csrc_dir() / "ort" / "package"
    values = {"VERSION": release, "ORT_API_VERSION": str(api_version), "ORT_API_VERSION_FLOOR": f"1.{api_version}"}
    (stage / "lib" / "cmake" / PACKAGE_NAME).mkdir(parents=True)
    shutil.copy2(ort_library, stage / "lib" / ORT_LIBRARY_NAME)
    shutil.copytree(csrc_dir() / "ort" / "include", stage / "include")
    cmake = stage / "lib" / "cmake" / PACKAGE_NAME
    shutil.copy2(package_sources / f"{PACKAGE_NAME}Config.cmake", cmake / f"{PACKAGE_NAME}Config.cmake")
    (cmake / f"{PACKAGE_NAME}ConfigVersion.cmake").write_text(
        _render(package_sources / f"{PACKAGE_NAME}ConfigVersion.cmake.in", values)
    )
    (stage / "README.md").write_text(_render(package_sources / "README.md", values))
    out.mkdir(parents=True, exist_ok=True)
    tarball = out / f"{name}.tar.gz"
    tmp = tarball.with_name(f".{tarball.name}.tmp")
    with tarfile.open(tmp, "w:gz") as archive:
        archive.add(stage, arcname=name)
    tmp.replace(tarball)
    return tarball


# --- both -----------------------------------------------------------------------


def dist() -> str:
    """Build both artifacts into dist/ (the libraries must be built: the task runs ``invoke build`` first)."""
    from env.builder.toolchain import read_record

    record = read_record()
    ort_library = Path(record["artifacts"]["ort_library"])
    api_version = int(record["build"]["ort_headers"]["api_version"])
    out = dist_dir()
    wheel = build_wheel(out)
    if problems := check_wheel_contents(wheel):
        raise BuildError(f"{wheel.name}: " + "; ".join(problems))
    audit = audit_wheel(wheel)
    write_text_atomic(out / f"{wheel.name}.auditwheel.txt", audit_text(wheel, audit))
    tarball = build_cxx_package(ort_library, api_version, out)
    return (
        f"{wheel.relative_to(REPO_ROOT)}: platform policy {audit.policy} "
        f"(torch's libraries external: {wheel.name}.auditwheel.txt)\n{tarball.relative_to(REPO_ROOT)}"
    )
