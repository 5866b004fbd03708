"""The vector model style: the whole input vector per handshake.

    lower.py  the lowering table (Op -> unit) and its REFUSED twin
    top.py    the model as one wiring.Component with an input and an output stream
"""
