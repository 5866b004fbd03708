"""Number types of the compiled graph.

Every tensor carries one of these. `FixedType` is the numeric contract shared by the golden
model, the CUDA kernels and the circuits (see DESIGN.md, "Numbers"): value = code * 2**-frac.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import StrEnum


class Rounding(StrEnum):
    """How bits below the new binary point are dropped."""

    TRN = "TRN"  # toward -inf (floor): free in hardware, the default
    RND = "RND"  # half up (floor(x + 1/2))
    RND_CONV = "RND_CONV"  # half to even: QONNX's ROUND, numpy's round


class Overflow(StrEnum):
    SAT = "SAT"  # clamp to the type's range
    WRAP = "WRAP"  # keep the low W bits (two's complement wrap)


class TypeError_(ValueError):
    """A malformed type string or an impossible type (user input, exit 2)."""


@dataclass(frozen=True, order=True)
class FixedType:
    """fixed<W,I> (signed) or ufixed<W,I>: W bits, I integer bits (sign included when signed).

    I may be negative or larger than W. `narrow` drops one end code as QONNX's narrow_range:
    the most negative code of a signed type, the most positive of an unsigned one.
    """

    width: int
    int_bits: int
    signed: bool = True
    rounding: Rounding = Rounding.TRN
    overflow: Overflow = Overflow.SAT
    narrow: bool = False

    def __post_init__(self) -> None:
        if not isinstance(self.width, int) or self.width < 1:
            raise TypeError_(f"fixed-point width must be a positive integer, got {self.width!r}")
        if self.width > 64:
            raise TypeError_(f"fixed-point width {self.width} is over 64 bits")
        if self.signed and self.width < 2 and self.narrow:
            raise TypeError_("a narrow signed type needs at least 2 bits")

    @property
    def frac(self) -> int:
        return self.width - self.int_bits

    @property
    def qmin(self) -> int:
        if not self.signed:
            return 0
        return -(1 << (self.width - 1)) + (1 if self.narrow else 0)

    @property
    def qmax(self) -> int:
        # QONNX narrow: signed drops the most negative code, unsigned the most positive
        top = (1 << (self.width - (1 if self.signed else 0))) - 1
        return top - (1 if self.narrow and not self.signed else 0)

    @property
    def lsb(self) -> float:
        return 2.0 ** -self.frac

    @property
    def is_float(self) -> bool:
        return False

    def with_(self, **changes: object) -> FixedType:
        from dataclasses import replace

        return replace(self, **changes)

    def __str__(self) -> str:
        base = f"{'fixed' if self.signed else 'ufixed'}<{self.width},{self.int_bits}"
        extra = []
        if self.rounding != Rounding.TRN or self.overflow != Overflow.SAT or self.narrow:
            extra = [self.rounding.value, self.overflow.value]
        if self.narrow:
            extra.append("NARROW")
        return base + "".join("," + e for e in extra) + ">"

    def to_json(self) -> str:
        return str(self)


@dataclass(frozen=True, order=True)
class FloatType:
    """IEEE float32: the GPU's float mode, compared with onnxruntime within a tolerance."""

    name: str = "float32"

    @property
    def is_float(self) -> bool:
        return True

    def __str__(self) -> str:
        return self.name

    def to_json(self) -> str:
        return self.name


NumType = FixedType | FloatType
FLOAT32 = FloatType()

_FIXED_RE = re.compile(
    r"^\s*(u?fixed|ap_u?fixed)\s*<\s*(\d+)\s*,\s*(-?\d+)\s*((?:,\s*[A-Za-z_]+\s*)*)>\s*$"
)


def parse_type(text: str) -> NumType:
    """Parse `fixed<16,6>`, `ufixed<8,0,RND_CONV,WRAP>`, `ap_fixed<16,6>` or `float32`."""
    s = str(text).strip()
    if s in ("float32", "float"):
        return FLOAT32
    m = _FIXED_RE.match(s)
    if not m:
        raise TypeError_(
            f"malformed precision {text!r}: expected fixed<W,I>, ufixed<W,I> "
            "(optionally with ,RND|RND_CONV|TRN and ,SAT|WRAP) or float32"
        )
    kind, w, i, rest = m.groups()
    rounding, overflow, narrow = Rounding.TRN, Overflow.SAT, False
    for word in [p.strip().upper() for p in rest.split(",") if p.strip()]:
        if word in Rounding.__members__:
            rounding = Rounding(word)
        elif word in Overflow.__members__:
            overflow = Overflow(word)
        elif word == "NARROW":
            narrow = True
        else:
            raise TypeError_(f"malformed precision {text!r}: unknown mode {word!r}")
    return FixedType(int(w), int(i), not kind.replace("ap_", "").startswith("u"),
                     rounding, overflow, narrow)


def type_for_range(lo: int, hi: int, frac: int) -> FixedType:
    """Smallest exact type holding every code in [lo, hi] at `frac` fractional bits.

    Used for accumulators: the range is computed from the constant weights and input types,
    never guessed.
    """
    signed = lo < 0
    for width in range(2 if signed else 1, 65):
        t = FixedType(width, width - frac, signed)
        if t.qmin <= lo and hi <= t.qmax:
            return t
    raise TypeError_(f"a value range [{lo}, {hi}] needs more than 64 bits")
