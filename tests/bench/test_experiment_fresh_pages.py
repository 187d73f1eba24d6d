"""The fresh-pages experiment: its reading of the balloon's reporting, and its touches' accounting."""

from __future__ import annotations

import pytest

from bench.experiments import fresh_pages


def _balloon(tmp_path, features: str | None, order: str | None):
    driver = tmp_path / "virtio_balloon"
    driver.mkdir()
    if features is not None:
        (driver / "virtio0").mkdir()
        (driver / "virtio0" / "features").write_text(features + "\n")
    order_file = tmp_path / "page_reporting_order"
    if order is not None:
        order_file.write_text(order + "\n")
    return driver, order_file


@pytest.mark.parametrize(
    ("features", "order", "expected"),
    [
        ("0110010100000000", "9", "virtio-balloon free page reporting on, order 9 (2048 KiB blocks)"),
        ("0110000100000000", "9", "virtio-balloon free page reporting off"),  # bit 5 clear
        ("0110010100000000", None, "virtio-balloon free page reporting on"),
        (None, "9", "no virtio-balloon device: no free page reporting"),
    ],
)
def test_the_reporting_state_is_read_from_the_feature_bits_and_the_order(
    tmp_path, monkeypatch, features, order, expected
):
    driver, order_file = _balloon(tmp_path, features, order)
    monkeypatch.setattr(fresh_pages, "BALLOON_DRIVER", driver)
    monkeypatch.setattr(fresh_pages, "REPORTING_ORDER", order_file)
    assert fresh_pages.reporting_state() == expected


def test_each_round_touches_every_held_allocation_and_counts_its_faults(tmp_path):
    mib, hold = 40, 3  # above glibc's largest mmap threshold (32 MiB): a fresh mapping every time
    rows = fresh_pages.run(mib, hold, gaps=[0.0, 0.01], repeats=2)
    assert len(rows) == 2 * 2 * hold
    assert sorted((r["gap_s"], r["repeat"], r["chunk"]) for r in rows) == [
        (g, k, c) for g in (0.0, 0.01) for k in range(2) for c in range(hold)
    ]
    for row in rows:
        # A fresh mapping: at least one fault a 2 MiB huge page, at most one a 4 KiB page (and a few more
        # for the allocator's own bookkeeping).
        assert mib // 2 <= row["minor_faults"] <= mib * 256 + 64
        assert row["us_per_fault"] == pytest.approx(row["seconds"] / row["minor_faults"] * 1e6)
    text = fresh_pages.report(rows, tmp_path, "state line", mib, hold)
    assert (tmp_path / "fresh_pages.csv").is_file() and text.splitlines()[0].startswith("3 allocation(s) of 40 MiB")
    assert len([line for line in text.splitlines() if line.startswith("| 0")]) == 2  # one line a gap
