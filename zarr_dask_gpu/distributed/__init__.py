"""dask.distributed: the worker plugin, local clusters, and containment of CUDA faults in workers."""
