"""REF's build in the A/B layout, before (<sha>/build) and after (<sha>/src/build), one after the other.

Run by run.sh from a fresh clone whose own `invoke build` went through ccache first.
"""

import shutil
import sys
import time

from bench.ab import driver, scratch
from env.paths import REPO_ROOT, build_dir

LAYOUTS = {
    "before: <sha>/build": lambda root, src: root / "build",
    "after: <sha>/src/build": lambda root, src: driver.ref_build_dir(src),
}


def main(sha: str) -> None:
    for name, layout in LAYOUTS.items():
        root = build_dir() / "ab-exp" / name.split(":")[0] / sha
        shutil.rmtree(root, ignore_errors=True)
        src = scratch.checkout(sha, root / "src", REPO_ROOT)
        began = time.perf_counter()
        scratch.build(src, layout(root, src), root / "build.log")
        print(f"{name}: REF built in {time.perf_counter() - began:.1f} s", flush=True)


if __name__ == "__main__":
    main(sys.argv[1])
