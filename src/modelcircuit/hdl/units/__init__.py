"""One circuit family per file: the units every model style instantiates.

    base.py         Unit, the base class (ports, latency, the clock enable)
    arith.py        fixed-point arithmetic as Amaranth expressions (the numeric contract)
    dense.py        Dense: the numbers, the factory, requantization, the folded circuit
    dense_r1.py     the R = 1 circuits: products (DenseParallel) or adder graph (DenseGraph)
    dense_fold.py   the stages of a folded Dense
    netlist_text.py R = 1 Dense cores written as Verilog/RTLIL text
    elementwise.py  element-wise ops, lookup tables, the parallel Softmax, wiring
    softmax.py      the serial Softmax and the rule that picks it
    threshold.py    MultiThreshold on a vector: the sum, a table of every code, or a search
"""

from . import dense_r1  # noqa: F401 - registers the R = 1 Dense circuits with Dense
