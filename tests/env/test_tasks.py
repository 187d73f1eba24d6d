"""The invoke CLI: renamed tasks, numeric options checked with a clear message, expected errors without a traceback."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from invoke import Context, Exit

import tasks
from env import cli
from env.paths import REPO_ROOT


def invoke(*args: str) -> subprocess.CompletedProcess:
    # The suite's kernel-version choice stays (tests/conftest.py): a bench task here builds first, in this checkout.
    env = {k: v for k, v in os.environ.items() if not k.startswith("FUSEDBENCH_") or k == "FUSEDBENCH_CORE_VERSIONS"}
    return subprocess.run(
        [sys.executable, "-m", "invoke", *args], cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=300
    )


def test_task_names_follow_one_scheme():
    # Single tasks flat; each group of tasks a namespace (`bench` runs bench.run).
    listed = set(invoke("--complete").stdout.split())
    assert listed == {
        "align",
        "build",
        "dist",
        "cuda-check",
        "export",
        "gpu-check",
        "lint",
        "test",
        "toolchain",
        "bench",
        "bench.run",
        "bench.ab-measure",
        "bench.ab-spread",
        "bench.compare",
        "bench.gate",
        "bench.set-base",
        "bench.history",
        "bench.offset-sweep",
        "bench.thread-sweep",
        "bench.targets",
        "bench.serve",
        "ort.client",
        "ort.dump-replay",
        "env.check",
        "env.lock",
        "docker.build",
        "docker.run",
    }


@pytest.mark.parametrize(
    "args, option",
    [
        (("bench.compare", "a.csv", "b.csv", "--threshold", "0"), "--threshold"),
        (("bench.compare", "a.csv", "b.csv", "--threshold", "1"), "--threshold"),
        (("bench.compare", "a.csv", "b.csv", "--threshold", "-0.1"), "--threshold"),
        (("bench.compare", "a.csv", "b.csv", "--threshold", "ten"), "--threshold"),
        (("bench.compare", "a.csv", "b.csv", "--alpha", "1.5"), "--alpha"),
        (("docker.build", "--max-jobs", "0"), "--max-jobs"),
        (("gpu-check", "--test-timeout", "0"), "--test-timeout"),
        (("gpu-check", "--test-jobs", "0"), "--test-jobs"),
        (("gpu-check", "--time-limit", "-5"), "--time-limit"),
    ],
)
def test_bad_numeric_option_names_the_option(args, option):
    done = invoke(*args)
    assert done.returncode != 0
    assert option in done.stderr, done.stderr
    assert "Traceback" not in done.stdout + done.stderr, done.stderr


@pytest.mark.parametrize(
    "options, option",
    [
        ({"threads": "-3"}, "--threads"),
        ({"threads": "two"}, "--threads"),
        ({"warmup": "-1"}, "--warmup"),
        ({"workers": "0"}, "--workers"),
        ({"duration": "0"}, "--duration"),
        ({"duration": "inf"}, "--duration"),
    ],
)
def test_bad_numeric_option_of_a_building_task_names_the_option(options, option):
    # The task itself, not its command line: there the build runs first (a
    # pre-task, seconds even when up to date) before the option is read. The
    # command line's handling of Exit is the same for every task (above).
    task = {"--workers": tasks.test, "--duration": tasks.bench_serve}.get(option, tasks.bench)
    with pytest.raises(Exit, match=f"^{option} must be "):
        task(Context(), **options)


def test_an_expected_module_error_ends_without_traceback():
    # env.image raises DockerError, which docker.build lists: one line, its name first, no traceback.
    done = invoke("docker.build", "--variant", "nope")
    assert done.returncode != 0
    assert done.stderr.startswith("docker.build: --variant must be one of"), done.stderr
    assert "Traceback" not in done.stdout + done.stderr


@pytest.mark.slow  # the bench task builds first (its up-to-date checks import torch): about 10 s
def test_a_bench_option_error_ends_without_traceback_after_the_build():
    done = invoke("bench", "--dtype", "int8", "--baseline", "fused")
    assert done.returncode != 0
    assert done.stderr.startswith("bench: ") and "--dtype" in done.stderr, done.stderr
    assert "Traceback" not in done.stdout + done.stderr


def test_option_converters_accept_good_values():
    assert cli.integer("--warmup", "0", minimum=0) == 0
    assert cli.integer("--threads", " 12 ", minimum=1) == 12
    assert cli.fraction("--threshold", "0.1") == pytest.approx(0.1)
    assert cli.positive("--duration", " 0.25 ") == pytest.approx(0.25)
    for bad in ("nan", "inf", "", "1e-400x"):
        with pytest.raises(Exit, match="--alpha"):
            cli.fraction("--alpha", bad)
        with pytest.raises(Exit, match="--duration"):
            cli.positive("--duration", bad)


def test_fails_with_turns_listed_errors_into_exit_and_keeps_bugs_loud():
    @cli.fails_with("env.check", ValueError, "env.builder.commands:BuildError", "no.such.module:Error")
    def env_check(c, fail):
        raise fail

    from env.builder.commands import BuildError

    with pytest.raises(Exit) as stopped:
        env_check(None, ValueError("--dtype must be float32 - pick one"))
    assert stopped.value.message == "env.check: --dtype must be float32 - pick one"
    with pytest.raises(Exit, match="^env.check: link failed"):
        env_check(None, BuildError("link failed"))
    with pytest.raises(KeyError):  # not listed: a bug, its traceback stays
        env_check(None, KeyError("x"))


def test_the_bench_task_exports_beside_the_graphs_warm_up_and_hands_the_exports_to_the_run(monkeypatch, capsys):
    import bench.run
    from bench.plan import warm_compiles, warm_exports
    from bench.processes.workdirs import run_workdir

    calls = []
    monkeypatch.setattr(tasks, "_build_for_benchmarks", lambda *args: calls.append("build"))
    monkeypatch.setattr(warm_compiles, "start", lambda options: calls.append("warm-up starts") or "warming")
    monkeypatch.setattr(warm_compiles, "finish", lambda warming: calls.append(f"{warming} ends") or "graphs line")

    def export_ahead(options, workdir):
        assert workdir.parent.parent.is_dir()  # the run's setup folder exists while it is filled
        calls.append(("export", workdir))
        return "exports line"

    def main(options, verbose, setup_cache):
        assert setup_cache.is_dir()
        calls.append(("run", setup_cache))
        return 0

    monkeypatch.setattr(warm_exports, "export_ahead", export_ahead)
    monkeypatch.setattr(bench.run, "main", main)
    tasks.bench(Context())
    (_, workdir), (_, setup) = calls[2], calls[4]
    # The exports run after the build, while the graphs still compile, and before the run, into its workdir.
    assert calls == ["warm-up starts", "build", ("export", workdir), "warming ends", ("run", setup)]
    assert workdir == run_workdir(setup)
    assert not setup.exists()  # removed with the run
    printed = capsys.readouterr().out.splitlines()
    assert printed[:2] == ["exports line", "graphs line"] and len(printed) == 3
    # The step's CPU reading (tests/env/test_cpu_use.py checks its numbers) closes the step.
    assert (
        printed[2].startswith("build step (libraries, exports, Inductor's graphs): ") and "CPU-s of the" in printed[2]
    )
