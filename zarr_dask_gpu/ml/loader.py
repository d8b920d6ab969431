"""Shuffled training samples from zarr arrays, read in batches by this package's tasks; no torch.

``SampleLoader`` yields each batch as a dict ``{name: array}`` of numpy (CPU) or cupy (GPU) arrays
stacked along a new first axis; ``tensors.ZarrSamples`` hands them to torch. The epoch's plan is
``samples.plan_epoch``'s. Each group part (the samples of one group of read units that this rank reads
this epoch) is read as one window, the union box of its samples, by the task of the first batch that
needs it (all that batch's new windows of every variable in one ``task.read_regions``), and freed
once the last batch that needs it has been handed out.
"""

import math
from collections import deque
from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import numpy as np
import zarr

from ..device import Device, resolve_device
from ..errors import ChunkDecodeError
from ..metadata import ArrayInfo
from ..resolve import open_array_info, open_group, open_node
from ..task import get_backend, read_regions
from .epochs import EpochPlan, batch_count, chunk_groups, plan_epoch, sample_origins

_NO_GROUPING = np.iinfo(np.int64).max  # the "read unit" along a tiled dim an array lacks


@dataclass(frozen=True)
class Variable:
    """One array the loader reads: its name in the batches, its description and dimension names."""

    name: str
    info: ArrayInfo
    dims: tuple[str, ...]


def _stored_dims(array: zarr.Array) -> tuple[str, ...] | None:
    """The dimension names a zarr array records: v3 ``dimension_names`` or xarray's v2 attribute."""
    names: Any = getattr(array.metadata, "dimension_names", None)
    if names is None:
        names = array.attrs.get("_ARRAY_DIMENSIONS")
    return tuple(str(n) for n in names) if names is not None and None not in names else None


def _from_dataset(ds: Any, names: Sequence[str] | None) -> list[tuple[str, zarr.Array, tuple[str, ...]]]:
    """The stored zarr arrays behind variables of a Dataset of ``zarr_dask_gpu.open_dataset``."""
    from ..xarray.backend import DeviceVariable  # imports xarray, which a Dataset implies

    out = []
    for name in names if names is not None else list(ds.data_vars):
        if name not in ds.variables:
            raise ValueError(f"variable {name!r} is not in the dataset: {sorted(map(str, ds.variables))}")
        var = ds.variables[name]
        stored = var.stored if isinstance(var, DeviceVariable) else None
        if stored is None:
            raise ValueError(
                f"variable {name!r} is not a device variable of zarr_dask_gpu.open_dataset "
                "(only those are read by the loader)"
            )
        changed = _decoded_values(var)
        if changed:
            raise ValueError(
                f"variable {name!r} is CF-decoded ({changed}); the loader reads stored values: "
                "give normalize= instead, or open the dataset with mask_and_scale=False"
            )
        out.append((str(name), stored, tuple(map(str, var.dims))))
    return out


def _decoded_values(var: Any) -> str | None:
    """How xarray's CF decoding made a variable's values other than the stored ones (scaled,
    masked with a fill other than NaN, another dtype: unsigned, bool, times), or None."""
    enc = var.encoding
    steps = sorted({"scale_factor", "add_offset", "_Unsigned"} & set(enc))
    for key in ("_FillValue", "missing_value"):
        if key in enc:
            try:
                nan = bool(np.isnan(np.asarray(enc[key], dtype="f8")).all())
            except (TypeError, ValueError):
                nan = False
            if not nan:
                steps.append(f"{key}={enc[key]!r} masked")
    stored = enc.get("dtype")
    if stored is not None and np.dtype(stored) != var.dtype:
        steps.append(f"stored as {np.dtype(stored)}, decoded to {var.dtype}")
    return ", ".join(steps) or None


def open_variables(arrays: Any, names: Sequence[str] | None = None) -> list[Variable]:
    """The variables to read: ``arrays`` is a mapping of names to a zarr array (anything
    ``zarr.open_array`` opens, or a ``zarr.Array``) or to ``(array, dims)``; a zarr group (anything
    ``zarr.open_group`` opens: a path, URL, store object or ``zarr.Group``) with the ``names`` of its
    arrays (all when None); or an xarray Dataset of ``zarr_dask_gpu.open_dataset`` (dims by name).

    Raises
    ------
    ValueError
        An array records no dimension names and none were given, or a name is not there.
    """
    items: list[tuple[str, Any, tuple[str, ...] | None]] = []
    if hasattr(arrays, "data_vars"):
        items = [(n, a, d) for n, a, d in _from_dataset(arrays, names)]
    elif isinstance(arrays, Mapping) and not isinstance(arrays, zarr.Group):
        unknown = set(names or ()) - set(map(str, arrays))
        if unknown:
            raise ValueError(f"variables {sorted(unknown)} are not in arrays: {sorted(map(str, arrays))}")
        for name, spec in arrays.items():
            if names is not None and str(name) not in names:
                continue
            array, dims = spec if isinstance(spec, tuple) else (spec, None)
            items.append((str(name), array, tuple(dims) if dims is not None else None))
    else:  # a group: anything zarr-python opens
        group = open_group(arrays)
        members = {k: v for k, v in group.arrays()}
        for name in names if names is not None else sorted(members):
            if name not in members:
                raise ValueError(f"no array {name!r} in {arrays}: {sorted(members)}")
            items.append((name, members[name], None))
    if not items:
        raise ValueError("no variables to read")
    out = []
    for name, array, dims in items:
        if not isinstance(array, zarr.Array):
            array = open_node(array)
        dims = dims if dims is not None else _stored_dims(array)
        if dims is None:
            raise ValueError(f"variable {name!r} records no dimension names: give (array, dims)")
        if len(dims) != array.ndim:
            raise ValueError(f"variable {name!r}: {len(dims)} dims {dims} for {array.ndim} axes")
        out.append(Variable(name, open_array_info(array), dims))
    return out


class SampleLoader:
    """Batches of samples of several arrays at once, shuffled per epoch, one share per rank.

    Parameters
    ----------
    arrays, variables
        What to read (``open_variables``); every variable is cut along the same named dimensions,
        so inputs and targets of one sample are aligned.
    batch_size
        Samples per batch.
    sample_dims
        Dimensions along which each index is a sample (dropped from the sample's shape), e.g.
        ``("time",)``.
    patch
        Dimension names to patch sizes, e.g. ``{"time": 4, "y": 128, "x": 128}``: samples are patches
        on a regular grid of starts ``stride`` apart (default: the patch, tiling the array), or, with
        ``random_patches``, ``patches_per_epoch`` (default: as many) origins drawn per epoch.
        Dimensions in neither are whole in every sample.
    device
        "gpu", "cpu" or "auto".
    seed, shuffle, shuffle_buffer, drop_last, rank, world_size
        As in ``samples.plan_epoch``.
    prefetch
        Batches read ahead in threads while the caller computes.
    memory_budget
        Bytes (device bytes on the GPU) that the batches read ahead and the live windows may take:
        a batch larger than it is refused here, and ``prefetch`` is lowered per epoch to fit.
    normalize
        Names to ``(mean, std)``: those variables come as ``(x - mean) / std`` in float32 (float64
        stays float64), computed on the device.
    strict
        Raise for missing chunks instead of reading the fill value.
    gpu
        The GPU the reading threads use (cupy's current device is per thread); None: cupy's current
        device of the thread that builds the loader.

    Raises
    ------
    ValueError
        A dimension is not found, sizes of one dimension differ between variables, or the sample
        shape does not fit the arrays.
    """

    def __init__(
        self,
        arrays: Any,
        batch_size: int,
        *,
        variables: Sequence[str] | None = None,
        sample_dims: Sequence[str] = (),
        patch: Mapping[str, int] | None = None,
        stride: Mapping[str, int] | None = None,
        random_patches: bool = False,
        patches_per_epoch: int | None = None,
        device: str = "auto",
        seed: int = 0,
        shuffle: bool = True,
        shuffle_buffer: int = 4,
        drop_last: bool = False,
        rank: int = 0,
        world_size: int = 1,
        prefetch: int = 2,
        memory_budget: int | None = None,
        normalize: Mapping[str, tuple[float, float]] | None = None,
        strict: bool = False,
        gpu: int | None = None,
    ) -> None:
        if batch_size < 1 or prefetch < 1 or shuffle_buffer < 1:
            raise ValueError(
                f"batch_size, prefetch and shuffle_buffer must be positive, got {batch_size}, "
                f"{prefetch}, {shuffle_buffer}"
            )
        if world_size < 1 or not 0 <= rank < world_size:
            raise ValueError(f"rank {rank} is not one of world_size {world_size}")
        self.variables = open_variables(arrays, variables)
        patch = dict(patch or {})
        both = set(sample_dims) & set(patch)
        if both:
            raise ValueError(f"dimensions {sorted(both)} are both sample dims and patch dims")
        self.squeezed = tuple(sample_dims)
        self.tiled = (*self.squeezed, *patch)
        if not self.tiled:
            raise ValueError("give sample_dims or patch: along which dimensions are the samples?")
        self.shape = tuple([1] * len(self.squeezed) + [int(p) for p in patch.values()])
        sizes = self._sizes()
        stride = dict(stride or {})
        unknown = set(stride) - set(patch)
        if unknown:
            raise ValueError(f"stride of {sorted(unknown)}, which are not patch dims {sorted(patch)}")
        self._stride = tuple([1] * len(self.squeezed) + [int(stride.get(d, p)) for d, p in patch.items()])
        self.sizes = tuple(sizes[d] for d in self.tiled)
        try:
            origins = sample_origins(self.sizes, self.shape, self._stride)
        except ValueError as e:
            raise ValueError(f"samples {dict(zip(self.tiled, self.shape, strict=True))}: {e}") from None
        self.random_patches = random_patches
        self.n_samples = patches_per_epoch if random_patches and patches_per_epoch else len(origins)
        self._regular = None if random_patches else origins
        self.normalize = dict(normalize or {})
        missing = set(self.normalize) - {v.name for v in self.variables}
        if missing:
            raise ValueError(f"normalize names {sorted(missing)}, which are not variables")
        self.device: Device = resolve_device(device)
        if self.device == "cpu":
            gpu = None  # torch may have a GPU where this package reads on the CPU
        elif gpu is None:
            import cupy

            gpu = int(cupy.cuda.Device().id)
        self.gpu = gpu
        self.batch_size, self.prefetch, self.memory_budget = batch_size, prefetch, memory_budget
        self.seed, self.shuffle, self.shuffle_buffer, self.drop_last = (
            seed,
            shuffle,
            shuffle_buffer,
            drop_last,
        )
        self.rank, self.world_size, self.strict = rank, world_size, strict
        self.epoch = 0
        self._pool: ThreadPoolExecutor | None = None
        # each variable's read units (chunks, or inner chunks of shards) along the tiled dims, once
        # per distinct shape; one along none of them is whole in every window and groups nothing
        self._grids = sorted(
            {
                tuple(v.info.chunks[v.dims.index(d)] if d in v.dims else _NO_GROUPING for d in self.tiled)
                for v in self.variables
                if set(v.dims) & set(self.tiled)
            }
        )
        # a regular grid's groups are the same every epoch
        self._groups = None if self._regular is None else chunk_groups(self._regular, self._grids)
        self.batch_bytes = batch_size * sum(self._sample_bytes(v) for v in self.variables)
        if memory_budget is not None:
            if self.batch_bytes > memory_budget:
                raise ValueError(
                    f"one batch of {batch_size} samples is {self.batch_bytes} bytes, over memory_budget "
                    f"{memory_budget}: use a smaller batch_size"
                )
            self.prefetch_for(self.plan(0))  # raises when even one batch and its windows do not fit

    def _sizes(self) -> dict[str, int]:
        sizes: dict[str, int] = {}
        where: dict[str, str] = {}
        for v in self.variables:
            for d, n in zip(v.dims, v.info.shape, strict=True):
                if d in sizes and sizes[d] != n:
                    raise ValueError(
                        f"dimension {d!r} is {sizes[d]} long in {where[d]!r} but {n} in {v.name!r}"
                    )
                sizes.setdefault(d, n)
                where.setdefault(d, v.name)
        absent = [d for d in self.tiled if d not in sizes]
        if absent:
            raise ValueError(f"dimensions {absent} are in no variable: {sorted(sizes)}")
        return sizes

    def _out_dtype(self, v: Variable) -> np.dtype:
        if v.name not in self.normalize:
            return v.info.dtype
        return np.dtype("f8") if v.info.dtype == np.dtype("f8") else np.dtype("f4")

    def _sample_bytes(self, v: Variable) -> int:
        n = 1
        for d, size in zip(v.dims, v.info.shape, strict=True):
            n *= self.shape[self.tiled.index(d)] if d in self.tiled else size
        return n * self._out_dtype(v).itemsize

    def set_epoch(self, epoch: int) -> None:
        """The epoch whose order the next iteration follows (call it each epoch, on every rank)."""
        self.epoch = int(epoch)

    def __len__(self) -> int:
        """Batches of this rank per epoch."""
        return batch_count(self.n_samples, self.batch_size, self.rank, self.world_size, self.drop_last)

    def origins(self, epoch: int) -> np.ndarray:
        """The epoch's sample origins ``(n, len(tiled))`` (the same each epoch unless random)."""
        if self._regular is not None:
            return self._regular
        rng = np.random.default_rng([self.seed, epoch, 0])
        return sample_origins(
            self.sizes, self.shape, self._stride, random=True, count=self.n_samples, rng=rng
        )

    def plan(self, epoch: int) -> "LoaderPlan":
        """This rank's plan of ``epoch``."""
        origins = self.origins(epoch)
        groups = self._groups if self._groups is not None else chunk_groups(origins, self._grids)
        p = plan_epoch(
            groups,
            self.batch_size,
            seed=self.seed,
            epoch=epoch,
            rank=self.rank,
            world_size=self.world_size,
            drop_last=self.drop_last,
            shuffle=self.shuffle,
            shuffle_buffer=self.shuffle_buffer,
        )
        return LoaderPlan(p, origins, groups, self.shape)

    def box(self, v: Variable, lo: np.ndarray, hi: np.ndarray) -> tuple[tuple[int, ...], tuple[int, ...]]:
        """Variable ``v``'s box of tiled dims from ``lo`` to ``hi`` (exclusive), whole elsewhere."""
        start, stop = [], []
        for d, size in zip(v.dims, v.info.shape, strict=True):
            if d in self.tiled:
                k = self.tiled.index(d)
                start.append(int(lo[k]))
                stop.append(int(hi[k]))
            else:
                start.append(0)
                stop.append(size)
        return tuple(start), tuple(stop)

    def window_bytes(self, lo: np.ndarray, hi: np.ndarray) -> int:
        """Bytes of the window from ``lo`` to ``hi`` along the tiled dims (``LoaderPlan.bounds``), over
        every variable."""
        total = 0
        for v in self.variables:
            a, b = self.box(v, lo, hi)
            total += math.prod(y - x for x, y in zip(a, b, strict=True)) * v.info.dtype.itemsize
        return total

    def prefetch_for(self, plan: "LoaderPlan") -> int:
        """The most batches (up to ``prefetch``) to read ahead within ``memory_budget`` for ``plan``."""
        if self.memory_budget is None:
            return self.prefetch
        n = len(plan.epoch.batches)
        reads = [(j, g) for j, parts in enumerate(plan.epoch.parts) for g, _ in parts]
        first = np.array([j for j, _ in reads], dtype=np.int64)
        last = np.array([plan.epoch.last_use[g] for _, g in reads], dtype=np.int64)
        size = np.array([self.window_bytes(*plan.bounds[g]) for _, g in reads], dtype=np.int64)
        for p in range(self.prefetch, 0, -1):
            # while batch j is read, batches after j - p are not handed out yet: a window read by
            # batch f and last needed by batch l lives while batches f to l + p - 1 are read
            alive = np.zeros(n + 1, dtype=np.int64)
            np.add.at(alive, first, size)
            np.add.at(alive, np.minimum(last + p, n), -size)
            peak = int(np.cumsum(alive[:n]).max()) if n else 0
            if p * self.batch_bytes + peak <= self.memory_budget:
                return p
        raise ValueError(
            f"one batch ({self.batch_bytes} bytes) and the windows it needs do not fit memory_budget "
            f"{self.memory_budget}: use a smaller shuffle_buffer or batch_size"
        )

    def __iter__(self) -> Iterator[dict[str, Any]]:
        plan = self.plan(self.epoch)
        ahead = self.prefetch_for(plan)
        windows: dict[int, Future[list[Any]]] = {}
        batches = plan.epoch.batches
        if self._pool is None:  # kept across epochs: its threads' streams and memory pools with it
            self._pool = ThreadPoolExecutor(
                self.prefetch, "zarr-dask-gpu-loader", initializer=_use_gpu, initargs=(self.gpu,)
            )
        ex = self._pool
        queue: deque[Future[dict[str, Any]]] = deque()

        def submit(j: int) -> None:
            for g, _ in plan.epoch.parts[j]:
                windows[g] = Future()
            queue.append(ex.submit(self._batch, plan, j, windows))

        try:
            for j in range(min(ahead, len(batches))):
                submit(j)
            for j in range(len(batches)):
                out = queue.popleft().result()
                for g in [g for g in windows if plan.epoch.last_use[g] == j]:
                    del windows[g]
                if j + ahead < len(batches):
                    submit(j + ahead)
                yield out
        finally:  # an epoch left early: its batches not started are not read
            for f in queue:
                f.cancel()

    def _batch(self, plan: "LoaderPlan", j: int, windows: Mapping[int, Future[list[Any]]]) -> dict[str, Any]:
        """Batch ``j``: its new windows read in one task, its samples cut out of windows and stacked."""
        parts = plan.epoch.parts[j]
        mine = [windows[g] for g, _ in parts]
        try:
            read = self.read_windows(plan, parts)
        except BaseException as e:
            for f in mine:
                f.set_exception(e)
            raise
        for f, w in zip(mine, read, strict=True):
            f.set_result(w)
        need = {int(g) for g in plan.groups[plan.epoch.batches[j]]}
        got = {g: windows[g].result() for g in need}
        return self.assemble(plan, plan.epoch.batches[j], got)

    def read_windows(self, plan: "LoaderPlan", parts: Sequence[tuple[int, np.ndarray]]) -> list[list[Any]]:
        """The windows of group parts, each a list over variables, read in one ``read_regions``."""
        boxes = []
        for g, _ in parts:
            lo, hi = plan.bounds[g]
            boxes += [(v.info, *self.box(v, lo, hi)) for v in self.variables]
        if not boxes:
            return []
        try:
            flat = read_regions(boxes, self.device, self.strict)
        except ChunkDecodeError as e:  # MissingChunkError too: the same fields
            names = [v.name for v in self.variables if v.info.location == e.store]
            if not names:
                raise
            raise type(e)(e.store, e.key, f"variable {names[0]!r}: {e.reason}") from e
        n = len(self.variables)
        return [flat[i : i + n] for i in range(0, len(flat), n)]

    def assemble(
        self, plan: "LoaderPlan", batch: np.ndarray, windows: Mapping[int, list[Any]]
    ) -> dict[str, Any]:
        """The samples ``batch`` cut out of their groups' ``windows`` and stacked per variable
        (normalised where asked), on the windows' device."""
        backend = get_backend(self.device)
        xp = backend.xp
        out: dict[str, Any] = {}
        with backend.context():
            for k, v in enumerate(self.variables):
                axes = [v.dims.index(d) for d in self.tiled if d in v.dims]
                if len(axes) == 1 and v.dims[axes[0]] in self.squeezed and len(self.tiled) == 1:
                    x = self._gather(xp, plan, batch, windows, k, axes[0])
                else:
                    x = xp.stack([self._cut(plan, s, windows, k, v) for s in batch])
                if v.name in self.normalize:
                    mean, std = self.normalize[v.name]
                    x = (x.astype(self._out_dtype(v)) - mean) / std
                out[v.name] = xp.ascontiguousarray(x)
        return out

    def _cut(self, plan: "LoaderPlan", s: int, windows: Mapping[int, list[Any]], k: int, v: Variable) -> Any:
        """Sample ``s`` of variable ``k`` (``v``), a view of its group's window."""
        g = int(plan.groups[s])
        rel = plan.origins[s] - plan.bounds[g][0]
        sel: list[Any] = []
        for d in v.dims:
            if d in self.squeezed:
                sel.append(int(rel[self.tiled.index(d)]))
            elif d in self.tiled:
                i = self.tiled.index(d)
                sel.append(slice(int(rel[i]), int(rel[i]) + self.shape[i]))
            else:
                sel.append(slice(None))
        return windows[g][k][tuple(sel)]

    def _gather(
        self,
        xp: Any,
        plan: "LoaderPlan",
        batch: np.ndarray,
        windows: Mapping[int, list[Any]],
        k: int,
        axis: int,
    ) -> Any:
        """Samples along one sample dim at ``axis`` of variable ``k``: each copied from its window into
        the batch by basic indexing (no index arrays sent to the device, so no host-to-device copy
        that waits for the stream)."""
        groups = plan.groups[batch]
        first = windows[int(groups[0])][k]
        out = xp.empty((len(batch), *first.shape[:axis], *first.shape[axis + 1 :]), dtype=first.dtype)
        lead = (slice(None),) * axis
        for i, (s, g) in enumerate(zip(batch.tolist(), groups.tolist(), strict=True)):
            out[i] = windows[g][k][(*lead, int(plan.origins[s, 0] - plan.bounds[g][0][0]))]
        return out


@dataclass
class LoaderPlan:
    """A rank's epoch plan with the samples' origins and groups, and the sample ``shape`` along the
    tiled dims."""

    epoch: EpochPlan
    origins: np.ndarray
    groups: np.ndarray
    shape: tuple[int, ...]

    def __post_init__(self) -> None:
        # each group part's window along the tiled dims: from its samples' least origin to past the end
        # of their last sample (read_windows reads it, window_bytes sizes it, samples are cut from it)
        self.bounds: dict[int, tuple[np.ndarray, np.ndarray]] = {}
        for parts in self.epoch.parts:
            for g, idx in parts:
                o = self.origins[idx]
                self.bounds[g] = (o.min(axis=0), o.max(axis=0) + np.asarray(self.shape))


def _use_gpu(index: int | None) -> None:
    """Bind a reading thread to GPU ``index`` (none on the CPU)."""
    if index is not None:
        import cupy

        cupy.cuda.Device(index).use()
