"""Utilities that know nothing of models: imports nothing of the project.

    errors.py      GraphError, the one user-facing error (exit 2); graphs.ir re-exports it
    atomic.py      output folders written whole or not at all (temp dir + rename)
    userio.py      user files and paths checked against limits; one-line messages
    templating.py  the Jinja2 environments (StrictUndefined) of templates/
"""
