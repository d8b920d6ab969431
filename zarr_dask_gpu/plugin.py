"""Per-process set-up of dask workers that read zarr onto GPUs."""

from distributed import Worker, WorkerPlugin

from .device import gpu_available


class GpuReadPlugin(WorkerPlugin):
    """Does each worker's GPU set-up when it starts (kvikio's IO thread pool), so the first task pays
    nothing for it; on CPU-only workers it does nothing. Works on any dask or dask-cuda worker,
    including ``dask cuda worker`` processes started by hand: ``client.register_plugin(GpuReadPlugin())``.
    """

    name = "zarr-dask-gpu"

    def setup(self, worker: Worker) -> None:
        if gpu_available():
            from .gpu import setup

            setup.configure()
