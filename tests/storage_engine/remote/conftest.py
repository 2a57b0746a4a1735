"""The object-store tests use `s3_server` and `s3_bucket` from tests/conftest.py."""
