"""The package's one native extension (setup.py: pyproject.toml's ext-modules table is experimental)."""

from setuptools import Extension, setup

# many small files read by native threads without the GIL (docs/performance.md, dataset B)
setup(
    ext_modules=[Extension("zarr_dask_gpu._preads", ["zarr_dask_gpu/_preads.c"], extra_compile_args=["-O2"])]
)
