"""The tasks' phases (``phases.py``), which benchmarks time the read path by."""

import threading

import numpy as np
import pytest
import zarr

from zarr_dask_gpu import from_zarr_gpu, phases
from zarr_dask_gpu.phases import Phase


def test_phases_cost_nothing_while_nothing_listens_and_report_each_span():
    assert not phases.active() and phases.record(Phase.READ) is phases.record(Phase.CHECK)  # the shared no-op
    seen = []
    with phases.listening(seen.append):
        assert phases.active()
        with phases.record(Phase.READ, chunks=3):
            pass
        with pytest.raises(KeyError), phases.record(Phase.CHECK):
            raise KeyError
    with phases.record(Phase.DECODE):  # after the listener left
        pass
    assert [(s.name, s.ok, dict(s.detail)) for s in seen] == [
        ("read", True, {"chunks": 3}),
        ("check", False, {}),
    ]
    assert seen[0].thread == threading.get_ident() and 0 <= seen[0].seconds < 1
    assert set(phases.NAMES) == set(Phase) and set(phases.NAMES) >= {
        "plan",
        "task",
        "locate",
        "read",
        "check",
        "decode",
        "decode-call",
        "assemble",
    }


def test_a_cpu_read_reports_each_tasks_plan_and_assembly(tmp_path):
    a = zarr.create_array(tmp_path / "a.zarr", shape=(64, 8), chunks=(8, 8), dtype="f4")
    a[:] = np.arange(64 * 8, dtype="f4").reshape(64, 8)
    x = from_zarr_gpu(str(tmp_path / "a.zarr"), device="cpu", chunks=(16, 8))
    with phases.collect() as spans:
        assert np.array_equal(x.compute(scheduler="threads"), a[:])
    assert sorted(s.name for s in spans) == ["assemble"] * 4 + ["plan"] * 4
    assert not phases.active()


@pytest.mark.gpu
@pytest.mark.parametrize("decoder", ["blocks", "nvcomp"])
def test_a_gpu_read_reports_its_phases_inside_its_tasks(tmp_path, decoder):
    import dask

    a = zarr.create_array(tmp_path / "a.zarr", shape=(64, 256), chunks=(8, 256), dtype="f4")
    a[:] = np.round(np.random.default_rng(0).standard_normal((64, 256)), 1)
    x = from_zarr_gpu(str(tmp_path / "a.zarr"), device="gpu", chunks=(16, 256))
    with dask.config.set({"zarr_dask_gpu.zstd-decoder": decoder}), phases.collect() as spans:
        assert np.array_equal(x.compute(scheduler="threads").get(), a[:])
    names = {s.name for s in spans}
    want = {"plan", "task", "locate", "read", "decode", "decode-call", "assemble", "wait"}
    assert names == want | ({"check"} if decoder == "nvcomp" else set()), names
    tasks = [s for s in spans if s.name == "task"]
    assert len(tasks) == 4 and all(s.ok for s in spans)
    for s in spans:  # each of a task's phases inside a task of its thread
        if s.name not in ("plan", "task", "decode-call"):
            assert any(t.thread == s.thread and t.start <= s.start <= s.end <= t.end for t in tasks), s
    calls = [s for s in spans if s.name == "decode-call"]
    assert sum(s.detail["chunks"] for s in calls) == 8 and sum(s.detail["tasks"] for s in calls) >= 4
