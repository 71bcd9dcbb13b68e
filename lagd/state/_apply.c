/* The store's writes, compiled: the windows table's rows (`copy_windows`) and the commit history's
 * (`copy_history`) as PostgreSQL binary COPY data, a history column's bounds and days
 * (`history_days`), and a column of names taken out of the collector's sight (`untrack_names`).
 * The commit apply and the window drain that this file held are typed Python now, compiled by
 * Cython from their one source, lagd/state/apply.py (issue 52).
 *
 * The window layout (fields per entry and their order) is lagd.state.layout's one definition:
 * this code holds a copy, `LAYOUT` (tests/test_copy_windows_c.py compares the two codes' rows).
 *
 * Optional: the build compiles it where a C compiler is found (hatch_build.py); without it the
 * store builds its rows in Python, with the same result (tests/test_copy_*_c.py compare them).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#ifndef __SIZEOF_INT128__
#error "lagd's compiled apply needs a 64-bit GCC or Clang (__int128); lagd runs the Python instead"
#endif
__extension__ typedef __int128 i128; /* differences of two int64 times, exactly */

enum { OFFSET, ORDER, TS, OBSERVED, LAG, FIELDS };
#define NO_LAG INT64_MIN


/* `v` as 8 big-endian bytes at `to`, one byte swap and store where the CPU has them (byte by
 * byte stores were a third of the drain). */
static inline void put_be64(unsigned char *to, uint64_t v) {
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    v = __builtin_bswap64(v);
#elif !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_BIG_ENDIAN__
    for (int b = 7; b >= 0; b--, v >>= 8)
        to[b] = (unsigned char)(v & 0xff);
    return;
#endif
    memcpy(to, &v, 8);
}


/* Kafka's placement hash of a group (windows.group_hash: Java's String.hashCode over UTF-16 code
 * units, then Kafka's Utils.abs). */
static int64_t java_group_hash(PyObject *s) {
    uint32_t h = 0;
    Py_ssize_t n = PyUnicode_GET_LENGTH(s);
    int kind = PyUnicode_KIND(s);
    const void *data = PyUnicode_DATA(s);
    for (Py_ssize_t i = 0; i < n; i++) {
        Py_UCS4 c = PyUnicode_READ(kind, data, i);
        if (c > 0xFFFF) {
            c -= 0x10000;
            h = 31u * h + (uint32_t)(0xD800 + (c >> 10));
            h = 31u * h + (uint32_t)(0xDC00 + (c & 0x3FF));
        } else {
            h = 31u * h + (uint32_t)c;
        }
    }
    if (h >= 0x80000000u)
        return h == 0x80000000u ? 0 : (int64_t)(0x100000000ULL - h);
    return (int64_t)h;
}

typedef struct {
    char *data;
    Py_ssize_t len, cap;
} Buf;

static int buf_reserve(Buf *b, Py_ssize_t n) {
    if (b->len + n > b->cap) {
        Py_ssize_t cap = b->cap ? b->cap : 65536;
        while (cap < b->len + n)
            cap *= 2;
        char *grown = PyMem_Realloc(b->data, (size_t)cap);
        if (grown == NULL) {
            PyErr_NoMemory();
            return -1;
        }
        b->data = grown;
        b->cap = cap;
    }
    return 0;
}

static int buf_put(Buf *b, const void *src, Py_ssize_t n) {
    if (buf_reserve(b, n) < 0)
        return -1;
    memcpy(b->data + b->len, src, (size_t)n);
    b->len += n;
    return 0;
}

static int buf_be32(Buf *b, uint32_t v) {
    unsigned char x[4] = {(unsigned char)(v >> 24), (unsigned char)(v >> 16), (unsigned char)(v >> 8), (unsigned char)v};
    return buf_put(b, x, 4);
}

/* Binary COPY data begins with the signature, flags 0 and no header extension, and ends with a
 * tuple of -1 fields. */
static const char COPY_HEADER[19] = "PGCOPY\n\377\r\n\0\0\0\0\0\0\0\0\0";
static const unsigned char COPY_TRAILER[2] = {0xFF, 0xFF};

/* A text field: its length, then its UTF-8 (0: left to the Python, -1: error set). */
static int buf_text(Buf *b, PyObject *s) {
    Py_ssize_t n;
    const char *utf8 = PyUnicode_AsUTF8AndSize(s, &n);
    if (utf8 == NULL) {
        if (!PyErr_ExceptionMatches(PyExc_UnicodeEncodeError))
            return -1;
        PyErr_Clear(); /* a lone surrogate: the Python's encoder refuses it as it always did */
        return 0;
    }
    if (n > INT32_MAX)
        return 0;
    return buf_be32(b, (uint32_t)n) < 0 || buf_put(b, utf8, n) < 0 ? -1 : 1;
}

/* copy_windows(windows, pos, size, n, max_bytes, gone) -> (data, rows, pos, done) | None:
 * Store._write_keyed's rows of the windows table (cluster, group_name, topic, partition, entries,
 * group_hash) from the dict position `pos` on, up to n of them or until the data passes max_bytes
 * (a window's size grows with the intervals), as binary COPY data (header, tuples, trailer);
 * `done` once the dict has no more. A removed window (its bytes None or empty) goes to `gone`.
 * `size` is the dict's size when the first call began: a dict changed in size since raises, as
 * iterating it would. None where the Python writes them (asyncpg's encoder refuses what it always
 * refused): a key not of exact (str, str, str, int), a partition outside int32, a string with a
 * lone surrogate, entries not exact bytes. What a call that answers None or raises appended to
 * `gone` is taken back. */
static PyObject *copy_windows(PyObject *Py_UNUSED(self), PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 6 || !PyDict_CheckExact(args[0]) || !PyList_CheckExact(args[5])) {
        PyErr_SetString(PyExc_TypeError, "copy_windows(windows: dict, pos, size, n, max_bytes, gone: list)");
        return NULL;
    }
    PyObject *windows = args[0], *gone = args[5];
    Py_ssize_t pos = PyLong_AsSsize_t(args[1]), size = PyLong_AsSsize_t(args[2]), n = PyLong_AsSsize_t(args[3]),
               max_bytes = PyLong_AsSsize_t(args[4]);
    if ((pos == -1 || size == -1 || n == -1 || max_bytes == -1) && PyErr_Occurred())
        return NULL;
    if (pos < 0 || n < 1 || max_bytes < 0) {
        PyErr_SetString(PyExc_ValueError, "copy_windows: pos and max_bytes must not be negative, n at least 1");
        return NULL;
    }
    if (PyDict_GET_SIZE(windows) != size) {
        PyErr_SetString(PyExc_RuntimeError, "dictionary changed size during iteration");
        return NULL;
    }
    Buf b = {NULL, 0, 0};
    Py_ssize_t rows = 0, gone_at = PyList_GET_SIZE(gone);
    if (buf_put(&b, COPY_HEADER, sizeof COPY_HEADER) < 0)
        goto fail;
    PyObject *key, *value, *result = NULL;
    int rc = 1;
    /* Nothing below runs Python code (exact str, int and bytes; the list append), so the dict
     * and the borrowed keys and values stay as they are while they are read. */
    int done = 0;
    while (rows < n && (rows == 0 || b.len < max_bytes)) { /* a row at least: every call moves on */
        if (!PyDict_Next(windows, &pos, &key, &value)) {
            done = 1;
            break;
        }
        if (value == Py_None || (PyBytes_CheckExact(value) && PyBytes_GET_SIZE(value) == 0)) {
            if (PyList_Append(gone, key) < 0)
                goto fail;
            continue;
        }
        if (!PyBytes_CheckExact(value) || !PyTuple_CheckExact(key) || PyTuple_GET_SIZE(key) != 4)
            goto python;
        PyObject *cluster = PyTuple_GET_ITEM(key, 0), *group = PyTuple_GET_ITEM(key, 1),
                 *topic = PyTuple_GET_ITEM(key, 2), *partition = PyTuple_GET_ITEM(key, 3);
        if (!PyUnicode_CheckExact(cluster) || !PyUnicode_CheckExact(group) || !PyUnicode_CheckExact(topic) ||
            !PyLong_CheckExact(partition))
            goto python;
        int overflow = 0;
        long long p = PyLong_AsLongLongAndOverflow(partition, &overflow);
        if (overflow || p < INT32_MIN || p > INT32_MAX || PyBytes_GET_SIZE(value) > INT32_MAX)
            goto python;
        unsigned char count[2] = {0, 6};
        if (buf_put(&b, count, 2) < 0)
            goto fail;
        if ((rc = buf_text(&b, cluster)) <= 0 || (rc = buf_text(&b, group)) <= 0 || (rc = buf_text(&b, topic)) <= 0)
            goto rc_out;
        if (buf_be32(&b, 4) < 0 || buf_be32(&b, (uint32_t)(int32_t)p) < 0 ||
            buf_be32(&b, (uint32_t)PyBytes_GET_SIZE(value)) < 0 ||
            buf_put(&b, PyBytes_AS_STRING(value), PyBytes_GET_SIZE(value)) < 0 || buf_be32(&b, 4) < 0 ||
            buf_be32(&b, (uint32_t)java_group_hash(group)) < 0)
            goto fail;
        rows++;
    }
    {
        if (buf_put(&b, COPY_TRAILER, sizeof COPY_TRAILER) < 0)
            goto fail;
        PyObject *data = PyBytes_FromStringAndSize(b.data, b.len);
        if (data == NULL || (result = Py_BuildValue("(NnnO)", data, rows, pos, done ? Py_True : Py_False)) == NULL)
            goto fail; /* `data` was taken by Py_BuildValue, even when it failed */
    }
    PyMem_Free(b.data);
    return result;
rc_out:
    if (rc < 0)
        goto fail;
python:
    PyMem_Free(b.data);
    if (PyList_SetSlice(gone, gone_at, PyList_GET_SIZE(gone), NULL) < 0)
        return NULL;
    Py_RETURN_NONE;
fail:
    PyMem_Free(b.data);
    {
        PyObject *type, *value, *tb;
        PyErr_Fetch(&type, &value, &tb); /* the error raised, not one of taking `gone` back */
        if (PyList_SetSlice(gone, gone_at, PyList_GET_SIZE(gone), NULL) < 0)
            PyErr_Clear();
        PyErr_Restore(type, value, tb);
    }
    return NULL;
}

static inline unsigned char *put_be32(unsigned char *to, uint32_t v) {
    to[0] = (unsigned char)(v >> 24);
    to[1] = (unsigned char)(v >> 16);
    to[2] = (unsigned char)(v >> 8);
    to[3] = (unsigned char)v;
    return to + 4;
}

/* An int8 field: its length (8), then the value big-endian. */
static inline unsigned char *put_field64(unsigned char *to, uint64_t v) {
    put_be64(put_be32(to, 8), v);
    return to + 12;
}

/* A column of CommitRows as a buffer of `itemsize` bytes an item holding at least `stop` items
 * (0: not one, left to the Python; -1: error set). */
static int column_view(PyObject *column, Py_buffer *view, Py_ssize_t itemsize, const char *format, Py_ssize_t stop) {
    if (PyObject_GetBuffer(column, view, PyBUF_FORMAT | PyBUF_C_CONTIGUOUS) < 0) {
        PyErr_Clear();
        return 0;
    }
    if (view->itemsize != itemsize || view->format == NULL || strcmp(view->format, format) != 0 ||
        view->len / itemsize < stop) {
        PyBuffer_Release(view);
        return 0;
    }
    return 1;
}

#define NO_LAG INT64_MIN /* lagd.state.history.NO_LAG: a null lag */
/* The most COPY data one call builds: it goes to Postgres as one message, and Postgres refuses
 * messages over 1 GB. Only names of hundreds of KB come near it; those rows go to the Python. */
#define COPY_HISTORY_MAX_BYTES ((Py_ssize_t)1 << 26)

/* The i-th int64 or int32 of a column whose buffer may not be aligned (a memoryview slice). */
static inline int64_t load64(const char *base, Py_ssize_t i) {
    int64_t v;
    memcpy(&v, base + 8 * i, 8);
    return v;
}

static inline int32_t load32(const char *base, Py_ssize_t i) {
    int32_t v;
    memcpy(&v, base + 4 * i, 4);
    return v;
}

/* copy_history(ts, cluster, group, topic, partition, offset, lag, observed, start, stop) -> bytes | None:
 * rows [start, stop) of CommitRows' columns (arrays 'q' and 'i', lists of str) as binary COPY data of
 * commit_history (ts, cluster, group_name, topic, partition, offset, lag, observed): header, tuples,
 * trailer; a lag of NO_LAG is NULL. None where the Python writes them (asyncpg's encoder refuses what
 * it always refused): a column not of that kind or shorter than `stop`, a string not exact or with a
 * lone surrogate, or more than COPY_HISTORY_MAX_BYTES of data. */
static PyObject *copy_history(PyObject *Py_UNUSED(self), PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 10) {
        PyErr_SetString(PyExc_TypeError,
                        "copy_history(ts, cluster, group, topic, partition, offset, lag, observed, start, stop)");
        return NULL;
    }
    Py_ssize_t start = PyLong_AsSsize_t(args[8]), stop = PyLong_AsSsize_t(args[9]);
    if ((start == -1 || stop == -1) && PyErr_Occurred())
        return NULL;
    if (start < 0 || stop < start) {
        PyErr_SetString(PyExc_ValueError, "copy_history: 0 <= start <= stop");
        return NULL;
    }
    PyObject *texts[3] = {args[1], args[2], args[3]};
    for (int k = 0; k < 3; k++)
        if (!PyList_CheckExact(texts[k]))
            Py_RETURN_NONE;
    /* ts, partition, offset, lag, observed */
    static const int at[5] = {0, 4, 5, 6, 7};
    Py_buffer views[5];
    int got = 0, rc = 1;
    for (; got < 5; got++) {
        rc = column_view(args[at[got]], &views[got], got == 1 ? 4 : 8, got == 1 ? "i" : "q", stop);
        if (rc <= 0)
            break;
    }
    Buf b = {NULL, 0, 0};
    PyObject *result = NULL;
    if (rc <= 0)
        goto out;
    /* The lists' lengths are read only now: taking a buffer may run Python code (__buffer__). */
    for (int k = 0; k < 3; k++)
        if (PyList_GET_SIZE(texts[k]) < stop) {
            rc = 0;
            goto out;
        }
    const char *ts = views[0].buf, *partition = views[1].buf, *offset = views[2].buf, *lag = views[3].buf,
               *observed = views[4].buf;
    if (buf_put(&b, COPY_HEADER, sizeof COPY_HEADER) < 0) {
        rc = -1;
        goto out;
    }
    /* Nothing below runs Python code (exact lists of exact str, held buffers), so the columns stay
     * as they are while they are read. */
    for (Py_ssize_t i = start; i < stop; i++) {
        const char *utf8[3];
        Py_ssize_t n[3], need = 70; /* the fixed part: field count, lengths, 4 int64 and an int32 */
        for (int k = 0; k < 3; k++) {
            PyObject *text = PyList_GET_ITEM(texts[k], i);
            if (!PyUnicode_CheckExact(text)) {
                rc = 0;
                goto out;
            }
            if ((utf8[k] = PyUnicode_AsUTF8AndSize(text, &n[k])) == NULL) {
                if (!PyErr_ExceptionMatches(PyExc_UnicodeEncodeError)) {
                    rc = -1;
                    goto out;
                }
                PyErr_Clear(); /* a lone surrogate: the Python's encoder refuses it as it always did */
                rc = 0;
                goto out;
            }
            if (n[k] > INT32_MAX) {
                rc = 0;
                goto out;
            }
            need += n[k];
        }
        if (b.len + need > COPY_HISTORY_MAX_BYTES) { /* huge names: asyncpg's encoder sends them in parts */
            rc = 0;
            goto out;
        }
        if (buf_reserve(&b, need) < 0) {
            rc = -1;
            goto out;
        }
        unsigned char *to = (unsigned char *)b.data + b.len;
        *to++ = 0;
        *to++ = 8;
        to = put_field64(to, (uint64_t)load64(ts, i));
        for (int k = 0; k < 3; k++) {
            to = put_be32(to, (uint32_t)n[k]);
            memcpy(to, utf8[k], (size_t)n[k]);
            to += n[k];
        }
        to = put_be32(put_be32(to, 4), (uint32_t)load32(partition, i));
        to = put_field64(to, (uint64_t)load64(offset, i));
        int64_t lag_i = load64(lag, i);
        to = lag_i == NO_LAG ? put_be32(to, 0xFFFFFFFFu) /* a field of length -1: NULL */
                              : put_field64(to, (uint64_t)lag_i);
        to = put_field64(to, (uint64_t)load64(observed, i));
        b.len = (char *)to - b.data;
    }
    if (buf_put(&b, COPY_TRAILER, sizeof COPY_TRAILER) < 0) {
        rc = -1;
        goto out;
    }
    result = PyBytes_FromStringAndSize(b.data, b.len);
    if (result == NULL)
        rc = -1;
out:
    for (int k = 0; k < got; k++)
        PyBuffer_Release(&views[k]);
    PyMem_Free(b.data);
    if (rc < 0)
        return NULL;
    if (rc == 0)
        Py_RETURN_NONE;
    return result;
}

/* history_days(ts) -> (earliest, latest, days) | None: the smallest and largest of a column of
 * millisecond timestamps (an array 'q', not empty) and the set of days since the epoch they fall
 * on (floored, as Python's //), in one pass without an int object per row: the persister needs
 * them before every write of commit history (500,000 rows: 1.4 ms, against 58 ms for the Python's
 * min, max and days_of). None for a column of another kind or an empty one. */
static PyObject *history_days(PyObject *Py_UNUSED(self), PyObject *ts_column) {
    Py_buffer view;
    if (column_view(ts_column, &view, 8, "q", 1) <= 0)
        Py_RETURN_NONE;
    const char *ts = view.buf;
    const int64_t day_ms = 86400000;
    Py_ssize_t n = view.len / 8;
    int64_t lo = load64(ts, 0), hi = lo, last_day = 0;
    PyObject *days = PySet_New(NULL), *result = NULL;
    if (days == NULL)
        goto out;
    for (Py_ssize_t i = 0; i < n; i++) {
        int64_t t = load64(ts, i), day = t / day_ms;
        if (t % day_ms != 0 && t < 0)
            day -= 1;
        if (t < lo)
            lo = t;
        if (t > hi)
            hi = t;
        if (i == 0 || day != last_day) { /* rows of one day come in runs: a set lookup per run */
            PyObject *d = PyLong_FromLongLong(day);
            if (d == NULL || PySet_Add(days, d) < 0) {
                Py_XDECREF(d);
                goto out;
            }
            Py_DECREF(d);
            last_day = day;
        }
    }
    result = Py_BuildValue("(LLO)", (long long)lo, (long long)hi, days);
out:
    Py_XDECREF(days);
    PyBuffer_Release(&view);
    return result;
}

/* untrack_names(column): take a list of str out of the cyclic collector's sight (CommitRows' name
 * columns). A str refers to nothing, so such a list cannot be part of a cycle, but CPython tracks
 * every list: at 1M group-partitions under load 1.2M names waited for Postgres in six lists, and
 * every full collection walked them (11-20 of its 28-35 ms, two runs of bench_http's large
 * phase). Refused (TypeError) for anything but an exact list holding exact str only; one appended
 * later stays a str by CommitRows' contract, and were it not, an untracked list only keeps what it
 * holds alive, as a reference from outside the collector would. */
static PyObject *untrack_names(PyObject *Py_UNUSED(self), PyObject *column) {
    if (!PyList_CheckExact(column)) {
        PyErr_SetString(PyExc_TypeError, "untrack_names: a list of str");
        return NULL;
    }
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(column); i++)
        if (!PyUnicode_CheckExact(PyList_GET_ITEM(column, i))) {
            PyErr_SetString(PyExc_TypeError, "untrack_names: a list of str");
            return NULL;
        }
    PyObject_GC_UnTrack(column);
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"history_days", (PyCFunction)history_days, METH_O,
     "history_days(ts) -> (earliest, latest, days) | None: bounds and days of a column of timestamps."},
    {"copy_history", (PyCFunction)(void (*)(void))copy_history, METH_FASTCALL,
     "copy_history(ts, cluster, group, topic, partition, offset, lag, observed, start, stop) -> bytes | None: "
     "commit history rows [start, stop) as binary COPY data, or None where the Python writes them."},
    {"untrack_names", (PyCFunction)untrack_names, METH_O,
     "untrack_names(column) -> None: a list of str out of the cyclic collector's sight (CommitRows)."},
    {"copy_windows", (PyCFunction)(void (*)(void))copy_windows, METH_FASTCALL,
     "copy_windows(windows, pos, size, n, max_bytes, gone) -> (data, rows, pos, done) | None: the windows table's "
     "rows of up to n changed windows (about max_bytes) as binary COPY data; None where the Python writes them."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "lagd.state._apply",
                                    "The usual commit applied to the state, and changed windows drained, compiled (windows.State, Drain).", -1, methods,
                                    NULL, NULL, NULL, NULL};

/* The SHA-1 of the source this was built from (hatch_build.py passes it): lagd.runtime.compiled refuses a
 * build of another source, such as one left behind after this file changed. */
#ifndef LAGD_SOURCE_SHA1
#define LAGD_SOURCE_SHA1 ""
#endif

PyMODINIT_FUNC PyInit__apply(void) {
    PyObject *m = PyModule_Create(&module);
    PyObject *layout = m == NULL ? NULL : Py_BuildValue("(iiiiii)", FIELDS, OFFSET, ORDER, TS, OBSERVED, LAG);
    if (m != NULL && (PyModule_AddStringConstant(m, "SOURCE_SHA1", LAGD_SOURCE_SHA1) < 0 ||
                      PyModule_AddObject(m, "LAYOUT", layout) < 0)) {
        Py_XDECREF(layout);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
