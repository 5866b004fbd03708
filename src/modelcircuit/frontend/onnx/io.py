"""Reading an untrusted ONNX file and its tensors: the importer's lowest layer.

Names from the model are printed through `show` and `q` (one printable line); paths through
`userio.shown`. Files are read through `userio.regular_file` (regular files only, checked
before they are opened) and tensors are decoded only after their declared dims, dtype and
data length agree and are within `limits`. External tensor data must lie in the model's
folder. Every refusal is a GraphError; one for an unsupported dtype is `Unsupported`.
"""

from __future__ import annotations

import math
import os
import stat
import sys
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from ...graphs import limits
from ...graphs.ir import GraphError
from ...util.userio import regular_file, shown

# the domain QONNX gives its channels-last Conv/MaxPool (frontend/onnx/channels.py)
CHANNELS_LAST = "qonnx.custom_op.channels_last"


class Unsupported(GraphError):
    """A refusal because of a dtype or an attribute value the golden model does not support.

    `kind` is "dtype" or "attribute"; `what` names the dtype or the attribute, and the
    message says it (the conformance table counts only these refusals as excused)."""

    def __init__(self, message: str, kind: str, what: str) -> None:
        super().__init__(message)
        self.kind, self.what = kind, what


# -- printing names from an untrusted file --------------------------------------------------


def _text(s: Any) -> str:
    """protobuf gives bytes for a string field that is not valid UTF-8: escape them."""
    return s.decode("utf-8", "backslashreplace") if isinstance(s, bytes) else str(s)


def show(s: Any, limit: int = 80) -> str:
    """A name from the model as it can be printed on one line: as it is when plain, else its
    repr (escapes); very long names are cut."""
    s = _text(s)
    if len(s) > limit:
        s = s[:limit - 3] + "..."
    return s if s and s.isprintable() else repr(s)


def node_name(n: Any, quote: Any = show) -> str:
    """How a message names an ONNX node: its name, or (many exporters and onnx.helper leave
    it empty) "that writes" its first output."""
    if n.name:
        return quote(n.name)
    return f"that writes {quote(n.output[0])}" if len(n.output) else "(unnamed)"


def q(s: Any) -> str:
    """A tensor name, quoted (as the messages have always quoted them)."""
    s = _text(s)
    return repr(s if len(s) <= 80 else s[:77] + "...")


def dtype_name(dt: int) -> str:
    try:
        return TensorProto.DataType.Name(dt)
    except ValueError:
        return f"unknown dtype {dt}"


def attr_type_name(t: int) -> str:
    try:
        return onnx.AttributeProto.AttributeType.Name(t)
    except ValueError:
        return f"unknown type {t}"


def graph_name(p: str | bytes) -> str:
    """The graph's name: the model file's name without its extension, printable."""
    name = os.path.splitext(os.path.basename(os.fsdecode(p)))[0]
    if not (name.isprintable() and name.encode("utf-8", "surrogatepass").decode("utf-8", "replace")
            == name):
        name = "".join(c if c.isprintable() and not 0xD800 <= ord(c) <= 0xDFFF else "_"
                       for c in name)
    return name or "model"


# -- reading files --------------------------------------------------------------------------


def _gib(n: int) -> str:
    return f"{n / 1024**3:.1f} GiB" if n >= 1024**3 else f"{n:,} bytes"


def read_regular_file(path: str | bytes, what: str, offset: int = 0,
                      length: int | None = None) -> bytes:
    """The bytes of a regular file: all of it (a model: not empty, at most
    limits.MAX_MODEL_BYTES), or `length` bytes at `offset`. FIFOs, devices, sockets and
    directories are refused before they are opened (opening a FIFO would wait for a writer;
    /dev/zero never ends)."""
    p = os.fsdecode(path)
    size = regular_file(p, what, sys.maxsize)
    if length is None:
        if size == 0:
            raise GraphError(f"{what} {shown(p)} is empty (0 bytes), not an ONNX model")
        if size > limits.MAX_MODEL_BYTES:
            raise GraphError(f"{what} {shown(p)} is {_gib(size)}, over the limit "
                             f"MAX_MODEL_BYTES = {limits.MAX_MODEL_BYTES} bytes "
                             f"({_gib(limits.MAX_MODEL_BYTES)}, protobuf's own limit)")
        length = size
    elif offset + length > size:
        raise GraphError(f"{what} {shown(p)} holds {size} bytes; {length} bytes at "
                         f"offset {offset} are past its end")
    return _read_range(p, what, offset, length)


def _read_range(p: str, what: str, offset: int, length: int) -> bytes:
    """`length` bytes at `offset`, opened without blocking and checked again once open."""
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0) \
        | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(p, flags)
    except OSError as e:
        raise GraphError(f"{what} {shown(p)}: cannot read ({e.strerror or e})") from None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise GraphError(f"{what} {shown(p)} is not a regular file (it was replaced "
                             "while being opened)")
        buf = bytearray(length)
        view = memoryview(buf)
        got = 0
        while got < length:
            n = os.preadv(fd, [view[got:got + (1 << 24)]], offset + got)
            if n <= 0:
                raise GraphError(f"{what} {shown(p)} ended after {got} of {length} bytes "
                                 "(it changed while being read)")
            got += n
        return bytes(buf)
    except OSError as e:
        raise GraphError(f"{what} {shown(p)}: cannot read ({e.strerror or e})") from None
    finally:
        os.close(fd)


# -- tensors --------------------------------------------------------------------------------

# constant dtypes the importer reads, and the TensorProto field that holds their values
DATA_FIELD = {
    TensorProto.FLOAT: "float_data", TensorProto.DOUBLE: "double_data",
    TensorProto.FLOAT16: "int32_data", TensorProto.BOOL: "int32_data",
    TensorProto.INT8: "int32_data", TensorProto.INT16: "int32_data",
    TensorProto.INT32: "int32_data", TensorProto.UINT8: "int32_data",
    TensorProto.UINT16: "int32_data", TensorProto.INT64: "int64_data",
    TensorProto.UINT32: "uint64_data", TensorProto.UINT64: "uint64_data",
}


def declared_elements(t: onnx.TensorProto, where: str) -> int:
    """The element count a TensorProto's dims declare, within the limits."""
    dims = list(t.dims)
    if len(dims) > limits.MAX_RANK:
        raise GraphError(f"{where} has rank {len(dims)}, over the limit MAX_RANK = "
                         f"{limits.MAX_RANK}")
    if any(d < 0 for d in dims):
        raise GraphError(f"{where} has a negative dimension: dims {dims}")
    n = math.prod(dims)
    if n > limits.MAX_TENSOR_ELEMENTS:
        raise GraphError(f"{where} declares dims {dims} = {n:,} elements, over the limit "
                         f"MAX_TENSOR_ELEMENTS = {limits.MAX_TENSOR_ELEMENTS}")
    return n


def tensor_value(t: onnx.TensorProto, where: str, base_dir: str | bytes | None = None
                 ) -> np.ndarray:
    """A TensorProto as an array, after checking its dtype, dims and data length.
    `base_dir`: the model's folder, where external data is looked for (None: refused)."""
    dt = t.data_type
    if dt not in DATA_FIELD:
        name = dtype_name(dt)
        raise Unsupported(f"{where} has dtype {name}; supported constant dtypes: "
                          + ", ".join(dtype_name(d) for d in DATA_FIELD), "dtype", name)
    n = declared_elements(t, where)
    itemsize = helper.tensor_dtype_to_np_dtype(dt).itemsize
    if t.HasField("segment"):
        raise GraphError(f"{where} is a segment of a tensor; segmented tensors are not "
                         "supported")
    if t.data_location not in (TensorProto.DEFAULT, TensorProto.EXTERNAL):
        raise GraphError(f"{where} has an unknown data_location {t.data_location}")
    if t.data_location == TensorProto.EXTERNAL:
        t2 = TensorProto()
        t2.data_type = dt
        t2.dims.extend(t.dims)
        t2.raw_data = external_data(t, n * itemsize, where, base_dir)
        t = t2
    elif t.HasField("raw_data"):
        have = len(t.raw_data)
        if have != n * itemsize:
            raise GraphError(f"{where} has {have} bytes of raw_data, but its dims "
                             f"{list(t.dims)} of {dtype_name(dt)} need {n * itemsize}")
    else:
        have = len(getattr(t, DATA_FIELD[dt]))
        if have != n:
            raise GraphError(f"{where} holds {have} values, but its dims {list(t.dims)} "
                             f"need {n}")
    try:
        return numpy_helper.to_array(t)
    except Exception as e:
        raise GraphError(f"{where} cannot be read: {str(e).splitlines()[0] if str(e) else ''}"
                         ) from None


def external_data(t: onnx.TensorProto, nbytes: int, where: str,
                  base_dir: str | bytes | None) -> bytes:
    """Data in a file beside the model: a relative path inside the model's folder, a
    regular file, exactly the bytes the dims need."""
    if base_dir is None:
        raise GraphError(f"{where} keeps its data in an external file; load the model "
                         "from its file (load_onnx) so that the file can be found")
    kv = _external_entries(t, where)
    full = _external_path(kv.get("location", ""), base_dir, where)
    try:
        offset = int(kv.get("offset", "0"))
        length = int(kv["length"]) if "length" in kv else nbytes
    except ValueError:
        raise GraphError(f"{where}: external data offset/length are not integers: "
                         f"{q(kv.get('offset', ''))}, {q(kv.get('length', ''))}") from None
    if offset < 0 or length != nbytes:
        raise GraphError(f"{where}: external data of {length} bytes at offset {offset} "
                         f"does not fit its dims {list(t.dims)} ({nbytes} bytes)")
    return read_regular_file(full, f"external data file of {where}", offset, nbytes)


def _external_entries(t: onnx.TensorProto, where: str) -> dict[str, str]:
    kv: dict[str, str] = {}
    for e in t.external_data:
        if not isinstance(e.key, str) or not isinstance(e.value, str):
            raise GraphError(f"{where}: an external_data entry is not valid UTF-8")
        if e.key in kv:
            raise GraphError(f"{where}: external_data lists {q(e.key)} twice")
        kv[e.key] = e.value
    return kv


def _external_path(loc: str, base_dir: str | bytes, where: str) -> str:
    """The external data file's real path, refused unless inside the model's folder."""
    if not loc:
        raise GraphError(f"{where} keeps its data in an external file but names none "
                         "(no 'location')")
    if "\x00" in loc or os.path.isabs(loc):
        raise GraphError(f"{where}: external data location {q(loc)} must be a path "
                         "relative to the model's folder")
    base = os.path.realpath(os.fsdecode(base_dir))
    full = os.path.realpath(os.path.join(base, loc))
    if os.path.commonpath([base, full]) != base:
        raise GraphError(f"{where}: external data location {q(loc)} points outside the "
                         f"model's folder {shown(base)}")
    return full
