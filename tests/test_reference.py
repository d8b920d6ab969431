"""``codecs/reference.py``, the GPU path's host decoder for what its device decoders refuse or do not
take, gives numcodecs' verdict on every chunk of the damage corpus (tests/damage.py), writing no
more than the chunk's size."""

import collections

import numpy as np

from zarr_dask_gpu.codecs.compressions import check, decode_into

from .damage import corpus, numcodecs_hangs, reference


def test_the_host_decoder_gives_the_reference_verdict_on_the_corpus():
    verdicts = collections.Counter()
    wrong = []
    for case in corpus(0, "ci"):
        if case.codec == "zstd" and numcodecs_hangs(case.data):  # refused before numcodecs sees them
            assert check("zstd", case.data, case.size), case.label
            verdicts["zstd hangs numcodecs", False] += 1
            continue
        kind = "blosc-lz4" if case.codec.startswith("blosc") else case.codec  # one check and c-blosc for all
        out = np.zeros(case.size, np.uint8)
        why = decode_into(kind, case.data, out)
        want = reference(case)
        verdicts[case.codec, why is None] += 1
        if (why is None) != (want is not None) or (why is None and out.tobytes() != want):
            wrong.append((case.codec, case.label, why))
    assert not wrong, wrong[:20]
    assert verdicts["zstd hangs numcodecs", False] > 0
    assert all(verdicts[c, True] and verdicts[c, False] for c, _ in verdicts if c != "zstd hangs numcodecs")
