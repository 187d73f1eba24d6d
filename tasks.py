"""fusedbench tasks (``invoke --list``). Each task calls one module function; no logic here.

Numeric options have string defaults: env/cli.py converts and checks them, so
a bad value ends with a message naming the option instead of a traceback.
"""

from __future__ import annotations

import sys

from invoke import Collection, Exit, task

from env import cli

_BUILD_ERRORS = ("env.build.torch_library:BuildError", "env.lock.lockfile:LockError")
_EXPORT_ERRORS = (ValueError, "ops.onnx.export:ExportError", "ops.onnx.checks:ExportCheckError")


@task(help={
    "aot": "ahead-of-time build with setup.py (delivery) instead of the JIT build (default)",
    "verbose": "also print the toolchain table and the CUDA kernels' ptxas resource table",
})
@cli.fails_with(*_BUILD_ERRORS)
def build(c, aot=False, verbose=False):
    """Record the toolchain, then rebuild each library and check whose inputs changed (else: up to date)."""
    from env.build.steps import build as run_build

    run_build("aot" if aot else "jit", verbose=verbose)


@task
def toolchain(c):
    """Print the toolchain table of the last build (build/toolchain.json) and its CUDA resource table."""
    from env.build.steps import print_toolchain

    if not print_toolchain():
        raise Exit("no toolchain record yet - run `invoke build` first")


@task(
    pre=[build],
    help={
        "k": "only tests matching this pytest -k expression",
        "args": "extra pytest arguments, quoted",
    },
)
def test(c, k="", args=""):
    """Build, then run the test suite (pytest)."""
    import shlex

    command = [sys.executable, "-m", "pytest", *(["-k", k] if k else [])]
    c.run(" ".join(shlex.quote(a) for a in command) + (f" {args}" if args else ""), pty=False)


@task(
    pre=[build],
    help={
        "baseline": "all (default), one name, or a comma list: unfused, fused, native, compiled, liger, ort",
        "quick": "small grid for CI (about 2 minutes)",
        "warmup": "untimed calls before each measurement, an integer >= 0 (default 50)",
        "threads": "torch and ONNX Runtime intra-op threads, an integer >= 1 (default: every core this process may use)",
        "out": "report folder (default <repo>/reports; FUSEDBENCH_REPORTS_DIR overrides the default)",
        "dtype": "each device's default (cpu: float32; cuda: float32,bfloat16), or a comma list of float32, float64, float16, bfloat16",
        "device": "all (default: every device present), cpu, cuda, or a comma list",
        "l2_flush": "CUDA: overwrite the L2 cache before each timed call of a case that fits in it (default: L2 warm)",
        "against": "a git ref: build it apart, measure it and this checkout interleaved in one run, compare "
        "(exit code as `compare`; 4 when the A/B run cannot be set up)",
    },
)
@cli.fails_with(ValueError)
def bench(c, baseline="all", quick=False, warmup="50", threads="", out="", dtype="", device="all", l2_flush=False, against=""):
    """Benchmark the baselines; write reports/<UTC time>-<host>.csv (+ samples, plot) and print a summary."""
    from bench.run import BenchOptions, main

    options = BenchOptions(
        baseline=baseline, quick=quick, warmup=cli.integer("--warmup", warmup, minimum=0),
        threads=cli.integer("--threads", threads, minimum=1) if threads else None, out_dir=out or None, dtype=dtype,
        device=device, l2_flush=l2_flush,
    )
    if against:
        from bench import ab

        if code := ab.main(against, options):
            raise Exit(code=code)
    elif code := main(options):
        raise Exit("bench: some baselines failed (listed above) - their rows are not in the report", code=code)


@task(
    help={
        "base": "the earlier report CSV",
        "new": "the later report CSV",
        "threshold": "slowdown that counts as a regression when the whole confidence interval is above it, in (0, 1) "
        "(default 0.10 = 10%)",
        "alpha": "1 - the confidence of the ratio's bootstrap interval, in (0, 1) (default 0.05: a 95% interval)",
        "allow_different_machines": "compare reports from different machines anyway (printed under a warning; "
        "without it they are refused with exit code 3)",
    },
)
def compare(c, base, new, threshold="0.10", alpha="0.05", allow_different_machines=False):
    """Compare two bench reports row by row; exit 1 on a regression (interval above threshold), 3 if machines differ."""
    from bench.compare import main

    threshold, alpha = cli.fraction("--threshold", threshold), cli.fraction("--alpha", alpha)
    if code := main(base, new, threshold=threshold, alpha=alpha, allow_different_machines=allow_different_machines):
        raise Exit(code=code)


@task(
    pre=[build],
    help={
        "route": "all (default), one of standard, opset23, custom, or a comma list",
        "out": "output folder (default <repo>/build/onnx)",
        "torchscript": "use the deprecated TorchScript exporter (dynamo=False) instead of the dynamo one",
    },
)
@cli.fails_with(*_EXPORT_ERRORS)
def export(c, route="all", out="", torchscript=False):
    """Export the sequence model to ONNX by each route; check each file and print its graph summary."""
    from ops.onnx.export import export_routes

    export_routes(route, out or None, torchscript=torchscript)


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
@cli.fails_with(*_EXPORT_ERRORS, "ops.alignment.check:AlignmentError", "ops._library:LibraryNotBuiltError",
                "ops.ort.session:CustomOpsNotRegisteredError")
def align(c, route="all", out="", layers=False, optimization="all", dtype="float32,float16"):
    """Align PyTorch and ONNX Runtime per route (op alone and model); fail past the dtype's tolerance."""
    from ops.alignment.check import check_alignment

    check_alignment(route, out or None, layers=layers, optimization=optimization, dtypes=dtype.split(","))


# --- env: the environment against its lock ------------------------------------------


@task(name="check")
@cli.fails_with("env.lock.lockfile:LockError")
def env_check(c):
    """Compare the installed packages with requirements/<variant>.txt; fail listing every drift."""
    from env.lock.drift import check

    print(check())


@task(name="lock", help={"upgrade": "move every pin to the newest version requirements/*.in allow (default: keep them)"})
@cli.fails_with("env.lock.lockfile:LockError")
def env_lock(c, upgrade=False):
    """Compile requirements/{cpu,cuda}.in into hashed requirements/{cpu,cuda}.txt (uv pip compile)."""
    from env.lock.compile import regenerate

    print("\n".join(compiled.summary() for compiled in regenerate(upgrade=upgrade)))


# --- docker ----------------------------------------------------------------------------


@task(
    name="build",
    help={
        "tag": "image tag (default fusedbench:local)",
        "max_jobs": "parallel compile jobs in the image build, an integer >= 1 (default: the Dockerfile's 4)",
        "base_digest": "sha256:... of the CUDA base image, instead of the Dockerfile's",
    },
)
@cli.fails_with("env.lock.docker:DockerError")
def docker_build(c, tag="", max_jobs="", base_digest=""):
    """Build the Docker image: pinned CUDA base, env from the lock, `invoke build --aot` baked in."""
    from env.lock import docker

    jobs = cli.integer("--max-jobs", max_jobs, minimum=1) if max_jobs else None
    _docker(docker.build_command(tag or docker.DEFAULT_TAG, jobs, base_digest or None))


@task(
    name="run",
    help={
        "tag": "image tag (default fusedbench:local)",
        "reports": "host folder mounted as the image's reports folder (default <repo>/reports)",
        "gpus": "pass --gpus all (default: when nvidia-smi lists a GPU here)",
    },
)
@cli.fails_with("env.lock.docker:DockerError")
def docker_run(c, tag="", reports="", gpus=None):
    """Run an invoke task in the image: `invoke docker.run -- bench --baseline all`."""
    import shlex
    from pathlib import Path

    from env.lock import docker

    _docker(docker.run_command(shlex.split(c.remainder), tag or docker.DEFAULT_TAG, Path(reports) if reports else None, gpus))


def _docker(command: list[str]) -> None:
    from env.lock import docker

    if code := docker.run(command).returncode:
        raise Exit(f"docker: `{' '.join(command[:2])}` failed (exit {code}) - see its output above", code=code)


@task(
    pre=[build],
    help={
        "quick": "CI form: 0.25 s per configuration in one round (default 1.5 s over 3 rounds)",
        "duration": "seconds of load per configuration, a number > 0 (overrides --quick's)",
        "out": "report folder (default <repo>/reports; FUSEDBENCH_REPORTS_DIR overrides the default)",
        "models": "folder for the exported model files, reused by later runs of the same model (default: temporary)",
    },
)
@cli.fails_with(ValueError, *_EXPORT_ERRORS, "ops._library:LibraryNotBuiltError", "ops.ort.pool:SessionCreationError")
def serve_bench(c, quick=False, duration="", out="", models=""):
    """Serve the exported model to concurrent clients: req/s, P50-P99, mismatches; sessions x threads x clients sweep."""
    from bench.serve.run import main, options_from_cli

    if code := main(options_from_cli(quick=quick, duration=duration, out=out, models=models)):
        raise Exit("serve-bench: interrupted, or a configuration failed or mismatched (listed above) - see the summary", code=code)


@task(pre=[build], help={"folder": "the dump folder (session config myops.fused_norm.dump_dir / FUSEDBENCH_ORT_DUMP_DIR)"})
@cli.fails_with("ops.ort.dump_replay:DumpError", "ops._library:LibraryNotBuiltError")
def dump_replay(c, folder):
    """Replay a debug dump of the ORT custom op through the PyTorch op; report elementwise differences."""
    from ops.ort.dump_replay import print_replay, replay

    if disagree := print_replay(replay(folder)):
        raise Exit(f"dump-replay: {disagree} call(s) disagree with the PyTorch op - the first listed is where to look", code=1)


# --- namespace: one add_task line per task ---------------------------------------------
ns = Collection()
for _task in (build, toolchain, test, bench, compare, export, align, serve_bench, dump_replay):
    ns.add_task(_task)
ns.add_collection(Collection("env", env_check, env_lock))
ns.add_collection(Collection("docker", docker_build, docker_run))
