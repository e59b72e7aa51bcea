"""Fixtures of the common package's tests: the S3 services of tests/s3 (moto, SeaweedFS)."""

from tests.s3.conftest import moto, weed  # noqa: F401  (fixtures, found by name)
