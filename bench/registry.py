"""The one place baselines are registered and selected.

A baseline is a small object with a ``name``, the ``workloads`` it runs
("op", "model") and ``variants(case)``: the ways it can be called on that case.
Each variant's ``prepare()`` does the one-off work (compile, export, session)
and returns the call that is verified and then timed.

Adding a baseline is one file: a module in bench/baselines/ whose class is
decorated with ``@register``; :func:`all_baselines` imports every module there.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from bench.workloads import Case

TimedCall = Callable[[], Any]


class Unsupported(Exception):
    """This baseline cannot run this case by design (e.g. a dtype the runtime lacks); listed as skipped."""


@dataclass(frozen=True)
class Prepared:
    """What ``prepare`` may return instead of a bare call, when it learns more while preparing."""

    call: TimedCall
    note: str = ""
    reused_setup_s: float = 0.0  # one-off cost paid earlier in the run and reused here (e.g. a cached export)


@dataclass(frozen=True)
class Variant:
    name: str
    prepare: Callable[[], TimedCall | Prepared]  # one-off setup outside the timed loop; returns the call to time
    note: str = ""


class Baseline(Protocol):
    name: str
    workloads: frozenset[str]

    def variants(self, case: Case) -> list[Variant]: ...


_REGISTRY: dict[str, Baseline] = {}


def register(cls: type) -> type:
    """Class decorator: instantiate and register a baseline under its ``name``."""
    instance = cls()
    if instance.name in _REGISTRY and type(_REGISTRY[instance.name]) is not cls:
        raise ValueError(f"baseline name {instance.name!r} registered twice ({type(_REGISTRY[instance.name]).__name__}, {cls.__name__})")
    _REGISTRY[instance.name] = instance
    return cls


def all_baselines() -> dict[str, Baseline]:
    """Every registered baseline, in registration order (imports bench/baselines/*)."""
    import bench.baselines as package

    for module in sorted(pkgutil.iter_modules(package.__path__), key=lambda m: m.name):
        importlib.import_module(f"{package.__name__}.{module.name}")
    order = ("unfused", "fused", "native", "compiled", "ort")  # unfused first: the speed-up reference
    return dict(sorted(_REGISTRY.items(), key=lambda kv: order.index(kv[0]) if kv[0] in order else len(order)))


def select(spec: str) -> list[Baseline]:
    """``all``, one name or a comma list -> baselines (clear error for unknown names)."""
    available = all_baselines()
    names = [s.strip() for s in spec.split(",") if s.strip()]
    if not names:
        raise ValueError(f"--baseline must be 'all' or a comma list of {list(available)}, got {spec!r}")
    if names == ["all"]:
        return list(available.values())
    unknown = [n for n in names if n not in available]
    if unknown:
        raise ValueError(f"unknown baseline(s) {unknown}: choose from {list(available)} or 'all'")
    return [available[n] for n in dict.fromkeys(names)]
