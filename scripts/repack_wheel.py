"""Zip an unpacked wheel again after files were cut from it; RECORD keeps the lines of the files left.
Or squeeze wheels for the device tool's 64 MiB carry: each rewritten with LZMA compression (pip reads
it: Python's zipfile does), leaving out members that match ``--drop`` (fnmatch patterns).

Usage: python3 scripts/repack_wheel.py DIR WHEEL   (DIR: the unpacked wheel; WHEEL: the file to write)
       python3 scripts/repack_wheel.py --squeeze [--drop PATTERN ...] WHEEL ...
"""

import argparse
import fnmatch
import glob
import os
import sys
import zipfile


def repack(src: str, wheel: str) -> None:
    for record in glob.glob(os.path.join(src, "*.dist-info", "RECORD")):
        with open(record) as f:
            kept = [line for line in f if os.path.exists(os.path.join(src, line.split(",")[0]))]
        with open(record, "w") as f:
            f.writelines(kept)
    with zipfile.ZipFile(wheel, "w", zipfile.ZIP_DEFLATED) as z:
        for root, _, files in os.walk(src):
            for name in files:
                path = os.path.join(root, name)
                z.write(path, os.path.relpath(path, src))


def squeeze(wheel: str, drop: list[str]) -> None:
    """``wheel`` rewritten in place with LZMA, without the members ``drop`` matches (nor their RECORD
    lines)."""
    gone = lambda name: any(fnmatch.fnmatch(name, p) for p in drop)  # noqa: E731
    tmp = wheel + ".tmp"
    with zipfile.ZipFile(wheel) as src, zipfile.ZipFile(tmp, "w", zipfile.ZIP_LZMA) as out:
        for info in src.infolist():
            if gone(info.filename):
                continue
            data = src.read(info.filename)
            if info.filename.endswith(".dist-info/RECORD"):
                lines = data.decode().splitlines(keepends=True)
                data = "".join(line for line in lines if not gone(line.split(",")[0])).encode()
            out.writestr(info, data, compress_type=zipfile.ZIP_LZMA)
    os.replace(tmp, wheel)


if __name__ == "__main__":
    if sys.argv[1:2] == ["--squeeze"]:
        p = argparse.ArgumentParser()
        p.add_argument("--squeeze", action="store_true")
        p.add_argument("--drop", action="append", default=[])
        p.add_argument("wheels", nargs="+")
        args = p.parse_args()
        for w in args.wheels:
            squeeze(w, args.drop)
    else:
        repack(*sys.argv[1:3])
