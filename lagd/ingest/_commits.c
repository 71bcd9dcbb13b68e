/* The offsets topic's usual record, compiled: an offset commit (key type 0 or 1, value v3, or
 * v4 as Kafka 4 writes every commit: no tagged field but the topic id, whose name the KIP-848
 * fold already knows) of a
 * group the filter allows, on a partition of a topic already checked, read straight from
 * aiokafka's records into lagd's Commit events. That is what `offsets_topic.build_batch` does
 * for it in Python through `records.events_from_record`, `codec.commit_fields`,
 * `validate.EdgeLimits.commit_problem` and `GroupFilter.allows`; those were about a fifth of
 * lagd's CPU while it caught up on a backlog.
 *
 * `read_commits` reads records from an index on and stops at the first one it does not read
 * exactly as that Python would (any other record type or value version, a record any limit
 * refuses, a topic whose name was not checked yet), returning its index:
 * the Python reads that one (counting, logging and skipping what it refuses) and calls again
 * past it. So records keep their order and the Python keeps every decision but the common one.
 *
 * Optional: the build compiles it where a C compiler is found (hatch_build.py); without it lagd
 * runs the Python, which reads every record the same way (tests/test_commits_c.py compares them).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>

static PyObject *name_key, *name_value, *name_offset;

static inline uint16_t be16(const unsigned char *p) { return (uint16_t)((p[0] << 8) | p[1]); }

static inline uint32_t be32(const unsigned char *p) {
    return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | (uint32_t)p[3];
}

static inline int64_t be64(const unsigned char *p) {
    return (int64_t)(((uint64_t)be32(p) << 32) | (uint64_t)be32(p + 4));
}

/* An unsigned varint of at most 5 bytes at buf[*pos] (before end), as codec._Reader.uvarint
 * reads it; -1 where that raises (the Python then reads the record and says why). */
static inline int uvarint(const unsigned char *buf, Py_ssize_t end, Py_ssize_t *pos, uint32_t *out) {
    uint32_t result = 0;
    for (int shift = 0; shift <= 28; shift += 7) {
        if (*pos >= end)
            return -1;
        unsigned char b = buf[(*pos)++];
        result |= (uint32_t)(b & 0x7F) << shift;
        if (b < 0x80) {
            *out = result;
            return 0;
        }
    }
    return -1;
}

/* The offset and commit time of a value v3, or of a value v4 whose tagged fields are none or
 * the topic id alone (then at *topic_id), ending where the record ends; 0 where read, -1 where
 * the Python reads the value (any other version or layout). */
static int commit_value(const unsigned char *v, Py_ssize_t n, int64_t *offset, int64_t *ts,
                        const unsigned char **topic_id) {
    *topic_id = NULL;
    if (n < 16)
        return -1;
    if (be16(v) == 3) { /* offset, leader epoch, metadata (int16 length), commit time */
        int mlen = (int16_t)be16(v + 14);
        if (mlen < 0 || 16 + (Py_ssize_t)mlen + 8 > n)
            return -1;
        *offset = be64(v + 2);
        *ts = be64(v + 16 + mlen);
        return 0;
    }
    if (be16(v) != 4) /* offset, leader epoch, metadata (compact), commit time, tagged fields */
        return -1;
    Py_ssize_t p = 14;
    uint32_t mlen1, ntags, tag, size;
    if (uvarint(v, n, &p, &mlen1) < 0 || mlen1 == 0 || (Py_ssize_t)(mlen1 - 1) > n - p - 9)
        return -1; /* a null metadata is refused by the Python */
    p += (Py_ssize_t)(mlen1 - 1);
    *offset = be64(v + 2);
    *ts = be64(v + p);
    p += 8;
    if (uvarint(v, n, &p, &ntags) < 0 || ntags > 1)
        return -1;
    if (ntags == 1) {
        if (uvarint(v, n, &p, &tag) < 0 || tag != 0 || uvarint(v, n, &p, &size) < 0 || size != 16 || n - p != 16)
            return -1;
        *topic_id = v + p;
        return 0;
    }
    return p == n ? 0 : -1;
}

/* Drop the oldest keys of `keys` (a dict keeps its insertion order), as codec._evict_oldest
 * does: the cache's bound is kept a 64th at a time. Cleared whole when full, the cache of
 * 262,144 keys held the loop 15-17 ms at a time at 1M group-partitions (bench_http), where it
 * holds a quarter of the keys in use. 0, or -1 with an exception. */
static int evict_oldest(PyObject *keys, Py_ssize_t keys_max) {
    Py_ssize_t n = keys_max / 64 + 1, pos = 0;
    PyObject *old = PyList_New(0), *key, *value;
    if (old == NULL)
        return -1;
    while (PyList_GET_SIZE(old) < n && PyDict_Next(keys, &pos, &key, &value))
        if (PyList_Append(old, key) < 0) {
            Py_DECREF(old);
            return -1;
        }
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(old); i++)
        if (PyDict_DelItem(keys, PyList_GET_ITEM(old, i)) < 0) {
            Py_DECREF(old);
            return -1;
        }
    Py_DECREF(old);
    return 0;
}

/* A commit key's (group, topic, partition, key type) from `keys` (the reader's CommitKeys.known, a new
 * key decoded and added as CommitKeys.fields does): a new reference; NULL without an exception
 * where the key is not one the Python would read as a commit's (it reads and refuses it). */
static PyObject *commit_key(PyObject *keys, PyObject *key, Py_ssize_t keys_max) {
    PyObject *k = PyDict_GetItemWithError(keys, key);
    if (k != NULL) {
        if (!PyTuple_CheckExact(k) || PyTuple_GET_SIZE(k) != 4 || !PyUnicode_CheckExact(PyTuple_GET_ITEM(k, 0)) ||
            !PyUnicode_CheckExact(PyTuple_GET_ITEM(k, 1)) || !PyLong_CheckExact(PyTuple_GET_ITEM(k, 2)))
            return NULL; /* not what codec keeps: the Python reads it */
        Py_INCREF(k);
        return k;
    }
    if (PyErr_Occurred())
        return NULL;
    const unsigned char *b = (const unsigned char *)PyBytes_AS_STRING(key);
    Py_ssize_t n = PyBytes_GET_SIZE(key);
    if (n < 4)
        return NULL;
    int rtype = (int16_t)be16(b), glen = (int16_t)be16(b + 2);
    if ((rtype != 0 && rtype != 1) || glen < 0)
        return NULL;
    Py_ssize_t p = 4 + (Py_ssize_t)glen;
    if (p + 2 > n)
        return NULL;
    int tlen = (int16_t)be16(b + p);
    if (tlen < 0)
        return NULL;
    Py_ssize_t q = p + 2 + (Py_ssize_t)tlen;
    if (q + 4 > n)
        return NULL;
    PyObject *group = PyUnicode_DecodeUTF8((const char *)b + 4, glen, "replace");
    PyObject *topic = group == NULL ? NULL : PyUnicode_DecodeUTF8((const char *)b + p + 2, tlen, "replace");
    PyObject *partition = topic == NULL ? NULL : PyLong_FromLong((long)(int32_t)be32(b + q));
    PyObject *kind = partition == NULL ? NULL : PyLong_FromLong(rtype);
    if (kind != NULL) {
        PyUnicode_InternInPlace(&group);
        PyUnicode_InternInPlace(&topic);
        k = PyTuple_Pack(4, group, topic, partition, kind);
        /* two str and two int: out of the collector's sight, as its first pass would put it. At 1M
         * group-partitions most commits miss this bounded cache, and 1,000-2,000 new keys were
         * in every young collection under 20,000 commits/s (bench_http). */
        if (k != NULL)
            PyObject_GC_UnTrack(k);
    }
    Py_XDECREF(group);
    Py_XDECREF(topic);
    Py_XDECREF(partition);
    Py_XDECREF(kind);
    if (k == NULL)
        return NULL;
    if (PyDict_GET_SIZE(keys) >= keys_max && evict_oldest(keys, keys_max) < 0) {
        Py_DECREF(k);
        return NULL;
    }
    if (PyDict_SetItem(keys, key, k) < 0) {
        Py_DECREF(k);
        return NULL;
    }
    return k;
}

/* 1: `group` may be applied by EdgeLimits.commit_problem's own short path (a short enough name
 * without NUL); 0: the Python asks the long way; -1: an exception. */
static int group_ok(PyObject *group, Py_ssize_t max_group_bytes) {
    Py_ssize_t len = PyUnicode_GET_LENGTH(group);
    if (max_group_bytes < 0 || len > max_group_bytes / 4) /* len * 4 <= max_group_bytes, without overflow */
        return 0;
    Py_ssize_t nul = PyUnicode_FindChar(group, 0, 0, len, 1);
    return nul == -2 ? -1 : nul == -1;
}

/* A Commit built as tuple.__new__(Commit, fields) builds one: a named tuple (a class of tuple's
 * own layout, made in Python: not a C struct sequence, whose items it frees by its own count). */
static int is_named_tuple(PyTypeObject *commit) {
    if (commit->tp_base != &PyTuple_Type || !(commit->tp_flags & Py_TPFLAGS_HEAPTYPE) ||
        commit->tp_basicsize != PyTuple_Type.tp_basicsize || commit->tp_itemsize != PyTuple_Type.tp_itemsize ||
        commit->tp_dictoffset != 0)
        return 0;
    PyObject *fields = PyObject_GetAttrString((PyObject *)commit, "_fields");
    int ok = fields != NULL && PyTuple_CheckExact(fields) && PyTuple_GET_SIZE(fields) == 8;
    Py_XDECREF(fields);
    PyErr_Clear();
    return ok;
}

/* An exact int argument as a C integer: 0, or -1 and an exception. */
static int int_arg(PyObject *arg, long long *out) {
    if (!PyLong_CheckExact(arg)) {
        PyErr_SetString(PyExc_TypeError, "read_commits: its numbers must be ints");
        return -1;
    }
    *out = PyLong_AsLongLong(arg);
    return *out == -1 && PyErr_Occurred() ? -1 : 0;
}

static PyObject *read_commits(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    if (nargs != 18) {
        PyErr_SetString(PyExc_TypeError,
                        "read_commits(records, start, out, keys, keys_max, allowed, allows, partition_counts, "
                        "topics_ok, max_group_bytes, max_offset, oldest_ts, newest_ts, cluster, observed, commit, "
                        "tally, topic_names)");
        return NULL;
    }
    PyObject *topic_names = args[17];
    if (topic_names != Py_None && !PyDict_CheckExact(topic_names)) {
        PyErr_SetString(PyExc_TypeError, "read_commits: topic_names must be a dict or None");
        return NULL;
    }
    PyObject *records = args[0], *out = args[2], *keys = args[3], *allowed = args[5], *allows = args[6];
    PyObject *counts = args[7], *topics_ok = args[8], *cluster = args[13], *observed = args[14], *tally = args[16];
    PyTypeObject *commit = (PyTypeObject *)args[15];
    if (!PyList_CheckExact(records) || !PyList_CheckExact(out) || !PyDict_CheckExact(keys) ||
        !PyDict_CheckExact(allowed) || !PyDict_CheckExact(counts) || !PyAnySet_CheckExact(topics_ok) ||
        !PyUnicode_CheckExact(cluster) || !PyLong_CheckExact(observed) || !PyType_Check(args[15]) ||
        !PyList_CheckExact(tally) || PyList_GET_SIZE(tally) != 2 || !PyLong_CheckExact(PyList_GET_ITEM(tally, 0)) ||
        !PyLong_CheckExact(PyList_GET_ITEM(tally, 1))) {
        PyErr_SetString(PyExc_TypeError, "read_commits: records and out lists, keys, allowed and partition_counts "
                                         "dicts, topics_ok a set, cluster a str, observed an int, commit a type, "
                                         "tally a list of two ints");
        return NULL;
    }
    if (!is_named_tuple(commit)) {
        PyErr_SetString(PyExc_TypeError, "read_commits: commit must be a named tuple type of 8 fields");
        return NULL;
    }
    long long start, keys_max, max_group_bytes, max_offset, oldest, newest;
    if (int_arg(args[1], &start) < 0 || int_arg(args[4], &keys_max) < 0 || int_arg(args[9], &max_group_bytes) < 0 ||
        int_arg(args[10], &max_offset) < 0 || int_arg(args[11], &oldest) < 0 || int_arg(args[12], &newest) < 0)
        return NULL;
    if (start < 0 || start > PY_SSIZE_T_MAX || keys_max < 0 || keys_max > PY_SSIZE_T_MAX) {
        PyErr_SetString(PyExc_IndexError, "read_commits: start and keys_max must be >= 0");
        return NULL;
    }
    if (max_group_bytes > PY_SSIZE_T_MAX)
        max_group_bytes = PY_SSIZE_T_MAX; /* no name is that long */
    Py_ssize_t read = 0, filtered = 0, i = (Py_ssize_t)start;
    Py_ssize_t end = PyList_GET_SIZE(records); /* the records given: none appended meanwhile */
    int failed = 0;
    for (; i < end && i < PyList_GET_SIZE(records); i++) {
        PyObject *rec = PyList_GET_ITEM(records, i);
        Py_INCREF(rec);
        PyObject *key = PyObject_GetAttr(rec, name_key);
        PyObject *value = key == NULL ? NULL : PyObject_GetAttr(rec, name_value);
        PyObject *order = value == NULL ? NULL : PyObject_GetAttr(rec, name_offset);
        Py_DECREF(rec);
        PyObject *k = NULL, *event = NULL;
        int done = 0; /* 1: read (applied or filtered), 0: the Python reads it, -1: an exception */
        if (order == NULL) {
            if (!PyErr_ExceptionMatches(PyExc_AttributeError)) {
                done = -1;
                goto next;
            }
            PyErr_Clear(); /* the Python meets the same record and says what is wrong with it */
            goto next;
        }
        if (!PyBytes_CheckExact(key) || !PyBytes_CheckExact(value) || !PyLong_CheckExact(order) ||
            PyBytes_GET_SIZE(key) < 2 || PyBytes_AS_STRING(key)[0] != 0 ||
            (PyBytes_AS_STRING(key)[1] != 0 && PyBytes_AS_STRING(key)[1] != 1))
            goto next;
        /* the value (v3, or v4): its offset and commit time; the metadata is not kept */
        int64_t offset, ts;
        const unsigned char *topic_id;
        if (commit_value((const unsigned char *)PyBytes_AS_STRING(value), PyBytes_GET_SIZE(value), &offset, &ts,
                         &topic_id) < 0)
            goto next;
        /* EdgeLimits.commit_problem's checks, its short path only */
        if (offset < 0 || offset >= max_offset || ts < oldest || ts > newest)
            goto next;
        k = commit_key(keys, key, (Py_ssize_t)keys_max);
        if (k == NULL) {
            done = PyErr_Occurred() ? -1 : 0;
            goto next;
        }
        PyObject *group = PyTuple_GET_ITEM(k, 0), *topic = PyTuple_GET_ITEM(k, 1), *partition = PyTuple_GET_ITEM(k, 2);
        if (topic_id != NULL && topic_names != Py_None) {
            /* a topic id the KIP-848 fold does not know by this name yet: the Python learns it */
            PyObject *id = PyBytes_FromStringAndSize((const char *)topic_id, 16);
            PyObject *known = id == NULL ? NULL : PyDict_GetItemWithError(topic_names, id);
            Py_XDECREF(id);
            int same = known == NULL ? 0 : PyObject_RichCompareBool(known, topic, Py_EQ);
            if (same != 1) {
                done = PyErr_Occurred() ? -1 : 0;
                goto next;
            }
        }
        PyObject *count = PyDict_GetItemWithError(counts, topic);
        if (count == NULL || !PyLong_CheckExact(count)) {
            done = PyErr_Occurred() ? -1 : 0;
            goto next;
        }
        int overflow = 0;
        long long p = PyLong_AsLongLongAndOverflow(partition, &overflow), c = PyLong_AsLongLongAndOverflow(count, &overflow);
        if (overflow || p < 0 || p >= c)
            goto next;
        int ok = PySet_Contains(topics_ok, topic);
        if (ok == 1)
            ok = group_ok(group, (Py_ssize_t)max_group_bytes);
        if (ok != 1) {
            done = ok;
            goto next;
        }
        /* the group filter: its cache, else the filter itself (which fills the cache) */
        PyObject *allow = PyDict_GetItemWithError(allowed, group);
        if (allow != NULL && allow != Py_None) /* None: not judged yet, as GroupFilter.allows reads it */
            Py_INCREF(allow);
        else if (!PyErr_Occurred())
            allow = PyObject_CallOneArg(allows, group);
        int yes = allow == NULL ? -1 : PyObject_IsTrue(allow);
        Py_XDECREF(allow);
        if (yes < 0) {
            done = -1;
            goto next;
        }
        done = 1;
        if (!yes) {
            filtered++;
            goto next;
        }
        PyObject *offset_obj = PyLong_FromLongLong(offset), *ts_obj = PyLong_FromLongLong(ts);
        if (offset_obj != NULL && ts_obj != NULL)
            event = commit->tp_alloc(commit, 8);
        if (event == NULL) {
            Py_XDECREF(offset_obj);
            Py_XDECREF(ts_obj);
            done = -1;
            goto next;
        }
#if PY_VERSION_HEX >= 0x030E0000
        ((PyTupleObject *)event)->ob_hash = -1; /* not hashed yet, as tuple_subtype_new leaves it */
#endif
        PyObject *fields[8] = {cluster, group, topic, partition, offset_obj, order, ts_obj, observed};
        int atomic = 1;
        for (int f = 0; f < 8; f++) {
            if (f != 4 && f != 6)
                Py_INCREF(fields[f]);
            PyTuple_SET_ITEM(event, f, fields[f]);
            atomic &= PyUnicode_CheckExact(fields[f]) || PyLong_CheckExact(fields[f]);
        }
        /* A Commit of str and int refers to nothing that could refer back to it: out of the
         * collector's sight. Hundreds of them wait between the reader and apply at any time,
         * and each young collection walked them (a tenth or more of its objects at 20,000
         * commits/s); CPython untracks such plain tuples itself, but not a subclass's. Every
         * field is an exact str or int by the checks above; `atomic` keeps it so if they change. */
        if (atomic)
            PyObject_GC_UnTrack(event);
        if (PyList_Append(out, event) < 0)
            done = -1;
    next:
        Py_XDECREF(event);
        Py_XDECREF(k);
        Py_XDECREF(key);
        Py_XDECREF(value);
        Py_XDECREF(order);
        if (done < 0) {
            failed = 1;
            break;
        }
        if (done == 0)
            break;
        read++;
    }
    /* what was read is counted even when a record raised (its events are in `out` already) */
    PyObject *type, *value, *tb;
    PyErr_Fetch(&type, &value, &tb);
    Py_ssize_t add[2] = {read, filtered};
    for (int t = 0; t < 2; t++) {
        if (add[t] == 0)
            continue;
        if (PyList_GET_SIZE(tally) != 2) { /* changed by the filter meanwhile */
            PyErr_SetString(PyExc_TypeError, "read_commits: tally must stay a list of two ints");
            failed = 1;
            break;
        }
        PyObject *n = PyLong_FromSsize_t(add[t]);
        PyObject *sum = n == NULL ? NULL : PyNumber_Add(PyList_GET_ITEM(tally, t), n);
        Py_XDECREF(n);
        if (sum == NULL || PyList_SetItem(tally, t, sum) < 0) {
            failed = 1;
            break;
        }
    }
    if (type != NULL) {
        PyErr_Clear();
        PyErr_Restore(type, value, tb); /* the first exception is the one to tell */
    }
    return failed ? NULL : PyLong_FromSsize_t(i);
}

static PyMethodDef methods[] = {
    {"read_commits", (PyCFunction)(void (*)(void))read_commits, METH_FASTCALL,
     "read_commits(records, start, out, keys, keys_max, allowed, allows, partition_counts, topics_ok, "
     "max_group_bytes, max_offset, oldest_ts, newest_ts, cluster, observed, commit, tally, topic_names) -> stop: "
     "appends the "
     "Commit of each record from records[start] on that is a usual offset commit passing the limits and the filter "
     "(filtered ones are only counted), up to the first record only the Python reads, whose index is `stop` "
     "(a v4 commit whose topic id topic_names, the KIP-848 fold's, does not name as its topic among them) "
     "(len(records) when none); adds the records read and those filtered to tally[0] and tally[1], even when it "
     "raises."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "lagd.ingest._commits",
                                    "The offsets topic's usual record read into a Commit, compiled (offsets_topic).",
                                    -1, methods, NULL, NULL, NULL, NULL};

/* The SHA-1 of the source this was built from (hatch_build.py passes it): lagd.runtime.compiled refuses a
 * build of another source, such as one left behind after this file changed. */
#ifndef LAGD_SOURCE_SHA1
#define LAGD_SOURCE_SHA1 ""
#endif

PyMODINIT_FUNC PyInit__commits(void) {
    name_key = PyUnicode_InternFromString("key");
    name_value = PyUnicode_InternFromString("value");
    name_offset = PyUnicode_InternFromString("offset");
    if (name_key == NULL || name_value == NULL || name_offset == NULL)
        return NULL;
    PyObject *m = PyModule_Create(&module);
    if (m != NULL && PyModule_AddStringConstant(m, "SOURCE_SHA1", LAGD_SOURCE_SHA1) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
