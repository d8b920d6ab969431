"""Remote reads on the GPU host: dataset A served over loopback HTTP (a threaded server in its own
process, HTTP Range requests answered with sendfile), read into device memory by from_zarr_gpu with
kvikio.RemoteFile and with fsspec, by zarr-python over fsspec with enable_gpu(), and the ceiling of
kvikio range reads of every chunk object (compressed bytes). Values are checked on a slab.

Run on the GPU host: python3 benchmarks/remote_bench.py [--path /tmp/bench-a.zarr] [--gib 4]
"""

import argparse
import multiprocessing
import os
import re
import time
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer


class _Handler(SimpleHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive: clients reuse connections

    def log_message(self, *args: object) -> None:
        pass

    def do_GET(self) -> None:
        path = self.translate_path(self.path)
        if not os.path.isfile(path):
            self.send_error(404)
            return
        size = os.path.getsize(path)
        m = re.match(r"bytes=(\d*)-(\d*)", self.headers.get("Range", ""))
        start, end = 0, size - 1
        if m:
            a, b = m.groups()
            start, end = (size - int(b), size - 1) if a == "" else (int(a), int(b) if b else size - 1)
            self.send_response(206)
            self.send_header("Content-Range", f"bytes {start}-{end}/{size}")
        else:
            self.send_response(200)
        self.send_header("Content-Length", str(end - start + 1))
        self.send_header("Accept-Ranges", "bytes")
        self.end_headers()
        with open(path, "rb") as f:
            while start <= end:  # a socket may take less than asked
                start += os.sendfile(self.wfile.fileno(), f.fileno(), start, end - start + 1)


def _serve(directory: str, port: multiprocessing.Value) -> None:
    server = ThreadingHTTPServer(("127.0.0.1", 0), lambda *a: _Handler(*a, directory=directory))
    server.daemon_threads = True
    port.value = server.server_address[1]
    server.serve_forever()


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--path", default="/tmp/bench-a.zarr")
    p.add_argument("--gib", type=float, default=4.0)
    p.add_argument("--threads", type=int, default=16)
    args = p.parse_args()

    import cupy as cp
    import dask
    import numpy as np
    import zarr

    from zarr_dask_gpu import from_zarr_gpu
    from zarr_dask_gpu.bench import datasets
    from zarr_dask_gpu.bench.timing import free_device, sync_device, timed, warm_cache

    a = datasets.write("A", args.path, args.gib)
    files = datasets.chunk_files(args.path)
    warm_cache(files)  # the network path is what is measured
    ctx = multiprocessing.get_context("spawn")  # no CUDA state in the server
    port = ctx.Value("i", 0)
    server = ctx.Process(target=_serve, args=(os.path.dirname(args.path), port), daemon=True)
    server.start()
    while not port.value:
        time.sleep(0.05)
    url = f"http://127.0.0.1:{port.value}/{os.path.basename(args.path)}"
    print(f"{a.shape} {a.dtype} chunks {a.chunks}, {a.nbytes / 1e9:.2f} GB, served at {url}", flush=True)

    def row(name: str, fn, nbytes: int = a.nbytes) -> None:
        # best of two after a warm-up (connections, codecs), cupy's pool emptied before each, untimed
        dt = timed(fn, 2, free_device, warmup=1, pick=min)
        print(f"{name:62s} {nbytes / dt / 1e9:7.2f} GB/s  ({dt:.3f} s)", flush=True)

    for io in ("kvikio", "fsspec"):
        with dask.config.set({"zarr_dask_gpu.remote-io": io}):
            x = from_zarr_gpu(url, device="gpu")
            assert np.array_equal(x[:2].compute(scheduler="threads").get(), a[:2]), io

            def ours(x=x) -> None:
                y = x.persist(scheduler="threads", num_workers=args.threads)
                sync_device()
                del y

            row(f"from_zarr_gpu(url).persist(), remote-io={io}", ours)

    def zarr_gpu() -> None:
        with zarr.config.enable_gpu():
            g = cp.asarray(zarr.open_array(url, mode="r")[...])
        sync_device()
        del g

    try:
        row("zarr-python (fsspec) enable_gpu()", zarr_gpu)
    except Exception as e:  # a peer that cannot read the dataset is a result, not a crash
        print(f"zarr-python (fsspec) enable_gpu() failed: {e}", flush=True)

    import kvikio

    sizes = [os.path.getsize(f) for f in files]
    urls = [f"{url}/{os.path.relpath(f, args.path)}" for f in files]
    buf = cp.empty(sum(sizes), dtype=np.uint8)

    def raw() -> None:
        handles, futures, at = [], [], 0
        for u, n in zip(urls, sizes, strict=True):
            handles.append(kvikio.RemoteFile.open_http(u, n))
            futures.append(handles[-1].pread(buf[at : at + n], n, 0))
            at += n
        for f in futures:
            f.get()
        for h in handles:
            h.close()

    row("ceiling: kvikio.RemoteFile reads of every chunk (compressed bytes)", raw, sum(sizes))
    server.terminate()


if __name__ == "__main__":
    main()
