"""Zip an unpacked wheel again after files were cut from it; RECORD keeps the lines of the files left.

Usage: python3 scripts/repack_wheel.py DIR WHEEL   (DIR: the unpacked wheel; WHEEL: the file to write)
"""

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


if __name__ == "__main__":
    repack(*sys.argv[1:3])
