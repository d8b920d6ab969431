"""kvikio's reader (``gpu/readers/local.py``): reads past its window of open files, short and missing
files."""

import os

import numpy as np
import pytest

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("window", [3, 64, 200])
def test_the_reader_reads_past_its_window_and_names_a_short_file(tmp_path, monkeypatch, window):
    """kvikio's reads past the window of open files (each waiting for the oldest in flight) land
    where the layout puts them, byte for byte, whether the reads fill one window or many (``submit``
    returns with the first window under way, ``result`` finishes them); a file shorter than its range
    fails after its retries, naming it (kvikio's own error names no file), a file gone since it was
    located raises FileNotFoundError naming it, and every file the reader opened is closed, reads left
    pending by a caller's error too."""
    import cupy as cp
    import dask

    from zarr_dask_gpu.gpu.readers import local as reader
    from zarr_dask_gpu.storage.units import Range

    monkeypatch.setattr(reader, "_WINDOW", window)
    rng = np.random.default_rng(5)
    ranges: list = []
    for i in range(150):
        data = rng.integers(0, 256, int(rng.integers(1, 40_000)), dtype=np.uint8).tobytes()
        (tmp_path / f"f{i}").write_bytes(b"pad" + data)
        ranges.append(Range(str(tmp_path / f"f{i}"), 3, len(data)))
    ranges.insert(7, None)  # a missing chunk reads nothing
    short = list(ranges)
    short[100] = Range(short[100].path, 3, short[100].size + 1)
    why = rf"failed after 2 attempts: .*short read of .*{os.path.basename(short[100].path)}:"
    # kvikio's reads however small (not the host's preads), one retry
    settings = {"host-read-below": 0, "io-retries": 1, "io-retry-delay": 0.001}
    with dask.config.set({f"zarr_dask_gpu.{k}": v for k, v in settings.items()}):
        with reader.KvikioReader().submit(ranges, align=16) as pending:
            staged = pending.result()
        fds = len(os.listdir("/proc/self/fd"))  # after a first read: kvikio opens its own on first use
        got = cp.asnumpy(staged.buffer)
        for r, at, n in zip(ranges, staged.offsets, staged.sizes, strict=True):
            if r is None:
                assert at == -1 and n == 0
                continue
            assert got[at : at + n].tobytes() == (tmp_path / os.path.basename(r.path)).read_bytes()[3:]
        with pytest.raises(OSError, match=why):
            reader.KvikioReader().read(short)
        with pytest.raises(MemoryError), reader.KvikioReader().submit(ranges, align=16):
            raise MemoryError  # the caller's work between submit and result failed: no read outlives it
        os.unlink(ranges[120].path)  # gone since it was located
        with pytest.raises(FileNotFoundError, match=os.path.basename(ranges[120].path)):
            reader.KvikioReader().read(ranges)
    assert len(os.listdir("/proc/self/fd")) == fds
