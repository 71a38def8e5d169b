"""The tensor file: a list of tensors passed between Python and the native runner.

Why a format of our own: the runner must take real inputs and hand back real outputs, in C++ with
nothing but the ExecuTorch runtime, and Python must read them without torch. ``.npy`` needs a
parser on the C++ side and has no bfloat16; this is the smallest self-describing layout both
sides can read and check in a few lines. All integers little-endian::

    b"SME2TNS1"  u32 count
    per tensor:  u32 dtype (ExecuTorch ScalarType code)  u32 ndim  i64 dims[ndim]
                 u64 nbytes  nbytes of contiguous (row-major) little-endian data

Numpy has no bfloat16: such tensors are arrays of :data:`BFLOAT16`, a one-field structured
dtype holding the raw 16 bits (``arr["bf16"]``), which round-trips without loss.
"""

from __future__ import annotations

import math
import struct
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from pytest_sme2.cache import write_atomic
from pytest_sme2.errors import RunnerError

MAGIC = b"SME2TNS1"

BFLOAT16 = np.dtype([("bf16", "<u2")])
"""Stand-in dtype for ExecuTorch ``BFloat16`` tensors (raw bits in field ``bf16``)."""

# ExecuTorch ScalarType codes (runtime/core/portable_type/scalar_type.h, executorch 1.5.1).
_CODE_TO_DTYPE: dict[int, np.dtype] = {
    0: np.dtype("<u1"),  # Byte
    1: np.dtype("<i1"),  # Char
    2: np.dtype("<i2"),  # Short
    3: np.dtype("<i4"),  # Int
    4: np.dtype("<i8"),  # Long
    5: np.dtype("<f2"),  # Half
    6: np.dtype("<f4"),  # Float
    7: np.dtype("<f8"),  # Double
    11: np.dtype("?"),  # Bool
    15: BFLOAT16,  # BFloat16
}
_DTYPE_TO_CODE = {dtype: code for code, dtype in _CODE_TO_DTYPE.items()}

_HEADER = struct.Struct("<8sI")
_TENSOR_HEAD = struct.Struct("<II")
_DIM = struct.Struct("<q")
_NBYTES = struct.Struct("<Q")


def scalar_type_code(dtype: np.dtype) -> int:
    """The ExecuTorch ScalarType code of a numpy dtype; RunnerError if it has none."""
    code = _DTYPE_TO_CODE.get(np.dtype(dtype).newbyteorder("<"))
    if code is None:
        supported = ", ".join(str(d) for d in _CODE_TO_DTYPE.values())
        raise RunnerError(f"dtype {dtype} has no ExecuTorch equivalent (supported: {supported})")
    return code


def encode_tensors(arrays: Sequence[np.ndarray]) -> bytes:
    """The tensor-file bytes of ``arrays`` (any layout and byte order; written contiguous LE)."""
    parts = [_HEADER.pack(MAGIC, len(arrays))]
    for array in arrays:
        code = scalar_type_code(array.dtype)
        data = np.ascontiguousarray(array, dtype=_CODE_TO_DTYPE[code]).tobytes()
        parts.append(_TENSOR_HEAD.pack(code, array.ndim))
        parts.extend(_DIM.pack(dim) for dim in array.shape)
        parts.append(_NBYTES.pack(len(data)))
        parts.append(data)
    return b"".join(parts)


def write_tensors(path: Path | str, arrays: Sequence[np.ndarray]) -> None:
    """Write ``arrays`` to ``path`` atomically (a reader never sees a partial file)."""
    write_atomic(Path(path), encode_tensors(arrays))


def read_tensors(path: Path | str) -> list[np.ndarray]:
    """Read every tensor of a tensor file; RunnerError naming the file if it is malformed."""
    path = Path(path)
    try:
        data = path.read_bytes()
    except OSError as err:
        raise RunnerError(f"{path}: cannot read tensor file: {err.strerror}") from err
    return decode_tensors(data, path)


def decode_tensors(data: bytes, path: Path | str = "<bytes>") -> list[np.ndarray]:
    """Parse tensor-file bytes; ``path`` only names the source in error messages."""
    buffer = bytearray(data)  # writable, so the arrays returned are too

    def take(layout: struct.Struct, offset: int, what: str) -> tuple:
        if offset + layout.size > len(buffer):
            raise RunnerError(
                f"{path}: tensor file truncated: {what} at byte {offset} runs past the end "
                f"({len(buffer)} bytes)"
            )
        return layout.unpack_from(buffer, offset)

    magic, count = take(_HEADER, 0, "the header")
    if magic != MAGIC:
        raise RunnerError(f"{path}: not a tensor file (magic {magic!r}, expected {MAGIC!r})")
    offset = _HEADER.size
    arrays: list[np.ndarray] = []
    for index in range(count):
        code, ndim = take(_TENSOR_HEAD, offset, f"tensor {index}'s header")
        offset += _TENSOR_HEAD.size
        dtype = _CODE_TO_DTYPE.get(code)
        if dtype is None:
            raise RunnerError(f"{path}: tensor {index} has unsupported ScalarType code {code}")
        shape = []
        for _ in range(ndim):
            (dim,) = take(_DIM, offset, f"tensor {index}'s dimensions")
            offset += _DIM.size
            if dim < 0:
                raise RunnerError(f"{path}: tensor {index} has a negative dimension {dim}")
            shape.append(dim)
        (nbytes,) = take(_NBYTES, offset, f"tensor {index}'s byte count")
        offset += _NBYTES.size
        expected = math.prod(shape) * dtype.itemsize
        if nbytes != expected:
            raise RunnerError(
                f"{path}: tensor {index} declares {nbytes} bytes, but shape {tuple(shape)} "
                f"of {dtype} needs {expected}"
            )
        if offset + nbytes > len(buffer):
            raise RunnerError(
                f"{path}: tensor file truncated: tensor {index}'s data needs {nbytes} bytes at "
                f"byte {offset}, only {len(buffer) - offset} left"
            )
        array = np.frombuffer(buffer, dtype=dtype, count=math.prod(shape), offset=offset)
        arrays.append(array.reshape(shape))
        offset += nbytes
    if offset != len(buffer):
        raise RunnerError(
            f"{path}: {len(buffer) - offset} trailing bytes after the last of {count} tensors"
        )
    return arrays
