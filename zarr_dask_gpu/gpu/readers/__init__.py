"""Device readers: kvikio reads of local chunk files and byte ranges, and of remote objects."""
