"""The GPU bench's rows as data: each row's name (its key in ``--json``), the settings its passes run
under, its dataset, how it is measured and the ``--skip`` key that leaves it out. ``run.py`` reads the
table; docs and earlier results name the rows by these strings, so a name changes only with its
measurement.

Names are templates: ``{threads}`` is the row's thread count, ``{label}`` its settings as
``key=value, ...``, ``{dataset}`` its dataset, ``{kvikio_threads}`` kvikio's thread count and
``{chunks}`` the dataset's chunk files. ``OTHER_STAGING`` stands for the ``staging`` setting that is
not the default, for a row beside the default's.
"""

from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from .datasets import Dataset

OTHER_STAGING = "<the other staging>"
EACH = "each"  # a row of every dataset of --datasets but A, in turn
# how rows are measured (run.py's MEASURES): a from_zarr_gpu persist from an empty cupy pool (emptied
# before each pass, untimed; the release's median ms under RELEASE_KEY) or the pool kept, on a
# one-worker LocalCUDACluster, the peers (each pass from an empty pool), the ceilings; cold rows run
# in turns
KINDS = (
    "persist",
    "kept",
    "cluster",
    "zarr-gpu",
    "zarr-cpu",
    "dask",
    "tensorstore",
    "gds",
    "ceiling-read",
    "ceiling-decode",
    "ceiling-blosc",
    "ceiling-h2d",
    "ceiling-stream",
    "host-decode",
    "cold",
    "cold-ceiling",
    "virtual",
    "virtual-peer",
)
RELEASE_KEY = "pool_release_ms"  # a JSON key's prefix: "pool_release_ms, <row>"
COLD_KINDS = ("cold", "cold-ceiling")  # interleaved, the page cache dropped before every pass
SKIP_KEYS = (
    "cluster",
    "zarr-gpu",
    "dask",
    "tensorstore",
    "gds",
    "cold",
    "checksum",
    "variants",
    "stores",
    "virtual",
)
# what a row of EACH may need of a dataset (``Row.needs``): zstd to decode; files that are each one zstd
# frame; files that are each one blosc frame, of zstd streams or of any; files that are each one zlib
# stream or lz4 block
NEEDS: Mapping[str, Callable[[Dataset], bool]] = MappingProxyType(
    {
        "zstd": lambda d: d.codec in ("zstd", "blosc-zstd"),  # chunks or blosc streams
        "zstd-files": lambda d: d.codec == "zstd" and not d.sharded,
        "blosc-files": lambda d: d.codec.startswith("blosc") and not d.sharded,
        "blosc-zstd-files": lambda d: d.codec == "blosc-zstd" and not d.sharded,
        "stream-files": lambda d: d.codec in ("zlib", "lz4") and not d.sharded,
        "deflate": lambda d: d.codec == "zlib",
    }
)


def resolved(settings: Mapping[str, Any], other_staging: str) -> dict[str, Any]:
    """``settings`` with ``OTHER_STAGING`` replaced by ``other_staging``."""
    return {k: other_staging if v == OTHER_STAGING else v for k, v in settings.items()}


@dataclass(frozen=True)
class Row:
    name: str
    kind: str = "persist"
    settings: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))
    dataset: str = "A"
    skip: str | None = None
    threads: str = "T"  # "T": --threads; "2T": twice that; "4": four
    repeat: int | None = None  # passes timed (median); None: --repeat (--cold-repeat for cold rows)
    needs: str | None = None  # of EACH: only datasets that have it (a key of NEEDS)
    may_fail: bool = False  # a peer that cannot read the dataset is a result (printed), not a crash
    store: str | None = None  # the dataset's bytes opened through this store (bench/stores.py), not a path

    def thread_count(self, threads: int) -> int:
        if self.threads.endswith("T"):
            return int(self.threads[:-1] or 1) * threads
        return int(self.threads)

    def resolved(self, other_staging: str) -> dict[str, Any]:
        """Its settings, ``OTHER_STAGING`` replaced by ``other_staging``."""
        return resolved(self.settings, other_staging)

    def title(self, threads: int, other_staging: str, dataset: str | None = None, **fields: Any) -> str:
        """Its name for a run with ``--threads threads`` (on ``dataset``, for an ``EACH`` row)."""
        return self.name.format(
            threads=self.thread_count(threads),
            label=label(self.resolved(other_staging)),
            dataset=dataset or self.dataset,
            **fields,
        )


def label(settings: Mapping[str, Any]) -> str:
    return ", ".join(f"{k}={v}" for k, v in settings.items())


def _s(**settings: Any) -> Mapping[str, Any]:
    """Settings as written in dask's config: ``decode_call_bytes`` is ``decode-call-bytes``."""
    return MappingProxyType({k.replace("_", "-"): v for k, v in settings.items()})


DEFAULT = "from_zarr_gpu().persist(), in-process, {threads} threads"
OURS = "from_zarr_gpu().persist(), {threads} threads, {label}"
ZARR_GPU = "zarr-python enable_gpu()"
NVCOMP_CEILING = "ceiling: nvCOMP batched zstd decode, {chunks} chunks in one call, on device"
KERNELS_CEILING = "this package's zstd kernels: batched zstd decode, {chunks} chunks in one call, on device"
# nvCOMP's batched decode of every compressed inner stream of every blosc frame (the shuffle not undone)
BLOSC_CEILING = "ceiling: nvCOMP, every inner blosc stream in one call, on device"
COLD_DEFAULT = "cold: from_zarr_gpu().persist(), in-process, {threads} threads"
# dataset A's bytes in other stores (bench/stores.py): each row's title, and its ratio to the path's
STORE_TITLES = MappingProxyType(
    {
        "icechunk": "an Icechunk repository on local disk (native chunks)",
        "obstore": "an obstore LocalStore",
        "memory": "a zarr MemoryStore (the store's own get)",
    }
)
STORE_ROW = "A in {store}: from_zarr_gpu().persist(), {{threads}} threads"
# dataset V (bench/stores.py): a netCDF4 file of zlib+shuffle chunks, viewed as zarr by VirtualiZarr
VIRTUAL_DATASET = "V"  # not a zarr dataset of datasets.py: a netCDF4 file (bench/stores.py)
VIRTUAL = "V (netCDF4, zlib+shuffle) through {view}: from_zarr_gpu().persist(), {{threads}} threads"
VIRTUAL_PEER = "V through kerchunk references: xr.open_dataset(engine='zarr') values + cupy.asarray"
COLD_CEILING = "cold: ceiling: kvikio pread (compressed bytes)"


def _blocks(block: str, calls: str | None, threads: str = "T") -> Row:
    """Other block sizes (``gpu-min-blocks`` 1 lets an array of any size have them)."""
    return Row(
        f"from_zarr_gpu().persist(), {{threads}} thr, {block} blocks, calls {calls or 'whole'}",
        settings=_s(block_size=block, gpu_min_blocks=1, decode_call_bytes=calls),
        threads=threads,
        repeat=2,
        skip="variants",
    )


ROWS: tuple[Row, ...] = (
    Row(DEFAULT),
    # every row empties cupy's pool after each pass, so a pass allocates all it uses; a worker that
    # keeps its pool (or an RMM pool) does not: the same read with the pool's memory kept
    Row("same, cupy's pool kept between passes", "kept"),
    # the techniques, each switched off in turn (docs/decisions/README.md)
    *(
        Row(OURS, settings=s, repeat=2, skip="variants")
        for s in (
            _s(zstd_decoder="nvcomp"),  # a frame per thread block, as before this package's zstd kernels
            _s(decode_call_bytes="128MiB"),
            _s(decode_call_bytes="64MiB"),
            _s(read_slots=0),
            _s(read_slots=4, join_tasks=4),  # the defaults before 1 GiB blocks
            _s(join_tasks=0),
            _s(join_wait=None),
            _s(staging=OTHER_STAGING),
            _s(join_decodes=False),  # each task's nvCOMP calls its own, as before coalescing
        )
    ),
    # other block sizes: more, smaller tasks than threads (reads of later tasks overlap decodes of
    # earlier ones, against the default 1 GiB's fewer fixed costs per task:
    # docs/decisions/block-size.md), fewer and larger calls (2 and 4 GiB ask whether one call of all
    # 512 chunks nears the decode ceiling),
    # and bounded memory: a task's nvCOMP scratch about 1.5x its block, kept busy by twice the
    # threads; or 0.76x with 1 GiB blocks in calls of 32 chunks, which keeps as many chunks in flight
    # as the default once the array gives every thread a 1 GiB block (--gib 16 and more)
    _blocks("128MiB", None),
    _blocks("256MiB", None),
    _blocks("2GiB", None),
    _blocks("4GiB", None),
    _blocks("128MiB", "64MiB", "2T"),
    _blocks("1GiB", "256MiB"),
    # the cost of verifying zstd content checksums on the device
    *(
        Row(
            "K (A with zstd checksums): persist(), {label}",
            settings=_s(verify_checksums=v),
            dataset="K",
            skip="checksum",
        )
        for v in (True, False)
    ),
    *(Row(DEFAULT, threads=t, repeat=2, skip="variants") for t in ("1", "4", "8")),
    Row("from_zarr_gpu().persist(), LocalCUDACluster 1 worker, {threads} thr", "cluster", skip="cluster"),
    Row(ZARR_GPU, "zarr-gpu", skip="zarr-gpu", repeat=1),
    Row("dask.array.from_zarr + cupy.asarray (threads)", "dask", skip="dask", repeat=1),
    Row("tensorstore + cupy.asarray", "tensorstore", skip="tensorstore", repeat=1),
    Row("kvikio.zarr.GDSStore + zarr enable_gpu()", "gds", skip="gds", repeat=1),
    # ceilings, on the same chunk files
    Row("ceiling: kvikio pread, {kvikio_threads} threads (compressed bytes)", "ceiling-read"),
    Row(NVCOMP_CEILING, "ceiling-decode", _s(zstd_decoder="nvcomp")),
    Row(KERNELS_CEILING, "ceiling-decode", _s(zstd_decoder="blocks")),
    Row("ceiling: pinned host-to-device copy", "ceiling-h2d"),
    # the same bytes through the stores users keep them in, and a netCDF4 file viewed as zarr
    *(Row(STORE_ROW.format(store=STORE_TITLES[k]), store=k, skip="stores") for k in STORE_TITLES),
    *(
        Row(VIRTUAL.format(view=view), "virtual", store=kind, dataset=VIRTUAL_DATASET, skip="virtual")
        for kind, view in (
            ("kerchunk", "kerchunk references"),
            ("icechunk", "an Icechunk repository of virtual chunks"),
        )
    ),
    Row(VIRTUAL_PEER, "virtual-peer", dataset=VIRTUAL_DATASET, skip="virtual", repeat=1),
    # cold: the page cache dropped for the dataset's files before each pass, untimed
    Row(COLD_CEILING, "cold-ceiling", skip="cold"),
    Row(COLD_DEFAULT, "cold", skip="cold"),
    *(Row(f"cold: {OURS}", "cold", s, skip="cold") for s in (_s(read_slots=0), _s(join_wait=None))),
    # every other dataset of --datasets: ours, the techniques that matter there, zarr-python
    Row("{dataset}: " + DEFAULT, dataset=EACH),
    Row("{dataset}: same, cupy's pool kept between passes", "kept", dataset=EACH),
    *(
        Row("{dataset}: same, {label}", settings=s, dataset=EACH, needs=n, skip="variants")
        for s, n in (
            (_s(zstd_decoder="nvcomp"), "zstd"),  # nvCOMP's decoder, for trusted data only
            (_s(host_read_below=0), None),  # kvikio preads only
            (_s(join_tasks=0), None),  # joined calls of every task then decoding, as before
            (_s(join_wait=None), None),  # a task's call waits for its partner's however long
            (_s(staging=OTHER_STAGING), None),
            (_s(join_decodes=False), None),  # each task's nvCOMP calls its own
        )
    ),
    # its ceilings, on its own chunk files
    Row(
        "{dataset}: ceiling: kvikio pread, {kvikio_threads} threads (compressed bytes)",
        "ceiling-read",
        dataset=EACH,
    ),
    Row(
        "{dataset}: " + NVCOMP_CEILING, "ceiling-decode", _s(zstd_decoder="nvcomp"), EACH, needs="zstd-files"
    ),
    Row(
        "{dataset}: " + KERNELS_CEILING, "ceiling-decode", _s(zstd_decoder="blocks"), EACH, needs="zstd-files"
    ),
    Row("{dataset}: " + BLOSC_CEILING, "ceiling-blosc", _s(zstd_decoder="nvcomp"), EACH, needs="blosc-files"),
    Row(
        "{dataset}: this package's zstd kernels: every inner blosc stream in one call, on device",
        "ceiling-blosc",
        _s(zstd_decoder="blocks"),
        EACH,
        needs="blosc-zstd-files",
    ),
    # this package's inflate kernel, a warp a stream, against the host's cores
    Row("{dataset}: same, {label}", settings=_s(deflate_decoder="kernels"), dataset=EACH, needs="deflate"),
    Row(
        "{dataset}: ceiling: nvCOMP batched Deflate or LZ4, {chunks} streams in one call, on device "
        "(trusted data)",
        "ceiling-stream",
        dataset=EACH,
        needs="stream-files",
    ),
    Row(
        "{dataset}: the host path's decode alone, {chunks} chunks on the pool, into pinned memory",
        "host-decode",
        dataset=EACH,
        needs="stream-files",
    ),
    Row("{dataset}: " + ZARR_GPU, "zarr-gpu", dataset=EACH, repeat=1, may_fail=True),
    Row("{dataset}: zarr-python (CPU) + cupy.asarray", "zarr-cpu", dataset=EACH, repeat=1, may_fail=True),
)
# a task's peak device memory over its block (cupy pool high-water from an empty pool), per settings,
# on A and on these datasets when --datasets names them
TASK_PEAK_DATASETS = ("A-large",)
TASK_PEAKS: tuple[Mapping[str, Any], ...] = (_s(staging=OTHER_STAGING), _s(zstd_decoder="nvcomp"), _s())


def task_peak_key(settings: Mapping[str, Any], dataset: str = "A") -> str:
    return (
        "task_peak_over_block"
        + (f", {label(settings)}" if settings else "")
        + (f", {dataset}" if dataset != "A" else "")
    )


def plan(names: Sequence[str], skip: set[str], datasets: Mapping[str, Dataset]) -> Iterator[tuple[Row, str]]:
    """The rows a run measures, in order, with their datasets: the rows of A (and K), then those of
    ``EACH`` for every other dataset named that has what the row needs (``datasets`` describes
    them); none of ``skip``."""
    for row in ROWS:
        if row.dataset != EACH and row.skip not in skip:
            yield row, row.dataset
    for name in names:
        if name == "A":
            continue
        for row in ROWS:
            if row.dataset != EACH or row.skip in skip:
                continue
            if row.needs is None or NEEDS[row.needs](datasets[name]):
                yield row, name
