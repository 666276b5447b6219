# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""Compiled twins of narad.resp._hiredis_parser.py_frames_end and
py_big_count_at: same answers.

The pure-Python functions are the reference; read their docstrings first.
frames_end compares header and payload bytes in place instead of building frames.
"""

from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_GET_SIZE
from libc.string cimport memcmp

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
