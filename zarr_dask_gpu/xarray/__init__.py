"""xarray's front doors: the ``zarr_gpu`` engine and CF decoding of device-resident variables."""
