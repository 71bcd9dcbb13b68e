/* lagd's trend fit, compiled: `lagd_fast._fit` (lagd_rules.lag_points_used, spans_time,
 * mann_kendall_z, lagd_fast._needs_slope and slope_fit) in one call, with the same floating
 * point operations in the same order, so it answers exactly as the Python it stands in for
 * (tests/test_trend_c.py compares them on random windows). Fitting is about 60% of judging
 * a lagging partition from scratch in Python; here it is a small part.
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

#define EXACT (INT64_C(1) << 53) /* integers a double holds exactly up to this magnitude */
#define SMALL 64                 /* windows up to this many entries are fitted on the stack */

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
        int64_t o0 = o[i - 1], t0 = t[i - 1];
        /* Python's int true division is correctly rounded, and so is a double's when both
         * sides are exact doubles: the same number. */
        __int128 num = (__int128)(t[i] - (__int128)t0) * (__int128)(target - (__int128)o0);
        __int128 den = (__int128)o[i] - o0;
        if (num > EXACT || num < -EXACT || den > EXACT || !exact(t0))
            return -1;
        passed = (double)t0 + (double)(int64_t)num / (double)(int64_t)den;
        if (*settled && t0 < *used)
            *used = t0;
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
    Py_ssize_t fields = PyLong_AsSsize_t(args[1]), at_offset = PyLong_AsSsize_t(args[2]),
               at_ts = PyLong_AsSsize_t(args[3]), lo = PyLong_AsSsize_t(args[6]);
    int has_coarse = PyObject_IsTrue(args[7]);
    long long used = PyLong_AsLongLong(args[8]);
    double tie_s = PyFloat_AsDouble(args[9]);
    long long min_points = PyLong_AsLongLong(args[10]);
    double z_enter = PyFloat_AsDouble(args[11]), z_leave = PyFloat_AsDouble(args[12]),
           allowed_s = PyFloat_AsDouble(args[13]);
    int was_behind = PyObject_IsTrue(args[14]);
    if (PyErr_Occurred())
        return NULL;
    if (fields <= 0 || at_offset < 0 || at_offset >= fields || at_ts < 0 || at_ts >= fields || lo < 0) {
        PyErr_SetString(PyExc_ValueError, "bad window layout or run start");
        return NULL;
    }
    Int64s arr, offsets, ts;
    if (int64s(args[0], &arr) < 0)
        return NULL;
    if (int64s(args[4], &offsets) < 0) {
        PyBuffer_Release(&arr.view);
        return NULL;
    }
    if (int64s(args[5], &ts) < 0) {
        PyBuffer_Release(&arr.view);
        PyBuffer_Release(&offsets.view);
        return NULL;
    }
    PyObject *result = NULL;
    Py_ssize_t entries = arr.n / fields;
    double small[4 * SMALL + SMALL * (SMALL - 1) / 2];
    double *xs = small;
    if (ts.n != offsets.n || lo > offsets.n) {
        PyErr_SetString(PyExc_ValueError, "log-end offsets and times differ in length");
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
            trend = Py_BuildValue("(ndddd d)", n, Py_NAN, z, Py_NAN, Py_NAN, last);
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
            trend = Py_BuildValue("(ndddd d)", n, slope, z, slope * (xs[n - 1] - xs[0]), noise, last);
        }
    }
    if (trend != NULL) {
        result = Py_BuildValue("(NL)", trend, kept);
    }
done:
    if (xs != small)
        PyMem_Free(xs);
    PyBuffer_Release(&arr.view);
    PyBuffer_Release(&offsets.view);
    PyBuffer_Release(&ts.view);
    return result;
}

static PyMethodDef methods[] = {
    {"fit", (PyCFunction)(void (*)(void))fit, METH_FASTCALL,
     "fit(arr, fields, offset_at, ts_at, offsets, ts, run_start, has_coarse, used, tie_s, min_points, z_enter, "
     "z_leave, allowed_lag_seconds, was_behind) -> (trend | None, used) | None: lagd_fast._fit, compiled; None "
     "where only the Python answers exactly."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "lagd.evaluate._trend",
                                    "lagd's trend fit, compiled (lagd_fast._fit).", -1, methods};

PyMODINIT_FUNC PyInit__trend(void) { return PyModule_Create(&module); }
