"""Configuration, under dask.config's ``zarr_dask_gpu`` namespace: one row per setting.

Each key can be set with ``dask.config.set({"zarr_dask_gpu.<key>": value})`` or the environment
variable ``DASK_ZARR_DASK_GPU__<KEY>`` (dask's convention). The package reads a setting through the
accessor of its kind (``nbytes``, ``seconds``, their ``maybe_`` forms for settings that may be None,
``integer``, ``flag``, ``choice``), which parses it
and names the key when its value is not of that kind. What each setting does, with measurements,
is in docs/configuration.md.
"""

import contextlib
import os
import warnings
from collections.abc import Iterator, Mapping
from contextvars import ContextVar
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Literal

import dask.config
from dask.utils import parse_bytes, parse_timedelta

Kind = Literal["bytes", "duration", "int", "bool", "choice"]


@dataclass(frozen=True)
class Setting:
    """One setting: its default, its kind, whether None is allowed (it then means what ``doc``
    says), the values a choice takes, and what it does in one line."""

    default: Any
    kind: Kind
    doc: str
    optional: bool = False
    choices: tuple[str, ...] = ()


SETTINGS: dict[str, Setting] = {
    "block-size": Setting(
        None,
        "bytes",
        "target size of a default dask block (None: 1 GiB on the GPU, 256 MiB on the CPU)",
        True,
    ),
    "gpu-min-blocks": Setting(
        4, "int", "on the GPU, default blocks shrink (to 32 MiB) until an array has this many"
    ),
    "max-blocks": Setting(1 << 24, "int", "the most blocks a dask array of this package may have"),
    "strict": Setting(False, "bool", "raise MissingChunkError instead of filling absent chunks"),
    "cpu-threads": Setting(0, "int", "threads for host preads and CPU decode (0: one per core)"),
    "kvikio-threads": Setting(0, "int", "kvikio IO threads per process on the GPU path (0: one per core)"),
    "blocking-sync": Setting(True, "bool", "GPU path: threads waiting for a device sleep rather than spin"),
    "decode-call-bytes": Setting(
        None, "bytes", "decoded bytes per decode call (None: a task's batch in one call)", True
    ),
    "host-read-below": Setting(
        "1MiB", "bytes", "GPU path: reads smaller on average go through pinned host memory (0: off)"
    ),
    "staging": Setting(
        "device", "choice", "where a GPU task's compressed chunks wait", choices=("device", "host")
    ),
    "join-decodes": Setting(True, "bool", "join the decode calls of a device's tasks decoding at once"),
    "join-tasks": Setting(2, "int", "make a joined call once this many tasks' calls are ready (0: all)"),
    "join-below": Setting(
        "64MiB", "bytes", "tasks whose chunks average this size or more decode alone (None: none)", True
    ),
    "join-items": Setting(
        8192,
        "int",
        "tasks of this many chunks (blosc: inner streams) or more decode alone (None: none)",
        True,
    ),
    "join-wait": Setting(
        "10ms", "duration", "the longest a call waits for the others' (None: no bound)", True
    ),
    "zstd-decoder": Setting(
        "blocks",
        "choice",
        "zstd on the GPU: this package's kernels, or nvCOMP (trusted data only)",
        choices=("blocks", "nvcomp"),
    ),
    "deflate-decoder": Setting(
        "host",
        "choice",
        "gzip and zlib on the GPU path: the host's cores, or this package's inflate kernel",
        choices=("host", "kernels"),
    ),
    "read-slots": Setting(2, "int", "tasks of a process reading at once on the GPU path (0: all)"),
    "remote-io": Setting(
        "auto", "choice", "how the GPU path reads remote chunks", choices=("auto", "kvikio", "fsspec")
    ),
    "io-retries": Setting(3, "int", "retries of a transient IO error"),
    "io-retry-delay": Setting(0.05, "duration", "the first retry's delay, doubled after each"),
    "verify-checksums": Setting(True, "bool", "verify crc32c and zstd content checksums on the GPU"),
    "coalesce-gap": Setting("1MiB", "bytes", "ranges of one file closer than this are read in one pread"),
    "coalesce-limit": Setting("256MiB", "bytes", "the largest such pread"),
}

# keys renamed, the old name still read (with a FutureWarning): "coalesce" names merging byte ranges
# only, and joining tasks' decode calls is "join"
RENAMED = {f"coalesce-{k}": f"join-{k}" for k in ("decodes", "tasks", "below", "items", "wait")}
_FORMER = {new: old for old, new in RENAMED.items()}
_UNSET = object()

DEFAULTS: dict[str, Any] = {key: s.default for key, s in SETTINGS.items()}

dask.config.update_defaults({"zarr_dask_gpu": DEFAULTS})


_task: ContextVar[Mapping[str, Any] | None] = ContextVar("zarr_dask_gpu_task_settings", default=None)


@contextlib.contextmanager
def for_task() -> Iterator[None]:
    """Inside, every setting is read from one record, taken on entry: a read task's plan, reads,
    decodes and joined calls see one configuration, whatever changes meanwhile in the process."""
    token = _task.set(MappingProxyType({key: _configured(key) for key in SETTINGS}))
    try:
        yield
    finally:
        _task.reset(token)


def get(key: str) -> Any:
    """Return the configured value of ``zarr_dask_gpu.<key>`` as it was set (under its former name,
    where it was renamed and is set so), or as it was when the current task began (``for_task``)."""
    record = _task.get()
    return record[key] if record is not None else _configured(key)


def _configured(key: str) -> Any:
    if key in _FORMER:
        value = dask.config.get(f"zarr_dask_gpu.{_FORMER[key]}", _UNSET)
        if value is not _UNSET:
            warnings.warn(
                f"zarr_dask_gpu.{_FORMER[key]} is now zarr_dask_gpu.{key}", FutureWarning, stacklevel=4
            )
            return value
    return dask.config.get(f"zarr_dask_gpu.{key}")


def _value(key: str, kind: Kind) -> Any:
    setting = SETTINGS[key]
    assert setting.kind == kind, f"{key} is a {setting.kind} setting"
    value = get(key)
    if value is None and not setting.optional:
        raise ValueError(f"zarr_dask_gpu.{key} is None; it takes a {kind} value")
    return value


def _invalid(key: str, value: Any, what: str, e: Exception) -> ValueError:
    return ValueError(f"zarr_dask_gpu.{key} is {value!r}, not {what}: {e}")


def maybe_nbytes(key: str) -> int | None:
    """A size setting in bytes (``"1MiB"`` or an int), or None where the setting allows it."""
    value = _value(key, "bytes")
    try:
        return None if value is None else int(parse_bytes(value))
    except (ValueError, TypeError) as e:
        raise _invalid(key, value, "a size", e) from e


def nbytes(key: str) -> int:
    """A size setting in bytes that is always set."""
    assert not SETTINGS[key].optional, f"{key} may be None: maybe_nbytes"
    return maybe_nbytes(key) or 0  # not None: _value raised


def maybe_seconds(key: str) -> float | None:
    """A duration setting in seconds (``"10ms"`` or a number), or None where the setting allows it."""
    value = _value(key, "duration")
    try:
        return None if value is None else float(parse_timedelta(value))
    except (ValueError, TypeError, KeyError) as e:
        raise _invalid(key, value, "a duration", e) from e


def seconds(key: str) -> float:
    """A duration setting in seconds that is always set."""
    assert not SETTINGS[key].optional, f"{key} may be None: maybe_seconds"
    return maybe_seconds(key) or 0.0  # not None: _value raised


def integer(key: str) -> int:
    """An integer setting that is always set."""
    assert not SETTINGS[key].optional, f"{key} may be None: maybe_integer"
    return maybe_integer(key) or 0  # not None: _value raised


def maybe_integer(key: str) -> int | None:
    """An integer setting, or None where the setting allows it."""
    value = _value(key, "int")
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | str):
        raise ValueError(f"zarr_dask_gpu.{key} is {value!r}, not an integer")
    try:
        return int(value)
    except ValueError as e:
        raise _invalid(key, value, "an integer", e) from e


def flag(key: str) -> bool:
    """A boolean setting."""
    value = _value(key, "bool")
    if not isinstance(value, bool):
        raise ValueError(f"zarr_dask_gpu.{key} is {value!r}, not True or False")
    return value


def choice(key: str) -> str:
    """The configured value of ``zarr_dask_gpu.<key>``, one of its setting's choices.

    Raises
    ------
    ValueError
        The value is none of them (a misspelt mode would otherwise pass for the default).
    """
    allowed = SETTINGS[key].choices
    value = _value(key, "choice")
    if value not in allowed:
        raise ValueError(
            f"zarr_dask_gpu.{key} is {value!r}; it must be one of {', '.join(map(repr, allowed))}"
        )
    return value


def cpu_threads() -> int:
    """``cpu-threads``, or the machine's cores."""
    return integer("cpu-threads") or os.cpu_count() or 1


def block_size(device: str) -> int:
    """``block-size`` in bytes; unset, 1 GiB on the GPU and 256 MiB on the CPU (docs/configuration.md)."""
    size = maybe_nbytes("block-size")
    return size if size is not None else (1 << 30 if device == "gpu" else 256 << 20)
