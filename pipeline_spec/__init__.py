"""The pipeline spec and the driver's exit codes, shared by the control plane and the runtime
(see README.md)."""
