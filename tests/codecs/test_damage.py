"""The read path against a fuzz corpus of stored chunks (tests/damage.py): where numcodecs decodes a
chunk to its metadata's size, the block holds those bytes; where it refuses, the read raises
ChunkDecodeError naming the array and the chunk key. Verdicts come from the reference, never from
expectations written here."""

import functools
import hashlib
import itertools
import json
import os
import select
import subprocess
import sys
from collections import Counter, defaultdict
from pathlib import Path

import dask
import numcodecs
import numpy as np
import pytest
import zarr
from zarr.codecs import BloscCodec, GzipCodec, ZstdCodec

from zarr_dask_gpu import ChunkDecodeError, from_zarr_gpu
from zarr_dask_gpu.resolve import open_array_info
from zarr_dask_gpu.storage.units import read_shard_index

from ..damage import (
    CODECS,
    ZSTD_SECTIONS,
    Case,
    corpus,
    numcodecs_hangs,
    parse_zstd,
    reference,
    zstd_sections,
)
from ..helpers import host

V3_CODECS = ("zstd", "gzip", "blosc-lz4", "blosc-lz4hc", "blosc-zstd", "blosc-zlib", "blosc-blosclz")
# (codec, zarr format, whether a filter the host does not size sits before the compressor)
LAYOUTS = [(c, 2, False) for c in CODECS] + [(c, 3, False) for c in V3_CODECS]
LAYOUTS += [(c, 2, True) for c in CODECS]


class Unsized(numcodecs.abc.Codec):
    """A filter that leaves the bytes as they are, and that the package knows nothing of: its chains
    decode on the host, the compressor's headers held to a bound rather than to the chunk's size."""

    codec_id = "zarr-dask-gpu-test-unsized"

    def encode(self, buf):
        return buf

    def decode(self, buf, out=None):
        return numcodecs.compat.ndarray_copy(buf, out) if out is not None else buf


numcodecs.register_codec(Unsized)


@functools.cache
def _corpus() -> tuple[Case, ...]:
    return tuple(corpus(seed=0, scale="ci"))


@functools.cache
def _verdicts() -> tuple[bytes | None, ...]:
    """Each case's reference verdict: a digest of the bytes numcodecs decodes, or None."""
    out = []
    for case in _corpus():
        ref = reference(case)
        out.append(None if ref is None else hashlib.blake2b(ref, digest_size=16).digest())
    return tuple(out)


def _v3_compressor(config: dict, itemsize: int):
    """zarr's own v3 codec for a numcodecs config (decoding ignores its settings but the id)."""
    if config["id"] == "zstd":
        return ZstdCodec(level=config.get("level", 3), checksum=config.get("checksum", False))
    if config["id"] == "gzip":
        return GzipCodec(level=config.get("level", 5))
    shuffle = {0: "noshuffle", 1: "shuffle", 2: "bitshuffle"}[config["shuffle"]]
    return BloscCodec(cname=config["cname"], clevel=config["clevel"], shuffle=shuffle, typesize=itemsize)


@functools.cache
def _hangs() -> frozenset[int]:
    """The cases on which numcodecs' Zstd.decode never returns: read in a subprocess with a deadline."""
    return frozenset(i for i, c in enumerate(_corpus()) if c.codec == "zstd" and numcodecs_hangs(c.data))


def _write(
    root: Path, codec: str, fmt: int, hanging: bool = False, unsized: bool = False
) -> list[tuple[Path, int, list[int]]]:
    """One array per (config, size, itemsize) of ``codec``'s cases (those on which numcodecs hangs,
    or all others), each chunk file overwritten with one case's bytes: (array path, elements per
    chunk, the cases' indices in chunk order). ``unsized``: v2 arrays with the ``Unsized`` filter."""
    groups: dict[tuple, list[int]] = defaultdict(list)
    every = int(os.environ.get("ZDG_DAMAGE_EVERY", "1"))  # a sample, for compute-sanitizer's slow runs
    for i, case in enumerate(_corpus()):
        if case.codec == codec and (i in _hangs()) == hanging and (hanging or i % every == 0):
            groups[(json.dumps(case.config, sort_keys=True), case.size, case.itemsize)].append(i)
    out = []
    for g, ((config, size, itemsize), members) in enumerate(sorted(groups.items())):
        path = root / f"a{g}.zarr"
        elems = size // itemsize
        kw = dict(shape=(elems * len(members),), chunks=(elems,), dtype=f"<u{itemsize}", fill_value=0)
        cfg = json.loads(config)
        if fmt == 2:
            comp, filters = numcodecs.get_codec(cfg), [Unsized()] if unsized else None
            zarr.create_array(path, zarr_format=2, compressors=comp, filters=filters, **kw)
        else:
            zarr.create_array(path, zarr_format=3, compressors=[_v3_compressor(cfg, itemsize)], **kw)
            (path / "c").mkdir()
        for j, i in enumerate(members):
            (path / (str(j) if fmt == 2 else f"c/{j}")).write_bytes(_corpus()[i].data)
        out.append((path, elems, members))
    return out


def _check(x, j: int, key: str, location: str, verdict: bytes | None) -> str | None:
    """Why block ``j`` disagrees with the reference's verdict, or None when it agrees."""
    try:
        got = host(x.blocks[j].compute(scheduler="sync"))
    except ChunkDecodeError as e:
        if verdict is not None:
            return f"refused a chunk the reference decodes: {e.reason}"
        if e.key != key or e.store != location or repr(key) not in str(e) or location not in str(e):
            return f"ChunkDecodeError names {e.key!r} of {e.store!r}, not {key!r} of {location!r}: {e}"
        return None
    except Exception as e:  # any other type is wrong too
        return f"raised {type(e).__name__} (not ChunkDecodeError): {e}"
    if verdict is None:
        return "decoded a chunk the reference refuses"
    if hashlib.blake2b(np.ascontiguousarray(got).tobytes(), digest_size=16).digest() != verdict:
        return "decoded to other bytes than the reference"
    return None


def _summary(failures: list[tuple[Case, str]], checked: int) -> str:
    by = Counter((c.label, why.split(":")[0]) for c, why in failures)
    first = {}
    for c, why in failures:
        first.setdefault((c.label, why.split(":")[0]), f"{why} (size {c.size}, {len(c.data)} bytes stored)")
    lines = [f"{len(failures)} of {checked} chunks disagree with the reference:"]
    lines += [f"  {label}: {n} x, e.g. {first[label, w]}" for (label, w), n in sorted(by.items())]
    return "\n".join(lines)


@pytest.mark.filterwarnings("ignore::zarr_dask_gpu.ZarrGpuWarning")
@pytest.mark.parametrize(
    "codec,fmt,unsized", LAYOUTS, ids=[f"{c}-v{f}{'-unsized-filter' * u}" for c, f, u in LAYOUTS]
)
def test_reads_agree_with_the_reference(tmp_path, device, codec, fmt, unsized):
    verdicts = _verdicts()
    failures: list[tuple[Case, str]] = []
    checked = 0
    for path, elems, members in _write(tmp_path, codec, fmt, unsized=unsized):
        x = from_zarr_gpu(path, chunks=elems, device=device)
        assert x.numblocks == (len(members),)
        location = os.path.abspath(path)
        for j, i in enumerate(members):
            key = str(j) if fmt == 2 else f"c/{j}"
            why = _check(x, j, key, location, verdicts[i])
            checked += 1
            if why:
                failures.append((_corpus()[i], why))
    assert checked
    assert not failures, _summary(failures, checked)


# a reader that never returns is a failure, not a hung test run: these chunks are read in a child
# process, each block with a deadline
_READER = """
import json, sys, hashlib
import dask, numpy as np, zarr
from zarr_dask_gpu import ChunkDecodeError, from_zarr_gpu
path, elems, start, settings, device = sys.argv[1:6]
elems, start = int(elems), int(start)
with dask.config.set({"zarr_dask_gpu": json.loads(settings)}):
    warm = zarr.create_array(path + "-warm", shape=(4096,), chunks=(1024,), dtype="u1", overwrite=True)
    warm[...] = 7  # a sound array read first: the device's start-up (kernel builds) is not a hang
    assert (from_zarr_gpu(path + "-warm", device=device).compute(scheduler="sync") == 7).all()
    x = from_zarr_gpu(path, chunks=elems, device=device)
    for j in range(start, x.numblocks[0]):
        print("begin", j, flush=True)
        try:
            got = x.blocks[j].compute(scheduler="sync")
            got = np.ascontiguousarray(got.get() if hasattr(got, "get") else got)
            out = ["decoded", hashlib.blake2b(got.tobytes(), digest_size=16).hexdigest()]
        except ChunkDecodeError as e:
            out = ["refused", e.key, e.store, str(e)]
        except Exception as e:
            out = ["raised", type(e).__name__ + ": " + str(e)]
        print("end", j, json.dumps(out), flush=True)
"""


DEADLINE = 3.0  # seconds for one 4 KiB block, after the reader process has started


def _read_in_child(path: Path, elems: int, n: int, device: str, deadline: float) -> dict[int, list]:
    """Each block's outcome, read by ``_READER``; a block unfinished after ``deadline`` seconds is
    ``["hung"]`` (its process is killed and a new one reads on from the next block)."""
    settings = json.dumps(dask.config.get("zarr_dask_gpu", {}), default=str)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(Path(__file__).parents[2]), *sys.path])}
    out: dict[int, list] = {}
    start = 0
    while start < n:
        cmd = [sys.executable, "-c", _READER, str(path), str(elems), str(start), settings, device]
        with subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True, env=env) as proc:
            current = None
            while True:
                ready, _, _ = select.select([proc.stdout], [], [], deadline if current is not None else 300)
                if not ready:  # a block past its deadline (or a child that never began)
                    proc.kill()
                    proc.wait()
                    if current is None:
                        raise AssertionError(f"the reader of {path} did not start")
                    out[current] = ["hung"]
                    start = current + 1
                    break
                line = proc.stdout.readline()
                if not line:
                    assert proc.wait() == 0, f"the reader of {path} failed (exit {proc.returncode})"
                    start = n
                    break
                word, j, *rest = line.rstrip("\n").split(" ", 2)
                if word == "begin":
                    current = int(j)
                else:
                    out[int(j)], current = json.loads(rest[0]), None
    return out


@pytest.mark.filterwarnings("ignore::zarr_dask_gpu.ZarrGpuWarning")
def test_chunks_on_which_numcodecs_zstd_hangs(tmp_path, device):
    """Whole frames without a content size, then the start of another frame's header: numcodecs'
    Zstd.decode loops for ever (damage.numcodecs_hangs). A reader must refuse them, and return."""
    assert len(_hangs()) >= 5
    failures: list[tuple[Case, str]] = []
    for path, elems, members in _write(tmp_path, "zstd", 2, hanging=True):
        got = _read_in_child(path, elems, len(members), device, deadline=DEADLINE)
        location = os.path.abspath(path)
        for j, i in enumerate(members):
            outcome = got[j]
            if outcome[0] == "hung":
                failures.append((_corpus()[i], f"hung: the read did not return within {DEADLINE} s"))
            elif outcome[0] != "refused":
                failures.append((_corpus()[i], f"{outcome[0]}: not ChunkDecodeError: {outcome[1:]}"))
            elif outcome[1] != str(j) or outcome[2] != location:
                failures.append((_corpus()[i], f"misnamed: ChunkDecodeError names {outcome[1:3]}"))
    assert not failures, _summary(failures, len(_hangs()))


# ---------------------------------------------------------------------------------------------
# sharded v3: damaged inner chunks name the shard key and the inner chunk


def _shard_bytes(chunks: list[bytes], n_index: int) -> bytes:
    """A shard (index at the end, crc32c) holding ``chunks`` in order."""
    import google_crc32c

    index, body, off = [], b"", 0
    for c in chunks:
        index.append((off, len(c)))
        body += c
        off += len(c)
    assert len(index) == n_index
    idx = np.array(index, dtype="<u8").tobytes()
    return body + idx + google_crc32c.value(idx).to_bytes(4, "little")


SHARD_DAMAGE = ("flip", "garbage", "truncated", "truncated-and-reindexed", "zeroed-header")


@pytest.mark.parametrize("compressor", ["zstd", "blosc"])
@pytest.mark.parametrize("damage", SHARD_DAMAGE)
def test_damaged_inner_chunk_of_a_shard(tmp_path, device, compressor, damage):
    rng = np.random.default_rng(7)
    comp = (
        ZstdCodec(level=3) if compressor == "zstd" else BloscCodec(cname="lz4", typesize=4, shuffle="shuffle")
    )
    path = tmp_path / "s.zarr"
    a = zarr.create_array(
        path, shape=(4096,), shards=(1024,), chunks=(256,), dtype="<f4", compressors=[comp], fill_value=0
    )
    values = np.round(np.sin(np.arange(4096) / 50) * 20 + rng.normal(0, 0.2, 4096), 1).astype("<f4")
    a[...] = values
    info = open_array_info(path)
    shard, inner = 2, 1  # inner chunk (1,) of shard c/2: elements 2304-2559
    file, entries = read_shard_index(info, (shard * 4 + inner,))
    data = Path(file).read_bytes()
    chunks = [data[int(o) : int(o) + int(n)] for o, n in entries.reshape(-1, 2)]
    victim = chunks[inner]
    if damage == "flip":  # a bit of the frame header's size field or blosc's nbytes
        bad = bytearray(victim)
        bad[6 if compressor == "zstd" else 5] ^= 0x10
        bad = bytes(bad)
    elif damage == "garbage":
        bad = rng.integers(0, 256, len(victim), dtype=np.uint8).tobytes()
    elif damage == "zeroed-header":
        bad = bytes(16) + victim[16:]
    elif damage == "truncated":  # in place: cut short, then zeros, so the index stays valid
        bad = victim[: len(victim) // 2] + bytes(len(victim) - len(victim) // 2)
    else:  # cut short, the shard rewritten with an index that says so
        bad = victim[: len(victim) // 2]
    case = Case(
        "zstd" if compressor == "zstd" else "blosc-lz4",
        damage,
        bad,
        256 * 4,
        4,
        numcodecs.Zstd().get_config() if compressor == "zstd" else numcodecs.Blosc().get_config(),
    )
    assert reference(case) is None  # a damage the reference refuses
    if damage == "truncated-and-reindexed":
        chunks[inner] = bad
        Path(file).write_bytes(_shard_bytes(chunks, len(chunks)))
        assert len(Path(file).read_bytes()) < len(data)
    else:
        assert len(bad) == len(victim)
        offset = int(entries.reshape(-1, 2)[inner][0])
        Path(file).write_bytes(data[:offset] + bad + data[offset + len(victim) :])
    x = from_zarr_gpu(path, chunks=256, device=device)
    for j in range(16):
        if j == shard * 4 + inner:
            with pytest.raises(ChunkDecodeError, match=rf"inner chunk \({inner},\)") as e:
                x.blocks[j].compute(scheduler="sync")
            assert e.value.key == f"c/{shard}" and e.value.store == os.path.abspath(path)
            assert "'c/2'" in str(e.value)
        else:
            want = a[j * 256 : (j + 1) * 256]  # zarr-python reads the sound inner chunks
            np.testing.assert_array_equal(want, values[j * 256 : (j + 1) * 256])
            np.testing.assert_array_equal(host(x.blocks[j].compute(scheduler="sync")), want)


# ---------------------------------------------------------------------------------------------
# the corpus itself


def test_corpus_covers_what_it_promises():
    cases = _corpus()
    verdicts = _verdicts()
    damaged = [c for c in cases if not c.label.startswith("sound")]
    assert len(damaged) >= 2000
    assert sum(v is None for v in verdicts) >= 2000
    assert {c.codec for c in cases} == set(CODECS)
    for c in cases:
        assert c.codec in CODECS and c.itemsize in (1, 2, 4, 8) and c.size % c.itemsize == 0
    labels = {c.label for c in cases if c.codec == "zstd"}
    for section in ZSTD_SECTIONS:
        assert f"flip:{section}" in labels, section
    for section in ("block-header", "literals-header", "sequences-header", "fse-tables", "magic"):
        assert f"truncate:{section}" in labels and f"truncate-in:{section}" in labels, section
    sizes = [c.size for c in cases if c.codec == "zstd"]
    assert min(sizes) <= 1024 and max(sizes) == 16 << 20
    assert 0 < sum(s > 4 << 20 for s in sizes) <= 10  # a handful of the largest
    decoded = Counter(c.label.split(":")[0] for c, v in zip(cases, verdicts, strict=True) if v is not None)
    for prefix in ("concat-frames", "skippable", "trailing", "sound"):
        assert decoded[prefix] > 0, prefix
    by_label = {(c.codec, c.label) for c, v in zip(cases, verdicts, strict=True) if v is not None}
    for want in [
        ("zstd", "sound:no-content-size"),
        ("zstd", "sound:checksum"),
        ("zstd", "sound:zstandard-checksum"),
        ("zstd", "sound:window"),
        ("zstd", "concat-frames:2"),
        ("zstd", "skippable:before"),
        ("blosc-lz4", "trailing:16"),
        ("zstd", "sound:constant"),
    ]:
        assert want in by_label, want
    for c in cases:  # shuffles and typesizes of blosc
        if c.codec.startswith("blosc") and c.label == "sound":
            assert c.data[3] == c.itemsize
    combos = {(c.codec, c.config["shuffle"], c.itemsize) for c in cases if c.codec.startswith("blosc")}
    assert len(combos) == 5 * 3 * 4
    assert len({c.config["id"] for c in cases}) == 5


def test_corpus_is_deterministic():
    again = corpus(seed=0, scale="ci")
    assert [(c.codec, c.label, c.data, c.size) for c in again] == [
        (c.codec, c.label, c.data, c.size) for c in _corpus()
    ]
    other = corpus(seed=1, scale="ci")
    assert [c.data for c in other] != [c.data for c in again]


def test_zstd_sections_tile_every_sound_frame():
    for c in _corpus():
        if c.codec != "zstd" or not c.label.startswith("sound"):
            continue
        sections = zstd_sections(c.data)
        assert sections[0].start == 0 and sections[-1].end == len(c.data), c.label
        for s, t in itertools.pairwise(sections):
            assert s.end == t.start and s.start < s.end, (c.label, s, t)
        frames, _ = parse_zstd(c.data)
        fcs = [f.fcs(c.data) for f in frames]
        if None not in fcs:
            assert sum(fcs) == c.size, c.label
