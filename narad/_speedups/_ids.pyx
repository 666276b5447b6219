# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""Compiled twins of narad.streams.ids.parse_all_strict, pack_all and unpack_all:
the same answers and the same errors. The pure-Python functions are the reference;
read their docstrings first."""

from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize, PyBytes_GET_SIZE
from libc.stdint cimport uint64_t
from cpython.long cimport PyLong_AsUnsignedLongLongMask


cdef extern from "Python.h":
    # int.from_bytes's own constructor: the 128-bit ID made in one allocation, where
    # `ms << 64 | seq` makes four ints.
    object _PyLong_FromByteArray(const unsigned char* data, size_t n, int little_endian, int is_signed)

cdef uint64_t U64_MAX = 0xFFFFFFFFFFFFFFFF


cdef inline bint read_u64(const char* p, Py_ssize_t n, uint64_t* out) noexcept nogil:
    """ASCII digits only (at least one), value at most 2^64-1: bytes.isdigit + int."""
    cdef uint64_t value = 0, digit
    cdef Py_ssize_t i
    if n <= 0:
        return False
    for i in range(n):
        if p[i] < 48 or p[i] > 57:
            return False
        digit = <uint64_t>(p[i] - 48)
        if value > (U64_MAX - digit) // 10:
            return False
        value = value * 10 + digit
    out[0] = value
    return True


cdef inline void put_u64_be(char* p, uint64_t value) noexcept nogil:
    cdef int i
    for i in range(8):
        p[7 - i] = <char>(value & 0xFF)
        value >>= 8


cdef inline object make_id(uint64_t ms, uint64_t seq):
    """`ms << 64 | seq` as one new int."""
    cdef unsigned char raw[16]
    put_u64_be(<char*>raw, ms)
    put_u64_be(<char*>raw + 8, seq)
    return _PyLong_FromByteArray(raw, 16, 0, 0)


cdef inline uint64_t get_u64_be(const unsigned char* p) noexcept nogil:
    cdef uint64_t value = 0
    cdef int i
    for i in range(8):
        value = (value << 8) | p[i]
    return value


def parse_all_strict(list args):
    cdef list out = []
    cdef const char* p
    cdef Py_ssize_t n, dash, i
    cdef uint64_t ms, seq
    parse = None
    for arg in args:
        if type(arg) is bytes:
            p = PyBytes_AS_STRING(arg)
            n = PyBytes_GET_SIZE(arg)
            dash = -1
            for i in range(n):
                if p[i] == 45:  # '-'
                    dash = i
                    break
            if dash >= 0 and read_u64(p, dash, &ms) and read_u64(p + dash + 1, n - dash - 1, &seq):
                out.append(make_id(ms, seq))
                continue
        if parse is None:  # any other spelling: the reference rules and errors
            from narad.streams.ids import parse
        out.append(parse(arg, strict=True))
    return out


def pack_all(sids):
    cdef list items = sids if type(sids) is list else list(sids)
    cdef Py_ssize_t n = len(items), i
    cdef bytes out = PyBytes_FromStringAndSize(NULL, n * 16)
    cdef char* p = PyBytes_AS_STRING(out)
    cdef uint64_t high, low
    for i in range(n):
        sid = items[i]
        high = sid >> 64  # OverflowError past 128 bits or below 0, as int.to_bytes
        low = PyLong_AsUnsignedLongLongMask(sid)
        put_u64_be(p + 16 * i, high)
        put_u64_be(p + 16 * i + 8, low)
    return out


def unpack_all(const unsigned char[::1] blob):
    cdef Py_ssize_t n = blob.shape[0], i
    if n % 16:
        raise ValueError("an ID blob is a whole number of IDs")
    cdef list out = []
    for i in range(0, n, 16):
        out.append(_PyLong_FromByteArray(&blob[i], 16, 0, 0))
    return out
