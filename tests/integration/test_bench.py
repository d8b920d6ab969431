"""The bench's package on the CPU: its row table well formed, the GPU run's rows and their names as
results and docs know them (measured by stand-ins), its datasets, and the benchmark scripts' use of
the package's public names."""

import argparse
import ast
import json
import subprocess
import sys
import time
import types
from pathlib import Path

import numpy as np
import pytest

from zarr_dask_gpu import config
from zarr_dask_gpu.bench import ceilings, datasets, rows, stores
from zarr_dask_gpu.bench import run as bench_run
from zarr_dask_gpu.codecs import compressions

ROOT = Path(__file__).resolve().parents[2]

# the GPU run's rows for --datasets A,B,C,D at 16 threads (the default staging "device", so the other
# is "host"; 512 chunk files; kvikio on 32 threads), in order: the names docs and earlier results use
A_ROWS = [
    "from_zarr_gpu().persist(), in-process, 16 threads",
    "same, cupy's pool kept between passes",
    *(
        f"from_zarr_gpu().persist(), 16 threads, {s}"
        for s in (
            "zstd-decoder=nvcomp",
            "decode-call-bytes=128MiB",
            "decode-call-bytes=64MiB",
            "read-slots=0",
            "read-slots=4, join-tasks=4",
            "join-tasks=0",
            "join-wait=None",
            "staging=host",
            "join-decodes=False",
        )
    ),
    "from_zarr_gpu().persist(), 16 thr, 128MiB blocks, calls whole",
    "from_zarr_gpu().persist(), 16 thr, 256MiB blocks, calls whole",
    "from_zarr_gpu().persist(), 16 thr, 2GiB blocks, calls whole",
    "from_zarr_gpu().persist(), 16 thr, 4GiB blocks, calls whole",
    "from_zarr_gpu().persist(), 32 thr, 128MiB blocks, calls 64MiB",
    "from_zarr_gpu().persist(), 16 thr, 1GiB blocks, calls 256MiB",
    "K (A with zstd checksums): persist(), verify-checksums=True",
    "K (A with zstd checksums): persist(), verify-checksums=False",
    "from_zarr_gpu().persist(), in-process, 1 threads",
    "from_zarr_gpu().persist(), in-process, 4 threads",
    "from_zarr_gpu().persist(), in-process, 8 threads",
    "from_zarr_gpu().persist(), LocalCUDACluster 1 worker, 16 thr",
    "zarr-python enable_gpu()",
    "dask.array.from_zarr + cupy.asarray (threads)",
    "tensorstore + cupy.asarray",
    "kvikio.zarr.GDSStore + zarr enable_gpu()",
    "ceiling: kvikio pread, 32 threads (compressed bytes)",
    "ceiling: nvCOMP batched zstd decode, 512 chunks in one call, on device",
    "this package's zstd kernels: batched zstd decode, 512 chunks in one call, on device",
    "ceiling: pinned host-to-device copy",
    "A in an Icechunk repository on local disk (native chunks): from_zarr_gpu().persist(), 16 threads",
    "A in an obstore LocalStore: from_zarr_gpu().persist(), 16 threads",
    "A in a zarr MemoryStore (the store's own get): from_zarr_gpu().persist(), 16 threads",
    "V (netCDF4, zlib+shuffle) through kerchunk references: from_zarr_gpu().persist(), 16 threads",
    "V (netCDF4, zlib+shuffle) through an Icechunk repository of virtual chunks: from_zarr_gpu().persist(), "
    "16 threads",
    "V through kerchunk references: xr.open_dataset(engine='zarr') values + cupy.asarray",
    "cold: ceiling: kvikio pread (compressed bytes)",
    "cold: from_zarr_gpu().persist(), in-process, 16 threads",
    "cold: from_zarr_gpu().persist(), 16 threads, read-slots=0",
    "cold: from_zarr_gpu().persist(), 16 threads, join-wait=None",
]


def each_rows(name: str, codec: str, sharded: bool = False) -> list[str]:
    files = not sharded
    return [
        f"{name}: from_zarr_gpu().persist(), in-process, 16 threads",
        f"{name}: same, cupy's pool kept between passes",
        *([f"{name}: same, zstd-decoder=nvcomp"] if codec == "zstd" else []),
        f"{name}: same, host-read-below=0",
        f"{name}: same, join-tasks=0",
        f"{name}: same, join-wait=None",
        f"{name}: same, staging=host",
        f"{name}: same, join-decodes=False",
        f"{name}: ceiling: kvikio pread, 32 threads (compressed bytes)",
        *(
            [
                f"{name}: ceiling: nvCOMP batched zstd decode, 512 chunks in one call, on device",
                f"{name}: this package's zstd kernels: batched zstd decode, 512 chunks in one call, "
                "on device",
            ]
            if codec == "zstd" and files
            else []
        ),
        *(
            [f"{name}: ceiling: nvCOMP, every inner blosc stream in one call, on device"]
            if "blosc" in codec
            else []
        ),
        *(
            [f"{name}: this package's zstd kernels: every inner blosc stream in one call, on device"]
            if codec == "blosc-zstd"
            else []
        ),
        f"{name}: zarr-python enable_gpu()",
        f"{name}: zarr-python (CPU) + cupy.asarray",
    ]


DERIVED = ["cold_read_x_ratio", "speedup_vs_zarr_enable_gpu", "fraction_of_nvcomp_ceiling", "cold_fraction"]


def test_the_row_table_is_well_formed():
    kinds = set(bench_run.MEASURES) | set(rows.COLD_KINDS)
    assert kinds == set(rows.KINDS)
    for row in rows.ROWS:
        assert row.dataset in datasets.DATASETS or row.dataset in (rows.EACH, rows.VIRTUAL_DATASET), row
        assert row.store is None or row.store in (*stores.STORES, *stores.VIEWS), row
        assert row.kind in rows.KINDS, row
        assert row.skip is None or row.skip in rows.SKIP_KEYS, row
        assert row.threads == "T" or row.threads.removesuffix("T").isdigit(), row
        assert row.needs is None or (row.needs in rows.NEEDS and row.dataset == rows.EACH), row
        for key in row.settings:  # every setting a key of the package's configuration
            assert key in config.DEFAULTS, (row, key)
        if row.kind in ("ceiling-decode", "ceiling-blosc"):
            assert row.settings["zstd-decoder"] in ("nvcomp", "blocks"), row
    for settings in rows.TASK_PEAKS:
        assert all(key in config.DEFAULTS for key in settings)
    assert {row.skip for row in rows.ROWS} - {None} == set(rows.SKIP_KEYS)  # every key leaves rows out
    assert next(row.kind for row in rows.ROWS if row.kind in rows.COLD_KINDS) == "cold-ceiling"
    every = list(datasets.DATASETS)
    names = [row.title(16, "host", name, chunks=512, kvikio_threads=32) for row, name in _plan(every)]
    assert len(names) == len(set(names))


def _plan(names, skip=()):
    return list(rows.plan(list(names), set(skip), datasets.DATASETS))


def test_skip_keys_and_zstd_rows():
    everything = _plan("ABD")
    some = _plan("ABD", {"cold", "checksum", "cluster"})
    left = [r for r, _ in everything if (r, _) not in some]
    assert {r.skip for r in left} == {"cold", "checksum", "cluster"}
    assert not [r for r, name in some if name == "K" or r.kind in rows.COLD_KINDS]
    nvcomp = [name for r, name in everything if r.dataset == rows.EACH and r.needs == "zstd"]
    assert nvcomp == ["B"]  # D is blosc lz4: nvCOMP's zstd decoder has nothing to read
    blosc = {r.kind for r, name in _plan(["A", "D", "E"]) if name == "E" and r.needs}
    # E's files are blosc frames of zstd streams: its blosc ceilings, and nvCOMP's zstd decoder row
    assert blosc == {"ceiling-blosc", "persist"}
    steps = bench_run._steps(everything)
    cold = [s for s in steps if s[0][0].kind in rows.COLD_KINDS]
    assert len(cold) == 1 and len(cold[0]) == 4 and all(len(s) == 1 for s in steps if s not in cold)


class _Run(bench_run.GpuRun):
    """The GPU run with its datasets and measures stood in for: what it records, under which names."""

    def dataset(self, name):
        return types.SimpleNamespace(name=name, files=["f"] * 512, nbytes=3 * 10**9, stored=10**9)


def test_the_gpu_run_records_every_row_under_its_name(monkeypatch, capsys):
    if config.get("staging") != "device":
        pytest.skip("the names below assume the default staging")
    measured = []

    def fake(run, row, name):
        measured.append((row.kind, name, dict(row.resolved(run.staging))))
        if row.kind == "tensorstore":
            raise bench_run.Unavailable("tensorstore not installed: skipped")
        if row.may_fail and name == "D":
            raise RuntimeError("cannot read blosc")
        return 0.5, 10**9

    monkeypatch.setattr(bench_run, "MEASURES", dict.fromkeys(bench_run.MEASURES, fake))
    monkeypatch.setattr(
        bench_run, "_cold_seconds", lambda run, d, group: {run.title(r, n): 1.0 for r, n in group}
    )
    monkeypatch.setattr(bench_run, "free_device", lambda: None)
    monkeypatch.setattr(ceilings, "kvikio_threads", lambda: 32)
    args = argparse.Namespace(threads=16, repeat=3, cold_repeat=9, datasets="A,B,C,D", skip="")
    run = _Run(args)
    bench_run.measure(run, *bench_run.choices(args))
    want = [
        *(n for n in A_ROWS if n != "tensorstore + cupy.asarray"),
        "cold_read_x_ratio",
        *each_rows("B", "zstd"),
        *each_rows("C", "zstd", sharded=True),
        *(n for n in each_rows("D", "blosc-lz4") if "zarr-python" not in n),
        *DERIVED[1:3],
        "fraction_of_nvcomp_ceiling, B",
        "fraction_of_nvcomp_ceiling, D",
        "fraction_of_path, icechunk",
        "fraction_of_path, obstore",
        "fraction_of_path, memory",
        "speedup_vs_xarray_zarr, V, kerchunk references",
        "speedup_vs_xarray_zarr, V, an Icechunk repository of virtual chunks",
        DERIVED[3],
    ]
    assert list(run.results) == want
    out = capsys.readouterr().out
    assert "tensorstore not installed: skipped" in out and "D: zarr-python enable_gpu() failed: cannot" in out
    assert run.results["cold_read_x_ratio"] == pytest.approx(3.0 * 1.0 / 1.0)  # 1 GB/s of bytes stored 3x
    assert ("persist", "A", {"staging": "host"}) in measured  # the other staging, resolved
    assert json.dumps(run.results)


def test_unknown_datasets_and_skip_keys_are_refused():
    args = argparse.Namespace(datasets="A,F", skip="")
    with pytest.raises(SystemExit, match="unknown datasets"):
        bench_run.choices(args)
    with pytest.raises(SystemExit, match="unknown --skip keys"):
        bench_run.choices(argparse.Namespace(datasets="A", skip="cold,colt"))


def test_datasets_lie_beside_a_and_are_written_as_described(tmp_path):
    base = str(tmp_path / "a.zarr")
    assert datasets.path("A", base) == base and datasets.path("D", base) == base + "-D"
    b = datasets.write("B", base, gib=0.05)
    assert b.chunks == (1, 1 << 16) and b.nbytes <= 0.05 * 2**30 / 4  # 256 KiB chunks, a quarter of A
    d = datasets.write("D", base, gib=0.01)
    assert d.metadata.zarr_format == 2 and "blosc" in str(d.compressors).lower()
    k = datasets.write("K", base, gib=0.01)
    assert k.compressors[0].checksum
    zs = datasets.write("Zs", base, gib=0.02, chunk_mib=1)  # netCDF4's chain: byte shuffle, then zlib
    assert [c.codec_name for c in zs.compressors] == ["numcodecs.shuffle", "numcodecs.zlib"]
    n = datasets.write("N", base, gib=0.02)
    assert n.chunks == (1, 1 << 18) and n.compressors[1].codec_config["level"] == 4
    lz4 = datasets.write("L", base, gib=0.02, chunk_mib=1)
    assert lz4.metadata.zarr_format == 2 and lz4.compressors[0].codec_id == "lz4"
    assert datasets.write("N", base, gib=0.02).attrs == n.attrs  # complete: reused, filters and all
    files = datasets.chunk_files(base + "-B")
    assert len(files) == b.nchunks and not [f for f in files if f.endswith(("zarr.json", ".zarray"))]
    assert datasets.main(["B", "--path", base, "--gib", "0.05"]) == 0  # complete: reused
    with pytest.raises(ValueError, match="unknown dataset"):
        datasets.write("F", base)


def test_the_volumes_are_written_as_described(tmp_path):
    base = str(tmp_path / "a.zarr")
    e = datasets.write("E", base, gib=0.01)  # at least one chunk: 256 MiB
    assert e.shape == e.chunks == (128, 1024, 1024) and e.dtype == "float16"
    conf = e.compressors[0].to_dict()["configuration"]
    assert (conf["cname"], conf["clevel"], conf["shuffle"]) == ("zstd", 1, "bitshuffle")
    z = datasets.write("Ez", base, gib=0.01)
    assert z.shape == z.chunks == (64, 1024, 1024) and z.dtype == "float32"
    assert 1.1 < z.nbytes / z.nbytes_stored() < 1.5  # about 1.27: little to gain, as the Ez
    assert datasets.write("Ez", base, gib=0.01).attrs == z.attrs  # complete: reused
    frame = Path(datasets.chunk_files(base + "-E")[0]).read_bytes()
    offs, sizes, decoded = ceilings.blosc_streams(frame)
    assert len(offs) == e.nbytes // 32768 and decoded.sum() == e.nbytes  # 32 KiB blocks, none stored
    for i in (0, len(offs) // 2, len(offs) - 1):
        out = np.empty(int(decoded[i]), np.uint8)
        assert compressions.decode_into("zstd", frame[offs[i] : offs[i] + sizes[i]], out) is None


@pytest.mark.parametrize("cname", ["lz4", "zstd", "zlib"])
@pytest.mark.parametrize("shuffle", [0, 1, 2])
@pytest.mark.parametrize(("typesize", "nbytes"), [(1, 70001), (2, 200000), (4, 1 << 20), (8, 300008)])
def test_blosc_streams_are_those_c_blosc_wrote(cname, shuffle, typesize, nbytes):
    import numcodecs

    rng = np.random.default_rng(typesize + nbytes)
    x = np.round(rng.standard_normal(nbytes // typesize), 1).astype(
        f"u{typesize}" if typesize == 1 else f"f{typesize}"
    )
    frame = numcodecs.Blosc(cname, clevel=5, shuffle=shuffle, blocksize=1 << 14).encode(x)
    offs, sizes, decoded = ceilings.blosc_streams(frame)
    inner = compressions.inner(compressions.from_v2("blosc", cname)).name
    parts = []
    for o, n, d in zip(offs, sizes, decoded, strict=True):
        out = np.empty(int(d), np.uint8)
        assert compressions.decode_into(inner, frame[o : o + n], out) is None
        parts.append(out)
    assert decoded.sum() <= x.nbytes and len(offs) > 0
    if shuffle == 0 and decoded.sum() == x.nbytes:  # no shuffle, no stored stream: the bytes in order
        assert np.concatenate(parts).tobytes() == x.tobytes()


def test_the_bench_imports_without_gpu_libraries():
    code = (
        "import sys\n"
        "for m in ('cupy', 'kvikio', 'nvidia', 'dask_cuda'): sys.modules[m] = None\n"
        "from zarr_dask_gpu.bench import ceilings, datasets, rows, run, timing\n"
        "from zarr_dask_gpu import phases\n"
        "print(len(rows.ROWS))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    assert int(out.stdout) == len(rows.ROWS)


def _names(module: str) -> set[str]:
    """The names a module of the package defines at its top level."""
    path = ROOT / (module.replace(".", "/") + ".py")
    if not path.exists():
        path = ROOT / module.replace(".", "/") / "__init__.py"
    tree = ast.parse(path.read_text())
    out = set()
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            out.add(node.name)
        elif isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            out |= {t.id for t in targets if isinstance(t, ast.Name)}
        elif isinstance(node, ast.ImportFrom | ast.Import):
            out |= {(a.asname or a.name).split(".")[0] for a in node.names}
    if path.name == "__init__.py":
        out |= {p.stem for p in path.parent.iterdir() if p.suffix == ".py" or (p / "__init__.py").exists()}
    return out


@pytest.mark.parametrize("script", sorted(p.name for p in (ROOT / "benchmarks").glob("*.py")))
def test_benchmark_scripts_use_the_package_s_public_names(script):
    # the scripts run on GPU hosts only: here, at least every name they take from the package exists,
    # and none is private (a private one changes without notice)
    tree = ast.parse((ROOT / "benchmarks" / script).read_text())
    taken = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("zarr_dask_gpu"):
            for alias in node.names:
                assert not alias.name.startswith("_"), (node.module, alias.name)
                assert alias.name in _names(node.module), (node.module, alias.name)
                taken[alias.asname or alias.name] = f"{node.module}.{alias.name}"
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in taken:
            assert not node.attr.startswith("_"), f"{taken[node.value.id]}.{node.attr}"


def test_settings_written_as_text_are_read_as_dask_reads_the_environment():
    from zarr_dask_gpu.bench.timing import parse_settings

    got = parse_settings("read-slots=0,join-wait=None,decode-call-bytes=256MiB,join-decodes=False")
    assert got == {
        "read-slots": 0,
        "join-wait": None,
        "decode-call-bytes": "256MiB",
        "join-decodes": False,
    }
    assert parse_settings("") == {}


def test_a_blocks_task_result_is_its_tasks_output_uncopied(tmp_path):
    """The task peak measures the block a task returns: ``compute`` of a one-block array would copy
    it (dask joins its blocks), ``task_result`` hands over the task's own array."""
    import dask.array as da
    import zarr

    from zarr_dask_gpu import from_zarr_gpu
    from zarr_dask_gpu.bench.timing import task_result

    made: list[np.ndarray] = []

    def block(x: np.ndarray) -> np.ndarray:
        made.append(x + 1)
        return made[-1]

    x = da.zeros((8, 4), chunks=(4, 4)).map_blocks(block, meta=np.empty((0, 0)))
    got = task_result(x.blocks[1])
    assert len(made) == 1 and got is made[0]  # the one block's task, run once

    z = zarr.create_array(tmp_path / "a.zarr", shape=(6, 5), chunks=(2, 5), dtype="i4")
    z[:] = np.arange(30).reshape(6, 5)
    arr = from_zarr_gpu(str(tmp_path / "a.zarr"), chunks=(2, 5), device="cpu")
    np.testing.assert_array_equal(task_result(arr.blocks[2]), z[4:6])


def test_a_pass_is_timed_without_the_release_of_the_pass_before(monkeypatch):
    from zarr_dask_gpu.bench import timing

    monkeypatch.setattr(timing, "free_device", lambda: time.sleep(0.05))  # a slow cudaFree
    released: list[float] = []
    seconds = timing.timed(lambda: None, 3, timing.emptying(released))
    assert seconds < 0.05 and len(released) == 3 and min(released) >= 0.05


def test_a_traced_pass_gives_its_first_reads_and_when_its_first_call_started():
    from zarr_dask_gpu import phases
    from zarr_dask_gpu.bench import timing

    def body() -> None:  # a pass's phases as a GPU task reports them, from its threads
        for pause in (0.01, 0.02, 0.0, 0.0, 0.03):
            with phases.record("read"):
                time.sleep(pause)
        with phases.record("decode-call"):
            pass

    ms, reads, first_call = timing.traced_pass(body)
    assert [round(r, -1) for r in reads] == [10, 20, 0, 0]  # the first four, in the order they started
    assert first_call >= 60 and ms + 1 >= first_call  # whole ms
    assert timing.traced_pass(lambda: None)[1:] == ([], -1)  # no GPU phases: a CPU pass


def test_the_bench_stores_hold_the_dataset_s_bytes(tmp_path):
    """Dataset A's bytes in each store of the store rows, and dataset V's VirtualiZarr views, read
    as their sources read them (a small A and V here)."""
    from zarr_dask_gpu import from_zarr_gpu
    from zarr_dask_gpu.testing.sample_stores import write_sample

    path = str(tmp_path / "a.zarr")
    a = write_sample(path, 12 << 20, 2 << 20)
    for kind in stores.STORES:
        got = from_zarr_gpu(stores.opened(kind, path), device="cpu").compute()
        np.testing.assert_array_equal(got, a[...], err_msg=kind)
    assert stores.opened("icechunk", path).session.read_only  # reused: the tagged snapshot
    v = stores.virtual(str(tmp_path / "v.nc"), 16 << 20)
    want = v.values(v.shape[0])
    for kind in stores.VIEWS:
        store, options = v.opened(kind)
        got = from_zarr_gpu(store, "t2m", storage_options=options, device="cpu").compute()
        np.testing.assert_array_equal(got, want, err_msg=kind)
