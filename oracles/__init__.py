"""Independent reference answers that the tests and the benchmarks check Spindle's (and its
peers') output against."""
