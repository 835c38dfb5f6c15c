"""Cost model of MoE inference: architecture, hardware, per-mode step costs and serving metrics.

Pure computation: imports nothing from `planner`, no solver, no CLI.
"""
