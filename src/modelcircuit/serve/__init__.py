"""`modelcircuit serve`: compiled artifacts behind HTTP (optional extra [serve]).

Layout: `cli.py` (arguments; imports nothing of the extra until run), `models.py` (an
artifact checked against its manifest and turned into a served model: primary backend,
golden fallback, self-check), `engines.py` (the primary backends, prepared once),
`bodies.py` (request bodies in, answers out; no web framework), `batching.py` (micro-batches
into the compile-time buckets), `metrics.py` (Prometheus, one registry per app) and `app.py`
(the Starlette routes and a server runner). Only `app.py` and `cli.run` import the extra.
"""
