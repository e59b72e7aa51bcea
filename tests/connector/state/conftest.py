"""Fixtures of the connector state's tests: a document store on each backend (tests/support/docstores.py)."""

from tests.support.docstores import backend  # noqa: F401  (the fixture, found by name)
