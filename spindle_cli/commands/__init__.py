"""The command groups of `spindle`, one module per resource; `spindle_cli.main` mounts them."""
