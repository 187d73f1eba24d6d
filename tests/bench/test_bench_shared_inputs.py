"""The op and add_norm cases of one shape share one build of their inputs, and no job writes into them."""

from __future__ import annotations

import torch

import bench.plan.workloads as workloads
from bench.measure.placement import LAYOUTS
from bench.plan.jobs import plan_jobs
from bench.plan.options import BenchOptions
from bench.rounds import Results, run_round, run_settings
from ops.reference import EPS, make_inputs, reference_norm

SHAPES = ((2, 8, 256), (1, 4, 128))


def _options(**kwargs) -> BenchOptions:
    return BenchOptions(
        baseline="unfused,fused,fused_add",
        device="cpu",
        threads=1,
        op_shapes=SHAPES,
        add_norm_shapes=SHAPES,
        model_batches=(),
        budget_s=0.03,
        warmup=3,
        **kwargs,
    )


def test_a_shapes_add_norm_jobs_follow_its_op_jobs(tmp_path):
    labels = [job.label for job in plan_jobs(_options(), tmp_path) if not job.label.startswith("limit")]
    shapes = [label.split(" ")[1] for label in labels]
    assert shapes == sorted(shapes, key=shapes.index)  # each shape's jobs are consecutive
    first = [label for label in labels if label.split(" ")[1] == "2x8x256"]
    # copy, unfused, fused at each layout; then the three add_norm jobs
    assert [label.split(" ")[0] for label in first] == ["op"] * 3 * len(LAYOUTS) + ["add_norm"] * 3


def test_inputs_are_built_once_per_shape_and_left_as_drawn(tmp_path, monkeypatch):
    built: list[workloads.NormInputs] = []
    create = workloads.NormInputs.create.__func__

    def recording(cls, shape, dtype, seed=0, device="cpu"):
        inputs = create(cls, shape, dtype, seed, device)
        built.append(inputs)
        return inputs

    monkeypatch.setattr(workloads.NormInputs, "create", classmethod(recording))
    references = []
    reference = workloads.OpCase.reference

    def keeping(case):
        value = reference(case)
        references.append((case.x, value))
        return value

    monkeypatch.setattr(workloads.OpCase, "reference", keeping)
    options = _options()
    results = Results()
    run_round(plan_jobs(options, tmp_path), 0, run_settings(options), results)
    assert not results.failures
    # fused_add's and fused's in-place variants ran: their buffers are copies, the shared tensors are untouched.
    assert {key[4] for key in results.measured if key[0] == "add_norm"} >= {"inplace", "call"}
    assert sorted(tuple(inputs.x.shape) for inputs in built) == sorted(SHAPES)
    for inputs in built:
        x, weight, bias = make_inputs(tuple(inputs.x.shape), torch.float32, seed=0, distribution="features")
        assert torch.equal(inputs.x, x) and torch.equal(inputs.weight, weight) and torch.equal(inputs.bias, bias)
    for x, value in references:  # every element of the reference the baselines were checked against
        fresh = make_inputs(tuple(x.shape), torch.float32, seed=0, distribution="features")
        assert torch.equal(value, reference_norm(*fresh, EPS))


def test_the_op_cases_of_a_shape_share_one_float64_reference_across_layouts(tmp_path, monkeypatch):
    computed = []

    def counting(x, weight, bias, eps):
        computed.append(tuple(x.shape))
        return reference_norm(x, weight, bias, eps)

    monkeypatch.setattr(workloads, "reference_norm", counting)
    cases = []
    reference = workloads.OpCase.reference

    def keeping(case):
        cases.append((case.layout, case.x.data_ptr(), reference(case)))
        return cases[-1][2]

    monkeypatch.setattr(workloads.OpCase, "reference", keeping)
    options = _options()
    results = Results()
    run_round(plan_jobs(options, tmp_path), 0, run_settings(options), results)
    assert not results.failures
    assert sorted(computed) == sorted(SHAPES)  # once per shape, not once per layout
    for shape in SHAPES:
        mine = [(layout, ptr, ref) for layout, ptr, ref in cases if tuple(ref.shape) == shape]
        assert {layout for layout, _, _ in mine} == set(LAYOUTS)
        assert len({ptr for _, ptr, _ in mine}) == len(LAYOUTS)  # x itself sits at another place in each layout
        fresh = make_inputs(shape, torch.float32, seed=0, distribution="features")
        assert all(torch.equal(ref, reference_norm(*fresh, EPS)) for _, _, ref in mine)
