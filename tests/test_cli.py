"""The command line: info, read, bench and demo."""

import json
import os
import sys
import time
import types

import numpy as np
import pytest
import zarr

from zarr_dask_gpu.bench import drop_cache, interleaved, kvikio_read_all, timed, warm_cache
from zarr_dask_gpu.cli import main


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
