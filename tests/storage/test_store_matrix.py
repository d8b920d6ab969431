"""Every kind of store x every front door x device: values equal zarr-python's read of the same bytes,
absent chunks the fill value exactly where the store has no key, and what cannot be read a typed
error naming the store. The stores are the real packages (zarr, fsspec, obstore, Icechunk, kerchunk's
reference filesystem) on local disk and in memory; ``stores_kit`` writes the same trees into each."""

import json
import os
import pickle

import dask.array
import numpy as np
import pytest
import xarray as xr
import zarr

import zarr_dask_gpu
from zarr_dask_gpu import StoreError, from_zarr_gpu
from zarr_dask_gpu.cli import main as cli
from zarr_dask_gpu.ml.loader import SampleLoader
from zarr_dask_gpu.resolve import open_array_info

from ..helpers import host
from ..stores_kit import ARRAYS, STORES, available, expected, kerchunk_references, reference_tree

CASES = [(group, name) for group, names in ARRAYS.items() for name in names]


@pytest.fixture(scope="module")
def tree(tmp_path_factory):
    return reference_tree(tmp_path_factory.mktemp("tree"))


@pytest.fixture(params=list(STORES))
def kind(request):
    found = STORES[request.param]
    if not available(found):
        pytest.skip(f"needs {', '.join(found.needs)}")
    return request.param, found


def _doors(kind, tree, tmp, group, name, device):
    store, path, options = kind.at(tree, tmp, f"{group}/{name}")
    yield "from_zarr_gpu", from_zarr_gpu(store, path or None, storage_options=options, device=device)
    array = zarr.open_array(store, path=path, mode="r", storage_options=options)
    yield "zarr.Array", from_zarr_gpu(array, device=device)
    store, path, options = kind.at(tree, tmp / "group", group)
    node = zarr.open_group(store, path=path, mode="r", storage_options=options)
    yield "zarr.Group", from_zarr_gpu(node, name, device=device)


@pytest.mark.parametrize(("group", "name"), CASES)
def test_every_door_reads_what_zarr_reads(kind, tree, tmp_path, group, name, device):
    label, kind = kind
    if kind.v3_only and group == "g2":
        pytest.skip("Icechunk holds zarr v3 only")
    want = expected(tree, group, name)
    store, path, options = kind.at(tree, tmp_path / "oracle", f"{group}/{name}")
    oracle = zarr.open_array(store, path=path, mode="r", storage_options=options)[...]
    np.testing.assert_array_equal(oracle, want)  # the store itself holds the tree
    for door, x in _doors(kind, tree, tmp_path, group, name, device):
        got = host(x.compute())
        np.testing.assert_array_equal(got, want, err_msg=f"{label} through {door}")
        np.testing.assert_array_equal(host(x[5:60:3, 7:40].compute()), want[5:60:3, 7:40], err_msg=door)


@pytest.mark.parametrize("group", list(ARRAYS))
def test_xarray_reads_what_engine_zarr_reads(kind, tree, tmp_path, group, device):
    _, kind = kind
    if kind.v3_only and group == "g2":
        pytest.skip("Icechunk holds zarr v3 only")
    store, path, options = kind.at(tree, tmp_path, group)
    kw = {"group": path or None, "storage_options": options, "consolidated": False}
    want = xr.open_dataset(store, engine="zarr", **kw).compute()
    got = xr.open_dataset(store, engine="zarr_gpu", device=device, **kw)
    assert all(type(got[v].data).__module__.startswith("dask") for v in got.data_vars)
    xr.testing.assert_identical(got.compute().as_numpy(), want)
    same = zarr_dask_gpu.open_dataset(store, device=device, **kw)
    xr.testing.assert_identical(same.compute().as_numpy(), want)
    try:
        want_tree = xr.open_datatree(store, engine="zarr", **kw).compute()
    except Exception as e:  # xarray's zarr engine refuses it (an fsspec mapper with a group): alike
        with pytest.raises(type(e)):
            xr.open_datatree(store, engine="zarr_gpu", device=device, **kw)
        return
    tree = xr.open_datatree(store, engine="zarr_gpu", device=device, **kw)
    xr.testing.assert_identical(tree.compute().map_over_datasets(lambda d: d.as_numpy()), want_tree)


def test_the_loader_reads_a_group_of_any_store(kind, tree, tmp_path, device):
    label, found = kind
    store, path, options = found.at(tree, tmp_path, "g3")
    group = zarr.open_group(store, path=path, mode="r", storage_options=options)
    loader = SampleLoader(group, 4, variables=["plain", "sharded"], sample_dims=("y",), device=device)
    loader.set_epoch(0)
    plan = loader.plan(0)
    batch, ids = next(iter(loader)), plan.epoch.batches[0]
    for var in ("plain", "sharded"):
        want = expected(tree, "g3", var)
        for k, s in enumerate(ids):
            np.testing.assert_array_equal(host(batch[var][k]), want[int(s)], err_msg=label)


@pytest.mark.parametrize("kind", ["path", "file-url", "zip-url", "memory-url"])
def test_the_command_line_takes_urls_of_any_filesystem(tree, tmp_path, kind, capsys):
    store, _ = STORES[kind].make(tree, tmp_path)
    assert cli(["info", str(store), "--component", "g3/sharded", "--device", "cpu", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["shape"] == [70, 45] and doc["shard_shape"] == [32, 45]
    assert cli(["read", str(store), "--component", "g3/plain", "--device", "cpu", "--json"]) == 0


def test_a_chunk_reads_as_the_fill_value_only_where_the_store_has_no_key(tree, tmp_path):
    """A reference to a file that is not there, a native Icechunk chunk whose file was removed: the
    store lists the chunk, so its loss is an error naming the store, never the fill value."""
    refs = kerchunk_references(tree)
    key = next(k for k, v in refs["refs"].items() if isinstance(v, list) and k.startswith("g3/plain/"))
    refs["refs"][key] = [str(tmp_path / "gone.bin"), 0, refs["refs"][key][2]]
    with pytest.raises(StoreError, match=r"gone\.bin"):
        from_zarr_gpu("reference://", "g3/plain", storage_options={"fo": refs}, device="cpu").compute()
    icechunk = pytest.importorskip("icechunk")
    store, _ = STORES["icechunk"].make(tree, tmp_path)
    info = open_array_info(store, "g3/plain")
    (native,) = info.store.whole([info.chunk_path((0, 0))])
    assert native is not None and native.path.startswith(str(tmp_path / "repo" / "chunks"))
    os.remove(native.path)
    with pytest.raises(StoreError, match="not there"):
        from_zarr_gpu(store, "g3/plain", device="cpu").compute()
    assert isinstance(store, icechunk.IcechunkStore)


def test_stores_zarr_cannot_take_are_refused_with_a_typed_error():
    with pytest.raises(StoreError, match="zarr-python cannot open it"):
        from_zarr_gpu(object())
    with pytest.raises(StoreError, match="storage_options"):
        from_zarr_gpu(zarr.storage.MemoryStore(), storage_options={"anon": True})


def test_which_byte_path_each_store_gets(tree, tmp_path):
    """Local files are read directly whatever object names them; references and Icechunk sessions
    by where each chunk lies; everything else through the store's get."""
    from zarr_dask_gpu.storage.icechunk_store import IcechunkChunks
    from zarr_dask_gpu.storage.references import ReferenceStore
    from zarr_dask_gpu.storage.stores import KeyStore, LocalStore

    want = {
        "path": LocalStore,
        "pathlib": LocalStore,
        "file-url": LocalStore,
        "fsspec-mapper": LocalStore,
        "zarr-localstore": LocalStore,
        "zarr-fsspecstore-file": LocalStore,
        "obstore-local": LocalStore,
        "zip-url": KeyStore,
        "zipstore": KeyStore,
        "simplecache-url": KeyStore,
        "memory-url": KeyStore,
        "memorystore": KeyStore,
        "obstore-memory": KeyStore,
        "icechunk": IcechunkChunks,
        "icechunk-writable": KeyStore,
        "reference-url": ReferenceStore,
    }
    for name, cls in want.items():
        kind = STORES[name]
        if not available(kind):
            continue
        where = tmp_path / name
        where.mkdir()
        store, path, options = kind.at(tree, where, "g3/plain")
        info = open_array_info(store, path or None, storage_options=options)
        assert type(info.store) is cls, name
        if cls is KeyStore:
            assert (info.store.home is not None) == kind.bound, name


def test_inline_chunks_of_icechunk_are_read_through_the_store(tree, tmp_path):
    pytest.importorskip("icechunk")
    from zarr_dask_gpu.storage.units import Source

    store, _ = STORES["icechunk"].make(tree, tmp_path)
    info = open_array_info(store, "g3/mixed")
    native, inline, absent = info.store.whole([info.chunk_path(c) for c in [(0, 0), (2, 0), (3, 0)]])
    assert native.source is Source.FILE and inline.source is Source.KEY and absent is None
    got = from_zarr_gpu(store, "g3/mixed", device="cpu").compute()
    np.testing.assert_array_equal(got, expected(tree, "g3", "mixed"))


@pytest.fixture
def processes():
    distributed = pytest.importorskip("distributed")
    with (
        distributed.LocalCluster(n_workers=2, threads_per_worker=1, dashboard_address=None) as cluster,
        distributed.Client(cluster) as client,
    ):
        yield client


@pytest.mark.parametrize("kind", ["icechunk", "reference-url", "zip-url", "obstore-local", "zipstore"])
def test_stores_travel_to_worker_processes(processes, tree, tmp_path, kind):
    if not available(STORES[kind]):
        pytest.skip("not installed")
    store, options = STORES[kind].make(tree, tmp_path)
    x = from_zarr_gpu(store, "g3/sharded", storage_options=options, chunks=(32, 45), device="cpu")
    np.testing.assert_array_equal(processes.compute(x).result(), expected(tree, "g3", "sharded"))


@pytest.mark.parametrize("kind", ["memorystore", "memory-url", "obstore-memory"])
def test_stores_in_this_process_memory_are_refused_by_a_cluster_of_processes(processes, tree, tmp_path, kind):
    if not available(STORES[kind]):
        pytest.skip("not installed")
    store, options = STORES[kind].make(tree, tmp_path)
    with pytest.raises(StoreError, match="memory of the process"):
        from_zarr_gpu(store, "g3/plain", storage_options=options, device="cpu")


def test_a_memory_store_that_reaches_another_process_anyway_refuses_to_read(tree, tmp_path):
    """Built before any cluster, then computed by a worker in another process: the task refuses."""
    distributed = pytest.importorskip("distributed")
    store, _ = STORES["memorystore"].make(tree, tmp_path)
    x = from_zarr_gpu(store, "g3/plain", device="cpu")
    with (
        distributed.LocalCluster(n_workers=1, threads_per_worker=1, dashboard_address=None) as cluster,
        distributed.Client(cluster) as client,
        pytest.raises(StoreError, match="memory of the process"),
    ):
        client.compute(x).result()
    np.testing.assert_array_equal(x.compute(scheduler="threads"), expected(tree, "g3", "plain"))


def test_a_writable_icechunk_session_is_refused_by_a_cluster_of_processes(processes, tree, tmp_path):
    pytest.importorskip("icechunk")
    store, _ = STORES["icechunk-writable"].make(tree, tmp_path)
    with pytest.raises(StoreError, match="readonly_session"):
        from_zarr_gpu(store, "g3/plain", device="cpu")


def test_pickled_key_stores_keep_their_store(tree, tmp_path):
    store, _ = STORES["zipstore"].make(tree, tmp_path)
    info = open_array_info(store, "g3/plain")
    again = pickle.loads(pickle.dumps(info))
    got = from_zarr_gpu(again.store.store, "g3/plain", device="cpu").compute()
    np.testing.assert_array_equal(got, expected(tree, "g3", "plain"))


def test_open_mfdataset_and_open_datatree_take_stores_and_storage_options(tree, tmp_path, device):
    parts = []
    for i in range(2):
        ds = xr.Dataset(
            {"t": (("time", "y"), np.full((3, 4), i, "f4"))}, coords={"time": np.arange(3) + 3 * i}
        )
        store = zarr.storage.MemoryStore()
        ds.to_zarr(store, consolidated=False)
        parts.append(store)
    kw = {"combine": "by_coords", "consolidated": False}
    got = xr.open_mfdataset(parts, engine="zarr_gpu", device=device, **kw)
    xr.testing.assert_identical(
        got.compute().as_numpy(), xr.open_mfdataset(parts, engine="zarr", **kw).compute()
    )
    refs = {"fo": kerchunk_references(tree)}
    got_tree = xr.open_datatree(
        "reference://", engine="zarr_gpu", device=device, group="g3", storage_options=refs
    )
    want = xr.open_datatree("reference://", engine="zarr", group="g3", storage_options=refs)
    xr.testing.assert_identical(got_tree.compute().map_over_datasets(lambda d: d.as_numpy()), want.compute())


def test_arrays_of_equal_metadata_in_two_stores_have_two_names(tree, tmp_path):
    """No text (a chained URL, reference://) tells such stores apart: dask's names must, or a graph
    over both reads one of them twice."""
    refs = kerchunk_references(tree)
    other = json.loads(json.dumps(refs))
    other["refs"] = {k: v for k, v in other["refs"].items() if not k.startswith("g3/plain/c")}  # all fill
    a = from_zarr_gpu("reference://", "g3/plain", storage_options={"fo": refs}, device="cpu")
    b = from_zarr_gpu("reference://", "g3/plain", storage_options={"fo": other}, device="cpu")
    assert a.name != b.name
    both = dask.array.stack([a, b]).compute()
    np.testing.assert_array_equal(both[0], expected(tree, "g3", "plain"))
    assert (both[1] == -1).all()
    zips = [STORES["zip-url"].at(tree, tmp_path / f"z{i}", "g3/plain")[0] for i in range(2)]
    names = {from_zarr_gpu(z, "g3/plain", device="cpu").name for z in zips}
    assert len(names) == 2


def test_damaged_references_raise_before_anything_is_read(tree):
    refs = kerchunk_references(tree)
    key = next(k for k, v in refs["refs"].items() if isinstance(v, list) and k.startswith("g3/plain/"))
    url, offset, size = refs["refs"][key]
    for bad in ([url, offset, -16], [url, offset, 10**14], [url, -5, size]):
        damaged = {**refs, "refs": {**refs["refs"], key: bad}}
        x = from_zarr_gpu("reference://", "g3/plain", storage_options={"fo": damaged}, device="cpu")
        with pytest.raises(StoreError, match="a file of"):
            x.compute()


def test_a_zero_dimensional_icechunk_array_reads(tmp_path):
    icechunk = pytest.importorskip("icechunk")
    repo = icechunk.Repository.create(icechunk.local_filesystem_storage(str(tmp_path / "repo")))
    session = repo.writable_session("main")
    zarr.create_array(session.store, name="s", shape=(), dtype="f8", fill_value=0.0)[...] = 2.5
    session.commit("a scalar")
    store = repo.readonly_session("main").store
    assert float(from_zarr_gpu(store, "s", device="cpu").compute()) == 2.5
