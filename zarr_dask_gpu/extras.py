"""Optional dependencies, imported where they are needed, with an ``ImportError`` naming the extra
that installs them."""

import importlib
from types import ModuleType

# module -> the extra of pyproject.toml that brings it
EXTRAS = {"xarray": "xarray", "torch": "torch", "s3fs": "remote", "aiohttp": "remote", "fsspec": "remote"}


def require(module: str, purpose: str) -> ModuleType:
    """``module``, imported.

    Raises
    ------
    ImportError
        It is not installed: the message says what needs it and the ``pip install`` that brings it.
    """
    try:
        return importlib.import_module(module)
    except ImportError as e:
        extra = EXTRAS[module.split(".")[0]]
        raise ImportError(
            f"{purpose} needs {module.split('.')[0]}, which is not installed: "
            f'pip install "zarr-dask-gpu[{extra}]"'
        ) from e
