"""A stand-in for `costmodel.fitting.PlannedRows` in tests of the fit's parameter space."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np


class RowsStub:
    """The part of `PlannedRows` the parameter space reads: each row's engine and system, no operators."""

    def __init__(self, engines: list[str], systems: list[str] | None = None, mla_layers: list[int] | None = None,
                 weight_only_layers: list[int] | None = None) -> None:
        """One step per row, with the MLA and weight-only expert layers it runs (none unless given)."""
        systems = systems or ["h200-sxm"] * len(engines)
        self.rows = [SimpleNamespace(engine=e, system=s) for e, s in zip(engines, systems, strict=True)]
        names = sorted(set(engines))
        self.table = SimpleNamespace(op_work=np.zeros(0, dtype=int), op_dtype=np.zeros(0, dtype=int),
                                     op_gemm=np.zeros(0, dtype=bool), op_group_rows=np.zeros(0), generations=[],
                                     works=list(engines), engine_names=names,
                                     engine_of=np.array([names.index(e) for e in engines], dtype=int),
                                     mla_layers=np.array(mla_layers or [0] * len(engines), dtype=float),
                                     weight_only_layers=np.array(weight_only_layers or [0] * len(engines),
                                                                 dtype=float))
        self.work_ids: set[int] = set(range(len(engines)))
