"""Compiler passes: each a pure function Graph -> Graph, listed in order in pipeline.py."""
