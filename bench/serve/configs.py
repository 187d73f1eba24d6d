"""What the serving benchmark runs: the comparison at one setting, and the sessions x threads x clients sweep.

The comparison (sessions 1, intra-op threads = half the physical cores, 2
clients) holds every way of serving the model against each other: torch eager
(no_grad) and inference_mode, ORT plain ``session.run`` and ORT through the
pooled IO binding, per export route.

The sweep serves the custom route through the pool on a small grid: sessions x
threads from half the physical cores up to twice their number (powers of two),
each with a number of clients that keeps every session busy and one with twice
that. The products above the core count are there on purpose: they show what
oversubscription costs on this machine.
"""

from __future__ import annotations

from dataclasses import dataclass

from ops.onnx.routes import ROUTES

COMPARISON_CLIENTS = 2
SWEEP_ROUTE = "custom"


@dataclass(frozen=True)
class ServeConfig:
    engine: str  # "ort" | "torch"
    mode: str  # ort: "run" | "pooled"; torch: "eager" | "inference_mode"
    sessions: int
    threads: int  # intra-op threads per session (torch: torch.set_num_threads)
    clients: int
    route: str = ""  # ORT export route; "" for torch

    @property
    def baseline(self) -> str:
        """The report's baseline column: the registry's names (torch's op is ``fused``)."""
        return "ort" if self.engine == "ort" else "fused"

    @property
    def variant(self) -> str:
        head = f"{self.route}-{self.mode}" if self.engine == "ort" else self.mode
        return f"{head}-s{self.sessions}t{self.threads}c{self.clients}"

    def row_names(self, impl: str = "fused") -> tuple[str, str]:
        """The report's (baseline, variant) when the model's norms are ``impl``: torch's rows take the
        impl's baseline name (the bench's model rows use the same), ORT's variants carry it."""
        if impl == "fused":
            return self.baseline, self.variant
        return (impl, self.variant) if self.engine == "torch" else (self.baseline, f"{self.variant}-{impl}")

    @property
    def busy_threads(self) -> int:
        return self.sessions * self.threads


def comparison(physical_cores: int) -> list[ServeConfig]:
    threads = max(1, physical_cores // 2)
    configs = [ServeConfig("torch", mode, 1, threads, COMPARISON_CLIENTS) for mode in ("eager", "inference_mode")]
    for route in ROUTES:
        configs += [ServeConfig("ort", mode, 1, threads, COMPARISON_CLIENTS, route) for mode in ("run", "pooled")]
    return configs


def _powers_of_two(limit: int) -> list[int]:
    values, v = [], 1
    while v <= limit:
        values.append(v)
        v *= 2
    return values


def sweep(physical_cores: int) -> list[ServeConfig]:
    low, high = max(1, physical_cores // 2), 2 * physical_cores
    configs = []
    for sessions in _powers_of_two(high):
        for threads in _powers_of_two(high):
            if not low <= sessions * threads <= high:
                continue
            busy = max(2, sessions)
            for clients in (busy, 2 * busy):
                configs.append(ServeConfig("ort", "pooled", sessions, threads, clients, SWEEP_ROUTE))
    return configs


def plan(physical_cores: int) -> list[ServeConfig]:
    """The comparison, then the sweep (a sweep point equal to a comparison point is run once)."""
    configs = comparison(physical_cores)
    return configs + [c for c in sweep(physical_cores) if c not in configs]
