"""moe-planner: scenario schemas, MILP placement and Pareto fronts for MoE inference deployments."""

__version__ = "0.1.0"
