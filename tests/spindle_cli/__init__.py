"""Tests of the `spindle` command line."""
