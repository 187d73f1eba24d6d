"""A benchmark's build holds one kernel version (FUSED_NORM_CPU_LEVEL): the same machine code as that version of the
delivered core, entry point by entry point, so a benchmark times what the loader runs on its CPU.

The delivered core here is the JIT build's object (``invoke build`` compiles all three versions, and the ORT library
links that object too); the one-level core is compiled with the same flags and the define a benchmark's build adds.
"""

from __future__ import annotations

import json
import platform
import re
import subprocess
from pathlib import Path

import pytest

from env.builder import config, cpu_level
from env.builder.core_objects import jit_object
from env.builder.torch_library import jit_dir
from env.paths import toolchain_record_path
from tests.helpers.x86_code import objdump

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(platform.machine() != "x86_64", reason="the kernel core has versions on x86-64 only"),
]

# The suffix GCC gives each level's function in the delivered core.
DELIVERED_SUFFIX = {4: " [clone .arch_x86_64_v4]", 3: " [clone .arch_x86_64_v3]", 1: ""}
ENTRY = re.compile(r"^fused_norm::\(anonymous namespace\)::clone_\w+\(")
# At x86-64-v4, bfloat16's add + norm pair (the entry and the AVX512-BF16 function it calls) compiles a little
# differently once the entry is a plain function: two loads swap places, and the entry's code moves by 16 bytes.
# Every other entry is identical; the main job's grid is float32.
LEVEL_4_APART = {
    "fused_norm::(anonymous namespace)::clone_add_rows(fused_norm::TypeTag<fused_norm::BFloat16>, "
    "fused_norm::AddNormProblem const&, long, long)",
    "fused_norm::(anonymous namespace)::clone_add_rows_avx512bf16(fused_norm::TypeTag<fused_norm::BFloat16>, "
    "fused_norm::AddNormProblem const&, long, long) [clone .constprop.0]",
}


def _functions(obj: Path) -> dict[str, list[str]]:
    """{demangled name: its instructions}, each jump or call into the function itself written as its offset."""
    listing = subprocess.run(
        [objdump() or "objdump", "-d", "-C", "--no-show-raw-insn", str(obj)], check=True, capture_output=True, text=True
    ).stdout
    functions: dict[str, list[str]] = {}
    current: list[str] | None = None
    for line in listing.splitlines():
        head = re.match(r"^[0-9a-f]+ <(.*)>:$", line)
        if head:
            current = functions.setdefault(head.group(1), [])
        elif current is not None and "\t" in line:
            instruction = line.split("\t", 1)[1].strip()
            current.append(
                re.sub(r"[0-9a-f]+ <.*?(\+0x[0-9a-f]+)?>$", lambda m: "at" + (m.group(1) or ""), instruction)
            )
    return functions


@pytest.fixture(scope="module")
def delivered() -> Path:
    record = json.loads(toolchain_record_path().read_text()) if toolchain_record_path().is_file() else {}
    versions = record.get("build", {}).get("kernel_core_versions", "")
    obj = jit_object(config.core_cpu_sources()[0], jit_dir())
    if not obj.is_file() or not str(versions).startswith("all"):
        pytest.skip(f"no JIT build with every kernel version (found {versions!r}): run `invoke build` first")
    return obj


def test_the_one_level_core_is_the_delivered_version_of_its_level(delivered, tmp_path, monkeypatch):
    monkeypatch.delenv(config.CORE_VERSIONS_VARIABLE)  # the suite's "all" (tests/conftest.py) would win
    level = cpu_level.loader_level()
    with config.core_versions_for("loader"):
        flags = config.torch_extension_spec(with_cuda=False).cxx_flags
    assert f"-DFUSED_NORM_CPU_LEVEL={level}" in flags
    one = tmp_path / "one_level.o"
    subprocess.run(
        ["c++", *flags, "-fPIC", f"-I{config.csrc_dir()}", "-c", str(config.core_cpu_sources()[0]), "-o", str(one)],
        check=True,
        capture_output=True,
    )
    ours, theirs = _functions(one), _functions(delivered)
    entries = sorted(name for name in ours if ENTRY.match(name))
    assert len(entries) >= 12  # three ops x four dtypes (and bfloat16's AVX512-BF16 functions at x86-64-v4)
    apart = LEVEL_4_APART if level == 4 else set()
    for name in entries:
        counterpart = name if "avx512bf16" in name else name + DELIVERED_SUFFIX[level]
        assert counterpart in theirs, f"the delivered core has no {counterpart}"
        if name in apart:
            assert len(ours[name]) == len(theirs[counterpart]), name
        else:
            assert ours[name] == theirs[counterpart], f"{name}: its machine code differs from the delivered version"
    # Nothing of the other levels is left, and no loader's choice: a plain call.
    assert not any("[clone .arch_" in name for name in ours)
    symbols = subprocess.run(["nm", str(one)], check=True, capture_output=True, text=True).stdout
    assert not any(line.split()[1:2] == ["i"] for line in symbols.splitlines())
