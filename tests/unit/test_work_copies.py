"""The step-work copies the cost model makes in its hot loop (`Op.with_work`, `Transfer.times`) equal what
`_replace` gives, for every field: a field added later cannot be silently dropped."""

from __future__ import annotations

from costmodel.precision import Dtype
from costmodel.work import Op, Transfer


def test_op_with_work_keeps_every_other_field() -> None:
    op = Op("routed_experts", "gemm", 3.0, 5.0, 7.0e15, Dtype.FP8, 1.0)
    assert op.with_work(11.0, 13.0) == op._replace(flops=11.0, hbm_bytes=13.0)
    assert set(Op._fields) == {"name", "op_class", "flops", "hbm_bytes", "peak_flops_per_s", "dtype",
                               "group_element_bytes"}


def test_transfer_times_keeps_every_other_field() -> None:
    transfer = Transfer("tp_allreduce", "scaleup", 3.0, 2.0, "allreduce", 4)
    assert transfer.times(5) == transfer._replace(bytes=15.0, calls=10.0)
    assert set(Transfer._fields) == {"name", "tier", "bytes", "calls", "kind", "ranks"}
