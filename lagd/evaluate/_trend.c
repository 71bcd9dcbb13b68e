/* lagd's trend fit and lag moments, compiled: `lagd_fast._fit` (lagd_rules.lag_points_used,
 * spans_time, mann_kendall_z, lagd_fast._needs_slope and slope_fit) in one call, and
 * `lagd_fast._moments` with `LagdJudge._within_seconds` in another, with the same floating
 * point operations in the same order, so they answer exactly as the Python they stand in for
 * (tests/test_trend_c.py compares them on random windows). Fitting was about 60% of judging a
 * lagging partition from scratch in Python, and the moments about half of judging one a few
 * records behind (the common case of a healthy estate, judged afresh at every evaluation).
 *
 * Optional: the build compiles it where a C compiler is found (hatch_build.py); without it
 * lagd runs the Python. Where it cannot answer exactly as Python would (a coarse-tier read,
 * integers beyond a double's exact range) it returns None and the caller runs the Python.
 * The window layout (fields per entry, where the offset and time sit) comes from the caller:
 * lagd.state.windows holds its one definition.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>

#ifndef __SIZEOF_INT128__
#error "lagd's compiled rules code needs a 64-bit GCC or Clang (__int128); lagd runs the Python instead"
#endif
__extension__ typedef __int128 i128; /* exact products of two int64 differences */

#define EXACT (INT64_C(1) << 53) /* integers a double holds exactly up to this magnitude */
#define SMALL 64                 /* windows up to this many entries are fitted on the stack */
#define MAX_ENTRIES 4096         /* longer ones are left to the Python (their pairs would not fit) */

typedef struct {
    Py_buffer view;
    const int64_t *v;
    Py_ssize_t n;
} Int64s;

static int int64s(PyObject *obj, Int64s *out) {
    if (PyObject_GetBuffer(obj, &out->view, PyBUF_FORMAT | PyBUF_C_CONTIGUOUS) < 0)
        return -1;
    if (out->view.itemsize != 8 || out->view.format == NULL ||
        (out->view.format[0] != 'q' && out->view.format[0] != 'l') || out->view.format[1] != '\0') {
        PyBuffer_Release(&out->view);
        PyErr_SetString(PyExc_TypeError, "expected array('q')");
        return -1;
    }
    out->v = (const int64_t *)out->view.buf;
    out->n = out->view.len / 8;
    return 0;
}

/* A window and its partition's log-end offsets and times, all three or none (-1: an exception is
 * set): the samples' two arrays must be as long as each other. `release` gives them back. */
static int acquire(PyObject *window, PyObject *offsets, PyObject *ts, Int64s *arr, Int64s *o, Int64s *t) {
    if (int64s(window, arr) < 0)
        return -1;
    if (int64s(offsets, o) < 0) {
        PyBuffer_Release(&arr->view);
        return -1;
    }
    if (int64s(ts, t) < 0) {
        PyBuffer_Release(&arr->view);
        PyBuffer_Release(&o->view);
        return -1;
    }
    if (t->n != o->n) {
        PyErr_SetString(PyExc_ValueError, "log-end offsets and times differ in length");
        PyBuffer_Release(&arr->view);
        PyBuffer_Release(&o->view);
        PyBuffer_Release(&t->view);
        return -1;
    }
    return 0;
}

static void release(Int64s *arr, Int64s *o, Int64s *t) {
    PyBuffer_Release(&arr->view);
    PyBuffer_Release(&o->view);
    PyBuffer_Release(&t->view);
}

static int by_value(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* lagd_rules._median: sorts `values` in place */
static double median(double *values, Py_ssize_t m) {
    qsort(values, (size_t)m, sizeof(double), by_value);
    return m % 2 ? values[m / 2] : (values[m / 2 - 1] + values[m / 2]) / 2;
}

static int exact(int64_t x) { return x <= EXACT && x >= -EXACT; }

/* Argument conversions, each checked as it is made (-1: an exception is set). An integer past
 * int64 sets *declined instead (where only the Python answers). */
static int as_index(PyObject *obj, Py_ssize_t *out) {
    *out = PyLong_AsSsize_t(obj);
    return *out == -1 && PyErr_Occurred() ? -1 : 0;
}

static int as_int64(PyObject *obj, long long *out, int *declined) {
    int overflow = 0;
    *out = PyLong_AsLongLongAndOverflow(obj, &overflow);
    if (*out == -1 && PyErr_Occurred())
        return -1;
    if (overflow)
        *declined = 1;
    return 0;
}

static int as_double(PyObject *obj, double *out) {
    *out = PyFloat_AsDouble(obj);
    return *out == -1.0 && PyErr_Occurred() ? -1 : 0;
}

static int as_bool(PyObject *obj, int *out) {
    *out = PyObject_IsTrue(obj);
    return *out < 0 ? -1 : 0;
}

/* bisect.bisect_left(a, x, lo, hi) */
static Py_ssize_t bisect_left(const int64_t *a, int64_t x, Py_ssize_t lo, Py_ssize_t hi) {
    while (lo < hi) {
        Py_ssize_t mid = lo + (hi - lo) / 2;
        if (a[mid] < x)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

/* t[i-1] + (t[i] - t[i-1]) * (target - o[i-1]) / (o[i] - o[i-1]) as Python computes it from ints
 * (the product exact, the division correctly rounded): the same double when every term is an
 * exact double, which is checked. 0 where Python must answer: not exact, or `i` not inside the
 * samples (a run that is not sorted; lagd's never is, but the arrays come from the caller). */
static int interpolate(const int64_t *o, const int64_t *t, Py_ssize_t i, Py_ssize_t n, int64_t target, double *out) {
    if (i <= 0 || i >= n)
        return 0;
    int64_t o0 = o[i - 1], t0 = t[i - 1];
    i128 dt = (i128)t[i] - t0, doff = (i128)target - o0, den = (i128)o[i] - o0;
    if (dt > EXACT || dt < -EXACT || doff > EXACT || doff < -EXACT) {
        if (dt != 0 && doff != 0)
            return 0; /* the product is past 2**53 */
    }
    i128 num = dt * doff;
    if (num > EXACT || num < -EXACT || den > EXACT || den <= 0 || !exact(t0))
        return 0;
    *out = (double)t0 + (double)(int64_t)num / (double)(int64_t)den;
    return 1;
}

/* lagtime.reached_in: when the log end reached `target` (<= the newest sample) and whether that
 * is only a bound. 0 where Python must answer (the coarse tier, or not exact). */
static int reached_in(const int64_t *o, const int64_t *t, Py_ssize_t lo, Py_ssize_t n, int has_coarse,
                      int64_t target, double *at, int *bound) {
    if (target <= o[lo] && lo == 0 && has_coarse)
        return 0;
    Py_ssize_t i = bisect_left(o, target, lo, n);
    if (i <= lo) {
        if (!exact(t[lo]))
            return 0;
        *at = (double)t[lo];
        *bound = 1;
        return 1;
    }
    *bound = 0;
    return interpolate(o, t, i, n, target, at);
}

/* lagd_fast.read_from: the time of the oldest sample reached_in(target) reads */
static int64_t read_from(const int64_t *o, const int64_t *t, Py_ssize_t lo, Py_ssize_t n, int64_t target) {
    if (target > o[lo])
        return t[bisect_left(o, target, lo, n) - 1];
    return t[lo];
}

/* The lag points (xs, ys) and the time of the oldest sample they read (*used; *settled 0 when a
 * new sample may change them): lag_points_used. Returns the number of points, or -1 when Python
 * must answer (a coarse-tier read, or integers a double does not hold exactly). */
static Py_ssize_t lag_points(const Int64s *arr, Py_ssize_t fields, Py_ssize_t at_offset, Py_ssize_t at_ts,
                             const Int64s *offsets, const Int64s *ts, Py_ssize_t lo, int has_coarse, double *xs,
                             double *ys, int64_t *used, int *settled) {
    Py_ssize_t n = offsets->n, k = 0;
    *settled = 0;
    if (n <= lo)
        return 0;
    const int64_t *o = offsets->v, *t = ts->v;
    int64_t newest = o[n - 1], newest_ts = t[n - 1], oldest = o[lo];
    int no_coarse = lo > 0 || !has_coarse;
    *settled = 1;
    *used = newest_ts;
    for (Py_ssize_t b = 0; b + fields <= arr->n; b += fields) {
        int64_t at = arr->v[b + at_ts], offset = arr->v[b + at_offset];
        if (!exact(at) || offset == INT64_MAX)
            return -1;
        int64_t target = offset + 1;
        double passed;
        if (target > newest) {
            *settled = 0; /* the next sample settles it */
            if (at <= newest_ts) {
                xs[k] = (double)at / 1000.0;
                ys[k++] = 0.0;
            }
            continue;
        }
        if (target <= oldest) {
            if (*settled && t[lo] < *used)
                *used = t[lo];
            if (no_coarse)
                continue;
            return -1; /* reached_in reads the coarse tier */
        }
        Py_ssize_t i = bisect_left(o, target, lo, n);
        if (!interpolate(o, t, i, n, target, &passed))
            return -1;
        if (*settled && t[i - 1] < *used)
            *used = t[i - 1];
        xs[k] = (double)at / 1000.0;
        ys[k++] = (double)at > passed ? ((double)at - passed) / 1000.0 : 0.0;
    }
    return k;
}

static PyObject *fit(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    if (nargs != 15) {
        PyErr_SetString(PyExc_TypeError, "fit takes 15 arguments");
        return NULL;
    }
    Py_ssize_t fields, at_offset, at_ts, lo;
    int has_coarse, was_behind, declined = 0;
    long long used, min_points;
    double tie_s, z_enter, z_leave, allowed_s;
    if (as_index(args[1], &fields) || as_index(args[2], &at_offset) || as_index(args[3], &at_ts) ||
        as_index(args[6], &lo) || as_bool(args[7], &has_coarse) || as_int64(args[8], &used, &declined) ||
        as_double(args[9], &tie_s) || as_int64(args[10], &min_points, &declined) || as_double(args[11], &z_enter) ||
        as_double(args[12], &z_leave) || as_double(args[13], &allowed_s) || as_bool(args[14], &was_behind))
        return NULL;
    if (declined)
        Py_RETURN_NONE;
    if (fields <= 0 || at_offset < 0 || at_offset >= fields || at_ts < 0 || at_ts >= fields || lo < 0) {
        PyErr_SetString(PyExc_ValueError, "bad window layout or run start");
        return NULL;
    }
    Int64s arr, offsets, ts;
    if (acquire(args[0], args[4], args[5], &arr, &offsets, &ts) < 0)
        return NULL;
    PyObject *result = NULL;
    Py_ssize_t entries = arr.n / fields;
    double small[4 * SMALL + SMALL * (SMALL - 1) / 2];
    double *xs = small;
    if (entries > MAX_ENTRIES) {
        result = Py_NewRef(Py_None); /* no window is this long (storage.intervals): the Python answers */
        goto done;
    }
    if (entries > SMALL) {
        xs = PyMem_Malloc(sizeof(double) * (size_t)(4 * entries + entries * (entries - 1) / 2));
        if (xs == NULL) {
            PyErr_NoMemory();
            goto done;
        }
    }
    double *ys = xs + entries, *fitted = ys + entries, *spread = fitted + entries, *slopes = spread + entries;
    int64_t points_used = 0;
    int settled = 0;
    Py_ssize_t n = lag_points(&arr, fields, at_offset, at_ts, &offsets, &ts, lo, has_coarse, xs, ys, &points_used,
                              &settled);
    if (n < 0) {
        result = Py_NewRef(Py_None);
        goto done;
    }
    long long kept = settled ? (points_used < used ? points_used : used) : INT64_MIN;
    int spans = 0;
    for (Py_ssize_t i = 1; i < n && !spans; i++)
        spans = xs[i] > xs[i - 1];
    PyObject *trend;
    if (n < 3 || !spans) {
        trend = Py_NewRef(Py_None);
    } else {
        long long s = 0;
        for (Py_ssize_t i = 0; i < n; i++)
            for (Py_ssize_t j = i + 1; j < n; j++) {
                double dy = ys[j] - ys[i];
                s += dy > tie_s ? 1 : dy < -tie_s ? -1 : 0;
            }
        double sd = sqrt((double)((long long)n * (n - 1) * (2 * n + 5)) / 18.0);
        double z = s > 0 ? (double)(s - 1) / sd : s < 0 ? (double)(s + 1) / sd : 0.0;
        double last = ys[n - 1];
        int needs_slope;
        if (n < min_points)
            needs_slope = 0;
        else if (was_behind)
            needs_slope = !(last < allowed_s / 2 && z < z_leave);
        else
            needs_slope = (z >= z_enter && last >= allowed_s) || z <= -z_leave;
        if (!needs_slope) {
            trend = Py_BuildValue("(nddddd)", n, Py_NAN, z, Py_NAN, Py_NAN, last);
        } else {
            Py_ssize_t m = 0;
            for (Py_ssize_t i = 0; i < n; i++)
                for (Py_ssize_t j = i + 1; j < n; j++)
                    if (xs[j] > xs[i])
                        slopes[m++] = (ys[j] - ys[i]) / (xs[j] - xs[i]);
            double slope = median(slopes, m);
            for (Py_ssize_t i = 0; i < n; i++)
                fitted[i] = ys[i] - slope * xs[i];
            for (Py_ssize_t i = 0; i < n; i++)
                spread[i] = fitted[i];
            double middle = median(spread, n);
            for (Py_ssize_t i = 0; i < n; i++)
                spread[i] = fabs(fitted[i] - middle);
            double noise = 1.4826 * median(spread, n);
            trend = Py_BuildValue("(nddddd)", n, slope, z, slope * (xs[n - 1] - xs[0]), noise, last);
        }
    }
    if (trend != NULL) {
        result = Py_BuildValue("(NL)", trend, kept);
    }
done:
    if (xs != small)
        PyMem_Free(xs);
    release(&arr, &offsets, &ts);
    return result;
}

/* lagd_rules.rewound: the window's first backward step is never recovered */
static int rewound(const Int64s *arr, Py_ssize_t fields, Py_ssize_t at_offset) {
    Py_ssize_t entries = arr->n / fields;
    const int64_t *a = arr->v + at_offset;
    for (Py_ssize_t j = 1; j < entries; j++) {
        int64_t prev = a[(j - 1) * fields];
        if (a[j * fields] < prev) {
            for (Py_ssize_t k = j; k < entries; k++)
                if (a[k * fields] >= prev)
                    return 0;
            return 1;
        }
    }
    return 0;
}

/* lagd_fast._moments, and lagd_fast.LagdJudge._within_seconds when `within` is true: the
 * moments (passed, reached, estimated, used) and the re-check due when the partition is judged
 * within allowed-lag-seconds (else None), or None where only the Python answers exactly. */
static PyObject *moments(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    if (nargs != 12) {
        PyErr_SetString(PyExc_TypeError, "moments takes 12 arguments");
        return NULL;
    }
    Py_ssize_t fields, at_offset, lo;
    int has_coarse, current_lag, within, declined = 0;
    long long at_ms, allowed_ms;
    double allowed_s;
    if (as_index(args[1], &fields) || as_index(args[2], &at_offset) || as_index(args[5], &lo) ||
        as_bool(args[6], &has_coarse) || as_bool(args[7], &current_lag) || as_int64(args[8], &at_ms, &declined) ||
        as_bool(args[9], &within) || as_double(args[10], &allowed_s) || as_int64(args[11], &allowed_ms, &declined))
        return NULL;
    if (declined)
        Py_RETURN_NONE;
    if (fields <= 0 || at_offset < 0 || at_offset >= fields || lo < 0) {
        PyErr_SetString(PyExc_ValueError, "bad window layout or run start");
        return NULL;
    }
    Int64s arr, offsets, ts;
    if (acquire(args[0], args[3], args[4], &arr, &offsets, &ts) < 0)
        return NULL;
    PyObject *result = NULL;
    Py_ssize_t k = offsets.n;
    const int64_t *o = offsets.v, *t = ts.v;
    if (arr.n < fields || !exact(at_ms) || (current_lag && lo >= k)) {
        result = Py_NewRef(Py_None); /* not a window Python judges here: let it say so */
        goto done;
    }
    int64_t committed = arr.v[arr.n / fields * fields - fields + at_offset];
    double passed = -Py_HUGE_VAL, reached = -Py_HUGE_VAL;
    int estimated = 0, bound = 0, ok = 1;
    int64_t used = INT64_MIN;
    if (committed == INT64_MAX)
        ok = 0;
    else if (current_lag && committed > o[lo]) {
        Py_ssize_t i = bisect_left(o, committed, lo, k);
        ok = interpolate(o, t, i, k, committed, &reached); /* 0 if i == k: a lag the samples do not show */
        if (ok) {
            used = t[i - 1];
            if (o[i] == committed)
                i = bisect_left(o, committed + 1, i, k);
            if (i == k)
                used = INT64_MIN;
            else
                ok = interpolate(o, t, i, k, committed + 1, &passed);
        }
    } else {
        if (k > lo && committed + 1 <= o[k - 1]) {
            ok = reached_in(o, t, lo, k, has_coarse, committed + 1, &passed, &bound);
            used = read_from(o, t, lo, k, committed + 1);
        }
        if (ok && current_lag) {
            ok = reached_in(o, t, lo, k, has_coarse, committed, &reached, &estimated);
            int64_t also = read_from(o, t, lo, k, committed);
            if (also < used)
                used = also;
        }
    }
    if (!ok) {
        result = Py_NewRef(Py_None);
        goto done;
    }
    PyObject *due = Py_None;
    if (within) {
        double waited = 0.0;
        if (passed != -Py_HUGE_VAL) {
            /* a bound is an int in Python (a sample's time): its difference must be exact too */
            i128 span = (i128)at_ms - (i128)passed;
            if (bound && (span > EXACT || span < -EXACT)) {
                result = Py_NewRef(Py_None);
                goto done;
            }
            double w = ((double)at_ms - passed) / 1000.0;
            waited = w > 0.0 ? w : 0.0; /* max(0.0, w) */
        }
        if (!(waited >= allowed_s) && !(arr.n > fields && rewound(&arr, fields, at_offset))) {
            /* at_ms - int(waited * 1000) + allowed_ms + 1: `_recheck`'s least term, in int64 */
            double waited_ms = waited * 1000;
            i128 at = waited_ms < 9.0e18 ? (i128)at_ms - (long long)waited_ms + allowed_ms + 1 : INT64_MAX;
            if (at >= INT64_MAX || at <= INT64_MIN) {
                result = Py_NewRef(Py_None); /* past int64: Python's ints answer */
                goto done;
            }
            due = PyLong_FromLongLong((long long)at);
            if (due == NULL)
                goto done;
        }
    }
    result = Py_BuildValue("(ddOLO)", passed, reached, estimated ? Py_True : Py_False, (long long)used, due);
    if (due != Py_None)
        Py_DECREF(due);
done:
    release(&arr, &offsets, &ts);
    return result;
}

static PyMethodDef methods[] = {
    {"moments", (PyCFunction)(void (*)(void))moments, METH_FASTCALL,
     "moments(arr, fields, offset_at, offsets, ts, run_start, has_coarse, current_lag, at_ms, within, "
     "allowed_lag_seconds, allowed_ms) -> (passed, reached, estimated, used, due | None) | None: "
     "lagd_fast._moments and, with `within`, LagdJudge._within_seconds's re-check; None where only the "
     "Python answers exactly."},
    {"fit", (PyCFunction)(void (*)(void))fit, METH_FASTCALL,
     "fit(arr, fields, offset_at, ts_at, offsets, ts, run_start, has_coarse, used, tie_s, min_points, z_enter, "
     "z_leave, allowed_lag_seconds, was_behind) -> (trend | None, used) | None: lagd_fast._fit, compiled; None "
     "where only the Python answers exactly."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "lagd.evaluate._trend", "lagd's trend fit and lag moments, compiled (lagd_fast).", -1,
    methods, NULL, NULL, NULL, NULL};

/* The SHA-1 of the source this was built from (hatch_build.py passes it): native.py refuses a build
 * of another source, such as one left behind after _trend.c changed. */
#ifndef LAGD_TREND_SHA1
#define LAGD_TREND_SHA1 ""
#endif

PyMODINIT_FUNC PyInit__trend(void) {
    PyObject *m = PyModule_Create(&module);
    if (m != NULL && PyModule_AddStringConstant(m, "SOURCE_SHA1", LAGD_TREND_SHA1) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
