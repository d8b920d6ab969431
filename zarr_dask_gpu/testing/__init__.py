"""Sample stores for the demo, the benchmark and the tests."""
