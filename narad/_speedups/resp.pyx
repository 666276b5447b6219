# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""Compiled twins of narad.resp._hiredis_parser.py_frames_end, py_big_count_at
and py_whole_commands, and of narad.resp.encoder.encode_ids_into: same answers.

The pure-Python functions are the reference; read their docstrings first.
frames_end compares header and payload bytes in place instead of building frames.
"""

from cpython.bytearray cimport PyByteArray_AS_STRING, PyByteArray_GET_SIZE, PyByteArray_Resize
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize, PyBytes_GET_SIZE
from libc.stdint cimport uint32_t, uint64_t
from libc.string cimport memcmp, memcpy

cdef bytes NULL_ARRAY = b"*-1\r\n"
# Must equal narad.resp._hiredis_parser.BIG_COUNT_DIGITS (tests/resp checks).
# Not imported from there: that module imports this one.
DIGITS = 6
cdef Py_ssize_t BIG_COUNT_DIGITS = DIGITS


cdef inline Py_ssize_t digits(Py_ssize_t value) noexcept nogil:
    cdef Py_ssize_t count = 1
    while value >= 10:
        value //= 10
        count += 1
    return count


cdef Py_ssize_t after_head(const char* data, Py_ssize_t size, Py_ssize_t at,
                           char marker, Py_ssize_t value, Py_ssize_t width) noexcept nogil:
    """Index after `<marker><value>\\r\\n` at data[at] (value has `width` digits), or -1."""
    cdef Py_ssize_t end = at + width + 3
    cdef Py_ssize_t i = at + width
    if end > size or data[at] != marker:
        return -1
    while i > at:
        if data[i] != 48 + value % 10:
            return -1
        value //= 10
        i -= 1
    if data[end - 2] != 13 or data[end - 1] != 10:
        return -1
    return end


def frames_end(list commands, bytes buf, Py_ssize_t pos, Py_ssize_t max_count,
               Py_ssize_t max_len, Py_ssize_t max_line):
    cdef const char* data = PyBytes_AS_STRING(buf)
    cdef Py_ssize_t size = PyBytes_GET_SIZE(buf)
    cdef Py_ssize_t at = pos, count, length, width
    cdef object command, arg
    if not commands:
        return -1
    if None in commands:
        if commands != [None] or not buf.startswith(NULL_ARRAY, pos) or max_line < 3:
            return -1
        return pos + len(NULL_ARRAY)
    for command in commands:
        if type(command) is not list:
            return -1
        count = len(<list>command)
        width = digits(count)
        if count > max_count or width >= max_line:
            return -1
        at = after_head(data, size, at, 42, count, width)
        if at < 0:
            return -1
        for arg in <list>command:
            if type(arg) is not bytes:
                return -1
            length = PyBytes_GET_SIZE(arg)
            width = digits(length)
            if length > max_len or width >= max_line:
                return -1
            at = after_head(data, size, at, 36, length, width)
            if at < 0 or at + length + 2 > size:
                return -1
            if memcmp(data + at, PyBytes_AS_STRING(arg), length) != 0:
                return -1
            at += length
            if data[at] != 13 or data[at + 1] != 10:
                return -1
            at += 2
    return at


cdef inline bint is_marker(unsigned char byte) noexcept nogil:
    return byte == 42 or byte == 37 or byte == 126 or byte == 62 or byte == 124


def big_count_at(bytes buf, Py_ssize_t start, Py_ssize_t stop):
    cdef const unsigned char* data = <const unsigned char*>PyBytes_AS_STRING(buf)
    cdef Py_ssize_t size = PyBytes_GET_SIZE(buf)
    cdef Py_ssize_t at, run
    if stop > size:
        stop = size
    if start < 0:
        start = 0
    at = start
    while at + BIG_COUNT_DIGITS < stop:
        if is_marker(data[at]):
            run = 1
            while run <= BIG_COUNT_DIGITS and 48 <= data[at + run] <= 57:
                run += 1
            if run > BIG_COUNT_DIGITS:
                return at
        at += 1
    return -1


cdef inline Py_ssize_t u64_digits(char* out, uint64_t value) noexcept nogil:
    """Write `value` in decimal to out (room for 20); return how many digits."""
    cdef char tmp[20]
    cdef Py_ssize_t n = 0, i
    while True:
        tmp[n] = 48 + value % 10
        value //= 10
        n += 1
        if value == 0:
            break
    for i in range(n):
        out[i] = tmp[n - 1 - i]
    return n


def encode_ids_into(bytearray buf, uint64_t ms, uint64_t seq, Py_ssize_t count):
    cdef char head[21]
    cdef char tail[20]
    cdef Py_ssize_t head_len, tail_len, text, i
    cdef Py_ssize_t start = PyByteArray_GET_SIZE(buf)
    cdef Py_ssize_t used = 0
    cdef char* p
    if count <= 0:
        return
    # At most 48 bytes per reply: $41\r\n + 20 digits - 20 digits \r\n.
    PyByteArray_Resize(buf, start + 48 * count)
    p = PyByteArray_AS_STRING(buf) + start
    head_len = u64_digits(head, ms)
    head[head_len] = 45  # '-'
    head_len += 1
    for i in range(count):
        tail_len = u64_digits(tail, seq)
        text = head_len + tail_len
        p[used] = 36  # '$'
        used += 1
        used += u64_digits(p + used, <uint64_t>text)
        p[used] = 13
        p[used + 1] = 10
        used += 2
        memcpy(p + used, head, head_len)
        used += head_len
        memcpy(p + used, tail, tail_len)
        used += tail_len
        p[used] = 13
        p[used + 1] = 10
        used += 2
        if seq == 0xFFFFFFFFFFFFFFFF:
            ms += 1
            seq = 0
            head_len = u64_digits(head, ms)
            head[head_len] = 45
            head_len += 1
        else:
            seq += 1
    PyByteArray_Resize(buf, start + used)


cdef inline Py_ssize_t read_number(const char* data, Py_ssize_t size, Py_ssize_t at,
                                   Py_ssize_t max_digits, Py_ssize_t* value) noexcept nogil:
    """Read the canonical decimal at data[at] (no sign, no leading zero, at most
    `max_digits` digits) followed by CR LF into value; return the index after the
    LF, or -1."""
    cdef Py_ssize_t start = at, v = 0
    cdef char c
    while at < size:
        c = data[at]
        if c < 48 or c > 57:
            break
        v = v * 10 + (c - 48)
        at += 1
        if at - start > max_digits:
            return -1
    if at == start or (data[start] == 48 and at - start > 1):
        return -1
    if at + 2 > size or data[at] != 13 or data[at + 1] != 10:
        return -1
    value[0] = v
    return at + 2


def whole_commands(bytes data, Py_ssize_t max_count, Py_ssize_t max_len,
                   Py_ssize_t max_line):
    """The commands in `data` when it is nothing but canonical multibulk frames
    (see py_frames_end) of commands with one argument or more; else None."""
    cdef const char* p = PyBytes_AS_STRING(data)
    cdef Py_ssize_t size = PyBytes_GET_SIZE(data)
    cdef Py_ssize_t at = 0, count = 0, length = 0, i
    cdef Py_ssize_t count_digits = BIG_COUNT_DIGITS - 1
    cdef Py_ssize_t len_digits = 18
    cdef list out = [], command
    if max_line - 1 < count_digits:
        count_digits = max_line - 1
    if max_line - 1 < len_digits:
        len_digits = max_line - 1
    if size == 0:
        return None
    while at < size:
        if p[at] != 42:  # '*'
            return None
        at = read_number(p, size, at + 1, count_digits, &count)
        if at < 0 or count == 0 or count > max_count:
            return None
        command = [None] * count
        for i in range(count):
            if at >= size or p[at] != 36:  # '$'
                return None
            at = read_number(p, size, at + 1, len_digits, &length)
            if at < 0 or length > max_len or at + length + 2 > size:
                return None
            if p[at + length] != 13 or p[at + length + 1] != 10:
                return None
            command[i] = PyBytes_FromStringAndSize(p + at, length)
            at += length + 2
        out.append(command)
    return out


cdef inline uint32_t rd32(const unsigned char* p) noexcept nogil:
    return <uint32_t>p[0] | (<uint32_t>p[1] << 8) | (<uint32_t>p[2] << 16) | (<uint32_t>p[3] << 24)


cdef Py_ssize_t payload_frame_size(bytes payload) except -1:
    """Bytes of the `*<n>` array frame of an entry payload's fields; ValueError with
    decode_fields's messages when the payload is malformed."""
    cdef const unsigned char* p = <const unsigned char*>PyBytes_AS_STRING(payload)
    cdef Py_ssize_t total = PyBytes_GET_SIZE(payload)
    cdef Py_ssize_t pos = 4, size, out
    cdef uint32_t count, i
    if total < 4:
        raise ValueError("entry payload is truncated")
    count = rd32(p)
    out = 3 + digits(count)
    for i in range(count):
        if pos + 4 > total:
            raise ValueError("entry payload is truncated")
        size = rd32(p + pos)
        pos += 4
        if pos + size > total:
            raise ValueError("entry payload is truncated")
        out += 5 + digits(size) + size
        pos += size
    if pos != total:
        raise ValueError("entry payload has trailing bytes")
    return out


cdef inline Py_ssize_t put_head(char* out, char marker, Py_ssize_t value) noexcept nogil:
    out[0] = marker
    cdef Py_ssize_t n = 1 + u64_digits(out + 1, <uint64_t>value)
    out[n] = 13
    out[n + 1] = 10
    return n + 2


def entries_frame(entries):
    cdef Py_ssize_t n = len(entries), i, total, used = 0, pos, size, id_len
    cdef uint32_t count, j
    cdef const unsigned char* p
    cdef char idtext[41]
    cdef char* out
    cdef uint64_t ms, seq
    cdef object sid
    cdef bytes payload
    cdef list ms_list = [None] * n
    cdef list seq_list = [None] * n
    total = 3 + digits(n)
    for i in range(n):
        sid, payload = entries[i]
        ms_list[i] = sid >> 64
        seq_list[i] = sid & 0xFFFFFFFFFFFFFFFF
        ms = ms_list[i]
        seq = seq_list[i]
        id_len = u64_digits(idtext, ms) + 1 + u64_digits(idtext, seq)
        total += 4 + 3 + digits(id_len) + id_len + 2 + payload_frame_size(payload)
    frame = PyBytes_FromStringAndSize(NULL, total)
    out = PyBytes_AS_STRING(frame)
    used = put_head(out, 42, n)
    for i in range(n):
        payload = entries[i][1]
        ms = ms_list[i]
        seq = seq_list[i]
        id_len = u64_digits(idtext, ms)
        idtext[id_len] = 45
        id_len += 1
        id_len += u64_digits(idtext + id_len, seq)
        memcpy(out + used, b"*2\r\n", 4)
        used += 4
        used += put_head(out + used, 36, id_len)
        memcpy(out + used, idtext, id_len)
        used += id_len
        out[used] = 13
        out[used + 1] = 10
        used += 2
        p = <const unsigned char*>PyBytes_AS_STRING(payload)
        count = rd32(p)
        used += put_head(out + used, 42, count)
        pos = 4
        for j in range(count):
            size = rd32(p + pos)
            pos += 4
            used += put_head(out + used, 36, size)
            memcpy(out + used, p + pos, size)
            used += size
            out[used] = 13
            out[used + 1] = 10
            used += 2
            pos += size
    return frame
