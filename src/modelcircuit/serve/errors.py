"""Errors of `modelcircuit serve`: ServeError is the user's (one line, exit 2), RequestError
an HTTP answer (status, kind, message), BackendsFailed a batch that neither the primary nor
the fallback could run (503)."""

from __future__ import annotations


class ServeError(ValueError):
    """Bad command line, artifact or environment for `modelcircuit serve` (exit 2)."""


class RequestError(Exception):
    """A request refused with an HTTP status; `kind` labels the error metric."""

    def __init__(self, status: int, kind: str, message: str):
        super().__init__(message)
        self.status, self.kind, self.message = status, kind, message


class BackendsFailed(RuntimeError):
    """Primary and fallback both raised on a batch (answered 503; the server stays up)."""
