"""Retrying transient IO errors, with backoff (``zarr_dask_gpu.io-retries``, ``io-retry-delay``)."""

import errno
import time
from collections.abc import Callable

from .. import config


def retrying[T](what: str, fn: Callable[[], T], failed: OSError | None = None) -> T:
    """Run ``fn``, retrying transient OS errors (``zarr_dask_gpu.io-retries`` times, backing off).

    ``failed``: the error of a first attempt the caller made itself (a loop over many small files
    tries each once without reading the settings). A file that does not exist is not transient: it
    is a missing chunk, found by ``locate``.
    """
    retries, delay = config.integer("io-retries"), config.seconds("io-retry-delay")
    attempt, error = (1, failed) if failed is not None else (0, None)
    while True:
        if error is not None:
            if attempt > retries:
                why = f"reading {what} failed after {attempt} attempts: {error}"
                raise OSError(error.errno, why) from error
            time.sleep(delay * 2 ** (attempt - 1))
        try:
            return fn()
        except FileNotFoundError:
            raise
        except OSError as e:
            attempt, error = attempt + 1, e


def as_oserror[T](fn: Callable[[], T], when: Callable[[Exception], bool] = lambda e: True) -> Callable[[], T]:
    """``fn`` with client errors of remote filesystems (an HTTP 503, say) for which ``when`` holds
    raised as OSError, so that ``retrying`` retries them; a missing object stays FileNotFoundError,
    other errors stay as they are."""

    def run() -> T:
        try:
            return fn()
        except OSError:
            raise
        except Exception as e:  # aiohttp, botocore and friends
            if not when(e):
                raise
            raise OSError(errno.EIO, f"{type(e).__name__}: {e}") from e

    return run


def transient(error: BaseException) -> bool:
    """An error a retry may cure: a server's 5xx or 429 answer, a dropped or refused connection, an OS
    error other than a missing file, anywhere in the chain of causes."""
    seen: BaseException | None = error
    while seen is not None:
        if isinstance(seen, OSError) and not isinstance(seen, FileNotFoundError | PermissionError):
            return True
        status = getattr(seen, "status", None) or getattr(seen, "status_code", None)
        if isinstance(status, int) and (status >= 500 or status == 429):
            return True
        if type(seen).__name__ in ("ServerDisconnectedError", "ClientConnectorError", "ClientOSError"):
            return True
        seen = seen.__cause__ or seen.__context__
    return False
