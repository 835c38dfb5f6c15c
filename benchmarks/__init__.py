"""Calibration benchmarks: real serving measurements as typed cases, and cross-validation of the cost model
against them. Reads the reference data in ../shared/calibration; not part of the installed package."""
