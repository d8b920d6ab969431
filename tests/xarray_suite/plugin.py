"""A pytest plugin that runs xarray's own zarr backend tests with every read through this package's
``zarr_gpu`` engine, while every write stays xarray's ``to_zarr``.

xarray's tests name ``engine="zarr"`` (or its entrypoint class) wherever they read; the plugin
answers that engine with ``ZarrGpuBackendEntrypoint``. Where the engine differs from xarray's by
design, ``BY_DESIGN`` records the test and why, and the test runs as a strict xfail: if it starts to
pass, the record is wrong. ``scripts/xarray_suite.py`` runs the suite both ways and fails on any test
that passes with ``engine="zarr"`` but not here.

    python -m pytest -p tests.xarray_suite.plugin --pyargs xarray.tests.test_backends ...
"""

from typing import Any

import pytest
from xarray.backends import plugins
from xarray.backends.zarr import ZarrBackendEntrypoint

from zarr_dask_gpu.xarray.backend import ZarrGpuBackendEntrypoint

_BLOCKS = (
    'chunks={} and "auto" give the engine\'s blocks (whole stored chunks, about block-size each), '
    "not one dask chunk per stored chunk"
)
_DASK = "data variables are dask arrays of the engine's read tasks, whatever chunks= says: no lazily indexed"
# a test's name (its class and function, with or without its parameters) -> why the engine answers
# otherwise, by design (docs/xarray.md, "Compared with engine='zarr'")
BY_DESIGN: dict[str, str] = {
    **{
        f"{cls}::{test}": why
        for cls in (
            "TestZarrDictStore",
            "TestZarrDirectoryStore",
            "TestZarrWriteEmpty",
            "TestZarrNoConsolidatedMetadataSupport",
        )
        for test, why in (
            ("test_auto_chunk", _BLOCKS),
            ("test_chunked_datetime64_or_timedelta64", _BLOCKS),
            ("test_manual_chunk", f"{_DASK} numpy arrays for chunks=None"),
            ("test_dataset_caching", f"{_DASK} arrays to cache in memory"),
        )
    },
    # the cases where chunks= leaves a dimension to the engine ("auto", {}, {"x": ...}): its blocks
    **{
        f"test_open_dataset_chunking_zarr[{case}]": _BLOCKS
        for case in ("auto", "chunks2", "chunks3", "chunks4")
    },
}

_real = plugins.get_backend


def _get_backend(engine: Any) -> Any:
    if engine == "zarr" or engine is ZarrBackendEntrypoint:
        return ZarrGpuBackendEntrypoint()
    return _real(engine)


def pytest_configure(config: pytest.Config) -> None:
    plugins.get_backend = _get_backend


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        name = item.nodeid.split("::", 1)[-1]  # with its parameters, then without
        why = BY_DESIGN.get(name, BY_DESIGN.get(name.split("[")[0]))
        if why is not None:
            item.add_marker(pytest.mark.xfail(reason=f"by design: {why}", strict=True))
