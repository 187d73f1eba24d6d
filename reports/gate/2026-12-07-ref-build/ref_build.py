"""Time REF's build in the A/B layout before (root/build) and after (src/build), ccache holding HEAD's build."""
import sys, time, shutil
from pathlib import Path
from bench.ab import scratch, driver
from env.paths import REPO_ROOT, build_dir
sha = sys.argv[1]
for name, layout in (("before: <sha>/build", lambda root, src: root / "build"), ("after: <sha>/src/build", lambda root, src: driver.ref_build_dir(src))):
    root = build_dir() / "ab-exp" / name.split(":")[0] / sha
    shutil.rmtree(root, ignore_errors=True)
    src = scratch.checkout(sha, root / "src", REPO_ROOT)
    began = time.perf_counter()
    scratch.build(src, layout(root, src), root / "build.log")
    print(f"{name}: REF built in {time.perf_counter() - began:.1f} s", flush=True)
