"""Configuration defaults, under dask.config's ``zarr_dask_gpu`` namespace.

Each key can be set with ``dask.config.set({"zarr_dask_gpu.<key>": value})`` or the environment
variable ``DASK_ZARR_DASK_GPU__<KEY>`` (dask's convention).
"""

import os
from typing import Any

import dask.config
from dask.utils import parse_bytes

DEFAULTS: dict[str, Any] = {
    # target size of one dask block when chunks=None ("auto"): many zarr chunks per task; None: 1 GiB
    # on the GPU (more chunks in each decode call, fewer tasks' fixed costs), 256 MiB on the CPU
    "block-size": None,
    # on the GPU, default blocks are made smaller (down to 32 MiB) until an array has this many, so
    # that reads and decodes of several tasks overlap (a 1 GiB array: 4 blocks of 256 MiB)
    "gpu-min-blocks": 4,
    # raise MissingChunkError instead of filling absent chunks with the fill value
    "strict": False,
    # threads a task uses for host preads (CPU mode, and the GPU path's small files: native threads,
    # at least four files each) and for CPU decode; 0 means os.cpu_count()
    "cpu-threads": 0,
    # kvikio IO threads per process on the GPU path; 0 means os.cpu_count()
    "kvikio-threads": 0,
    # decoded bytes per nvCOMP call (None: a task's whole batch in one call); nvCOMP's zstd scratch is
    # about 1.5x the bytes a call decodes, so this bounds a task's device memory at some cost in speed
    "decode-call-bytes": None,
    # on the GPU path, a task's local reads smaller than this on average (after merging ranges) are
    # POSIX preads into pinned host memory and one copy, not kvikio device preads; 0 turns it off
    "host-read-below": "1MiB",
    # where a GPU task's compressed chunks are staged for the kernels: "device" memory, or pinned
    # "host" memory the kernels read over the bus (a task's device memory is then block + scratch)
    "staging": "device",
    # the nvCOMP calls of a device's tasks decoding at once are joined into one call, made once every
    # task then decoding has read and checked its chunks: nvCOMP decodes a chunk per thread block, so
    # one call of many tasks' chunks ends sooner than as many concurrent calls
    "coalesce-decodes": True,
    # ... and a joined call is made once this many tasks' calls are ready (0: once every task then
    # decoding is), so that a worker streaming many tasks decodes some while the next ones read: as
    # many as read at once (read-slots). H200, 17 GB array, one GPU: 22.25 against 18.30 GB/s with 4
    # (256 MiB blocks); with 1 GiB blocks, 2 with read-slots 2 (docs/performance.md)
    "coalesce-tasks": 2,
    # ... and a task's call waits at most this long for the others' (None: no bound): on a cold disk
    # its partner may read 65-113 ms longer, and their late joined call (A: 256 chunks, 70 ms) ends
    # later than the partner's own (128 chunks, 52 ms); warm, the two finish their reads together
    "coalesce-wait": "10ms",
    # how the GPU path decodes zstd: "blocks" (this package's kernels: bounded on damaged frames, a
    # frame's zstd blocks decoded at once, content checksums verified) or "nvcomp" (nvCOMP's decoder,
    # a frame per thread block; it reads out of bounds on some damaged frames: trusted data only)
    "zstd-decoder": "blocks",
    # tasks of a process reading at once on the GPU path (0: all): fewer finish their reads sooner
    # and decode while the others read; with four 1 GiB tasks, two pairs: A 26.7 GB/s and cold reads
    # at 1.00 of the raw rate x ratio, against 23.9 and 0.88 with 4 (H200, docs/performance.md)
    "read-slots": 2,
    # how the GPU path reads remote chunks: "auto" (kvikio.RemoteFile for HTTP(S) and S3 where this
    # kvikio has remote support, else fsspec), "kvikio" or "fsspec" (host requests, one copy)
    "remote-io": "auto",
    # transient IO errors (EIO, EAGAIN, a short read) are retried this often, backing off from the delay
    "io-retries": 3,
    "io-retry-delay": 0.05,
    # verify checksums on the GPU: the v3 crc32c codec's and zstd frames' content checksums (XXH64);
    # zarr-python always verifies both on the CPU
    "verify-checksums": True,
    # ranges of one file (inner chunks of a shard) closer than this are read in one pread ...
    "coalesce-gap": "1MiB",
    # ... of at most this many bytes
    "coalesce-limit": "256MiB",
    # test-only: chunk keys ("c/1/2", or "<array path>/c/1/2") whose decode faults, a real sticky CUDA
    # fault on the GPU and a simulated one on the CPU, to exercise the containment (containment.py)
    "testing-fault-keys": None,
}

dask.config.update_defaults({"zarr_dask_gpu": DEFAULTS})


def get(key: str) -> Any:
    """Return the configured value of ``zarr_dask_gpu.<key>``."""
    return dask.config.get(f"zarr_dask_gpu.{key}")


def choice(key: str, allowed: tuple[str, ...]) -> str:
    """The configured value of ``zarr_dask_gpu.<key>``, one of ``allowed``.

    Raises
    ------
    ValueError
        The value is none of ``allowed`` (a misspelt mode would otherwise pass for the default).
    """
    value = get(key)
    if value not in allowed:
        raise ValueError(
            f"zarr_dask_gpu.{key} is {value!r}; it must be one of {', '.join(map(repr, allowed))}"
        )
    return value


def cpu_threads() -> int:
    """``cpu-threads``, or the machine's cores."""
    return get("cpu-threads") or os.cpu_count() or 1


def block_size(device: str) -> int:
    """``block-size`` in bytes; unset, 1 GiB on the GPU (H200, dataset A: 25.3 against 22.1 GB/s
    with 256 MiB, docs/performance.md) and 256 MiB on the CPU."""
    size = get("block-size")
    return parse_bytes(size) if size is not None else (1 << 30 if device == "gpu" else 256 << 20)
