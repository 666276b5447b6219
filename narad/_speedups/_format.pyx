# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""Compiled twin of narad/log/format.py: same bytes, same scans, same errors.

The pure-Python module is the reference; read it (and docs/log-format.md) first.
"""

from cpython.bytearray cimport PyByteArray_AS_STRING, PyByteArray_GET_SIZE, PyByteArray_Resize
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize, PyBytes_GET_SIZE
from libc.stdint cimport uint8_t, uint32_t, uint64_t
from libc.stddef cimport size_t
from libc.string cimport memcpy

cdef extern from "crc32c.h":
    uint32_t narad_crc32c(const uint8_t *p, size_t n) nogil
    uint32_t narad_crc32c_update(uint32_t crc, const uint8_t *p, size_t n) nogil

def crc32c(const uint8_t[::1] data, uint32_t value=0):
    """CRC32C of `data` continuing `value`, as the crc32c package's crc32c(data, value)."""
    if data.shape[0] == 0:
        return value
    return narad_crc32c_update(value, &data[0], <size_t>data.shape[0])


from narad.log.format import (
    FORMAT_VERSION,
    HEADER_BYTES,
    LENGTH_MIN,
    RECORD_BYTES_MAX,
    SCAN_BAD,
    SCAN_OK,
    SCAN_SHORT,
    Record,
)

cdef Py_ssize_t C_HEADER = HEADER_BYTES
cdef uint64_t C_LENGTH_MIN = LENGTH_MIN
cdef uint64_t C_RECORD_MAX = RECORD_BYTES_MAX
cdef int C_VERSION = FORMAT_VERSION


cdef inline uint32_t rd32(const uint8_t* p) noexcept nogil:
    return <uint32_t>p[0] | (<uint32_t>p[1] << 8) | (<uint32_t>p[2] << 16) | (<uint32_t>p[3] << 24)


cdef inline uint64_t rd64(const uint8_t* p) noexcept nogil:
    return <uint64_t>rd32(p) | (<uint64_t>rd32(p + 4) << 32)


cdef inline void wr32(uint8_t* p, uint32_t v) noexcept nogil:
    p[0] = v & 0xFF
    p[1] = (v >> 8) & 0xFF
    p[2] = (v >> 16) & 0xFF
    p[3] = (v >> 24) & 0xFF


cdef inline void wr64(uint8_t* p, uint64_t v) noexcept nogil:
    wr32(p, <uint32_t>v)
    wr32(p + 4, <uint32_t>(v >> 32))


cdef inline void frame(uint8_t* rec, Py_ssize_t payload, int flags, uint32_t epoch,
                       uint64_t offset, uint64_t timestamp_ms, uint64_t id_ms,
                       uint64_t id_seq) noexcept nogil:
    """Write the header of the record at `rec`, whose `payload` bytes follow it,
    CRC included (docs/log-format.md)."""
    wr32(rec, <uint32_t>(C_LENGTH_MIN + <uint64_t>payload))
    rec[8] = C_VERSION
    rec[9] = flags
    wr32(rec + 10, epoch)
    wr64(rec + 14, offset)
    wr64(rec + 22, timestamp_ms)
    wr64(rec + 30, id_ms)
    wr64(rec + 38, id_seq)
    wr32(rec + 4, narad_crc32c(rec + 8, C_HEADER - 8 + payload))


def encode_into(bytearray buf, uint64_t offset, uint64_t timestamp_ms, uint32_t epoch,
                int flags, uint64_t id_ms, uint64_t id_seq, payload):
    cdef const uint8_t[::1] data = payload
    cdef Py_ssize_t n = data.shape[0]
    cdef uint64_t length = C_LENGTH_MIN + <uint64_t>n
    if length > C_RECORD_MAX:
        raise ValueError(f"record of {length} bytes exceeds the maximum of {RECORD_BYTES_MAX}")
    if flags < 0 or flags > 255:
        raise OverflowError("flags out of range")
    cdef Py_ssize_t start = PyByteArray_GET_SIZE(buf)
    PyByteArray_Resize(buf, start + C_HEADER + n)
    cdef uint8_t* p = <uint8_t*>PyByteArray_AS_STRING(buf) + start
    if n:
        memcpy(p + C_HEADER, &data[0], n)
    frame(p, n, flags, epoch, offset, timestamp_ms, id_ms, id_seq)


# Why `record_size` refused a record (its answers below zero).
cdef enum:
    SHORT_HEADER = -1
    BAD_LENGTH = -2
    SHORT_RECORD = -3
    BAD_CRC = -4
    BAD_VERSION = -5


cdef inline Py_ssize_t record_size(const uint8_t* p, Py_ssize_t left) noexcept nogil:
    """The size of the valid record at `p`, with `left` bytes of the buffer from `p`
    on; else why not (below zero): the checks `scan` makes, in its order."""
    cdef uint64_t length
    if left < C_HEADER:
        return SHORT_HEADER
    length = rd32(p)
    if length < C_LENGTH_MIN or length > C_RECORD_MAX:
        return BAD_LENGTH
    if 4 + <Py_ssize_t>length > left:
        return SHORT_RECORD
    if narad_crc32c(p + 8, length - 4) != rd32(p + 4):
        return BAD_CRC
    if p[8] != C_VERSION:
        return BAD_VERSION
    return 4 + <Py_ssize_t>length


cdef tuple refusal(Py_ssize_t why, const uint8_t* p):
    """`scan`'s (status, detail) for the record at `p` that `record_size` refused."""
    if why == SHORT_HEADER:
        return SCAN_SHORT, HEADER_BYTES
    if why == BAD_LENGTH:
        return SCAN_BAD, f"bad length {rd32(p)}"
    if why == SHORT_RECORD:
        return SCAN_SHORT, 4 + <Py_ssize_t>rd32(p)
    if why == BAD_CRC:
        return SCAN_BAD, "CRC mismatch"
    return SCAN_BAD, f"unknown format version {p[8]}"


def scan(buf, Py_ssize_t start, Py_ssize_t base_position, Py_ssize_t count_max):
    cdef const uint8_t[::1] data = buf
    cdef Py_ssize_t size = data.shape[0]
    cdef Py_ssize_t pos = start
    cdef Py_ssize_t n
    cdef const uint8_t* p
    records = []
    while len(records) < count_max and pos < size:
        p = &data[pos]
        n = record_size(p, size - pos)
        if n < 0:
            return (records, pos) + refusal(n, p)
        payload = PyBytes_FromStringAndSize(<const char*>(p + C_HEADER), n - C_HEADER)
        # tuple.__new__ builds the same Record without its Python-level __new__.
        records.append(tuple.__new__(Record, (rd64(p + 14), rd64(p + 22), rd32(p + 10), p[9],
                                              rd64(p + 30), rd64(p + 38), payload,
                                              base_position + pos)))
        pos += n
    return records, pos, SCAN_OK, 0


def scan_entries(buf, Py_ssize_t start, Py_ssize_t count_max, high, deleted):
    cdef const uint8_t[::1] data = buf
    cdef Py_ssize_t size = data.shape[0]
    cdef Py_ssize_t pos = start
    cdef Py_ssize_t n
    cdef uint64_t id_ms, id_seq, offset
    cdef const uint8_t* p
    cdef uint64_t high_ms = <uint64_t>(high >> 64)
    cdef uint64_t high_seq = <uint64_t>(high & 0xFFFFFFFFFFFFFFFF)
    cdef bint skipping = len(deleted) > 0
    cdef list entries = []
    cdef Py_ssize_t taken = 0
    cdef object last_id = -1
    cdef object next_offset = -1
    while taken < count_max and pos < size:
        p = &data[pos]
        n = record_size(p, size - pos)
        if n < 0:
            return (entries, pos) + refusal(n, p) + (last_id, next_offset, False)
        id_ms = rd64(p + 30)
        id_seq = rd64(p + 38)
        if id_ms > high_ms or (id_ms == high_ms and id_seq > high_seq):
            return entries, pos, SCAN_OK, 0, last_id, next_offset, True
        offset = rd64(p + 14)
        last_id = (<object>id_ms << 64) | <object>id_seq
        next_offset = offset + 1
        if not (skipping and offset in deleted):
            payload = PyBytes_FromStringAndSize(<const char*>(p + C_HEADER), n - C_HEADER)
            entries.append((last_id, payload))
            taken += 1
        pos += n
    return entries, pos, SCAN_OK, 0, last_id, next_offset, False


def encode_fields(fields):
    cdef Py_ssize_t count = len(fields)
    cdef Py_ssize_t total = 4 + 4 * count
    cdef Py_ssize_t i, n
    for item in fields:
        total += len(item)
    out = PyBytes_FromStringAndSize(NULL, total)
    cdef uint8_t* p = <uint8_t*>PyBytes_AS_STRING(out)
    cdef const uint8_t[::1] data
    wr32(p, <uint32_t>count)
    p += 4
    for item in fields:
        data = item
        n = data.shape[0]
        wr32(p, <uint32_t>n)
        p += 4
        if n:
            memcpy(p, &data[0], n)
        p += n
    return out


def decode_fields(bytes payload):
    cdef const uint8_t* p = <const uint8_t*>PyBytes_AS_STRING(payload)
    cdef Py_ssize_t total = len(payload)
    cdef Py_ssize_t pos = 4
    cdef uint32_t count, i
    cdef Py_ssize_t size
    if total < 4:
        raise ValueError("entry payload is truncated")
    count = rd32(p)
    fields = []
    for i in range(count):
        if pos + 4 > total:
            raise ValueError("entry payload is truncated")
        size = rd32(p + pos)
        pos += 4
        if pos + size > total:
            raise ValueError("entry payload is truncated")
        fields.append(PyBytes_FromStringAndSize(<const char*>(p + pos), size))
        pos += size
    if pos != total:
        raise ValueError("entry payload has trailing bytes")
    return fields


cdef uint64_t U64_MAX = 0xFFFFFFFFFFFFFFFF


def index_ordered(const uint8_t[::1] data):
    cdef Py_ssize_t n = data.shape[0] // 32, i
    cdef const uint8_t* p
    cdef const uint8_t* q
    for i in range(1, n):
        p = &data[(i - 1) * 32]
        q = p + 32
        if rd64(q) <= rd64(p) or rd64(q + 8) <= rd64(p + 8):
            return False
        if rd64(q + 16) < rd64(p + 16) or (
                rd64(q + 16) == rd64(p + 16) and rd64(q + 24) < rd64(p + 24)):
            return False
    return True


def encode_entries(bytearray buf, argvs, Py_ssize_t first, uint64_t offset,
                   uint64_t timestamp_ms, uint32_t epoch, int flags, uint64_t id_ms,
                   uint64_t id_seq, Py_ssize_t position, Py_ssize_t index_position,
                   Py_ssize_t interval):
    cdef list rows = argvs if type(argvs) is list else list(argvs)
    cdef Py_ssize_t nrec = len(rows)
    cdef Py_ssize_t i, j, count, total = 0, payload
    cdef uint64_t length
    cdef object argv
    if flags < 0 or flags > 255:
        raise OverflowError("flags out of range")
    # First pass: sizes, checked before anything is appended.
    for i in range(nrec):
        argv = rows[i]
        count = len(argv)
        payload = 4
        for j in range(first, count):
            payload += 4 + len(argv[j])
        length = C_LENGTH_MIN + <uint64_t>payload
        if length > C_RECORD_MAX:
            raise ValueError(f"record of {length} bytes exceeds the maximum of {RECORD_BYTES_MAX}")
        total += C_HEADER + payload
    cdef Py_ssize_t start = PyByteArray_GET_SIZE(buf)
    PyByteArray_Resize(buf, start + total)
    cdef uint8_t* p = <uint8_t*>PyByteArray_AS_STRING(buf) + start
    due = []
    try:
        encode_rows(rows, first, p, offset, timestamp_ms, epoch, flags, id_ms, id_seq,
                    position, index_position, interval, due)
    except BaseException:
        PyByteArray_Resize(buf, start)
        raise
    return due


cdef int encode_rows(list rows, Py_ssize_t first, uint8_t* p, uint64_t offset,
                     uint64_t timestamp_ms, uint32_t epoch, int flags, uint64_t id_ms,
                     uint64_t id_seq, Py_ssize_t position, Py_ssize_t index_position,
                     Py_ssize_t interval, list due) except -1:
    cdef Py_ssize_t i, j, count, n, payload
    cdef Py_ssize_t nrec = len(rows)
    cdef object argv, arg
    cdef const uint8_t[::1] data
    cdef const uint8_t* src
    cdef uint8_t* rec
    cdef uint8_t* q
    for i in range(nrec):
        if index_position < 0 or position - index_position >= interval:
            due.append((offset, position, id_ms, id_seq))
            index_position = position
        argv = rows[i]
        count = len(argv)
        rec = p
        q = p + C_HEADER
        wr32(q, <uint32_t>(count - first if count > first else 0))
        q += 4
        for j in range(first, count):
            arg = argv[j]
            if type(arg) is bytes:
                n = PyBytes_GET_SIZE(arg)
                src = <const uint8_t*>PyBytes_AS_STRING(arg)
            else:
                data = arg
                n = data.shape[0]
                src = &data[0] if n else NULL
            wr32(q, <uint32_t>n)
            q += 4
            if n:
                memcpy(q, src, n)
            q += n
        payload = q - rec - C_HEADER
        frame(rec, payload, flags, epoch, offset, timestamp_ms, id_ms, id_seq)
        p = q
        position += C_HEADER + payload
        offset += 1
        if id_seq == U64_MAX:
            id_ms += 1
            id_seq = 0
        else:
            id_seq += 1
    return 0
