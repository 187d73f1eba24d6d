"""Which single-version build matches the version the delivered core's loader runs on a CPU."""

from __future__ import annotations

import pytest

from tests.helpers.cpu_levels import loaders_choice, runnable_levels

V3 = {"sse4_2", "avx", "avx2", "fma", "f16c", "bmi2"}
V4 = V3 | {"avx512f", "avx512bw", "avx512vl", "avx512cd", "avx512dq"}


@pytest.mark.parametrize(
    ("flags", "level", "march"),
    [
        (set(), "x86-64", ["-march=x86-64"]),
        ({"sse4_2", "avx", "fma"}, "x86-64", ["-march=x86-64"]),  # AVX without AVX2: the baseline version
        (V3, "x86-64-v3", ["-march=x86-64-v3"]),
        (V3 - {"f16c"}, "x86-64", ["-march=x86-64"]),
        (V4, "x86-64-v4", ["-march=x86-64-v4"]),
        (V4 | {"avx512_bf16"}, "x86-64-v4+avx512bf16", ["-march=x86-64-v4", "-mavx512bf16"]),
    ],
)
def test_the_loaders_choice_is_the_widest_level_the_flags_allow(flags, level, march):
    assert loaders_choice(flags, "x86_64") == (level, [*march, "-DFUSED_NORM_NO_CLONES"])


def test_off_x86_64_the_core_has_no_versions_to_choose():
    assert loaders_choice(set(), "aarch64") == ("no versions", [])


def test_the_levels_come_narrowest_first():
    assert list(runnable_levels(V4 | {"avx512_bf16"})) == ["x86-64", "x86-64-v3", "x86-64-v4", "x86-64-v4+avx512bf16"]
