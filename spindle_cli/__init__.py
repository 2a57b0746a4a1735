"""The `spindle` command-line client."""
