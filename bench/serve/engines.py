"""Turn a ServeConfig into a request function (input -> output the caller owns) and what it holds open."""

from __future__ import annotations

import itertools
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from bench.serve.configs import ServeConfig
from bench.serve.models import ServedModel
from ops.ort.pool import SessionPool, create_pool_session
from ops.ort.session import OrtConfig, spinning_allowed


@dataclass(frozen=True)
class Served:
    call: Callable[[np.ndarray], np.ndarray]
    inter_op_threads: int | None
    allow_spinning: str  # "1" | "0" | "-" (not ORT)
    note: str


def ort_config(config: ServeConfig) -> OrtConfig:
    return OrtConfig(
        threads=config.threads,
        instances=config.sessions,
        register_custom_ops=config.route == "custom",
        oversubscribe=True,  # the sweep measures oversubscription on purpose
    )


@contextmanager
def serve(config: ServeConfig, model: ServedModel, onnx_files: dict[str, Path]) -> Iterator[Served]:
    """The request function for ``config``; torch's thread count is restored afterwards."""
    if config.engine == "torch":
        threads_before = torch.get_num_threads()
        torch.set_num_threads(config.threads)
        try:
            yield _torch(config, model)
        finally:
            torch.set_num_threads(threads_before)
        return
    ort_cfg = ort_config(config)
    spinning = "1" if spinning_allowed(ort_cfg) else "0"
    path = onnx_files[config.route]
    if config.mode == "pooled":
        pool = SessionPool.create(path, ort_cfg, sessions=config.sessions, slots=max(config.clients, config.sessions))
        name = pool.specs[0].name

        def pooled(x: np.ndarray) -> np.ndarray:
            return pool.run({name: x})[0]

        try:
            yield Served(
                pooled,
                1,
                spinning,
                f"{len(pool.slots)} slots over {config.sessions} session(s); outputs copied to the caller",
            )
        finally:
            pool.close()
        return
    sessions = [create_pool_session(path, ort_cfg) for _ in range(config.sessions)]
    name = sessions[0].get_inputs()[0].name
    # Client threads take sessions in turn: thread k always uses session k % sessions.
    turn = itertools.count()
    local = threading.local()

    def plain(x: np.ndarray) -> np.ndarray:
        session = getattr(local, "session", None)
        if session is None:
            session = local.session = sessions[next(turn) % len(sessions)]
        return session.run(None, {name: x})[0]

    yield Served(plain, 1, spinning, "session.run: a fresh output per request")


def _torch(config: ServeConfig, model: ServedModel) -> Served:
    module = model.torch_model()
    context = torch.no_grad if config.mode == "eager" else torch.inference_mode

    def call(x: np.ndarray) -> np.ndarray:
        with context():
            return module(torch.from_numpy(x)).numpy()

    what = "torch.no_grad" if config.mode == "eager" else "torch.inference_mode"
    return Served(
        call, torch.get_num_interop_threads(), "-", f"fused model, eager under {what}; one module shared by all clients"
    )
