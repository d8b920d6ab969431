"""Decode calls of the GPU backend, joined across the tasks of a device that decode at once
(``join-decodes``): one call of many tasks' chunks ends sooner than as many concurrent calls."""

import contextlib
import threading
from collections.abc import Hashable, Sequence

import cupy as cp

from ... import config, phases
from ...joining import Joiner, joins
from ...phases import Phase
from ..runtime.streams import joining_stream
from . import decompress

_lock = threading.Lock()
_joiners: dict[int, Joiner] = {}  # per device


def joining() -> bool:
    return config.flag("join-decodes")


def member() -> contextlib.AbstractContextManager:
    """Held by a task from before its reads to after its last decode: while members are on their
    way, submitted calls wait for theirs (``Joiner``)."""
    return _joiner().member() if joining() else contextlib.nullcontext()


def decode(compression: str, batch: decompress.Batch) -> list[tuple[int, str]]:
    """``batch`` decoded, joined with the device's other tasks' calls when joining, alone
    otherwise; its failures as (index, reason)."""
    fewer = config.maybe_integer("join-items")
    if joining() and joins(batch.dst_sizes, config.maybe_nbytes("join-below"), fewer):
        # a joined call that raised (scratch too large for many tasks' chunks) is retried alone below,
        # so that each task gets its own outcome
        with contextlib.suppress(Exception):
            return _joiner().submit(
                compression,
                batch,
                config.integer("join-tasks"),
                config.maybe_seconds("join-wait"),
            )
    # alone: not joining, chunks too large to join, or a joined call that raised; meanwhile the
    # others' calls need not wait for this one
    with _joiner().aside() if joining() else contextlib.nullcontext():
        return _decode_joined(compression, [batch])[0]


def _decode_joined(compression: Hashable, batches: Sequence[decompress.Batch]) -> list[list[tuple[int, str]]]:
    with (
        joining_stream() as stream,  # keyed by compression: a row name of codecs.compressions
        phases.record(Phase.DECODE_CALL, tasks=len(batches), chunks=sum(len(b.src) for b in batches)),
    ):
        return decompress.decode_joined(str(compression), batches, stream)


def _joiner() -> Joiner:
    """This device's joiner: the decode calls of its tasks decoding at once, joined."""
    dev = cp.cuda.Device().id
    with _lock:
        if dev not in _joiners:
            _joiners[dev] = Joiner(_decode_joined)
        return _joiners[dev]
