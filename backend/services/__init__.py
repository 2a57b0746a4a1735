"""What the control plane does, independent of HTTP: used by the API routers, the Celery
tasks and the job's control loop alike, so every state change has one implementation."""
