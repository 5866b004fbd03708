"""Simulation and equivalence: the one place that puts the backends side by side."""
