"""What the GPU path's tasks run on: CUDA streams and waits, small transfers, byte-range gathers, read
slots, fault reports and per-process set-up."""
