"""CPU mode's backend: how its tasks share the machine's cores."""

import threading

import dask
import numpy as np
import zarr

from zarr_dask_gpu import backends, from_zarr_gpu


def test_cpu_tasks_share_one_decode_pool(tmp_path, monkeypatch):
    """CPU tasks running at once decode their chunks on one pool of ``cpu-threads`` threads, not each
    on threads of its own (nested pools oversubscribed the cores: docs/performance.md, CPU mode)."""
    a = zarr.create_array(tmp_path / "a.zarr", shape=(64, 1000), chunks=(2, 1000), dtype="f8")
    ref = np.random.default_rng(2).random(a.shape)
    a[...] = ref
    seen, real = set(), backends.decode_chunk

    def recording(*args, **kwargs):
        seen.add(threading.current_thread().name)
        return real(*args, **kwargs)

    monkeypatch.setattr(backends, "decode_chunk", recording)
    with dask.config.set({"zarr_dask_gpu.cpu-threads": 3}):
        x = from_zarr_gpu(tmp_path / "a.zarr", chunks=(8, 1000), device="cpu")  # 4 chunks a task
        np.testing.assert_array_equal(x.compute(scheduler="threads", num_workers=8), ref)
    assert 1 <= len(seen) <= 3
    assert all(name.startswith("zarr-dask-gpu-decode") for name in seen)
