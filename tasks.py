"""fusedbench tasks (``invoke --list``). Each task calls one module function; no logic here.

Names: single tasks are flat (``build``, ``export``); a group of tasks is a
namespace (``bench``, ``bench.serve``, ``ort.dump-replay``, ``env.check``,
``docker.build``). Every numeric option has a string default and is converted
here by env/cli.py, so a bad value ends with a message naming the option; every
expected failure ends as ``<task as typed>: <message>`` (cli.fails_with).
"""

from __future__ import annotations

from invoke import Collection, Exit, task

from bench.experiments.defaults import AB_MEASURE, AB_SPREAD, OFFSET_SWEEP, THREAD_SWEEP
from bench.plan import warm_compiles
from bench.plan.options import BenchOptions
from env import cli
from env.cpu_use import CpuClock

DEFAULT = BenchOptions()  # the CLI's defaults are BenchOptions' own
# The verdict's defaults, as the options' strings (numeric options are checked by env/cli.py).
DEFAULT_THRESHOLD, DEFAULT_ALPHA = "0.03", "0.05"
# Separate reports made apart drift by more than the paired runs' 3 % (bench/history/regressions.py says why).
HISTORY_THRESHOLD = "0.10"

_BUILD_ERRORS = ("env.builder.commands:BuildError", "env.lock.lockfile:LockError")
_EXPORT_ERRORS = (ValueError, "ops.onnx.export:ExportError", "ops.onnx.checks:ExportCheckError")


@task(
    help={
        "aot": "ahead-of-time build with setup.py (delivery) instead of the JIT build (default)",
        "verbose": "also print the toolchain table and the CUDA kernels' ptxas resource table",
    }
)
@cli.fails_with("build", *_BUILD_ERRORS)
def build(c, aot=False, verbose=False):
    """Record the toolchain, then rebuild each library and check whose inputs changed (else: up to date)."""
    from env.builder.steps import build as run_build

    run_build("aot" if aot else "jit", verbose=verbose)


def _build_for_benchmarks(command: str = "bench") -> None:
    """The libraries a benchmark loads, rebuilt where stale: their kernel core the one version this CPU runs
    (env/builder/config.py says why); the CUDA compile check is left to `invoke build`. ``command``: the task, as
    its failure names it."""
    from env.builder.steps import build as run_build

    cli.fails_with(command, *_BUILD_ERRORS)(run_build)("jit", for_benchmarks=True)


@task
def toolchain(c):
    """Print the toolchain table of the last build (build/toolchain.json) and its CUDA resource table."""
    from env.builder.steps import print_toolchain

    if not print_toolchain():
        raise Exit("no toolchain record yet - run `invoke build` first")


@task(
    pre=[build],
    help={
        "k": "only tests matching this pytest -k expression",
        "args": "extra pytest arguments, quoted",
        "all": "run both tiers: the fast one and the slow one (tests marked slow)",
        "slow_only": "run the slow tier alone (CI runs it after the fast tier)",
        "workers": "pytest-xdist processes for the tests not marked timed, an integer >= 1 (default: 2 where 2 CPUs "
        "are usable); timed tests always run alone, after the others (docs/testing.md)",
    },
)
@cli.fails_with("test", ValueError)
def test(c, k="", args="", all_=False, slow_only=False, workers=""):
    """Build, then run the fast test tier (pytest -m "not slow"); --all adds the slow tier."""
    import shlex

    from env.tiers import passes, run_passes, tier_of

    steps = passes(tier_of(all_, slow_only), cli.integer("--workers", workers, minimum=1) if workers else None)
    status = run_passes(steps, lambda command: c.run(shlex.join(command), pty=False, warn=True).exited, k=k, extra=args)
    if status:
        raise Exit(code=status)


# The verdict's two options, described once for `bench --against` and `bench.compare`.
THRESHOLD_HELP = (
    "the practical threshold, a fraction in (0, 1) (default 0.03 = 3%): a row is a REGRESSION when its family-wise "
    "interval lies above 1 and its ratio above 1 + threshold"
)
HISTORY_THRESHOLD_HELP = (
    "the practical threshold, a fraction in (0, 1) (default 0.10 = 10%: separate reports made apart drift by a few "
    "per cent with no change of code): a row is a REGRESSION when its family-wise interval lies above 1 and its "
    "ratio above 1 + threshold"
)
ALPHA_HELP = (
    "the family-wise error rate over the rows a comparison counts, in (0, 1) (default 0.05): each row's interval "
    "has confidence 1 - alpha / rows (Bonferroni)"
)


@task(
    help={
        "baseline": "all (default), one name, or a comma list: unfused, fused, fused_add, native, compiled, liger, ort",
        "quick": "small grid for CI (about 2 minutes)",
        "warmup": f"untimed calls before each measurement, an integer >= 0 (default {DEFAULT.warmup}; fewer where they "
        "outlast the variant's time budget)",
        "threads": "torch and ONNX Runtime intra-op threads, an integer >= 1 (default: every core this process may "
        "use)",
        "out": "report folder (default <repo>/reports; FUSEDBENCH_REPORTS_DIR overrides the default)",
        "dtype": "each device's default (cpu: float32; cuda: float32,bfloat16), or a comma list of float32, float64, "
        "float16, bfloat16",
        "device": "all (default: every device present), cpu, cuda, or a comma list",
        "l2_flush": "CUDA: overwrite the L2 cache before each timed call of a case that fits in it (default: L2 warm)",
        "against": "a git ref: build it apart, measure it and this checkout interleaved in one run, compare "
        "(exit code as `bench.compare`; 4 when the A/B run cannot be set up)",
        "threshold": f"with --against: {THRESHOLD_HELP}",
        "allocator": "glibc's malloc policy: default (as a user's process has it; the headline and targets) or "
        "fixed-mmap (every output of 128 KiB or more a fresh mapping: the page-fault study)",
        "verbose": "print the full table too (it is always written to <report>.summary.txt)",
        "layouts": "where op inputs start in their pages: all (default: natural, as the allocator gives them, "
        "and the process's page offset), natural or page_offset",
        "precision": f"a row stops once the 95% interval of its median is within +- this share of it, in (0, 1) "
        f"(default {DEFAULT.precision}); its time budget is then a cap",
    },
)
@cli.fails_with("bench", ValueError)
def bench(
    c,
    baseline=DEFAULT.baseline,
    quick=False,
    warmup=str(DEFAULT.warmup),
    threads="",
    out="",
    dtype="",
    device=DEFAULT.device,
    l2_flush=False,
    against="",
    threshold=DEFAULT_THRESHOLD,
    allocator=DEFAULT.allocator,
    verbose=False,
    precision=str(DEFAULT.precision),
    layouts=DEFAULT.layouts,
):
    """Build the libraries it loads, benchmark the baselines; write reports/<UTC>-<host>.csv (+ samples, plot)."""
    # Options are checked before bench.run is imported: that import loads the built library.
    warmup_calls = cli.integer("--warmup", warmup, minimum=0)
    thread_count = cli.integer("--threads", threads, minimum=1) if threads else None
    threshold_fraction = cli.fraction("--threshold", threshold)
    options = BenchOptions(
        baseline=baseline,
        quick=quick,
        warmup=warmup_calls,
        threads=thread_count,
        out_dir=out or None,
        dtype=dtype,
        device=device,
        l2_flush=l2_flush,
        allocator=allocator,
        precision=cli.fraction("--precision", precision),
        layouts=layouts,
    )
    # The compiled baseline's graphs compile beside the build, on the cores its compiles leave idle. An A/B run
    # builds and caches in its own folders.
    build_clock = CpuClock()
    warming = None if against else warm_compiles.start(options)
    try:
        _build_for_benchmarks()
    except BaseException:
        warm_compiles.stop(warming)
        raise
    from bench.run import main

    if against:
        from bench.ab import driver as ab

        if code := ab.main(against, options, threshold=threshold_fraction):
            raise Exit(code=code)
        return
    import tempfile
    from pathlib import Path

    from bench.plan import warm_exports
    from bench.processes.workdirs import run_workdir

    with tempfile.TemporaryDirectory(prefix="fusedbench-setup-") as setup:
        # The ORT baseline's exports, made here on the core Inductor's warm-up leaves idle, rather than in the first
        # process; then the warm-up's end (nothing may compile beside a timed call).
        try:
            exported = warm_exports.export_ahead(options, run_workdir(Path(setup)))
        finally:
            finished = warm_compiles.finish(warming)
        for line in (exported, finished, build_clock.read().line("build step (libraries, exports, Inductor's graphs)")):
            if line:
                print(line)
        if code := main(options, verbose=verbose, setup_cache=Path(setup)):
            raise Exit("bench: some baselines failed (listed above) - their rows are not in the report", code=code)


@task(
    help={
        "base": "the earlier report CSV",
        "new": "the later report CSV",
        "threshold": THRESHOLD_HELP,
        "alpha": ALPHA_HELP,
        "allow_different_machines": "compare reports from different machines anyway (printed under a warning; "
        "without it they are refused with exit code 3)",
        "force": "compare a report of an earlier schema, which lacks the hardware facts that tell machines apart "
        "(printed under a warning; without it such a report is refused with exit code 3)",
    },
)
def compare(
    c, base, new, threshold=DEFAULT_THRESHOLD, alpha=DEFAULT_ALPHA, allow_different_machines=False, force=False
):
    """Compare two bench reports row by row; exit 1 on a regression, 3 if the machines differ or cannot be told."""
    # Options are checked before the comparison's modules (pandas, scipy) are imported.
    threshold, alpha = cli.fraction("--threshold", threshold), cli.fraction("--alpha", alpha)
    from bench.stats.compare import main

    code = main(
        base, new, threshold=threshold, alpha=alpha, allow_different_machines=allow_different_machines, force=force
    )
    if code:
        raise Exit(code=code)


@task(
    pre=[build],
    help={
        "route": "all (default), one of standard, opset23, custom, or a comma list",
        "out": "output folder (default <repo>/build/onnx)",
        "torchscript": "use the deprecated TorchScript exporter (dynamo=False) instead of the dynamo one",
        "impl": "the model's norms: fused (default) or fused_add (residual adds folded into the norms; dynamo only)",
    },
)
@cli.fails_with("export", *_EXPORT_ERRORS)
def export(c, route="all", out="", torchscript=False, impl="fused"):
    """Export the sequence model to ONNX by each route; check each file and print its graph summary."""
    from ops.onnx.export import export_routes

    export_routes(route, out or None, torchscript=torchscript, impl=impl)


@task(
    pre=[build],
    help={
        "route": "all (default), one of standard, opset23, custom, or a comma list",
        "out": "folder for the saved inputs and exported files (default <repo>/build/alignment)",
        "layers": "also compare each block's output (extra graph outputs) and name the first that diverges",
        "optimization": "ORT graph optimisation: all (default), extended, basic, disable",
        "dtype": "op-level dtypes, comma list of float32, float16, float64 (default float32,float16)",
        "impl": "the model's norms: fused (default) or fused_add (residual adds folded into the norms)",
    },
)
@cli.fails_with(
    "align",
    *_EXPORT_ERRORS,
    "ops.alignment.check:AlignmentError",
    "ops._library:LibraryNotBuiltError",
    "ops.ort.session:CustomOpsNotRegisteredError",
)
def align(c, route="all", out="", layers=False, optimization="all", dtype="float32,float16", impl="fused"):
    """Align PyTorch and ONNX Runtime per route (op alone and model); fail past the dtype's tolerance."""
    from ops.alignment.check import check_alignment

    check_alignment(route, out or None, layers=layers, optimization=optimization, dtypes=dtype.split(","), impl=impl)


# --- env: the environment against its lock ------------------------------------------


@task(name="check")
@cli.fails_with("env.check", "env.lock.lockfile:LockError")
def env_check(c):
    """Compare the installed packages with requirements/<variant>.txt; fail listing every drift."""
    from env.lock.drift import check

    print(check())


@task(
    name="lock", help={"upgrade": "move every pin to the newest version requirements/*.in allow (default: keep them)"}
)
@cli.fails_with("env.lock", "env.lock.lockfile:LockError")
def env_lock(c, upgrade=False):
    """Compile requirements/{cpu,cuda}.in into hashed requirements/{cpu,cuda}.txt (uv pip compile)."""
    from env.lock.compile import regenerate

    print("\n".join(compiled.summary() for compiled in regenerate(upgrade=upgrade)))


# --- docker ----------------------------------------------------------------------------


@task(
    name="build",
    help={
        "tag": "image tag (default fusedbench:local)",
        "variant": "cuda (default: CUDA base, torch's CUDA build) or cpu (Python slim base, torch's CPU build)",
        "max_jobs": "parallel compile jobs in the image build, an integer >= 1 (default: the Dockerfile's 4)",
        "base_digest": "sha256:... of the variant's base image, instead of the Dockerfile's",
        "torch_find_links": "cpu variant: where pip finds torch's CPU wheel, a URL (default: PyTorch's CPU index) "
        "or a folder of wheels (buildah only: mounted into the build)",
        "local_base": "buildah only: take the base image from local storage (e.g. a stand-in), never pull",
    },
)
@cli.fails_with("docker.build", "env.image:DockerError")
def docker_build(c, tag="", variant="cuda", max_jobs="", base_digest="", torch_find_links="", local_base=False):
    """Build the image (docker, or buildah without a daemon): pinned base, env from the lock, builds baked in."""
    from env import image as docker

    jobs = cli.integer("--max-jobs", max_jobs, minimum=1) if max_jobs else None
    docker.check_variant(variant)  # a bad option is named before the engine is looked for
    _docker(
        docker.build_command(
            tag or docker.DEFAULT_TAG,
            jobs,
            base_digest or None,
            variant,
            torch_find_links or None,
            docker.choose_engine(),
            local_base,
        )
    )


@task(
    name="run",
    help={
        "tag": "image tag (default fusedbench:local)",
        "reports": "host folder mounted as the image's reports folder (default <repo>/reports)",
        "gpus": "pass --gpus all (default: when nvidia-smi lists a GPU here)",
    },
)
@cli.fails_with("docker.run", "env.image:DockerError")
def docker_run(c, tag="", reports="", gpus=None):
    """Run an invoke task in the image (docker, or podman without a daemon): `invoke docker.run -- bench`."""
    import shlex
    from pathlib import Path

    from env import image as docker

    _docker(
        docker.run_command(
            shlex.split(c.remainder),
            tag or docker.DEFAULT_TAG,
            Path(reports) if reports else None,
            gpus,
            engine=docker.choose_engine(),
        )
    )


def _docker(command: list[str]) -> None:
    from env import image as docker

    if code := docker.run(command).returncode:
        raise Exit(f"docker: `{' '.join(command[:2])}` failed (exit {code}) - see its output above", code=code)


# --- bench.serve: the serving benchmark ---------------------------------------------------


@task(
    name="targets",
    help={"reports": "report CSVs of one machine, comma-separated (a 1-thread and a 2-thread run, 16-bit runs, ...)"},
)
def bench_targets(c, reports):
    """Judge the declared targets over several reports together; exit 1 if one is missed, 2 for unusable reports."""
    from bench.stats.judge import main

    if code := main([path.strip() for path in reports.split(",") if path.strip()]):
        raise Exit(code=code)


@task(
    name="ab-measure",
    help={
        "aa": f"A/A runs (the same commit built twice), an integer >= 0 (default {AB_MEASURE['aa']})",
        "slowdowns": "injected slowdowns of the fused op in whole percent, a comma list "
        f"(default {AB_MEASURE['slowdowns']})",
        "runs": f"runs per slowdown, an integer >= 0 (default {AB_MEASURE['runs']})",
        "out": "results folder (default <repo>/reports/ab_measure)",
        "reuse": "resume in the existing workspace (its commit and builds)",
        "rejudge": "judge the recorded runs again with this checkout's compare (writes rejudged.md); runs nothing",
    },
)
@cli.fails_with("bench.ab-measure", ValueError)
def bench_ab_measure(
    c,
    aa=str(AB_MEASURE["aa"]),
    slowdowns=AB_MEASURE["slowdowns"],
    runs=str(AB_MEASURE["runs"]),
    out="",
    reuse=False,
    rejudge=False,
):
    """How often `bench --quick --against` cries wolf on identical code, and how often it catches a slowdown."""
    argv = ["--aa", str(cli.integer("--aa", aa, minimum=0)), "--runs", str(cli.integer("--runs", runs, minimum=0))]
    argv += ["--slowdowns", slowdowns, *(["--out", out] if out else []), *(["--reuse"] if reuse else [])]
    _build_for_benchmarks("bench.ab-measure")
    from bench.experiments.ab_measure import main

    main(argv + (["--rejudge"] if rejudge else []))


@task(
    name="ab-spread",
    help={
        "rounds": f"rounds of the quick grid in each pair of workers, an integer >= 2 (default {AB_SPREAD['rounds']})",
        "modes": "how the two workers share the CPU, a comma list of sequential, turns-running, turns-stopped "
        "(default: all three)",
        "out": "results folder (default <repo>/reports/ab_spread)",
    },
)
@cli.fails_with("bench.ab-spread", ValueError)
def bench_ab_spread(c, rounds=str(AB_SPREAD["rounds"]), modes="", out=""):
    """How far apart two processes of this build read each row: jobs one after the other, or in turns."""
    argv = ["--rounds", str(cli.integer("--rounds", rounds, minimum=2))]
    argv += [*(["--modes", modes] if modes else []), *(["--out", out] if out else [])]
    _build_for_benchmarks("bench.ab-spread")
    from bench.experiments.ab_spread import main

    main(argv)


@task(
    name="offset-sweep",
    help={
        "shape": "the op shape, like 8x128x1024 (default: the cache-resident one)",
        "dtype": f"float32, float64, float16, bfloat16, or a comma list (default {OFFSET_SWEEP['dtype']})",
        "distances": "bytes from x's start to y's, modulo 4096, a comma list (default: 0 to 4032, dense near 0)",
        "threads": f"torch intra-op threads, an integer >= 1 (default {OFFSET_SWEEP['threads']})",
        "reps": f"repetitions, each timing every distance once, an integer >= 1 (default {OFFSET_SWEEP['reps']})",
        "out": "results folder (default <repo>/reports/offset_sweep)",
    },
)
@cli.fails_with("bench.offset-sweep", ValueError)
def bench_offset_sweep(
    c,
    shape="",
    dtype=OFFSET_SWEEP["dtype"],
    distances="",
    threads=str(OFFSET_SWEEP["threads"]),
    reps=str(OFFSET_SWEEP["reps"]),
    out="",
):
    """The op's share of a copy as its output's start moves against its input's within a page."""
    argv = ["--dtype", dtype, "--threads", str(cli.integer("--threads", threads, minimum=1))]
    argv += ["--reps", str(cli.integer("--reps", reps, minimum=1))]
    argv += [*(["--shape", shape] if shape else []), *(["--distances", distances] if distances else [])]
    _build_for_benchmarks("bench.offset-sweep")
    from bench.experiments.offset_sweep import main

    main(argv + (["--out", out] if out else []))


@task(
    name="thread-sweep",
    help={
        "shapes": "op shapes, a comma list like 1x8x512,8x128x1024 (default: the report's and the task threshold's)",
        "threads": "intra-op thread counts, a comma list whose first is the reference "
        f"(default {THREAD_SWEEP['threads']})",
        "reps": f"repetitions, each timing every count once, an integer >= 1 (default {THREAD_SWEEP['reps']})",
        "out": "results folder (default <repo>/reports/thread_sweep)",
    },
)
@cli.fails_with("bench.thread-sweep", ValueError)
def bench_thread_sweep(c, shapes="", threads=THREAD_SWEEP["threads"], reps=str(THREAD_SWEEP["reps"]), out=""):
    """The op at several thread counts on the same buffers in one process: time against the first count's."""
    argv = ["--threads", threads, "--reps", str(cli.integer("--reps", reps, minimum=1))]
    _build_for_benchmarks("bench.thread-sweep")
    from bench.experiments.thread_sweep import main

    main(argv + (["--shapes", shapes] if shapes else []) + (["--out", out] if out else []))


@task(
    name="serve",
    help={
        "quick": "CI form: 0.25 s per configuration in one round (default 1.5 s over 3 rounds)",
        "duration": "seconds of load per configuration, a number > 0 (overrides --quick's)",
        "out": "report folder (default <repo>/reports; FUSEDBENCH_REPORTS_DIR overrides the default)",
        "models": "folder for the exported model files, reused by later runs of the same model (default: temporary)",
        "impl": "the model's norms: fused (default), or fused_add (each block's residual add folded into the op)",
    },
)
@cli.fails_with(
    "bench.serve", ValueError, *_EXPORT_ERRORS, "ops._library:LibraryNotBuiltError", "ops.ort.pool:SessionCreationError"
)
def bench_serve(c, quick=False, duration="", out="", models="", impl="fused"):
    """Serve the exported model to concurrent clients: req/s, P50-P99, mismatches; sessions x threads x clients."""
    from pathlib import Path

    seconds = cli.positive("--duration", duration, " (seconds)") if duration else None  # before the library loads
    _build_for_benchmarks("bench.serve")
    from bench.serve.models import ServedModel
    from bench.serve.run import ServeOptions, main

    options = ServeOptions(
        quick=quick,
        duration_s=seconds,
        out_dir=Path(out) if out else None,
        models_dir=Path(models) if models else None,
        model=ServedModel(impl=impl),
    )
    if code := main(options):
        raise Exit("bench.serve: interrupted, or a configuration failed or mismatched (listed above)", code=code)


# --- ort: the ONNX Runtime custom-op library's tools ---------------------------------------


@task(
    name="dump-replay",
    pre=[build],
    help={"folder": "the dump folder (session config myops.fused_norm.dump_dir / FUSEDBENCH_ORT_DUMP_DIR)"},
)
@cli.fails_with("ort.dump-replay", "ops.ort.dump_replay:DumpError", "ops._library:LibraryNotBuiltError")
def ort_dump_replay(c, folder):
    """Replay a debug dump of the ORT custom op through the PyTorch op; report elementwise differences."""
    from ops.ort.dump_replay import print_replay, replay

    if disagree := print_replay(replay(folder)):
        raise Exit(
            f"ort.dump-replay: {disagree} call(s) disagree with the PyTorch op - the first listed is where to look",
            code=1,
        )


@task(name="client", help={"force": "rebuild even when the binary is newer than its source"})
@cli.fails_with("ort.client", "env.builder.commands:BuildError", "env.builder.ort_headers:OrtHeadersError")
def ort_client(c, force=False):
    """Build the C++ example client (csrc/ort/examples/ort_client.cc) and print the binary's path."""
    from env.builder.ort_client import build_ort_client

    print(build_ort_client(force=force))


# --- checks of the tree and of a GPU machine ---------------------------------------------


@task(help={"fix": "rewrite the files instead (ruff check --fix, ruff format, clang-format -i)"})
@cli.fails_with("lint", "env.lint:LintError")
def lint(c, fix=False):
    """ruff check, ruff format --check and clang-format --dry-run over the tracked files; fail on any finding."""
    from env.lint import lint as run_lint

    if failed := run_lint(fix=fix):
        raise Exit(f"lint: {', '.join(failed)} failed - `invoke lint --fix` rewrites what the tools can fix", code=1)


@task(help={"out": "report folder (default <repo>/build/cuda)"})
@cli.fails_with("cuda-check", *_BUILD_ERRORS)
def cuda_check(c, out=""):
    """Compile the CUDA kernels for every pinned architecture (no GPU needed); print ptxas's resource table."""
    from pathlib import Path

    from env.builder.cuda import compile_check
    from env.builder.ptxas import format_table

    result = compile_check(Path(out) if out else None)
    print(format_table(result.report))
    print(f"report: {result.report_path}\nlog: {result.log_path}")


@task(
    name="gpu-check",
    help={
        "out": "folder for everything worth keeping (default $OUT, else <repo>/build/gpu-check)",
        "dry_run": "the path a machine without a GPU can take (CPU quick grid, GPU tests skip)",
        "baseline": "the benchmark's --baseline (default all)",
        "quick": "the benchmark's quick grid",
        "skip_build": "use the libraries of the last build",
        "no_tests": "skip the tests and the sanitizer runs",
        "no_bench": "skip the benchmark",
        "ort_headers": "ONNX Runtime include/ folder, where npm cannot fetch the pinned headers",
        "test_timeout": "limit for each pytest run in seconds, an integer >= 1 (default 900)",
        "test_jobs": "processes for the GPU tests (pytest-xdist), an integer >= 1 (default 1)",
        "time_limit": "limit for the whole check in seconds (default none): later steps get the time left",
    },
)
def gpu_check(
    c,
    out="",
    dry_run=False,
    baseline="all",
    quick=False,
    skip_build=False,
    no_tests=False,
    no_bench=False,
    ort_headers="",
    test_timeout="900",
    test_jobs="1",
    time_limit="",
):
    """On a CUDA machine: build, GPU tests (+ compute-sanitizer), `bench --device cuda`; every file in one folder."""
    from pathlib import Path

    from bench.gpu_check import GpuCheckOptions, main

    options = GpuCheckOptions(
        out=Path(out) if out else None,
        dry_run=dry_run,
        baseline=baseline,
        quick=quick,
        skip_build=skip_build,
        no_tests=no_tests,
        no_bench=no_bench,
        ort_headers=Path(ort_headers) if ort_headers else None,
        test_timeout_s=cli.integer("--test-timeout", test_timeout, minimum=1),
        test_jobs=cli.integer("--test-jobs", test_jobs, minimum=1),
        time_limit_s=cli.positive("--time-limit", time_limit, " seconds") if time_limit else None,
    )
    if main(options):
        raise Exit("gpu-check: a step failed (listed above; <out>/summary.json has the details)", code=1)


@task(
    name="gate",
    help={
        "threshold": THRESHOLD_HELP,
        "out": "report folder (default <repo>/reports; FUSEDBENCH_REPORTS_DIR overrides the default)",
    },
)
@cli.fails_with("bench.gate", ValueError)
def bench_gate(c, threshold=DEFAULT_THRESHOLD, out=""):
    """CI's gate: the quick A/B run against the last landed commit; exit 1 on a regression no commit accepts."""
    threshold_fraction = cli.fraction("--threshold", threshold)
    _build_for_benchmarks("bench.gate")  # this checkout's side, built as the base's side is (bench/ab/scratch.py)
    from bench.ab.gate import main

    if code := main(threshold_fraction, out or None):
        raise Exit(code=code)


@task(name="set-base", help={"sha": "the last landed commit (default: HEAD)"})
def bench_set_base(c, sha="HEAD"):
    """Write .ci/base, the commit CI's gate measures against when the clone has no fusedbench/landed tag."""
    from bench.ab.gate import GateError, write_base

    try:
        print(f"wrote {write_base(sha)}; commit it")
    except GateError as error:
        raise Exit(f"bench.set-base: {error}", code=2) from None


@task(pre=[build])
@cli.fails_with("dist", *_BUILD_ERRORS)
def dist(c):
    """Build the wheel (torch op + ORT library) and the C++ package for ORT hosts into dist/."""
    from env.dist import dist as build_dist

    print(build_dist())


# --- bench.history: every report in one store, judged over commits and machines ---------------


@task(
    name="history",
    iterable=["from_", "advisory"],
    help={
        "from_": "another folder of reports to ingest besides <repo>/reports (repeatable: CI artifacts of runners)",
        "advisory": "reports under this folder are judged and shown but never fail --check (repeatable: CI's own run)",
        "db": "the store (default <repo>/build/history.duckdb; rebuildable, never committed)",
        "check": "exit 1 when the latest report of a machine and run options holds a REGRESSION",
        "site": "write the static dashboard into this folder (open DIR/index.html)",
        "export_parquet": "write the tables as Parquet into this folder, partitioned by machine",
        "labels": "machine labels CSV (folder,label,evidence; default <repo>/reports/history/machine_labels.csv)",
        "threshold": HISTORY_THRESHOLD_HELP,
        "alpha": ALPHA_HELP,
    },
)
def bench_history(
    c,
    from_=None,
    advisory=None,
    db="",
    check=False,
    site="",
    export_parquet="",
    labels="",
    threshold=HISTORY_THRESHOLD,
    alpha=DEFAULT_ALPHA,
):
    """Ingest every report into one store; judge each against its machine's previous; --site, --check."""
    from pathlib import Path

    threshold, alpha = cli.fraction("--threshold", threshold), cli.fraction("--alpha", alpha)
    from bench.history.cli import HistoryOptions, main
    from env.paths import reports_dir

    options = HistoryOptions(
        roots=[reports_dir(), *(Path(f) for f in from_ or [])],
        db=Path(db) if db else None,
        check=check,
        advisory=[Path(f) for f in advisory or []],
        site=Path(site) if site else None,
        export_parquet=Path(export_parquet) if export_parquet else None,
        threshold=threshold,
        alpha=alpha,
        **({"labels": Path(labels)} if labels else {}),
    )
    if code := main(options):
        raise Exit(code=code)


# --- namespace: flat single tasks, one collection per group ---------------------------
ns = Collection()
for _task in (build, toolchain, test, export, align, lint, cuda_check, gpu_check, dist):
    ns.add_task(_task)
_bench = Collection(
    "bench",
    compare,
    bench_targets,
    bench_serve,
    bench_ab_measure,
    bench_ab_spread,
    bench_offset_sweep,
    bench_thread_sweep,
    bench_gate,
    bench_set_base,
    bench_history,
)
_bench.add_task(bench, name="run", default=True)  # `invoke bench` runs it
ns.add_collection(_bench)
ns.add_collection(Collection("ort", ort_dump_replay, ort_client))
ns.add_collection(Collection("env", env_check, env_lock))
ns.add_collection(Collection("docker", docker_build, docker_run))
