"""Every output is checked against the float64 reference before it is timed: wrong is a failure, never a row."""

from __future__ import annotations

import gc
import io

import numpy as np
import pytest
import torch
from rich.console import Console

import bench.plan.registry as registry
from bench.measure.verify import VerificationError, verify
from bench.plan.options import BenchOptions
from bench.plan.registry import Variant
from bench.plan.workloads import OpCase
from bench.run import run_bench
from ops.norms import unfused_norm


@pytest.fixture
def case(tmp_path, generator):
    return OpCase.create((2, 8, 256), torch.float32, tmp_path, seed=int(generator.initial_seed()))


def test_correct_outputs_pass_in_every_container(case):
    y = torch.ops.myops.fused_norm.default(case.x, case.weight, case.bias, case.eps)
    for output in (y, y.numpy(), [y.numpy()], (y,)):
        assert verify(output, case.reference(), case.tolerance, "fused") < case.tolerance.rtol


@pytest.mark.parametrize(
    "wrong, message",
    [
        (
            lambda c: unfused_norm(c.x, c.weight, torch.zeros_like(c.bias), c.eps),
            "differ from the float64 reference",
        ),  # bias dropped
        (lambda c: unfused_norm(c.x, c.weight, c.bias, 1e-1), "differ from the float64 reference"),  # wrong eps
        (
            lambda c: c.x * torch.rsqrt(c.x.var(-1, keepdim=True) + c.eps) * c.weight + c.bias,
            "differ",
        ),  # variance, not mean square
        (lambda c: unfused_norm(c.x, c.weight, c.bias, c.eps)[:1], "output shape"),
        (
            lambda c: unfused_norm(c.x, c.weight, c.bias, c.eps).index_fill_(0, torch.tensor([1]), float("nan")),
            "not finite",
        ),
        (lambda c: [unfused_norm(c.x, c.weight, c.bias, c.eps).numpy()] * 2, "expected one output"),
    ],
)
def test_wrong_outputs_are_rejected(case, wrong, message):
    with pytest.raises(VerificationError, match=message):
        verify(wrong(case), case.reference(), case.tolerance, "wrong")


def test_tolerance_is_not_looser_than_one_ulp_class_of_error(case):
    # A relative error of 1e-3 (10 fp16-ish ulps, far beyond fp32 rounding) must fail at fp32.
    out = case.reference() * (1 + 1e-3)
    with pytest.raises(VerificationError):
        verify(out.float(), case.reference(), case.tolerance, "scaled")


class _WrongBaselines:
    """Test-only: a fast wrong baseline (no bias) and an out variant that leaves half its buffer unwritten."""

    name = "test_wrong"
    workloads = frozenset({"op"})
    devices = frozenset({"cpu"})
    order = 100

    def variants(self, case):
        x, w, b, eps = case.x, case.weight, case.bias, case.eps

        def half_written():
            out = torch.full_like(x, float("nan"))

            def call():
                rows = x.shape[0] // 2
                torch.ops.myops.fused_norm_out.default(x[:rows], w, b, eps, out[:rows])
                return out

            return call

        return [
            Variant("no_bias", lambda: lambda: x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w),
            Variant("half_written_out", half_written),
        ]


@pytest.fixture
def wrong_baseline_registered():
    registry.register(_WrongBaselines)  # the same decorator a real baseline file uses
    yield
    registry._REGISTRY.pop("test_wrong", None)


def test_a_wrong_baseline_is_a_failure_and_never_a_row(tmp_path, wrong_baseline_registered):
    options = BenchOptions(
        baseline="fused,test_wrong",
        warmup=1,
        budget_s=0.01,
        threads=1,
        out_dir=tmp_path,
        op_shapes=((4, 8, 128),),
        model_batches=(),
        device="cpu",
    )
    outcome = run_bench(options, Console(file=io.StringIO()))
    assert len(outcome.failures) == 4  # each wrong variant at both layouts, the page offset's named
    assert sum("page_offset test_wrong/" in f for f in outcome.failures) == 2
    assert all("WRONG OUTPUT" in f for f in outcome.failures)
    assert any("test_wrong/no_bias" in f for f in outcome.failures)
    assert any("test_wrong/half_written_out" in f and "not finite" in f for f in outcome.failures)
    frame = outcome.frame
    assert "test_wrong" not in set(frame.baseline)
    assert {("fused", "call"), ("fused", "out")} <= set(zip(frame.baseline, frame.variant, strict=True))
    assert np.isfinite(frame.median_us).all()


def test_main_exits_non_zero_when_a_baseline_is_wrong(tmp_path, wrong_baseline_registered, monkeypatch):
    from bench import run

    # quick: in this process, where the wrong baseline is registered (a full run's fresh workers would not
    # know it and fail for that reason instead).
    options = BenchOptions(
        quick=True,
        baseline="test_wrong",
        warmup=1,
        budget_s=0.01,
        threads=1,
        out_dir=tmp_path,
        op_shapes=((2, 4, 64),),
        model_batches=(),
        device="cpu",
    )
    assert run.main(options) == 1


def test_every_chunk_is_checked_and_the_worst_element_named(case, monkeypatch):
    import bench.measure.verify as verify_module

    monkeypatch.setattr(verify_module, "CHUNK_ELEMENTS", 100)  # 4096 elements: 41 chunks
    y = torch.ops.myops.fused_norm.default(case.x, case.weight, case.bias, case.eps)
    assert verify(y, case.reference(), case.tolerance, "fused") < case.tolerance.rtol
    last = y.numel() - 1
    wrong = y.clone()
    wrong.view(-1)[last] += 1.0  # in the last, partial chunk
    wrong.view(-1)[250] += 0.5
    with pytest.raises(VerificationError, match=rf"2 of {y.numel()} outputs differ.*flat index {last}"):
        verify(wrong, case.reference(), case.tolerance, "wrong")
    unwritten = y.clone()
    unwritten.view(-1)[3999] = float("nan")
    with pytest.raises(VerificationError, match=rf"1 of {y.numel()} outputs are not finite"):
        verify(unwritten, case.reference(), case.tolerance, "unwritten")


def test_the_fast_scan_returns_the_largest_error_and_leaves_every_fault_to_the_counting_loop(case, monkeypatch):
    import bench.measure.verify as verify_module
    from bench.measure.verify import Expected

    monkeypatch.setattr(verify_module, "CHUNK_ELEMENTS", 100)  # 41 chunks, the last one partial
    expected = Expected.of(case.reference(), case.tolerance)
    y = torch.ops.myops.fused_norm.default(case.x, case.weight, case.bias, case.eps)
    largest = float((y.reshape(-1) - expected.near).abs().max())
    assert largest > 0  # the op's rounding differs from the reference's somewhere: the value is a real one
    assert verify(y, expected, case.tolerance, "fused") == largest
    counted = []
    monkeypatch.setattr(verify_module, "_largest_within_bound", lambda out, exp: counted.append(1))  # always "fault"
    assert verify(y, expected, case.tolerance, "fused") == largest  # the counting loop's answer is the same
    monkeypatch.undo()
    monkeypatch.setattr(verify_module, "CHUNK_ELEMENTS", 100)
    for index, value in ((0, float("inf")), (4095, float("-inf")), (2050, float("nan"))):
        faulty = y.clone()
        faulty.view(-1)[index] = value
        with pytest.raises(VerificationError, match=rf"1 of {y.numel()} outputs are not finite"):
            verify(faulty, expected, case.tolerance, "faulty")
    assert counted == [1]


def test_an_exact_rule_passes_only_the_same_bits(generator):
    from bench.plan.limits import EXACT

    x = torch.randn(3, 1000, generator=generator)
    assert verify(x.clone(), x, EXACT, "copy") == 0.0
    off = x.clone()
    off.view(-1)[1234] = torch.nextafter(off.view(-1)[1234], torch.tensor(float("inf")))  # one ulp
    with pytest.raises(VerificationError, match=r"1 of 3000 outputs differ.*flat index 1234"):
        verify(off, x, EXACT, "copy")
    unwritten = x.clone()
    unwritten.view(-1)[5] = float("nan")
    with pytest.raises(VerificationError, match=r"1 of 3000 outputs are not finite"):
        verify(unwritten, x, EXACT, "copy")


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_the_narrow_comparison_never_passes_an_element_the_float64_rule_fails(dtype, generator):
    # Each output element is the representable value of ``dtype`` just outside or just inside the float64 bound
    # atol + rtol * |ref|, on either side of the reference: the count of failures must include every one outside.
    from bench.measure.verify import Expected
    from ops.reference import COMPOSITION_TOLERANCES

    tolerance = COMPOSITION_TOLERANCES[dtype]
    ref = torch.randn(20_000, generator=generator, dtype=torch.float64) * 3
    bound = tolerance.bound(ref)
    sign = torch.where(torch.rand(ref.shape, generator=generator) < 0.5, -1.0, 1.0).double()
    edge = (ref + sign * bound).to(dtype)  # the nearest value of dtype to the edge: either side of it
    outside = (edge.double() - ref).abs() > bound
    assert 0.2 < float(outside.double().mean()) < 0.8  # rounding to the nearest puts both kinds in the test
    expected = Expected.of(ref, tolerance)
    assert expected.near is not None and expected.near.dtype == torch.float32  # compared in float32
    with pytest.raises(VerificationError) as failed:
        verify(edge, expected, tolerance, "edge")
    counted = int(str(failed.value).split(" of ")[0].split()[-1])
    # Never fewer than the float64 rule's failures. The float32 rule is stricter by twice the reference's rounding
    # to float32 and a 2^-20 shrink of the bound: it may also reject an inside element within that sliver of the
    # edge, and no other.
    sliver = 2 * (ref.float().double() - ref).abs() + bound * 2.0**-19
    in_sliver = ~outside & (bound - (edge.double() - ref).abs() <= sliver)
    assert int(outside.sum()) <= counted <= int(outside.sum()) + int(in_sliver.sum())
    assert int(in_sliver.sum()) < ref.numel() // 2  # the inside ones are not all in the sliver: the test can fail
    assert verify(ref.to(dtype), expected, tolerance, "rounded") <= float(bound.max())


def test_the_prepared_reference_is_made_once_per_case_and_dropped_for_the_next(case, tmp_path, monkeypatch):
    import bench.measure.verify as verify_module

    made = []
    original = verify_module.Expected.of.__func__

    def counting(cls, reference, tolerance):
        made.append(reference)
        return original(cls, reference, tolerance)

    monkeypatch.setattr(verify_module.Expected, "of", classmethod(counting))
    references = verify_module.CaseReferences()
    y = torch.ops.myops.fused_norm.default(case.x, case.weight, case.bias, case.eps)
    for _ in range(3):
        verify_module.verify_outputs(y, references.of(case), case.tolerance)
    assert len(made) == 1
    other = OpCase.create((2, 8, 256), torch.float32, tmp_path, seed=7)
    with pytest.raises(VerificationError):
        verify_module.verify_outputs(y, references.of(other), other.tolerance)  # another case's input: differs
    assert len(made) == 2 and made[-1] is other.reference()
    # Only the current case's operands are held.
    assert references.of(other) is references.of(other) and len(made) == 2
    references.of(case)
    assert len(made) == 3
    # They go with their case: a released case's operands are not held until the next case comes.
    del other
    gc.collect()
    third = OpCase.create((2, 8, 256), torch.float32, tmp_path, seed=8)
    held = references.of(third)
    assert len(made) == 4 and references._expected is held
    del third
    gc.collect()
    assert references._expected is None and references._case is None


def test_a_cases_jobs_share_its_prepared_reference_across_one_job_calls(tmp_path, monkeypatch):
    # Workers run a round one job a call; a case's jobs (one per baseline) must not prepare its reference again.
    import bench.measure.verify as verify_module
    from bench.plan.jobs import plan_jobs
    from bench.rounds import Results, run_round, run_settings

    made = []
    original = verify_module.Expected.of.__func__

    def counting(cls, reference, tolerance):
        made.append(reference.shape)
        return original(cls, reference, tolerance)

    monkeypatch.setattr(verify_module.Expected, "of", classmethod(counting))
    options = BenchOptions(
        baseline="unfused,fused,native",
        op_shapes=((2, 8, 256),),
        add_norm_shapes=(),
        model_batches=(),
        budget_s=0.003,
        layouts="natural",
    )
    jobs = [job for job in plan_jobs(options, tmp_path) if job.label.startswith("op ")]
    settings, results, references = run_settings(options), Results(), verify_module.CaseReferences()
    for job in jobs:
        run_round([job], 0, settings, results, references=references)
    assert not results.failures and len(results.measured) >= 4
    # Once for the copy's own case (its reference is the input) and once for the op's case that the three
    # baselines' jobs share: not once per job.
    assert len(jobs) == 4 and made == [(2, 8, 256)] * 2
