"""Generated text comes from Jinja2 templates under `modelcircuit/templates/<folder>/`: one
environment per folder, StrictUndefined (a missing value is an error, never an empty
string). Code (CUDA, yosys scripts) keeps its whitespace exactly as written in the template;
HTML pages are autoescaped."""

from __future__ import annotations

from functools import cache
from typing import Any


@cache
def environment(folder: str, html: bool = False) -> Any:
    import jinja2

    if html:
        return jinja2.Environment(loader=jinja2.PackageLoader("modelcircuit", f"templates/{folder}"),
                                  undefined=jinja2.StrictUndefined, autoescape=True)
    return jinja2.Environment(
        loader=jinja2.PackageLoader("modelcircuit", f"templates/{folder}"),
        undefined=jinja2.StrictUndefined, trim_blocks=True, lstrip_blocks=True,
        keep_trailing_newline=True, autoescape=False)


def render(folder: str, template: str, **ctx: Any) -> str:
    """templates/<folder>/<template> rendered with ctx."""
    return environment(folder).get_template(template).render(**ctx)
