"""A process using the GPU: it exits cleanly after reading, and its threads sleep while they wait for
the device."""

import os
import sys

import numpy as np
import pytest
import zarr

from ..helpers import sample

pytestmark = pytest.mark.gpu


def test_a_process_reading_exits_cleanly(tmp_path):
    """A process that reads (nvCOMP's scratch from cupy's pool) gets the right values and exits with
    status 0 (nvCOMP's Python codecs, no longer used, segfaulted at exit when they outlived CUDA)."""
    import subprocess
    import sys

    a = zarr.create_array(tmp_path / "a.zarr", shape=(64, 4096), chunks=(4, 4096), dtype="f4")
    a[...] = sample(a.shape, "f4")
    np.save(tmp_path / "want.npy", a[...])
    code = (
        "import numpy as np, zarr_dask_gpu as z; "
        f"x = z.from_zarr_gpu({str(tmp_path / 'a.zarr')!r}, chunks=(16, 4096), device='gpu'); "
        "got = x.compute(scheduler='threads').get(); "
        f"np.testing.assert_array_equal(got, np.load({str(tmp_path / 'want.npy')!r}))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]


_WAIT_CPU = """
import time
import cupy as cp
from zarr_dask_gpu.gpu.backend import GpuBackend

cp.zeros(1)  # the context exists before the set-up, as in a process that used cupy first
GpuBackend()
spin = cp.RawKernel(
    'extern "C" __global__ void spin(long long c) { long long t = clock64(); while (clock64() - t < c) {} }',
    "spin",
)
clock = cp.cuda.Device().attributes["ClockRate"] * 1000  # Hz
stream = cp.cuda.Stream(non_blocking=True)
for ms in (5, 200):  # the first compiles the kernel
    spin((1,), (1,), (cp.int64(clock * ms // 1000),), stream=stream)
    t0, c0 = time.perf_counter(), time.thread_time()
    stream.synchronize()
print(time.perf_counter() - t0, time.thread_time() - c0)
"""


@pytest.mark.parametrize("setting", ["True", "False"])
def test_threads_waiting_for_the_device_sleep(setting):
    """With ``blocking-sync`` (the default) the GPU set-up makes a thread's wait for a stream sleep, even
    in a context made before it: a wait of 200 ms takes almost no CPU time. Turned off, CUDA's own
    default (a spin) stays."""
    import subprocess

    env = {**os.environ, "DASK_ZARR_DASK_GPU__BLOCKING_SYNC": setting}
    done = subprocess.run(
        [sys.executable, "-c", _WAIT_CPU], capture_output=True, text=True, env=env, timeout=120
    )
    assert done.returncode == 0, done.stderr
    wall, cpu = map(float, done.stdout.split())
    assert wall > 0.15
    if setting == "True":
        assert cpu < 0.2 * wall
    else:
        assert cpu > 0.5 * wall
