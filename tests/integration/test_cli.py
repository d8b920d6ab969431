"""The command line: info, read, bench and demo."""

import json
import os
import sys
import time
import types

import numpy as np
import pytest
import zarr

from zarr_dask_gpu import DeviceUnavailableError, from_zarr_gpu
from zarr_dask_gpu.bench import drop_cache, interleaved, kvikio_read_all, timed, warm_cache
from zarr_dask_gpu.bench.timing import in_turns
from zarr_dask_gpu.cli import main
from zarr_dask_gpu.device import gpu_available


def test_info_text_and_json(tmp_path, capsys):
    zarr.create_array(tmp_path / "a.zarr", shape=(100, 30), chunks=(10, 30), dtype="i2")
    assert main(["info", str(tmp_path / "a.zarr")]) == 0
    out = capsys.readouterr().out
    assert "(100, 30)" in out and "bytes -> zstd" in out and "zstd kernels" in out
    assert main(["info", str(tmp_path / "a.zarr"), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["chunks"] == 10 and doc["codecs"] == ["bytes", "zstd"] and doc["gpu_decode"] is True
    assert doc["stages"]["zstd"].startswith("GPU") and doc["stages"]["bytes"].startswith("GPU")


def test_info_names_cpu_stages(tmp_path, capsys):
    zarr.create_array(
        tmp_path / "a.zarr", shape=(8,), dtype="i2", compressors=[zarr.codecs.BloscCodec(cname="blosclz")]
    )
    main(["info", str(tmp_path / "a.zarr")])
    out = capsys.readouterr().out
    assert "blosc's 'blosclz' is not decoded on the GPU" in out
    assert "blosc                  CPU (zarr-python)" in out  # stage by stage


def test_read_prints_throughput(tmp_path, capsys):
    a = zarr.create_array(tmp_path / "a.zarr", shape=(64, 64), chunks=(16, 16), dtype="f4")
    a[...] = 1.5
    assert main(["read", str(tmp_path / "a.zarr"), "--device", "cpu", "--chunks", "8KiB"]) == 0
    assert "GB/s" in capsys.readouterr().out


def test_version(capsys):
    with pytest.raises(SystemExit) as e:
        main(["--version"])
    assert e.value.code == 0 and capsys.readouterr().out.startswith("zarr-dask-gpu 0.")


def test_read_json_with_a_block_shape(tmp_path, capsys):
    a = zarr.create_array(tmp_path / "a.zarr", shape=(64, 64), chunks=(16, 16), dtype="f4")
    a[...] = 1.5
    assert main(["read", str(tmp_path / "a.zarr"), "--device", "cpu", "--chunks", "32,64", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)  # the progress bar on stderr
    assert doc["block_shape"] == [32, 64] and doc["tasks"] == 2 and doc["nbytes"] == 64 * 64 * 4
    assert doc["device"] == "cpu" and doc["gb_per_s"] > 0 and doc["seconds"] > 0


def test_read_on_a_cluster_fails_with_the_tasks_error(tmp_path, capsys):
    """distributed's wait() does not raise a task's error: the command must, and exit 1."""
    a = zarr.create_array(tmp_path / "a.zarr", shape=(64, 64), chunks=(16, 16), dtype="f4")
    a[...] = 1.5
    chunk = tmp_path / "a.zarr" / "c" / "1" / "0"
    chunk.write_bytes(chunk.read_bytes()[:-3])
    assert main(["read", str(tmp_path / "a.zarr"), "--device", "cpu", "--chunks", "16,64", "--cluster"]) == 1
    err = capsys.readouterr().err
    assert "zarr-dask-gpu: error:" in err and "'c/1/0'" in err


@pytest.mark.skipif(gpu_available(), reason="a GPU is usable here")
def test_device_gpu_without_a_gpu_says_what_is_missing(tmp_path, capsys):
    zarr.create_array(tmp_path / "a.zarr", shape=(8,), dtype="i2")
    for command in ("read", "info"):
        assert main([command, str(tmp_path / "a.zarr"), "--device", "gpu"]) == 1
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "cannot run here" in err and "[gpu]" in err and "--device cpu" in err
    with pytest.raises(DeviceUnavailableError, match=r"is not installed|no CUDA device"):
        from_zarr_gpu(tmp_path / "a.zarr", device="gpu")


@pytest.mark.skipif(gpu_available(), reason="a GPU is usable here")
def test_info_without_a_gpu_says_where_stages_run(tmp_path, capsys):
    zarr.create_array(tmp_path / "a.zarr", shape=(100, 30), chunks=(10, 30), dtype="i2")
    assert main(["info", str(tmp_path / "a.zarr")]) == 0
    out = capsys.readouterr().out
    assert "decoded on   CPU here, by zarr-python" in out and "on a GPU host: GPU" in out


def test_errors_print_one_line(tmp_path, capsys):
    assert main(["read", str(tmp_path / "missing.zarr")]) == 1
    err = capsys.readouterr().err
    assert err.startswith("zarr-dask-gpu: error:") and err.count("\n") == 1


def test_demo_runs_on_a_local_cluster(tmp_path, capsys):
    assert main(["demo", "--path", str(tmp_path / "d.zarr"), "--size-mib", "16", "--device", "cpu"]) == 0
    out = capsys.readouterr().out
    assert "values equal zarr-python's CPU read: True" in out and "LocalCluster" in out


@pytest.mark.parametrize("command", ["info", "read", "bench", "demo"])
def test_every_command_has_help_with_an_example(command, capsys):
    with pytest.raises(SystemExit) as e:
        main([command, "--help"])
    assert e.value.code == 0
    assert "example: zarr-dask-gpu " + command in capsys.readouterr().out


def test_bench_on_cpu_writes_json_and_chart(tmp_path, capsys):
    out = tmp_path / "b.json"
    assert (
        main(
            [
                "bench",
                "--device",
                "cpu",
                "--gib",
                "0.05",
                "--repeat",
                "1",
                "--path",
                str(tmp_path / "s.zarr"),
                "--json",
                str(out),
                "--chart",
                str(tmp_path / "b.png"),
            ]
        )
        == 0
    )
    doc = json.loads(out.read_text())
    assert "dask.array.from_zarr" in doc["results"] and (tmp_path / "b.png").stat().st_size > 1000


def test_bench_chart_without_matplotlib_stops_before_the_run(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib raises ImportError
    with pytest.raises(SystemExit, match="needs matplotlib"):
        main(["bench", "--device", "cpu", "--path", str(tmp_path / "s.zarr"), "--chart", "b.png"])
    assert not (tmp_path / "s.zarr").exists()


def test_bench_times_leave_the_page_cache_eviction_out(tmp_path):
    # the cold rows evict before each pass, outside its time; drop_cache syncs written files first
    calls = []
    seconds = timed(lambda: calls.append("run"), 3, lambda: (calls.append("evict"), time.sleep(0.05)))
    assert seconds < 0.02 and calls == ["evict", "run"] * 3
    f = tmp_path / "x"
    f.write_bytes(b"\1" * 4096)
    drop_cache([str(f)])
    assert f.read_bytes() == b"\1" * 4096


def test_warm_cache_writes_each_file_back_before_the_timed_rows(tmp_path, monkeypatch):
    # a dataset the run just wrote must not be written back by the kernel while rows are timed
    files = [tmp_path / name for name in "ab"]
    for f in files:
        f.write_bytes(b"\2" * 70_000)
    synced = []
    real = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: (synced.append(os.readlink(f"/proc/self/fd/{fd}")), real(fd)))
    warm_cache([str(f) for f in files])
    assert synced == [str(f) for f in files] and all(f.read_bytes() == b"\2" * 70_000 for f in files)


def test_cold_rows_run_in_turns_and_report_medians():
    # each round evicts before every row's pass, rows in turn, so drift falls on all of them alike
    calls = []
    pauses = iter([0.03, 0.0, 0.0, 0.0, 0.0, 0.0])  # one slow pass of "a": the median leaves it out
    fns = {
        "a": lambda: (calls.append("a"), time.sleep(next(pauses))),
        "b": lambda: (calls.append("b"), time.sleep(next(pauses))),
    }
    seconds = interleaved(fns, 3, lambda: calls.append("evict"))
    assert calls == ["evict", "a", "evict", "b"] * 3
    assert seconds["a"] < 0.02 and seconds["b"] < 0.02


def test_passes_in_turns_alternate_their_order_and_keep_every_pass():
    calls = []
    fns = {k: lambda k=k: calls.append(k) for k in "abc"}
    seconds = in_turns(fns, 3, lambda: calls.append("-"), alternate=True)
    assert "".join(calls).replace("-", "") == "abc" + "cba" + "abc"
    assert calls.count("-") == 9
    assert {k: len(v) for k, v in seconds.items()} == {"a": 3, "b": 3, "c": 3}


def test_raw_read_ceiling_places_each_file_at_its_aligned_offset(tmp_path, monkeypatch):
    # where the bench's raw read ceiling puts each file; kvikio's reads themselves run on the GPU host
    class File:
        def __init__(self, path, mode):
            self.data = open(path, "rb").read()  # noqa: SIM115

        def pread(self, buf, size, offset):
            buf[:size] = np.frombuffer(self.data[offset : offset + size], dtype=np.uint8)
            return types.SimpleNamespace(get=lambda: size)

        def close(self):
            pass

    monkeypatch.setitem(sys.modules, "kvikio", types.SimpleNamespace(CuFile=File))
    sizes = [5, 16, 33, 1]
    files = []
    for i, n in enumerate(sizes):
        files.append(str(tmp_path / f"c{i}"))
        (tmp_path / f"c{i}").write_bytes(bytes([i + 1]) * n)
    into = np.zeros(16 + 16 + 48 + 16, dtype=np.uint8)
    kvikio_read_all(files, into)
    for i, (start, n) in enumerate(zip([0, 16, 32, 80], sizes, strict=True)):
        assert (into[start : start + n] == i + 1).all()
        assert not into[start + n : start + (n + 15) // 16 * 16].any()


def test_the_sample_store_is_rewritten_when_cut_short_or_foreign(tmp_path):
    from zarr_dask_gpu.testing.sample_stores import write_sample

    path = tmp_path / "s.zarr"
    a = write_sample(path, 32 << 20)
    assert write_sample(path, 32 << 20).attrs == a.attrs  # complete: reused as it is
    (path / "c" / "1" / "0").unlink()  # a store cut short (an interrupted first run)
    again = write_sample(path, 32 << 20)
    assert again.nchunks_initialized == again.nchunks
    zarr.create_array(path, shape=a.shape, chunks=a.chunks, dtype="f4", overwrite=True)  # foreign
    assert write_sample(path, 32 << 20).nchunks_initialized == a.nchunks


def test_config_prints_every_setting_with_its_value_here(capsys):
    import json

    import dask

    from zarr_dask_gpu import config

    with dask.config.set({"zarr_dask_gpu.read-slots": 5}):
        assert main(["config", "--json"]) == 0
        rows = {r["key"]: r for r in json.loads(capsys.readouterr().out)}
        assert list(rows) == list(config.SETTINGS)
        assert rows["read-slots"]["value"] == 5 and rows["read-slots"]["default"] == 2
        assert rows["strict"]["what"] == config.SETTINGS["strict"].doc
        assert main(["config"]) == 0
    text = capsys.readouterr().out
    assert "zarr_dask_gpu.read-slots = 5 (default 2): " in text
    assert "zarr_dask_gpu.strict = False: raise MissingChunkError" in text
