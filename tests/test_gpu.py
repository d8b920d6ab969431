"""GPU-only behaviour: the structure-check kernel, concurrent tasks, device-resident results."""

import os
import sys

import numcodecs
import numpy as np
import pytest
import zarr

from zarr_dask_gpu import from_zarr_gpu
from zarr_dask_gpu.codecs import compressions

from .conftest import host, lz4_fuzz, sample

pytestmark = pytest.mark.gpu

CODECS = {"zstd": numcodecs.Zstd(1), "lz4": numcodecs.LZ4()}  # the kinds validate.py checks


@pytest.mark.parametrize("compression", list(CODECS))
def test_kernel_agrees_with_host_checks(compression):
    import cupy as cp

    from zarr_dask_gpu.gpu.validate import check_batch

    codec = CODECS[compression]
    raw = sample((1 << 16,), "f4").tobytes()
    good = bytes(codec.encode(raw))
    rng = np.random.default_rng(2)
    frames = {
        "good": good,
        "half": good[: len(good) // 2],
        "empty": b"",
        "garbage": rng.integers(0, 256, len(good), dtype=np.uint8).tobytes(),
        "larger": bytes(codec.encode(raw * 2)),
        "smaller": bytes(codec.encode(raw[: len(raw) // 2])),
    }
    names = list(frames)
    offsets = np.cumsum([0, *[len(frames[k]) for k in names]])[:-1]
    buf = cp.asarray(np.frombuffer(b"".join(frames.values()) + b"\0", dtype=np.uint8))
    sizes = np.array([len(frames[k]) for k in names])
    bad = dict(check_batch(buf, offsets, sizes, compression, len(raw)))
    assert check_batch(buf, offsets[:1], sizes[:1], compression, len(raw)) == []
    for i, k in enumerate(names):
        host_says = compressions.check(compression, frames[k], len(raw))
        if k == "good":
            assert i not in bad and host_says is None
        elif host_says is not None:  # what the host can tell from headers, the kernel tells too
            assert i in bad, (k, host_says)
    if compression in ("zstd", "lz4"):
        assert set(bad) == {1, 2, 3, 4, 5}  # every damaged frame is stopped before nvCOMP


def test_transfers_by_kernels_over_the_bus_round_trip():
    """``transfer.upload`` and ``transfer.read`` (kernels through mapped pinned memory) give back what
    went in, columns of mixed dtypes converted each on its own, empty ones included, on the stream
    they are given."""
    import cupy as cp

    from zarr_dask_gpu.gpu import transfer

    stream = cp.cuda.Stream(non_blocking=True)
    big = np.array([2**63 + 5, 7], np.uint64)
    with stream:
        up, pinned = transfer.upload([np.arange(5, dtype=np.int64), big, np.zeros(0, np.int32)], np.uint64)
        back = transfer.read(up, stream)
        del pinned
        assert back.tolist() == [0, 1, 2, 3, 4, 2**63 + 5, 7]
        grid = cp.arange(24, dtype=np.int32).reshape(2, 3, 4)
        assert np.array_equal(transfer.read(grid, stream), np.arange(24, dtype=np.int32).reshape(2, 3, 4))
        empty, _ = transfer.upload([np.zeros(0, np.int64)], np.int64)
        assert empty.size == 0 and transfer.read(empty, stream).size == 0


def test_the_warps_lz4_walk_agrees_with_one_threads():
    """``validate_lz4`` (a warp per stream: lanes parse candidate sequences, shuffles chain them)
    gives every fuzzed stream the status of one thread walking it sequence by sequence."""
    import cupy as cp

    from zarr_dask_gpu.gpu import validate

    frames = lz4_fuzz(7, 3000)
    sizes = np.array([len(f) for f, _ in frames], dtype=np.int64)
    offsets = np.cumsum([0, *(sizes + np.arange(len(frames)) % 16)])[:-1]  # misaligned starts too
    host_buf = np.zeros(int(offsets[-1] + sizes[-1] + 16), dtype=np.uint8)
    for (f, _), at in zip(frames, offsets, strict=True):
        host_buf[at : at + len(f)] = np.frombuffer(f, np.uint8)
    buf, expected = cp.asarray(host_buf), np.array([n for _, n in frames], dtype=np.int64)
    n = len(frames)
    status = {}
    for name, threads in (("validate", n), ("validate_lz4", 32 * n)):  # a thread or a warp each
        st, claimed = cp.full(n, -1, dtype=np.int32), cp.empty(n, dtype=np.int64)
        args = (buf, cp.asarray(offsets), cp.asarray(sizes), np.int32(5), cp.asarray(expected))
        validate._kernel(name)(((threads + 127) // 128,), (128,), (*args, st, claimed, np.int32(n)))
        status[name] = st.get()
    np.testing.assert_array_equal(status["validate_lz4"], status["validate"])
    assert set(status["validate"].tolist()) == {0, 1, 3}
    assert (status["validate"][::3] == 0).all()  # the sound third


def test_blocks_stay_on_device_and_threads_decode_concurrently(tmp_path):
    import cupy as cp
    import dask

    a = zarr.create_array(tmp_path / "a.zarr", shape=(256, 4096), chunks=(8, 4096), dtype="f4")
    a[...] = sample(a.shape, "f4")
    x = from_zarr_gpu(tmp_path / "a.zarr", chunks=(16, 4096), device="gpu")
    with dask.config.set(scheduler="threads", num_workers=8):
        for _ in range(3):  # many tasks at once, each thread with its own stream and codec
            y = x.persist()
            blocks = [b.compute(scheduler="sync") for b in y.blocks]
            assert all(isinstance(b, cp.ndarray) for b in blocks)
            np.testing.assert_array_equal(host(y.compute()), a[...])


def test_large_batch_in_one_task(tmp_path):
    import dask

    a = zarr.create_array(tmp_path / "a.zarr", shape=(512, 2048), chunks=(1, 2048), dtype="i8")
    a[...] = sample(a.shape, "i8")
    x = from_zarr_gpu(tmp_path / "a.zarr", chunks=-1, device="gpu")  # 512 chunks, one decode call
    np.testing.assert_array_equal(host(x.compute()), a[...])
    with dask.config.set({"zarr_dask_gpu.decode-call-bytes": "1MB"}):  # 61 calls of 8 or 9 chunks
        np.testing.assert_array_equal(host(x.compute()), a[...])


@pytest.mark.parametrize(
    "call_bytes,read_slots,staging,host_below,coalesce,tasks,wait",
    [
        (None, 0, "device", "1MiB", True, 0, None),
        (None, 0, "device", "1MiB", True, 0, "10ms"),
        (None, 0, "device", "1MiB", True, 4, 0),
        (None, 0, "device", "1MiB", False, 0, None),
        ("64KiB", 0, "device", "1MiB", True, 0, "1ms"),
        (None, 2, "device", "1MiB", True, 1, "10ms"),
        (None, 4, "host", "1MiB", True, 4, None),
        (None, 4, "host", 0, True, 3, "10ms"),
    ],
)
def test_concurrent_tasks_of_several_codecs_read_correctly(
    tmp_path, call_bytes, read_slots, staging, host_below, coalesce, tasks, wait
):
    """Tasks of arrays with different codecs (raw and blosc among them) and chunk sizes run at once,
    each on its own stream, with their nvCOMP calls joined (of every task decoding at once, or of
    at most ``coalesce-tasks``, waiting for the others at most ``coalesce-wait``) or each task's
    own, a task's batch in one call or split into calls of about one chunk, with all tasks or two
    at a time reading, and with
    the compressed chunks staged in device memory or in pinned host memory (POSIX or kvikio reads)
    the kernels read over the bus, held until each task's stream is done; every block must still be
    its own."""
    from concurrent.futures import ThreadPoolExecutor

    import dask

    arrays = {}
    for i, (name, codec) in enumerate(
        [
            ("zstd", numcodecs.Zstd(1)),
            ("lz4", numcodecs.LZ4()),
            ("z2", numcodecs.Zstd(3)),
            ("raw", None),
            ("blosc", numcodecs.Blosc("lz4", shuffle=numcodecs.Blosc.SHUFFLE)),
        ]
    ):
        a = zarr.create_array(
            tmp_path / f"{name}.zarr",
            shape=(96, 3000),
            chunks=(4 + i, 3000),
            dtype="f4",
            zarr_format=2,
            compressors=codec,
        )
        a[...] = sample(a.shape, "f4", seed=i)
        arrays[name] = (a, from_zarr_gpu(tmp_path / f"{name}.zarr", chunks=(12, 3000), device="gpu"))
    settings = {
        "decode-call-bytes": call_bytes,
        "read-slots": read_slots,
        "staging": staging,
        "host-read-below": host_below,
        "coalesce-decodes": coalesce,
        "coalesce-tasks": tasks,
        "coalesce-wait": wait,
    }
    with dask.config.set({f"zarr_dask_gpu.{k}": v for k, v in settings.items()}):

        def read(name: str) -> None:
            a, x = arrays[name]
            np.testing.assert_array_equal(host(x.compute(scheduler="threads", num_workers=8)), a[...])

        with ThreadPoolExecutor(6) as ex:
            list(ex.map(read, list(arrays) * 4))


def test_tasks_decoding_at_once_share_one_nvcomp_call(tmp_path, monkeypatch):
    """With ``coalesce-decodes`` five tasks decoding at once make one call of their 20 chunks, each
    task still getting its own values, and the fifth, with a damaged chunk (the zstd kernels judge it
    in the joined call), its own error naming the key. With ``coalesce-tasks`` 2 they make calls of
    two tasks each, without waiting for a task still on its way; with the setting off each makes its
    own. With ``coalesce-wait`` the task on its way holds them up no longer than that. With
    ``coalesce-below`` at the chunks' size (64 KiB) each makes its own call, held by no one."""
    import time
    from concurrent.futures import ThreadPoolExecutor

    import dask

    from zarr_dask_gpu.errors import ChunkDecodeError
    from zarr_dask_gpu.gpu import decompress, joined

    for name in ("a", "b"):
        z = zarr.create_array(tmp_path / f"{name}.zarr", shape=(64, 4096), chunks=(4, 4096), dtype="f4")
        z[...] = sample(z.shape, "f4")
    bad = tmp_path / "b.zarr" / "c" / "1" / "0"
    bad.write_bytes(bad.read_bytes()[:-7])
    want = zarr.open_array(tmp_path / "a.zarr")[...]
    x = from_zarr_gpu(tmp_path / "a.zarr", chunks=(16, 4096), device="gpu")  # 4 blocks of 4 chunks
    damaged = from_zarr_gpu(tmp_path / "b.zarr", chunks=(16, 4096), device="gpu").blocks[0]
    x.blocks[0].compute(scheduler="sync")  # kernels compiled before the timed wait below
    calls: list[int] = []
    launch = decompress.launch

    def counted(compression, src, *args):  # the real nvCOMP call, counted
        calls.append(len(src))
        return launch(compression, src, *args)

    monkeypatch.setattr(decompress, "launch", counted)
    for coalesce, most, patience, below, sizes in (
        (True, 0, None, "64MiB", [20]),
        (True, 2, None, "64MiB", [4, 8, 8]),
        (False, 0, None, "64MiB", [4, 4, 4, 4, 4]),
        (True, 0, "10ms", "64MiB", None),
        (True, 0, None, "64KiB", [4, 4, 4, 4, 4]),
    ):
        calls.clear()
        settings = {
            "zarr_dask_gpu.coalesce-decodes": coalesce,
            "zarr_dask_gpu.coalesce-tasks": most,
            "zarr_dask_gpu.coalesce-wait": patience,
            "zarr_dask_gpu.coalesce-below": below,
        }
        with dask.config.set(settings), ThreadPoolExecutor(5) as ex:
            with joined.member():  # a task on its way: a joined call of every task waits for it
                futures = [
                    ex.submit(lambda i: host(x.blocks[i].compute(scheduler="sync")), i) for i in range(4)
                ]
                broken = ex.submit(damaged.compute, scheduler="sync")
                time.sleep(2)  # the five read and wait
                # held up only when joined calls wait, unbounded, for a task on its way: every task,
                # or the odd one out of the pairs
                done = all(f.done() for f in [*futures, broken])
                joining = coalesce and below == "64MiB"
                assert done != (joining and patience is None and (not most or 5 % most != 0))
            np.testing.assert_array_equal(np.concatenate([f.result() for f in futures]), want)
            with pytest.raises(ChunkDecodeError, match="c/1/0"):
                broken.result()
        assert sorted(calls) == sizes if sizes is not None else sum(calls) == 20


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


@pytest.mark.parametrize("call_bytes", [None, "64MiB"])
def test_a_task_peak_device_memory_stays_within_3x_its_block(tmp_path, call_bytes):
    """Staging, block and nvCOMP's scratch (all from cupy's pool) of one 256 MiB task of the
    benchmark's data (8 MiB zstd chunks): at most 3x the block with one nvCOMP call, less with
    ``decode-call-bytes``. The pool's held bytes after a fresh start bound the task's peak."""
    import cupy as cp
    import dask

    from zarr_dask_gpu.resolve import open_array_info
    from zarr_dask_gpu.sample import write_sample
    from zarr_dask_gpu.task import read_region

    a = write_sample(str(tmp_path / "a.zarr"), 256 << 20, 8 << 20)
    info = open_array_info(str(tmp_path / "a.zarr"))
    pool = cp.get_default_memory_pool()
    read_region(info, (0, 0), a.chunks, "gpu", False)  # warm: kernels compiled, stream made
    with dask.config.set({"zarr_dask_gpu.decode-call-bytes": call_bytes}):
        cp.cuda.Device().synchronize()
        pool.free_all_blocks()
        before = pool.total_bytes()
        block = read_region(info, (0, 0), a.shape, "gpu", False)
        cp.cuda.Device().synchronize()
        peak = (pool.total_bytes() - before) / block.nbytes
    np.testing.assert_array_equal(block.get(), a[...])
    assert peak <= (3.0 if call_bytes is None else 2.2), peak


@pytest.mark.parametrize("host_below", ["1MiB", 0])  # the host's preads, kvikio's
def test_a_task_makes_its_block_once_its_chunks_are_read(tmp_path, host_below):
    """The GPU backend calls a block's ``make_out`` once, while the block's reads are under way (inside
    their span: tasks waiting for a read slot hold no block yet), and fills and returns the block it
    made."""
    import time

    import cupy as cp
    import dask

    from zarr_dask_gpu import phases
    from zarr_dask_gpu.plan import block_pieces
    from zarr_dask_gpu.resolve import open_array_info
    from zarr_dask_gpu.task import get_backend

    a = zarr.create_array(tmp_path / "a.zarr", shape=(64, 4096), chunks=(8, 4096), dtype="f4")
    a[...] = sample(a.shape, "f4")
    info = open_array_info(str(tmp_path / "a.zarr"))
    made: list = []

    def make():
        made.append((time.perf_counter(), cp.empty(a.shape, dtype=a.dtype)))
        return made[-1][1]

    backend = get_backend("gpu")
    with (
        dask.config.set({"zarr_dask_gpu.host-read-below": host_below}),
        phases.collect() as spans,
        backend.context(),
    ):
        [(out, stored)] = backend.decode_many([(info, block_pieces((0, 0), a.shape, info.chunks), make)])
    [(when, block)] = made
    [read] = [s for s in spans if s.name == "read"]
    assert read.start <= when <= read.end
    assert out is block and all(stored)
    np.testing.assert_array_equal(out.get(), a[...])


def test_a_task_keeps_none_of_its_device_memory_once_it_ends(tmp_path):
    """A block computed and dropped leaves none of its task's device memory in use: the thread that
    ran the task keeps no reference to its block (the chunks its errors name) until its next task."""
    import cupy as cp

    from zarr_dask_gpu.sample import write_sample

    a = write_sample(str(tmp_path / "a.zarr"), 64 << 20, 8 << 20)
    x = from_zarr_gpu(str(tmp_path / "a.zarr"))
    pool = cp.get_default_memory_pool()
    cp.cuda.Device().synchronize()
    before = pool.used_bytes()
    z = x.blocks[0, 0].compute(scheduler="sync")
    nbytes = z.nbytes
    np.testing.assert_array_equal(z.get(), a[: z.shape[0]])
    del z
    cp.cuda.Device().synchronize()
    assert pool.used_bytes() - before < nbytes // 4, (pool.used_bytes() - before) / nbytes


def test_task_streams_have_a_higher_priority_than_the_joined_calls():
    """A task's stream has a higher priority (a lower number) than the streams of joined decode calls;
    inside ``task_priority`` the task streams are made anew at the priority given, and after it again
    at their own."""
    from zarr_dask_gpu.gpu import streams

    with streams.joining_stream() as joined:
        mine = streams.task_stream()
        assert mine.priority < joined.priority
        with streams.task_priority(streams.JOINED_PRIORITY):
            assert streams.task_stream().priority == joined.priority
        again = streams.task_stream()
        assert again.priority == mine.priority and again is not mine


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


@pytest.mark.parametrize("window", [3, 64, 200])
def test_the_reader_reads_past_its_window_and_names_a_short_file(tmp_path, monkeypatch, window):
    """kvikio's reads past the window of open files (each waiting for the oldest in flight) land
    where the layout puts them, byte for byte, and the caller's ``meanwhile`` runs once, whether the
    reads fill one window or many; a file shorter than its range fails after its retries,
    naming it (kvikio's own error names no file), a file gone since it was located raises
    FileNotFoundError naming it, and every file the reader opened is closed."""
    import cupy as cp
    import dask

    from zarr_dask_gpu.gpu import reader
    from zarr_dask_gpu.storage import Range

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
        calls: list[int] = []
        staged = reader.KvikioReader().read(ranges, align=16, meanwhile=lambda: calls.append(1))
        assert calls == [1]
        fds = len(os.listdir("/proc/self/fd"))  # after a first read: kvikio opens its own on first use
        got = cp.asnumpy(staged.buffer)
        for r, at, n in zip(ranges, staged.offsets, staged.sizes, strict=True):
            if r is None:
                assert at == -1 and n == 0
                continue
            assert got[at : at + n].tobytes() == (tmp_path / os.path.basename(r.path)).read_bytes()[3:]
        with pytest.raises(OSError, match=why):
            reader.KvikioReader().read(short)
        os.unlink(ranges[120].path)  # gone since it was located
        with pytest.raises(FileNotFoundError, match=os.path.basename(ranges[120].path)):
            reader.KvikioReader().read(ranges)
    assert len(os.listdir("/proc/self/fd")) == fds


@pytest.mark.parametrize(
    "dtype,shuffle,blocksize", [("i2", 2, 16384), ("f8", 1, 65536), ("f4", 2, 65536), ("u2", 1, 8192)]
)
def test_blosc_blocks_unshuffled_in_place_read_as_zarr_does(tmp_path, dtype, shuffle, blocksize):
    """Blosc blocks of 64 KiB or less are unshuffled in place through shared memory (``gpu/blosc.py``):
    small enough for racecheck (scripts/gpu_check.sh), and each block must read as zarr-python's."""
    a = zarr.create_array(
        tmp_path / "a.zarr",
        shape=(16, 8192),
        chunks=(4, 8192),
        dtype=dtype,
        zarr_format=2,
        compressors=numcodecs.Blosc("lz4", shuffle=shuffle, blocksize=blocksize),
    )
    a[...] = sample(a.shape, dtype, seed=blocksize)
    x = from_zarr_gpu(tmp_path / "a.zarr", device="gpu")
    np.testing.assert_array_equal(host(x.compute(scheduler="sync")), a[...])
