"""The edges where user files and options come in: numpy arrays (`--inputs`, `--calibrate`),
model and report paths (per-layer precision files: graphs/precision_file.py). Everything is checked
here, against explicit limits, before anything is allocated or written, so that every
refusal is one GraphError naming the option and the file (the CLI prints it, exit 2).
Lives in util/ (imports nothing of the project) so that every layer can use it.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import BinaryIO

import numpy as np

from .atomic import write_file
from .errors import GraphError

MAX_ARRAY_BYTES = 1 << 30          # --inputs / --calibrate files
FLOAT32_MAX = float(np.finfo(np.float32).max)


def shown(path: str | os.PathLike[str]) -> str:
    """A path as text that always prints, whole, on one line: undecodable bytes as \\udcNN,
    control characters escaped (\\x1b, \\n)."""
    s = os.fsdecode(path)
    if not s:
        return '""'
    t = s.encode("utf-8", "backslashreplace").decode("utf-8")
    return "".join(c if c.isprintable() else c.encode("unicode_escape").decode("ascii") for c in t)


def regular_file(path: str | os.PathLike[str], what: str, limit: int) -> int:
    """Refuse anything but a readable regular file within `limit` bytes (a FIFO, a device
    such as /dev/zero, a directory would hang or grow without bound). Returns its size.
    The one check of every file read from the user: models and their external data
    (onnx_io.read_regular_file), arrays, precision files, artifacts."""
    p = os.fspath(path)
    if p == "" or p == b"":
        raise GraphError(f"{what}: empty path")
    try:
        st = os.stat(p)
    except FileNotFoundError:
        raise GraphError(f"{what} {shown(p)}: not found (no such file)") from None
    except (OSError, ValueError) as e:
        raise GraphError(f"{what} {shown(p)}: cannot read ({getattr(e, 'strerror', None) or e})") from None
    if stat.S_ISDIR(st.st_mode):
        raise GraphError(f"{what} {shown(p)} is a directory, not a file")
    if not stat.S_ISREG(st.st_mode):
        kinds = ((stat.S_ISFIFO, "a FIFO (named pipe)"), (stat.S_ISCHR, "a character device"),
                 (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"))
        kind = next((k for f, k in kinds if f(st.st_mode)), "a special file")
        raise GraphError(f"{what} {shown(p)} is not a regular file; it is {kind}")
    if st.st_size > limit:
        raise GraphError(f"{what} {shown(p)} is {st.st_size:,} bytes, over the limit of "
                         f"{limit:,} bytes")
    if not os.access(p, os.R_OK):
        raise GraphError(f"{what} {shown(p)}: permission denied")
    return st.st_size


def read_npy_header(f: BinaryIO) -> tuple[tuple[int, ...], bool, np.dtype]:
    """(shape, fortran order, dtype) of a .npy stream, read without touching the data: what
    is checked before anything is allocated. ValueError on a malformed header."""
    version = np.lib.format.read_magic(f)
    if version == (1, 0):
        return np.lib.format.read_array_header_1_0(f)
    if version in ((2, 0), (3, 0)):
        return np.lib.format.read_array_header_2_0(f)
    raise ValueError(f"unknown .npy version {version}")


def load_array(path: str | os.PathLike[str], what: str = "--inputs") -> np.ndarray:
    """A numeric .npy array: header checked against the file size before loading (a header
    declaring 10^15 elements allocates nothing), then dtype, emptiness, NaN/Inf and the
    float32 range (the models compute in float32)."""
    size = regular_file(path, what, MAX_ARRAY_BYTES)
    p = os.fspath(path)
    try:
        with open(p, "rb") as f:
            shape, fortran, dtype = read_npy_header(f)
            offset = f.tell()
    except Exception as e:  # noqa: BLE001 - any malformed header is the user's file
        raise GraphError(f"{what} {shown(p)}: not a readable .npy file "
                         f"({str(e).splitlines()[0] if str(e) else type(e).__name__})") from None
    if dtype.hasobject or dtype.kind not in "fiu":
        raise GraphError(f"{what} {shown(p)}: expected a numeric (float or integer) array, got "
                         f"dtype {dtype}")
    n = 1
    for d in shape:
        n *= int(d)
    if n * dtype.itemsize != size - offset:
        raise GraphError(f"{what} {shown(p)}: header declares shape {list(shape)} ({n:,} values) "
                         f"but the file holds {size - offset:,} bytes of data (truncated or "
                         "corrupt)")
    try:
        x = np.load(p, allow_pickle=False)
    except Exception as e:  # noqa: BLE001
        raise GraphError(f"{what} {shown(p)}: not a readable .npy file ({type(e).__name__})") from None
    return check_array(x, f"{what} {shown(p)}")


def check_array(x: np.ndarray, where: str) -> np.ndarray:
    """Numeric, at least one sample, finite, within float32's range."""
    if not isinstance(x, np.ndarray) or x.dtype.kind not in "fiu":
        raise GraphError(f"{where}: expected a numeric array, got "
                         f"{getattr(x, 'dtype', type(x).__name__)}")
    if x.ndim == 0:
        raise GraphError(f"{where}: expected an array of samples, got a scalar")
    if x.size == 0:
        raise GraphError(f"{where}: holds no values (shape {list(x.shape)})")
    if x.dtype.kind == "f" and not np.all(np.isfinite(x)):
        bad = int(np.count_nonzero(~np.isfinite(x)))
        raise GraphError(f"{where}: {bad} value(s) are NaN or Inf")
    m = float(np.max(np.abs(x.astype(np.float64))))
    if m > FLOAT32_MAX:
        raise GraphError(f"{where}: values up to {m:.3g} are beyond float32's range "
                         f"(±{FLOAT32_MAX:.3g}); the model computes in float32")
    return x


def check_output_file(path: str | os.PathLike[str], what: str) -> Path:
    """A file we are about to write (`--json`, `--html`): not a directory, parent exists and is
    a writable directory. Checked before the work, so a typo costs nothing."""
    p = os.fspath(path)
    if p == "":
        raise GraphError(f"{what}: empty path")
    if "\0" in p:
        raise GraphError(f"{what} {shown(p)!r}: contains a NUL byte")
    if os.path.isdir(p):
        raise GraphError(f"{what} {shown(p)} is a directory; give a file name")
    if os.path.lexists(p) and not os.path.isfile(p):
        raise GraphError(f"{what} {shown(p)} exists and is not a regular file")
    parent = os.path.dirname(os.path.abspath(p))
    if not os.path.isdir(parent):
        what_is = "is not a directory" if os.path.lexists(parent) else "does not exist"
        raise GraphError(f"{what} {shown(p)}: folder {shown(parent)} {what_is}")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise GraphError(f"{what} {shown(p)}: cannot write in {shown(parent)} (permission denied)")
    return Path(p)


def write_text_atomic(path: str | os.PathLike[str], text: str, what: str) -> None:
    """Write a report file whole or not at all (temp file beside it, then rename)."""
    p = check_output_file(path, what)
    try:
        write_file(p, text)
    except OSError as e:
        raise GraphError(f"{what} {shown(p)}: {e.strerror or e}") from None


def one_line(msg: object) -> str:
    """The first line of a message, with every other control or line-breaking character
    (user text may hold \\r, \\x85, \\u2028, undecodable bytes) escaped so it prints as one:
    the CLI's `error:` lines and the sweep's failure records both come from here."""
    line = str(msg).split("\n", 1)[0].strip()
    out = []
    for ch in line:
        if ch == " " or (ch.isprintable() and ch not in "\x85\u2028\u2029"):
            out.append(ch)
        else:
            out.append(ch.encode("unicode_escape").decode("ascii"))
    return "".join(out).encode("utf-8", "backslashreplace").decode("utf-8")
