"""The GPU path: kvikio reads, structure checks, batched nvCOMP decode. Imports cupy, kvikio, nvCOMP.

Nothing outside this package imports it at module level, so the rest imports on CPU-only machines
(tests/unit/test_layers.py checks it).
"""
