"""The loader of this package's CUDA kernels: their sources are the files beside it, compiled by cupy
(NVRTC) at first use, one module a file, after the defines of the constants they share with their
launchers (``shared.py``).

``common.cuh`` holds what the sources share; each includes it. NVRTC could find it with ``-I``,
but cupy's kernel cache is keyed on the code it is given (its own headers aside), so a header edit
would reuse binaries built before it: ``source`` puts the text of every ``#include "..."`` of a file
beside the source in its place, with ``#line`` marks so that compiler messages name the right file
and line. The host compiler reads the same files with its own ``#include`` (tests/codecs/test_kernels_c.py,
tests/codecs/test_zstd_c.py). Each kernel's work is a device function (``*_item`` and the like) that the
host tests call; the ``__global__`` wrappers, CUDA only, map threads to items.

This module imports cupy only when a module is compiled, so the sources can be found without it."""

from __future__ import annotations

import functools
import re
from importlib import resources
from importlib.resources.abc import Traversable
from typing import TYPE_CHECKING

from . import shared

if TYPE_CHECKING:
    import cupy as cp

CUDA = resources.files(__package__)  # the CUDA sources lie beside this loader
_INCLUDE = re.compile(r'^#include "([^"]+)"[^\n]*$', re.MULTILINE)


def source(name: str, folder: Traversable = CUDA) -> str:
    """The text of ``<folder>/<name>`` with each ``#include "file"`` replaced by the text of that
    file beside it, itself expanded: the code NVRTC compiles."""
    text = (folder / name).read_text()

    def inline(m: re.Match[str]) -> str:
        after = text.count("\n", 0, m.end()) + 2  # the line after the include, counted from 1
        body = source(m[1], folder).rstrip("\n")
        return f'#line 1 "{m[1]}"\n{body}\n#line {after} "{name}"'

    return _INCLUDE.sub(inline, text)


@functools.cache
def module(name: str, overrides: tuple[tuple[str, int], ...] = ()) -> cp.RawModule:
    """The compiled module of ``<name>`` (compiled at its first launch, then cached by cupy): its
    text after the ``#define`` lines of the constants it shares with its launcher (``shared.py``),
    ``overrides`` (pairs of a name and its value) in their place or beside them."""
    import cupy as cp

    defines = shared.defines(name, dict(overrides))
    return cp.RawModule(code=f'{defines}#line 1 "{name}"\n{source(name)}')


@functools.cache
def function(name: str, kernel: str) -> cp.RawKernel:
    """The ``extern "C"`` kernel ``kernel`` of ``<name>``."""
    return module(name).get_function(kernel)
