"""The ONNX Runtime custom-op library (build/ort/libfused_norm_ort.so): values,
attribute, shape inference, errors, exports, and where its headers come from.

Sessions here are made with plain onnxruntime calls (not ops.ort.session) so
that the library is tested on its own.
"""

from __future__ import annotations

import shutil
import subprocess
import tarfile
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest
import torch
from onnxruntime.capi.onnxruntime_pybind11_state import InvalidArgument

import ops
from env.builder import ort_headers
from ops.reference import make_inputs, reference_norm, tolerance
from tests.helpers.ort_test_models import (
    ONNX_TYPES,
    attribute_eps,
    chained_model,
    from_bfloat16_bits,
    single_node_model,
    to_bfloat16_bits,
    two_epsilon_model,
)

# Same constant as fused_norm::cpu_rows_per_task (elements per pool task).
ELEMENTS_PER_TASK = 32768

# Tolerances: the fused kernel's table in ops/reference.py (the library runs the same kernel core).
NUMPY_STORAGE = {"float32": np.float32, "float64": np.float64, "float16": np.float16, "bfloat16": np.uint16}
HIDDEN_SIZES = [1, 3, 127, 512, 4097]


@pytest.fixture(scope="module")
def library() -> str:
    return str(ops.ort_library_path())


def make_session(library: str | None, model: bytes, threads: int = 2) -> ort.InferenceSession:
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    if library is not None:
        options.register_custom_ops_library(library)
    return ort.InferenceSession(model, sess_options=options, providers=["CPUExecutionProvider"])


def random_inputs(generator: torch.Generator, rows: int, hidden: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Realistic x [rows, hidden], weight and bias (ops/reference.py), in float64 for ORT's numpy feeds."""
    return tuple(t.numpy() for t in make_inputs((rows, hidden), torch.float64, generator))  # type: ignore[return-value]


def to_storage(a: np.ndarray, dtype: str) -> np.ndarray:
    return to_bfloat16_bits(a) if dtype == "bfloat16" else np.ascontiguousarray(a, dtype=NUMPY_STORAGE[dtype])


def from_storage(a: np.ndarray, dtype: str) -> np.ndarray:
    return (from_bfloat16_bits(a) if dtype == "bfloat16" else a).astype(np.float64)


def nan_buffer(shape: tuple[int, ...], dtype: str) -> np.ndarray:
    if dtype == "bfloat16":
        return np.full(shape, 0x7FC0, dtype=np.uint16)  # a bfloat16 quiet NaN
    return np.full(shape, np.nan, dtype=NUMPY_STORAGE[dtype])


def run_into_nan_buffer(
    session: ort.InferenceSession, feeds: dict[str, np.ndarray], dtype: str, outputs: dict[str, tuple[int, ...]]
) -> dict[str, np.ndarray]:
    """Run with IO binding; every output goes into a NaN-filled buffer of ours."""
    onnx_type = ONNX_TYPES[dtype]
    binding = session.io_binding()
    for name, value in feeds.items():
        binding.bind_ortvalue_input(name, ort.OrtValue.ortvalue_from_numpy_with_onnx_type(value, onnx_type))
    buffers = {}
    for name, shape in outputs.items():
        buffers[name] = nan_buffer(shape, dtype)
        value = ort.OrtValue.ortvalue_from_numpy_with_onnx_type(buffers[name], onnx_type)
        # The OrtValue must wrap our buffer, or the NaN check proves nothing.
        assert value.data_ptr() == buffers[name].ctypes.data
        binding.bind_ortvalue_output(name, value)
    session.run_with_iobinding(binding)
    binding.synchronize_outputs()
    return buffers


def assert_close(actual: np.ndarray, expected: np.ndarray, dtype: str) -> None:
    bound = tolerance(getattr(torch, dtype))
    rtol, atol = bound.rtol, bound.atol
    assert not np.isnan(actual).any(), f"{np.isnan(actual).sum()} of {actual.size} outputs never written"
    err = np.abs(actual - expected)
    worst = np.unravel_index(np.argmax(err - rtol * np.abs(expected)), err.shape)
    assert np.all(err <= atol + rtol * np.abs(expected)), (
        f"{dtype}: max abs error {err.max():.3g}; worst at {worst}: got {actual[worst]!r}, want {expected[worst]!r}"
    )


@pytest.mark.parametrize("hidden", HIDDEN_SIZES)
@pytest.mark.parametrize("dtype", ["float32", "float64", "float16", "bfloat16"])
def test_values_match_float64_reference(library, generator, dtype, hidden):
    # At least three pool tasks, the last one partial, so the row split and
    # its boundaries are exercised on ORT's 2-thread pool.
    rows_per_task = max(1, ELEMENTS_PER_TASK // hidden)
    rows = 2 * rows_per_task + rows_per_task // 2 + 1
    x, weight, bias = random_inputs(generator, rows, hidden)
    eps = 1e-6
    session = make_session(library, single_node_model(dtype, eps))
    feeds = {
        "X": to_storage(x.reshape(1, rows, hidden), dtype),
        "weight": to_storage(weight, dtype),
        "bias": to_storage(bias, dtype),
    }
    y = run_into_nan_buffer(session, feeds, dtype, {"Y": (1, rows, hidden)})["Y"]
    # Reference from the inputs as the kernel saw them (rounded to dtype).
    seen = {k: from_storage(v, dtype) for k, v in feeds.items()}
    expected = reference_norm(seen["X"], seen["weight"], seen["bias"], attribute_eps(eps))
    assert_close(from_storage(y, dtype), expected, dtype)


def test_plain_run_returns_ort_allocated_output(library, generator):
    x, weight, bias = random_inputs(generator, 24, 64)
    session = make_session(library, single_node_model("float32", 1e-5))
    feeds = {
        "X": x.reshape(2, 12, 64).astype(np.float32),
        "weight": weight.astype(np.float32),
        "bias": bias.astype(np.float32),
    }
    (y,) = session.run(None, feeds)
    assert y.shape == (2, 12, 64) and y.dtype == np.float32
    assert_close(
        y.astype(np.float64),
        reference_norm(*(v.astype(np.float64) for v in feeds.values()), attribute_eps(1e-5)),
        "float32",
    )


def test_epsilon_is_read_by_name(library, generator):
    hidden = 16
    x, weight, bias = random_inputs(generator, 8, hidden)
    x *= 0.05  # mean(x^2) comparable to the larger epsilon, so it changes the result visibly
    session = make_session(library, two_epsilon_model(hidden, 1e-6, 0.5))
    feeds = {"X": x.astype(np.float32), "weight": weight.astype(np.float32), "bias": bias.astype(np.float32)}
    out = run_into_nan_buffer(session, feeds, "float32", {"Y_a": x.shape, "Y_b": x.shape})
    seen = [v.astype(np.float64) for v in feeds.values()]
    assert_close(out["Y_a"].astype(np.float64), reference_norm(*seen, attribute_eps(1e-6)), "float32")
    assert_close(out["Y_b"].astype(np.float64), reference_norm(*seen, attribute_eps(0.5)), "float32")
    assert np.abs(out["Y_a"] - out["Y_b"]).max() > 1e-2


def test_output_shape_is_inferred(library):
    # Y is declared without a shape: what the session reports comes from the
    # op's shape inference (symbolic dims kept), through two chained nodes.
    session = make_session(library, chained_model(24))
    assert session.get_outputs()[0].shape == ["batch", "seq", 24]
    assert session.get_outputs()[0].type == "tensor(float)"
    single = make_session(library, single_node_model("float16", x_shape=["n", 5]))
    assert single.get_outputs()[0].shape == ["n", 5]
    assert single.get_outputs()[0].type == "tensor(float16)"
    # Y takes X's dtype, not the other inputs' (they must match X at run time).
    typed = make_session(library, single_node_model("float32", bias_dtype="float64"))
    assert typed.get_outputs()[0].type == "tensor(float)"
    # X of unknown shape: Y's shape must stay unknown, not be invented.
    unknown = make_session(library, single_node_model("float32", x_shape=None))
    assert not unknown.get_outputs()[0].shape
    # An unnamed, unknown dim: Y's shape stays unknown rather than get a -1.
    unnamed = make_session(library, single_node_model("float32", x_shape=[None, 8]))
    assert not unnamed.get_outputs()[0].shape


def _good_feeds(generator) -> dict[str, np.ndarray]:
    x, weight, bias = random_inputs(generator, 6, 8)
    return {
        "X": x.reshape(2, 3, 8).astype(np.float32),
        "weight": weight.astype(np.float32),
        "bias": bias.astype(np.float32),
    }


BAD_CALLS = {
    # name: (model kwargs, feeds change, message fragment)
    "0-d X": (dict(x_shape=None), {"X": np.array(1.5, dtype=np.float32)}, "X must have rank >= 1"),
    "weight length": (
        dict(weight_shape=["w"]),
        {"weight": np.ones(7, np.float32)},
        r"weight must be 1-D of length 8 \(the last dimension of X\), got shape \[7\]",
    ),
    "bias length": (
        dict(bias_shape=None),
        {"bias": np.ones(9, np.float32)},
        r"bias must be 1-D of length 8 \(the last dimension of X\), got shape \[9\]",
    ),
    "bias rank": (
        dict(bias_shape=None),
        {"bias": np.ones((1, 8), np.float32)},
        r"bias must be 1-D of length 8 .* got shape \[1, 8\]",
    ),
    "weight dtype": (
        dict(weight_dtype="float64"),
        {"weight": np.ones(8, np.float64)},
        "X, weight and bias must share one dtype, got X float32, weight float64, bias float32",
    ),
    "bias dtype": (
        dict(bias_dtype="float64"),
        {"bias": np.ones(8, np.float64)},
        "X, weight and bias must share one dtype, got X float32, weight float32, bias float64",
    ),
    # With X's shape unknown, shape inference cannot type Y and ORT types it
    # after the last untyped input (bias): a consistent graph then declares Y
    # with bias's dtype, and the kernel still refuses the mix.
    "bias dtype, X shape unknown": (
        dict(bias_dtype="float64", y_dtype="float64", x_shape=None),
        {"bias": np.ones(8, np.float64)},
        "X, weight and bias must share one dtype, got X float32, weight float32, bias float64",
    ),
    "negative epsilon": (dict(epsilon=-1e-5), {}, "attribute epsilon must be finite and >= 0, got -1e-05"),
    "nan epsilon": (dict(epsilon=float("nan")), {}, "attribute epsilon must be finite and >= 0, got nan"),
}


@pytest.mark.parametrize("case", list(BAD_CALLS))
def test_bad_call_raises_from_run_and_session_lives_on(library, generator, case):
    model_kwargs, change, message = BAD_CALLS[case]
    session = make_session(library, single_node_model("float32", **{"epsilon": 1e-5, **model_kwargs}))
    feeds = _good_feeds(generator)
    with pytest.raises(InvalidArgument, match="fused_norm: " + message):
        session.run(None, {**feeds, **change})
    # The process lives on and the library still works: a good call on a
    # fresh session, and on the same one where its graph admits a good call.
    expected = reference_norm(*(v.astype(np.float64) for v in feeds.values()), attribute_eps(1e-5))
    sessions = [make_session(library, single_node_model("float32", 1e-5))]
    if "dtype" not in case and "epsilon" not in case:
        sessions.append(session)
    for good in sessions:
        (y,) = good.run(None, feeds)
        assert_close(y.astype(np.float64), expected, "float32")


def test_unsupported_dtype_raises_from_run(library):
    session = make_session(library, single_node_model("int32"))
    feeds = {
        "X": np.arange(24, dtype=np.int32).reshape(2, 3, 4),
        "weight": np.ones(4, np.int32),
        "bias": np.zeros(4, np.int32),
    }
    with pytest.raises(
        InvalidArgument, match="X has unsupported dtype int32; supported: float32, float64, float16, bfloat16"
    ):
        session.run(None, feeds)
    with pytest.raises(InvalidArgument, match="unsupported dtype int32"):
        session.run(None, feeds)  # and again: the failure leaves nothing broken behind


def test_empty_input_gives_empty_output(library):
    session = make_session(library, single_node_model("float32"))
    (y,) = session.run(
        None, {"X": np.zeros((0, 3, 8), np.float32), "weight": np.ones(8, np.float32), "bias": np.zeros(8, np.float32)}
    )
    assert y.shape == (0, 3, 8)


def test_missing_epsilon_attribute_fails_session_creation(library):
    with pytest.raises(Exception, match="needs a float attribute 'epsilon'"):
        make_session(library, single_node_model("float32", epsilon=None))


def test_session_without_library_names_the_op():
    with pytest.raises(Exception, match="myops:fused_norm.* is not a registered function/op"):
        make_session(None, single_node_model("float32"))


def test_library_exports_only_register_custom_ops(library):
    if shutil.which("nm") is None:
        pytest.skip("nm (binutils) is not installed")
    symbols = subprocess.run(["nm", "-D", "--defined-only", library], capture_output=True, text=True, check=True)
    names = {line.split()[-1] for line in symbols.stdout.splitlines() if line.strip()}
    assert names == {"RegisterCustomOps"}


# --- headers -------------------------------------------------------------------


def test_headers_recorded_and_not_newer_than_runtime():
    from env.builder.ort_runtime import runtime_api
    from env.builder.toolchain import read_record

    recorded = read_record()["build"]["ort_headers"]
    runtime = runtime_api()
    assert recorded["api_version"] <= recorded["runtime_api_version"] == runtime.api_version
    assert ort_headers.header_api_version(Path(recorded["path"])) == recorded["api_version"]
    # ORT 1.x: release 1.m serves API m, and the probe must agree with that.
    assert runtime.api_version == int(ort.__version__.split(".")[1])


def test_newer_headers_than_runtime_are_refused():
    headers = ort_headers.OrtHeaders(Path("/nowhere"), "test", "9.9.9", "0" * 64, api_version=32)
    with pytest.raises(ort_headers.OrtHeadersError, match="newer than the installed runtime"):
        ort_headers.check_runtime_compatible(headers, runtime_api_version=31, runtime_version="1.31.1")
    ort_headers.check_runtime_compatible(headers, runtime_api_version=32, runtime_version="1.32.0")


def _fake_package(tmp_path: Path) -> Path:
    """A tarball laid out like the npm package, with a made-up header set."""
    root = tmp_path / "src" / ort_headers.NPM_HEADER_DIR
    root.mkdir(parents=True)
    for name in ort_headers.REQUIRED_HEADERS:
        (root / name).write_text("#define ORT_API_VERSION 29\n" if name == "onnxruntime_c_api.h" else "// h\n")
    tarball = tmp_path / "fake.tgz"
    with tarfile.open(tarball, "w:gz") as archive:
        archive.add(tmp_path / "src" / "package", arcname="package")
    return tarball


def test_checksum_mismatch_is_refused(tmp_path, monkeypatch):
    monkeypatch.setenv("FUSEDBENCH_CACHE", str(tmp_path / "cache"))
    fake = _fake_package(tmp_path)

    def fake_pack(destination: Path) -> Path:
        destination.mkdir(parents=True, exist_ok=True)
        return Path(shutil.copy(fake, destination / "pkg.tgz"))

    monkeypatch.setattr(ort_headers, "_npm_pack", fake_pack)
    with pytest.raises(ort_headers.OrtHeadersError, match="checksum mismatch"):
        ort_headers.npm_headers()
    assert not (tmp_path / "cache" / "ort-headers" / ort_headers.npm_source_id()).exists()


def test_missing_npm_says_what_to_do(tmp_path, monkeypatch):
    monkeypatch.setattr(ort_headers.shutil, "which", lambda name: None)
    with pytest.raises(ort_headers.OrtHeadersError, match="npm is not installed.*FUSEDBENCH_ORT_HEADERS"):
        ort_headers._npm_pack(tmp_path)


def test_tampered_cache_is_refused(tmp_path, monkeypatch):
    cached = ort_headers.npm_headers()  # the real, verified cache of this machine
    copy = tmp_path / "ort-headers" / ort_headers.npm_source_id()
    shutil.copytree(cached.path, copy)
    monkeypatch.setenv("FUSEDBENCH_CACHE", str(tmp_path))
    assert ort_headers.npm_headers().api_version == cached.api_version
    with (copy / "onnxruntime_c_api.h").open("a") as f:
        f.write("// edited\n")
    with pytest.raises(ort_headers.OrtHeadersError, match="do not match their manifest"):
        ort_headers.npm_headers()


def test_directory_source(tmp_path):
    cached = ort_headers.npm_headers()
    include = tmp_path / "onnxruntime-linux-x64-1.29.0" / "include"
    shutil.copytree(cached.path, include, ignore=shutil.ignore_patterns("manifest.json"))
    (include.parent / "VERSION_NUMBER").write_text("1.29.0\n")
    headers = ort_headers.headers_from_directory(include)
    assert (headers.version, headers.api_version, headers.path) == ("1.29.0", 29, include.resolve())
    (include / "onnxruntime_cxx_api.h").unlink()
    with pytest.raises(ort_headers.OrtHeadersError, match="lacks onnxruntime_cxx_api.h"):
        ort_headers.headers_from_directory(include)


def test_fetch_verifies_extracts_and_caches(tmp_path, monkeypatch):
    monkeypatch.setenv("FUSEDBENCH_CACHE", str(tmp_path / "cache"))
    fake = _fake_package(tmp_path)
    calls = []

    def fake_pack(destination: Path) -> Path:
        calls.append(destination)
        destination.mkdir(parents=True, exist_ok=True)
        return Path(shutil.copy(fake, destination / "pkg.tgz"))

    monkeypatch.setattr(ort_headers, "_npm_pack", fake_pack)
    monkeypatch.setattr(ort_headers, "NPM_TARBALL_SHA256", ort_headers._sha256_file(fake))
    first = ort_headers.npm_headers()
    assert first.api_version == 29 and first.sha256 == ort_headers._sha256_file(fake)
    assert sorted(p.name for p in first.path.iterdir()) == sorted([*ort_headers.REQUIRED_HEADERS, "manifest.json"])
    assert ort_headers.npm_headers() == first and len(calls) == 1  # second call: cache hit, no download
