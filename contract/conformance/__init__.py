"""Black-box conformance suite for the Brain store contract 1.1.

It talks HTTP only (httpx) and imports nothing from the store, so it can be
pointed at any store: ours, the reference, or a hosted one.
"""

from contract.conformance.registry import CHECKS, Check, CheckFailed, CheckSkipped
from contract.conformance.runner import Result, SuiteConfig, format_table, run_suite

__all__ = ["CHECKS", "Check", "CheckFailed", "CheckSkipped", "Result", "SuiteConfig", "format_table", "run_suite"]
