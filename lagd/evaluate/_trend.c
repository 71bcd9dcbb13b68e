/* lagd's trend fit, lag moments and judgement from kept facts, compiled: `lagd_fast._fit`
 * (lagd_rules.lag_points_used, spans_time, mann_kendall_z, lagd_fast._needs_slope and slope_fit)
 * in one call, `lagd_fast._moments` with `LagdJudge._within_seconds` in another, and
 * `LagdJudge.judge` from a partition's kept facts on (while they stand) in a third, with the
 * same floating point operations in the same order, so they answer exactly as the Python they
 * stand in for (tests/test_trend_c.py compares them). Fitting was about 60% of judging a
 * lagging partition from scratch in Python, the moments about half of judging one a few records
 * behind (the common case of a healthy estate, judged afresh at every evaluation), and the
 * judgement from kept facts more than half of re-judging a lagging one whose window stands.
 * `judge_topic` runs the evaluator's loop over a topic's partitions around them (verdicts.py):
 * with the judgements compiled, that loop was most of what was left.
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
#include <structmember.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

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

/* The k-th smallest of values[0..m-1] (0 <= k < m), reordering them so that every value before
 * it is at most it (Hoare's selection). The values are finite (slopes, lags and their spreads). */
static double kth_smallest(double *values, Py_ssize_t m, Py_ssize_t k) {
    Py_ssize_t lo = 0, hi = m - 1;
    while (lo < hi) {
        double pivot = values[lo + (hi - lo) / 2];
        Py_ssize_t i = lo, j = hi;
        while (i <= j) {
            while (values[i] < pivot)
                i++;
            while (values[j] > pivot)
                j--;
            if (i <= j) {
                double swap = values[i];
                values[i++] = values[j];
                values[j--] = swap;
            }
        }
        if (k <= j)
            hi = j;
        else if (k >= i)
            lo = i;
        else
            break; /* between them every value equals the pivot */
    }
    return values[k];
}

/* lagd_rules._median (the middle of the sorted values, or the mean of the two middle ones):
 * selected, not sorted, which was a quarter of fitting a trend. Reorders `values`. */
static double median(double *values, Py_ssize_t m) {
    double upper = kth_smallest(values, m, m / 2);
    if (m % 2)
        return upper;
    double lower = values[0];
    for (Py_ssize_t i = 1; i < m / 2; i++)
        if (values[i] > lower)
            lower = values[i];
    return (lower + upper) / 2;
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

/* A trend as lagd_fast keeps it: points (0: none, NO_TREND), slope, z, rise, noise, newest lag;
 * slope, rise and noise NaN where they were not needed (lagd_fast._fit). */
typedef struct {
    int64_t points;
    double slope, z, rise, noise, last;
} Trend;

typedef struct {
    double tie_s, z_enter, z_leave, allowed_s;
    int64_t min_points;
} FitSettings;

/* lagd_fast._fit: the window's trend (*trend; points 0 for none) and the time of the oldest sample
 * it and the moments read from `used` on (*kept; INT64_MIN: a new sample may change them).
 * 1: fitted; 0: only the Python answers exactly; -1: an exception is set. */
static int fit_window(const Int64s *arr, Py_ssize_t fields, Py_ssize_t at_offset, Py_ssize_t at_ts,
                      const Int64s *offsets, const Int64s *ts, Py_ssize_t lo, int has_coarse, int64_t used,
                      const FitSettings *s, int was_behind, Trend *trend, int64_t *kept) {
    Py_ssize_t entries = arr->n / fields;
    double small[4 * SMALL + SMALL * (SMALL - 1) / 2];
    double *xs = small;
    if (entries > MAX_ENTRIES)
        return 0; /* no window is this long (storage.intervals): the Python answers */
    if (entries > SMALL) {
        xs = PyMem_Malloc(sizeof(double) * (size_t)(4 * entries + entries * (entries - 1) / 2));
        if (xs == NULL) {
            PyErr_NoMemory();
            return -1;
        }
    }
    double *ys = xs + entries, *fitted = ys + entries, *spread = fitted + entries, *slopes = spread + entries;
    int64_t points_used = 0;
    int settled = 0, got = 1;
    Py_ssize_t n = lag_points(arr, fields, at_offset, at_ts, offsets, ts, lo, has_coarse, xs, ys, &points_used,
                              &settled);
    if (n < 0) {
        got = 0;
        goto done;
    }
    *kept = settled ? (points_used < used ? points_used : used) : INT64_MIN;
    int spans = 0;
    for (Py_ssize_t i = 1; i < n && !spans; i++)
        spans = xs[i] > xs[i - 1];
    *trend = (Trend){0, 0.0, 0.0, 0.0, 0.0, 0.0};
    if (n < 3 || !spans)
        goto done; /* fit_trend's None */
    long long sum = 0;
    for (Py_ssize_t i = 0; i < n; i++)
        for (Py_ssize_t j = i + 1; j < n; j++) {
            double dy = ys[j] - ys[i];
            sum += dy > s->tie_s ? 1 : dy < -s->tie_s ? -1 : 0;
        }
    double sd = sqrt((double)((long long)n * (n - 1) * (2 * n + 5)) / 18.0);
    double z = sum > 0 ? (double)(sum - 1) / sd : sum < 0 ? (double)(sum + 1) / sd : 0.0;
    double last = ys[n - 1];
    int needs_slope;
    if (n < s->min_points)
        needs_slope = 0;
    else if (was_behind)
        needs_slope = !(last < s->allowed_s / 2 && z < s->z_leave);
    else
        needs_slope = (z >= s->z_enter && last >= s->allowed_s) || z <= -s->z_leave;
    if (!needs_slope) {
        *trend = (Trend){n, Py_NAN, z, Py_NAN, Py_NAN, last};
        goto done;
    }
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
    *trend = (Trend){n, slope, z, slope * (xs[n - 1] - xs[0]), noise, last};
done:
    if (xs != small)
        PyMem_Free(xs);
    return got;
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
    FitSettings s;
    if (as_index(args[1], &fields) || as_index(args[2], &at_offset) || as_index(args[3], &at_ts) ||
        as_index(args[6], &lo) || as_bool(args[7], &has_coarse) || as_int64(args[8], &used, &declined) ||
        as_double(args[9], &s.tie_s) || as_int64(args[10], &min_points, &declined) ||
        as_double(args[11], &s.z_enter) || as_double(args[12], &s.z_leave) || as_double(args[13], &s.allowed_s) ||
        as_bool(args[14], &was_behind))
        return NULL;
    if (declined)
        Py_RETURN_NONE;
    s.min_points = min_points;
    if (fields <= 0 || at_offset < 0 || at_offset >= fields || at_ts < 0 || at_ts >= fields || lo < 0) {
        PyErr_SetString(PyExc_ValueError, "bad window layout or run start");
        return NULL;
    }
    Int64s arr, offsets, ts;
    if (acquire(args[0], args[4], args[5], &arr, &offsets, &ts) < 0)
        return NULL;
    Trend trend;
    int64_t kept = 0;
    int got = fit_window(&arr, fields, at_offset, at_ts, &offsets, &ts, lo, has_coarse, used, &s, was_behind, &trend,
                         &kept);
    release(&arr, &offsets, &ts);
    if (got < 0)
        return NULL;
    if (got == 0)
        Py_RETURN_NONE;
    if (trend.points == 0)
        return Py_BuildValue("(OL)", Py_None, (long long)kept);
    return Py_BuildValue("((Lddddd)L)", (long long)trend.points, trend.slope, trend.z, trend.rise, trend.noise,
                         trend.last, (long long)kept);
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

/* How long the oldest unconsumed record has waited at `at_ms`, in seconds: max(0.0, (at_ms -
 * passed) / 1000.0), as lagd_fast computes it from a moment that has come. */
static double waited_s(int64_t at_ms, double passed) {
    double w = ((double)at_ms - passed) / 1000.0;
    return w > 0.0 ? w : 0.0;
}

/* lagd_fast._moments (passed, reached, estimated, used) and, when `within` is true,
 * LagdJudge._within_seconds's re-check (`has_due`, `due`) where the partition is judged within
 * allowed-lag-seconds. */
typedef struct {
    double passed, reached;
    int estimated;
    int64_t used;
    int has_due;
    int64_t due;
} Moments;

/* The moments of a window and its log end's samples: 1, or 0 where only the Python answers exactly. */
static int moments_of(const Int64s *arr, Py_ssize_t fields, Py_ssize_t at_offset, const Int64s *offsets,
                      const Int64s *ts, Py_ssize_t lo, int has_coarse, int current_lag, int64_t at_ms, int within,
                      double allowed_s, int64_t allowed_ms, Moments *m) {
    Py_ssize_t k = offsets->n;
    const int64_t *o = offsets->v, *t = ts->v;
    if (arr->n < fields || !exact(at_ms) || (current_lag && lo >= k))
        return 0; /* not a window Python judges here: let it say so */
    int64_t committed = arr->v[arr->n / fields * fields - fields + at_offset];
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
    if (!ok)
        return 0;
    m->passed = passed;
    m->reached = reached;
    m->estimated = estimated;
    m->used = used;
    m->has_due = 0;
    if (within) {
        double waited = 0.0;
        if (passed != -Py_HUGE_VAL) {
            /* a bound is an int in Python (a sample's time): its difference must be exact too */
            i128 span = (i128)at_ms - (i128)passed;
            if (bound && (span > EXACT || span < -EXACT))
                return 0;
            waited = waited_s(at_ms, passed);
        }
        if (!(waited >= allowed_s) && !(arr->n > fields && rewound(arr, fields, at_offset))) {
            /* at_ms - int(waited * 1000) + allowed_ms + 1: `_recheck`'s least term, in int64 */
            double waited_ms = waited * 1000;
            i128 at = waited_ms < 9.0e18 ? (i128)at_ms - (long long)waited_ms + allowed_ms + 1 : INT64_MAX;
            if (at >= INT64_MAX || at <= INT64_MIN)
                return 0; /* past int64: Python's ints answer */
            m->has_due = 1;
            m->due = (int64_t)at;
        }
    }
    return 1;
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
    Moments m;
    PyObject *result;
    if (!moments_of(&arr, fields, at_offset, &offsets, &ts, lo, has_coarse, current_lag, at_ms, within, allowed_s,
                    allowed_ms, &m))
        result = Py_NewRef(Py_None);
    else if (m.has_due)
        result = Py_BuildValue("(ddOLL)", m.passed, m.reached, m.estimated ? Py_True : Py_False, (long long)m.used,
                               (long long)m.due);
    else
        result = Py_BuildValue("(ddOLO)", m.passed, m.reached, m.estimated ? Py_True : Py_False, (long long)m.used,
                               Py_None);
    release(&arr, &offsets, &ts);
    return result;
}

/* The kept facts of a partition (lagd_fast._PACKED, "<6q2d2?3q5d", 130 bytes back to back) and
 * the rules' settings as LagdJudge packs them (lagd_fast._C_PARAMS, "<12q9d"): each field's place.
 * FACTS_FORMAT and PARAMS_FORMAT, exported below, let lagd_fast refuse this code if either differs. */
#define FACTS_FORMAT "<6q2d2?3q5d"
#define FACTS_SIZE 130
#define PARAMS_FORMAT "<12q9d"
#define PARAMS_SIZE 168
#define NO_MS INT64_MIN /* lagd_fast.NO_MS */
#define NEVER INT64_MAX /* lagd_rules.NEVER */
#define UNFITTED (-1)   /* lagd_fast.UNFITTED */

typedef struct {
    int64_t first, newest_order, length, le_id, newest, used;
    double passed, reached;
    int estimated, rewind;
    int64_t limit, stuck_since, points;
    double slope, z, rise, noise, last;
} Facts;

static int64_t q_at(const char *b, Py_ssize_t at) {
    int64_t v;
    memcpy(&v, b + at, 8);
    return v;
}

static double d_at(const char *b, Py_ssize_t at) {
    double v;
    memcpy(&v, b + at, 8);
    return v;
}

static void unpack_facts(const char *b, Facts *f) {
    f->first = q_at(b, 0);
    f->newest_order = q_at(b, 8);
    f->length = q_at(b, 16);
    f->le_id = q_at(b, 24);
    f->newest = q_at(b, 32);
    f->used = q_at(b, 40);
    f->passed = d_at(b, 48);
    f->reached = d_at(b, 56);
    f->estimated = b[64] != 0;
    f->rewind = b[65] != 0;
    f->limit = q_at(b, 66);
    f->stuck_since = q_at(b, 74);
    f->points = q_at(b, 82);
    f->slope = d_at(b, 90);
    f->z = d_at(b, 98);
    f->rise = d_at(b, 106);
    f->noise = d_at(b, 114);
    f->last = d_at(b, 122);
}

typedef struct {
    Py_ssize_t fields, at_offset, at_order, at_ts, at_lag;
    int64_t allowed_lag, min_history_ms, stall_after_ms, min_points, allowed_ms, stop_after_ms, stop_cadences;
    double allowed_s, z_enter, z_leave, min_slope, min_rise_s, noise_factor, drain_margin, tie_s;
    double pause_ms; /* what stop_after_ms rests on, for the STOP reason (LagdParams.pause_ms) */
} Params;

static int unpack_params(const char *b, Params *p) {
    int64_t layout[5];
    for (int k = 0; k < 5; k++)
        layout[k] = q_at(b, 8 * k);
    p->fields = (Py_ssize_t)layout[0];
    p->at_offset = (Py_ssize_t)layout[1];
    p->at_order = (Py_ssize_t)layout[2];
    p->at_ts = (Py_ssize_t)layout[3];
    p->at_lag = (Py_ssize_t)layout[4];
    p->allowed_lag = q_at(b, 40);
    p->min_history_ms = q_at(b, 48);
    p->stall_after_ms = q_at(b, 56);
    p->min_points = q_at(b, 64);
    p->allowed_ms = q_at(b, 72);
    p->stop_after_ms = q_at(b, 80);
    p->stop_cadences = q_at(b, 88);
    p->allowed_s = d_at(b, 96);
    p->z_enter = d_at(b, 104);
    p->z_leave = d_at(b, 112);
    p->min_slope = d_at(b, 120);
    p->min_rise_s = d_at(b, 128);
    p->noise_factor = d_at(b, 136);
    p->drain_margin = d_at(b, 144);
    p->tie_s = d_at(b, 152);
    p->pause_ms = d_at(b, 160);
    for (int k = 1; k < 5; k++)
        if (layout[k] < 0 || layout[k] >= layout[0])
            return 0;
    return p->fields > 0;
}

/* The fixed parts of an answer, in the order lagd_fast._C_SAID lists them. */
enum {
    SAID_WITHIN_SECONDS, /* (status, rule, reason) triples */
    SAID_CAUGHT_UP,
    SAID_CATCHING_UP,
    SAID_KEEPING_UP,
    SAID_TOO_LITTLE_HISTORY,
    SAID_REWIND,
    SAID_WARN, /* then single objects */
    SAID_STOP,
    SAID_STALL,
    SAID_RULE_STOP,
    SAID_RULE_STALL,
    SAID_RULE_FALLING_BEHIND,
    SAID_RULE_STILL_BEHIND,
    SAID_STOPPED,
    SAID_STALLED,
    SAID_FALLING_BEHIND,
    SAID_STILL_BEHIND,
    SAID_STILL_BEHIND_UNFITTED,
    SAID_COUNT
};

/* A partition's answer (lagd_fast.Answer, field by field): status, rule, reason, when a
 * time-driven rule could next change it, when the log end reached the committed offset (shown)
 * and whether that is a bound. `owned` holds the reason where it was made for this answer. */
typedef struct {
    PyObject *status, *rule, *reason; /* borrowed, but for `owned` */
    int64_t at;
    double reached;
    int bound;
    PyObject *owned;
} Said;

static void said_release(Said *s) { Py_CLEAR(s->owned); }

/* Fill `out` (1), stealing `reason`; -1 where making it failed (`reason` NULL: an exception is set). */
static int answer(PyObject *status, PyObject *rule, PyObject *reason, int64_t due, double shown, int estimated,
                  Said *out) {
    if (reason == NULL)
        return -1;
    *out = (Said){status, rule, reason, due, shown, estimated != 0, reason};
    return 1;
}

/* A fixed judgement of lagd_fast._C_SAID (a triple) as the answer (1). */
static int said_answer(PyObject *said, int which, int64_t due, double shown, int estimated, Said *out) {
    PyObject *triple = PyTuple_GET_ITEM(said, which);
    *out = (Said){PyTuple_GET_ITEM(triple, 0), PyTuple_GET_ITEM(triple, 1), PyTuple_GET_ITEM(triple, 2), due, shown,
                  estimated != 0, NULL};
    return 1;
}

/* The answer as lagd_fast.Answer, a new tuple (NULL: an exception is set). */
static PyObject *said_tuple(const Said *s) {
    return Py_BuildValue("(OOOLdO)", s->status, s->rule, s->reason, (long long)s->at, s->reached,
                         s->bound ? Py_True : Py_False);
}

/* lagd_fast._recheck (0: past int64, where Python's ints answer) */
static int recheck(int stall, int64_t at_ms, double waited, int64_t last_ts, int64_t limit, int64_t stuck_since,
                   const Params *p, int64_t *due) {
    double waited_ms = waited * 1000;
    if (!(waited_ms < 9.0e18))
        return 0;
    i128 passed = (i128)at_ms - (long long)waited_ms;
    i128 d = ((i128)last_ts > passed ? (i128)last_ts : passed) + limit + 1;
    if (!stall && stuck_since != NO_MS) {
        i128 s = ((i128)stuck_since > passed ? (i128)stuck_since : passed) + p->stall_after_ms;
        if (s < d)
            d = s;
    }
    if (waited < p->allowed_s) {
        i128 a = passed + p->allowed_ms + 1;
        if (a < d)
            d = a;
    }
    if (d > INT64_MAX || d < INT64_MIN)
        return 0;
    *due = (int64_t)d;
    return 1;
}

/* a / b for ints as Python divides them (correctly rounded): 0 where the terms are not exact doubles */
static int divide(i128 a, i128 b, double *out) {
    if (a > EXACT || a < -EXACT || b > EXACT || b < -EXACT || b == 0)
        return 0;
    *out = (double)(int64_t)a / (double)(int64_t)b;
    return 1;
}

/* lagd_rules._draining: 1 or 0, or -1 where only the Python answers exactly */
static int draining(const Int64s *arr, const Int64s *o, const Int64s *t, Py_ssize_t lo, const Params *p) {
    Py_ssize_t n = arr->n / p->fields, k = o->n;
    if (n < 3 || k - lo < 2)
        return 0;
    const int64_t *last = arr->v + (n - 1) * p->fields, *b = arr->v + (n - 3) * p->fields;
    i128 span_recent = (i128)last[p->at_ts] - b[p->at_ts];
    i128 span_all = (i128)t->v[k - 1] - t->v[lo];
    if (span_recent <= 0 || span_all <= 0)
        return 0;
    double consumed, produced;
    if (!divide((i128)last[p->at_offset] - b[p->at_offset], span_recent, &consumed) ||
        !divide((i128)o->v[k - 1] - o->v[lo], span_all, &produced))
        return -1;
    return consumed > produced * p->drain_margin;
}

/* Does the kept trend leave out a slope that _judge_trend reads now? (lagd_fast._needs_slope) */
static int needs_slope(const Facts *f, int was_behind, const Params *p) {
    if (f->points < p->min_points)
        return 0;
    if (was_behind)
        return !(f->last < p->allowed_s / 2 && f->z < p->z_leave);
    return (f->z >= p->z_enter && f->last >= p->allowed_s) || f->z <= -p->z_leave;
}

static PyObject *why(PyObject *what, PyObject *a, PyObject *b, double c, double d, double waited) {
    if (a == NULL || b == NULL) {
        Py_XDECREF(a);
        Py_XDECREF(b);
        return NULL;
    }
    return Py_BuildValue("(ONNddd)", what, a, b, c, d, waited);
}

static void put_q(char *b, Py_ssize_t at, int64_t v) { memcpy(b + at, &v, 8); }

static void put_d(char *b, Py_ssize_t at, double v) { memcpy(b + at, &v, 8); }

/* The facts packed as lagd_fast._PACKED packs them (a new bytes object, or NULL: an exception). */
static PyObject *pack_facts(const Facts *f) {
    PyObject *out = PyBytes_FromStringAndSize(NULL, FACTS_SIZE);
    if (out == NULL)
        return NULL;
    char *b = PyBytes_AS_STRING(out);
    put_q(b, 0, f->first);
    put_q(b, 8, f->newest_order);
    put_q(b, 16, f->length);
    put_q(b, 24, f->le_id);
    put_q(b, 32, f->newest);
    put_q(b, 40, f->used);
    put_d(b, 48, f->passed);
    put_d(b, 56, f->reached);
    b[64] = (char)(f->estimated != 0);
    b[65] = (char)(f->rewind != 0);
    put_q(b, 66, f->limit);
    put_q(b, 74, f->stuck_since);
    put_q(b, 82, f->points);
    put_d(b, 90, f->slope);
    put_d(b, 98, f->z);
    put_d(b, 106, f->rise);
    put_d(b, 114, f->noise);
    put_d(b, 122, f->last);
    return out;
}

/* A partition as the judgement reads it: its window, its log end's samples and their newest run. */
typedef struct {
    Int64s arr, o, t;
    Py_ssize_t lo;
    int has_coarse;
} Partition;

/* The names of a LogEnd's attributes it reads, made once (PyInit__trend), not per partition. */
static PyObject *name_offsets, *name_ts, *name_run_start, *name_coarse_ts;

/* Where a LogEnd keeps the four fields a judgement reads (the slots of its dataclass), so the pass
 * over a topic's partitions reads them in place, where looking each up by name was about a
 * twentieth of the verdict watch's pass (four lookups per partition). `type` NULL: by name. */
typedef struct {
    PyTypeObject *type;
    Py_ssize_t at[4]; /* offsets, ts, run_start, coarse_ts */
} LogEndLayout;

/* The offset of `name`'s slot in `type`'s objects: a member of this very class holding an object
 * (1), or 0 where it is not one. */
static int slot_of(PyObject *type, PyObject *name, Py_ssize_t *offset) {
    PyObject *slot = PyObject_GetAttr(type, name);
    if (slot == NULL) {
        PyErr_Clear();
        return 0;
    }
    int got = Py_IS_TYPE(slot, &PyMemberDescr_Type) && PyDescr_TYPE(slot) == (PyTypeObject *)type &&
              PyUnicode_Compare(PyDescr_NAME(slot), name) == 0;
    if (got) {
        PyMemberDef *member = ((PyMemberDescrObject *)slot)->d_member;
        *offset = member->offset;
        got = member->type == T_OBJECT_EX && *offset >= (Py_ssize_t)sizeof(PyObject) &&
              *offset <= ((PyTypeObject *)type)->tp_basicsize - (Py_ssize_t)sizeof(PyObject *);
    }
    Py_DECREF(slot);
    return got;
}

/* The layout of `le`'s class, where it keeps the four fields in slots; else type NULL. */
static void log_end_layout(PyObject *le, LogEndLayout *out) {
    PyObject *type = (PyObject *)Py_TYPE(le), *names[4] = {name_offsets, name_ts, name_run_start, name_coarse_ts};
    out->type = NULL;
    if (((PyTypeObject *)type)->tp_dictoffset != 0)
        return;
    for (int k = 0; k < 4; k++)
        if (!slot_of(type, names[k], &out->at[k]))
            return;
    out->type = (PyTypeObject *)type;
}

/* Take a window and its log end's arrays (-1: an exception is set); `give_back` releases them.
 * The log end's fields are read in place where `layout` knows its class, else by name. */
static int take_partition(PyObject *window, PyObject *le, const LogEndLayout *layout, Partition *x) {
    PyObject *offsets, *ts, *run, *coarse;
    if (layout != NULL && layout->type != NULL && Py_IS_TYPE(le, layout->type) &&
        *(PyObject **)((char *)le + layout->at[0]) != NULL && *(PyObject **)((char *)le + layout->at[1]) != NULL &&
        *(PyObject **)((char *)le + layout->at[2]) != NULL && *(PyObject **)((char *)le + layout->at[3]) != NULL) {
        /* held, as a lookup by name would give them: what runs below must not drop them */
        offsets = Py_NewRef(*(PyObject **)((char *)le + layout->at[0]));
        ts = Py_NewRef(*(PyObject **)((char *)le + layout->at[1]));
        run = Py_NewRef(*(PyObject **)((char *)le + layout->at[2]));
        coarse = Py_NewRef(*(PyObject **)((char *)le + layout->at[3]));
    } else { /* an unset slot raises AttributeError here, as it would read by name */
        offsets = PyObject_GetAttr(le, name_offsets);
        ts = PyObject_GetAttr(le, name_ts);
        run = PyObject_GetAttr(le, name_run_start);
        coarse = PyObject_GetAttr(le, name_coarse_ts);
    }
    int got = -1;
    if (offsets != NULL && ts != NULL && run != NULL && coarse != NULL && as_index(run, &x->lo) == 0 &&
        as_bool(coarse, &x->has_coarse) == 0) {
        if (x->lo < 0)
            PyErr_SetString(PyExc_ValueError, "bad run start"); /* as `fit` and `moments` refuse it */
        else
            got = acquire(window, offsets, ts, &x->arr, &x->o, &x->t);
    }
    Py_XDECREF(offsets);
    Py_XDECREF(ts);
    Py_XDECREF(run);
    Py_XDECREF(coarse);
    return got;
}

static void give_back(Partition *x) { release(&x->arr, &x->o, &x->t); }

/* The settings and fixed answers every judgement takes (0: an exception is set). */
static int read_settings(PyObject *params, PyObject *said, Params *p) {
    if (!PyBytes_Check(params) || PyBytes_GET_SIZE(params) != PARAMS_SIZE) {
        PyErr_SetString(PyExc_TypeError, "expected the settings packed as lagd_fast._C_PARAMS packs them");
        return 0;
    }
    if (!PyTuple_Check(said) || PyTuple_GET_SIZE(said) != SAID_COUNT) {
        PyErr_SetString(PyExc_TypeError, "expected lagd_fast._C_SAID");
        return 0;
    }
    for (int k = SAID_WITHIN_SECONDS; k <= SAID_REWIND; k++) {
        PyObject *triple = PyTuple_GET_ITEM(said, k);
        if (!PyTuple_Check(triple) || PyTuple_GET_SIZE(triple) != 3) {
            PyErr_SetString(PyExc_TypeError, "expected lagd_fast._C_SAID");
            return 0;
        }
    }
    if (!unpack_params(PyBytes_AS_STRING(params), p)) {
        PyErr_SetString(PyExc_ValueError, "bad window layout");
        return 0;
    }
    return 1;
}

/* LagdJudge.judge from a partition's facts `f` on: 1 with its answer in `out`, 0 where a trend
 * must be fitted first and `fitted_now` is NULL (else it is fitted into `f` and *fitted_now set)
 * or only the Python answers exactly, -1 where an exception is set. The window is not empty. */
static int judge_facts(Facts *f, const Partition *x, const Params *p, int64_t current_lag, int64_t at_ms,
                       int was_behind, PyObject *said, int *fitted_now, Said *out) {
    Py_ssize_t n = x->arr.n / p->fields;
    const int64_t *first = x->arr.v, *newest_entry = x->arr.v + (n - 1) * p->fields;
    double waited = f->passed != -Py_HUGE_VAL ? waited_s(at_ms, f->passed) : 0.0;
    double shown = f->reached != -Py_HUGE_VAL ? f->reached : 0.0;
    if (f->rewind)
        return said_answer(said, SAID_REWIND, NEVER, shown, f->estimated, out);
    double waited_ms = waited * 1000.0;
    int64_t last_ts = newest_entry[p->at_ts];
    i128 silence = (i128)at_ms - last_ts;
    if (!exact(f->limit) || !exact(p->stall_after_ms) || silence > INT64_MAX || silence < INT64_MIN)
        return 0; /* compared with a float, or past int64: Python's ints answer */
    if (silence > f->limit && waited_ms > (double)f->limit) {
        PyObject *reason = why(PyTuple_GET_ITEM(said, SAID_STOPPED), PyLong_FromLongLong((long long)silence),
                               PyLong_FromLongLong((long long)f->limit), p->pause_ms, (double)p->stop_after_ms,
                               waited);
        return answer(PyTuple_GET_ITEM(said, SAID_STOP), PyTuple_GET_ITEM(said, SAID_RULE_STOP), reason, NEVER, shown,
                      f->estimated, out);
    }
    int timed = current_lag > p->allowed_lag;
    int64_t due = NEVER;
    if (f->stuck_since != NO_MS) {
        i128 stuck_ms = (i128)last_ts - f->stuck_since; /* committing the offset again, not silence */
        if (stuck_ms > INT64_MAX || stuck_ms < INT64_MIN)
            return 0;
        if (stuck_ms >= p->stall_after_ms && waited_ms >= (double)p->stall_after_ms) {
            if (timed && !recheck(1, at_ms, waited, last_ts, f->limit, f->stuck_since, p, &due))
                return 0;
            PyObject *reason = why(PyTuple_GET_ITEM(said, SAID_STALLED),
                                   PyLong_FromLongLong((long long)newest_entry[p->at_offset]),
                                   PyLong_FromLongLong((long long)stuck_ms), 0.0, 0.0, waited);
            return answer(PyTuple_GET_ITEM(said, SAID_STALL), PyTuple_GET_ITEM(said, SAID_RULE_STALL), reason, due,
                          shown, f->estimated, out);
        }
    }
    int fixed = -1;        /* a fixed judgement (SAID_*), or -1: WARN for `rule`, its reason begun by `what` */
    PyObject *what = NULL; /* borrowed */
    PyObject *rule = NULL; /* borrowed */
    int fitted = 0;        /* a trend is read (lagd_fast's `fit` is not None) */
    if (!was_behind && waited < p->allowed_s) {
        fixed = SAID_WITHIN_SECONDS;
    } else {
        if ((i128)last_ts - first[p->at_ts] >= p->min_history_ms) {
            int left_out = f->slope != f->slope;
            if (f->points == UNFITTED || (left_out && needs_slope(f, was_behind, p))) {
                if (fitted_now == NULL)
                    return 0; /* the Python fits it, and keeps the facts */
                FitSettings s = {p->tie_s, p->z_enter, p->z_leave, p->allowed_s, p->min_points};
                Trend trend;
                int64_t kept = 0;
                int got = fit_window(&x->arr, p->fields, p->at_offset, p->at_ts, &x->o, &x->t, x->lo, x->has_coarse,
                                     f->used, &s, was_behind, &trend, &kept);
                if (got < 0)
                    return -1;
                if (got == 0)
                    return 0;
                f->used = kept; /* lagd_fast._with_trend */
                f->points = trend.points;
                f->slope = trend.slope;
                f->z = trend.z;
                f->rise = trend.rise;
                f->noise = trend.noise;
                f->last = trend.last;
                *fitted_now = 1;
            }
            fitted = f->points != 0 && f->points >= p->min_points;
        }
        if (was_behind) {
            if (fitted && f->last < p->allowed_s / 2 && f->z < p->z_leave)
                fixed = SAID_CAUGHT_UP;
            else if (fitted && f->z <= -p->z_leave && f->slope < 0)
                fixed = SAID_CATCHING_UP;
            else {
                rule = PyTuple_GET_ITEM(said, SAID_RULE_STILL_BEHIND);
                what = PyTuple_GET_ITEM(said, SAID_STILL_BEHIND);
            }
        } else if (!fitted) {
            fixed = SAID_TOO_LITTLE_HISTORY;
        } else {
            int falling = f->slope >= p->min_slope && f->z >= p->z_enter && f->rise >= p->min_rise_s &&
                          f->rise >= p->noise_factor * f->noise && f->last >= p->allowed_s && f->stuck_since == NO_MS;
            if (falling) {
                int d = draining(&x->arr, &x->o, &x->t, x->lo, p);
                if (d < 0)
                    return 0;
                falling = !d;
            }
            if (falling) {
                rule = PyTuple_GET_ITEM(said, SAID_RULE_FALLING_BEHIND);
                what = PyTuple_GET_ITEM(said, SAID_FALLING_BEHIND);
            } else if (f->slope < 0 && f->z <= -p->z_leave)
                fixed = SAID_CATCHING_UP;
            else
                fixed = SAID_KEEPING_UP;
        }
    }
    if (timed && !recheck(0, at_ms, waited, last_ts, f->limit, f->stuck_since, p, &due))
        return 0;
    if (fixed >= 0)
        return said_answer(said, fixed, due, shown, f->estimated, out);
    PyObject *reason;
    if (!fitted)
        reason = Py_BuildValue("(Oddddd)", PyTuple_GET_ITEM(said, SAID_STILL_BEHIND_UNFITTED), 0.0, 0.0, 0.0, 0.0,
                               waited);
    else
        reason = Py_BuildValue("(OdddLd)", what, f->slope, f->z, f->rise, (long long)f->points, waited);
    return answer(PyTuple_GET_ITEM(said, SAID_WARN), rule, reason, due, shown, f->estimated, out);
}

/* Do kept facts `f` still describe the window and log end of `x` (LagdJudge._kept_facts)? */
static int facts_stand(const Facts *f, const Partition *x, PyObject *le, const Params *p) {
    Py_ssize_t fields = p->fields, n = x->arr.n / fields, lo = x->lo;
    if (n == 0 || x->arr.n % fields || (lo >= x->t.n && x->t.n > 0))
        return 0;
    const int64_t *first = x->arr.v, *newest_entry = x->arr.v + (n - 1) * fields;
    if (f->first != first[p->at_order] || f->newest_order != newest_entry[p->at_order] || f->length != x->arr.n ||
        f->le_id != (int64_t)(intptr_t)le)
        return 0;
    /* the samples the same, or only grown at the end while still holding the oldest one the lags read */
    int64_t newest = x->t.n ? x->t.v[x->t.n - 1] : NO_MS;
    return newest == f->newest || !(f->used == NO_MS || newest == NO_MS || x->t.v[lo] > f->used);
}

/* LagdJudge.judge for a partition whose kept facts (`facts`, the i-th packed) still stand for its
 * window `arr` and log end `le`, from those facts on; None where they do not stand, a trend must
 * be fitted first, or only the Python answers exactly. */
static PyObject *standing(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    if (nargs != 9) {
        PyErr_SetString(PyExc_TypeError, "standing takes 9 arguments");
        return NULL;
    }
    PyObject *le = args[3];
    Py_ssize_t i;
    long long current_lag, at_ms;
    int was_behind, declined = 0;
    Params p;
    if (as_index(args[1], &i) || as_int64(args[4], &current_lag, &declined) || as_int64(args[5], &at_ms, &declined) ||
        as_bool(args[6], &was_behind) || !read_settings(args[7], args[8], &p))
        return NULL;
    if (!PyBytes_Check(args[0])) {
        PyErr_SetString(PyExc_TypeError, "standing takes the packed facts as bytes");
        return NULL;
    }
    if (declined || i < 0 || i >= PyBytes_GET_SIZE(args[0]) / FACTS_SIZE || !exact(at_ms))
        Py_RETURN_NONE;
    Facts f;
    unpack_facts(PyBytes_AS_STRING(args[0]) + i * FACTS_SIZE, &f);
    Partition x;
    if (take_partition(args[2], le, NULL, &x) < 0)
        return NULL;
    Said said = {0};
    int got = facts_stand(&f, &x, le, &p) ? judge_facts(&f, &x, &p, current_lag, at_ms, was_behind, args[8], NULL, &said)
                                          : 0;
    give_back(&x);
    PyObject *result = got < 0 ? NULL : got == 0 ? Py_NewRef(Py_None) : said_tuple(&said);
    said_release(&said);
    return result;
}

/* lagd_rules.first_same: index of the oldest entry of the newest run committing the newest offset */
static Py_ssize_t first_same(const Int64s *arr, Py_ssize_t fields, Py_ssize_t at_offset, Py_ssize_t n) {
    int64_t committed = arr->v[(n - 1) * fields + at_offset];
    Py_ssize_t first = n - 1;
    while (first > 0 && arr->v[(first - 1) * fields + at_offset] == committed)
        first--;
    return first;
}

/* LagdJudge.judge for a partition with no kept facts that stand, from its moments on (`_facts`,
 * `_fit` where needed, the judgement): 1 with its answer in `out` and `*packed` set to the facts
 * to keep, 0 where only the Python answers exactly, -1: an exception is set. `at_ms` is exact. */
static int fresh_of(const Partition *x, PyObject *le, const Params *p, int64_t current_lag, int64_t at_ms,
                    int was_behind, const Moments *m, PyObject *said, PyObject **packed, Said *out) {
    Py_ssize_t fields = p->fields, n = x->arr.n / fields;
    if (n == 0 || x->arr.n % fields)
        return 0;
    const int64_t *first = x->arr.v, *newest_entry = x->arr.v + (n - 1) * fields;
    /* lagd_fast._facts (stop_limit: stop-after, or stop-cadences newest commit intervals) */
    i128 cadence = n > 1 ? (i128)newest_entry[p->at_ts] - newest_entry[p->at_ts - fields] : 0;
    i128 limit = (i128)p->stop_cadences * cadence;
    if (limit < p->stop_after_ms)
        limit = p->stop_after_ms;
    if (limit > INT64_MAX || limit < INT64_MIN)
        return 0; /* facts that do not pack: the Python judges them afresh every time */
    Py_ssize_t same = first_same(&x->arr, fields, p->at_offset, n);
    Facts f = {
        .first = first[p->at_order],
        .newest_order = newest_entry[p->at_order],
        .length = x->arr.n,
        .le_id = (int64_t)(intptr_t)le,
        .newest = x->t.n ? x->t.v[x->t.n - 1] : NO_MS,
        .used = m->used,
        .passed = m->passed,
        .reached = m->reached,
        .estimated = m->estimated,
        .rewind = n > 1 && rewound(&x->arr, fields, p->at_offset),
        .limit = (int64_t)limit,
        .stuck_since = same < n - 1 ? x->arr.v[same * fields + p->at_ts] : NO_MS,
        .points = UNFITTED,
    };
    int fitted = 0;
    int got = judge_facts(&f, x, p, current_lag, at_ms, was_behind, said, &fitted, out);
    if (got <= 0)
        return got; /* an exception, or 0: the Python answers */
    *packed = pack_facts(&f);
    if (*packed == NULL) {
        said_release(out);
        return -1;
    }
    return 1;
}

/* LagdJudge.judge for a partition with no kept facts that stand, from its moments (`_moments`,
 * as `moments` gave them) on: the facts (`_facts`), the trend where it is needed (`_fit`) and the
 * judgement, as (answer, the facts packed to keep); None where only the Python answers exactly. */
static PyObject *fresh(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    if (nargs != 11) {
        PyErr_SetString(PyExc_TypeError, "fresh takes 11 arguments");
        return NULL;
    }
    PyObject *le = args[1];
    long long current_lag, at_ms, used;
    int was_behind, estimated, declined = 0;
    double passed, reached;
    Params p;
    if (as_int64(args[2], &current_lag, &declined) || as_int64(args[3], &at_ms, &declined) ||
        as_bool(args[4], &was_behind) || as_double(args[5], &passed) || as_double(args[6], &reached) ||
        as_bool(args[7], &estimated) || as_int64(args[8], &used, &declined) || !read_settings(args[9], args[10], &p))
        return NULL;
    if (declined || !exact(at_ms))
        Py_RETURN_NONE;
    Partition x;
    if (take_partition(args[0], le, NULL, &x) < 0)
        return NULL;
    Moments m = {.passed = passed, .reached = reached, .estimated = estimated, .used = used};
    PyObject *packed = NULL, *judged = NULL, *result = NULL;
    Said said = {0};
    int got = fresh_of(&x, le, &p, current_lag, at_ms, was_behind, &m, args[10], &packed, &said);
    give_back(&x);
    if (got <= 0)
        return got < 0 ? NULL : Py_NewRef(Py_None);
    judged = said_tuple(&said);
    if (judged != NULL)
        result = PyTuple_Pack(2, judged, packed);
    Py_XDECREF(judged);
    Py_DECREF(packed);
    said_release(&said);
    return result;
}

/* ---- The evaluator's pass over a topic's partitions (verdicts.Evaluator._evaluate) ----
 *
 * With the judgements compiled, what was left of judging a group was the Python loop around them:
 * the lookups, the since-tracking and a verdict object per partition, 4-5 ms for a caught-up
 * group of 1,000 partitions on a slow box. `judge_topic` runs that loop for the partitions of one
 * topic (listed densely: 0..stop-1) under lagd's rules, as the Python does, and hands a partition
 * back (returns its index) where only the Python answers it exactly: a trend to fit from kept
 * facts, a coarse-tier read, numbers past a double's or int64's exact range, a caught-up lag
 * above 0 (allowed-lag set), or settings the pass does not take. The Python judges that one
 * partition and calls again from the next. Nothing of a partition handed back has been done. */

/* What `judge_topic` reads of verdicts.py, once per evaluator (verdicts._pass_context). */
enum {
    CTX_VERDICT,      /* PartitionVerdict */
    CTX_STATUSES,     /* the PartitionStatus members, in since-code order */
    CTX_RANKS,        /* their group severity ranks */
    CTX_OK_CODE,      /* OK's since code */
    CTX_EMPTY,        /* (reason, rule) of an empty window */
    CTX_CAUGHT_UP,    /* (status, rule, reason) of a caught-up partition */
    CTX_NO_LOG_END,   /* the LogEnd judged for a partition without samples */
    CTX_ENTRIES,      /* an array('q') of 2 * FIELDS: a verdict's entries are copies of it */
    CTX_SAID,         /* lagd_fast._C_SAID */
    CTX_NO_OWNER,     /* "" */
    CTX_FLAT,         /* Burrow's judgements (status, rule, reason), FLAT_* order */
    CTX_COUNT
};

/* The group summary the pass folds in (verdicts._Tally's order). */
/* T_MASK: bit k set where a partition has the k-th status; T_BOUND: 1 where a lagging partition's lag
 * in seconds is only a bound (what a snapshot says of the group: snapshot.GroupSnapshot). */
enum { T_WORST, T_TOTALLAG, T_MAXLAG, T_BEST_LAG, T_FULL, T_MAX_SECONDS, T_RECHECK, T_MASK, T_BOUND, T_COUNT };

#define SINCE_SHIFT 8 /* verdicts._SHIFT */

static PyObject *name_host, *name_client_id, *name_frombytes, *name_old_ids, *name_old, *name_at, *name_run_from,
    *name_run_to, *name_new_ids, *name_new, *name_within_first, *name_cparams;

/* Bytes gathered in C before they go to a Python object at once (Book). */
typedef struct {
    char *v;
    Py_ssize_t n, cap;
} Buf;

static int buf_put(Buf *b, const void *from, Py_ssize_t size) {
    if (size > PY_SSIZE_T_MAX / 2 - b->n) {
        PyErr_NoMemory();
        return -1;
    }
    if (b->n + size > b->cap) {
        Py_ssize_t cap = b->cap ? b->cap : 1024;
        while (cap < b->n + size)
            cap *= 2;
        char *v = PyMem_Realloc(b->v, (size_t)cap);
        if (v == NULL) {
            PyErr_NoMemory();
            return -1;
        }
        b->v = v;
        b->cap = cap;
    }
    memcpy(b->v + b->n, from, (size_t)size);
    b->n += size;
    return 0;
}

/* LagdJudge's bookkeeping of kept facts for the topic being judged (its `_find`, `_reuse`,
 * `_copy_run` and `_keep_packed`, on its own attributes). The partitions kept and their facts
 * are gathered in `ids` and `facts` and go to `new_ids` and `new_` once per call (book_flush),
 * not a Python call and a bytearray resize per partition (a fifth of a first judgement's pass). */
typedef struct {
    Int64s old_ids; /* n = 0 and no view: none kept */
    int has_view;
    PyObject *old, *new_ids, *new_; /* bytes, array('q'), bytearray: new references */
    Py_ssize_t at, run_from, run_to;
    int within_first;
    Buf ids, facts; /* what goes to new_ids and new_ next, in order */
} Book;

static int attr_index(PyObject *obj, PyObject *name, Py_ssize_t *out) {
    PyObject *v = PyObject_GetAttr(obj, name);
    if (v == NULL)
        return -1;
    int got = as_index(v, out);
    Py_DECREF(v);
    return got;
}

static void book_close(Book *b) {
    if (b->has_view)
        PyBuffer_Release(&b->old_ids.view);
    b->has_view = 0;
    Py_CLEAR(b->old);
    Py_CLEAR(b->new_ids);
    Py_CLEAR(b->new_);
    PyMem_Free(b->ids.v);
    PyMem_Free(b->facts.v);
    memset(&b->ids, 0, sizeof b->ids);
    memset(&b->facts, 0, sizeof b->facts);
}

/* 1: opened; 0: a layout this pass does not take (the Python judges); -1: an exception. */
static int book_open(PyObject *judge, Book *b) {
    memset(b, 0, sizeof *b);
    PyObject *ids = PyObject_GetAttr(judge, name_old_ids);
    if (ids == NULL)
        return -1;
    int got = 0;
    if (PyTuple_Check(ids) && PyTuple_GET_SIZE(ids) == 0)
        got = 1;
    else if (int64s(ids, &b->old_ids) == 0)
        got = b->has_view = 1;
    else if (PyErr_ExceptionMatches(PyExc_TypeError) || PyErr_ExceptionMatches(PyExc_BufferError))
        PyErr_Clear();
    else
        got = -1;
    Py_DECREF(ids);
    if (got <= 0)
        return got;
    b->old = PyObject_GetAttr(judge, name_old);
    b->new_ids = PyObject_GetAttr(judge, name_new_ids);
    b->new_ = PyObject_GetAttr(judge, name_new);
    PyObject *wf = PyObject_GetAttr(judge, name_within_first);
    if (b->old == NULL || b->new_ids == NULL || b->new_ == NULL || wf == NULL || as_bool(wf, &b->within_first) ||
        attr_index(judge, name_at, &b->at) || attr_index(judge, name_run_from, &b->run_from) ||
        attr_index(judge, name_run_to, &b->run_to)) {
        Py_XDECREF(wf);
        book_close(b);
        return -1;
    }
    Py_DECREF(wf);
    Py_ssize_t kept = PyBytes_Check(b->old) ? PyBytes_GET_SIZE(b->old) / FACTS_SIZE : -1;
    if (!PyByteArray_Check(b->new_) || kept != b->old_ids.n || b->at < 0 || b->at > kept || b->run_from < 0 ||
        b->run_from > b->run_to || b->run_to > kept) {
        book_close(b);
        return 0;
    }
    return 1;
}

/* Write back where the bookkeeping stands (-1: an exception). */
static int book_save(PyObject *judge, const Book *b) {
    PyObject *at = PyLong_FromSsize_t(b->at), *from = PyLong_FromSsize_t(b->run_from),
             *to = PyLong_FromSsize_t(b->run_to);
    int got = at != NULL && from != NULL && to != NULL && PyObject_SetAttr(judge, name_at, at) == 0 &&
                      PyObject_SetAttr(judge, name_run_from, from) == 0 && PyObject_SetAttr(judge, name_run_to, to) == 0
                  ? 0
                  : -1;
    Py_XDECREF(at);
    Py_XDECREF(from);
    Py_XDECREF(to);
    return got;
}

/* LagdJudge._find */
static Py_ssize_t book_find(Book *b, int64_t key) {
    const int64_t *ids = b->old_ids.v;
    Py_ssize_t n = b->old_ids.n, i = b->at;
    if (i == n || ids[i] != key) {
        i = bisect_left(ids, key, i, n);
        if (i == n || ids[i] != key) {
            b->at = i;
            return -1;
        }
    }
    b->at = i + 1;
    return i;
}

static int append_bytes(PyObject *to, const char *from, Py_ssize_t size) {
    Py_ssize_t had = PyByteArray_GET_SIZE(to);
    if (PyByteArray_Resize(to, had + size) < 0)
        return -1;
    memcpy(PyByteArray_AS_STRING(to) + had, from, (size_t)size);
    return 0;
}

/* What the pass gathered goes to the judge's new_ids and new_ (-1: an exception). Before the
 * pass returns: the Python appends to them between two calls. */
static int book_flush(Book *b) {
    if (b->ids.n) {
        PyObject *bytes = PyBytes_FromStringAndSize(b->ids.v, b->ids.n);
        if (bytes == NULL)
            return -1;
        PyObject *r = PyObject_CallMethodOneArg(b->new_ids, name_frombytes, bytes);
        Py_DECREF(bytes);
        if (r == NULL)
            return -1;
        Py_DECREF(r);
        b->ids.n = 0;
    }
    if (b->facts.n) {
        if (append_bytes(b->new_, b->facts.v, b->facts.n) < 0)
            return -1;
        b->facts.n = 0;
    }
    return 0;
}

/* LagdJudge._copy_run */
static int book_copy_run(Book *b) {
    if (b->run_to > b->run_from && buf_put(&b->facts, PyBytes_AS_STRING(b->old) + b->run_from * FACTS_SIZE,
                                           (b->run_to - b->run_from) * FACTS_SIZE) < 0)
        return -1;
    b->run_from = b->run_to;
    return 0;
}

/* LagdJudge._reuse */
static int book_reuse(Book *b, int64_t key, Py_ssize_t i) {
    if (buf_put(&b->ids, &key, 8) < 0)
        return -1;
    if (i != b->run_to) {
        if (book_copy_run(b) < 0)
            return -1;
        b->run_from = i;
    }
    b->run_to = i + 1;
    return 0;
}

/* LagdJudge._keep_packed, for a partition not kept yet in this judgement (the pass judges each once) */
static int book_keep(Book *b, int64_t key, PyObject *packed) {
    if (book_copy_run(b) < 0 || buf_put(&b->ids, &key, 8) < 0)
        return -1;
    return buf_put(&b->facts, PyBytes_AS_STRING(packed), PyBytes_GET_SIZE(packed));
}

/* The group summary as the pass reads it: 1, or 0 where a number is past int64 (hostile lags
 * summed): the Python goes on with it. */
typedef struct {
    int64_t worst, totallag, maxlag, best_lag, full, recheck, mask, bound;
    double max_seconds;
} Tally;

static int tally_read(PyObject *list, Tally *t) {
    if (!PyList_CheckExact(list) || PyList_GET_SIZE(list) != T_COUNT) {
        PyErr_SetString(PyExc_TypeError, "expected the group summary list (verdicts._Tally)");
        return -1;
    }
    int64_t *ints[] = {&t->worst, &t->totallag, &t->maxlag, &t->best_lag, &t->full, NULL, &t->recheck, &t->mask, &t->bound};
    int declined = 0;
    for (int k = 0; k < T_COUNT; k++) {
        PyObject *v = PyList_GET_ITEM(list, k);
        if (k == T_MAX_SECONDS) {
            if (!PyFloat_CheckExact(v))
                return 0;
            t->max_seconds = PyFloat_AS_DOUBLE(v);
            continue;
        }
        long long x;
        if (!PyLong_CheckExact(v))
            return 0;
        if (as_int64(v, &x, &declined) < 0)
            return -1;
        *ints[k] = x;
    }
    return !declined;
}

static int tally_write(PyObject *list, const Tally *t) {
    int64_t ints[] = {t->worst, t->totallag, t->maxlag, t->best_lag, t->full, 0, t->recheck, t->mask, t->bound};
    for (int k = 0; k < T_COUNT; k++) {
        PyObject *v = k == T_MAX_SECONDS ? PyFloat_FromDouble(t->max_seconds) : PyLong_FromLongLong(ints[k]);
        if (v == NULL || PyList_SetItem(list, k, v) < 0)
            return -1;
    }
    return 0;
}

/* A verdict's entries: the window's oldest and newest entries, flat (verdicts: arr[:FIELDS] + arr[LAST:]). */
static PyObject *entries_of(PyObject *template, const Int64s *arr, Py_ssize_t fields) {
    PyObject *e = PySequence_GetSlice(template, 0, 2 * fields);
    if (e == NULL)
        return NULL;
    Py_buffer view;
    if (PyObject_GetBuffer(e, &view, PyBUF_WRITABLE | PyBUF_C_CONTIGUOUS) < 0) {
        Py_DECREF(e);
        return NULL;
    }
    if (view.len != 2 * fields * 8) {
        PyBuffer_Release(&view);
        Py_DECREF(e);
        PyErr_SetString(PyExc_TypeError, "expected the entries template as array('q') of two entries");
        return NULL;
    }
    memcpy(view.buf, arr->v, (size_t)fields * 8);
    memcpy((char *)view.buf + fields * 8, arr->v + arr->n - fields, (size_t)fields * 8);
    PyBuffer_Release(&view);
    return e;
}

/* Where a PartitionVerdict holds each of its fields (its dataclass slots, in the order its
 * __init__ takes them): the pass fills them in place, as that __init__ would, where calling it
 * took a fifth of the pass (a Python frame per partition). 0: not that class, as this code knows
 * it (verdicts.py disables the pass at import for another). */
#define VERDICT_FIELDS 13
static const char *verdict_fields[VERDICT_FIELDS] = {
    "topic", "partition", "status", "entries", "current_lag", "complete", "owner", "client_id", "lag_seconds",
    "lag_seconds_estimated", "why", "since", "rule"};

static int verdict_layout(PyObject *type, Py_ssize_t *offsets) {
    if (!PyType_Check(type) || ((PyTypeObject *)type)->tp_dictoffset != 0)
        return 0;
    Py_ssize_t size = ((PyTypeObject *)type)->tp_basicsize;
    PyObject *names = PyObject_GetAttrString(type, "__match_args__");
    if (names == NULL) {
        PyErr_Clear();
        return 0;
    }
    int got = PyTuple_Check(names) && PyTuple_GET_SIZE(names) == VERDICT_FIELDS;
    for (Py_ssize_t k = 0; got && k < VERDICT_FIELDS; k++) {
        PyObject *name = PyTuple_GET_ITEM(names, k);
        got = PyUnicode_Check(name) && PyUnicode_CompareWithASCIIString(name, verdict_fields[k]) == 0;
        PyObject *slot = got ? PyObject_GetAttr(type, name) : NULL;
        if (slot == NULL) {
            PyErr_Clear();
            got = 0;
            break;
        }
        /* a writable object slot of this very class, under its own name, inside the object */
        got = Py_IS_TYPE(slot, &PyMemberDescr_Type) && PyDescr_TYPE(slot) == (PyTypeObject *)type &&
              PyUnicode_Compare(PyDescr_NAME(slot), name) == 0;
        if (got) {
            PyMemberDef *member = ((PyMemberDescrObject *)slot)->d_member;
            offsets[k] = member->offset;
            got = member->type == T_OBJECT_EX && !(member->flags & READONLY) &&
                  offsets[k] >= (Py_ssize_t)sizeof(PyObject) &&
                  offsets[k] <= size - (Py_ssize_t)sizeof(PyObject *);
            for (Py_ssize_t j = 0; got && j < k; j++)
                got = offsets[j] != offsets[k];
        }
        Py_DECREF(slot);
    }
    Py_DECREF(names);
    return got;
}

/* A PartitionVerdict with these fields (steals none of them). */
static PyObject *verdict_of(PyObject *type, const Py_ssize_t *offsets, PyObject *topic, PyObject *key,
                            PyObject *status, PyObject *entries, int64_t current_lag, double complete, PyObject *owner,
                            PyObject *no_owner, double seconds, int estimated, PyObject *reason, int64_t seen,
                            PyObject *rule) {
    PyObject *host = owner != NULL ? PyObject_GetAttr(owner, name_host) : Py_NewRef(no_owner);
    PyObject *client = owner != NULL ? PyObject_GetAttr(owner, name_client_id) : Py_NewRef(no_owner);
    PyObject *lag = PyLong_FromLongLong((long long)current_lag), *done = PyFloat_FromDouble(complete),
             *secs = PyFloat_FromDouble(seconds), *since = PyLong_FromLongLong((long long)seen);
    PyObject *out = NULL;
    if (host != NULL && client != NULL && lag != NULL && done != NULL && secs != NULL && since != NULL) {
        PyObject *fields[VERDICT_FIELDS] = {topic, key,  status, entries, lag, done,  host,
                                            client, secs, estimated ? Py_True : Py_False, reason, since, rule};
        out = ((PyTypeObject *)type)->tp_alloc((PyTypeObject *)type, 0);
        for (int k = 0; out != NULL && k < VERDICT_FIELDS; k++) /* no allocation here: no collection sees it half made */
            *(PyObject **)((char *)out + offsets[k]) = Py_NewRef(fields[k]);
    }
    Py_XDECREF(host);
    Py_XDECREF(client);
    Py_XDECREF(lag);
    Py_XDECREF(done);
    Py_XDECREF(secs);
    Py_XDECREF(since);
    return out;
}

/* Is this exception one where the Python, not the pass, should answer (the arrays are not as
 * lagd keeps them)? Then it is cleared. */
static int hand_back_on(void) {
    if (PyErr_ExceptionMatches(PyExc_ValueError) || PyErr_ExceptionMatches(PyExc_TypeError) ||
        PyErr_ExceptionMatches(PyExc_BufferError)) {
        PyErr_Clear();
        return 1;
    }
    return 0;
}

/* A fixed judgement (status, rule, reason) as the partition's answer, re-checked at `due`. */
static void said_fixed(Said *s, PyObject *triple, int64_t due) {
    s->status = PyTuple_GET_ITEM(triple, 0);
    s->rule = PyTuple_GET_ITEM(triple, 1);
    s->reason = PyTuple_GET_ITEM(triple, 2);
    s->at = due;
    s->reached = 0.0;
    s->bound = 0;
    s->owned = NULL;
}

/* Burrow's judgements (rules.py), in the order verdicts' pass context lists them. */
enum { FLAT_STOP, FLAT_REWIND, FLAT_RECENT_LOW_LAG, FLAT_STALL, FLAT_WARN, FLAT_PROGRESSING, FLAT_COUNT };

/* rules.judge_flat for a partition behind by more than allowed-lag, with the newest `recent`
 * log-end samples for STOP: a FLAT_* judgement. */
static int judge_flat(const Partition *x, const Params *p, int64_t now_ms, Py_ssize_t recent) {
    Py_ssize_t fields = p->fields, n = x->arr.n / fields;
    const int64_t *v = x->arr.v, *newest_entry = v + (n - 1) * fields;
    int64_t last_ts = newest_entry[p->at_ts];
    if ((i128)now_ms - last_ts > (i128)last_ts - v[p->at_ts]) {
        Py_ssize_t from = recent > 0 && recent < x->o.n ? x->o.n - recent : 0;
        int caught = 0;
        for (Py_ssize_t i = from; i < x->o.n && !caught; i++)
            caught = x->o.v[i] <= newest_entry[p->at_offset];
        if (!caught)
            return FLAT_STOP;
    }
    int sorted = 1, same;
    for (Py_ssize_t i = 1; i < n && sorted; i++)
        sorted = v[i * fields + p->at_offset] >= v[(i - 1) * fields + p->at_offset];
    if (sorted)
        same = v[p->at_offset] == newest_entry[p->at_offset];
    else {
        same = 0;
        for (Py_ssize_t i = 1; i < n; i++) {
            int64_t before = v[(i - 1) * fields + p->at_offset];
            if (v[i * fields + p->at_offset] < before) {
                int64_t most = v[i * fields + p->at_offset];
                for (Py_ssize_t j = i + 1; j < n; j++)
                    if (v[j * fields + p->at_offset] > most)
                        most = v[j * fields + p->at_offset];
                if (most < before)
                    return FLAT_REWIND;
                break;
            }
        }
    }
    /* the lags the window knows (NO_LAG: null), their least, and whether they never decrease */
    int known = 0, rising = 1;
    int64_t least = 0, previous = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        int64_t lag = v[i * fields + p->at_lag];
        if (lag == INT64_MIN)
            continue;
        if (known && lag < previous)
            rising = 0;
        if (!known || lag < least)
            least = lag;
        previous = lag;
        known = 1;
    }
    if (known && least <= p->allowed_lag)
        return FLAT_RECENT_LOW_LAG;
    if (same)
        return FLAT_STALL;
    return rising ? FLAT_WARN : FLAT_PROGRESSING;
}

/* A partition as a snapshot row (snapshot.ROW: topic index, partition, current lag, the newest
 * offset or -1 where the window is not full, status code) and its lag in seconds, appended to
 * `rows` and `seconds` (bytearrays; -1: an exception is set). */
#define ROW_INTS 5
static int append_row(PyObject *rows, PyObject *seconds, int64_t topic_index, int64_t partition, int64_t current_lag,
                      int64_t end, int64_t code, double lag_s) {
    int64_t row[ROW_INTS] = {topic_index, partition, current_lag, end, code};
    return append_bytes(rows, (const char *)row, sizeof row) < 0 ||
                   append_bytes(seconds, (const char *)&lag_s, sizeof lag_s) < 0
               ? -1
               : 0;
}

static PyObject *judge_topic(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    if (nargs != 17 && nargs != 20) {
        PyErr_SetString(PyExc_TypeError, "judge_topic takes 17 arguments, or 20 with rows");
        return NULL;
    }
    PyObject *ctx = args[0], *judge = args[1], *tally_list = args[2], *topic = args[3], *parts = args[6],
             *log_ends = args[7], *owners = args[8], *partitions = args[11];
    /* rows: each partition as a snapshot row (append_row) instead of a PartitionVerdict */
    PyObject *rows = nargs == 20 && args[17] != Py_None ? args[17] : NULL, *row_seconds = NULL;
    Py_ssize_t topic_index = 0;
    if (rows != NULL) {
        row_seconds = args[18];
        if (!PyByteArray_CheckExact(rows) || !PyByteArray_CheckExact(row_seconds) ||
            PyByteArray_GET_SIZE(rows) % (ROW_INTS * 8) || as_index(args[19], &topic_index)) {
            if (!PyErr_Occurred())
                PyErr_SetString(PyExc_TypeError, "judge_topic: expected rows and seconds as bytearrays");
            return NULL;
        }
    }
    Py_ssize_t start, stop, intervals;
    long long now_ms, judged_at;
    double minimum;
    int declined = 0, lagd;
    if (as_index(args[4], &start) || as_index(args[5], &stop) || as_int64(args[12], &now_ms, &declined) ||
        as_int64(args[13], &judged_at, &declined) || as_index(args[14], &intervals) || as_double(args[15], &minimum) ||
        as_bool(args[16], &lagd))
        return NULL;
    if (!PyTuple_CheckExact(ctx) || PyTuple_GET_SIZE(ctx) != CTX_COUNT || !PyDict_Check(parts) ||
        !PyDict_Check(log_ends) || !PyDict_Check(owners) || !PyList_Check(partitions) ||
        !PyTuple_Check(PyTuple_GET_ITEM(ctx, CTX_STATUSES)) || !PyTuple_Check(PyTuple_GET_ITEM(ctx, CTX_RANKS)) ||
        PyTuple_GET_SIZE(PyTuple_GET_ITEM(ctx, CTX_STATUSES)) != PyTuple_GET_SIZE(PyTuple_GET_ITEM(ctx, CTX_RANKS)) ||
        !PyTuple_Check(PyTuple_GET_ITEM(ctx, CTX_EMPTY)) || PyTuple_GET_SIZE(PyTuple_GET_ITEM(ctx, CTX_EMPTY)) != 2 ||
        !PyTuple_Check(PyTuple_GET_ITEM(ctx, CTX_CAUGHT_UP)) ||
        PyTuple_GET_SIZE(PyTuple_GET_ITEM(ctx, CTX_CAUGHT_UP)) != 3 || !PyTuple_Check(PyTuple_GET_ITEM(ctx, CTX_FLAT)) ||
        PyTuple_GET_SIZE(PyTuple_GET_ITEM(ctx, CTX_FLAT)) != FLAT_COUNT) {
        PyErr_SetString(PyExc_TypeError, "judge_topic: expected verdicts' pass context, dicts and a list");
        return NULL;
    }
    PyObject *statuses = PyTuple_GET_ITEM(ctx, CTX_STATUSES), *ranks = PyTuple_GET_ITEM(ctx, CTX_RANKS),
             *flat = PyTuple_GET_ITEM(ctx, CTX_FLAT);
    for (Py_ssize_t j = 0; j < FLAT_COUNT; j++)
        if (!PyTuple_Check(PyTuple_GET_ITEM(flat, j)) || PyTuple_GET_SIZE(PyTuple_GET_ITEM(flat, j)) != 3) {
            PyErr_SetString(PyExc_TypeError, "judge_topic: expected Burrow's judgements as (status, rule, reason)");
            return NULL;
        }
    Py_ssize_t nstatus = PyTuple_GET_SIZE(statuses), ok_code;
    if (as_index(PyTuple_GET_ITEM(ctx, CTX_OK_CODE), &ok_code))
        return NULL;
    PyObject *said = PyTuple_GET_ITEM(ctx, CTX_SAID), *ok = NULL, *warn = NULL;
    PyObject *cparams = PyObject_GetAttr(judge, name_cparams);
    if (cparams == NULL)
        return NULL;
    Params p;
    int settings = cparams != Py_None && read_settings(cparams, said, &p);
    Py_DECREF(cparams);
    if (!settings)
        return PyErr_Occurred() ? NULL : PyLong_FromSsize_t(start); /* the Python judges */
    if (ok_code < 0 || ok_code >= nstatus)
        return PyLong_FromSsize_t(start);
    ok = PyTuple_GET_ITEM(statuses, ok_code);
    warn = PyTuple_GET_ITEM(said, SAID_WARN);
    /* Times and `seen << 8` in int64, compared with doubles exactly: else the Python answers */
    if (declined || !exact(now_ms) || !exact(judged_at) || intervals <= 0 || intervals > EXACT || start < 0 ||
        stop > EXACT)
        return PyLong_FromSsize_t(start);
    Tally t;
    int got = tally_read(tally_list, &t);
    if (got <= 0)
        return got < 0 ? NULL : PyLong_FromSsize_t(start);
    Int64s before, since;
    if (PyObject_GetBuffer(args[9], &before.view, PyBUF_FORMAT | PyBUF_C_CONTIGUOUS) < 0)
        return NULL;
    if (PyObject_GetBuffer(args[10], &since.view, PyBUF_FORMAT | PyBUF_C_CONTIGUOUS | PyBUF_WRITABLE) < 0) {
        PyBuffer_Release(&before.view);
        return NULL;
    }
    before.v = before.view.buf;
    before.n = before.view.len / 8;
    since.v = since.view.buf;
    since.n = since.view.len / 8;
    int64_t *since_v = (int64_t *)since.view.buf;
    Book b;
    int opened = 0;
    Py_ssize_t k = start;
    PyObject *result = NULL;
    if (before.view.itemsize != 8 || since.view.itemsize != 8 || before.view.format == NULL ||
        since.view.format == NULL || strcmp(before.view.format, since.view.format) != 0 ||
        (before.view.format[0] != 'q' && before.view.format[0] != 'l') || before.n < stop || since.n < stop)
        goto out; /* not the since slots the Python gives: it judges */
    opened = book_open(judge, &b);
    if (opened < 0)
        goto fail;
    if (opened == 0)
        goto out;
    PyObject *caught_up = PyTuple_GET_ITEM(ctx, CTX_CAUGHT_UP), *empty = PyTuple_GET_ITEM(ctx, CTX_EMPTY);
    PyObject *no_owner = PyTuple_GET_ITEM(ctx, CTX_NO_OWNER), *type = PyTuple_GET_ITEM(ctx, CTX_VERDICT);
    Py_ssize_t offsets[VERDICT_FIELDS];
    if (!verdict_layout(type, offsets)) {
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_TypeError, "judge_topic: expected PartitionVerdict, a dataclass with slots");
        goto fail;
    }
    LogEndLayout layout; /* of LogEnd, the class of the log end judged for a partition without samples */
    log_end_layout(PyTuple_GET_ITEM(ctx, CTX_NO_LOG_END), &layout);
    const int64_t mask = (1 << SINCE_SHIFT) - 1;
    int has_owners = rows == NULL && PyDict_GET_SIZE(owners) > 0; /* rows name no owner */
#define JUDGED() (rows != NULL ? PyByteArray_GET_SIZE(rows) / (ROW_INTS * 8) : PyList_GET_SIZE(partitions))
    /* what an iteration holds: its partition number, window, log end and owner */
#define LET_GO()                                                                                                       \
    do {                                                                                                               \
        Py_DECREF(key);                                                                                                \
        Py_XDECREF(arr);                                                                                               \
        Py_XDECREF(le);                                                                                                \
        Py_XDECREF(owner);                                                                                             \
    } while (0)
    for (; k < stop; k++) {
        PyObject *key = PyLong_FromSsize_t(k), *owner = NULL, *entries = NULL, *verdict = NULL, *packed = NULL;
        if (key == NULL)
            goto fail;
        PyObject *arr = PyDict_GetItemWithError(parts, key);
        PyObject *le = arr != NULL || !PyErr_Occurred() ? PyDict_GetItemWithError(log_ends, key) : NULL;
        if (PyErr_Occurred()) {
            Py_DECREF(key);
            goto fail;
        }
        /* held, not borrowed: what runs below (a key's __eq__, a LogEnd's attributes) could drop them */
        Py_XINCREF(arr);
        Py_XINCREF(le);
        if (has_owners) {
            PyObject *where = PyTuple_Pack(2, topic, key);
            owner = where != NULL ? PyDict_GetItemWithError(owners, where) : NULL;
            Py_XINCREF(owner);
            Py_XDECREF(where);
            if (PyErr_Occurred()) {
                LET_GO();
                goto fail;
            }
        }
        int64_t prior = before.v[k];
        int full = arr != NULL ? PyObject_IsTrue(arr) : 0;
        if (full < 0) {
            LET_GO();
            goto fail;
        }
        if (!full) { /* no commits: OK, complete 0, no lag (Burrow's empty ring) */
            int64_t seen = prior && (prior & mask) == ok_code ? prior >> SINCE_SHIFT : now_ms;
            if (t.best_lag < 0) {
                t.maxlag = JUDGED();
                t.best_lag = 0;
            }
            t.mask |= (int64_t)1 << ok_code;
            if (rows != NULL) {
                LET_GO();
                if (append_row(rows, row_seconds, topic_index, k, 0, -1, ok_code, 0.0) < 0)
                    goto fail;
            } else {
                verdict = verdict_of(type, offsets, topic, key, ok, Py_None, 0, 0.0, owner, no_owner, 0.0, le == NULL,
                                     PyTuple_GET_ITEM(empty, 0), seen, PyTuple_GET_ITEM(empty, 1));
                LET_GO();
                if (verdict == NULL || PyList_Append(partitions, verdict) < 0) {
                    Py_XDECREF(verdict);
                    goto fail;
                }
                Py_DECREF(verdict);
            }
            since_v[k] = (int64_t)((uint64_t)seen << SINCE_SHIFT) | ok_code;
            continue;
        }
        Partition x;
        PyObject *jle = le != NULL ? le : PyTuple_GET_ITEM(ctx, CTX_NO_LOG_END);
        if (take_partition(arr, jle, &layout, &x) < 0) {
            LET_GO();
            if (hand_back_on())
                break;
            goto fail;
        }
        Py_ssize_t fields = p.fields, n = x.arr.n / fields;
        Said s = {0};
        int hand_back = n == 0 || x.arr.n % fields || (prior && (prior & mask) >= nstatus);
        int64_t committed = hand_back ? 0 : x.arr.v[x.arr.n - fields + p.at_offset];
        int64_t current_lag = 0;
        int estimated = le == NULL;
        if (!hand_back && le != NULL && x.o.n) {
            i128 lag = (i128)x.o.v[x.o.n - 1] - committed;
            if (lag > INT64_MAX)
                hand_back = 1;
            else if (lag > 0)
                current_lag = (int64_t)lag;
        }
        int64_t totallag = t.totallag;
        if (!hand_back && current_lag && __builtin_add_overflow(t.totallag, current_lag, &totallag))
            hand_back = 1;
        double complete = 1.0;
        if (n < intervals)
            complete = (double)n / (double)intervals;
        if (!(complete >= minimum))
            hand_back = 1; /* J_INCOMPLETE: judged in Python */
        int was_behind = !hand_back && lagd && prior && PyTuple_GET_ITEM(statuses, prior & mask) == warn;
        Py_ssize_t at_before = b.at, reuse = -1;
        int reached_later = 0; /* a fixed answer: when the log end reached the committed offset is read below */
        if (hand_back) {
        } else if (current_lag <= p.allowed_lag && !was_behind) {
            said_fixed(&s, caught_up, NEVER);
            reached_later = 1;
        } else if (!lagd) { /* Burrow's rules */
            int j = judge_flat(&x, &p, now_ms, intervals);
            said_fixed(&s, PyTuple_GET_ITEM(flat, j), NEVER);
            if (j != FLAT_STOP) { /* re-checked when silent for longer than the window spans: STOP */
                const int64_t *newest_entry = x.arr.v + x.arr.n - fields;
                i128 at = 2 * (i128)newest_entry[p.at_ts] - x.arr.v[p.at_ts] + 1;
                if (at > INT64_MAX || at < INT64_MIN)
                    hand_back = 1;
                else
                    s.at = (int64_t)at;
            }
            reached_later = 1;
        } else {
            Py_ssize_t i = book_find(&b, (int64_t)k);
            int stand = 0;
            if (i >= 0) {
                Facts f;
                unpack_facts(PyBytes_AS_STRING(b.old) + i * FACTS_SIZE, &f);
                stand = facts_stand(&f, &x, jle, &p);
                if (stand) {
                    /* from them, fitting the trend first where it is needed: then they are kept anew */
                    int fitted = 0;
                    int got = judge_facts(&f, &x, &p, current_lag, judged_at, was_behind, said, &fitted, &s);
                    if (got < 0)
                        goto fail_partition;
                    if (got == 0)
                        hand_back = 1; /* only the Python answers exactly */
                    else if (fitted) {
                        packed = pack_facts(&f);
                        if (packed == NULL)
                            goto fail_partition;
                    } else
                        reuse = i;
                }
            }
            if (!stand) {
                Moments m;
                int quick = !was_behind && b.within_first;
                if (!moments_of(&x.arr, fields, p.at_offset, &x.o, &x.t, x.lo, x.has_coarse, current_lag != 0,
                                judged_at, quick, p.allowed_s, p.allowed_ms, &m))
                    hand_back = 1;
                else if (m.has_due) {
                    said_fixed(&s, PyTuple_GET_ITEM(said, SAID_WITHIN_SECONDS), m.due);
                    s.reached = m.reached != -Py_HUGE_VAL ? m.reached : 0.0;
                    s.bound = m.estimated;
                } else {
                    int got = fresh_of(&x, jle, &p, current_lag, judged_at, was_behind, &m, said, &packed, &s);
                    if (got < 0)
                        goto fail_partition;
                    hand_back = got == 0;
                }
            }
        }
        /* lagtime.reached_in (verdicts inlines it within the newest run of samples, the same answer) */
        if (!hand_back && reached_later && current_lag)
            hand_back = x.lo >= x.o.n ||
                        !reached_in(x.o.v, x.t.v, x.lo, x.o.n, x.has_coarse, committed, &s.reached, &s.bound);
        Py_ssize_t code = 0;
        if (!hand_back) {
            while (code < nstatus && PyTuple_GET_ITEM(statuses, code) != s.status)
                code++;
            if (code == nstatus)
                hand_back = 1;
        }
        if (hand_back) {
            b.at = at_before; /* nothing of it done */
            give_back(&x);
            LET_GO();
            said_release(&s);
            Py_XDECREF(packed);
            break;
        }
        /* the answer is final: keep its facts, then fold it in */
        if ((reuse >= 0 && book_reuse(&b, (int64_t)k, reuse) < 0) ||
            (packed != NULL && book_keep(&b, (int64_t)k, packed) < 0))
            goto fail_partition;
        double seconds = 0.0;
        if (current_lag) {
            estimated = s.bound;
            t.totallag = totallag;
            if ((double)now_ms > s.reached) {
                seconds = ((double)now_ms - s.reached) / 1000.0;
                if (seconds > t.max_seconds)
                    t.max_seconds = seconds;
            }
        }
        if (s.at < t.recheck)
            t.recheck = s.at;
        if (n >= intervals)
            t.full++;
        if (current_lag > t.best_lag) {
            t.maxlag = JUDGED();
            t.best_lag = current_lag;
        }
        t.mask |= (int64_t)1 << code;
        if (current_lag > 0 && estimated)
            t.bound = 1;
        if (s.status != ok) {
            Py_ssize_t rank;
            if (as_index(PyTuple_GET_ITEM(ranks, code), &rank))
                goto fail_partition;
            if (rank > t.worst)
                t.worst = rank;
        }
        int64_t seen = prior && (prior & mask) == code ? prior >> SINCE_SHIFT : now_ms;
        if (rows != NULL) {
            int64_t end = n >= intervals ? x.arr.v[x.arr.n - fields + p.at_offset] : -1;
            if (append_row(rows, row_seconds, topic_index, k, current_lag, end, code, seconds) < 0)
                goto fail_partition;
        } else {
            entries = entries_of(PyTuple_GET_ITEM(ctx, CTX_ENTRIES), &x.arr, fields);
            if (entries == NULL)
                goto fail_partition;
            verdict = verdict_of(type, offsets, topic, key, s.status, entries, current_lag, complete, owner, no_owner,
                                 seconds, estimated, s.reason, seen, s.rule);
            if (verdict == NULL || PyList_Append(partitions, verdict) < 0)
                goto fail_partition;
        }
        since_v[k] = (int64_t)((uint64_t)seen << SINCE_SHIFT) | code;
        give_back(&x);
        LET_GO();
        said_release(&s);
        Py_XDECREF(packed);
        Py_XDECREF(entries);
        Py_XDECREF(verdict);
        continue;
    fail_partition:
        give_back(&x);
        LET_GO();
        said_release(&s);
        Py_XDECREF(packed);
        Py_XDECREF(entries);
        Py_XDECREF(verdict);
        goto fail;
    }
#undef LET_GO
#undef JUDGED
    if (book_flush(&b) < 0 || book_save(judge, &b) < 0 || tally_write(tally_list, &t) < 0)
        goto fail;
out:
    result = PyLong_FromSsize_t(k);
fail:
    if (opened > 0)
        book_close(&b); /* after an exception what it gathered goes too: the evaluation keeps none of it */
    PyBuffer_Release(&before.view);
    PyBuffer_Release(&since.view);
    return result;
}

/* snapshot_rows: snapshot.snapshot_of's loop over a verdict's partitions (see there), or None
 * where the Python reads them: anything but a list of exact PartitionVerdicts (as this code knows
 * their slots) with exact str topics, exact int partitions and lags within int64, exact float
 * completes and lags in seconds, a status among `statuses` (by identity: no Python code runs to
 * compare them), and entries None or an exact array of int64 long enough to read `end_at` from.
 * Returns (rows: bytes of ROW native int64 per partition, seconds: bytes of a native double per
 * partition, topics: the topics in order of first sight, bound, mask): `bound` is true where a
 * lagging partition's lag in seconds is estimated, `mask` has bit k set where a partition has the
 * k-th status. With `with_rows` false the bytes are empty and topics (): only bound and mask. */
#define SNAPSHOT_ROW 5
static PyObject *snapshot_rows(PyObject *Py_UNUSED(self), PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 6) {
        PyErr_SetString(PyExc_TypeError, "snapshot_rows(parts, verdict_type, statuses, array_type, end_at, with_rows)");
        return NULL;
    }
    PyObject *parts = args[0], *type = args[1], *statuses = args[2], *array_type = args[3];
    Py_ssize_t end_at, offsets[VERDICT_FIELDS];
    int with_rows;
    if (as_index(args[4], &end_at) < 0 || as_bool(args[5], &with_rows) < 0)
        return NULL;
    if (!PyTuple_Check(statuses) || PyTuple_GET_SIZE(statuses) > 62 || !PyType_Check(array_type) || end_at < 0) {
        PyErr_SetString(PyExc_TypeError, "snapshot_rows: expected a tuple of statuses, the array type, end_at >= 0");
        return NULL;
    }
    if (!PyList_CheckExact(parts))
        Py_RETURN_NONE; /* a subclass may iterate otherwise: the Python reads it */
    if (!verdict_layout(type, offsets)) {
        if (PyErr_Occurred())
            return NULL;
        Py_RETURN_NONE;
    }
    enum { F_TOPIC = 0, F_PARTITION = 1, F_STATUS = 2, F_ENTRIES = 3, F_LAG = 4, F_COMPLETE = 5, F_SECONDS = 8,
           F_ESTIMATED = 9 };
    /* The list is held; its items are exact verdicts whose slots are read in place, the topics'
     * dict takes exact str keys and the statuses are found by identity: within the loop no Python
     * code runs, so nothing can change the list while it is read. */
    Py_INCREF(parts);
    PyObject *rows = NULL, *seconds = NULL, *topics = NULL, *order = NULL, *result = NULL, *last_topic = NULL;
    int64_t *row = NULL, last_index = -1;
    double *secs = NULL;
    int bound = 0;
    unsigned long long mask = 0;
    /* These two may start a collection (they are tracked), which may run Python code that
     * changes the list: its length is read after them; bytes are not tracked. */
    topics = PyDict_New();
    order = PyList_New(0);
    Py_ssize_t n = PyList_GET_SIZE(parts);
    if (topics == NULL || order == NULL)
        goto done;
    rows = PyBytes_FromStringAndSize(NULL, with_rows ? n * SNAPSHOT_ROW * (Py_ssize_t)sizeof(int64_t) : 0);
    seconds = PyBytes_FromStringAndSize(NULL, with_rows ? n * (Py_ssize_t)sizeof(double) : 0);
    if (rows == NULL || seconds == NULL)
        goto done;
    row = (int64_t *)PyBytes_AS_STRING(rows);
    secs = (double *)PyBytes_AS_STRING(seconds);
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *p = PyList_GET_ITEM(parts, i), *f[VERDICT_FIELDS];
        if (!Py_IS_TYPE(p, (PyTypeObject *)type))
            goto python; /* a subclass may read its fields through Python code */
        for (int k = 0; k < VERDICT_FIELDS; k++)
            if ((f[k] = *(PyObject **)((char *)p + offsets[k])) == NULL)
                goto python; /* a slot never set: the Python raises as it would */
        if (!PyUnicode_CheckExact(f[F_TOPIC]) || !PyLong_CheckExact(f[F_PARTITION]) || !PyLong_CheckExact(f[F_LAG]) ||
            !PyFloat_CheckExact(f[F_COMPLETE]) || !PyFloat_CheckExact(f[F_SECONDS]) ||
            !PyBool_Check(f[F_ESTIMATED]))
            goto python;
        int overflow = 0;
        long long partition = PyLong_AsLongLongAndOverflow(f[F_PARTITION], &overflow), lag;
        if (overflow)
            goto python;
        lag = PyLong_AsLongLongAndOverflow(f[F_LAG], &overflow);
        if (overflow)
            goto python;
        Py_ssize_t code = -1;
        for (Py_ssize_t k = 0; k < PyTuple_GET_SIZE(statuses); k++)
            if (PyTuple_GET_ITEM(statuses, k) == f[F_STATUS]) {
                code = k;
                break;
            }
        if (code < 0)
            goto python;
        mask |= 1ULL << code;
        if (lag > 0 && f[F_ESTIMATED] == Py_True)
            bound = 1;
        if (!with_rows)
            continue;
        int64_t end = -1;
        PyObject *entries = f[F_ENTRIES];
        if (entries != Py_None) {
            if (!Py_IS_TYPE(entries, (PyTypeObject *)array_type))
                goto python; /* the Python indexes it: only an array's buffer is what indexing reads */
            if (PyFloat_AS_DOUBLE(f[F_COMPLETE]) == 1.0) {
                Py_buffer view;
                if (PyObject_GetBuffer(entries, &view, PyBUF_FORMAT | PyBUF_C_CONTIGUOUS) < 0) {
                    PyErr_Clear();
                    goto python;
                }
                int fits = view.itemsize == 8 && view.format != NULL && strcmp(view.format, "q") == 0 &&
                           view.len / 8 > end_at;
                if (fits)
                    end = ((const int64_t *)view.buf)[end_at];
                PyBuffer_Release(&view);
                if (!fits)
                    goto python;
            }
        }
        if (f[F_TOPIC] != last_topic) {
            PyObject *known = PyDict_GetItemWithError(topics, f[F_TOPIC]);
            if (known == NULL) {
                if (PyErr_Occurred())
                    goto done;
                PyObject *index = PyLong_FromSsize_t(PyList_GET_SIZE(order));
                if (index == NULL || PyDict_SetItem(topics, f[F_TOPIC], index) < 0 ||
                    PyList_Append(order, f[F_TOPIC]) < 0) {
                    Py_XDECREF(index);
                    goto done;
                }
                last_index = PyList_GET_SIZE(order) - 1;
                Py_DECREF(index);
            } else {
                last_index = PyLong_AsLongLong(known);
            }
            last_topic = f[F_TOPIC]; /* held by the verdict, which the held list holds */
        }
        int64_t *r = row + i * SNAPSHOT_ROW;
        r[0] = last_index;
        r[1] = partition;
        r[2] = lag;
        r[3] = end;
        r[4] = code;
        secs[i] = PyFloat_AS_DOUBLE(f[F_SECONDS]);
    }
    {
        PyObject *names = PyList_AsTuple(order);
        if (names != NULL)
            result = Py_BuildValue("(OONOK)", rows, seconds, names, bound ? Py_True : Py_False, mask);
    }
    goto done;
python:
    result = Py_NewRef(Py_None);
done:
    Py_XDECREF(rows);
    Py_XDECREF(seconds);
    Py_XDECREF(topics);
    Py_XDECREF(order);
    Py_DECREF(parts);
    return result;
}

static PyMethodDef methods[] = {
    {"moments", (PyCFunction)(void (*)(void))moments, METH_FASTCALL,
     "moments(arr, fields, offset_at, offsets, ts, run_start, has_coarse, current_lag, at_ms, within, "
     "allowed_lag_seconds, allowed_ms) -> (passed, reached, estimated, used, due | None) | None: "
     "lagd_fast._moments and, with `within`, LagdJudge._within_seconds's re-check; None where only the "
     "Python answers exactly."},
    {"standing", (PyCFunction)(void (*)(void))standing, METH_FASTCALL,
     "standing(facts, i, arr, log_end, current_lag, at_ms, was_behind, params, said) -> Answer | None: "
     "LagdJudge.judge from the i-th kept facts while they stand; None where they do not, a trend is to be "
     "fitted first, or only the Python answers exactly."},
    {"fresh", (PyCFunction)(void (*)(void))fresh, METH_FASTCALL,
     "fresh(arr, log_end, current_lag, at_ms, was_behind, passed, reached, estimated, used, params, said) -> "
     "(Answer, packed facts) | None: LagdJudge.judge from a partition's moments on, with its facts to keep; "
     "None where only the Python answers exactly."},
    {"judge_topic", (PyCFunction)(void (*)(void))judge_topic, METH_FASTCALL,
     "judge_topic(context, judge, tally, topic, start, stop, windows, log_ends, owners, since_before, since, "
     "partitions, now_ms, judged_at, intervals, minimum_complete, lagd[, rows, seconds, topic_index]) -> int: "
     "verdicts.Evaluator._evaluate's loop over the partitions start..stop-1 of a topic, under lagd's rules or "
     "Burrow's, each a PartitionVerdict appended to partitions, or with rows a snapshot row; returns the first it "
     "leaves to the Python (stop: none)."},
    {"fit", (PyCFunction)(void (*)(void))fit, METH_FASTCALL,
     "fit(arr, fields, offset_at, ts_at, offsets, ts, run_start, has_coarse, used, tie_s, min_points, z_enter, "
     "z_leave, allowed_lag_seconds, was_behind) -> (trend | None, used) | None: lagd_fast._fit, compiled; None "
     "where only the Python answers exactly."},
    {"snapshot_rows", (PyCFunction)(void (*)(void))snapshot_rows, METH_FASTCALL,
     "snapshot_rows(parts, verdict_type, statuses, array_type, end_at, with_rows) -> (rows, seconds, topics, bound, "
     "mask) | None: snapshot.snapshot_of's loop over a verdict's partitions; None where only the Python reads them."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "lagd.evaluate._trend", "lagd's trend fit, lag moments and judgement from kept facts, compiled (lagd_fast).", -1,
    methods, NULL, NULL, NULL, NULL};

/* The SHA-1 of the source this was built from (hatch_build.py passes it): native.py refuses a build
 * of another source, such as one left behind after _trend.c changed. */
#ifndef LAGD_SOURCE_SHA1
#define LAGD_SOURCE_SHA1 ""
#endif

/* The fields the pass fills, in their order, for verdicts.py to compare with PartitionVerdict's. */
static PyObject *verdict_names(void) {
    PyObject *names = PyTuple_New(VERDICT_FIELDS);
    for (Py_ssize_t k = 0; names != NULL && k < VERDICT_FIELDS; k++) {
        PyObject *name = PyUnicode_FromString(verdict_fields[k]);
        if (name == NULL)
            Py_CLEAR(names);
        else
            PyTuple_SET_ITEM(names, k, name);
    }
    return names;
}

PyMODINIT_FUNC PyInit__trend(void) {
    name_offsets = PyUnicode_InternFromString("offsets");
    name_ts = PyUnicode_InternFromString("ts");
    name_run_start = PyUnicode_InternFromString("run_start");
    name_coarse_ts = PyUnicode_InternFromString("coarse_ts");
    name_host = PyUnicode_InternFromString("host");
    name_client_id = PyUnicode_InternFromString("client_id");
    name_frombytes = PyUnicode_InternFromString("frombytes");
    name_old_ids = PyUnicode_InternFromString("_old_ids");
    name_old = PyUnicode_InternFromString("_old");
    name_at = PyUnicode_InternFromString("_at");
    name_run_from = PyUnicode_InternFromString("_run_from");
    name_run_to = PyUnicode_InternFromString("_run_to");
    name_new_ids = PyUnicode_InternFromString("_new_ids");
    name_new = PyUnicode_InternFromString("_new");
    name_within_first = PyUnicode_InternFromString("_within_first");
    name_cparams = PyUnicode_InternFromString("_cparams");
    if (name_offsets == NULL || name_ts == NULL || name_run_start == NULL || name_coarse_ts == NULL ||
        name_host == NULL || name_client_id == NULL || name_frombytes == NULL || name_old_ids == NULL ||
        name_old == NULL || name_at == NULL || name_run_from == NULL || name_run_to == NULL || name_new_ids == NULL ||
        name_new == NULL || name_within_first == NULL || name_cparams == NULL)
        return NULL;
    PyObject *m = PyModule_Create(&module);
    if (m != NULL && (PyModule_AddStringConstant(m, "SOURCE_SHA1", LAGD_SOURCE_SHA1) < 0 ||
                      PyModule_AddStringConstant(m, "FACTS_FORMAT", FACTS_FORMAT) < 0 ||
                      PyModule_AddStringConstant(m, "PARAMS_FORMAT", PARAMS_FORMAT) < 0 ||
                      PyModule_AddObject(m, "VERDICT_FIELDS", verdict_names()) < 0)) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
