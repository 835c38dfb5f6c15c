"""A stand-in for `benchmarks.fit.PlannedRows` in tests of the fit's parameter space."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np


class RowsStub:
    """The part of `PlannedRows` the parameter space reads: each row's engine and system, no operators."""

    def __init__(self, engines: list[str], systems: list[str] | None = None) -> None:
        systems = systems or ["h200-sxm"] * len(engines)
        self.rows = [SimpleNamespace(engine=e, system=s) for e, s in zip(engines, systems, strict=True)]
        self.table = SimpleNamespace(op_work=np.zeros(0, dtype=int), op_dtype=np.zeros(0, dtype=int),
                                     op_gemm=np.zeros(0, dtype=bool), op_group_rows=np.zeros(0), generations=[])
        self.work_ids: set[int] = set()
