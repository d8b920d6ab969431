"""Decoding of stored chunks: chain classification, header checks, CPU and GPU decoders."""
