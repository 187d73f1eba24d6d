"""Which core placement each unit of a row ran on, for the unpaired comparison of two separate reports.

A row timed on several CPU threads reads one of two levels per process on
a VM whose host moves the vCPUs between a near placement (sharing a cache)
and a far one (bench/measure/core_sync.py): the small model 575 or 775 us,
ONNX Runtime's op at 8x128x1024 180 or 222 us. Two separate reports whose
three processes each happened to land on different placements then differ
by 20-80 % on identical code, with each side's units agreeing among
themselves, so the interval is narrow and the row is flagged: 8 of 45 A/A
pairs of separate quick reports on the development VM had a false
REGRESSION, all on such rows.

Each unit carries the probe's reading of its round. A unit ran on the far
placement when its reading lies more than FAR_BOUND above the lowest reading
of the row's units on both sides. The placement only ever withholds a
verdict, never makes one:
  * where the placement and the side coincide (every BASE unit on one
    placement, every NEW unit on the other), the two cannot be told apart
    and the row gets no verdict;
  * where both placements occur among a row's units, the comparison is also
    made at equal placement (a least-squares fit with the placement as a
    covariate, bench/stats/compare.py), and a verdict stands only where both
    give it. The fit alone is not trusted: with three units a side it also
    explains away a process that was slow for another reason (a separate
    full report's in-place add + norm row read 1.8-2.1 ms against 3.0-4.6
    ms, the two slow processes of one side far: the fit flagged it, the plain
    comparison did not).
Paired units (an A/B run's processes taking turns job by job) ran at the
same moments and share the placement, so none of this applies to them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

# The probe read 5.6-6.0 us on the near placement and 7.0-8.5 us on the far one on the development VM (1950
# readings of ten quick reports): a bound between the two.
FAR_BOUND = 1.15


@dataclass(frozen=True)
class Placements:
    """Per unit, in the order of the unit values: True where it ran on the far placement (None: not probed)."""

    base_far: np.ndarray | None = None
    new_far: np.ndarray | None = None

    DIFFERS = "core placement and side coincide"
    MIXED = "core placements mixed: verdict kept only where the fit at equal placement agrees"

    @property
    def mixed(self) -> bool:
        """Both placements occur among the units: the comparison must account for them."""
        if self.base_far is None or self.new_far is None:
            return False
        flags = np.concatenate([self.base_far, self.new_far])
        return bool(flags.any() and not flags.all())

    @property
    def confounded(self) -> bool:
        """Every BASE unit on one placement and every NEW unit on the other: no comparison at equal placement."""
        if not self.mixed:
            return False
        return bool(
            (self.base_far.all() and not self.new_far.any()) or (self.new_far.all() and not self.base_far.any())
        )

    @property
    def note(self) -> str:
        if self.confounded:
            return self.DIFFERS
        return self.MIXED if self.mixed else ""


NOT_PROBED = Placements()


def placements_of(
    base_rounds: Sequence[int],
    new_rounds: Sequence[int],
    base_sync: Mapping[int, float],
    new_sync: Mapping[int, float],
) -> Placements:
    """Each unit's placement from its round's probe reading, against the lowest reading of the row.

    A row with a unit that has no reading (not probed: one thread, a GPU, an earlier report) is NOT_PROBED.
    """
    try:
        base_readings = np.array([base_sync[r] for r in base_rounds], dtype=float)
        new_readings = np.array([new_sync[r] for r in new_rounds], dtype=float)
    except KeyError:
        return NOT_PROBED
    readings = np.concatenate([base_readings, new_readings])
    if len(readings) == 0 or not np.isfinite(readings).all():
        return NOT_PROBED
    bound = FAR_BOUND * readings.min()
    return Placements(base_readings > bound, new_readings > bound)
