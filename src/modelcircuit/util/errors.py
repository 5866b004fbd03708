"""The one user-facing error of the project: what the user gave cannot be compiled or read.

It lives in util/ (which imports nothing of the project) so that the file helpers beside it
can raise it; graphs/ir.py re-exports it as the IR's error.
"""

from __future__ import annotations


class GraphError(ValueError):
    """The graph is malformed or cannot be compiled (user input, exit 2)."""
