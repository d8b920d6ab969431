"""torch: DLPack interchange, the streaming dataset, and state dicts as zarr (skipped without torch)."""

import numpy as np
import pytest
import zarr

torch = pytest.importorskip("torch")

from zarr_dask_gpu import ChunkDecodeError, from_zarr_gpu  # noqa: E402
from zarr_dask_gpu.ml.state_dict import (  # noqa: E402
    StateDictMismatchError,
    load_state_dict,
    placement,
    save_state_dict,
)
from zarr_dask_gpu.ml.tensors import ZarrBatches, ZarrSamples, as_tensor  # noqa: E402

from ..helpers import sample  # noqa: E402

DTYPES = [
    torch.float32,
    torch.float16,
    torch.bfloat16,
    torch.float64,
    torch.int8,
    torch.int16,
    torch.int32,
    torch.int64,
    torch.uint8,
    torch.bool,
    torch.complex64,
    *[getattr(torch, n) for n in ("float8_e4m3fn", "float8_e5m2") if hasattr(torch, n)],
]


def _torch_device(device):
    return "cuda" if device == "gpu" else "cpu"


def _random(shape, dtype, seed):
    g = torch.Generator().manual_seed(seed)
    if dtype == torch.bool:
        return torch.randint(0, 2, shape, generator=g).bool()
    if dtype.is_floating_point and dtype.itemsize == 1:  # float8: random bit patterns, NaNs included
        return torch.randint(0, 256, shape, generator=g, dtype=torch.uint8).view(dtype)
    if dtype.is_floating_point or dtype.is_complex:
        return (torch.randn(shape, generator=g, dtype=torch.float64) * 100).to(dtype)
    info = torch.iinfo(dtype)
    return torch.randint(max(info.min, -1000), min(info.max, 1000), shape, generator=g, dtype=dtype)


def _same_bits(a, b):
    a, b = a.cpu(), b.cpu()
    assert a.dtype == b.dtype and a.shape == b.shape
    if a.dtype.itemsize in (1, 2) and (a.dtype.is_floating_point):  # compare bits: NaN patterns too
        raw = torch.uint8 if a.dtype.itemsize == 1 else torch.int16
        return torch.equal(a.view(raw), b.view(raw))
    return torch.equal(a, b)


def test_blocks_become_tensors_without_copies(tmp_path, device):
    a = zarr.create_array(tmp_path / "a.zarr", shape=(64, 100), chunks=(16, 100), dtype="f4")
    a[...] = sample(a.shape, "f4")
    block = from_zarr_gpu(tmp_path / "a.zarr", chunks=(32, 100), device=device).blocks[1].compute()
    t = as_tensor(block)
    ptr = block.data.ptr if device == "gpu" else block.ctypes.data
    assert t.data_ptr() == ptr and t.device.type == _torch_device(device)
    np.testing.assert_array_equal(t.cpu().numpy(), a[32:64])


@pytest.mark.parametrize("prefetch", [1, 3])
def test_batches_stream_in_order(tmp_path, device, prefetch):
    a = zarr.create_array(tmp_path / "a.zarr", shape=(100, 7, 3), chunks=(8, 7, 3), dtype="i4")
    a[...] = sample(a.shape, "i4")
    ds = ZarrBatches(tmp_path / "a.zarr", 16, device=device, prefetch=prefetch)
    batches = list(torch.utils.data.DataLoader(ds, batch_size=None))
    assert len(batches) == len(ds) == 7 and batches[-1].shape == (4, 7, 3)
    assert all(b.device.type == _torch_device(device) for b in batches)
    np.testing.assert_array_equal(torch.cat([b.cpu() for b in batches]).numpy(), a[...])


@pytest.mark.parametrize("compressors", ["zstd", None])
def test_state_dict_round_trip_of_every_dtype(tmp_path, device, compressors):
    sd = {
        f"layer.{i}.{str(dt).removeprefix('torch.')}": _random((3 + i, 5), dt, i)
        for i, dt in enumerate(DTYPES)
    }
    sd["scalar"] = torch.tensor(7, dtype=torch.int64)
    sd["empty"] = torch.zeros((0, 4), dtype=torch.float32)
    save_state_dict(sd, tmp_path / "sd.zarr", compressors=compressors)
    got = load_state_dict(tmp_path / "sd.zarr", _torch_device(device), expected=sd)
    assert list(got) == list(sd)
    for name, t in sd.items():
        assert got[name].device.type == _torch_device(device), name
        assert _same_bits(got[name], t), name


def test_large_tensors_are_sharded_and_read_exactly(tmp_path, device):
    sd = {"w": _random((512, 256), torch.bfloat16, 1), "b": _random((256,), torch.float32, 2)}
    save_state_dict(sd, tmp_path / "sd.zarr", chunk_bytes=16 << 10, shard_bytes=64 << 10)
    w = zarr.open_array(tmp_path / "sd.zarr", path="w")
    assert w.shards is not None and w.dtype == np.uint16 and w.attrs["torch_dtype"] == "bfloat16"
    got = load_state_dict(tmp_path / "sd.zarr", _torch_device(device))
    assert _same_bits(got["w"], sd["w"]) and _same_bits(got["b"], sd["b"])


def test_placement_balances_a_list_of_devices_and_checks_a_mapping():
    nbytes = {"a": 100, "b": 60, "c": 50, "d": 10}
    got = placement(nbytes, [torch.device("cpu"), "cpu"])
    assert set(got.values()) == {torch.device("cpu")}
    # two distinct devices: largest first, each to the least loaded
    load = {}
    for name, dev in _placement_by_index(nbytes, 2).items():
        load[dev] = load.get(dev, 0) + nbytes[name]
    assert sorted(load.values()) == [110, 110]  # a: 0; b, c: 1; d: 0
    assert placement(nbytes, {n: "cpu" for n in nbytes}) == dict.fromkeys(nbytes, torch.device("cpu"))
    with pytest.raises(StateDictMismatchError, match=r"missing \['d'\].*not in the state dict \['x'\]"):
        placement(nbytes, {"a": "cpu", "b": "cpu", "c": "cpu", "x": "cpu"})
    with pytest.raises(ValueError, match="'cuda', 'cuda:N' or 'cpu'"):
        placement(nbytes, "meta")
    with pytest.raises(ValueError, match="empty list"):
        placement(nbytes, [])


def _placement_by_index(nbytes, n):
    """placement's balancing over ``n`` distinct devices, without needing n GPUs: cuda:i devices are
    only named, never touched, when they carry an index."""
    return placement(nbytes, [f"cuda:{i}" for i in range(n)])


def test_load_onto_a_list_or_mapping_of_devices(tmp_path, device):
    sd = {f"w{i}": _random((40 + i, 8), torch.bfloat16 if i % 2 else torch.float32, i) for i in range(6)}
    save_state_dict(sd, tmp_path / "sd.zarr")
    dev = _torch_device(device)
    for spec in ([dev], [dev, dev], {n: dev for n in sd}):
        got = load_state_dict(tmp_path / "sd.zarr", spec, expected=sd)
        assert list(got) == list(sd)
        for name, t in sd.items():
            assert got[name].device.type == dev and _same_bits(got[name], t), (spec, name)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available() or torch.cuda.device_count() < 2, reason="needs 2 GPUs")
def test_tensors_spread_over_several_gpus(tmp_path):
    sd = {f"w{i}": _random((64, 64), torch.float32, i) for i in range(8)}
    save_state_dict(sd, tmp_path / "sd.zarr")
    got = load_state_dict(tmp_path / "sd.zarr", ["cuda:0", "cuda:1"])
    assert {t.device.index for t in got.values()} == {0, 1}
    for name, t in sd.items():
        assert _same_bits(got[name], t), name
    got = load_state_dict(tmp_path / "sd.zarr", {n: f"cuda:{i % 2}" for i, n in enumerate(sd)})
    assert [t.device.index for t in got.values()] == [i % 2 for i in range(8)]


def test_tensors_are_read_together_in_tasks_of_block_size(tmp_path, device, monkeypatch):
    """Many small tensors: a few read tasks, each reading (and on the GPU decoding) several tensors
    together, not one task per tensor."""
    import dask

    import zarr_dask_gpu.ml.state_dict as sd_mod

    sd = {f"w{i}": _random((32, 64), torch.float32, i) for i in range(12)}  # 8 KiB each
    save_state_dict(sd, tmp_path / "sd.zarr", chunk_bytes=2 << 10)
    calls = []
    real = sd_mod.read_regions
    monkeypatch.setattr(sd_mod, "read_regions", lambda boxes, *a: calls.append(len(boxes)) or real(boxes, *a))
    with dask.config.set({"zarr_dask_gpu.block-size": "32KiB"}):
        got = load_state_dict(tmp_path / "sd.zarr", _torch_device(device), expected=sd)
    assert sorted(calls) == [4, 4, 4]
    for name, t in sd.items():
        assert _same_bits(got[name], t), name


def test_mismatch_with_the_model_raises_before_reading(tmp_path):
    sd = {"w": torch.ones(4, 4), "b": torch.zeros(4)}
    save_state_dict(sd, tmp_path / "sd.zarr")
    with pytest.raises(StateDictMismatchError, match=r"w: stored \(4, 4\) float32, expected \(4, 5\)"):
        load_state_dict(tmp_path / "sd.zarr", "cpu", expected={"w": torch.ones(4, 5), "b": torch.zeros(4)})
    with pytest.raises(StateDictMismatchError, match=r"b: stored .* float32, expected .* float16"):
        load_state_dict(
            tmp_path / "sd.zarr", "cpu", expected={"w": torch.ones(4, 4), "b": torch.zeros(4).half()}
        )
    with pytest.raises(StateDictMismatchError, match=r"missing tensors: \['c'\]"):
        load_state_dict(tmp_path / "sd.zarr", "cpu", expected={**sd, "c": torch.ones(1)})
    with pytest.raises(StateDictMismatchError, match="not a state dict"):
        zarr.open_group(tmp_path / "plain.zarr", mode="w")
        load_state_dict(tmp_path / "plain.zarr", "cpu")
    with pytest.raises(FileExistsError):
        save_state_dict(sd, tmp_path / "sd.zarr")


def test_damaged_chunk_names_the_tensor_and_key(tmp_path, device):
    save_state_dict({"layer.w": torch.randn(64, 64)}, tmp_path / "sd.zarr", chunk_bytes=4096)
    key = tmp_path / "sd.zarr" / "layer.w" / "c" / "1" / "0"
    key.write_bytes(key.read_bytes()[:10])
    with pytest.raises(ChunkDecodeError, match=r"layer\.w.*c/1/0|c/1/0.*layer\.w"):
        load_state_dict(tmp_path / "sd.zarr", _torch_device(device))


def test_a_slice_per_rank_reads_only_its_chunks(tmp_path, device):
    w = _random((64, 32), torch.bfloat16, 3)
    save_state_dict({"w": w, "b": torch.arange(8.0)}, tmp_path / "sd.zarr", chunk_bytes=1024)
    chunk_rows = zarr.open_array(tmp_path / "sd.zarr", path="w").chunks[0]
    rank_rows = slice(2 * chunk_rows, 4 * chunk_rows)
    for f in (tmp_path / "sd.zarr" / "w" / "c").iterdir():  # damage every other row of chunks
        if not 2 <= int(f.name) < 4:
            for g in f.rglob("*") if f.is_dir() else [f]:
                if g.is_file():
                    g.write_bytes(b"garbage")
    got = load_state_dict(
        tmp_path / "sd.zarr",
        _torch_device(device),
        slices={"w": (rank_rows,)},
        expected={"w": w[rank_rows], "b": torch.arange(8.0)},
    )
    assert _same_bits(got["w"], w[rank_rows])
    with pytest.raises(StateDictMismatchError, match="not in"):
        load_state_dict(tmp_path / "sd.zarr", "cpu", slices={"x": (slice(0, 1),)})


def test_dataloader_workers_share_the_batches(tmp_path):
    a = zarr.create_array(tmp_path / "a.zarr", shape=(100, 4), chunks=(10, 4), dtype="i4")
    a[...] = np.arange(400).reshape(100, 4)
    ds = ZarrBatches(tmp_path / "a.zarr", 16, device="cpu")
    got = list(torch.utils.data.DataLoader(ds, batch_size=None, num_workers=2))
    assert sorted(int(b[0, 0]) for b in got) == [0, 64, 128, 192, 256, 320, 384]  # each batch once


def _training_group(path):
    g = zarr.open_group(path, mode="w")
    x = g.create_array(
        "x", shape=(40, 6, 8), chunks=(5, 6, 8), dtype="f4", dimension_names=("time", "y", "x")
    )
    x[...] = sample(x.shape, "f4")
    t = g.create_array("t", shape=(40,), chunks=(10,), dtype="i8", dimension_names=("time",))
    t[...] = np.arange(40)
    return x


def test_samples_come_as_tensors_once_per_epoch_in_a_seeded_order(tmp_path, device):
    x = _training_group(tmp_path / "g.zarr")
    ds = ZarrSamples(tmp_path / "g.zarr", 6, sample_dims=("time",), device=device, seed=2)
    orders = []
    for epoch in (0, 1, 0):
        ds.set_epoch(epoch)
        batches = list(torch.utils.data.DataLoader(ds, batch_size=None, num_workers=0))
        assert len(batches) == len(ds) == 7
        order = []
        for b in batches:
            assert set(b) == {"x", "t"} and b["x"].device.type == _torch_device(device)
            for k, i in enumerate(b["t"].cpu().tolist()):
                np.testing.assert_array_equal(b["x"][k].cpu().numpy(), x[i])  # inputs and targets aligned
            order += b["t"].cpu().tolist()
        assert sorted(order) == list(range(40))
        orders.append(order)
    assert orders[0] == orders[2] and orders[0] != orders[1]


def test_ranks_given_read_disjoint_balanced_shares(tmp_path):
    _training_group(tmp_path / "g.zarr")
    shares = []
    for rank in range(3):
        ds = ZarrSamples(
            tmp_path / "g.zarr",
            4,
            sample_dims=("time",),
            device="cpu",
            rank=rank,
            world_size=3,
            drop_last=True,
        )
        shares.append([i for b in ds for i in b["t"].tolist()])
        assert len(ds) == 3 and all(len(b["t"]) == 4 for b in ds)
    every = [i for s in shares for i in s]
    assert len(every) == len(set(every)) == 36


def test_patches_are_tensors_of_the_patch_shape(tmp_path, device):
    x = _training_group(tmp_path / "g.zarr")
    ds = ZarrSamples(
        tmp_path / "g.zarr", 5, variables=["x"], patch={"time": 4, "y": 3, "x": 4}, device=device
    )
    plan = ds.loader.plan(0)
    for ids, b in zip(plan.epoch.batches, ds, strict=True):
        assert b["x"].shape[1:] == (4, 3, 4)
        for k, s in enumerate(ids):
            t0, y0, x0 = plan.origins[s]
            np.testing.assert_array_equal(b["x"][k].cpu().numpy(), x[t0 : t0 + 4, y0 : y0 + 3, x0 : x0 + 4])


def test_samples_refuse_dataloader_workers(tmp_path):
    _training_group(tmp_path / "g.zarr")
    ds = ZarrSamples(tmp_path / "g.zarr", 4, sample_dims=("time",), device="cpu")
    with pytest.raises(RuntimeError, match="num_workers=0"):
        list(torch.utils.data.DataLoader(ds, batch_size=None, num_workers=2))
