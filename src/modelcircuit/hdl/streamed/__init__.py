"""The streamed model style: one pixel (all channels) per handshake, for spatial models.

    lower.py  graph -> streaming design (the stream units of each op)
    units.py  the stream units and their flow control
    dense.py  the Dense parts of a streamed model (Flatten->Dense, conv weights)
    top.py    the streamed design, its compile-time schedule and the top-level component
"""
