/* A commit applied to the state, compiled: `State._commit` (windows.py) for the usual commit,
 * one newer than the newest of a window the state already holds, of a group with no tombstone.
 * That is what a running daemon applies almost every time, and State._commit was the largest
 * single cost of catching up on a backlog once the records were read compiled (_commits.c).
 *
 * `apply_commits` applies events from an index on and stops at the first one it does not apply
 * exactly as State._commit would (another event type, a new group, topic or partition, a
 * commit at or older than the window's newest, a tombstone, numbers past int64), returning its
 * index: the Python applies that one and calls again past it, so events keep their order.
 *
 * `drain_windows` is Drain.step's copy of the changed windows into the bytes the store writes
 * (window_bytes), the other half of a commit's cost while the daemon keeps up.
 *
 * The window layout (fields per entry and their order) is lagd.state.windows' one definition:
 * this code holds a copy, `LAYOUT`, which windows.py compares with its own before using it.
 *
 * Optional: the build compiles it where a C compiler is found (hatch_build.py); without it lagd
 * applies every commit in Python, with the same result (tests/test_apply_c.py compares them).
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

static PyObject *name_tombstones, *name_groups, *name_deleted, *name_windows, *name_log_end, *name_offsets;
static PyObject *name_last_commit, *name_newest_commit, *name_seq, *name_state_seq, *name_dirty, *name_changes;
static PyObject *name_commit_history, *name_frombytes, *one;

/* An attribute that must be a dict (a new reference); NULL without an exception: it is not. */
static PyObject *dict_attr(PyObject *obj, PyObject *name) {
    PyObject *d = PyObject_GetAttr(obj, name);
    if (d != NULL && !PyDict_CheckExact(d))
        Py_CLEAR(d);
    return d;
}

/* The newest log-end offset of `topic`/`partition` in `log_end` (cluster's), or 0 with *found 0:
 * none kept. -1: an exception. */
static int newest_log_end(PyObject *log_end, PyObject *topic, PyObject *partition, int64_t *out, int *found) {
    *found = 0;
    PyObject *ends = PyDict_GetItemWithError(log_end, topic);
    if (ends == NULL)
        return PyErr_Occurred() ? -1 : 0;
    if (!PyDict_CheckExact(ends))
        return 1; /* not what the state keeps: the Python applies it */
    Py_INCREF(ends); /* held: a key's comparison may run Python code */
    PyObject *le = PyDict_GetItemWithError(ends, partition);
    Py_XINCREF(le);
    Py_DECREF(ends);
    if (le == NULL)
        return PyErr_Occurred() ? -1 : 0;
    if (le == Py_None) { /* as none kept, as State._commit reads it */
        Py_DECREF(le);
        return 0;
    }
    PyObject *offsets = PyObject_GetAttr(le, name_offsets);
    Py_DECREF(le);
    if (offsets == NULL)
        return -1;
    Py_buffer view;
    int rc = 0;
    if (PyObject_GetBuffer(offsets, &view, PyBUF_FORMAT | PyBUF_C_CONTIGUOUS) < 0) {
        PyErr_Clear();
        rc = 1;
    } else {
        if (view.itemsize != 8 || view.format == NULL || strcmp(view.format, "q") != 0)
            rc = 1;
        else if (view.len >= 8) {
            *out = ((const int64_t *)view.buf)[view.len / 8 - 1];
            *found = 1;
        }
        PyBuffer_Release(&view);
    }
    Py_DECREF(offsets);
    return rc;
}

/* History rows of the commits applied in one call, in CommitRows' columns (lagd.state.history),
 * added to the state's CommitRows in one go before the call returns (`flush_rows`): adding them
 * one by one through CommitRows.add cost as much as the rest of the apply. */
typedef struct {
    int64_t *ts, *offset, *lag, *observed;
    int32_t *partition;
    PyObject *clusters, *groups, *topics; /* lists */
    Py_ssize_t n, cap;
} Rows;

typedef struct {
    PyObject *state, *commit;
    Py_ssize_t intervals;
    int64_t min_distance, window_step;
    int history;
    int pauses; /* State.pause_settings is set: a commit after a long group silence goes to the Python */
    int64_t pause_min, pause_cadences; /* its min_ms and cadences */
    Rows rows;
} Settings;

static int add_row(Rows *r, int64_t ts, PyObject *cluster, PyObject *group, PyObject *topic, int32_t partition,
                   int64_t offset, int64_t lag, int64_t observed) {
    if (r->n == r->cap) {
        Py_ssize_t cap = r->cap ? 2 * r->cap : 512;
        int64_t *cols[4] = {r->ts, r->offset, r->lag, r->observed};
        for (int c = 0; c < 4; c++) {
            int64_t *grown = PyMem_Realloc(cols[c], sizeof(int64_t) * (size_t)cap);
            if (grown == NULL) {
                PyErr_NoMemory();
                return -1;
            }
            cols[c] = grown;
            if (c == 0) r->ts = grown;
            else if (c == 1) r->offset = grown;
            else if (c == 2) r->lag = grown;
            else r->observed = grown;
        }
        int32_t *parts = PyMem_Realloc(r->partition, sizeof(int32_t) * (size_t)cap);
        if (parts == NULL) {
            PyErr_NoMemory();
            return -1;
        }
        r->partition = parts;
        r->cap = cap;
    }
    if (PyList_Append(r->clusters, cluster) < 0 || PyList_Append(r->groups, group) < 0 ||
        PyList_Append(r->topics, topic) < 0)
        return -1;
    r->ts[r->n] = ts;
    r->offset[r->n] = offset;
    r->lag[r->n] = lag;
    r->observed[r->n] = observed;
    r->partition[r->n] = partition;
    r->n++;
    return 0;
}

/* Is `column` an array of this typecode (CommitRows' layout)? 1 yes, 0 no, -1 an exception. */
static int is_array_of(PyObject *column, const char *format) {
    Py_buffer view;
    if (PyObject_GetBuffer(column, &view, PyBUF_FORMAT) < 0) {
        PyErr_Clear();
        return 0;
    }
    int ok = view.format != NULL && strcmp(view.format, format) == 0;
    PyBuffer_Release(&view);
    return ok;
}

static const char *row_columns[8] = {"ts", "cluster", "group", "topic", "partition", "offset", "lag", "observed"};

/* The state's CommitRows, if its columns are as this code writes them (new reference); NULL
 * without an exception where they are not: then the history is left to the Python. */
static PyObject *history_rows(PyObject *state) {
    PyObject *changes = PyObject_GetAttr(state, name_changes);
    PyObject *history = changes == NULL ? NULL : PyObject_GetAttr(changes, name_commit_history);
    Py_XDECREF(changes);
    for (int c = 0; history != NULL && c < 8; c++) {
        PyObject *column = PyObject_GetAttrString(history, row_columns[c]);
        int ok = column == NULL ? -1
                 : (c >= 1 && c <= 3) ? PyList_CheckExact(column)
                 : is_array_of(column, c == 4 ? "i" : "q");
        Py_XDECREF(column);
        if (ok != 1) {
            if (ok < 0)
                PyErr_Clear();
            Py_CLEAR(history);
        }
    }
    return history;
}

/* Add the rows gathered to the state's CommitRows, and forget them: 0, or -1 and an exception. */
static int flush_rows(PyObject *state, Rows *r) {
    if (r->n == 0)
        return 0;
    PyObject *history = history_rows(state);
    if (history == NULL) {
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_TypeError, "State._changes.commit_history changed its columns while applying");
        return -1;
    }
    int rc = 0;
    for (int c = 0; rc == 0 && c < 8; c++) {
        PyObject *column = PyObject_GetAttrString(history, row_columns[c]);
        if (column == NULL) {
            rc = -1;
            break;
        }
        if (c >= 1 && c <= 3) {
            PyObject *rows = c == 1 ? r->clusters : c == 2 ? r->groups : r->topics;
            rc = PyList_SetSlice(column, PY_SSIZE_T_MAX, PY_SSIZE_T_MAX, rows);
        } else {
            const void *data = c == 0 ? (const void *)r->ts : c == 4 ? (const void *)r->partition
                             : c == 5 ? (const void *)r->offset : c == 6 ? (const void *)r->lag
                             : (const void *)r->observed;
            size_t size = c == 4 ? sizeof(int32_t) : sizeof(int64_t);
            PyObject *bytes = PyBytes_FromStringAndSize(data, (Py_ssize_t)(size * (size_t)r->n));
            PyObject *done = bytes == NULL ? NULL : PyObject_CallMethodOneArg(column, name_frombytes, bytes);
            Py_XDECREF(bytes);
            rc = done == NULL ? -1 : 0;
            Py_XDECREF(done);
        }
        Py_DECREF(column);
    }
    Py_DECREF(history);
    r->n = 0;
    if (PyList_SetSlice(r->clusters, 0, PY_SSIZE_T_MAX, NULL) < 0 || PyList_SetSlice(r->groups, 0, PY_SSIZE_T_MAX, NULL) < 0 ||
        PyList_SetSlice(r->topics, 0, PY_SSIZE_T_MAX, NULL) < 0)
        rc = -1;
    return rc;
}

/* State._commit for one event: 1 applied, 0 left to the Python (nothing changed), -1 an exception
 * (nothing changed, or the change is whole but for what failed after it: the caller re-applies
 * the batch event by event, which applying twice allows). */
static int apply_one(Settings *s, PyObject *clusters, PyObject *ev) {
    if (Py_TYPE(ev) != (PyTypeObject *)s->commit || PyTuple_GET_SIZE(ev) != 8)
        return 0;
    PyObject *cluster = PyTuple_GET_ITEM(ev, 0), *group = PyTuple_GET_ITEM(ev, 1), *topic = PyTuple_GET_ITEM(ev, 2);
    PyObject *partition = PyTuple_GET_ITEM(ev, 3), *offset_obj = PyTuple_GET_ITEM(ev, 4);
    PyObject *order_obj = PyTuple_GET_ITEM(ev, 5), *ts_obj = PyTuple_GET_ITEM(ev, 6);
    PyObject *observed_obj = PyTuple_GET_ITEM(ev, 7);
    if (!PyLong_CheckExact(offset_obj) || !PyLong_CheckExact(order_obj) || !PyLong_CheckExact(ts_obj) ||
        !PyLong_CheckExact(observed_obj) || !PyUnicode_CheckExact(cluster) || !PyUnicode_CheckExact(group) ||
        !PyUnicode_CheckExact(topic) || !PyLong_CheckExact(partition))
        return 0;
    int overflow = 0, o2 = 0, o3 = 0, o4 = 0;
    int64_t offset = PyLong_AsLongLongAndOverflow(offset_obj, &overflow);
    int64_t order = PyLong_AsLongLongAndOverflow(order_obj, &o2);
    int64_t ts = PyLong_AsLongLongAndOverflow(ts_obj, &o3);
    PyLong_AsLongLongAndOverflow(observed_obj, &o4);
    if (overflow || o2 || o3 || o4 || offset < 0)
        return 0; /* State._commit refuses it (ValueError) */
    long long part = 0;
    if (s->history) {
        /* CommitRows keeps partitions as int32: the Python's add refuses others (OverflowError) */
        if (!PyLong_CheckExact(partition))
            return 0;
        part = PyLong_AsLongLongAndOverflow(partition, &overflow);
        if (overflow || part < INT32_MIN || part > INT32_MAX)
            return 0;
    }
    PyObject *cs = PyDict_GetItemWithError(clusters, cluster);
    if (cs == NULL)
        return PyErr_Occurred() ? -1 : 0;
    Py_INCREF(cs);
    int rc = -1;
    PyObject *tombstones = NULL, *groups = NULL, *gs = NULL, *deleted = NULL, *windows = NULL, *log_end = NULL;
    PyObject *arr = NULL, *key = NULL, *seq = NULL, *parts = NULL, *dirty = NULL;
    int64_t *kept = NULL;
    Py_buffer view;
    int viewing = 0;
    if ((tombstones = dict_attr(cs, name_tombstones)) == NULL || (groups = dict_attr(cs, name_groups)) == NULL ||
        (log_end = dict_attr(cs, name_log_end)) == NULL)
        goto handback;
    if (PyDict_GET_SIZE(tombstones) != 0) {
        PyObject *tomb = PyDict_GetItemWithError(tombstones, group);
        if (tomb != NULL || PyErr_Occurred())
            goto handback; /* a deleted group: the Python weighs the tombstone */
    }
    gs = PyDict_GetItemWithError(groups, group);
    if (gs == NULL)
        goto handback; /* a new group */
    Py_INCREF(gs);
    if ((deleted = PyObject_GetAttr(gs, name_deleted)) == NULL || deleted != Py_None)
        goto handback; /* offset tombstones: the Python weighs them */
    if ((windows = dict_attr(gs, name_windows)) == NULL)
        goto handback;
    parts = PyDict_GetItemWithError(windows, topic);
    if (parts == NULL || !PyDict_CheckExact(parts)) {
        parts = NULL;
        goto handback; /* a new topic of the group */
    }
    Py_INCREF(parts); /* held: a key's comparison may run Python code */
    arr = PyDict_GetItemWithError(parts, partition);
    if (arr == NULL)
        goto handback; /* a new partition */
    Py_INCREF(arr);
    if (PyObject_GetBuffer(arr, &view, PyBUF_FORMAT | PyBUF_WRITABLE | PyBUF_C_CONTIGUOUS) < 0) {
        PyErr_Clear();
        goto handback;
    }
    viewing = 1;
    if (view.itemsize != 8 || view.format == NULL || strcmp(view.format, "q") != 0 || view.len % (8 * FIELDS) != 0)
        goto handback;
    int64_t *a = (int64_t *)view.buf;
    Py_ssize_t n = view.len / (8 * FIELDS);
    if (n == 0 || order <= a[(n - 1) * FIELDS + ORDER])
        goto handback; /* an empty window, or a replayed or late commit: the Python places it */
    int64_t lag = NO_LAG, newest = 0;
    int found = 0, got = newest_log_end(log_end, topic, partition, &newest, &found);
    if (got != 0) {
        if (got > 0)
            goto handback;
        goto done;
    }
    if (found) {
        /* in 128 bits: a kept log end may be negative (a restored row), and then so is the difference */
        i128 behind = (i128)newest - (i128)offset;
        lag = behind < 0 ? 0 : (int64_t)behind;
    }
    /* the window as State._commit leaves it, worked out on a copy, then written back */
    kept = PyMem_Malloc(sizeof(int64_t) * FIELDS * (size_t)(n + 1));
    if (kept == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    memcpy(kept, a, sizeof(int64_t) * FIELDS * (size_t)n);
    Py_ssize_t m = n; /* entries in kept */
    i128 since = (i128)ts - (i128)kept[(m - 1) * FIELDS + TS];
    if (since >= 0 && since < (i128)s->min_distance) {
        /* min-distance: the newest entry takes the new offset, order and lag, keeps its time */
        kept[(m - 1) * FIELDS + OFFSET] = offset;
        kept[(m - 1) * FIELDS + ORDER] = order;
        kept[(m - 1) * FIELDS + LAG] = lag;
    } else {
        if (m >= 3 && s->window_step &&
            (i128)kept[(m - 2) * FIELDS + TS] - (i128)kept[(m - 3) * FIELDS + TS] < (i128)s->window_step) {
            /* window-step: the second newest is dropped, too close to its elder */
            memcpy(kept + (m - 2) * FIELDS, kept + (m - 1) * FIELDS, sizeof(int64_t) * FIELDS);
            m -= 1;
        }
        if (m >= s->intervals) {
            Py_ssize_t drop = m - s->intervals + 1;
            memmove(kept, kept + drop * FIELDS, sizeof(int64_t) * FIELDS * (size_t)(m - drop));
            m -= drop;
        }
        int64_t *e = kept + m * FIELDS;
        e[OFFSET] = offset;
        e[ORDER] = order;
        e[TS] = ts;
        e[OBSERVED] = PyLong_AsLongLong(observed_obj);
        e[LAG] = lag;
        m += 1;
    }
    /* What else changes is read and made ready before the window is written back, so that a
     * failure or an unexpected type leaves nothing half done (the Python then applies it). */
    PyObject *last = PyObject_GetAttr(gs, name_last_commit);
    if (last == NULL)
        goto done;
    if (!PyLong_CheckExact(last)) {
        Py_DECREF(last);
        goto handback;
    }
    int newer = PyObject_RichCompareBool(ts_obj, last, Py_GT), newest_too = 0;
    if (newer > 0 && s->pauses) {
        /* a group silence of pause-min and more than `cadences` of this partition's newest commit
         * intervals (lagd.state.pauses; State._commit asks the same): the Python checks for a pause */
        int o5 = 0;
        long long since = PyLong_AsLongLongAndOverflow(last, &o5);
        if (o5 != 0 || (since == -1 && PyErr_Occurred())) {
            PyErr_Clear();
            Py_DECREF(last);
            goto handback;
        }
        i128 gap = (i128)ts - (i128)since;
        i128 cadence = n > 1 ? (i128)a[(n - 1) * FIELDS + TS] - (i128)a[(n - 2) * FIELDS + TS] : 0;
        if (gap >= (i128)s->pause_min && gap > (i128)s->pause_cadences * cadence) {
            Py_DECREF(last);
            goto handback;
        }
    }
    Py_DECREF(last);
    if (newer < 0)
        goto done;
    if (newer) {
        PyObject *nc = PyObject_GetAttr(cs, name_newest_commit);
        if (nc == NULL)
            goto done;
        if (nc != Py_None && !PyLong_CheckExact(nc)) {
            Py_DECREF(nc);
            goto handback;
        }
        newest_too = nc == Py_None ? 1 : PyObject_RichCompareBool(ts_obj, nc, Py_GT);
        Py_DECREF(nc);
        if (newest_too < 0)
            goto done;
    }
    PyObject *old = PyObject_GetAttr(s->state, name_state_seq);
    if (old == NULL)
        goto done;
    if (!PyLong_CheckExact(old)) {
        Py_DECREF(old);
        goto handback;
    }
    seq = PyNumber_Add(old, one);
    Py_DECREF(old);
    if (seq == NULL || (dirty = PyObject_GetAttr(s->state, name_dirty)) == NULL)
        goto done;
    if (!PyDict_CheckExact(dirty))
        goto handback;
    if ((key = PyTuple_Pack(4, cluster, group, topic, partition)) == NULL)
        goto done;
    /* Three strs and an int (checked above) hold no reference back: out of the collector's sight,
     * as its first pass would put it, so the dirty dict and the drained windows keyed by it stay
     * untracked too (State._dirty_windows). */
    PyObject_GC_UnTrack(key);
    /* write it back: in place up to the array's length, then grown or cut to m entries */
    Py_ssize_t in_place = m < n ? m : n;
    memcpy(a, kept, sizeof(int64_t) * FIELDS * (size_t)in_place);
    PyBuffer_Release(&view);
    viewing = 0;
    if (m > n) {
        PyObject *tail = PyBytes_FromStringAndSize((const char *)(kept + n * FIELDS), sizeof(int64_t) * FIELDS);
        PyObject *r = tail == NULL ? NULL : PyObject_CallMethodOneArg(arr, name_frombytes, tail);
        Py_XDECREF(tail);
        if (r == NULL)
            goto done;
        Py_DECREF(r);
    } else if (m < n && PySequence_DelSlice(arr, m * FIELDS, n * FIELDS) < 0)
        goto done;
    /* the group's and the cluster's newest commit times, the change counters, the dirty window */
    if ((newer && PyObject_SetAttr(gs, name_last_commit, ts_obj) < 0) ||
        (newest_too && PyObject_SetAttr(cs, name_newest_commit, ts_obj) < 0) ||
        PyObject_SetAttr(s->state, name_state_seq, seq) < 0 || PyObject_SetAttr(gs, name_seq, seq) < 0 ||
        PyDict_SetItem(dirty, key, Py_None) < 0)
        goto done;
    if (s->history &&
        add_row(&s->rows, ts, cluster, group, topic, (int32_t)part, offset,
                kept[(m - 1) * FIELDS + LAG], /* the newest entry holds this commit whichever branch ran */
                PyLong_AsLongLong(observed_obj)) < 0)
        goto done;
    rc = 1;
    goto done;
handback:
    rc = PyErr_Occurred() ? -1 : 0;
done:
    if (viewing)
        PyBuffer_Release(&view);
    PyMem_Free(kept);
    Py_XDECREF(seq);
    Py_XDECREF(dirty);
    Py_XDECREF(key);
    Py_XDECREF(arr);
    Py_XDECREF(parts);
    Py_XDECREF(windows);
    Py_XDECREF(deleted);
    Py_XDECREF(gs);
    Py_XDECREF(log_end);
    Py_XDECREF(groups);
    Py_XDECREF(tombstones);
    Py_DECREF(cs);
    return rc;
}

static PyObject *apply_commits(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    (void)module;
    if (nargs != 9) {
        PyErr_SetString(PyExc_TypeError, "apply_commits(state, clusters, events, start, commit, intervals, "
                                         "min_distance_ms, window_step_ms, record_history)");
        return NULL;
    }
    Settings s = {.state = args[0], .commit = args[4]};
    PyObject *clusters = args[1], *events = args[2];
    if (!PyDict_CheckExact(clusters) || !PyList_CheckExact(events) || !PyType_Check(s.commit) ||
        !PyType_IsSubtype((PyTypeObject *)s.commit, &PyTuple_Type)) {
        PyErr_SetString(PyExc_TypeError, "apply_commits: clusters a dict, events a list, commit a named tuple type");
        return NULL;
    }
    for (int k = 3; k <= 8; k++)
        if (k != 4 && !PyLong_CheckExact(args[k]) && !(k == 8 && PyBool_Check(args[k]))) {
            PyErr_SetString(PyExc_TypeError, "apply_commits: start, the settings and record_history must be ints");
            return NULL;
        }
    Py_ssize_t start = PyLong_AsSsize_t(args[3]);
    if (start == -1 && PyErr_Occurred())
        return NULL;
    if ((s.intervals = PyLong_AsSsize_t(args[5])) == -1 && PyErr_Occurred())
        return NULL;
    if ((s.min_distance = PyLong_AsLongLong(args[6])) == -1 && PyErr_Occurred())
        return NULL;
    if ((s.window_step = PyLong_AsLongLong(args[7])) == -1 && PyErr_Occurred())
        return NULL;
    s.history = args[8] != Py_False && PyLong_AsLong(args[8]) != 0;
    if (PyErr_Occurred())
        return NULL;
    PyObject *pause_settings = PyObject_GetAttrString(s.state, "pause_settings");
    if (pause_settings == NULL)
        return NULL;
    s.pauses = pause_settings != Py_None;
    if (s.pauses) {
        PyObject *min_ms = PyObject_GetAttrString(pause_settings, "min_ms");
        PyObject *cadences = min_ms == NULL ? NULL : PyObject_GetAttrString(pause_settings, "cadences");
        int plain = cadences != NULL && PyLong_CheckExact(min_ms) && PyLong_CheckExact(cadences);
        if (plain) {
            s.pause_min = PyLong_AsLongLong(min_ms);
            s.pause_cadences = PyLong_AsLongLong(cadences);
        }
        Py_XDECREF(min_ms);
        Py_XDECREF(cadences);
        Py_DECREF(pause_settings);
        if (PyErr_Occurred()) {
            PyErr_Clear();
            plain = 0;
        }
        if (!plain)
            return PyLong_FromSsize_t(start); /* settings of another kind or past int64: the Python applies */
    } else
        Py_DECREF(pause_settings);
    if (start < 0 || s.intervals < 1) {
        PyErr_SetString(PyExc_ValueError, "apply_commits: start must be >= 0 and intervals >= 1");
        return NULL;
    }
    if (s.history) {
        PyObject *history = history_rows(s.state);
        if (history == NULL) {
            if (PyErr_Occurred())
                return NULL;
            return PyLong_FromSsize_t(start); /* history columns of another layout: the Python applies */
        }
        Py_DECREF(history);
        s.rows.clusters = PyList_New(0);
        s.rows.groups = PyList_New(0);
        s.rows.topics = PyList_New(0);
    }
    Py_ssize_t i = start;
    int failed = s.history && (s.rows.clusters == NULL || s.rows.groups == NULL || s.rows.topics == NULL);
    for (; !failed && i < PyList_GET_SIZE(events); i++) {
        PyObject *ev = PyList_GET_ITEM(events, i);
        Py_INCREF(ev);
        int rc = apply_one(&s, clusters, ev);
        Py_DECREF(ev);
        if (rc < 0)
            failed = 1;
        if (rc <= 0)
            break;
    }
    /* the rows of every commit applied, even when one failed (it is applied again, then a replay) */
    if (s.history && s.rows.n > 0) {
        PyObject *type, *value, *tb;
        PyErr_Fetch(&type, &value, &tb);
        if (flush_rows(s.state, &s.rows) < 0)
            failed = 1;
        if (type != NULL) {
            PyErr_Clear();
            PyErr_Restore(type, value, tb);
        }
    }
    PyMem_Free(s.rows.ts);
    PyMem_Free(s.rows.offset);
    PyMem_Free(s.rows.lag);
    PyMem_Free(s.rows.observed);
    PyMem_Free(s.rows.partition);
    Py_XDECREF(s.rows.clusters);
    Py_XDECREF(s.rows.groups);
    Py_XDECREF(s.rows.topics);
    return failed ? NULL : PyLong_FromSsize_t(i);
}

/* Drain.step's copy of changed windows, compiled: pops up to `n` keys (cluster, group, topic,
 * partition) off the end of `keys` and sets out[key] to the window as window_bytes makes it (its
 * int64s big-endian) or None where the state holds none. Stops early, the key left in place, at
 * one it does not copy as the Python would (not such a key, or a window not an array of int64):
 * returns how many it copied. */
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

static PyObject *drain_windows(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    (void)module;
    if (nargs != 4 || !PyDict_CheckExact(args[0]) || !PyList_CheckExact(args[1]) || !PyDict_CheckExact(args[2]) ||
        !PyLong_CheckExact(args[3])) {
        PyErr_SetString(PyExc_TypeError, "drain_windows(clusters: dict, keys: list, out: dict, n: int)");
        return NULL;
    }
    PyObject *clusters = args[0], *keys = args[1], *out = args[2];
    Py_ssize_t n = PyLong_AsSsize_t(args[3]);
    if (n == -1 && PyErr_Occurred())
        return NULL;
    Py_ssize_t copied = 0;
    while (copied < n && PyList_GET_SIZE(keys) > 0) {
        PyObject *key = PyList_GET_ITEM(keys, PyList_GET_SIZE(keys) - 1);
        if (!PyTuple_CheckExact(key) || PyTuple_GET_SIZE(key) != 4)
            break;
        Py_INCREF(key);
        PyObject *copy = NULL, *gs = NULL, *windows = NULL, *arr = NULL, *groups = NULL, *parts = NULL;
        int rc = -1; /* 1 copied, 0 left to the Python, -1 an exception */
        PyObject *cs = PyDict_GetItemWithError(clusters, PyTuple_GET_ITEM(key, 0));
        if (cs == NULL) {
            rc = PyErr_Occurred() ? -1 : 1; /* no such cluster: no window */
            goto set;
        }
        Py_INCREF(cs);
        groups = dict_attr(cs, name_groups);
        Py_DECREF(cs);
        if (groups == NULL) {
            rc = PyErr_Occurred() ? -1 : 0;
            goto set;
        }
        gs = PyDict_GetItemWithError(groups, PyTuple_GET_ITEM(key, 1));
        if (gs == NULL) {
            rc = PyErr_Occurred() ? -1 : 1;
            goto set;
        }
        Py_INCREF(gs);
        windows = dict_attr(gs, name_windows);
        if (windows == NULL) {
            rc = PyErr_Occurred() ? -1 : 0;
            goto set;
        }
        parts = PyDict_GetItemWithError(windows, PyTuple_GET_ITEM(key, 2));
        if (parts == NULL || (PyDict_CheckExact(parts) && PyDict_GET_SIZE(parts) == 0)) {
            parts = NULL;
            rc = PyErr_Occurred() ? -1 : 1;
            goto set;
        }
        if (!PyDict_CheckExact(parts)) {
            parts = NULL;
            rc = 0;
            goto set;
        }
        Py_INCREF(parts); /* held: a key's comparison may run Python code */
        arr = PyDict_GetItemWithError(parts, PyTuple_GET_ITEM(key, 3));
        if (arr == NULL) {
            rc = PyErr_Occurred() ? -1 : 1;
            goto set;
        }
        Py_INCREF(arr);
        Py_buffer view;
        if (PyObject_GetBuffer(arr, &view, PyBUF_FORMAT | PyBUF_C_CONTIGUOUS) < 0) {
            PyErr_Clear();
            rc = 0;
            goto set;
        }
        if (view.itemsize == 8 && view.format != NULL && strcmp(view.format, "q") == 0) {
            copy = PyBytes_FromStringAndSize(NULL, view.len);
            if (copy != NULL) {
                const uint64_t *from = (const uint64_t *)view.buf;
                unsigned char *to = (unsigned char *)PyBytes_AS_STRING(copy);
                for (Py_ssize_t k = 0; k < view.len / 8; k++)
                    put_be64(to + 8 * k, from[k]);
                rc = 1;
            }
        } else
            rc = 0;
        PyBuffer_Release(&view);
    set:
        if (rc == 1 && PyDict_SetItem(out, key, copy != NULL ? copy : Py_None) < 0)
            rc = -1;
        if (rc == 1) {
            /* pop the key: the last item, unless the dict code above changed the list */
            Py_ssize_t last = PyList_GET_SIZE(keys) - 1;
            if (last >= 0 && PyList_GET_ITEM(keys, last) == key && PyList_SetSlice(keys, last, last + 1, NULL) < 0)
                rc = -1;
        }
        Py_XDECREF(copy);
        Py_XDECREF(arr);
        Py_XDECREF(parts);
        Py_XDECREF(windows);
        Py_XDECREF(gs);
        Py_XDECREF(groups);
        Py_DECREF(key);
        if (rc < 0)
            return NULL;
        if (rc == 0)
            break;
        copied++;
    }
    return PyLong_FromSsize_t(copied);
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
    {"apply_commits", (PyCFunction)(void (*)(void))apply_commits, METH_FASTCALL,
     "apply_commits(state, clusters, events, start, commit, intervals, min_distance_ms, window_step_ms, "
     "record_history) -> stop: State._commit for each event from events[start] on, up to the first one only the "
     "Python applies, whose index is `stop` (len(events) when none)."},
    {"drain_windows", (PyCFunction)(void (*)(void))drain_windows, METH_FASTCALL,
     "drain_windows(clusters, keys, out, n) -> copied: Drain.step's copy of up to n changed windows (window_bytes), "
     "up to the first key only the Python copies."},
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
    PyObject **names[] = {&name_tombstones, &name_groups,       &name_deleted, &name_windows,     &name_log_end,
                          &name_offsets,    &name_last_commit,  &name_newest_commit, &name_seq, &name_state_seq,
                          &name_dirty,      &name_changes,      &name_commit_history, &name_frombytes};
    const char *strings[] = {"tombstones", "groups",      "deleted", "windows",         "log_end",
                             "offsets",    "last_commit", "newest_commit", "seq", "_seq",
                             "_dirty_windows", "_changes", "commit_history", "frombytes"};
    for (size_t k = 0; k < sizeof(names) / sizeof(names[0]); k++)
        if ((*names[k] = PyUnicode_InternFromString(strings[k])) == NULL)
            return NULL;
    if ((one = PyLong_FromLong(1)) == NULL)
        return NULL;
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
