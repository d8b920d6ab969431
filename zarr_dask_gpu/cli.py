"""The ``zarr-dask-gpu`` command line: info, read, demo."""

import argparse
import getpass
import json
import os
import sys
import tempfile
import time
from typing import Any

import numpy as np

from . import bench
from .errors import ZarrGpuError


def _config(args: argparse.Namespace) -> int:
    """Every setting (``config.SETTINGS``): its value in this process, its default, what it does."""
    from . import config

    rows = [
        {"key": k, "value": config.get(k), "default": s.default, "what": s.doc}
        for k, s in config.SETTINGS.items()
    ]
    if args.json:
        print(json.dumps(rows, indent=1, default=str))
        return 0
    for r in rows:
        mark = "" if r["value"] == r["default"] else f" (default {r['default']!r})"
        print(f"zarr_dask_gpu.{r['key']} = {r['value']!r}{mark}: {r['what']}")
    return 0


def _info(args: argparse.Namespace) -> int:
    from .codecs.chain import stage_devices
    from .device import missing_gpu, resolve_device
    from .graph import default_block_size
    from .plan import block_chunks
    from .resolve import open_array_info

    info = open_array_info(args.path, args.component)
    chain = info.chain
    device = resolve_device(args.device)
    blocks = block_chunks(
        None, info.shape, info.grid, info.dtype, default_block_size(info, device), info.location
    )
    doc: dict[str, Any] = {
        "path": info.location,
        "zarr_format": info.zarr_format,
        "shape": list(info.shape),
        "dtype": str(info.dtype),
        "chunk_shape": list(info.chunks),
        "shard_shape": list(info.shard.shape) if info.shard else None,
        "chunks": int(np.prod([-(-s // c) for s, c in zip(info.shape, info.chunks, strict=True)])),
        "codecs": list(chain.stages),
        "stages": dict(stage_devices(chain)),
        "device": device,
        "gpu_decode": chain.gpu is not None,
        "cpu_reason": chain.cpu_reason,
        "fill_value": info.fill_value if np.isfinite(info.fill_value) else str(info.fill_value),
        "default_blocks": [c[0] if c else 0 for c in blocks],
    }
    if args.json:
        print(json.dumps(doc, indent=1, default=str))
        return 0
    where = "GPU" if chain.gpu is not None else f"CPU, then copied: {chain.cpu_reason}"
    print(f"{doc['path']}  (zarr v{doc['zarr_format']})")
    print(
        f"  shape        {tuple(info.shape)}  {info.dtype}  "
        f"({np.prod(info.shape) * info.dtype.itemsize / 1e9:.3g} GB)"
    )
    print(f"  chunks       {tuple(info.chunks)}  ({doc['chunks']} in the grid)")
    if info.shard:
        where_index = "start" if info.shard.index_at_start else "end"
        crc = ", crc32c" if info.shard.checksum else ""
        print(f"  shards       {info.shard.shape}  (index at the {where_index}{crc}; inner chunks as ranges)")
    print(f"  codecs       {' -> '.join(chain.stages)}")
    if device == "gpu":
        print(f"  decoded on   {where}")
    else:  # say what this machine does, and what a GPU host would
        why = missing_gpu() if args.device == "auto" else "--device cpu"
        print(f"  decoded on   CPU here, by zarr-python ({why}); on a GPU host: {where}")
    for stage, how in stage_devices(chain):
        print(f"    {stage:22s} {how}")
    print(f"  fill value   {doc['fill_value']}")
    print(f"  dask blocks  {tuple(doc['default_blocks'])} by default on the {device.upper()}")
    return 0


def _timed_read(x: Any, client: Any) -> float:
    """Seconds from the persist to its last task's end (not to the progress display's next poll);
    a task's error is raised here, on a cluster too (``distributed.wait`` does not raise it).
    Progress goes to stderr: stdout is the result (``--json``)."""
    t0 = time.perf_counter()
    if client is None:
        from dask.callbacks import Callback
        from dask.diagnostics import ProgressBar

        ends = [t0]
        ended = Callback(posttask=lambda *_: ends.append(time.perf_counter()))
        with ProgressBar(dt=0.5, out=sys.stderr), ended:
            y = x.persist()
        _sync(x)
        end = ends[-1]  # a task ends once its stream has run: its block is complete
    else:
        from distributed import futures_of, wait

        y = x.persist()
        futures = futures_of(y)
        print(f"reading: {len(futures)} tasks on the cluster", file=sys.stderr, flush=True)
        wait(y)
        end = time.perf_counter()
        for f in futures:
            if f.status == "error":
                f.result()  # raises the task's own error
    del y
    return end - t0


def _sync(x: Any) -> None:
    if type(x._meta).__module__.startswith("cupy"):
        import cupy

        cupy.cuda.Device().synchronize()


def _chunks(text: str | None) -> Any:
    """``--chunks``: a byte size (``512MiB``), ``auto``, or a block shape (``64,100``; -1 for a whole
    axis)."""
    if text is None or ("," not in text and not text.lstrip("-").isdigit()):
        return text
    return tuple(int(v) for v in text.split(","))


def _read(args: argparse.Namespace) -> int:
    from . import from_zarr_gpu
    from .device import resolve_device

    device = resolve_device(args.device)
    x = from_zarr_gpu(args.path, args.component, chunks=_chunks(args.chunks), device=device)
    client = cluster = None
    if args.scheduler_file:
        from distributed import Client

        from .distributed.plugin import GpuReadPlugin

        client = Client(scheduler_file=args.scheduler_file)
        client.register_plugin(GpuReadPlugin())
    elif args.cluster:
        from .distributed.cluster import connect, local_cluster

        cluster = local_cluster(device)
        client = connect(cluster)
    try:
        elapsed = _timed_read(x, client)
    finally:
        if client is not None:
            client.close()
        if cluster is not None:
            cluster.close()
    doc = {
        "path": args.path,
        "device": device,
        "nbytes": int(x.nbytes),
        "tasks": int(x.npartitions),
        "block_shape": [int(c[0]) for c in x.chunks],
        "seconds": elapsed,
        "gb_per_s": x.nbytes / elapsed / 1e9,
    }
    if args.json:
        print(json.dumps(doc, indent=1))
    else:
        print(
            f"read {x.nbytes / 1e9:.3f} GB in {x.npartitions} tasks in {elapsed:.2f} s: "
            f"{doc['gb_per_s']:.2f} GB/s"
        )
    return 0


def _on_host(block: Any) -> Any:
    """A block as numpy (cupy blocks are copied off the device)."""
    return block.get() if hasattr(block, "get") else block


def _demo(args: argparse.Namespace) -> int:
    from . import from_zarr_gpu
    from .device import resolve_device
    from .distributed.cluster import connect, local_cluster
    from .testing.sample_stores import write_sample

    device = resolve_device(args.device)
    path = args.path or os.path.join(tempfile.gettempdir(), f"zarr-dask-gpu-demo-{getpass.getuser()}.zarr")
    t0 = time.perf_counter()
    print(f"writing (or reusing) a {args.size_mib} MiB sample store at {path} ...", flush=True)
    a = write_sample(path, args.size_mib << 20)
    print(
        f"sample store {path}: {a.shape} {a.dtype}, chunks {a.chunks}, zstd "
        f"({time.perf_counter() - t0:.1f} s)"
    )
    with local_cluster(device) as cluster, connect(cluster) as client:
        kind = type(cluster).__name__
        print(f"{kind} with {len(client.scheduler_info()['workers'])} worker(s), device={device}")
        # the first pass warms workers, kernels and the page cache; names differ so none is reused
        print("reading it twice with from_zarr_gpu(...).persist(): the first pass warms up", flush=True)
        passes = [from_zarr_gpu(path, device=device, name=f"demo-read-{i}") for i in range(2)]
        elapsed = [_timed_read(x, client) for x in passes][-1]
        x = passes[-1]
        got = _on_host(x.compute())
    ok = np.array_equal(got, a[...])
    print(f"values equal zarr-python's CPU read: {ok}")
    print(
        f"from_zarr_gpu(...).persist() on {kind}: {x.nbytes / 1e9:.2f} GB in {elapsed:.2f} s = "
        f"{x.nbytes / elapsed / 1e9:.2f} GB/s"
    )
    return 0 if ok else 1


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("zarr-dask-gpu")
    except PackageNotFoundError:  # a source tree that is not installed
        from . import __version__

        return __version__


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="zarr-dask-gpu", description="Read zarr arrays into GPU memory with dask."
    )
    parser.add_argument("--debug", action="store_true", help="show tracebacks")
    parser.add_argument("--version", action="version", version=f"%(prog)s {_version()}")
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser(
        "info",
        help="describe an array: shape, chunks, codecs, what decodes on the GPU",
        epilog="example: zarr-dask-gpu info data.zarr --component temperature",
    )
    p.add_argument("path")
    p.add_argument("--component", default=None, help="the array's path inside a group")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.add_argument("--device", default="auto", choices=["auto", "gpu", "cpu"], help="for the default blocks")
    p.set_defaults(func=_info)

    p = sub.add_parser(
        "read",
        help="read an array with from_zarr_gpu and print GB/s",
        epilog="example: zarr-dask-gpu read data.zarr --chunks 512MiB --cluster",
    )
    p.add_argument("path")
    p.add_argument("--component", default=None)
    p.add_argument("--device", default="auto", choices=["auto", "gpu", "cpu"])
    p.add_argument(
        "--chunks",
        default=None,
        help="dask blocks: a byte size such as 512MiB, 'auto', or a shape such as 64,100",
    )
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    p.add_argument("--cluster", action="store_true", help="read on a local cluster (one worker per GPU)")
    p.add_argument("--scheduler-file", default=None, help="read on a running cluster (dask scheduler file)")
    p.set_defaults(func=_read)

    p = sub.add_parser(
        "config",
        help="each setting's value here (dask config, DASK_ZARR_DASK_GPU__* variables), default and use",
        epilog="example: DASK_ZARR_DASK_GPU__BLOCK_SIZE=512MiB zarr-dask-gpu config",
    )
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=_config)

    p = sub.add_parser(
        "bench",
        help="benchmark against the peers and the hardware ceilings (GPU), or against dask (CPU)",
        epilog="example: zarr-dask-gpu bench --gib 4 --json bench.json --chart docs/performance.png",
    )
    bench.add_arguments(p)
    p.set_defaults(func=bench.main)

    p = sub.add_parser(
        "demo",
        help="write a sample store, read it on a local cluster, check values, print GB/s",
        epilog="example: zarr-dask-gpu demo --size-mib 2048 --device gpu",
    )
    p.add_argument("--path", default=None, help="where the sample store goes (default: the temp folder)")
    p.add_argument("--size-mib", type=int, default=512)
    p.add_argument("--device", default="auto", choices=["auto", "gpu", "cpu"])
    p.set_defaults(func=_demo)

    args = parser.parse_args(argv)
    try:
        return args.func(args)
    except (ZarrGpuError, OSError, ValueError, TypeError) as e:
        if args.debug:
            raise
        print(f"zarr-dask-gpu: error: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
