"""The tensor file shared by Python and the native runner: layout, round trips, and bad files."""

from __future__ import annotations

import struct
from pathlib import Path

import numpy as np
import pytest

from pytest_sme2.errors import RunnerError
from pytest_sme2.runner.tensors import (
    BFLOAT16,
    decode_tensors,
    encode_tensors,
    read_tensors,
    scalar_type_code,
    write_tensors,
)

# dtype -> ExecuTorch ScalarType code, from runtime/core/portable_type/scalar_type.h (1.5.1)
SCALAR_TYPES = {
    np.uint8: 0,
    np.int8: 1,
    np.int16: 2,
    np.int32: 3,
    np.int64: 4,
    np.float16: 5,
    np.float32: 6,
    np.float64: 7,
    np.bool_: 11,
}


def _sample(dtype: type, shape: tuple[int, ...]) -> np.ndarray:
    rng = np.random.default_rng(7)
    if dtype is np.bool_:
        return rng.integers(0, 2, size=shape).astype(np.bool_)
    if np.issubdtype(dtype, np.integer):
        info = np.iinfo(dtype)
        return rng.integers(info.min, info.max, size=shape, dtype=dtype, endpoint=True)
    return rng.standard_normal(shape).astype(dtype)


@pytest.mark.parametrize("dtype", list(SCALAR_TYPES), ids=lambda d: np.dtype(d).name)
def test_round_trip_each_dtype(tmp_path: Path, dtype: type) -> None:
    arrays = [_sample(dtype, (2, 3, 4)), _sample(dtype, ()), _sample(dtype, (0, 5))]
    path = tmp_path / "t.tensors"
    write_tensors(path, arrays)
    back = read_tensors(path)
    assert len(back) == len(arrays)
    for original, read in zip(arrays, back, strict=True):
        assert read.dtype == original.dtype
        assert read.shape == original.shape
        np.testing.assert_array_equal(read, original)
        assert scalar_type_code(read.dtype) == SCALAR_TYPES[dtype]


def test_bfloat16_round_trips_as_raw_bits(tmp_path: Path) -> None:
    bits = np.array([0x3F80, 0xC000, 0x7F80], dtype="<u2")  # 1.0, -2.0, +inf
    array = np.zeros(3, dtype=BFLOAT16)
    array["bf16"] = bits
    write_tensors(tmp_path / "b.tensors", [array])
    (back,) = read_tensors(tmp_path / "b.tensors")
    assert back.dtype == BFLOAT16
    assert scalar_type_code(back.dtype) == 15
    np.testing.assert_array_equal(back["bf16"], bits)


def test_layout_is_the_documented_one() -> None:
    """The exact bytes the C++ runner parses: magic, count, code, ndim, dims, nbytes, data."""
    data = np.array([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]], dtype=np.float32)
    expected = (
        b"SME2TNS1"
        + struct.pack("<I", 1)
        + struct.pack("<II", 6, 2)
        + struct.pack("<qq", 2, 3)
        + struct.pack("<Q", 24)
        + data.tobytes()
    )
    assert encode_tensors([data]) == expected
    np.testing.assert_array_equal(decode_tensors(expected)[0], data)


def test_written_contiguous_little_endian_whatever_the_input_layout(tmp_path: Path) -> None:
    base = np.arange(24, dtype=">i4").reshape(4, 6)  # big-endian, and then transposed
    view = base.T
    write_tensors(tmp_path / "v.tensors", [view])
    (back,) = read_tensors(tmp_path / "v.tensors")
    np.testing.assert_array_equal(back, view)
    raw = (tmp_path / "v.tensors").read_bytes()
    assert raw.endswith(np.ascontiguousarray(view, dtype="<i4").tobytes())


def test_read_arrays_are_writable(tmp_path: Path) -> None:
    write_tensors(tmp_path / "w.tensors", [np.ones(4, np.float32)])
    (back,) = read_tensors(tmp_path / "w.tensors")
    back[0] = 5.0
    assert back[0] == 5.0


def test_every_truncation_is_an_error_naming_the_file(tmp_path: Path) -> None:
    full = encode_tensors([np.ones((2, 2), np.float32), np.arange(3, dtype=np.int64)])
    path = tmp_path / "cut.tensors"
    for length in range(len(full)):
        path.write_bytes(full[:length])
        with pytest.raises(RunnerError, match=r"cut\.tensors") as info:
            read_tensors(path)
        assert "truncated" in str(info.value) or "not a tensor file" in str(info.value)


def test_bad_magic(tmp_path: Path) -> None:
    path = tmp_path / "x.tensors"
    path.write_bytes(b"NOTMAGIC" + b"\0" * 8)
    with pytest.raises(RunnerError, match="not a tensor file"):
        read_tensors(path)


def test_trailing_bytes(tmp_path: Path) -> None:
    path = tmp_path / "x.tensors"
    path.write_bytes(encode_tensors([np.zeros(2, np.float32)]) + b"\0")
    with pytest.raises(RunnerError, match="1 trailing bytes"):
        read_tensors(path)


def test_byte_count_must_match_shape(tmp_path: Path) -> None:
    blob = bytearray(encode_tensors([np.zeros(4, np.float32)]))
    nbytes_at = 8 + 4 + 8 + 8  # header, code+ndim, one dim
    struct.pack_into("<Q", blob, nbytes_at, 12)
    path = tmp_path / "x.tensors"
    path.write_bytes(bytes(blob[:-4]))
    with pytest.raises(RunnerError, match="declares 12 bytes"):
        read_tensors(path)


def test_unknown_scalar_type_code(tmp_path: Path) -> None:
    blob = bytearray(encode_tensors([np.zeros(1, np.float32)]))
    struct.pack_into("<I", blob, 12, 9)  # ComplexFloat: not representable here
    path = tmp_path / "x.tensors"
    path.write_bytes(bytes(blob))
    with pytest.raises(RunnerError, match="unsupported ScalarType code 9"):
        read_tensors(path)


def test_unsupported_numpy_dtype_on_write(tmp_path: Path) -> None:
    with pytest.raises(RunnerError, match="complex64 has no ExecuTorch equivalent"):
        write_tensors(tmp_path / "c.tensors", [np.zeros(2, np.complex64)])
    assert not (tmp_path / "c.tensors").exists()


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(RunnerError, match=r"missing\.tensors: cannot read"):
        read_tensors(tmp_path / "missing.tensors")
