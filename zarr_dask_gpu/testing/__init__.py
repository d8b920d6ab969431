"""Sample stores for the demo, the benchmark and the tests, and faults on demand for the tests of
containment."""
