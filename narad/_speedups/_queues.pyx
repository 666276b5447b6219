# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""Compiled twin of narad.queues.queue.count_tracked: the same counts. The pure
function is the reference; read its docstring first."""

from cpython.dict cimport PyDict_Next
from cpython.long cimport PyLong_AsLongLong, PyLong_AsUnsignedLongLongMask
from cpython.ref cimport PyObject


def count_tracked(dict tracked, long long start, long long end, set deleted,
                  long long cursor):
    # Offsets, the bounds and the cursor are log offsets: below 2^63.
    cdef Py_ssize_t pos = 0
    cdef long long offset
    cdef PyObject* key
    cdef PyObject* value
    cdef Py_ssize_t by_state[4]
    cdef Py_ssize_t ahead = 0
    cdef bint any_deleted = len(deleted) > 0
    by_state[0] = by_state[1] = by_state[2] = by_state[3] = 0
    while PyDict_Next(tracked, &pos, &key, &value):
        offset = PyLong_AsLongLong(<object>key)
        if offset < start or offset >= end:
            continue
        if any_deleted and <object>key in deleted:
            continue
        by_state[PyLong_AsUnsignedLongLongMask(<object>value) & 3] += 1
        if offset >= cursor:
            ahead += 1
    return by_state[0], by_state[1], by_state[2], ahead
