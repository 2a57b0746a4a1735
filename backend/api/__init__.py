"""The HTTP layer: FastAPI app, dependencies, error mapping, routers per resource."""
