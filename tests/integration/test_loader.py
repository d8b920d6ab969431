"""The training loader without torch (ml/loader.py): values, alignment, reads, errors, validation."""

import subprocess
import sys

import numpy as np
import pytest
import zarr
from hypothesis import given, settings
from hypothesis import strategies as st

import zarr_dask_gpu.ml.loader as loader_mod
from zarr_dask_gpu import ChunkDecodeError, MissingChunkError
from zarr_dask_gpu.ml.loader import SampleLoader

from ..helpers import host, sample


@pytest.fixture
def group(tmp_path):
    g = zarr.open_group(tmp_path / "g.zarr", mode="w")
    x = g.create_array(
        "x", shape=(50, 12, 16), chunks=(5, 6, 16), dtype="f4", dimension_names=("time", "y", "x")
    )
    x[...] = sample(x.shape, "f4")
    t = g.create_array("t", shape=(50,), chunks=(10,), dtype="i8", dimension_names=("time",))
    t[...] = np.arange(50) * 10
    return tmp_path / "g.zarr"


def _samples(loader, epoch=0):
    loader.set_epoch(epoch)
    plan = loader.plan(epoch)
    batches = list(loader)
    assert len(batches) == len(plan.epoch.batches) == len(loader)
    return plan, batches


def test_samples_along_time_are_the_arrays_slices_inputs_and_targets_aligned(group, device):
    x = zarr.open_array(group / "x")
    loader = SampleLoader(group, 8, sample_dims=("time",), device=device, seed=1)
    plan, batches = _samples(loader)
    seen = []
    for ids, b in zip(plan.epoch.batches, batches, strict=True):
        assert b["x"].shape == (len(ids), 12, 16) and b["t"].shape == (len(ids),)
        for k, s in enumerate(ids):
            np.testing.assert_array_equal(host(b["x"][k]), x[int(s)])
            assert int(host(b["t"])[k]) == 10 * int(s)  # the target of the same sample
        seen += host(b["t"]).tolist()
    assert sorted(seen) == [10 * i for i in range(50)] and seen != sorted(seen)


@pytest.mark.parametrize("random_patches", [False, True])
def test_patches_are_inside_the_array_and_equal_its_slices(group, device, random_patches):
    x = zarr.open_array(group / "x")[...]
    loader = SampleLoader(
        group,
        3,
        variables=["x", "t"],
        patch={"time": 4, "y": 5, "x": 8},
        random_patches=random_patches,
        device=device,
    )
    plan, batches = _samples(loader, epoch=2)
    assert len(plan.origins) == 12 * 2 * 2  # as many random patches as the regular grid has
    for ids, b in zip(plan.epoch.batches, batches, strict=True):
        for k, s in enumerate(ids):
            t0, y0, x0 = plan.origins[s]
            assert t0 + 4 <= 50 and y0 + 5 <= 12 and x0 + 8 <= 16
            np.testing.assert_array_equal(host(b["x"][k]), x[t0 : t0 + 4, y0 : y0 + 5, x0 : x0 + 8])
            np.testing.assert_array_equal(host(b["t"][k]), np.arange(t0, t0 + 4) * 10)
    if random_patches:  # drawn anew each epoch from the seed
        assert not np.array_equal(loader.origins(0), loader.origins(1))
        assert np.array_equal(
            loader.origins(1),
            SampleLoader(group, 3, patch={"time": 4, "y": 5, "x": 8}, random_patches=True).origins(1),
        )


def _read_units(monkeypatch):
    """Every read unit (array, chunk coords) read, counted, through read_regions."""
    counts: dict = {}
    real = loader_mod.read_regions

    def counting(boxes, device, strict):
        for info, start, stop in boxes:
            ranges = [range(a // c, -(-b // c)) for a, b, c in zip(start, stop, info.chunks, strict=True)]
            for coords in np.ndindex(*[len(r) for r in ranges]):
                key = (info.path, tuple(r[i] for r, i in zip(ranges, coords, strict=True)))
                counts[key] = counts.get(key, 0) + 1
        return real(boxes, device, strict)

    monkeypatch.setattr(loader_mod, "read_regions", counting)
    return counts


@pytest.mark.parametrize("world", [1, 3])
def test_each_chunk_is_read_once_per_epoch(group, monkeypatch, world):
    counts = _read_units(monkeypatch)
    seen = []
    for rank in range(world):
        loader = SampleLoader(
            group, 4, sample_dims=("time",), device="cpu", rank=rank, world_size=world, seed=5
        )
        seen += [int(v) for b in loader for v in b["t"]]
    assert sorted(seen) == [10 * i for i in range(50)]
    n_chunks = 10 * 2 + 5  # x: 10 x 2 x 1, t: 5
    assert len(counts) == n_chunks
    if world == 1:
        assert set(counts.values()) == {1}
    else:  # a group at a share cut is read by both ranks: at most world - 1 of them
        # a group is t's chunk of 10: x's 2 x 2 chunks and t's 1
        assert sum(n - 1 for n in counts.values()) <= (world - 1) * 5


def test_patches_that_divide_the_chunks_read_each_chunk_once(group, monkeypatch):
    counts = _read_units(monkeypatch)
    loader = SampleLoader(group, 3, patch={"time": 5, "y": 3}, device="cpu", shuffle_buffer=3)
    assert len([b for b in loader]) == len(loader) == 14  # 10 x 4 patches
    assert len(counts) == 25 and set(counts.values()) == {1}


def test_shares_of_ranks_are_disjoint_complete_and_balanced(group):
    shares = [
        [
            int(v)
            for b in SampleLoader(group, 4, sample_dims=("time",), device="cpu", rank=r, world_size=4)
            for v in b["t"]
        ]
        for r in range(4)
    ]
    every = [v for s in shares for v in s]
    assert sorted(every) == [10 * i for i in range(50)]
    assert sorted(map(len, shares)) == [12, 12, 13, 13]


def test_normalisation_on_the_device(group, device):
    x = zarr.open_array(group / "x")
    loader = SampleLoader(
        group,
        50,
        variables=["x"],
        sample_dims=("time",),
        normalize={"x": (2.0, 4.0)},
        device=device,
        shuffle=False,
    )
    (b,) = list(loader)
    assert b["x"].dtype == np.float32
    np.testing.assert_allclose(host(b["x"]), (x[...] - 2.0) / 4.0, rtol=1e-6)


def test_a_damaged_chunk_names_the_variable_and_key(group, device):
    key = group / "x" / "c" / "3" / "1" / "0"
    key.write_bytes(key.read_bytes()[:10])
    loader = SampleLoader(group, 8, sample_dims=("time",), device=device)
    with pytest.raises(ChunkDecodeError, match=r"c/3/1/0.*variable 'x'"):
        list(loader)


def test_bad_samples_are_refused_when_the_loader_is_built(group, tmp_path):
    with pytest.raises(ValueError, match=r"does not fit.*'y': 13|'y': 13.*does not fit"):
        SampleLoader(group, 2, patch={"y": 13})
    with pytest.raises(ValueError, match=r"\['depth'\] are in no variable"):
        SampleLoader(group, 2, sample_dims=("depth",))
    with pytest.raises(ValueError, match="give sample_dims or patch"):
        SampleLoader(group, 2)
    with pytest.raises(ValueError, match="no array 'z'"):
        SampleLoader(group, 2, variables=["z"], sample_dims=("time",))
    other = zarr.create_array(
        tmp_path / "o.zarr", shape=(40,), chunks=(10,), dtype="f4", dimension_names=("time",)
    )
    with pytest.raises(ValueError, match="'time' is 50 long in 'x' but 40 in 'o'"):
        SampleLoader({"x": group / "x", "o": other}, 2, sample_dims=("time",))
    bare = zarr.create_array(tmp_path / "b.zarr", shape=(40,), chunks=(10,), dtype="f4")
    with pytest.raises(ValueError, match="'b' records no dimension names"):
        SampleLoader({"b": bare}, 2, sample_dims=("time",))
    loader = SampleLoader({"b": (bare, ("time",))}, 8, sample_dims=("time",), device="cpu")
    assert len(loader) == 5
    with pytest.raises(ValueError, match=r"variables \['c'\] are not in arrays"):
        SampleLoader({"b": (bare, ("time",))}, 8, variables=["c"], sample_dims=("time",))


def test_one_read_task_per_batch_at_most(group, monkeypatch):
    calls = []
    real = loader_mod.read_regions
    monkeypatch.setattr(
        loader_mod, "read_regions", lambda boxes, *a: calls.append(len(boxes)) or real(boxes, *a)
    )
    loader = SampleLoader(group, 4, sample_dims=("time",), device="cpu", shuffle_buffer=2)
    assert len(list(loader)) == 13
    assert len(calls) <= 13 and sum(calls) == 2 * 5  # each group's window of x and t, once


def test_epochs_share_the_reading_threads_and_an_epoch_left_early_stops_reading(group, monkeypatch):
    import threading

    threads, calls = set(), []
    real = loader_mod.read_regions

    def counted(boxes, *a):
        threads.add(threading.get_ident())
        calls.append(1)
        return real(boxes, *a)

    monkeypatch.setattr(loader_mod, "read_regions", counted)
    loader = SampleLoader(group, 2, sample_dims=("time",), device="cpu", shuffle_buffer=1, prefetch=2)
    for epoch in range(3):
        loader.set_epoch(epoch)
        assert len(list(loader)) == 25
    assert len(threads) <= 2  # one pool of prefetch threads for every epoch
    calls.clear()
    it = iter(loader)
    next(it)
    it.close()  # left after one batch: at most the batches already started were read
    loader._pool.shutdown(wait=True)
    assert len(calls) <= 3


def test_the_memory_budget_bounds_batches_and_prefetch(group):
    one = 8 * (12 * 16 * 4 + 8)  # a batch of 8 samples of x and t
    with pytest.raises(ValueError, match="over memory_budget"):
        SampleLoader(group, 8, sample_dims=("time",), memory_budget=one - 1)
    with pytest.raises(ValueError, match="windows it needs do not fit"):
        SampleLoader(group, 8, sample_dims=("time",), memory_budget=one)
    loader = SampleLoader(group, 8, sample_dims=("time",), prefetch=8, memory_budget=one * 6, device="cpu")
    plan = loader.plan(0)
    ahead = loader.prefetch_for(plan)
    assert 1 <= ahead < 8

    def peak(p):  # windows alive while each batch is read, counted the slow way
        parts = [(j, g, idx) for j, ps in enumerate(plan.epoch.parts) for g, idx in ps]
        return max(
            sum(
                loader.window_bytes(*plan.bounds[g])
                for f, g, _ in parts
                if f <= j and plan.epoch.last_use[g] > j - p
            )
            for j in range(len(plan.epoch.batches))
        )

    assert ahead * one + peak(ahead) <= one * 6 < (ahead + 1) * one + peak(ahead + 1)
    assert sorted(int(v) for b in loader for v in b["t"]) == [10 * i for i in range(50)]


def test_a_variable_along_no_sample_dim_is_whole_in_every_sample_and_groups_nothing(group):
    g = zarr.open_group(group, mode="a")
    mask = g.create_array("mask", shape=(12, 16), chunks=(6, 16), dtype="f4", dimension_names=("y", "x"))
    mask[...] = sample(mask.shape, "f4")
    loader = SampleLoader(group, 4, sample_dims=("time",), device="cpu", variables=["x", "t", "mask"])
    plan, batches = _samples(loader)
    assert len(np.unique(plan.groups)) == 5  # t's chunks of 10, as without the mask
    for b in batches:
        assert np.array_equal(host(b["mask"]), np.broadcast_to(mask[...], (len(b["t"]), 12, 16)))


def test_samples_of_a_sharded_array_are_grouped_by_its_inner_chunks(tmp_path):
    a = zarr.create_array(
        tmp_path / "s.zarr",
        shape=(50, 12),
        chunks=(5, 12),
        shards=(25, 12),
        dtype="f4",
        dimension_names=("time", "y"),
    )
    a[...] = sample(a.shape, "f4")
    loader = SampleLoader({"a": a}, 4, sample_dims=("time",), device="cpu")
    plan, batches = _samples(loader)
    assert len(np.unique(plan.groups)) == 10  # one a read unit (inner chunk), not one a shard
    assert sorted(map(tuple, np.concatenate([host(b["a"]) for b in batches]))) == sorted(map(tuple, a[...]))


def test_variables_of_an_xarray_dataset_by_their_dims(tmp_path, device):
    xr = pytest.importorskip("xarray")
    import zarr_dask_gpu

    ds = xr.Dataset(
        {
            "u": (("time", "lat"), sample((30, 8), "f4")),
            "label": (("time",), np.arange(30, dtype="i4")),
        },
        coords={"time": np.arange(30)},
    )
    ds.to_zarr(
        tmp_path / "d.zarr", encoding={"u": {"chunks": (6, 8)}, "label": {"chunks": (6,)}}, zarr_format=3
    )
    opened = zarr_dask_gpu.open_dataset(tmp_path / "d.zarr", device=device)
    loader = SampleLoader(opened, 7, variables=["u", "label"], sample_dims=("time",), device=device)
    for b in loader:
        for k, lab in enumerate(host(b["label"]).tolist()):
            np.testing.assert_array_equal(host(b["u"][k]), ds["u"].values[lab])


def test_variables_whose_cf_decoding_changes_values_are_refused(tmp_path):
    xr = pytest.importorskip("xarray")
    import zarr_dask_gpu

    ds = xr.Dataset(
        {name: (("time",), np.arange(6, dtype="f4")) for name in ("plain", "masked", "scaled")},
        coords={"time": np.arange(6)},
    )
    encoding = {
        "masked": {"_FillValue": 5.0},
        "scaled": {"scale_factor": 0.5, "dtype": "i2", "_FillValue": -1},
    }
    ds.to_zarr(tmp_path / "d.zarr", encoding=encoding, zarr_format=3)
    opened = zarr_dask_gpu.open_dataset(tmp_path / "d.zarr", device="cpu")
    loader = SampleLoader(opened, 2, variables=["plain"], sample_dims=("time",), device="cpu")
    assert sorted(v for b in loader for v in b["plain"].tolist()) == list(range(6))  # NaN fill: as stored
    for name, why in (
        ("masked", "_FillValue=5.0 masked"),
        ("scaled", "scale_factor"),
        ("scaled", "decoded to float64"),
    ):
        with pytest.raises(ValueError, match=f"variable '{name}' is CF-decoded .*{why}"):
            SampleLoader(opened, 2, variables=[name], sample_dims=("time",), device="cpu")


@settings(max_examples=25, deadline=None)
@given(
    st.tuples(st.integers(1, 7), st.integers(1, 5)),  # chunks of x along time and y
    st.integers(1, 9),  # batch_size
    st.integers(1, 3),  # world_size
    st.integers(1, 3),  # shuffle_buffer
    st.booleans(),  # drop_last
    st.booleans(),  # patches (else samples along time)
)
def test_any_chunking_gives_every_sample_once_with_its_values(
    tmp_path_factory, chunks, bs, world, buffer, drop, patches
):
    path = tmp_path_factory.mktemp("h") / "g.zarr"
    g = zarr.open_group(path, mode="w")
    x = g.create_array("x", shape=(23, 5), chunks=chunks, dtype="i4", dimension_names=("time", "y"))
    x[...] = np.arange(23 * 5).reshape(23, 5)
    t = g.create_array("t", shape=(23,), chunks=(4,), dtype="i4", dimension_names=("time",))
    t[...] = np.arange(23)
    spec = {"patch": {"time": 3, "y": 2}} if patches else {"sample_dims": ("time",)}
    got = []
    for rank in range(world):
        loader = SampleLoader(
            path, bs, device="cpu", rank=rank, world_size=world, shuffle_buffer=buffer, drop_last=drop, **spec
        )
        plan = loader.plan(0)
        batches = list(loader)
        assert len(batches) == len(loader)
        for ids, b in zip(plan.epoch.batches, batches, strict=True):
            for k, s in enumerate(ids):
                o = plan.origins[s]
                want = x[o[0] : o[0] + 3, o[1] : o[1] + 2] if patches else x[int(o[0])]
                np.testing.assert_array_equal(b["x"][k], want)
                np.testing.assert_array_equal(b["t"][k], t[o[0] : o[0] + 3] if patches else t[int(o[0])])
                got.append(int(s))
    n = 7 * 2 if patches else 23
    assert len(got) == len(set(got))
    if not drop:
        assert sorted(got) == list(range(n))


def test_a_missing_chunk_when_strict_names_the_variable(group):
    (group / "t" / "c" / "2").unlink()
    loader = SampleLoader(group, 8, sample_dims=("time",), device="cpu", strict=True)
    with pytest.raises(MissingChunkError, match=r"c/2.*variable 't'"):
        list(loader)
    loose = SampleLoader(group, 50, sample_dims=("time",), device="cpu", shuffle=False)
    (b,) = list(loose)
    assert (b["t"][20:30] == 0).all() and b["t"][31] == 310  # the fill value


def test_the_loader_and_its_plans_do_not_import_torch():
    code = "import sys, zarr_dask_gpu.ml.loader, zarr_dask_gpu.ml.epochs; assert 'torch' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True)
