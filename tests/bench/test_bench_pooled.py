"""Pooling the reports of a full run's processes: each pooled row is made of that row's values in every process."""

from __future__ import annotations

import numpy as np
import pytest

from bench.report.schema import read_report, read_samples, row_key
from bench.stats.pooled import pool_reports
from tests.helpers.bench_synthetic import lognormal, make_key, synthetic_report


@pytest.fixture
def rng(generator):
    return np.random.default_rng(int(generator.initial_seed()))


def test_each_pooled_row_takes_its_own_rows_from_every_process(tmp_path, rng) -> None:
    keys = [make_key(baseline=b, variant=v) for b, v in (("fused", "call"), ("fused", "out"), ("unfused", "call"))]
    only_two = make_key(baseline="native")  # measured by two of the three processes: not comparable, dropped
    csvs, samples, setups, faults = [], {}, {}, {}
    for process in range(3):
        rows = {}
        for index, key in enumerate(keys[::-1] if process == 1 else keys):  # another row order in one process
            samples[key, process] = lognormal(rng, 10.0 * (index + 1) + process, 40)
            rows[key] = samples[key, process]
        if process != 2:
            rows[only_two] = lognormal(rng, 50.0, 40)
        environment = {
            key: {
                "setup_s": 0.1 * (process + 1) + keys.index(key),
                "minor_faults_per_call": 3.0 * process + keys.index(key),
            }
            for key in keys
        }
        for key in keys:
            setups.setdefault(key, []).append(environment[key]["setup_s"])
            faults.setdefault(key, []).append(environment[key]["minor_faults_per_call"])
        csvs.append(synthetic_report(tmp_path / f"process{process}.csv", rows, row_environment=environment))

    pooled_csv = pool_reports(csvs, tmp_path / "pooled.csv")
    frame = read_report(pooled_csv)
    by_key = {row_key(r): r for r in frame.to_dict("records")}
    pooled_samples = read_samples(pooled_csv)
    assert set(by_key) == set(keys)
    for key in keys:
        values = np.concatenate([samples[key, process] for process in range(3)])
        assert sorted(pooled_samples[key].values) == pytest.approx(sorted(values))
        assert by_key[key]["median_us"] == pytest.approx(float(np.median(values)))
        assert by_key[key]["rounds"] == 9  # three rounds of each of three processes
        assert by_key[key]["setup_s"] == pytest.approx(float(np.median(setups[key])))
        assert by_key[key]["minor_faults_per_call"] == pytest.approx(float(np.mean(faults[key])))
