"""The GPU path's decoders: nvCOMP, this package's zstd, inflate and blosc kernels, the structure
check before them, the host fallback, and decode calls joined across tasks."""
