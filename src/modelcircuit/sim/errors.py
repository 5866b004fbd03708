"""The one error type of sim/: bad user input (exit 2 in the CLI)."""

from __future__ import annotations


class SimError(ValueError):
    """A simulator that is not installed, inputs of the wrong shape or dtype, a failed build:
    one line for the user, exit code 2 in the CLI."""
