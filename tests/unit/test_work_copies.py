"""The step-work copies the cost model makes in its hot loop (operators scaled to a stage's layer count,
operators of two batches merged into one step, built as tuples field by field) equal what `_replace` gives,
for every field: a field added later cannot be silently dropped."""

from __future__ import annotations

from costmodel.modes import _scaled_ops, _scaled_transfers, merged_work
from costmodel.precision import Dtype
from costmodel.work import Op, StepWork, Transfer


def test_scaled_operators_keep_every_other_field() -> None:
    op = Op("routed_experts", "gemm", 3.0, 5.0, 7.0e15, Dtype.FP8, 1.0)
    assert _scaled_ops([op], 4) == [op._replace(flops=12.0, hbm_bytes=20.0)]
    assert _scaled_ops([op], 1) == [op]
    assert set(Op._fields) == {"name", "op_class", "flops", "hbm_bytes", "peak_flops_per_s", "dtype",
                               "group_element_bytes"}


def test_scaled_transfers_keep_every_other_field() -> None:
    transfer = Transfer("tp_allreduce", "scaleup", 3.0, 2.0, "allreduce", 4)
    assert _scaled_transfers([transfer], 5) == [transfer._replace(bytes=15.0, calls=10.0)]
    assert set(Transfer._fields) == {"name", "tier", "bytes", "calls", "kind", "ranks"}


def test_merged_operators_keep_every_other_field() -> None:
    """A GEMM's weights are read once for both batches (the larger read), attention work adds."""
    gemm = Op("routed_experts", "gemm", 3.0, 5.0, 7.0e15, Dtype.FP8, 1.0)
    core = Op("attention_core", "attention", 2.0, 4.0, 1.0e15, Dtype.BF16)
    first = StepWork([gemm, core], [], 1, 2.0)
    second = StepWork([gemm._replace(flops=6.0, hbm_bytes=9.0), core._replace(flops=1.0, hbm_bytes=1.0)], [], 1, 1.0)
    assert merged_work(first, second).ops == [gemm._replace(flops=9.0, hbm_bytes=9.0),
                                              core._replace(flops=3.0, hbm_bytes=5.0)]
    assert merged_work(second, first).ops[0] == gemm._replace(flops=9.0, hbm_bytes=9.0)
