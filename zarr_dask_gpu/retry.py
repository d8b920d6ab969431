"""Retrying transient IO errors, with backoff (``zarr_dask_gpu.io-retries``, ``io-retry-delay``)."""

import errno
import time
from collections.abc import Callable

from . import config


def retrying[T](what: str, fn: Callable[[], T]) -> T:
    """Run ``fn``, retrying transient OS errors (``zarr_dask_gpu.io-retries`` times, backing off).

    A file that does not exist is not transient: it is a missing chunk, found by ``locate``.
    """
    retries, delay = int(config.get("io-retries")), float(config.get("io-retry-delay"))
    for attempt in range(retries + 1):
        try:
            return fn()
        except FileNotFoundError:
            raise
        except OSError as e:
            if attempt == retries:
                raise OSError(e.errno, f"reading {what} failed after {retries + 1} attempts: {e}") from e
            time.sleep(delay * 2**attempt)
    raise AssertionError("unreachable")  # the loop returns or raises


def as_oserror[T](fn: Callable[[], T]) -> Callable[[], T]:
    """``fn`` with client errors of remote filesystems (an HTTP 503, say) raised as OSError, so that
    ``retrying`` retries them; a missing object stays FileNotFoundError."""

    def run() -> T:
        try:
            return fn()
        except OSError:
            raise
        except Exception as e:  # aiohttp, botocore and friends
            raise OSError(errno.EIO, f"{type(e).__name__}: {e}") from e

    return run
