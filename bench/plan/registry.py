"""The one place baselines are registered and selected.

A baseline is a small object with a ``name``, the ``workloads`` it runs
("op", "model"), the ``devices`` it runs on ("cpu", "cuda"), its ``order`` in
the report (lower first; ties by name) and ``variants(case)``: the ways it can
be called on that case. Each variant's ``prepare()`` does the one-off work
(compile, export, session) and returns the call that is verified and then timed.

Adding a baseline is one file: a module in bench/plan/baselines/ that decorates its
class with ``@register`` (or passes instances to ``register``, for a class
that serves several baselines); :func:`all_baselines` imports every module there.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable, Collection
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

from bench.plan.workloads import Case

TimedCall = Callable[[], Any]


class Unsupported(Exception):
    """This baseline cannot run this case by design (e.g. a dtype the runtime lacks); listed as skipped."""


@dataclass(frozen=True)
class Prepared:
    """What ``prepare`` may return instead of a bare call, when it learns more while preparing."""

    call: TimedCall
    note: str = ""
    reused_setup_s: float = 0.0  # one-off cost paid earlier in the run and reused here (e.g. a cached export)
    calls: int = 1  # calls of the op one timed call makes (a CUDA graph replaying several): time is per op call
    timer: str | None = None  # "perf_counter" forces the host clock on a GPU (work that synchronises itself)


@dataclass(frozen=True)
class Variant:
    name: str
    prepare: Callable[[], TimedCall | Prepared]  # one-off setup outside the timed loop; returns the call to time
    note: str = ""


class Baseline(Protocol):
    name: str
    workloads: frozenset[str]
    devices: frozenset[str]
    order: int  # position in the report: lower first (the speed-up reference, unfused, is 0)

    def variants(self, case: Case) -> list[Variant]: ...


_REGISTRY: dict[str, Baseline] = {}
T = TypeVar("T")


def register(baseline: T) -> T:
    """Register a baseline under its ``name``: a class (instantiated with no arguments; usable as a decorator)
    or an instance."""
    instance = baseline() if isinstance(baseline, type) else baseline
    for attribute in ("name", "workloads", "devices", "order", "variants"):
        if not hasattr(instance, attribute):
            raise TypeError(f"baseline {instance!r} has no {attribute!r}: see bench.plan.registry.Baseline")
    known = _REGISTRY.get(instance.name)
    if known is not None and type(known) is not type(instance):
        raise ValueError(
            f"baseline name {instance.name!r} registered twice ({type(known).__name__}, {type(instance).__name__})"
        )
    _REGISTRY[instance.name] = instance
    return baseline


def _import_baselines(only: Collection[str] | None = None) -> None:
    """Import the modules of bench/plan/baselines/ (``only``: those of these names, where they exist)."""
    import bench.plan.baselines as package

    for module in pkgutil.iter_modules(package.__path__):
        if only is None or module.name in only:
            importlib.import_module(f"{package.__name__}.{module.name}")


def all_baselines() -> dict[str, Baseline]:
    """Every registered baseline (imports bench/plan/baselines/*), by each one's declared order, then name."""
    _import_baselines()
    return dict(sorted(_REGISTRY.items(), key=lambda kv: (kv[1].order, kv[0])))


def select(spec: str) -> list[Baseline]:
    """``all``, one name or a comma list -> baselines (clear error for unknown names)."""
    names = [s.strip() for s in spec.split(",") if s.strip()]
    if names and names != ["all"]:
        # Most baselines live in the module of their name: importing just those spares a run of a few the
        # others' imports (the ORT baseline's exporter takes a second, in every process of an A/B run).
        _import_baselines(set(names))
        if all(name in _REGISTRY for name in names):
            return [_REGISTRY[name] for name in dict.fromkeys(names)]
    available = all_baselines()
    if not names:
        raise ValueError(f"--baseline must be 'all' or a comma list of {list(available)}, got {spec!r}")
    if names == ["all"]:
        return list(available.values())
    unknown = [n for n in names if n not in available]
    if unknown:
        raise ValueError(f"unknown baseline(s) {unknown}: choose from {list(available)} or 'all'")
    return [available[n] for n in dict.fromkeys(names)]
