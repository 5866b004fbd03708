"""What is decided before any circuit is elaborated: pure functions of the compiled graph
and the options.

    schedule.py  the register schedule (latency / fmax / area) and its per-family defaults
    reuse.py     the reuse plan: Dense node -> reuse factor
    fold.py      the geometry of a time-shared Dense (lanes, steps, coefficients)
    size.py      the circuit's size limits, checked before elaboration
    cmvm.py      constant-matrix-vector products as shared adder graphs (strategy "da")
"""
