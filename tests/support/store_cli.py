"""`brain-store` commands run inside the test process: the same click commands as the console
script, without a Python start-up (and its imports) per call.

For tests that need an account or a token as a step; tests of the command line itself run the
console script as a subprocess.
"""

from __future__ import annotations

from pathlib import Path

from click.testing import CliRunner


def brain_store(*args: str, data: Path) -> str:
    """Run ``brain-store ARGS --data DATA`` in this process; its standard output (fails on a non-zero exit)."""
    from cli.store import main

    result = CliRunner().invoke(main, [*args, "--data", str(data)], catch_exceptions=False)
    assert result.exit_code == 0, f"brain-store {' '.join(args)} exited {result.exit_code}: {result.output}"
    return result.stdout
