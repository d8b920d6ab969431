"""kerchunk references (``reference://``, VirtualiZarr's kerchunk output): each chunk key is a byte
range of a file, inline bytes, or absent, as fsspec's ``ReferenceFileSystem`` reads it. Ranges of
local files are read directly (preads, kvikio on the GPU); inline bytes and ranges of remote files
are fetched by the reference filesystem itself, with its own options for each target."""

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from fsspec.core import split_protocol
from fsspec.implementations.local import LocalFileSystem

from .stores import KeyStore, LocatedStore
from .units import Range, Source


def sync_filesystem(fs: Any) -> Any:
    """The synchronous filesystem behind fsspec's ``AsyncFileSystemWrapper`` (``fs`` itself when not
    wrapped)."""
    return getattr(fs, "sync_fs", fs)


@dataclass(frozen=True, eq=False)
class ReferenceStore(LocatedStore):
    """A zarr ``FsspecStore`` over fsspec's ``ReferenceFileSystem``.

    Attributes
    ----------
    keys
        The zarr store, read through its ``get`` for inline references and remote targets.
    prefix
        The zarr store's root inside the reference filesystem.
    """

    keys: KeyStore
    prefix: str = ""

    def locate(self, keys: Sequence[str]) -> list[Range | None]:
        fs = sync_filesystem(self.keys.store.fs)
        return self.checked(keys, [self._one(fs, key) for key in keys])

    def _one(self, fs: Any, key: str) -> Range | None:
        name = f"{self.prefix}/{key}".strip("/") if self.prefix else key
        try:  # fsspec's own rule: a key the references lack is a missing file
            ref = fs.references[name]
        except KeyError:
            return None
        if isinstance(ref, str | bytes) or hasattr(ref, "to_bytes") or len(ref) != 3:
            return Range(key, 0, -1, Source.KEY)  # inline bytes, or a whole file of unknown size
        url, offset, size = ref
        url = fs.target if url is None else url
        target = sync_filesystem(fs.fss.get(split_protocol(url)[0], fs.fss.get(None)))
        if isinstance(target, LocalFileSystem):
            return Range(target._strip_protocol(url), int(offset), int(size))
        return Range(key, 0, -1, Source.KEY)
