"""Set-up paid once: torch.compile's graphs cached under the build folder, kept between processes and runs."""

from __future__ import annotations

import pytest
import torch

from bench.plan.baselines.compiled import INDUCTOR_CACHE
from bench.plan.registry import Prepared, select
from bench.plan.workloads import OpCase
from ops.reference import REFERENCE, reference_norm


@pytest.mark.slow  # two compiles by Inductor
def test_a_second_compile_of_one_case_is_served_from_the_cache_under_the_build_folder(tmp_path, monkeypatch):
    monkeypatch.setenv("FUSEDBENCH_BUILD_DIR", str(tmp_path / "build"))
    (compiled,) = select("compiled")
    case = OpCase.create((2, 4, 64), torch.float32, tmp_path / "run", seed=int(torch.randint(0, 1000, ())))
    notes = []
    for _ in range(2):  # as the second process of a run, or the next run, would
        (variant,) = compiled.variants(case)
        prepared = variant.prepare()
        assert isinstance(prepared, Prepared)
        expected = reference_norm(case.x.double(), case.weight.double(), case.bias.double(), case.eps)
        torch.testing.assert_close(prepared.call().double(), expected, **REFERENCE.fp32.as_kwargs())
        notes.append(prepared.note)
    assert notes[0].endswith("cold compile time") and "FX graph cache" in notes[1], notes
    assert any((tmp_path / "build" / INDUCTOR_CACHE).iterdir())  # under the build folder, not the run's workdir
