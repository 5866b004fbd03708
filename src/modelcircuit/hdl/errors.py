"""The HDL backend's error: a graph or an option that cannot become a circuit."""

from __future__ import annotations


class HdlError(ValueError):
    """The graph or an option cannot be lowered to a circuit (user input, exit 2)."""
