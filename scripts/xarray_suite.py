"""xarray's own zarr backend tests, read through this package's engine: run them as xarray ships them
(``engine="zarr"``) and with every read switched to ``engine="zarr_gpu"`` (tests/xarray_suite/
plugin.py), and fail if a test that passes with ``engine="zarr"`` does not pass with ``zarr_gpu``,
unless the plugin records it as a difference by design (a strict xfail).

Usage: python scripts/xarray_suite.py [--keep DIR] [pytest args]   (run from the repository's root)
"""

import argparse
import os
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET
from collections import Counter

MODULES = ["xarray.tests.test_backends", "xarray.tests.test_backends_datatree"]
SELECT = "Zarr or zarr"


def run(junit: str, extra: list[str], plugin: bool) -> None:
    args = [
        sys.executable,
        "-m",
        "pytest",
        "--pyargs",
        *MODULES,
        "-k",
        SELECT,
        "-q",
        "-p",
        "no:cacheprovider",
    ]
    args += ["-p", "tests.xarray_suite.plugin"] if plugin else []
    env = dict(
        os.environ, PYTHONPATH=os.pathsep.join(filter(None, [os.getcwd(), os.environ.get("PYTHONPATH")]))
    )
    # xarray's tests run from a folder of their own: they write files into the working directory
    with tempfile.TemporaryDirectory() as where:
        subprocess.run([*args, f"--junitxml={junit}", *extra], cwd=where, env=env, check=False)


def outcomes(junit: str) -> dict[str, str]:
    """Each test's outcome: passed, failed, skipped or xfailed."""
    out = {}
    for case in ET.parse(junit).iter("testcase"):
        name = f"{case.get('classname')}::{case.get('name')}"
        kinds = {child.tag: child for child in case}
        if "failure" in kinds or "error" in kinds:
            out[name] = "failed"
        elif "skipped" in kinds:
            xfail = kinds["skipped"].get("type") == "pytest.xfail"
            out[name] = "xfailed" if xfail else "skipped"
        else:
            out[name] = "passed"
    return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--keep", default=None, help="keep the two JUnit reports in this folder")
    args, extra = p.parse_known_args()
    folder = args.keep or tempfile.mkdtemp()
    os.makedirs(folder, exist_ok=True)
    zarr_xml, gpu_xml = os.path.join(folder, "engine-zarr.xml"), os.path.join(folder, "engine-zarr_gpu.xml")
    run(zarr_xml, extra, plugin=False)
    run(gpu_xml, extra, plugin=True)
    zarr, gpu = outcomes(zarr_xml), outcomes(gpu_xml)
    print(f'engine="zarr":     {dict(sorted(Counter(zarr.values()).items()))}')
    print(f'engine="zarr_gpu": {dict(sorted(Counter(gpu.values()).items()))}')
    lost = sorted(t for t, o in zarr.items() if o == "passed" and gpu.get(t) not in ("passed", "xfailed"))
    by_design = sorted(t for t, o in zarr.items() if o == "passed" and gpu.get(t) == "xfailed")
    print(
        f"passing with engine='zarr': {sum(o == 'passed' for o in zarr.values())}; also with zarr_gpu: "
        f"{sum(gpu.get(t) == 'passed' for t, o in zarr.items() if o == 'passed')}; different by design "
        f"(recorded): {len(by_design)}; lost: {len(lost)}"
    )
    for t in lost:
        print(f"  lost: {t} ({gpu.get(t, 'not run')})")
    return 1 if lost else 0


if __name__ == "__main__":
    raise SystemExit(main())
