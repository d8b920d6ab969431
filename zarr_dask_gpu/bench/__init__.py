"""``zarr-dask-gpu bench`` and the helpers of the scripts in ``benchmarks/``.

- ``datasets``: the bench's datasets (A, B, C, D, K, A-large, E, Ez), their paths and how they are
  written;
- ``rows``: the GPU run's rows as a table (name, settings, dataset, kind, ``--skip`` key);
- ``run``: the command (``add_arguments``, ``main``), the CPU run, the GPU run reading the table,
  the chart;
- ``timing``: timed and interleaved passes, the page cache warmed or dropped, GPU passes;
- ``ceilings``: kvikio's raw read, one batched zstd decode, one batched decode of every blosc inner
  stream, the host-to-device copy.

Nothing here imports cupy, kvikio or nvCOMP at module level: the CPU run needs none of them.
"""

from .ceilings import kvikio_read_all
from .datasets import chunk_files
from .run import add_arguments, main
from .timing import drop_cache, interleaved, timed, warm_cache

__all__ = [
    "add_arguments",
    "chunk_files",
    "drop_cache",
    "interleaved",
    "kvikio_read_all",
    "main",
    "timed",
    "warm_cache",
]
