"""An ONNX graph written by a short-lived child process, opened as a one-thread session.

The int8 encoders (e5's query kernels, the judge's model) are written by ``onnx``; importing it
would cost every worker memory it never needs again, so a child process writes the graph (its
weights in a file beside it, which the session maps) into a temporary folder and exits.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from typing import Any


class GraphUnavailable(RuntimeError):
    """The graph could not be written or opened here (onnxruntime missing, the child failing, a refusal)."""


def session_written_by(module: str, source: str, name: str, what: str, timeout_s: float) -> Any:
    """An onnxruntime session over the graph ``python -m module SOURCE OUT`` writes to OUT (a file
    named ``name`` in a temporary folder): one thread, no spinning, no arena. Raises
    `GraphUnavailable`: "onnxruntime cannot load: ...", "WHAT could not be written: ..." (the last
    line of the child's error output), "onnxruntime refused WHAT: ..."."""
    try:
        import onnxruntime
    except ImportError as exc:
        raise GraphUnavailable(f"onnxruntime cannot load: {exc}") from exc
    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = 1  # it runs beside the recall's own thread: one core each
    options.inter_op_num_threads = 1
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    options.enable_cpu_mem_arena = False  # a call's few buffers: no arena kept between calls
    options.enable_mem_pattern = False
    options.log_severity_level = 3
    with tempfile.TemporaryDirectory(prefix=f"{name}-") as folder:
        out = os.path.join(folder, name)
        try:
            _write_in_child(module, source, out, timeout_s)
        except GraphUnavailable as exc:
            raise GraphUnavailable(f"{what} could not be written: {exc}") from exc
        try:
            return onnxruntime.InferenceSession(out, options, providers=["CPUExecutionProvider"])
        except Exception as exc:  # noqa: BLE001 - any refusal (an old runtime without an operator)
            raise GraphUnavailable(f"onnxruntime refused {what}: {exc}") from exc


def _write_in_child(module: str, source: str, out: str, timeout_s: float) -> None:
    # The child imports this package from where this process did (an unpacked checkout too).
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")]))}
    try:
        done = subprocess.run([sys.executable, "-m", module, source, out], capture_output=True, timeout=timeout_s,
                              check=False, env=env)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise GraphUnavailable(str(exc)) from exc
    if done.returncode != 0 or not os.path.isfile(out):
        reason = done.stderr.decode("utf-8", "replace").strip().splitlines()
        raise GraphUnavailable(reason[-1] if reason else f"exit status {done.returncode}")
