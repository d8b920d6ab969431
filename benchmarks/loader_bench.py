"""The training loader against torch's DataLoader over zarr-python reads, fully shuffled.

    python3 benchmarks/loader_bench.py [--path /tmp/era5-loader.zarr] [--times 960] [--json out.json]

Writes (once) an ERA5-like zarr v3 group: ``--variables`` float32 variables (time, 721, 1440), zstd,
2 time steps a chunk (7.9 MiB); ``--times 960`` with 4 variables is 15.9 GB. Two kinds of samples,
every variable of one sample stacked as channels (C x ...):

- ``fields``: whole fields (C x 721 x 1440), ``sample_dims=("time",)``, ``--field-batch`` a batch;
- ``patches``: 128 x 128 patches tiling every field (C x 128 x 128), ``--patch-batch`` a batch.

Rows, each fully shuffled, warm page cache, batches landing on the GPU:

- ``ZarrSamples``: this package's loader (``prefetch`` batches ahead within ``--budget-gib``, each
  of ``--prefetch`` in turn): epoch 1 timed after an untimed epoch 0, as in training; the fastest
  again with a stand-in model step (``--model-ms`` of matmuls per batch) to show the overlap; the
  first batch's seconds from building the loader.
- ``DataLoader``: ``torch.utils.data.DataLoader`` over a map-style dataset whose ``__getitem__``
  reads one sample with zarr-python (every variable), ``shuffle=True``, ``pin_memory=True``, 8 and
  16 worker processes (spawned), the batch copied to the GPU; ``--rounds`` batches a worker timed
  after each worker's first two (the workers started and their queues full: the batches in flight
  when the clock starts favour the baseline), and again with the model step.
- xbatcher's ``BatchGenerator`` when it is installed.
- ``--timeline``: one epoch of ``ZarrSamples`` at ``--variant-prefetch`` with its tasks' phases
  (``benchmarks/timeline.py``'s report: the phases' means, the decode calls, each thread's phases
  around the middle batches) and the gaps between batches handed out; then the same epoch's reads
  alone (each batch's new windows read on as many threads, nothing stacked, no order kept), the rate
  the tasks give without the loader around them; only these rows when given.
- ``--variants "read-slots=0;join-wait=None"``: ``ZarrSamples`` alone at ``--variant-prefetch``
  with each of the package's settings given (and with none), the seconds of each task phase summed
  (``zarr_dask_gpu.phases``); only these rows when given.

Samples/s and GB/s of batch tensors delivered to the GPU; the speed-up over the best DataLoader
row. The first batch of ``ZarrSamples`` is checked against zarr-python's slices.
"""

import argparse
import json
import os
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import torch
import zarr

from zarr_dask_gpu.bench import chunk_files, warm_cache

LAT, LON, PATCH = 721, 1440, 128
NAMES = ("t2m", "u10", "v10", "z500", "q700", "t850", "msl", "tp")


def write(path: Path, times: int, nvars: int) -> None:
    """The group, written with ``os.cpu_count()`` threads (reused when complete)."""
    mark = {"times": times, "variables": nvars, "complete": True}
    if (path / "zarr.json").exists() and dict(zarr.open_group(path, mode="r").attrs) == mark:
        return
    g = zarr.open_group(path, mode="w")
    lat = np.linspace(-90, 90, LAT, dtype="float32")[:, None]
    lon = np.linspace(0, 360, LON, endpoint=False, dtype="float32")[None, :]
    rng = np.random.default_rng(0)
    noise = np.round(rng.normal(0, 0.5, (16, LAT, LON)), 2).astype("float32")  # reused, shifted
    arrays = [
        g.create_array(
            name,
            shape=(times, LAT, LON),
            chunks=(2, LAT, LON),
            dtype="float32",
            compressors=zarr.codecs.ZstdCodec(level=3),
            dimension_names=("time", "lat", "lon"),
        )
        for name in NAMES[:nvars]
    ]

    def slab(k: int, t0: int) -> None:
        n, i = min(2, times - t0), (t0 + k) % 15
        t = np.arange(t0, t0 + n, dtype="float32")[:, None, None]
        base = 280 + 20 * np.cos(np.radians(lat)) + (5 + k) * np.sin(np.radians(lon) * (k + 1) + t / 24)
        shift = (t0 * 7 + k * 131) % LON
        arrays[k][t0 : t0 + n] = np.round(base, 1) + np.roll(noise[i : i + n], shift, -1)

    with ThreadPoolExecutor(os.cpu_count()) as ex:
        list(ex.map(lambda a: slab(*a), [(k, t0) for k in range(nvars) for t0 in range(0, times, 2)]))
    g.attrs.update(mark)  # last: a group cut short is written anew


class ZarrPython(torch.utils.data.Dataset):
    """The baseline's dataset: sample ``i`` read by zarr-python in the worker, every variable."""

    def __init__(self, path: str, names: list[str], patches: bool, times: int) -> None:
        self.path, self.names, self.patches = path, names, patches
        self.ny, self.nx = LAT // PATCH, LON // PATCH
        self.n = times * (self.ny * self.nx if patches else 1)
        self.arrays: list[Any] | None = None

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> torch.Tensor:
        if self.arrays is None:  # opened in the worker
            g = zarr.open_group(self.path, mode="r")
            self.arrays = [g[n] for n in self.names]
        if not self.patches:
            return torch.from_numpy(np.stack([a[i] for a in self.arrays]))
        t, p = divmod(i, self.ny * self.nx)
        y, x = divmod(p, self.nx)
        sel = (t, slice(y * PATCH, (y + 1) * PATCH), slice(x * PATCH, (x + 1) * PATCH))
        return torch.from_numpy(np.stack([a[sel] for a in self.arrays]))


def model_step(ms: float, size: int) -> Callable[[torch.Tensor], None]:
    """A stand-in model step: ``size``-square float32 matmuls, about ``ms`` milliseconds of them,
    that depend on the batch (layers of a model: kernels of a millisecond or so, between which the
    loader's kernels run)."""
    w = torch.randn(size, size, device="cuda")
    h = torch.randn(size, size, device="cuda")
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(10):
        h @ w
    torch.cuda.synchronize()
    per = (time.perf_counter() - t0) / 10
    n = max(1, round(ms / 1e3 / per))
    print(f"model step: {n} matmuls of {size}^2 ({per * 1e3:.2f} ms each)")

    def step(x: torch.Tensor) -> None:
        y = h + x.reshape(-1)[:1].sum()  # depends on the batch
        for _ in range(n):
            y = y @ w

    return step


def drain(batches: Iterator[Any], count: int | None, step: Callable[[torch.Tensor], None] | None) -> int:
    """Consume ``count`` batches (all when None), each stacked as ``(B, C, ...)`` on the GPU and
    given to ``step``, waited for as a training step is (its loss read): the batches read ahead
    meanwhile are the overlap. The samples consumed."""
    n = 0
    for k, b in enumerate(batches):
        x = b if isinstance(b, torch.Tensor) else torch.stack(list(b.values()), dim=1)
        x = x.cuda(non_blocking=True)
        if step is not None:
            step(x)
            torch.cuda.current_stream().synchronize()
        n += x.shape[0]
        if count is not None and k + 1 == count:
            break
    torch.cuda.synchronize()
    return n


def batch_size(args: argparse.Namespace, kind: str) -> int:
    return args.patch_batch if kind == "patches" else args.field_batch


def sample_bytes(args: argparse.Namespace, kind: str) -> int:
    """Bytes of one sample of every variable, as it lands on the GPU."""
    return 4 * args.variables * (PATCH * PATCH if kind == "patches" else LAT * LON)


def zarr_samples(
    args: argparse.Namespace, kind: str, prefetch: int, seed: int = 0, memory_budget: int | None = None
) -> Any:
    """This package's loader of ``kind``'s samples of every variable."""
    from zarr_dask_gpu.ml.tensors import ZarrSamples

    return ZarrSamples(
        args.path,
        batch_size(args, kind),
        variables=list(NAMES[: args.variables]),
        sample_dims=("time",),
        seed=seed,
        shuffle_buffer=args.shuffle_buffer,
        prefetch=prefetch,
        memory_budget=memory_budget,
        device="gpu",
        **({"patch": {"lat": PATCH, "lon": PATCH}} if kind == "patches" else {}),
    )


def ours(args: argparse.Namespace, kind: str, step: Any) -> dict[str, Any]:
    names = list(NAMES[: args.variables])

    def build(seed: int, prefetch: int) -> Any:
        return zarr_samples(args, kind, prefetch, seed, int(args.budget_gib * 2**30))

    prefetches = [int(p) for p in args.prefetch.split(",")]
    per_sample = sample_bytes(args, kind)
    out: dict[str, Any] = {}

    def first_batch(seed: int, prefetch: int, key: str) -> None:
        t0 = time.perf_counter()
        ds = build(seed, prefetch)
        it = iter(ds)
        first = next(it)
        torch.cuda.synchronize()
        out[key] = time.perf_counter() - t0
        check(args, ds, first, names)
        drain(it, None, None)

    def epoch(prefetch: int, label: str, s: Any) -> float:
        ds = build(3, prefetch)
        drain(iter(ds), None, None)  # epoch 0, untimed; epoch 1 timed, as in training
        ds.set_epoch(1)
        t0 = time.perf_counter()
        n = drain(iter(ds), None, s)
        dt = time.perf_counter() - t0
        out[f"samples_per_s, {label}, prefetch={prefetch}"] = n / dt
        print(
            f"ZarrSamples {kind:8s} prefetch={prefetch:2d} {label:10s}: {n} samples in {dt:.2f} s, "
            f"{n / dt:9.1f}/s, {n * per_sample / dt / 1e9:6.2f} GB/s",
            flush=True,
        )
        return n / dt

    first_batch(1, max(prefetches), "first_batch_cold_s")  # the first loader of the process
    rates = {p: epoch(p, "alone", None) for p in prefetches}
    best = max(rates, key=rates.__getitem__)  # the fastest prefetch, also timed with the model step
    out["prefetch"] = best
    out["samples_per_s, alone"] = rates[best]
    out["samples_per_s, with model"] = epoch(best, "with model", step)
    for label in ("alone", "with model"):
        out[f"GB_per_s, {label}"] = out[f"samples_per_s, {label}"] * per_sample / 1e9
    first_batch(2, best, "first_batch_s")
    print(
        f"ZarrSamples {kind}: prefetch={best}, first batch {out['first_batch_s']:.3f} s after building "
        f"the loader (the process's first loader: {out['first_batch_cold_s']:.3f} s)",
        flush=True,
    )
    return out


def check(args: argparse.Namespace, ds: Any, first: dict[str, torch.Tensor], names: list[str]) -> None:
    """The first batch of ``ds`` equals zarr-python's slices of its samples (batch 0 of its plan)."""
    loader = ds.loader
    plan = loader.plan(loader.epoch)
    g = zarr.open_group(args.path, mode="r")
    for o, s in enumerate(plan.epoch.batches[0][:4]):
        origin = plan.origins[s]
        sel: list[Any] = [int(origin[0])]
        for k, size in zip(origin[1:], loader.shape[1:], strict=True):
            sel.append(slice(int(k), int(k) + size))
        for name in names:
            want = g[name][tuple(sel)]
            assert np.array_equal(first[name][o].cpu().numpy(), want), f"{name}: sample {s} differs"


def baseline(args: argparse.Namespace, kind: str, workers: int, step: Any) -> dict[str, float]:
    data = ZarrPython(args.path, list(NAMES[: args.variables]), kind == "patches", args.times)
    batches, need = len(data) // batch_size(args, kind), (2 + args.rounds) * workers
    if batches < need:  # the warm batches and the timed ones come from one epoch
        raise SystemExit(
            f"DataLoader, {workers} workers: an epoch of {batches} {kind} batches, fewer than the {need} "
            "warmed and timed: raise --times or lower --rounds"
        )
    per_sample = sample_bytes(args, kind)
    loader = torch.utils.data.DataLoader(
        data,
        batch_size=batch_size(args, kind),
        shuffle=True,
        num_workers=workers,
        pin_memory=True,
        persistent_workers=True,
        multiprocessing_context="spawn",
        prefetch_factor=2,
        generator=torch.Generator().manual_seed(0),
    )
    out: dict[str, Any] = {}
    for label, s in (("alone", None), ("with model", step)):
        it = iter(loader)
        drain(it, 2 * workers, None)  # warm: every worker has handed out its first two batches
        t0 = time.perf_counter()
        n = drain(it, args.rounds * workers, s)
        dt = time.perf_counter() - t0
        out[f"samples_per_s, {label}"] = n / dt
        out[f"GB_per_s, {label}"] = n * per_sample / dt / 1e9
        print(
            f"DataLoader {workers:2d} workers {kind:8s} {label:10s}: {n} samples in {dt:.2f} s, "
            f"{n / dt:9.1f}/s, {n * per_sample / dt / 1e9:6.2f} GB/s",
            flush=True,
        )
        del it
    return out


def variants(args: argparse.Namespace, kind: str) -> dict[str, Any]:
    """``ZarrSamples`` alone under each of ``--variants``' settings, with its phases summed."""
    from zarr_dask_gpu import phases
    from zarr_dask_gpu.bench.timing import parse_settings, settings

    out: dict[str, Any] = {}
    for variant in ["", *args.variants.split(";")]:
        with settings(parse_settings(variant)):
            ds = zarr_samples(args, kind, args.variant_prefetch)
            drain(iter(ds), 4, None)  # its threads' streams and pools made
            with phases.collect() as spans:
                t0 = time.perf_counter()
                n = drain(iter(ds), None, None)
                dt = time.perf_counter() - t0
        summed = _summed(spans)
        out[variant or "defaults"] = {"samples_per_s": n / dt, "phase_seconds": dict(summed)}
        print(
            f"ZarrSamples {kind:8s} prefetch={args.variant_prefetch} {variant or 'defaults':40s} "
            f"{n / dt:9.1f}/s  phases (s, summed over threads): "
            + " ".join(f"{k}={v:.2f}" for k, v in summed.items()),
            flush=True,
        )
    return out


def timeline(args: argparse.Namespace, kind: str) -> dict[str, Any]:
    """``--timeline``'s epoch and its reads alone, reported; their rates and phase sums."""
    from timeline import report  # benchmarks/timeline.py, beside this script

    from zarr_dask_gpu import phases
    from zarr_dask_gpu.bench.timing import sync_device

    prefetch = args.variant_prefetch
    ds = zarr_samples(args, kind, prefetch)
    drain(iter(ds), None, None)  # epoch 0: its threads' streams and pools made
    ds.set_epoch(1)
    handed: list[float] = []
    with phases.collect() as spans:
        t0 = time.perf_counter()
        for b in ds:
            torch.stack(list(b.values()), dim=1)  # as drain stacks a batch
            handed.append(time.perf_counter() - t0)
        torch.cuda.synchronize()
        dt = time.perf_counter() - t0
    if len(handed) < 8:
        raise SystemExit(f"--timeline needs an epoch of 8 batches or more, not {len(handed)}: raise --times")
    nbytes = len(handed) * batch_size(args, kind) * sample_bytes(args, kind)
    report(f"ZarrSamples {kind}, prefetch={prefetch}", None, spans, t0, dt, nbytes, [], per_task=False)
    gaps = np.diff([0.0, *handed]) * 1e3
    print(
        f"    batches handed out: first at {gaps[0]:.0f} ms, then every {np.median(gaps[1:]):.1f} ms "
        f"(median; p90 {np.percentile(gaps[1:], 90):.1f}, max {gaps[1:].max():.1f})"
    )
    mid = len(handed) // 2
    lo, hi = t0 + handed[max(mid - 3, 0)], t0 + handed[min(mid + 3, len(handed) - 1)]
    middle = [s for s in spans if lo <= s.start < hi]
    report("  the middle six batches' spans", None, middle, lo, hi - lo, 0, [], per_task=True)
    out = {"samples_per_s": len(handed) * batch_size(args, kind) / dt, "phase_seconds": _summed(spans)}

    loader = ds.loader
    plan = loader.plan(1)
    read = sum(loader.window_bytes(*plan.bounds[g]) for parts in plan.epoch.parts for g, _ in parts)

    def batch_reads(j: int) -> None:
        loader.read_windows(plan, plan.epoch.parts[j])  # dropped: the next reuses the memory

    with ThreadPoolExecutor(prefetch) as ex, phases.collect() as spans:
        t0 = time.perf_counter()
        list(ex.map(batch_reads, range(len(plan.epoch.batches))))
        sync_device()
        dt = time.perf_counter() - t0
    report(f"reads alone, {prefetch} threads", None, spans, t0, dt, read, [], per_task=False)
    out["reads alone GB_per_s"] = read / dt / 1e9
    out["reads alone phase_seconds"] = _summed(spans)
    return out


def _summed(spans: list[Any]) -> dict[str, float]:
    summed: dict[str, float] = {}
    for sp in spans:
        summed[sp.name] = summed.get(sp.name, 0.0) + sp.seconds
    return summed


def xbatcher_row(args: argparse.Namespace) -> dict[str, float] | str:
    try:
        import xbatcher
    except ImportError:
        return "xbatcher not installed"
    import xarray as xr

    ds = xr.open_zarr(args.path)[list(NAMES[: args.variables])]
    gen = xbatcher.BatchGenerator(ds, input_dims={"lat": PATCH, "lon": PATCH, "time": 1})
    t0 = time.perf_counter()
    n = 0
    for b in gen:
        torch.as_tensor(b.to_array().values).cuda()
        n += 1
        if n == args.rounds * args.patch_batch:
            break
    return {"samples_per_s": n / (time.perf_counter() - t0)}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--path", default="/tmp/era5-loader.zarr")
    p.add_argument("--times", type=int, default=960)
    p.add_argument("--variables", type=int, default=4)
    p.add_argument("--field-batch", type=int, default=16)
    p.add_argument("--patch-batch", type=int, default=64)
    p.add_argument("--shuffle-buffer", type=int, default=8)
    p.add_argument("--prefetch", default="4,8,16", help="ZarrSamples' prefetch values to time")
    p.add_argument("--budget-gib", type=float, default=16)
    p.add_argument("--model-ms", type=float, default=20)
    p.add_argument("--model-size", type=int, default=2048)
    p.add_argument("--rounds", type=int, default=3, help="DataLoader batches timed, per worker")
    p.add_argument("--workers", default="8,16")
    p.add_argument("--kinds", default="fields,patches")
    p.add_argument("--variants", default="", help="settings to time ZarrSamples under, ';'-separated")
    p.add_argument("--variant-prefetch", type=int, default=8)
    p.add_argument("--timeline", action="store_true", help="the epoch's task phases and its reads alone")
    p.add_argument("--json")
    args = p.parse_args()
    t0 = time.perf_counter()
    write(Path(args.path), args.times, args.variables)
    nbytes = args.times * args.variables * LAT * LON * 4
    print(
        f"dataset {args.path}: {args.variables} x ({args.times}, {LAT}, {LON}) float32, "
        f"{nbytes / 1e9:.1f} GB ({time.perf_counter() - t0:.0f} s to write or find)",
        flush=True,
    )
    warm_cache(chunk_files(args.path))
    doc: dict[str, Any] = {"meta": {"nbytes": nbytes, **vars(args)}, "results": {}}
    if args.variants or args.timeline:
        for kind in args.kinds.split(","):
            doc["results"][kind] = timeline(args, kind) if args.timeline else variants(args, kind)
        if args.json:
            Path(args.json).write_text(json.dumps(doc, indent=1))
        return
    step = model_step(args.model_ms, args.model_size)
    for kind in args.kinds.split(","):
        rows = doc["results"][kind] = {"ZarrSamples": ours(args, kind, step)}
        for w in map(int, args.workers.split(",")):
            try:
                rows[f"DataLoader, {w} workers"] = baseline(args, kind, w, step)
            except Exception as e:  # a host without shared memory for the workers: said, not fatal
                print(f"DataLoader {w} workers {kind}: failed: {e!r}", flush=True)
        base = [v for k, v in rows.items() if k.startswith("DataLoader")]
        if not base:
            continue
        best = max(v["samples_per_s, alone"] for v in base)
        best_m = max(v["samples_per_s, with model"] for v in base)
        mine = rows["ZarrSamples"]
        rows["speedup over the best DataLoader, alone"] = mine["samples_per_s, alone"] / best
        rows["speedup over the best DataLoader, with model"] = mine["samples_per_s, with model"] / best_m
        print(
            f"{kind}: {rows['speedup over the best DataLoader, alone']:.1f}x the best DataLoader alone, "
            f"{rows['speedup over the best DataLoader, with model']:.1f}x with the model step",
            flush=True,
        )
    doc["results"]["xbatcher"] = xbatcher_row(args)
    print(f"xbatcher: {doc['results']['xbatcher']}")
    if args.json:
        Path(args.json).write_text(json.dumps(doc, indent=1))


if __name__ == "__main__":
    main()
