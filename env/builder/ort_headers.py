"""The official ONNX Runtime C/C++ headers, from a pinned and checksummed source, cached.

The onnxruntime wheels ship no headers, so the build fetches them:

* default: the npm package ``com.github.asus4.onnxruntime@0.4.9``, which carries
  the official headers of onnxruntime 1.29.0 (ORT_API_VERSION 29) inside its
  iOS framework. ``npm pack`` downloads the tarball (the npm client knows its
  registry); we check its sha256 against the pin below before reading it;
* ``FUSEDBENCH_ORT_HEADERS=<dir>``: the ``include/`` folder of an extracted
  official onnxruntime release archive (the natural source where the release
  downloads are reachable). Used in place.

Extracted headers are cached under
``${FUSEDBENCH_CACHE:-~/.cache/fusedbench}/ort-headers/<source-id>/`` with a
manifest (source, version, sha256, API version, per-file sha256); a cache hit
re-verifies every file. Headers must never be newer than the runtime: a library
built against API N asks the runtime for API N, which a runtime older than N
does not have (:func:`check_runtime_compatible`).
"""

from __future__ import annotations

import hashlib
import json
import os
import plistlib
import re
import shutil
import subprocess
import tarfile
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path

from env.builder.commands import BuildError
from env.files import write_text_atomic

NPM_PACKAGE = "com.github.asus4.onnxruntime"
NPM_VERSION = "0.4.9"
NPM_TARBALL_SHA256 = "e59788788818fdde1b2e522e766a21ba0f7d8391de55737abf81e32cc801785d"
# The device-independent headers of the iOS arm64 framework (all slices carry
# the same files); the framework's Info.plist one level up names the ORT version.
NPM_FRAMEWORK_DIR = "package/Plugins/iOS~/onnxruntime.xcframework/ios-arm64/onnxruntime.framework/"
NPM_HEADER_DIR = NPM_FRAMEWORK_DIR + "Headers/"

# What csrc/ort includes; a source lacking one of these is not usable.
REQUIRED_HEADERS = (
    "onnxruntime_c_api.h",
    "onnxruntime_cxx_api.h",
    "onnxruntime_cxx_inline.h",
    "onnxruntime_float16.h",
)

MANIFEST_NAME = "manifest.json"


class OrtHeadersError(BuildError):
    """The headers could not be obtained or verified; the message says what to do."""


@dataclass(frozen=True)
class OrtHeaders:
    path: Path  # the folder to pass as -I
    source: str  # e.g. "npm:com.github.asus4.onnxruntime@0.4.9" or "dir:/opt/ort/include"
    version: str  # onnxruntime version of the headers, when known
    sha256: str  # of the npm tarball, or of the header set for a directory source
    api_version: int  # ORT_API_VERSION in onnxruntime_c_api.h

    def summary(self) -> str:
        return f"onnxruntime {self.version} headers, ORT_API_VERSION {self.api_version}, "
        f"from {self.source} (sha256 {self.sha256[:12]})"


def cache_root() -> Path:
    return Path(os.environ.get("FUSEDBENCH_CACHE", Path.home() / ".cache" / "fusedbench")).expanduser()


def header_api_version(include_dir: Path) -> int:
    text = (include_dir / "onnxruntime_c_api.h").read_text(errors="replace")
    match = re.search(r"^#define ORT_API_VERSION (\d+)", text, re.M)
    if not match:
        raise OrtHeadersError(f"no '#define ORT_API_VERSION' in {include_dir / 'onnxruntime_c_api.h'}")
    return int(match.group(1))


def _sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _file_digests(include_dir: Path) -> dict[str, str]:
    return {p.name: _sha256_file(p) for p in sorted(include_dir.glob("*.h"))}


def _check_required(include_dir: Path, source: str) -> None:
    missing = [h for h in REQUIRED_HEADERS if not (include_dir / h).is_file()]
    if missing:
        raise OrtHeadersError(
            f"{source}: {include_dir} lacks {', '.join(missing)}; it is not an ONNX Runtime include/ folder"
        )


# --- source 1: an extracted official release archive -----------------------


def headers_from_directory(include_dir: Path) -> OrtHeaders:
    """Headers of an extracted official release (``onnxruntime-<os>-<arch>-<version>/include``)."""
    include_dir = include_dir.expanduser().resolve()
    source = f"dir:{include_dir}"
    _check_required(include_dir, source)
    # The release archive carries VERSION_NUMBER next to include/.
    version_file = include_dir.parent / "VERSION_NUMBER"
    version = version_file.read_text().strip() if version_file.is_file() else "unknown"
    digests = _file_digests(include_dir)
    set_digest = hashlib.sha256(json.dumps(digests, sort_keys=True).encode()).hexdigest()
    return OrtHeaders(include_dir, source, version, set_digest, header_api_version(include_dir))


# --- source 2: the pinned npm package --------------------------------------


def npm_source_id() -> str:
    return f"npm-{NPM_PACKAGE}-{NPM_VERSION}-{NPM_TARBALL_SHA256[:12]}"


def _cached_npm_headers(directory: Path) -> OrtHeaders | None:
    """The cached copy if its manifest matches the pin and every file its recorded digest."""
    manifest_path = directory / MANIFEST_NAME
    if not manifest_path.is_file():
        return None
    manifest = json.loads(manifest_path.read_text())
    if manifest.get("sha256") != NPM_TARBALL_SHA256 or _file_digests(directory) != manifest.get("files"):
        raise OrtHeadersError(
            f"the cached ONNX Runtime headers in {directory} do not match their manifest (modified or corrupt); "
            f"delete that folder and build again"
        )
    return OrtHeaders(
        directory, manifest["source"], manifest["version"], manifest["sha256"], int(manifest["api_version"])
    )


def _npm_pack(destination: Path) -> Path:
    """Download the pinned tarball with the npm client into ``destination``."""
    npm = shutil.which("npm")
    if npm is None:
        raise OrtHeadersError(
            "npm is not installed, and it is needed once to fetch the ONNX Runtime headers "
            f"({NPM_PACKAGE}@{NPM_VERSION}). Install Node.js/npm (e.g. `apt-get install npm`), or set "
            "FUSEDBENCH_ORT_HEADERS to the include/ folder of an extracted official onnxruntime release"
        )
    spec = f"{NPM_PACKAGE}@{NPM_VERSION}"
    destination.mkdir(parents=True, exist_ok=True)
    proc = subprocess.run(
        [npm, "pack", spec, "--json", "--ignore-scripts", "--pack-destination", str(destination)],
        capture_output=True,
        text=True,
        timeout=1800,
        check=False,
    )
    if proc.returncode != 0:
        raise OrtHeadersError(f"`npm pack {spec}` failed (exit {proc.returncode}):\n{proc.stderr.strip()[-2000:]}")
    tarballs = sorted(destination.glob("*.tgz"))
    if len(tarballs) != 1:
        raise OrtHeadersError(f"`npm pack {spec}` left {len(tarballs)} tarballs in {destination}, expected one")
    return tarballs[0]


def _extract_headers(tarball: Path, target: Path) -> str:
    """Copy the framework's *.h into ``target``; return the ORT version from its Info.plist."""
    version = "unknown"
    with tarfile.open(tarball, "r:gz") as archive:
        for member in archive:
            if not member.isfile():
                continue
            if (
                member.name.startswith(NPM_HEADER_DIR)
                and member.name.endswith(".h")
                and "/" not in member.name[len(NPM_HEADER_DIR) :]
            ):
                # Write by base name: nothing from the archive decides a path.
                (target / Path(member.name).name).write_bytes(archive.extractfile(member).read())
            elif member.name == NPM_FRAMEWORK_DIR + "Info.plist":
                info = plistlib.loads(archive.extractfile(member).read())
                version = str(info.get("CFBundleShortVersionString", "unknown"))
    return version


def npm_headers() -> OrtHeaders:
    """The pinned npm package's headers: from the cache, or fetched, verified and cached."""
    directory = cache_root() / "ort-headers" / npm_source_id()
    cached = _cached_npm_headers(directory)
    if cached is not None:
        return cached
    directory.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="ort-headers-", dir=directory.parent) as tmp:
        tmp_path = Path(tmp)
        tarball = _npm_pack(tmp_path / "download")
        digest = _sha256_file(tarball)
        if digest != NPM_TARBALL_SHA256:
            raise OrtHeadersError(
                f"checksum mismatch for {NPM_PACKAGE}@{NPM_VERSION}: sha256 {digest}, pinned {NPM_TARBALL_SHA256}. "
                "The download is not the audited package; refusing to use it"
            )
        staged = tmp_path / "headers"
        staged.mkdir()
        version = _extract_headers(tarball, staged)
        source = f"npm:{NPM_PACKAGE}@{NPM_VERSION}"
        _check_required(staged, source)
        headers = OrtHeaders(directory, source, version, digest, header_api_version(staged))
        manifest = {**asdict(headers), "path": None, "files": _file_digests(staged)}
        write_text_atomic(staged / MANIFEST_NAME, json.dumps(manifest, indent=2, sort_keys=True) + "\n")
        try:
            # A directory rename is atomic: readers see no cache or a whole one.
            staged.rename(directory)
        except OSError:
            # Another build cached it meanwhile; use (and verify) theirs.
            pass
    cached = _cached_npm_headers(directory)
    if cached is None:
        raise OrtHeadersError(f"caching the ONNX Runtime headers in {directory} failed")
    return cached


# --- choice and compatibility ----------------------------------------------


def ensure_ort_headers() -> OrtHeaders:
    """The headers to build against: $FUSEDBENCH_ORT_HEADERS if set, else the pinned npm package."""
    explicit = os.environ.get("FUSEDBENCH_ORT_HEADERS")
    return headers_from_directory(Path(explicit)) if explicit else npm_headers()


def check_runtime_compatible(headers: OrtHeaders, runtime_api_version: int, runtime_version: str) -> None:
    """Refuse headers newer than the runtime: the library would ask for an API the runtime lacks."""
    if headers.api_version > runtime_api_version:
        raise OrtHeadersError(
            f"the ONNX Runtime headers ({headers.summary()}) are newer than the installed runtime "
            f"(onnxruntime {runtime_version}, C API up to {runtime_api_version}). A custom-op library built "
            f"against API {headers.api_version} cannot load there: use headers with ORT_API_VERSION <= "
            f"{runtime_api_version} (FUSEDBENCH_ORT_HEADERS=<include dir of that release>) or upgrade onnxruntime"
        )


__all__ = [
    "OrtHeaders",
    "OrtHeadersError",
    "cache_root",
    "check_runtime_compatible",
    "ensure_ort_headers",
    "header_api_version",
    "headers_from_directory",
    "npm_headers",
]
