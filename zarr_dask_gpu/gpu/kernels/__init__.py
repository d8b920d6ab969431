"""The loader of this package's CUDA kernels: their sources are the files in ``gpu/kernels/``, compiled by
cupy (NVRTC) at first use, one module a file.

``cuda/common.cuh`` holds what the sources share; each includes it. NVRTC could find it with ``-I``,
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

if TYPE_CHECKING:
    import cupy as cp

CUDA = resources.files(__package__)  # the CUDA sources lie beside this loader
_INCLUDE = re.compile(r'^#include "([^"]+)"[^\n]*$', re.MULTILINE)


def source(name: str, folder: Traversable = CUDA) -> str:
    """The text of ``<folder>/<name>`` (``cuda/<name>``) with each ``#include "file"`` replaced by the
    text of that file beside it, itself expanded: the code NVRTC compiles."""
    text = (folder / name).read_text()

    def inline(m: re.Match[str]) -> str:
        after = text.count("\n", 0, m.end()) + 2  # the line after the include, counted from 1
        body = source(m[1], folder).rstrip("\n")
        return f'#line 1 "{m[1]}"\n{body}\n#line {after} "{name}"'

    return _INCLUDE.sub(inline, text)


@functools.cache
def module(name: str, defines: str = "") -> cp.RawModule:
    """The compiled module of ``cuda/<name>`` (compiled at its first launch, then cached by cupy), with
    ``defines`` (``#define`` lines) before its text: a source's ``#ifndef`` defaults give way to them."""
    import cupy as cp

    return cp.RawModule(code=defines + source(name))


@functools.cache
def function(name: str, kernel: str) -> cp.RawKernel:
    """The ``extern "C"`` kernel ``kernel`` of ``cuda/<name>``."""
    return module(name).get_function(kernel)
