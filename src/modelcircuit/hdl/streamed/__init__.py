"""The streamed model style: one pixel (all channels) per handshake, for spatial models.

    lower.py  graph -> streaming design: the table by op and the walk over the graph
    lower_ops.py      the per-op functions of that table (the stream units of each op)
    lower_context.py  the design being built, as the walk and those functions share it
    units.py  the stream units and their flow control
    dense.py  the Dense parts of a streamed model (Flatten->Dense, conv weights)
    top.py    the streamed design, its compile-time schedule and the top-level component
"""
