"""moe-planner: scenario schemas, MILP placement and Pareto fronts for MoE inference deployments.

The Python API (`planner.api`): `load_scenario`, `solve` and `evaluate`, each result's `to_dict()` being
the JSON of the matching `plan` command.
"""

__version__ = "0.1.0"

from planner.api import Front, FrontPoint, evaluate, load_scenario, solve  # after __version__: submodules import it

__all__ = ["Front", "FrontPoint", "__version__", "evaluate", "load_scenario", "solve"]
