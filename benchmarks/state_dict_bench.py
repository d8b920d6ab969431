"""Model weights to the GPU: zarr (raw and zstd) through load_state_dict, against safetensors
``load_file(..., device="cuda")`` and ``torch.load(..., mmap=True)`` then ``.cuda()``.

Run on the GPU host (needs torch and safetensors): python3 benchmarks/state_dict_bench.py
[--gib 8] [--pruned 0,0.5] [--dir /tmp/sd] [--json out.json]. Each ``--pruned`` fraction is a state
dict of its own: dense random weights (zstd compresses bf16 about 1.28x), and magnitude-pruned ones
(that fraction of each matrix's smallest weights zeroed, as pruned models are; they compress more).
Page cache warm (each file read once first); every loader's tensors are checked equal to the saved.
"""

import argparse
import json
import os

import torch

from zarr_dask_gpu.bench.datasets import chunk_files
from zarr_dask_gpu.bench.timing import timed, warm_cache
from zarr_dask_gpu.ml.state_dict import load_state_dict, save_state_dict


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--gib", type=float, default=8.0)
    p.add_argument("--dir", default="/tmp/sd")
    p.add_argument("--pruned", default="0,0.5", help="fractions of weights zeroed, one run each")
    p.add_argument("--json", default=None)
    args = p.parse_args()
    out = {str(f): run(args, float(f)) for f in args.pruned.split(",")}
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)


def _weights(n: int, pruned: float) -> dict[str, torch.Tensor]:
    g = torch.Generator(device="cuda").manual_seed(0)
    sd = {}
    for i in range(n):  # 32 MiB bf16 matrices, like a transformer's
        w = torch.randn(4096, 4096, generator=g, device="cuda") * 0.02
        if pruned:
            w[w.abs() < w.abs().flatten().kthvalue(int(pruned * w.numel())).values] = 0
        sd[f"layers.{i}.weight"] = w.bfloat16().cpu()
    return sd


def run(args: argparse.Namespace, pruned: float) -> dict:
    from safetensors.torch import load_file, save_file

    os.makedirs(args.dir, exist_ok=True)
    n = max(int(args.gib * 2**30) // (4096 * 4096 * 2), 1)
    sd = _weights(n, pruned)
    nbytes = sum(t.nbytes for t in sd.values())
    paths = {
        "zarr raw": f"{args.dir}/raw.zarr",
        "zarr zstd": f"{args.dir}/zstd.zarr",
        "safetensors": f"{args.dir}/w.safetensors",
        "torch.save": f"{args.dir}/w.pt",
    }
    save_state_dict(sd, paths["zarr raw"], compressors=None, overwrite=True)
    save_state_dict(sd, paths["zarr zstd"], overwrite=True)
    save_file(sd, paths["safetensors"])
    torch.save(sd, paths["torch.save"])

    def size(path: str) -> int:
        if os.path.isfile(path):
            return os.path.getsize(path)
        return sum(os.path.getsize(os.path.join(r, f)) for r, _, fs in os.walk(path) for f in fs)

    loaders = {
        "zarr raw": lambda: load_state_dict(paths["zarr raw"], "cuda"),
        "zarr zstd": lambda: load_state_dict(paths["zarr zstd"], "cuda"),
        "safetensors": lambda: load_file(paths["safetensors"], device="cuda"),
        "torch.save": lambda: {k: v.cuda() for k, v in torch.load(paths["torch.save"], mmap=True).items()},
    }
    results = {}
    print(f"{n} bf16 tensors of 4096 x 4096, {nbytes / 1e9:.2f} GB, {pruned:.0%} pruned", flush=True)
    for name, load in loaders.items():
        path = paths[name]
        warm_cache(chunk_files(path) if os.path.isdir(path) else [path])
        got = load()
        torch.cuda.synchronize()
        assert all(torch.equal(got[k].cpu().view(torch.int16), v.view(torch.int16)) for k, v in sd.items()), (
            name
        )
        del got
        loaded: list = []

        def once(load=load, loaded=loaded) -> None:
            loaded.append(load())
            torch.cuda.synchronize()

        def before(loaded=loaded) -> None:  # the last pass's tensors freed, untimed
            loaded.clear()
            torch.cuda.empty_cache()

        t = timed(once, 3, before)  # the median of three
        loaded.clear()
        results[name] = {"seconds": t, "GB/s": nbytes / t / 1e9, "ratio": nbytes / size(paths[name])}
        print(
            f"{name:12s} {t:6.2f} s to ready tensors  {nbytes / t / 1e9:6.2f} GB/s  "
            f"ratio {results[name]['ratio']:.2f}",
            flush=True,
        )
    return {"nbytes": nbytes, "results": results}


if __name__ == "__main__":
    main()
