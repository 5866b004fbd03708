"""Arguments and entry point of `modelcircuit sweep` (placeholder until implemented)."""

from __future__ import annotations

import argparse


def add_arguments(p: argparse.ArgumentParser) -> None:
    """Options of the subcommand; must not import the extra's packages."""


def run(a: argparse.Namespace) -> int:
    raise NotImplementedError("modelcircuit sweep is not implemented yet")
