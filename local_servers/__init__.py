"""Real servers that the test suite and the benchmarks start on free loopback ports."""
