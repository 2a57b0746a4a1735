"""The command groups of `spindle`, one module per resource; `cli.main` mounts them."""
