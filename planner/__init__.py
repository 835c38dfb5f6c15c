"""moe-planner: scenario schemas, MILP placement and Pareto fronts for MoE inference deployments.

The Python API (`planner.api`): `load_scenario`, `solve`, `evaluate` and `calibrate`, each result's `to_dict()`
being the JSON of the matching `plan` command.
"""

__version__ = "0.1.0"

from planner.api import (  # after __version__: submodules import it
    Calibrated,
    Front,
    FrontPoint,
    calibrate,
    evaluate,
    load_scenario,
    solve,
)

__all__ = ["Calibrated", "Front", "FrontPoint", "__version__", "calibrate", "evaluate", "load_scenario", "solve"]
