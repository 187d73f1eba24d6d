"""fusedbench tasks (``invoke --list``). Each task calls one module function; no logic here."""

from __future__ import annotations

import sys

from invoke import Collection, Exit, task


@task(help={"aot": "ahead-of-time build with setup.py (delivery) instead of the JIT build (default)"})
def build(c, aot=False):
    """Record the toolchain, then build the torch op library and the ONNX Runtime custom-op library."""
    from env.build.steps import build as run_build
    from env.build.torch_library import BuildError

    try:
        run_build("aot" if aot else "jit")
    except BuildError as error:
        raise Exit(f"build failed - {error}") from error


@task
def toolchain(c):
    """Print the toolchain table of the last build (build/toolchain.json)."""
    from env.build import toolchain as tc
    from env.paths import toolchain_record_path

    if not toolchain_record_path().exists():
        raise Exit(f"no toolchain record at {toolchain_record_path()} - run `invoke build` first")
    print(tc.format_summary(tc.read_record()))


@task(
    pre=[build],
    help={
        "k": "only tests matching this pytest -k expression",
        "args": "extra pytest arguments, quoted",
    },
)
def test(c, k="", args=""):
    """Build, then run the test suite (pytest)."""
    command = [sys.executable, "-m", "pytest"]
    if k:
        command += ["-k", k]
    c.run(" ".join(_quote(a) for a in command) + (f" {args}" if args else ""), pty=False)


@task(name="check")
def env_check(c):
    """Compare the installed packages with requirements/<variant>.txt; fail listing every drift."""
    from env.lock.drift import check
    from env.lock.lockfile import LockError

    try:
        print(check())
    except LockError as error:
        raise Exit(f"env.check: {error}") from error


def _quote(arg: str) -> str:
    import shlex

    return shlex.quote(arg)


@task(
    pre=[build],
    help={
        "baseline": "all (default), one name, or a comma list: unfused, fused, native, compiled, ort",
        "quick": "small grid for CI (about 2 minutes)",
        "warmup": "untimed calls before each measurement (default 50)",
        "threads": "torch and ONNX Runtime intra-op threads (default: every core this process may use)",
        "out": "report folder (default <repo>/reports; FUSEDBENCH_REPORTS_DIR overrides the default)",
        "dtype": "float32 (default), or a comma list of float32, float64, float16, bfloat16",
    },
)
def bench(c, baseline="all", quick=False, warmup=50, threads=0, out="", dtype="float32"):
    """Benchmark the baselines; write reports/<UTC time>-<host>.csv (+ samples, plot) and print a summary."""
    from bench.run import BenchOptions, main

    options = BenchOptions(baseline=baseline, quick=quick, warmup=warmup, threads=threads or None, out_dir=out or None, dtype=dtype)
    try:
        code = main(options)
    except ValueError as error:
        raise Exit(f"bench: {error}") from error
    if code:
        raise Exit("bench: some baselines failed (listed above) - their rows are not in the report", code=code)


@task(
    help={
        "base": "the earlier report CSV",
        "new": "the later report CSV",
        "threshold": "slowdown that counts as a regression when significant (default 0.10 = 10%)",
        "alpha": "significance level of the one-sided Mann-Whitney U test (default 0.002, as asv)",
    },
)
def compare(c, base, new, threshold=0.10, alpha=0.002):
    """Compare two bench reports row by row; exit non-zero when NEW has a significant regression."""
    from bench.compare import main

    code = main(base, new, threshold=threshold, alpha=alpha)
    if code:
        raise Exit(code=code)


@task(help={"upgrade": "move every pin to the newest version requirements/*.in allow (default: keep them)"})
def lock(c, upgrade=False):
    """Compile requirements/{cpu,cuda}.in into hashed requirements/{cpu,cuda}.txt (uv pip compile)."""
    from env.lock.compile import regenerate
    from env.lock.lockfile import LockError

    try:
        print("\n".join(compiled.summary() for compiled in regenerate(upgrade=upgrade)))
    except LockError as error:
        raise Exit(f"env.lock: {error} - fix requirements/*.in and re-run") from error


@task(
    name="build",
    help={
        "tag": "image tag (default fusedbench:local)",
        "max_jobs": "parallel compile jobs in the image build (default: the Dockerfile's 4)",
        "base_digest": "sha256:... of the CUDA base image, instead of the Dockerfile's",
    },
)
def docker_build(c, tag="", max_jobs=0, base_digest=""):
    """Build the Docker image: pinned CUDA base, env from the lock, `invoke build --aot` baked in."""
    from env.lock import docker

    _docker(docker.build_command(tag or docker.DEFAULT_TAG, max_jobs or None, base_digest or None))


@task(
    name="run",
    help={
        "tag": "image tag (default fusedbench:local)",
        "reports": "host folder mounted as the image's reports folder (default <repo>/reports)",
        "gpus": "pass --gpus all (default: when nvidia-smi lists a GPU here)",
    },
)
def docker_run(c, tag="", reports="", gpus=None):
    """Run an invoke task in the image: `invoke docker.run -- bench --baseline all`."""
    import shlex
    from pathlib import Path

    from env.lock import docker

    task_line = shlex.split(c.remainder)
    _docker(docker.run_command(task_line, tag or docker.DEFAULT_TAG, Path(reports) if reports else None, gpus))


def _docker(command):
    from env.lock import docker

    try:
        result = docker.run(command)
    except docker.DockerError as error:
        raise Exit(f"docker: {error}") from error
    if result.returncode:
        raise Exit(f"docker: `{' '.join(command[:2])}` failed (exit {result.returncode})", code=result.returncode)


@task(
    pre=[build],
    help={
        "route": "all (default), one of standard, opset23, custom, or a comma list",
        "out": "output folder (default <repo>/build/onnx)",
        "torchscript": "use the deprecated TorchScript exporter (dynamo=False) instead of the dynamo one",
    },
)
def export(c, route="all", out="", torchscript=False):
    """Export the sequence model to ONNX by each route; check each file and print its graph summary."""
    from ops.onnx.export import ExportError, export_routes
    from ops.onnx.checks import ExportCheckError

    try:
        export_routes(route, out or None, torchscript=torchscript)
    except (ValueError, ExportError, ExportCheckError) as error:
        raise Exit(f"export failed - {error}") from error


@task(
    pre=[build],
    help={
        "route": "all (default), one of standard, opset23, custom, or a comma list",
        "out": "folder for the saved inputs and exported files (default <repo>/build/alignment)",
        "layers": "also compare each block's output (extra graph outputs) and name the first that diverges",
        "optimization": "ORT graph optimisation: all (default), extended, basic, disable",
        "dtype": "op-level dtypes, comma list of float32, float16, float64 (default float32,float16)",
    },
)
def check(c, route="all", out="", layers=False, optimization="all", dtype="float32,float16"):
    """Align PyTorch and ONNX Runtime per route (op alone and model); fail past the dtype's tolerance."""
    from ops._library import LibraryNotBuiltError
    from ops.alignment.check import AlignmentError, check_alignment
    from ops.onnx.export import ExportError
    from ops.onnx.checks import ExportCheckError
    from ops.ort.session import CustomOpsNotRegisteredError

    try:
        check_alignment(route, out or None, layers=layers, optimization=optimization, dtypes=dtype.split(","))
    except (ValueError, ExportError, ExportCheckError, AlignmentError, LibraryNotBuiltError, CustomOpsNotRegisteredError) as error:
        raise Exit(f"check failed - {error}") from error


# --- namespace: one add_task line per task ---------------------------------
env_namespace = Collection("env")
env_namespace.add_task(env_check)

ns = Collection()
ns.add_task(build)
ns.add_task(toolchain)
ns.add_task(test)
ns.add_task(bench)
ns.add_task(compare)
ns.add_collection(env_namespace)
ns.add_task(lock)
docker_namespace = Collection("docker")
docker_namespace.add_task(docker_build)
docker_namespace.add_task(docker_run)
ns.add_collection(docker_namespace)
ns.add_task(export)
ns.add_task(check)
