/* A group's partitions as Burrow's v3 JSON, compiled: burrow_v3._partition_json for each
 * PartitionVerdict of a list, joined by ", ". /v3/.../status and /lag answer with it, and with
 * the response cache off (or a group that changes every second) it was the largest part of a
 * request: writing the JSON in Python took longer than judging the group.
 *
 * `partitions_json` writes exactly the text the Python writes, or returns None for the Python to
 * write it: a list or verdict of a subclass (whose reads may run Python code), a field of another
 * type than the usual (an int that is not exactly an int, a complete that is not a float, a
 * status not among those given, entries that are not an array.array of int64 at least two
 * entries long, numbers past int64). Strings of printable ASCII without quotes or backslashes
 * are written as they are; any other string is given to `dumps` (json.dumps), so its escapes are
 * json's own.
 *
 * The window entry layout (fields per entry, and where offset, timestamp, observed time and lag
 * are) is lagd.state.windows' one definition: this code holds a copy, `LAYOUT`, which
 * burrow_v3.py compares with its own before using it.
 *
 * Optional: the build compiles it where a C compiler is found (hatch_build.py); without it lagd
 * writes the JSON in Python, the same text (tests/test_json_c.py compares them).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

enum { OFFSET, ORDER, TS, OBSERVED, LAG, FIELDS };
#define NO_LAG INT64_MIN

static PyObject *name_topic, *name_partition, *name_owner, *name_client_id, *name_status, *name_entries;
static PyObject *name_current_lag, *name_complete;
static PyObject *array_type; /* array.array: entries must be exactly one */

/* The text written so far: bytes, grown as needed; `ascii` while every byte is below 128. */
typedef struct {
    char *data;
    Py_ssize_t len, cap;
    int ascii;
} Out;

static int grow(Out *o, Py_ssize_t more) {
    if (o->len + more <= o->cap)
        return 0;
    Py_ssize_t cap = o->cap ? o->cap : 4096;
    while (cap < o->len + more) {
        if (cap > PY_SSIZE_T_MAX / 2) {
            PyErr_NoMemory();
            return -1;
        }
        cap *= 2;
    }
    char *data = PyMem_Realloc(o->data, (size_t)cap);
    if (data == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    o->data = data;
    o->cap = cap;
    return 0;
}

static int put(Out *o, const char *s, Py_ssize_t n) {
    if (grow(o, n) < 0)
        return -1;
    memcpy(o->data + o->len, s, (size_t)n);
    o->len += n;
    return 0;
}

#define PUT(o, lit) put((o), (lit), (Py_ssize_t)(sizeof(lit) - 1))

/* `v` in decimal, as str(int) writes it (snprintf took most of the time). */
static int put_i64(Out *o, int64_t v) {
    char buf[24], *end = buf + sizeof buf, *c = end;
    uint64_t u = v < 0 ? (uint64_t)0 - (uint64_t)v : (uint64_t)v;
    do {
        *--c = (char)('0' + u % 10);
        u /= 10;
    } while (u);
    if (v < 0)
        *--c = '-';
    return put(o, c, (Py_ssize_t)(end - c));
}

/* A str's UTF-8, as it is (the status' value, which the Python writes unescaped). */
static int put_raw(Out *o, PyObject *s) {
    Py_ssize_t n;
    const char *utf8 = PyUnicode_AsUTF8AndSize(s, &n);
    if (utf8 == NULL)
        return -1;
    if (!PyUnicode_IS_ASCII(s))
        o->ascii = 0;
    return put(o, utf8, n);
}

/* `s` as a JSON string, exactly as json.dumps writes it (ensure_ascii): printable ASCII without
 * '"' or '\\' as it is, anything else by json.dumps itself. */
static int put_string(Out *o, PyObject *s, PyObject *dumps) {
    if (PyUnicode_IS_ASCII(s)) {
        const unsigned char *c = PyUnicode_1BYTE_DATA(s);
        Py_ssize_t n = PyUnicode_GET_LENGTH(s), i = 0;
        while (i < n && c[i] >= 0x20 && c[i] < 0x7f && c[i] != '"' && c[i] != '\\')
            i++;
        if (i == n) {
            if (grow(o, n + 2) < 0)
                return -1;
            o->data[o->len++] = '"';
            memcpy(o->data + o->len, c, (size_t)n);
            o->len += n;
            o->data[o->len++] = '"';
            return 0;
        }
    }
    PyObject *text = PyObject_CallOneArg(dumps, s);
    if (text == NULL)
        return -1;
    if (!PyUnicode_CheckExact(text)) {
        Py_DECREF(text);
        PyErr_SetString(PyExc_TypeError, "dumps must return a str");
        return -1;
    }
    int rc = put_raw(o, text);
    Py_DECREF(text);
    return rc;
}

/* repr(d): whole numbers (complete is 1.0 for most partitions) directly, others as float_repr. */
static int put_float(Out *o, double d) {
    if (d > -1e15 && d < 1e15 && d == (double)(int64_t)d && !(d == 0 && signbit(d)))
        return put_i64(o, (int64_t)d) < 0 ? -1 : PUT(o, ".0");
    char *repr = PyOS_double_to_string(d, 'r', 0, Py_DTSF_ADD_DOT_0, NULL);
    if (repr == NULL)
        return -1;
    int rc = put(o, repr, (Py_ssize_t)strlen(repr));
    PyMem_Free(repr);
    return rc;
}

/* {"offset": ..., "timestamp": ..., "observedAt": ..., "lag": ...} of the entry at `e`. */
static int put_entry(Out *o, const int64_t *e) {
    if (PUT(o, "{\"offset\": ") < 0 || put_i64(o, e[OFFSET]) < 0 || PUT(o, ", \"timestamp\": ") < 0 ||
        put_i64(o, e[TS]) < 0 || PUT(o, ", \"observedAt\": ") < 0 || put_i64(o, e[OBSERVED]) < 0 ||
        PUT(o, ", \"lag\": ") < 0)
        return -1;
    if (e[LAG] == NO_LAG ? PUT(o, "null") < 0 : put_i64(o, e[LAG]) < 0)
        return -1;
    return PUT(o, "}");
}

/* An exact int within int64 into *v: 1; 0 when it is not one (no exception); -1 on an error. */
static int exact_i64(PyObject *obj, int64_t *v) {
    if (!PyLong_CheckExact(obj))
        return 0;
    int overflow = 0;
    long long x = PyLong_AsLongLongAndOverflow(obj, &overflow);
    if (x == -1 && PyErr_Occurred())
        return -1;
    if (overflow)
        return 0;
    *v = (int64_t)x;
    return 1;
}

/* The status' value (a borrowed str) from the (member, value) pairs; NULL: not among them. */
static PyObject *status_value(PyObject *statuses, PyObject *status) {
    Py_ssize_t n = PyTuple_GET_SIZE(statuses);
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *pair = PyTuple_GET_ITEM(statuses, i);
        if (PyTuple_GET_ITEM(pair, 0) == status)
            return PyTuple_GET_ITEM(pair, 1);
    }
    return NULL;
}

/* The attributes of one partition verdict, as new references (all NULL until read). */
typedef struct {
    PyObject *topic, *partition, *owner, *client_id, *status, *entries, *current_lag, *complete;
} Fields;

static void fields_clear(Fields *f) {
    Py_CLEAR(f->topic);
    Py_CLEAR(f->partition);
    Py_CLEAR(f->owner);
    Py_CLEAR(f->client_id);
    Py_CLEAR(f->status);
    Py_CLEAR(f->entries);
    Py_CLEAR(f->current_lag);
    Py_CLEAR(f->complete);
}

static int fields_read(PyObject *p, Fields *f) {
    return (f->topic = PyObject_GetAttr(p, name_topic)) == NULL ||
                   (f->partition = PyObject_GetAttr(p, name_partition)) == NULL ||
                   (f->owner = PyObject_GetAttr(p, name_owner)) == NULL ||
                   (f->client_id = PyObject_GetAttr(p, name_client_id)) == NULL ||
                   (f->status = PyObject_GetAttr(p, name_status)) == NULL ||
                   (f->entries = PyObject_GetAttr(p, name_entries)) == NULL ||
                   (f->current_lag = PyObject_GetAttr(p, name_current_lag)) == NULL ||
                   (f->complete = PyObject_GetAttr(p, name_complete)) == NULL
               ? -1
               : 0;
}

/* One partition's JSON: 1 written, 0 left to the Python (nothing is written then), -1 error. */
static int put_partition(Out *o, PyObject *p, PyObject *verdict_type, PyObject *statuses, PyObject *dumps) {
    Fields f = {0};
    int rc, ok, have_entries = 0;
    int64_t partition, current_lag;
    int64_t entries[2 * FIELDS];
    PyObject *value;
    Py_ssize_t mark = o->len;
    int ascii = o->ascii;
    if (!Py_IS_TYPE(p, (PyTypeObject *)verdict_type))
        return 0; /* a subclass may read its fields through Python code: the Python reads it */
    rc = fields_read(p, &f) < 0 ? -1 : 0; /* from here on, anything unusual is the Python's */
    if (rc < 0)
        goto done;
    if (!PyUnicode_CheckExact(f.topic) || !PyUnicode_CheckExact(f.owner) || !PyUnicode_CheckExact(f.client_id) ||
        !PyFloat_CheckExact(f.complete))
        goto done;
    if ((value = status_value(statuses, f.status)) == NULL || !PyUnicode_CheckExact(value))
        goto done;
    ok = exact_i64(f.partition, &partition);
    if (ok > 0)
        ok = exact_i64(f.current_lag, &current_lag);
    if (ok <= 0) {
        rc = ok;
        goto done;
    }
    if (f.entries != Py_None) {
        if (!Py_IS_TYPE(f.entries, (PyTypeObject *)array_type))
            goto done; /* the Python indexes it: only an array's buffer is what indexing reads */
        Py_buffer view;
        if (PyObject_GetBuffer(f.entries, &view, PyBUF_FORMAT | PyBUF_C_CONTIGUOUS) < 0) {
            PyErr_Clear();
            goto done;
        }
        have_entries = view.itemsize == 8 && view.format != NULL && strcmp(view.format, "q") == 0 &&
                       view.len >= (Py_ssize_t)sizeof entries;
        if (have_entries)
            memcpy(entries, view.buf, sizeof entries);
        PyBuffer_Release(&view);
        if (!have_entries)
            goto done;
    }
    rc = -1;
    if (PUT(o, "{\"topic\": ") < 0 || put_string(o, f.topic, dumps) < 0 || PUT(o, ", \"partition\": ") < 0 ||
        put_i64(o, partition) < 0 || PUT(o, ", \"owner\": ") < 0 || put_string(o, f.owner, dumps) < 0 ||
        PUT(o, ", \"client_id\": ") < 0 || put_string(o, f.client_id, dumps) < 0 || PUT(o, ", \"status\": \"") < 0 ||
        put_raw(o, value) < 0 || PUT(o, "\", \"start\": ") < 0)
        goto done;
    if (!have_entries ? PUT(o, "null") < 0 : put_entry(o, entries) < 0)
        goto done;
    if (PUT(o, ", \"end\": ") < 0)
        goto done;
    if (!have_entries ? PUT(o, "null") < 0 : put_entry(o, entries + FIELDS) < 0)
        goto done;
    if (PUT(o, ", \"current_lag\": ") < 0 || put_i64(o, current_lag) < 0 || PUT(o, ", \"complete\": ") < 0)
        goto done;
    if (put_float(o, PyFloat_AS_DOUBLE(f.complete)) < 0 || PUT(o, "}") < 0)
        goto done;
    rc = 1;
done:
    fields_clear(&f);
    if (rc != 1) {
        o->len = mark;
        o->ascii = ascii;
    }
    return rc;
}

static PyObject *partitions_json(PyObject *Py_UNUSED(self), PyObject *args) {
    PyObject *parts, *verdict_type, *statuses, *dumps;
    if (!PyArg_ParseTuple(args, "OO!O!O:partitions_json", &parts, &PyType_Type, &verdict_type, &PyTuple_Type,
                          &statuses, &dumps))
        return NULL;
    if (!PyList_CheckExact(parts))
        Py_RETURN_NONE; /* a subclass may iterate otherwise: the Python writes it */
    Py_ssize_t n = PyTuple_GET_SIZE(statuses);
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *pair = PyTuple_GET_ITEM(statuses, i);
        if (!PyTuple_CheckExact(pair) || PyTuple_GET_SIZE(pair) != 2) {
            PyErr_SetString(PyExc_TypeError, "statuses must be (member, value) pairs");
            return NULL;
        }
    }
    /* The list is held, and each item while it is written (items are exact verdicts, whose
     * fields are slots: reading them runs no Python code, but a dumps may). */
    Py_INCREF(parts);
    Out o = {NULL, 0, 0, 1};
    PyObject *result = NULL;
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(parts); i++) {
        if (i > 0 && PUT(&o, ", ") < 0)
            goto done;
        PyObject *p = PyList_GET_ITEM(parts, i);
        Py_INCREF(p);
        int rc = put_partition(&o, p, verdict_type, statuses, dumps);
        Py_DECREF(p);
        if (rc < 0)
            goto done;
        if (rc == 0) {
            result = Py_NewRef(Py_None);
            goto done;
        }
    }
    if (o.ascii) {
        result = PyUnicode_New(o.len, 127);
        if (result != NULL && o.len)
            memcpy(PyUnicode_1BYTE_DATA(result), o.data, (size_t)o.len);
    } else {
        result = PyUnicode_DecodeUTF8(o.data ? o.data : "", o.len, "strict");
    }
done:
    PyMem_Free(o.data);
    Py_DECREF(parts);
    return result;
}

static PyMethodDef methods[] = {
    {"partitions_json", partitions_json, METH_VARARGS,
     "partitions_json(parts, verdict_type, statuses, dumps) -> str | None: each PartitionVerdict of the list as "
     "Burrow's v3 JSON, joined by ', ' (burrow_v3._partition_json); None: the list is left to the Python."},
    {NULL, NULL, 0, NULL}};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "lagd.http._json",
                                    "A group's partitions as Burrow's v3 JSON, compiled (burrow_v3.group_status_json).",
                                    -1, methods, NULL, NULL, NULL, NULL};

/* The build passes the source's SHA-1 (hatch_build.py): lagd.runtime.compiled uses no build of another
 * source. */
#ifndef LAGD_SOURCE_SHA1
#define LAGD_SOURCE_SHA1 ""
#endif

PyMODINIT_FUNC PyInit__json(void) {
    struct {
        PyObject **name;
        const char *text;
    } names[] = {{&name_topic, "topic"},     {&name_partition, "partition"}, {&name_owner, "owner"},
                 {&name_client_id, "client_id"}, {&name_status, "status"},   {&name_entries, "entries"},
                 {&name_current_lag, "current_lag"}, {&name_complete, "complete"}};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if ((*names[i].name = PyUnicode_InternFromString(names[i].text)) == NULL)
            return NULL;
    PyObject *arrays = PyImport_ImportModule("array");
    if (arrays == NULL)
        return NULL;
    array_type = PyObject_GetAttrString(arrays, "array");
    Py_DECREF(arrays);
    if (array_type == NULL)
        return NULL;
    if (!PyType_Check(array_type)) {
        PyErr_SetString(PyExc_TypeError, "array.array is not a type");
        return NULL;
    }
    PyObject *m = PyModule_Create(&module);
    if (m == NULL)
        return NULL;
    PyObject *layout = Py_BuildValue("(iiiii)", FIELDS, OFFSET, TS, OBSERVED, LAG);
    if (layout == NULL || PyModule_AddStringConstant(m, "SOURCE_SHA1", LAGD_SOURCE_SHA1) < 0 ||
        PyModule_AddObject(m, "LAYOUT", layout) < 0) {
        Py_XDECREF(layout);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
