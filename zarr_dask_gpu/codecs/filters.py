"""numcodecs filters undone with array operations of any array module (numpy here, cupy on the GPU).

Decoding each of these is a view, a cast, a cumulative sum, an affine map or a byte transposition,
so one implementation serves both devices and is checked against numcodecs on the host.
"""

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

SUPPORTED = ("delta", "fixedscaleoffset", "quantize", "bitround", "astype", "shuffle")


def unsupported(configs: Sequence[Mapping[str, Any]]) -> str | None:
    """Why a filter chain cannot be undone here, or None."""
    for c in configs:
        if c["id"] not in SUPPORTED:
            return f"filter {c['id']!r} is not decoded on the GPU"
        for key in ("dtype", "astype", "encode_dtype", "decode_dtype"):
            if key in c and np.dtype(c[key]).byteorder == ">":
                return f"filter {c['id']!r} with big-endian {key} is not decoded on the GPU"
    return None


def _native(dtype: Any) -> np.dtype:
    return np.dtype(dtype).newbyteorder("=")


def encoded_itemsize(configs: Sequence[Mapping[str, Any]], dtype: np.dtype) -> int:
    """Bytes per element after every filter has encoded: what the compressor saw."""
    size = dtype.itemsize
    for c in configs:
        if c["id"] in ("delta", "fixedscaleoffset", "quantize"):
            size = _native(c.get("astype") or c["dtype"]).itemsize
        elif c["id"] == "astype":
            size = _native(c["encode_dtype"]).itemsize
    return size


def decode(xp: Any, raw: Any, configs: Sequence[Mapping[str, Any]], dtype: np.dtype) -> Any:
    """Undo ``configs`` (applied in order when encoding) on the flat bytes ``raw``; a flat array of
    ``dtype``."""
    data = raw
    for c in reversed(configs):
        kind = c["id"]
        if kind == "shuffle":
            es = int(c["elementsize"])
            n = data.size // es
            body = data[: n * es].reshape(es, n).T.reshape(-1)
            data = xp.concatenate([body, data[n * es :]]) if n * es < data.size else body
        elif kind == "delta":
            enc = data.view(_native(c.get("astype") or c["dtype"]))
            data = xp.cumsum(enc, dtype=_native(c["dtype"])).view(np.uint8)
        elif kind == "fixedscaleoffset":
            enc = data.view(_native(c["astype"]))
            data = ((enc / c["scale"]) + c["offset"]).astype(_native(c["dtype"])).view(np.uint8)
        elif kind == "quantize":
            data = data.view(_native(c["astype"])).astype(_native(c["dtype"])).view(np.uint8)
        elif kind == "astype":
            data = data.view(_native(c["encode_dtype"])).astype(_native(c["decode_dtype"])).view(np.uint8)
        # bitround decodes to itself
    return data.view(dtype)
