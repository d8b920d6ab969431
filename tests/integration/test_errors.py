"""Damaged chunks and metadata raise typed errors that name the path and key; never zeros."""

import json
import os

import numcodecs
import numpy as np
import pytest
import zarr
from zarr.codecs import GzipCodec, ZstdCodec

from zarr_dask_gpu import ChunkDecodeError, MetadataError, MissingChunkError, from_zarr_gpu

from ..helpers import host, sample

V2 = {
    "none": None,
    "zstd": numcodecs.Zstd(level=1),
    "gzip": numcodecs.GZip(level=1),
    "zlib": numcodecs.Zlib(level=1),
    "lz4": numcodecs.LZ4(),
    "blosc": numcodecs.Blosc(cname="lz4", shuffle=numcodecs.Blosc.SHUFFLE),
}


def _damage(kind, data, codec):
    rng = np.random.default_rng(1)
    if kind == "truncated":
        return data[: len(data) // 2]
    if kind == "truncated-by-one":
        return data[:-1]
    if kind == "empty":
        return b""
    if kind == "garbage":
        return rng.integers(0, 256, len(data), dtype=np.uint8).tobytes()
    if kind == "claims-larger":  # a valid stream of twice the chunk's size
        raw = codec.decode(data) if codec else data
        return codec.encode(bytes(raw) * 2) if codec else bytes(raw) * 2
    raise ValueError(kind)


def _write(tmp_path, codec, fmt=2):
    kw = {"compressors": V2[codec]} if fmt == 2 else {"compressors": [ZstdCodec(level=1)] if codec else []}
    a = zarr.create_array(
        tmp_path / "a.zarr", shape=(64, 64), chunks=(16, 32), dtype="f4", zarr_format=fmt, **kw
    )
    a[...] = sample(a.shape, "f4")
    return a


@pytest.mark.parametrize("kind", ["truncated", "truncated-by-one", "empty", "garbage", "claims-larger"])
@pytest.mark.parametrize("codec", list(V2))
def test_damaged_chunk_raises_naming_key(tmp_path, device, codec, kind):
    if codec == "none" and kind == "garbage":
        pytest.skip("raw bytes of the right length are valid data")
    a = _write(tmp_path, codec)
    key = "1.0"
    path = tmp_path / "a.zarr" / key
    data = path.read_bytes()
    path.write_bytes(_damage(kind, data, V2[codec]))
    x = from_zarr_gpu(tmp_path / "a.zarr", chunks=(32, 64), device=device)
    with pytest.raises(ChunkDecodeError) as e:
        x.compute()
    assert e.value.key == key
    assert key in str(e.value) and str(tmp_path / "a.zarr") in str(e.value)
    # blocks without the damaged chunk still read, and a good array reads in the same process
    np.testing.assert_array_equal(host(x[32:].compute()), a[32:])
    path.write_bytes(data)
    np.testing.assert_array_equal(host(x.compute()), a[...])


@pytest.mark.parametrize("kind", ["truncated", "empty", "garbage", "claims-larger"])
def test_damaged_v3_chunk_names_v3_key(tmp_path, device, kind):
    _write(tmp_path, "zstd", fmt=3)
    path = tmp_path / "a.zarr" / "c" / "2" / "1"
    path.write_bytes(_damage(kind, path.read_bytes(), numcodecs.Zstd()))
    with pytest.raises(ChunkDecodeError, match="c/2/1"):
        from_zarr_gpu(tmp_path / "a.zarr", device=device).compute()


def test_raw_chunk_of_wrong_length(tmp_path, device):
    _write(tmp_path, "none", fmt=3)
    path = tmp_path / "a.zarr" / "c" / "0" / "1"
    path.write_bytes(path.read_bytes() + b"\0" * 8)
    with pytest.raises(ChunkDecodeError, match="c/0/1"):
        from_zarr_gpu(tmp_path / "a.zarr", device=device).compute()


def test_strict_mode_raises_for_missing_chunks(tmp_path, device):
    a = zarr.create_array(tmp_path / "a.zarr", shape=(8,), chunks=(4,), dtype="i4")
    a[:4] = 1
    x = from_zarr_gpu(tmp_path / "a.zarr", device=device, strict=True)
    with pytest.raises(MissingChunkError, match="c/1"):
        x.compute()
    np.testing.assert_array_equal(host(x[:4].compute()), [1, 1, 1, 1])


def _edit_metadata(tmp_path, edit):
    zarr.create_array(tmp_path / "a.zarr", shape=(8,), chunks=(4,), dtype="i4")
    meta = tmp_path / "a.zarr" / "zarr.json"
    doc = json.loads(meta.read_text())
    text = edit(doc)
    meta.write_text(text if isinstance(text, str) else json.dumps(doc))


@pytest.mark.parametrize(
    "edit",
    [
        lambda d: "{not json",
        lambda d: d["codecs"].append({"name": "no-such-codec"}),
        lambda d: d.update(unknown_field={"x": 1}),
        lambda d: d.update(shape=[-8]),
    ],
    ids=["invalid-json", "unknown-codec", "unknown-field", "negative-shape"],
)
def test_bad_metadata_raises_at_open(tmp_path, edit):
    _edit_metadata(tmp_path, edit)
    with pytest.raises(MetadataError, match=str(tmp_path / "a.zarr")):
        from_zarr_gpu(tmp_path / "a.zarr", device="cpu")


def test_a_shape_of_too_many_blocks_raises_at_open_naming_the_path(tmp_path):
    _edit_metadata(tmp_path, lambda d: d.update(shape=[2**60], chunk_grid=_regular(1)))
    with pytest.raises(MetadataError, match=str(tmp_path / "a.zarr")):
        from_zarr_gpu(tmp_path / "a.zarr", device="cpu")


def _regular(size):
    return {"name": "regular", "configuration": {"chunk_shape": [size]}}


def test_metadata_zarr_opens_but_the_readers_cannot_take_raises_naming_the_path(tmp_path):
    """A sharding codec without index codecs, and a rectilinear chunk grid (zarr opens both): a
    MetadataError naming the array, not the layout's IndexError or zarr's NotImplementedError."""
    a = zarr.create_array(tmp_path / "s.zarr", shape=(10, 6), shards=(4, 6), chunks=(2, 3), dtype="f4")
    meta = tmp_path / "s.zarr" / "zarr.json"
    doc = json.loads(meta.read_text())
    doc["codecs"][0]["configuration"]["index_codecs"] = []
    meta.write_text(json.dumps(doc))
    with pytest.raises(MetadataError, match=f"{tmp_path / 's.zarr'}.*IndexError"):
        from_zarr_gpu(tmp_path / "s.zarr", device="cpu")
    with zarr.config.set({"array.rectilinear_chunks": True}):
        a = zarr.create_array(tmp_path / "r.zarr", shape=(10, 7), chunks=[[3, 5, 2], [4, 3]], dtype="i4")
        a[...] = np.arange(70).reshape(10, 7)
        with pytest.raises(MetadataError, match=f"{tmp_path / 'r.zarr'}.*NotImplementedError"):
            from_zarr_gpu(tmp_path / "r.zarr", device="cpu")


def test_unknown_field_that_need_not_be_understood_opens(tmp_path):
    _edit_metadata(tmp_path, lambda d: d.update(extra={"must_understand": False}))
    assert from_zarr_gpu(tmp_path / "a.zarr", device="cpu").shape == (8,)


def test_missing_array_raises_metadata_error(tmp_path):
    with pytest.raises(MetadataError, match="nothing-here"):
        from_zarr_gpu(tmp_path / "nothing-here", device="cpu")


@pytest.mark.parametrize("component", ["../x", "sub/../../x", "/etc", "..\\x"])
def test_component_leaving_the_store_is_rejected(tmp_path, component):
    g = zarr.open_group(tmp_path / "g.zarr", mode="w")
    g.create_array("x", shape=(2,), dtype="i1")
    os.makedirs(tmp_path / "x", exist_ok=True)
    with pytest.raises(MetadataError, match="leaves the store root"):
        from_zarr_gpu(tmp_path / "g.zarr", component, device="cpu")


@pytest.mark.parametrize(
    "inner", [[], [ZstdCodec(level=1)], [GzipCodec(level=1)]], ids=["raw", "zstd", "gzip"]
)
def test_crc32c_mismatch_raises_naming_key(tmp_path, device, inner):
    from zarr.codecs import Crc32cCodec

    a = zarr.create_array(
        tmp_path / "a.zarr", shape=(64,), chunks=(16,), dtype="f8", compressors=[*inner, Crc32cCodec()]
    )
    a[...] = sample(a.shape, "f8")
    path = tmp_path / "a.zarr" / "c" / "2"
    data = bytearray(path.read_bytes())
    data[-5] ^= 0x01  # the last byte before the checksum: structure intact, checksum wrong
    path.write_bytes(bytes(data))
    with pytest.raises(ChunkDecodeError, match="c/2") as e:
        from_zarr_gpu(tmp_path / "a.zarr", device=device).compute()
    assert "crc32c" in str(e.value).lower() or "checksum" in str(e.value).lower()


def test_a_group_without_component_lists_its_arrays(tmp_path):
    g = zarr.open_group(tmp_path / "g.zarr", mode="w")
    g.create_array("t2m", shape=(4,), dtype="f4")
    g.create_group("upper").create_array("u", shape=(4,), dtype="f4")
    with pytest.raises(MetadataError, match=r"zarr group: pass component=.*'t2m', 'upper/u'"):
        from_zarr_gpu(tmp_path / "g.zarr", device="cpu")
    with pytest.raises(MetadataError, match=r"root group holds the arrays 't2m', 'upper/u'"):
        from_zarr_gpu(tmp_path / "g.zarr", "t2", device="cpu")
    with pytest.raises(MetadataError, match=r"one of its arrays: 'upper/u'"):
        from_zarr_gpu(tmp_path / "g.zarr", "upper", device="cpu")
    assert from_zarr_gpu(tmp_path / "g.zarr", "upper/u", device="cpu").shape == (4,)


@pytest.mark.parametrize(
    "kwargs,match",
    [
        ({"component": 3}, "component must be a str"),
        ({"strict": "yes"}, "strict must be True, False or None"),
        ({"device": 1}, "device must be 'auto', 'gpu' or 'cpu'"),
    ],
)
def test_wrong_argument_types_raise_type_errors(tmp_path, kwargs, match):
    zarr.create_array(tmp_path / "a.zarr", shape=(4,), dtype="f4")
    kwargs.setdefault("device", "cpu")
    with pytest.raises(TypeError, match=match):
        from_zarr_gpu(tmp_path / "a.zarr", **kwargs)


def _without(monkeypatch, module: str) -> None:
    """``module`` as if it were not installed, for the package's ``extras.require``."""
    import importlib

    real = importlib.import_module

    def fake(name, *args):
        if name.split(".")[0] == module:
            raise ModuleNotFoundError(f"No module named {module!r}")
        return real(name, *args)

    monkeypatch.setattr(importlib, "import_module", fake)


@pytest.mark.parametrize(
    "url,module", [("s3://bucket/a.zarr", "s3fs"), ("https://example.org/a.zarr", "aiohttp")]
)
def test_a_missing_optional_dependency_names_its_extra(monkeypatch, url, module):
    _without(monkeypatch, module)
    with pytest.raises(
        ImportError, match=rf"needs {module}, which is not installed: .*zarr-dask-gpu\[remote\]"
    ):
        from_zarr_gpu(url, device="cpu")


def test_the_xarray_entry_points_name_their_extra(monkeypatch):
    import zarr_dask_gpu

    _without(monkeypatch, "xarray")
    with pytest.raises(ImportError, match=r"open_dataset needs xarray.*zarr-dask-gpu\[xarray\]"):
        zarr_dask_gpu.open_dataset  # noqa: B018
