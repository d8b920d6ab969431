"""The bench's datasets (A, B, C, D, K, A-large, E, Ez, and the serial streams' Z, Zs, N and L): what
each is, where it lies beside dataset A's path, and how it is written (``sample.write_sample`` or
``sample.write_volume``; reused when complete).

    python3 -m zarr_dask_gpu.bench.datasets B C D   # writes them beside /tmp/bench-a.zarr
"""

import argparse
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from ..testing.sample_stores import write_sample, write_volume

DEFAULT_PATH = "/tmp/bench-a.zarr"
Writer = Callable[[str, int, int], Any]  # (path, nbytes, chunk bytes) -> the zarr array written


def _rows(options: Callable[[], dict[str, Any]] = dict) -> Writer:
    """``write_sample`` with ``options()``'s keywords (codec objects are made when it is written)."""
    return lambda path, nbytes, chunk: write_sample(path, nbytes, chunk, **options())


_PLAIN = _rows()  # write_sample with its own defaults (A's layout)


def _blosc_lz4() -> dict[str, Any]:
    import numcodecs

    return {"zarr_format": 2, "compressors": numcodecs.Blosc("lz4", shuffle=numcodecs.Blosc.SHUFFLE)}


def _zlib(shuffle: bool) -> Callable[[], dict[str, Any]]:
    """numcodecs' zlib at level 4 as a zarr v3 codec, after its byte shuffle where ``shuffle`` (netCDF4's
    chain, as VirtualiZarr writes it to Icechunk); v3, so that zarr-python's ``enable_gpu()`` reads it
    (its numcodecs v2 codecs refuse device buffers)."""

    def options() -> dict[str, Any]:
        from zarr.codecs import numcodecs as nz3

        return {"compressors": [*([nz3.Shuffle(elementsize=4)] if shuffle else []), nz3.Zlib(level=4)]}

    return options


def _lz4() -> dict[str, Any]:
    import numcodecs

    return {"zarr_format": 2, "compressors": numcodecs.LZ4()}  # a whole chunk as one lz4 block


def _zstd_checksums() -> dict[str, Any]:
    from zarr.codecs import ZstdCodec

    return {"compressors": ZstdCodec(checksum=True)}


def _czarr_volume(path: str, nbytes: int, chunk: int) -> Any:
    from zarr.codecs import BloscCodec

    codec = BloscCodec(cname="zstd", clevel=1, shuffle="bitshuffle", typesize=2)
    return write_volume(path, nbytes, chunk, dtype="f2", noise=0.01, compressors=codec)


def _zstd_volume(path: str, nbytes: int, chunk: int) -> Any:
    from zarr.codecs import ZstdCodec

    return write_volume(path, nbytes, chunk, dtype="f4", noise=1.0, decimals=3, compressors=ZstdCodec())


@dataclass(frozen=True)
class Dataset:
    """One dataset: ``fraction`` of ``--gib``, chunks of ``chunk_bytes`` (None: ``--chunk-mib``), at
    ``--path`` with ``suffix`` appended, written by ``writer``. ``codec`` is what its chunks are
    ("zstd", "zlib", "lz4", "blosc-lz4", "blosc-zstd") and ``sharded`` whether its files are shards of
    them: the rows that need either (``rows.NEEDS``) are left out for the others."""

    name: str
    about: str
    suffix: str = ""
    fraction: float = 1.0
    chunk_bytes: int | None = None
    codec: str = "zstd"
    sharded: bool = False
    writer: Writer = _PLAIN


DATASETS = {
    d.name: d
    for d in (
        Dataset("A", "float32 in --chunk-mib chunks (8 MiB: about 2.6 MB zstd each), zarr v3"),
        Dataset("B", "a quarter of A's size in 256 KiB chunks: many small files", "-B", 0.25, 256 << 10),
        Dataset(
            "C",
            "1 MiB chunks in 256 MiB shards",
            "-C",
            1.0,
            1 << 20,
            sharded=True,
            writer=_rows(lambda: {"shard_bytes": 256 << 20}),
        ),
        Dataset(
            "D",
            "zarr v2, blosc lz4 with byte shuffle, 8 MiB chunks",
            "-D",
            1.0,
            8 << 20,
            "blosc-lz4",
            writer=_rows(_blosc_lz4),
        ),
        Dataset(
            "K",
            "A's data and chunks, each zstd frame with its content checksum (XXH64)",
            "-K",
            1.0,
            writer=_rows(_zstd_checksums),
        ),
        Dataset("A-large", "A's layout at 4x --gib (16 GiB: 2048 chunks of 8 MiB)", "-large", 4.0),
        Dataset(
            "Z",
            "A's values, half its size, numcodecs zlib level 4 (zarr v3)",
            "-Z",
            0.5,
            None,
            "zlib",
            writer=_rows(_zlib(False)),
        ),
        Dataset(
            "Zs",
            "Z with numcodecs' byte shuffle before zlib",
            "-Zs",
            0.5,
            None,
            "zlib",
            writer=_rows(_zlib(True)),
        ),
        Dataset(
            "N",
            "netCDF4's layout as zarr: 1 MiB chunks, byte shuffle and zlib level 4, half of --gib (dataset "
            "V is the same as a netCDF4 file)",
            "-N",
            0.5,
            1 << 20,
            "zlib",
            writer=_rows(_zlib(True)),
        ),
        Dataset(
            "L",
            "A's values, a quarter of its size, zarr v2 numcodecs lz4 (a chunk is one lz4 block)",
            "-L",
            0.25,
            None,
            "lz4",
            writer=_rows(_lz4),
        ),
        Dataset(
            "E",
            "czarr's layout: float16 (n, 1024, 1024), blosc zstd clevel 1 bitshuffle, chunks of 256 MiB "
            "(8 at --gib 4), zarr v3",
            "-E",
            0.5,
            256 << 20,
            "blosc-zstd",
            writer=_czarr_volume,
        ),
        Dataset(
            "Ez",
            "float32 (n, 1024, 1024), plain zstd (ratio about 1.27), chunks of 256 MiB (8 at --gib 4)",
            "-Ez",
            0.5,
            256 << 20,
            writer=_zstd_volume,
        ),
    )
}
# the CPU run's: A's kind, an eighth of --gib
CPU = Dataset("cpu", "float32 in --chunk-mib chunks, an eighth of --gib (the CPU run)", "-cpu", 1 / 8)


def path(name: str, base: str = DEFAULT_PATH) -> str:
    """Where dataset ``name`` lies when A lies at ``base``."""
    return base + _get(name).suffix


def write(name: str, base: str = DEFAULT_PATH, gib: float = 4.0, chunk_mib: int = 8) -> Any:
    """Dataset ``name`` as a zarr array, written first unless a complete one is there."""
    d = _get(name)
    nbytes = int(int(gib * 2**30) * d.fraction)
    chunk = d.chunk_bytes if d.chunk_bytes is not None else chunk_mib << 20
    return d.writer(path(name, base), nbytes, chunk)


def chunk_files(store: str) -> list[str]:
    """Every chunk (or shard) file of an array: all files but its metadata documents."""
    out = []
    for root, _, files in os.walk(store):
        out += [os.path.join(root, f) for f in files if not f.startswith(".z") and f != "zarr.json"]
    return sorted(out)


def _get(name: str) -> Dataset:
    if name == CPU.name:
        return CPU
    if name not in DATASETS:
        raise ValueError(f"unknown dataset {name!r}: {', '.join(DATASETS)}")
    return DATASETS[name]


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description="write the bench's datasets (reused when complete)")
    p.add_argument("names", nargs="+", choices=list(DATASETS))
    p.add_argument("--path", default=DEFAULT_PATH, help="dataset A's path; the others lie beside it")
    p.add_argument("--gib", type=float, default=4.0)
    p.add_argument("--chunk-mib", type=int, default=8)
    args = p.parse_args(argv)
    for name in args.names:
        a = write(name, args.path, args.gib, args.chunk_mib)
        print(f"{name}: {path(name, args.path)} {a.shape} chunks {a.chunks} shards {a.shards}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
