/* profd.server.engine._scan, the passes: the model's computations over the scanner's events
 * (_scan.c reads them), where a Python loop costs ~1 us an event. Each is one pass of
 * server/engine/passes.py, which holds its Python twin (the reference) and says what it computes;
 * tests/test_passes.py runs both on every shipped and corpus trace and compares their results. */
#include "_scan.h"
#include <stdlib.h>
#include <string.h>

static PyObject *S_fwdbwd, *S_gpu_ann, *S_memory, *S_thread_name,
    *S_python_function, *S_user_annotation, *S_cpu_op, *S_user, *S_Memcpy, *S_Memset;

static inline int same(PyObject *a, PyObject *b) {
    if (a == b) return 1;
    if (PyUnicode_CHECK_INTERNED(a) && PyUnicode_CHECK_INTERNED(b)) return 0;
    return PyUnicode_Compare(a, b) == 0;
}

/* ---- columns: an int32/int64/float64 result made as the array.array its caller reads -------
 * A pass writes its column into the array itself (the array module has no C API: its object's
 * layout, checked once at import against the buffer it exports), not into bytes that
 * passes.column() then copied into an array: the copy and the second allocation's page faults
 * were ~0.1 s of a 1 GB trace's analysis. Where the check fails (another Python's layout) a
 * column is bytes, and passes.column() copies it as before. */
typedef struct {
    PyObject_VAR_HEAD
    char *ob_item;
    Py_ssize_t allocated;
    const void *ob_descr;
    PyObject *weakreflist;
    Py_ssize_t ob_exports;
} ArrayLayout;

static PyObject *ARRAY_ARGS[3]; /* ("i",), ("q",), ("d",): array.array's arguments for an empty one */
static PyObject *ARRAY_TYPE;
static int array_layout_ok;

static int col_kind(char tc) { return tc == 'i' ? 0 : tc == 'q' ? 1 : 2; }
static Py_ssize_t col_size(char tc) { return tc == 'i' ? 4 : 8; }

/* A column of n items of ``tc`` ('i', 'q' or 'd'), unset: an array.array, or bytes (see above).
 * NULL at once while an error is set: a pass makes its columns one after another and checks them
 * together, and the array type must not be called with an exception pending. */
static PyObject *new_column(char tc, Py_ssize_t n) {
    if (PyErr_Occurred()) return NULL;
    Py_ssize_t size = col_size(tc);
    if (n < 0 || n > PY_SSIZE_T_MAX / size) return PyErr_NoMemory();
    if (!array_layout_ok) return PyBytes_FromStringAndSize(NULL, n * size);
    PyObject *a = PyObject_Call(ARRAY_TYPE, ARRAY_ARGS[col_kind(tc)], NULL);
    if (!a || !n) return a;
    ArrayLayout *l = (ArrayLayout *)a;
    char *p = PyMem_Malloc(n * size);
    if (!p) { Py_DECREF(a); return PyErr_NoMemory(); }
    PyMem_Free(l->ob_item);
    l->ob_item = p;
    l->allocated = n;
    Py_SET_SIZE(a, n);
    return a;
}

/* Where a column's items are (new_column's array or bytes). */
static inline char *col_data(PyObject *c) {
    return PyBytes_Check(c) ? PyBytes_AS_STRING(c) : ((ArrayLayout *)c)->ob_item;
}

/* The column cut to its first n items (n no more than it holds); -1 with *c cleared on failure. */
static int col_resize(PyObject **c, Py_ssize_t n, Py_ssize_t size) {
    if (PyBytes_Check(*c)) return _PyBytes_Resize(c, n * size);
    ArrayLayout *l = (ArrayLayout *)*c;
    if (n < Py_SIZE(*c)) {
        char *p = PyMem_Realloc(l->ob_item, n ? n * size : 1);
        if (p) l->ob_item = p; /* else the larger block stays: still valid */
        l->allocated = n;
        Py_SET_SIZE(*c, n);
    }
    return 0;
}

/* A column of ``tc`` holding a copy of the n items at ``src``. */
static PyObject *col_copy(char tc, const void *src, Py_ssize_t n) {
    PyObject *c = new_column(tc, n);
    if (c && n) memcpy(col_data(c), src, n * col_size(tc));
    return c;
}

static int array_layout_checked; /* what check_array_layout found: the most array_columns may switch on */

/* array_columns([on]) -> bool: whether the passes make their columns as arrays (else bytes that
 * passes.column() copies); ``on`` switches it (on only where the layout checked out), for the
 * tests that run both ways. */
static PyObject *array_columns(PyObject *mod, PyObject *args) {
    int on = -1;
    if (!PyArg_ParseTuple(args, "|p", &on)) return NULL;
    if (on >= 0) array_layout_ok = on && array_layout_checked;
    return PyBool_FromLong(array_layout_ok);
}

/* Whether array.array's objects have the layout above: a 3-item array's items where its buffer
 * says, its size and capacity, and its count of exported buffers going 1 and back to 0. */
static int check_array_layout(void) {
    PyObject *mod = PyImport_ImportModule("array");
    if (!mod) return -1;
    ARRAY_TYPE = PyObject_GetAttrString(mod, "array");
    Py_DECREF(mod);
    if (!ARRAY_TYPE) return -1;
    const char *codes[3] = {"i", "q", "d"};
    for (int k = 0; k < 3; k++)
        if (!(ARRAY_ARGS[k] = Py_BuildValue("(s)", codes[k]))) return -1;
    PyObject *a = PyObject_CallFunction(ARRAY_TYPE, "s[iii]", "i", 7, 8, 9);
    if (!a) return -1;
    ArrayLayout *l = (ArrayLayout *)a;
    Py_buffer v;
    int ok = 0;
    if (PyObject_GetBuffer(a, &v, PyBUF_SIMPLE) == 0) {
        const int32_t *x = v.buf;
        ok = Py_SIZE(a) == 3 && l->ob_item == v.buf && v.len == 12 && l->allocated >= 3 && l->ob_exports == 1 &&
             x[0] == 7 && x[1] == 8 && x[2] == 9;
        PyBuffer_Release(&v);
        ok = ok && l->ob_exports == 0;
    } else {
        PyErr_Clear();
    }
    Py_DECREF(a);
    array_layout_ok = array_layout_checked = ok;
    return 0;
}

/* An event of nest's thread: its start and duration, its place before the sort (ties), its kind
 * (the category's code, 0x100 for a python frame: read from the event once, before the sort). */
typedef struct { double ts, dur; int32_t idx; uint16_t kind; PyObject *ev; } SortItem;

static int cmp_items(const void *a, const void *b) {
    const SortItem *x = a, *y = b;
    if (x->ts < y->ts) return -1;
    if (x->ts > y->ts) return 1;
    if (x->dur > y->dur) return -1; /* longest first: a parent precedes the children starting with it */
    if (x->dur < y->dur) return 1;
    return x->idx < y->idx ? -1 : x->idx > y->idx;
}

/* Merges the sorted a[lo, mid) and a[mid, hi) in place, moving only where they overlap: the first
 * run's items before the second's first item, and the second's after the first's last, are in
 * place already (found by binary search). ``tmp`` holds mid - lo items. */
static void merge_runs(SortItem *a, Py_ssize_t lo, Py_ssize_t mid, Py_ssize_t hi, SortItem *tmp) {
    Py_ssize_t l = lo, r = mid;
    while (l < r) { /* the first item of the first run after the second's first */
        Py_ssize_t m = l + (r - l) / 2;
        if (cmp_items(&a[m], &a[mid]) > 0) r = m; else l = m + 1;
    }
    lo = l;
    l = mid, r = hi;
    while (l < r) { /* the first item of the second run after the first's last */
        Py_ssize_t m = l + (r - l) / 2;
        if (cmp_items(&a[m], &a[mid - 1]) > 0) r = m; else l = m + 1;
    }
    hi = l;
    Py_ssize_t na = mid - lo, i = 0, j = mid, o = lo;
    memcpy(tmp, a + lo, na * sizeof(SortItem));
    while (i < na && j < hi) a[o++] = cmp_items(&a[j], &tmp[i]) < 0 ? a[j++] : tmp[i++]; /* o < j: unread items stay */
    while (i < na) a[o++] = tmp[i++];
}

/* Sorts items by cmp_items (a total order: the index breaks ties, so any sort gives the same
 * order) by merging its natural runs: a thread's events come mostly in start order, a few dozen
 * runs in 500,000 events, which a few rounds of pairwise merges join. A merge moves only the
 * items where its two runs overlap (a trace's runs overlap little: a late event, a step's
 * annotation), so a round costs far less than a copy of the whole (qsort took ~log2 n of them).
 * Many short runs (no order to use) go to qsort. */
static void sort_items(SortItem *a, Py_ssize_t n) {
    if (n < 2) return;
    Py_ssize_t nr = 1;
    for (Py_ssize_t j = 1; j < n; j++) nr += cmp_items(&a[j - 1], &a[j]) > 0;
    if (nr == 1) return;
    Py_ssize_t *runs = nr <= n / 16 ? malloc((nr + 1) * sizeof(Py_ssize_t)) : NULL;
    SortItem *tmp = runs ? malloc(n * sizeof(SortItem)) : NULL;
    if (!runs || !tmp) { free(runs); free(tmp); qsort(a, n, sizeof(SortItem), cmp_items); return; }
    Py_ssize_t k = 0;
    runs[k++] = 0;
    for (Py_ssize_t j = 1; j < n; j++)
        if (cmp_items(&a[j - 1], &a[j]) > 0) runs[k++] = j;
    runs[k] = n; /* run r is [runs[r], runs[r + 1]) */
    while (nr > 1) {
        Py_ssize_t m = 0;
        for (Py_ssize_t r = 0; r < nr; r += 2) {
            if (r + 1 < nr) merge_runs(a, runs[r], runs[r + 1], runs[r + 2], tmp);
            runs[m++] = runs[r];
        }
        runs[m] = n;
        nr = m;
    }
    free(runs);
    free(tmp);
}

/* The event at j of a list a pass reads, checked where it is read to be this module's (an Event in
 * one of its layouts): a pass that reads a few of a list's events (the launches among the cpu events)
 * pays for those only, and one that reads them all touches each once, not once more in a check
 * over the whole list first (a cache miss an event: 3% of a 255 MB trace's analysis, measured).
 * NULL for anything else; it reads without the GIL (a pass beside the rules: "with the GIL
 * released", below), and ev_at raises the TypeError. */
static inline Ev *ev_released(PyObject *list, Py_ssize_t j) {
    PyObject *o = PyList_GET_ITEM(list, j);
    PyTypeObject *t = Py_TYPE(o);
    if (t == &EvType || t == &EvOpType || t == &EvMemType || t == &EvFullType || PyType_IsSubtype(t, &EvType))
        return (Ev *)o;
    return NULL;
}

/* The error of an item that is not an event (ev_at's; a pass that read without the GIL raises it
 * once the GIL is back). */
static void not_an_event(void) { PyErr_SetString(PyExc_TypeError, "not a _scan.Event"); }

static inline Ev *ev_at(PyObject *list, Py_ssize_t j) {
    Ev *e = ev_released(list, j);
    if (!e) not_an_event();
    return e;
}

/* ---- reading events with the GIL released ----------------------------------------------------
 * A pass that runs beside the rules (passes.start_work: on the other core, while Python holds the GIL)
 * reads its events' fields and compares and hashes their strs and bytes without the GIL: reads
 * alone, no reference taken or dropped. Where that needs Python (a hash not yet cached in the
 * object, an object of another type), it takes the GIL back for that one call. ``ts`` is the
 * released thread state, NULL while the GIL is held. */
#if defined(__GNUC__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
#endif
static inline Py_hash_t cached_hash(PyObject *o) {
    /* the hash the object keeps once made (-1: not yet); another thread may be writing it under
     * the GIL, the same value: an aligned word, read whole */
    if (PyUnicode_CheckExact(o)) return __atomic_load_n(&((PyASCIIObject *)o)->hash, __ATOMIC_RELAXED);
    if (PyBytes_CheckExact(o)) return __atomic_load_n(&((PyBytesObject *)o)->ob_shash, __ATOMIC_RELAXED);
    return -1;
}
#if defined(__GNUC__)
#pragma GCC diagnostic pop
#endif

#define GIL_BACK(ts) do { if (ts) { PyEval_RestoreThread(ts); (ts) = NULL; } } while (0)

static Py_hash_t hash_released(PyObject *o, PyThreadState **ts) {
    Py_hash_t h = cached_hash(o);
    if (h != -1) return h;
    PyEval_RestoreThread(*ts);
    h = PyObject_Hash(o);
    *ts = PyEval_SaveThread(); /* on -1 the error stays set in the thread state */
    return h;
}

/* same() where both are strs: their characters compared, a read (PyUnicode_Compare); -1 on error */
static int same_released(PyObject *a, PyObject *b, PyThreadState **ts) {
    if (a == b) return 1;
    if (PyUnicode_CheckExact(a) && PyUnicode_CheckExact(b)
#if PY_VERSION_HEX < 0x030C0000
        && PyUnicode_IS_READY(a) && PyUnicode_IS_READY(b)
#endif
    ) {
        if (PyUnicode_CHECK_INTERNED(a) && PyUnicode_CHECK_INTERNED(b)) return 0;
        Py_ssize_t n = PyUnicode_GET_LENGTH(a);
        if (n != PyUnicode_GET_LENGTH(b)) return 0;
        if (PyUnicode_KIND(a) == PyUnicode_KIND(b)) /* else (rare) compared by Python, below */
            return memcmp(PyUnicode_DATA(a), PyUnicode_DATA(b), (size_t)n * PyUnicode_KIND(a)) == 0;
    }
    PyEval_RestoreThread(*ts);
    int r = same(a, b);
    if (r == 0 && PyErr_Occurred()) r = -1;
    *ts = PyEval_SaveThread();
    return r;
}

/* PyObject_RichCompareBool(a, b, Py_EQ) for two non-NULL objects, bytes compared as a read */
static int equal_released(PyObject *a, PyObject *b, PyThreadState **ts) {
    if (a == b) return 1;
    if (PyBytes_CheckExact(a) && PyBytes_CheckExact(b))
        return PyBytes_GET_SIZE(a) == PyBytes_GET_SIZE(b) &&
               memcmp(PyBytes_AS_STRING(a), PyBytes_AS_STRING(b), (size_t)PyBytes_GET_SIZE(a)) == 0;
    PyEval_RestoreThread(*ts);
    int r = PyObject_RichCompareBool(a, b, Py_EQ);
    *ts = PyEval_SaveThread();
    return r;
}

static PyObject *dims_of(Ev *e);

/* dims_of (below) with the GIL released: the scanner's dims are bytes */
static PyObject *dims_released(Ev *e, PyThreadState **ts) {
    PyObject *dims = e->flags & F_ARGS ? op_obj(e, F_DIMS) : NULL;
    if (!dims) return NULL;
    if (PyBytes_CheckExact(dims)) return PyBytes_GET_SIZE(dims) ? dims : NULL;
    PyEval_RestoreThread(*ts);
    PyObject *d = dims_of(e);
    *ts = PyEval_SaveThread();
    return d;
}

/* A dict's value found by the identity of its key's parts, in front of the dict itself: a pass
 * that groups each of 100,000s of events under a key (a tuple it would build, hash and free an
 * event) asks the dict only the first time it meets a combination of those objects. Parts are
 * pointers (to objects the pass's inputs hold alive) or small ints, as many words as the cache's
 * keys have (a slot is those and the value: 24 to 56 bytes). Two combinations of equal but
 * distinct objects each get the one value the dict gives them, so what the pass returns is what
 * the dict alone gives. Values are borrowed from the dict (it holds them). */
#define KEY_W 6 /* the most parts a key has (each cache says how many its keys have) */
typedef struct { uint64_t *s; size_t mask, n; int w; } IdCache; /* slots of w key words and the value */
#define ID_CACHE(width) {.s = NULL, .mask = 0, .n = 0, .w = (width)}

static inline size_t id_hash(const uint64_t *k, int w) {
    uint64_t h = 0x9e3779b97f4a7c15ULL;
    for (int j = 0; j < w; j++) h = (h ^ k[j]) * 0xff51afd7ed558ccdULL, h ^= h >> 32;
    return (size_t)h;
}

static inline PyObject *id_get(const IdCache *c, const uint64_t *k) {
    if (!c->s) return NULL;
    size_t stride = (size_t)c->w + 1;
    for (size_t i = id_hash(k, c->w) & c->mask;; i = (i + 1) & c->mask) {
        const uint64_t *e = c->s + i * stride;
        if (!e[c->w]) return NULL;
        if (!memcmp(e, k, (size_t)c->w * sizeof(uint64_t))) return (PyObject *)(uintptr_t)e[c->w];
    }
}

/* At most this many combinations (7 MB at six words): a trace with more distinct keys finds the
 * others through the dict, as every key was before (memory bounded, time no worse). */
#define ID_MAX ((size_t)1 << 16)

/* 0, or -1 with MemoryError. */
static int id_put(IdCache *c, const uint64_t *k, PyObject *v) {
    if (c->n >= ID_MAX) return 0;
    size_t stride = (size_t)c->w + 1;
    if (!c->s || 2 * (c->n + 1) > c->mask + 1) { /* kept at most half full */
        size_t cap = c->s ? 2 * (c->mask + 1) : 1024;
        uint64_t *t = zeroed(cap * stride, sizeof(uint64_t));
        if (!t) { PyErr_NoMemory(); return -1; }
        for (size_t j = 0; c->s && j <= c->mask; j++) {
            const uint64_t *e = c->s + j * stride;
            if (!e[c->w]) continue;
            size_t i = id_hash(e, c->w) & (cap - 1);
            while (t[i * stride + c->w]) i = (i + 1) & (cap - 1);
            memcpy(t + i * stride, e, stride * sizeof(uint64_t));
        }
        free(c->s);
        c->s = t;
        c->mask = cap - 1;
    }
    size_t i = id_hash(k, c->w) & c->mask;
    while (c->s[i * stride + c->w]) i = (i + 1) & c->mask;
    memcpy(c->s + i * stride, k, (size_t)c->w * sizeof(uint64_t));
    c->s[i * stride + c->w] = (uint64_t)(uintptr_t)v;
    c->n++;
    return 0;
}

/* nest(events, base, slack, cats) -> (parent: int32 column, starts, durs: float64 column, codes: bytes)
 * Sorts ``events`` (one thread's, all of this module's Event type) in place by start, longest
 * first among equal starts, as two stable sorts would; then gives each event its innermost
 * enclosing event (position base + j, or -1).
 * A child may end ``slack`` after its parent (Kineto rounds to ns). A python frame that starts
 * inside another python frame but ends after it (the tracer lost its exit: Dynamo's frame swaps
 * leave ``<built-in method apply ...>`` frames "running" to the end of the trace) nests in it,
 * its end clamped to its parent's for the events that follow. */
static PyObject *nest(PyObject *mod, PyObject *args) {
    PyObject *list, *cats;
    Py_ssize_t base;
    double slack;
    if (!PyArg_ParseTuple(args, "O!ndO!", &PyList_Type, &list, &base, &slack, &PyTuple_Type, &cats)) return NULL;
    Py_ssize_t ncats = PyTuple_GET_SIZE(cats);
    if (ncats > 255) { PyErr_SetString(PyExc_ValueError, "nest: more than 255 categories"); return NULL; }
    for (Py_ssize_t c = 0; c < ncats; c++)
        if (!PyUnicode_Check(PyTuple_GET_ITEM(cats, c))) {
            PyErr_SetString(PyExc_TypeError, "nest: categories are str");
            return NULL;
        }
    Py_ssize_t n = PyList_GET_SIZE(list);
    if (n > INT32_MAX) { PyErr_SetString(PyExc_OverflowError, "nest: too many events"); return NULL; }
    SortItem *items = malloc(sizeof(SortItem) * (n ? n : 1));
    Py_ssize_t *stack = malloc(sizeof(Py_ssize_t) * (n ? n : 1));
    double *eend = malloc(sizeof(double) * (n ? n : 1)); /* end as nesting sees it (clamped) */
    unsigned char *pyf = malloc(n ? n : 1); /* by sorted place: a python frame */
    PyObject *pbytes = new_column('i', n), *sbytes = new_column('d', n), *dbytes = new_column('d', n);
    PyObject *kbytes = PyBytes_FromStringAndSize(NULL, n);
    if (!items || !stack || !eend || !pyf || !pbytes || !sbytes || !dbytes || !kbytes) {
        free(items); free(stack); free(eend); free(pyf); Py_XDECREF(pbytes);
        Py_XDECREF(sbytes); Py_XDECREF(dbytes); Py_XDECREF(kbytes);
        return PyErr_NoMemory();
    }
    PyObject *last_cat = NULL; /* runs of one category are common: its kind again, no compare */
    uint16_t last_kind = 0;
    int bad = 0; /* 1: not an event; -1: a compare failed (its error set) */
    PyThreadState *ts = PyEval_SaveThread(); /* the events read, sorted and nested without the GIL */
    for (Py_ssize_t j = 0; j < n && !bad; j++) {
        Ev *e = ev_released(list, j);
        if (!e) { bad = 1; break; }
        items[j].ts = e->ts;
        items[j].dur = e->dur;
        items[j].idx = (int32_t)j;
        items[j].ev = (PyObject *)e;
        if (e->cat != last_cat) {
            last_cat = e->cat;
            int py = same_released(last_cat, S_python_function, &ts);
            if (py < 0) { bad = -1; break; }
            last_kind = py ? 0x100 : 0; /* 1 + its place in cats, 0: none */
            for (Py_ssize_t c = 0; c < ncats; c++) {
                int eq = same_released(last_cat, PyTuple_GET_ITEM(cats, c), &ts);
                if (eq < 0) { bad = -1; break; }
                if (eq) { last_kind |= (uint16_t)(c + 1); break; }
            }
        }
        items[j].kind = last_kind;
    }
    if (bad) {
        GIL_BACK(ts);
        if (bad > 0) not_an_event();
        free(items); free(stack); free(eend); free(pyf); Py_DECREF(pbytes);
        Py_DECREF(sbytes); Py_DECREF(dbytes); Py_DECREF(kbytes);
        return NULL;
    }
    sort_items(items, n);
    int32_t *parent = (int32_t *)col_data(pbytes);
    double *starts = (double *)col_data(sbytes), *durs = (double *)col_data(dbytes);
    unsigned char *codes = (unsigned char *)PyBytes_AS_STRING(kbytes);
    Py_ssize_t top = 0;
    for (Py_ssize_t j = 0; j < n; j++) {
        double ts = items[j].ts, end = ts + items[j].dur;
        uint16_t k = items[j].kind;
        starts[j] = ts;
        durs[j] = items[j].dur;
        codes[j] = (unsigned char)(k & 0xff);
        pyf[j] = (k & 0x100) != 0;
        while (top) {
            double tend = eend[stack[top - 1]];
            if (ts < tend && end <= tend + slack) break;
            if (ts < tend && pyf[j] && pyf[stack[top - 1]]) {
                end = tend; /* a frame whose exit was lost (hot_lines' child_durations clamps it so) */
                break;
            }
            top--;
        }
        eend[j] = end;
        parent[j] = top ? (int32_t)(base + stack[top - 1]) : -1;
        stack[top++] = j;
    }
    GIL_BACK(ts);
    for (Py_ssize_t j = 0; j < n; j++) PyList_SET_ITEM(list, j, items[j].ev); /* same refs, new order */
    free(items);
    free(stack);
    free(eend);
    free(pyf);
    return Py_BuildValue("(NNNN)", pbytes, sbytes, dbytes, kbytes);
}

/* by_start(events) -> list: the events in start order, those of one start in their order (as
 * ``sorted(events, key=ts)``, stable): their natural runs merged, as nest's sort does, each start
 * read from its event into the sort's items (the key function made and freed a float an event). */
static PyObject *by_start(PyObject *mod, PyObject *args) {
    PyObject *list;
    if (!PyArg_ParseTuple(args, "O!", &PyList_Type, &list)) return NULL;
    Py_ssize_t n = PyList_GET_SIZE(list);
    if (n > INT32_MAX) { PyErr_SetString(PyExc_OverflowError, "by_start: too many events"); return NULL; }
    SortItem *items = malloc(sizeof(SortItem) * (n ? n : 1));
    if (!items) return PyErr_NoMemory();
    int bad = 0;
    PyThreadState *ts = PyEval_SaveThread(); /* read and sorted without the GIL: passes.start_work */
    for (Py_ssize_t j = 0; j < n && !bad; j++) {
        Ev *e = ev_released(list, j);
        if (!e) bad = 1;
        else items[j] = (SortItem){.ts = e->ts, .dur = 0.0, .idx = (int32_t)j, .kind = 0, .ev = (PyObject *)e};
    }
    if (!bad) sort_items(items, n); /* equal starts: by place (dur is 0 for all) */
    PyEval_RestoreThread(ts);
    if (bad) { free(items); not_an_event(); return NULL; }
    PyObject *out = PyList_New(n);
    if (out)
        for (Py_ssize_t j = 0; j < n; j++) {
            Py_INCREF(items[j].ev);
            PyList_SET_ITEM(out, j, items[j].ev);
        }
    free(items);
    return out;
}

/* children(parent: int32 buffer[, n]) -> (offsets: bytes of int32 [n+1], kids: bytes of int32):
 * the items whose parent is i are kids[offsets[i]:offsets[i+1]], in index order; parents are in
 * [0, n), n = len(parent) by default; negative parents belong to none. */
static PyObject *children(PyObject *mod, PyObject *args) {
    Py_buffer view;
    Py_ssize_t n = -1;
    if (!PyArg_ParseTuple(args, "y*|n", &view, &n)) return NULL;
    Py_ssize_t m = view.len / 4; /* items; their keys ("parents") are in [0, n) */
    if (n < 0) n = m;
    const int32_t *parent = view.buf;
    PyObject *ob = new_column('i', n + 1);
    PyObject *kb = ob ? new_column('i', m) : NULL;
    if (!ob || !kb) { Py_XDECREF(ob); PyBuffer_Release(&view); return NULL; }
    int32_t *off = (int32_t *)col_data(ob), *kids = (int32_t *)col_data(kb);
    memset(off, 0, (n + 1) * 4);
    for (Py_ssize_t i = 0; i < m; i++) {
        int32_t p = parent[i];
        if (p >= 0 && p < n) off[p + 1]++;
    }
    for (Py_ssize_t i = 0; i < n; i++) off[i + 1] += off[i];
    int32_t *fill = malloc(sizeof(int32_t) * (n ? n : 1));
    if (!fill) { Py_DECREF(ob); Py_DECREF(kb); PyBuffer_Release(&view); return PyErr_NoMemory(); }
    memcpy(fill, off, n * 4);
    for (Py_ssize_t i = 0; i < m; i++) {
        int32_t p = parent[i];
        if (p >= 0 && p < n) kids[fill[p]++] = (int32_t)i;
    }
    free(fill);
    if (col_resize(&kb, (Py_ssize_t)off[n], 4) < 0) { Py_DECREF(ob); PyBuffer_Release(&view); return NULL; }
    PyBuffer_Release(&view);
    return Py_BuildValue("(NN)", ob, kb);
}



/* An id written as a digit string (1 to 18 ASCII digits) as the number: passes._id. New reference. */
static PyObject *id_value(PyObject *v) {
    if (PyUnicode_Check(v) && PyUnicode_IS_ASCII(v)) {
        Py_ssize_t n = PyUnicode_GET_LENGTH(v);
        const char *s = (const char *)PyUnicode_DATA(v);
        int digits = n > 0 && n <= 18;
        for (Py_ssize_t k = 0; digits && k < n; k++) digits = s[k] >= '0' && s[k] <= '9';
        if (digits) return PyLong_FromString(s, NULL, 10);
    }
    Py_INCREF(v);
    return v;
}

/* (pid, tid), as passes.thread_key. */
static PyObject *thread_key(Ev *e) {
    PyObject *p = id_value(EV_PID(e)), *t = p ? id_value(EV_TID(e)) : NULL;
    PyObject *key = t ? PyTuple_Pack(2, p, t) : NULL;
    Py_XDECREF(p);
    Py_XDECREF(t);
    return key;
}

/* passes.gpu_role: the GPU category of an event of an unknown category that carries a device, a
 * stream and a correlation id (borrowed), else NULL. */
static PyObject *S_gpu_memcpy, *S_gpu_memset, *S_kernel;
static PyObject *gpu_role(Ev *e) {
    const uint32_t CARRY = F_ARGS | F_DEVICE | F_STREAM | F_CORR;
    if ((e->flags & CARRY) != CARRY) return NULL;
    Py_ssize_t n = PyUnicode_GET_LENGTH(e->name);
    if (PyUnicode_Tailmatch(e->name, S_Memcpy, 0, n, -1) == 1) return S_gpu_memcpy;
    if (PyUnicode_Tailmatch(e->name, S_Memset, 0, n, -1) == 1) return S_gpu_memset;
    return S_kernel;
}

/* What classify asks of each X event's category, kept for the first MEMO_N categories met (a
 * trace has a dozen): its role in ``roles`` (NULL: none), whether it is a label category (-1: not
 * asked yet), and where an event of that role goes (0 nowhere, 1 gpu, 2 cpu by thread, 3 gpu
 * annotations). Three hash lookups an event otherwise. Holds its categories. */
#define MEMO_N 16
typedef struct {
    PyObject *cat[MEMO_N], *role[MEMO_N];
    signed char label[MEMO_N];
    int n;
} CatMemo;

static void memo_clear(CatMemo *m) {
    for (int k = 0; k < m->n; k++) Py_DECREF(m->cat[k]);
    m->n = 0;
}

/* The memo's slot for cat, made with its role on first sight; -1 when full (the caller looks it
 * up), -2 on error. */
static int memo_slot(CatMemo *m, PyObject *cat, PyObject *roles) {
    for (int k = 0; k < m->n; k++)
        if (m->cat[k] == cat) return k;
    if (m->n == MEMO_N) return -1;
    PyObject *role = PyDict_GetItemWithError(roles, cat); /* borrowed: roles lives through the pass */
    if (!role && PyErr_Occurred()) return -2;
    int k = m->n++;
    Py_INCREF(cat);
    m->cat[k] = cat;
    m->role[k] = role;
    m->label[k] = -1;
    return k;
}

/* Where an event of ``role`` goes (the memo's third answer). */
static int role_place(PyObject *role, PyObject *gpu_cats, PyObject *cpu_cats) {
    int r = PySet_Contains(gpu_cats, role);
    if (r) return r < 0 ? -1 : 1;
    r = PySet_Contains(cpu_cats, role);
    if (r) return r < 0 ? -1 : 2;
    return same(role, S_gpu_ann) ? 3 : 0;
}

/* classify(events, roles, label_cats, cpu_cats, gpu_cats) -> (by_thread, gpu, gpu_annotations,
 * memory_samples, flows_s, flows_f, thread_names, unread): the model's first pass (passes._classify_ref,
 * the same in Python); events get the category of their role. */
static PyObject *classify(PyObject *mod, PyObject *args) {
    PyObject *events, *roles, *label_cats, *cpu_cats, *gpu_cats;
    if (!PyArg_ParseTuple(args, "O!O!OOO", &PyList_Type, &events, &PyDict_Type, &roles, &label_cats, &cpu_cats,
                          &gpu_cats))
        return NULL;
    PyObject *by_thread = PyDict_New(), *gpu = PyList_New(0), *ann = PyList_New(0), *mem = PyList_New(0),
             *fs = PyDict_New(), *ff = PyDict_New(), *names = PyDict_New(), *unread = PyDict_New();
    PyObject *last_thread = NULL, *last_list = NULL;
    PyObject *place_role[MEMO_N]; /* the roles whose place is known, and their places */
    int place_of[MEMO_N], nplace = 0;
    CatMemo memo = {.n = 0};
    if (!by_thread || !gpu || !ann || !mem || !fs || !ff || !names || !unread) goto fail;
    Py_ssize_t n = PyList_GET_SIZE(events);
    for (Py_ssize_t j = 0; j < n; j++) {
        Ev *e = ev_at(events, j);
        if (!e) goto fail;
        unsigned char ph = e->ph;
        if (ph == 'X') {
            int k = memo_slot(&memo, e->cat, roles);
            if (k == -2) goto fail;
            PyObject *role = k >= 0 ? memo.role[k] : PyDict_GetItemWithError(roles, e->cat); /* borrowed */
            if (!role && PyErr_Occurred()) goto fail;
            if (role && role != Py_None && same(role, S_cpu_op) && PyUnicode_FindChar(e->name, '#', 0,
                    PyUnicode_GET_LENGTH(e->name), 1) >= 0) {
                int lc = k >= 0 ? memo.label[k] : -1;
                if (lc < 0) lc = PySet_Contains(label_cats, e->cat);
                if (lc < 0) goto fail;
                if (k >= 0) memo.label[k] = (signed char)lc;
                if (lc) role = S_user_annotation;
            }
            if (!role) {
                role = gpu_role(e);
                if (!role) {
                    PyObject *old = PyDict_GetItemWithError(unread, e->cat);
                    if (!old && PyErr_Occurred()) goto fail;
                    PyObject *cnt = PyLong_FromSsize_t(old ? PyLong_AsSsize_t(old) + 1 : 1);
                    if (!cnt || PyDict_SetItem(unread, e->cat, cnt) < 0) { Py_XDECREF(cnt); goto fail; }
                    Py_DECREF(cnt);
                    continue;
                }
            }
            if (role == Py_None) continue;
            if (role != e->cat) {
                Py_INCREF(role);
                Py_SETREF(e->cat, role);
            }
            int place = -1;
            for (int q = 0; q < nplace; q++)
                if (place_role[q] == role) { place = place_of[q]; break; }
            if (place < 0) {
                if ((place = role_place(role, gpu_cats, cpu_cats)) < 0) goto fail;
                if (nplace < MEMO_N) {
                    place_role[nplace] = role; /* borrowed: a value of roles or the module's */
                    place_of[nplace++] = place;
                }
            }
            if (place == 1) { if (PyList_Append(gpu, (PyObject *)e) < 0) goto fail; continue; }
            if (place == 2) {
                if (!(last_list && e->thread == last_thread)) {
                    PyObject *key = thread_key(e);
                    if (!key) goto fail;
                    PyObject *lst = PyDict_GetItemWithError(by_thread, key);
                    if (!lst) {
                        if (PyErr_Occurred() || !(lst = PyList_New(0)) || PyDict_SetItem(by_thread, key, lst) < 0) {
                            Py_XDECREF(lst); Py_DECREF(key); goto fail;
                        }
                        Py_DECREF(lst); /* the dict holds it */
                    }
                    Py_DECREF(key);
                    last_list = lst; last_thread = e->thread;
                }
                if (PyList_Append(last_list, (PyObject *)e) < 0) goto fail;
            } else if (place == 3) {
                if (PyList_Append(ann, (PyObject *)e) < 0) goto fail;
            }
        } else if (ph == 'i' || ph == 'I') {
            if (same(e->name, S_memory) && (e->flags & F_ARGS) && PyList_Append(mem, (PyObject *)e) < 0) goto fail;
        } else if (ph == 's' || ph == 'f') {
            if (same(e->cat, S_fwdbwd)) {
                PyObject *id = int_or_none(e, F_ID, op_int(e, F_ID));
                if (!id) goto fail;
                int r = PyDict_SetItem(ph == 's' ? fs : ff, id, (PyObject *)e);
                Py_DECREF(id);
                if (r < 0) goto fail;
            }
        } else if (ph == 'M' && same(e->name, S_thread_name) && (e->flags & F_ARGS)) {
            PyObject *name = op_obj(e, F_ANAME);
            if (!name || PyUnicode_GET_LENGTH(name) == 0) continue;
            PyObject *key = thread_key(e);
            if (!key || PyDict_SetItem(names, key, name) < 0) { Py_XDECREF(key); goto fail; }
            Py_DECREF(key);
        }
    }
    memo_clear(&memo);
    return Py_BuildValue("(NNNNNNNN)", by_thread, gpu, ann, mem, fs, ff, names, unread);
fail:
    memo_clear(&memo);
    Py_XDECREF(by_thread); Py_XDECREF(gpu); Py_XDECREF(ann); Py_XDECREF(mem);
    Py_XDECREF(fs); Py_XDECREF(ff); Py_XDECREF(names); Py_XDECREF(unread);
    return NULL;
}

/* frames(cpu, parent, parse_frame) -> (frame_ids, frame_of, token, name_codes: int32 bytes, names:
 * list, table: list of frames, has_call_from: bool, user_annotation indices: int32 column, first
 * start time or None). The model's second pass: each python
 * frame's parsed Frame (parse_frame(name) once per distinct name), the innermost user frame around
 * every event, the direct child of that frame (through user_annotation labels) holding it, and a
 * code per distinct name of the non-python events. */
static PyObject *frames(PyObject *mod, PyObject *args) {
    PyObject *cpu, *parse;
    Py_buffer pv;
    if (!PyArg_ParseTuple(args, "O!y*O", &PyList_Type, &cpu, &pv, &parse)) return NULL;
    Py_ssize_t n = PyList_GET_SIZE(cpu);
    PyObject *fb = NULL, *fo = NULL, *tb = NULL, *cb = NULL, *names = NULL, *table = NULL, *user = NULL,
             *code_of = NULL, *frame_of_name = NULL, *id_of = NULL, *ub = NULL;
    Py_ssize_t nu = 0;
    double t0 = 0.0;
    unsigned char *label = NULL; /* per event: a user_annotation (its children read this, not it again) */
    IdCache seen = ID_CACHE(2); /* (name, 1): a python frame's id; (name, 2): another event's code */
    if (pv.len / 4 != n) { PyErr_SetString(PyExc_ValueError, "parent size"); goto fail; }
    const int32_t *parent = pv.buf;
    fb = new_column('i', n); fo = new_column('i', n);
    tb = new_column('i', n); cb = new_column('i', n);
    names = PyList_New(0); table = PyList_New(0); user = PyList_New(0);
    code_of = PyDict_New(); frame_of_name = PyDict_New(); id_of = PyDict_New();
    ub = new_column('i', n);
    if (!fb || !fo || !tb || !cb || !names || !table || !user || !code_of || !frame_of_name || !id_of || !ub)
        goto fail;
    int32_t *fid = (int32_t *)col_data(fb), *fof = (int32_t *)col_data(fo),
            *tok = (int32_t *)col_data(tb), *code = (int32_t *)col_data(cb),
            *uidx = (int32_t *)col_data(ub);
    int call_from = 0;
    if (!(label = malloc(n ? n : 1))) { PyErr_NoMemory(); goto fail; }
    for (Py_ssize_t i = 0; i < n; i++) {
        Ev *e = ev_at(cpu, i);
        if (!e) goto fail;
        int32_t p = parent[i];
        fid[i] = -1; fof[i] = -1; tok[i] = -1; code[i] = -1;
        if (i == 0 || e->ts < t0) t0 = e->ts;
        label[i] = same(e->cat, S_user_annotation);
        if (label[i]) uidx[nu++] = (int32_t)i;
        if (same(e->cat, S_python_function)) {
            uint64_t ck[KEY_W] = {(uintptr_t)e->name, 1};
            PyObject *k = id_get(&seen, ck); /* borrowed int */
            if (!k) {
                if (!(k = PyDict_GetItemWithError(frame_of_name, e->name))) {
                    if (PyErr_Occurred()) goto fail;
                    PyObject *fr = PyObject_CallOneArg(parse, e->name);
                    if (!fr) goto fail;
                    long id = -1;
                    if (fr != Py_None) {
                        PyObject *known = PyDict_GetItemWithError(id_of, fr);
                        if (known) id = PyLong_AsLong(known);
                        else if (PyErr_Occurred()) { Py_DECREF(fr); goto fail; }
                        else {
                            id = PyList_GET_SIZE(table);
                            PyObject *u = PyObject_GetAttr(fr, S_user);
                            PyObject *idobj = PyLong_FromLong(id);
                            int bad = !u || !idobj || PyList_Append(table, fr) < 0 || PyList_Append(user, u) < 0 ||
                                      PyDict_SetItem(id_of, fr, idobj) < 0;
                            Py_XDECREF(u); Py_XDECREF(idobj);
                            if (bad) { Py_DECREF(fr); goto fail; }
                        }
                    }
                    Py_DECREF(fr);
                    k = PyLong_FromLong(id);
                    if (!k || PyDict_SetItem(frame_of_name, e->name, k) < 0) { Py_XDECREF(k); goto fail; }
                    Py_DECREF(k);
                }
                if (id_put(&seen, ck, k) < 0) goto fail;
            }
            long id = PyLong_AsLong(k);
            if (id >= 0) {
                fid[i] = (int32_t)id;
                int is_user = PyObject_IsTrue(PyList_GET_ITEM(user, id));
                if (is_user < 0) goto fail;
                if (is_user) { fof[i] = (int32_t)i; continue; }
            }
        } else {
            uint64_t ck[KEY_W] = {(uintptr_t)e->name, 2};
            PyObject *c = id_get(&seen, ck);
            if (!c) {
                if (!(c = PyDict_GetItemWithError(code_of, e->name))) {
                    if (PyErr_Occurred()) goto fail;
                    c = PyLong_FromSsize_t(PyList_GET_SIZE(names));
                    if (!c || PyDict_SetItem(code_of, e->name, c) < 0 || PyList_Append(names, e->name) < 0) { Py_XDECREF(c); goto fail; }
                    Py_DECREF(c);
                }
                if (id_put(&seen, ck, c) < 0) goto fail;
            }
            code[i] = (int32_t)PyLong_AsLong(c);
            if (!call_from && same(e->cat, S_cpu_op) && (e->flags & F_ARGS)) {
                PyObject *cf = op_obj(e, F_CALL_FROM);
                call_from = cf && PyUnicode_GET_LENGTH(cf) > 0;
            }
        }
        if (p >= 0 && p < i) {
            int32_t f = fof[p];
            fof[i] = f;
            if (f >= 0) {
                if (p == f || (tok[p] == p && label[p]))
                    tok[i] = (int32_t)i;
                else
                    tok[i] = tok[p];
            }
        }
    }
    PyBuffer_Release(&pv);
    free(label);
    free(seen.s);
    Py_DECREF(user); Py_DECREF(code_of); Py_DECREF(frame_of_name); Py_DECREF(id_of);
    if (col_resize(&ub, nu, 4) < 0) {
        Py_XDECREF(ub); ub = NULL;
        Py_DECREF(fb); Py_DECREF(fo); Py_DECREF(tb); Py_DECREF(cb); Py_DECREF(names); Py_DECREF(table);
        return NULL;
    }
    PyObject *t0obj = n ? PyFloat_FromDouble(t0) : (Py_INCREF(Py_None), Py_None);
    return Py_BuildValue("(NNNNNNONN)", fb, fo, tb, cb, names, table, call_from ? Py_True : Py_False, ub, t0obj);
fail:
    PyBuffer_Release(&pv);
    free(label);
    free(seen.s);
    Py_XDECREF(fb); Py_XDECREF(fo); Py_XDECREF(tb); Py_XDECREF(cb); Py_XDECREF(names); Py_XDECREF(table);
    Py_XDECREF(user); Py_XDECREF(code_of); Py_XDECREF(frame_of_name); Py_XDECREF(id_of);
    Py_XDECREF(ub);
    return NULL;
}

/* Three int32 columns of one length in, one out: the shape of inherit and line_tokens. */
typedef void (*Columns3)(Py_ssize_t n, const int32_t *a, const int32_t *b, const int32_t *c, int32_t *out);

static PyObject *columns3(PyObject *args, Columns3 fn) {
    Py_buffer av, bv, cv;
    if (!PyArg_ParseTuple(args, "y*y*y*", &av, &bv, &cv)) return NULL;
    Py_ssize_t n = av.len / 4;
    PyObject *out = NULL;
    if (bv.len / 4 != n || cv.len / 4 != n)
        PyErr_SetString(PyExc_ValueError, "columns of different lengths");
    else if ((out = new_column('i', n)))
        fn(n, av.buf, bv.buf, cv.buf, (int32_t *)col_data(out));
    PyBuffer_Release(&av); PyBuffer_Release(&bv); PyBuffer_Release(&cv);
    return out;
}

/* inherit(parent, frame_of, target) -> int32 column: target[i] where it is set (>= 0), else the
 * parent's value for events outside any user frame, else -1 (fwd_of: backward ops inherit). */
static void inherit_columns(Py_ssize_t n, const int32_t *parent, const int32_t *fof, const int32_t *tgt, int32_t *o) {
    for (Py_ssize_t i = 0; i < n; i++) {
        int32_t p = parent[i];
        if (tgt[i] >= 0) o[i] = tgt[i];
        else if (p >= 0 && p < i && fof[i] < 0) o[i] = o[p];
        else o[i] = -1;
    }
}

static PyObject *inherit(PyObject *mod, PyObject *args) { return columns3(args, inherit_columns); }

/* owners' threads: the events' distinct (pid, tid) pairs (the scanner makes one a thread: found by
 * pointer), each with what it resolves to: its place in ``threads``, its start times, its base. */
typedef struct {
    PyObject *thread;
    Py_ssize_t first, tid, base;
    Py_buffer starts;
    int have;
} OwnerThread;

typedef struct { OwnerThread *at; int32_t *slot; size_t cap, n; } OwnerThreads;

/* the slot of ``thread``, added (with ``first``, its first event) when new; -1 out of memory */
static Py_ssize_t owner_thread(OwnerThreads *t, PyObject *thread, Py_ssize_t first) {
    if (2 * (t->n + 1) > t->cap) {
        size_t cap = t->cap ? 2 * t->cap : 64;
        int32_t *slot = malloc(sizeof(int32_t) * cap);
        OwnerThread *at = realloc(t->at, sizeof(OwnerThread) * (cap / 2));
        if (!slot || !at) { free(slot); if (at) t->at = at; return -1; }
        t->at = at;
        memset(slot, 0xff, sizeof(int32_t) * cap);
        for (size_t k = 0; k < t->n; k++) {
            size_t h = ((uintptr_t)at[k].thread >> 4) & (cap - 1);
            while (slot[h] >= 0) h = (h + 1) & (cap - 1);
            slot[h] = (int32_t)k;
        }
        free(t->slot);
        t->slot = slot;
        t->cap = cap;
    }
    size_t h = ((uintptr_t)thread >> 4) & (t->cap - 1);
    while (t->slot[h] >= 0) {
        if (t->at[t->slot[h]].thread == thread) return t->slot[h];
        h = (h + 1) & (t->cap - 1);
    }
    OwnerThread *o = &t->at[t->n];
    memset(o, 0, sizeof *o);
    o->thread = thread;
    o->first = first;
    t->slot[h] = (int32_t)t->n;
    return (Py_ssize_t)t->n++;
}

/* owners(cpu, parent, events, starts_by_thread, base_by_thread, slack, cat) ->
 *     (owner: int32 column, thread: int32 column, threads: list)
 * For each event, the innermost cpu event of its thread ((pid, tid)) that contains its start (of
 * category cat unless None), or -1: passes.innermost, many at once. Each thread's events are
 * cpu[base:base+len(starts)], ``starts`` their start times; ``thread`` indexes ``threads``, the
 * events' threads in order of first appearance. The events are read without the GIL (passes.start_work):
 * first their threads, each then resolved once with it, then their owners. */
static PyObject *owners(PyObject *mod, PyObject *args) {
    PyObject *cpu, *events, *starts_by, *base_by, *cat;
    Py_buffer pv, tv, dv;
    double slack;
    if (!PyArg_ParseTuple(args, "O!y*O!O!O!dOy*y*", &PyList_Type, &cpu, &pv, &PyList_Type, &events, &PyDict_Type,
                          &starts_by, &PyDict_Type, &base_by, &slack, &cat, &tv, &dv))
        return NULL;
    Py_ssize_t n = PyList_GET_SIZE(cpu), m = PyList_GET_SIZE(events);
    PyObject *ob = NULL, *tb = NULL, *threads = NULL, *ids = NULL, *res = NULL;
    OwnerThreads th = {0};
    PyThreadState *ts = NULL;
    int bad = 0; /* 1: an item not an event; 2: out of memory */
    if (pv.len / 4 != n || tv.len / 8 != n || dv.len / 8 != n) {
        PyErr_SetString(PyExc_ValueError, "sizes");
        goto done;
    }
    /* the walk up the parents reads each event's start and duration from the model's columns
     * (16 bytes an event, next to each other), not from the events spread over the heap */
    const double *ts_all = tv.buf, *dur_all = dv.buf;
    ob = new_column('i', m);
    tb = new_column('i', m);
    threads = PyList_New(0);
    ids = PyDict_New();
    if (!ob || !tb || !threads || !ids) goto done;
    const int32_t *parent = pv.buf;
    int32_t *o = (int32_t *)col_data(ob), *t = (int32_t *)col_data(tb);
    ts = PyEval_SaveThread();
    PyObject *last = NULL;
    for (Py_ssize_t k = 0; k < m && !bad; k++) { /* the threads, in order of first event */
        Ev *q = ev_released(events, k);
        if (!q) bad = 1;
        else if (q->thread != last) {
            if (owner_thread(&th, q->thread, k) < 0) bad = 2;
            last = q->thread;
        }
    }
    GIL_BACK(ts);
    if (bad == 1) { not_an_event(); goto done; }
    if (bad) { PyErr_NoMemory(); goto done; }
    for (size_t s = 0; s < th.n; s++) { /* each resolved once, with the GIL */
        OwnerThread *r = &th.at[s];
        PyObject *key = thread_key((Ev *)PyList_GET_ITEM(events, r->first));
        if (!key) goto done;
        PyObject *id = PyDict_GetItemWithError(ids, key);
        if (!id) {
            if (PyErr_Occurred()) { Py_DECREF(key); goto done; }
            id = PyLong_FromSsize_t(PyList_GET_SIZE(threads));
            if (!id || PyDict_SetItem(ids, key, id) < 0 || PyList_Append(threads, key) < 0) {
                Py_XDECREF(id); Py_DECREF(key); goto done;
            }
            Py_DECREF(id);
        }
        r->tid = PyLong_AsSsize_t(id);
        PyObject *st = PyDict_GetItemWithError(starts_by, key), *bs = st ? PyDict_GetItemWithError(base_by, key) : NULL;
        Py_DECREF(key);
        if (PyErr_Occurred()) goto done;
        if (st && bs) {
            if (PyObject_GetBuffer(st, &r->starts, PyBUF_SIMPLE) < 0) goto done;
            r->have = 1;
            r->base = PyLong_AsSsize_t(bs);
            if (r->base < 0 || r->base + r->starts.len / 8 > n) { PyErr_SetString(PyExc_ValueError, "base"); goto done; }
        }
    }
    ts = PyEval_SaveThread();
    last = NULL;
    OwnerThread *r = NULL;
    for (Py_ssize_t k = 0; k < m && !bad; k++) { /* the owners */
        Ev *q = (Ev *)PyList_GET_ITEM(events, k); /* each checked above */
        if (q->thread != last) {
            r = &th.at[owner_thread(&th, q->thread, k)]; /* found: never added */
            last = q->thread;
        }
        t[k] = (int32_t)r->tid;
        o[k] = -1;
        if (!r->have) continue;
        const double *starts = r->starts.buf;
        Py_ssize_t ns = r->starts.len / 8, lo = 0, hi = ns, base = r->base;
        double x = q->ts + slack;
        while (lo < hi) { /* bisect_right */
            Py_ssize_t mid = (lo + hi) / 2;
            if (x < starts[mid]) hi = mid; else lo = mid + 1;
        }
        Py_ssize_t i = lo >= 1 ? base + lo - 1 : -1;
        while (i >= 0 && i < n) {
            if (ts_all[i] + dur_all[i] + slack >= q->ts) {
                if (cat == Py_None) { o[k] = (int32_t)i; break; }
                Ev *e = ev_released(cpu, i);
                if (!e) { bad = 1; break; }
                int eq = same_released(e->cat, cat, &ts);
                if (eq < 0) { bad = 3; break; }
                if (eq) { o[k] = (int32_t)i; break; }
            }
            i = parent[i];
        }
    }
    GIL_BACK(ts);
    if (bad == 1) not_an_event();
    if (!bad) res = Py_BuildValue("(OOO)", ob, tb, threads);
done:
    GIL_BACK(ts);
    for (size_t s = 0; s < th.n; s++)
        if (th.at[s].have) PyBuffer_Release(&th.at[s].starts);
    free(th.at); free(th.slot);
    PyBuffer_Release(&pv); PyBuffer_Release(&tv); PyBuffer_Release(&dv);
    Py_XDECREF(ob); Py_XDECREF(tb); Py_XDECREF(threads); Py_XDECREF(ids);
    return res;
}

/* memory_columns(samples) -> (ts f64, bytes, total_allocated, total_reserved i64, device_type i32,
 * addr i64): absent counts and addresses are 0, an absent device type -1. */
static PyObject *memory_columns(PyObject *mod, PyObject *args) {
    PyObject *list;
    if (!PyArg_ParseTuple(args, "O!", &PyList_Type, &list)) return NULL;
    Py_ssize_t n = PyList_GET_SIZE(list);
    PyObject *ts = new_column('d', n), *mb = new_column('q', n),
             *ta = new_column('q', n), *tr = new_column('q', n),
             *dt = new_column('i', n), *ad = new_column('q', n);
    if (!ts || !mb || !ta || !tr || !dt || !ad) {
        Py_XDECREF(ts); Py_XDECREF(mb); Py_XDECREF(ta); Py_XDECREF(tr); Py_XDECREF(dt); Py_XDECREF(ad);
        return NULL;
    }
    double *t = (double *)col_data(ts);
    int64_t *b = (int64_t *)col_data(mb), *a = (int64_t *)col_data(ta),
            *r = (int64_t *)col_data(tr), *ap = (int64_t *)col_data(ad);
    int32_t *d = (int32_t *)col_data(dt);
    int bad = 0;
    PyThreadState *save = PyEval_SaveThread(); /* read without the GIL: passes.start_work */
    for (Py_ssize_t k = 0; k < n; k++) {
        Ev *e = ev_released(list, k);
        if (!e) { bad = 1; break; }
        const int64_t *mf = mem_fields(e); /* devtype, memb, talloc, tres, addr */
        t[k] = e->ts;
        b[k] = mf && (e->flags & F_MEMB) ? mf[1] : 0;
        a[k] = mf && (e->flags & F_TALLOC) ? mf[2] : 0;
        r[k] = mf && (e->flags & F_TRES) ? mf[3] : 0;
        ap[k] = mf && (e->flags & F_ADDR) ? mf[4] : 0;
        d[k] = mf && (e->flags & F_DEVTYPE) && mf[0] >= INT32_MIN && mf[0] <= INT32_MAX ? (int32_t)mf[0] : -1;
    }
    PyEval_RestoreThread(save);
    if (bad) {
        Py_DECREF(ts); Py_DECREF(mb); Py_DECREF(ta); Py_DECREF(tr); Py_DECREF(dt); Py_DECREF(ad);
        not_an_event();
        return NULL;
    }
    return Py_BuildValue("(NNNNNN)", ts, mb, ta, tr, dt, ad);
}

/* hot_lines(cpu, gpu, parent, starts, frame_of, fwd_of, lines, keys, launched_off, launched,
 *           gpu_class, launch_cats, durs, python, launch, slack)
 * The per-event sums of passes._hot_sums_ref, in the same order (so the same floats). ``lines``:
 * per event the number of its hot line (-1: none, and for every label), ``keys``: of its line key
 * (equal keys, equal numbers; -1: none). Returns the hot lines in order of first event (their
 * numbers, and that first event), and per hot line in that order: calls, launches (int64),
 * cpu_self, cpu_total, cpu_backward, gpu, gpu_forward, gpu_backward (float64, as bytes), and lists
 * of kernel_classes and kernel-stat dicts. */
#define NOKEY INT32_MIN
static PyObject *S_ProfilerStep;

/* hot_lines' sums per (line, key): a total each, and with ``with_class`` a count and the class
 * that made the slot (borrowed: ``classes`` holds it). */
typedef struct { double *v; int64_t *n; PyObject **cls; Py_ssize_t len, cap; int with_class; } Sums;

/* The place of (line h, key) in ``sums``: the key's slot number is its value in ``d`` (line h's dict)
 * until slot_values puts the sums there, so equal keys share a slot as they share a dict entry;
 * -1 on error. */
static Py_ssize_t slot_of(IdCache *seen, PyObject *d, Py_ssize_t h, PyObject *key, PyObject *cls, Sums *sums) {
    uint64_t ck[KEY_W] = {(uint64_t)h, (uintptr_t)key};
    PyObject *at = id_get(seen, ck);
    if (!at) {
        at = PyDict_GetItemWithError(d, key);
        if (!at) {
            if (PyErr_Occurred()) return -1;
            if (sums->len == sums->cap) {
                Py_ssize_t cap = sums->cap ? 2 * sums->cap : 64;
                double *v = realloc(sums->v, cap * sizeof(double));
                if (v) sums->v = v;
                int64_t *n = v && sums->with_class ? realloc(sums->n, cap * sizeof(int64_t)) : NULL;
                if (n) sums->n = n;
                PyObject **c = n ? realloc(sums->cls, cap * sizeof(PyObject *)) : NULL;
                if (c) sums->cls = c;
                if (!v || (sums->with_class && !c)) { PyErr_NoMemory(); return -1; }
                sums->cap = cap;
            }
            sums->v[sums->len] = 0.0;
            if (sums->with_class) {
                sums->n[sums->len] = 0;
                sums->cls[sums->len] = cls;
            }
            at = PyLong_FromSsize_t(sums->len++);
            if (!at || PyDict_SetItem(d, key, at) < 0) { Py_XDECREF(at); return -1; }
            Py_DECREF(at); /* the dict holds it */
        }
        if (id_put(seen, ck, at) < 0) return -1;
    }
    return PyLong_AsSsize_t(at);
}

/* Each dict of ``dicts``: its slot numbers replaced by the sums, the total alone, or ``[class, count,
 * total]`` with ``with_class`` (the keys stay in their first-seen order). 0, or -1 on error. */
static int slot_values(PyObject *dicts, const Sums *sums) {
    for (Py_ssize_t h = 0; h < PyList_GET_SIZE(dicts); h++) {
        PyObject *d = PyList_GET_ITEM(dicts, h), *key, *at;
        Py_ssize_t pos = 0;
        while (PyDict_Next(d, &pos, &key, &at)) {
            Py_ssize_t k = PyLong_AsSsize_t(at);
            PyObject *v = sums->with_class ? Py_BuildValue("[OLd]", sums->cls[k], (long long)sums->n[k], sums->v[k])
                                : PyFloat_FromDouble(sums->v[k]);
            if (!v || PyDict_SetItem(d, key, v) < 0) { Py_XDECREF(v); return -1; }
            Py_DECREF(v);
        }
    }
    return 0;
}

/* Each cpu event's children's summed duration, as nest nested them (``parent``, in each thread's
 * sorted order; ``starts`` and ``durs``, its columns): a child's duration, or for a python frame
 * whose exit the tracer lost, its time up to its parent's end as nesting saw it (nest's clamp).
 * The model keeps no column of it (8 bytes an event, read by this pass alone): made here, the
 * children added in event order as nest would, so the same floats. NULL (error set) without
 * memory. */
static double *child_durations(const int32_t *parent, const double *starts, const double *durs, Py_ssize_t n,
                               double slack) {
    double *cdur = zeroed(n ? n : 1, sizeof(double));
    int32_t *clamped = NULL; /* the events nesting clamped, in event order (few: lost exits) */
    double *clamped_end = NULL;
    Py_ssize_t nc = 0, cap = 0;
    if (!cdur) { PyErr_NoMemory(); return NULL; }
    for (Py_ssize_t i = 0; i < n; i++) {
        int32_t p = parent[i];
        if (p < 0 || p >= n) continue; /* the sums' loop refuses a bad parent */
        double ts = starts[i], dur = durs[i], end = ts + dur, tend = starts[p] + durs[p];
        Py_ssize_t lo = 0, hi = nc; /* p's own end as nesting saw it: clamped too, or its own */
        while (lo < hi) {
            Py_ssize_t mid = (lo + hi) / 2;
            if (clamped[mid] < p) lo = mid + 1; else hi = mid;
        }
        if (lo < nc && clamped[lo] == p) tend = clamped_end[lo];
        if (!(ts < tend && end <= tend + slack)) { /* nested, yet not inside: nest clamped it */
            dur = tend - ts;
            if (nc == cap) {
                cap = cap ? 2 * cap : 64;
                int32_t *c = realloc(clamped, cap * sizeof(int32_t));
                if (c) clamped = c;
                double *e = c ? realloc(clamped_end, cap * sizeof(double)) : NULL;
                if (e) clamped_end = e;
                if (!c || !e) { free(cdur); free(clamped); free(clamped_end); PyErr_NoMemory(); return NULL; }
            }
            clamped[nc] = (int32_t)i; /* i grows: the list stays sorted */
            clamped_end[nc++] = tend;
        }
        cdur[p] += dur;
    }
    free(clamped);
    free(clamped_end);
    return cdur;
}

static PyObject *hot_lines(PyObject *mod, PyObject *args) {
    PyObject *cpu, *gpu, *classes, *launch_cats;
    Py_buffer pv, cv, fv, wv, lnv, kyv, ov, lv, dv, yv, av;
    double slack;
    if (!PyArg_ParseTuple(args, "O!O!y*y*y*y*y*y*y*y*O!Oy*y*y*d", &PyList_Type, &cpu, &PyList_Type, &gpu, &pv, &cv,
                          &fv, &wv, &lnv, &kyv, &ov, &lv, &PyList_Type, &classes, &launch_cats, &dv, &yv, &av,
                          &slack))
        return NULL;
    double *cdur = NULL;
    Py_ssize_t n = PyList_GET_SIZE(cpu), ng = PyList_GET_SIZE(gpu);
    int32_t *hid_of = NULL, *order = NULL, *first = NULL;
    Py_ssize_t cap = 0, nh = 0, nl = 0;
    int64_t *calls = NULL, *launches = NULL;
    double *cself = NULL, *ctot = NULL, *cbwd = NULL, *gus = NULL, *gfwd = NULL, *gbwd = NULL;
    PyObject *kc = PyList_New(0), *ks = PyList_New(0), *result = NULL;
    IdCache kseen = ID_CACHE(2), sseen = ID_CACHE(2); /* (line, class), (line, kernel name) */
    Sums ksum = {.with_class = 0}, stot = {.with_class = 1}; /* per (line, class); per (line, kernel name) */
    if (!kc || !ks) goto done;
    if (pv.len / 4 != n || cv.len / 8 != n || fv.len / 4 != n || wv.len / 4 != n || lnv.len / 4 != n ||
        kyv.len / 4 != n || ov.len / 4 != n + 1 || PyList_GET_SIZE(classes) != ng || dv.len / 8 != n ||
        yv.len != n || av.len != n) {
        PyErr_SetString(PyExc_ValueError, "hot_lines: sizes differ");
        goto done;
    }
    /* the cpu events' durations and categories from the model's columns (durs, the python frames'
     * and launch calls' masks), not from the events: a parent's, read for each of its children,
     * is anywhere on the heap */
    const double *durs = dv.buf;
    const unsigned char *py = yv.buf, *launch = av.buf;
    const int32_t *parent = pv.buf, *fof = fv.buf, *fwd = wv.buf, *lines = lnv.buf, *keys = kyv.buf;
    const int32_t *off = ov.buf, *gl = lv.buf;
    if (!(cdur = child_durations(parent, cv.buf, durs, n, slack))) goto done;
    for (Py_ssize_t i = 0; i < n; i++)
        if (lines[i] >= nl) nl = (Py_ssize_t)lines[i] + 1;
    hid_of = malloc(sizeof(int32_t) * (nl ? nl : 1));
    order = malloc(sizeof(int32_t) * (nl ? nl : 1));
    first = malloc(sizeof(int32_t) * (nl ? nl : 1));
    if (!hid_of || !order || !first) { PyErr_NoMemory(); goto done; }
    for (Py_ssize_t k = 0; k < nl; k++) hid_of[k] = -1; /* -1: not seen yet */
    for (Py_ssize_t i = 0; i < n; i++) {
        int32_t line = lines[i];
        if (line < 0) continue;
        if (py[i]) continue; /* frames are counted through their ops */
        if (hid_of[line] < 0) {
            int32_t h = (int32_t)nh;
            hid_of[line] = h;
            order[nh] = line;
            first[nh] = (int32_t)i;
            if (h >= cap) { /* grow the per-line sums */
                Py_ssize_t ncap = (h + 1) * 2 > 64 ? (h + 1) * 2 : 64;
                int64_t *a1 = realloc(calls, ncap * 8), *a2 = a1 ? realloc(launches, ncap * 8) : NULL;
                if (a1) calls = a1;
                if (a2) launches = a2;
                double **ds[] = {&cself, &ctot, &cbwd, &gus, &gfwd, &gbwd};
                int ok = a1 && a2;
                for (int d = 0; d < 6 && ok; d++) {
                    double *x = realloc(*ds[d], ncap * 8);
                    if (!x) ok = 0; else *ds[d] = x;
                }
                if (!ok) { PyErr_NoMemory(); goto done; }
                for (Py_ssize_t q = cap; q < ncap; q++) {
                    calls[q] = launches[q] = 0;
                    cself[q] = ctot[q] = cbwd[q] = gus[q] = gfwd[q] = gbwd[q] = 0.0;
                }
                cap = ncap;
            }
            PyObject *d1 = PyDict_New(), *d2 = PyDict_New();
            if (!d1 || !d2 || PyList_Append(kc, d1) < 0 || PyList_Append(ks, d2) < 0) {
                Py_XDECREF(d1); Py_XDECREF(d2); goto done;
            }
            Py_DECREF(d1); Py_DECREF(d2);
            nh++;
        }
        int32_t h = hid_of[line];
        int32_t p = parent[i];
        int backward = fof[i] < 0 && fwd[i] >= 0;
        int top = p < 0;
        if (!top) {
            if (p >= n) { PyErr_SetString(PyExc_ValueError, "hot_lines: bad parent"); goto done; }
            top = py[p] || keys[p] != keys[i];
        }
        double dur = durs[i], self_us = dur - cdur[i];
        if (backward) {
            if (top) cbwd[h] += dur;
        } else {
            cself[h] += self_us > 0.0 ? self_us : 0.0;
            if (top) { ctot[h] += dur; calls[h]++; }
        }
        if (!launch[i]) continue;
        int32_t g0 = off[i], g1 = off[i + 1];
        if (g1 > g0) launches[h]++;
        for (int32_t gi = g0; gi < g1; gi++) {
            int32_t g = gl[gi];
            if (g < 0 || g >= ng) continue;
            Ev *ge = ev_at(gpu, g);
            if (!ge) goto done;
            PyObject *cls = PyList_GET_ITEM(classes, g);
            gus[h] += ge->dur;
            if (backward) gbwd[h] += ge->dur; else gfwd[h] += ge->dur;
            /* the class's and the kernel's sums on this line, in C (a float and a list an event as
             * Python objects, before); the dicts hold each key's place until then */
            Py_ssize_t ci = slot_of(&kseen, PyList_GET_ITEM(kc, h), h, cls, cls, &ksum);
            Py_ssize_t si = ci < 0 ? -1 : slot_of(&sseen, PyList_GET_ITEM(ks, h), h, ge->name, cls, &stot);
            if (si < 0) goto done;
            ksum.v[ci] += ge->dur;
            stot.v[si] += ge->dur;
            stot.n[si]++;
        }
    }
    if (slot_values(kc, &ksum) < 0 || slot_values(ks, &stot) < 0) goto done;
    {
        Py_ssize_t m = nh;
        PyObject *b[10];
        b[0] = col_copy('i', order, m);
        b[1] = col_copy('i', first, m);
        b[2] = col_copy('q', calls, m);
        b[3] = col_copy('q', launches, m);
        double *ds[] = {cself, ctot, cbwd, gus, gfwd, gbwd};
        for (int d = 0; d < 6; d++) b[4 + d] = col_copy('d', ds[d], m);
        int ok = 1;
        for (int d = 0; d < 10; d++) ok = ok && b[d];
        if (ok)
            result = Py_BuildValue("(NNNNNNNNNNOO)", b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], kc, ks);
        else for (int d = 0; d < 10; d++) Py_XDECREF(b[d]);
    }
done:
    free(cdur);
    free(kseen.s); free(sseen.s); free(ksum.v); free(stot.v); free(stot.n); free(stot.cls);
    free(hid_of); free(order); free(first); free(calls); free(launches);
    free(cself); free(ctot); free(cbwd); free(gus); free(gfwd); free(gbwd);
    Py_XDECREF(kc); Py_XDECREF(ks);
    PyBuffer_Release(&pv); PyBuffer_Release(&cv); PyBuffer_Release(&fv); PyBuffer_Release(&wv);
    PyBuffer_Release(&lnv); PyBuffer_Release(&kyv); PyBuffer_Release(&ov); PyBuffer_Release(&lv);
    PyBuffer_Release(&dv); PyBuffer_Release(&yv); PyBuffer_Release(&av);
    return result;
}

/* subtree(off, kids, i) -> list: event i and everything nested in it, in passes._subtree_ref's order
 * (a stack: each event's children pushed in order, the last popped first). */
static PyObject *subtree(PyObject *mod, PyObject *args) {
    Py_buffer ov, kv;
    Py_ssize_t root;
    if (!PyArg_ParseTuple(args, "y*y*n", &ov, &kv, &root)) return NULL;
    Py_ssize_t n = ov.len / 4 - 1, nk = kv.len / 4;
    const int32_t *off = ov.buf, *kids = kv.buf;
    PyObject *out = NULL;
    int32_t *stack = NULL;
    if (root < 0 || root >= n) { PyErr_SetString(PyExc_IndexError, "subtree: no such event"); goto done; }
    stack = malloc(sizeof(int32_t) * (nk + 1));
    out = PyList_New(0);
    if (!stack || !out) { Py_XDECREF(out); out = NULL; if (!stack) PyErr_NoMemory(); goto done; }
    Py_ssize_t top = 0;
    stack[top++] = (int32_t)root;
    while (top) {
        int32_t j = stack[--top];
        PyObject *v = PyLong_FromLong(j);
        if (!v || PyList_Append(out, v) < 0) { Py_XDECREF(v); Py_CLEAR(out); goto done; }
        Py_DECREF(v);
        if (j < 0 || j >= n) continue;
        for (int32_t k = off[j]; k < off[j + 1] && k < nk; k++) {
            if (top > nk) break; /* a cycle in a corrupt index: cannot happen in a tree */
            stack[top++] = kids[k];
        }
    }
done:
    free(stack);
    PyBuffer_Release(&ov); PyBuffer_Release(&kv);
    return out;
}

/* cpu_total(cpu, parent) -> float: the summed duration of the non-python events that have no
 * non-python ancestor (passes._cpu_total_ref: Self CPU time total, nesting not double-counted). */
static PyObject *cpu_total(PyObject *mod, PyObject *args) {
    PyObject *cpu;
    Py_buffer pv, dv, yv;
    if (!PyArg_ParseTuple(args, "O!y*y*y*", &PyList_Type, &cpu, &pv, &dv, &yv)) return NULL;
    Py_ssize_t n = PyList_GET_SIZE(cpu);
    PyObject *out = NULL;
    char *inside = NULL;
    if (pv.len / 4 != n || dv.len / 8 != n || yv.len != n) { PyErr_SetString(PyExc_ValueError, "sizes differ"); goto done; }
    inside = malloc(n ? n : 1);
    if (!inside) { PyErr_NoMemory(); goto done; }
    const int32_t *parent = pv.buf;
    const double *durs = dv.buf; /* the columns, not the events (one read of each, in order) */
    const unsigned char *py = yv.buf;
    double total = 0.0;
    for (Py_ssize_t i = 0; i < n; i++) {
        int32_t p = parent[i];
        int in = p >= 0 && p < i && inside[p];
        if (!py[i]) {
            if (!in) total += durs[i];
            inside[i] = 1;
        } else {
            inside[i] = (char)in;
        }
    }
    out = PyFloat_FromDouble(total);
done:
    free(inside);
    PyBuffer_Release(&pv); PyBuffer_Release(&dv); PyBuffer_Release(&yv);
    return out;
}

/* nearest(parent, mask) -> int32 column: for every event the nearest strict ancestor whose mask
 * byte is set, -1 when none (parents precede their children, so one forward pass). */
static PyObject *nearest(PyObject *mod, PyObject *args) {
    Py_buffer pv, mv;
    if (!PyArg_ParseTuple(args, "y*y*", &pv, &mv)) return NULL;
    Py_ssize_t n = pv.len / 4;
    PyObject *out = NULL;
    if (mv.len != n) { PyErr_SetString(PyExc_ValueError, "sizes differ"); goto done; }
    out = new_column('i', n);
    if (!out) goto done;
    const int32_t *parent = pv.buf;
    const unsigned char *mask = mv.buf;
    int32_t *o = (int32_t *)col_data(out);
    for (Py_ssize_t i = 0; i < n; i++) {
        int32_t p = parent[i];
        o[i] = p < 0 || p >= i ? -1 : (mask[p] ? p : o[p]);
    }
done:
    PyBuffer_Release(&pv); PyBuffer_Release(&mv);
    return out;
}

/* line_tokens(frame_of, fwd_of, token) -> int32 column: per event the key under which its source
 * line is cached (context.Context.line_key): its statement token, else ~frame, INT32_MIN for none. */
static void line_token_columns(Py_ssize_t n, const int32_t *fof, const int32_t *fwd, const int32_t *tok, int32_t *o) {
    for (Py_ssize_t i = 0; i < n; i++) {
        int32_t f = fof[i], src = (int32_t)i;
        if (f < 0) { src = fwd[i]; f = src >= 0 && src < n ? fof[src] : -1; }
        o[i] = f < 0 ? NOKEY : (tok[src] >= 0 ? tok[src] : -f - 1);
    }
}

static PyObject *line_tokens(PyObject *mod, PyObject *args) { return columns3(args, line_token_columns); }

/* ancestor_sums(parent, items int32, values int64) -> (events int32, totals int64): each value
 * added to its item and every ancestor of it; the events with a non-zero total, in index order. */
static PyObject *ancestor_sums(PyObject *mod, PyObject *args) {
    Py_buffer pv, iv, vv;
    if (!PyArg_ParseTuple(args, "y*y*y*", &pv, &iv, &vv)) return NULL;
    Py_ssize_t n = pv.len / 4, m = iv.len / 4;
    PyObject *res = NULL;
    int64_t *tot = NULL;
    if (vv.len / 8 != m) { PyErr_SetString(PyExc_ValueError, "sizes differ"); goto done; }
    tot = zeroed(n ? n : 1, sizeof(int64_t));
    if (!tot) { PyErr_NoMemory(); goto done; }
    const int32_t *parent = pv.buf, *items = iv.buf;
    const int64_t *vals = vv.buf;
    for (Py_ssize_t k = 0; k < m; k++) {
        int32_t i = items[k];
        Py_ssize_t guard = 0;
        while (i >= 0 && i < n && guard++ <= n) { tot[i] += vals[k]; i = parent[i]; }
    }
    Py_ssize_t nz = 0;
    for (Py_ssize_t i = 0; i < n; i++) nz += tot[i] != 0;
    PyObject *ib = new_column('i', nz), *tb = new_column('q', nz);
    if (!ib || !tb) { Py_XDECREF(ib); Py_XDECREF(tb); goto done; }
    int32_t *oi = (int32_t *)col_data(ib);
    int64_t *ot = (int64_t *)col_data(tb);
    for (Py_ssize_t i = 0, k = 0; i < n; i++)
        if (tot[i]) { oi[k] = (int32_t)i; ot[k] = tot[i]; k++; }
    res = Py_BuildValue("(NN)", ib, tb);
done:
    free(tot);
    PyBuffer_Release(&pv); PyBuffer_Release(&iv); PyBuffer_Release(&vv);
    return res;
}

/* ancestors(parent, items int32) -> bytes: 1 for each item and every event it is nested in
 * (passes._ancestors_ref): the events with GPU work launched at or under them. A walk up stops at
 * an event already marked, whose ancestors are marked too. */
static PyObject *ancestors(PyObject *mod, PyObject *args) {
    Py_buffer pv, iv;
    if (!PyArg_ParseTuple(args, "y*y*", &pv, &iv)) return NULL;
    Py_ssize_t n = pv.len / 4, m = iv.len / 4;
    PyObject *out = PyBytes_FromStringAndSize(NULL, n);
    if (out) {
        char *o = PyBytes_AS_STRING(out);
        memset(o, 0, n);
        const int32_t *parent = pv.buf, *items = iv.buf;
        for (Py_ssize_t k = 0; k < m; k++)
            for (int32_t i = items[k]; i >= 0 && i < n && !o[i]; i = parent[i]) o[i] = 1;
    }
    PyBuffer_Release(&pv); PyBuffer_Release(&iv);
    return out;
}

/* launchers(cpu, launches, gpu) -> int32 column: per GPU event the cpu event (among ``launches``,
 * the runtime/driver calls) with its correlation id, -1 when none: passes._launchers_ref's join, with its
 * rule for ids repeated across processes (the process whose (pid, id) appeared last wins, and its
 * last call). One open-addressing table keyed by id holds a row per (pid, id): its first launch
 * (the reference's dict order) and its last call; an id's winner is its row first seen last. No
 * Python object per launch or per GPU event (the dicts of (pid, id) tuples and ints cost 4x). */
typedef struct {
    int64_t corr;
    PyObject *pid; /* borrowed from the event; NULL: an empty slot */
    Py_ssize_t first; /* the launch (k) that first had this (pid, id) */
    int32_t last; /* its last call */
} CorrRow;

static inline size_t corr_slot(int64_t c, size_t mask) {
    uint64_t h = (uint64_t)c * 0x9E3779B97F4A7C15ULL;
    return (size_t)(h ^ (h >> 29)) & mask;
}

static PyObject *launchers(PyObject *mod, PyObject *args) {
    PyObject *cpu, *gpu;
    Py_buffer lv;
    if (!PyArg_ParseTuple(args, "O!y*O!", &PyList_Type, &cpu, &lv, &PyList_Type, &gpu)) return NULL;
    Py_ssize_t n = PyList_GET_SIZE(cpu), nl = lv.len / 4, ng = PyList_GET_SIZE(gpu);
    PyObject *out = new_column('i', ng);
    size_t cap = 16;
    while (cap < (size_t)nl * 2) cap <<= 1;
    size_t mask = cap - 1;
    CorrRow *rows = out ? zeroed(cap, sizeof(CorrRow)) : NULL;
    if (!rows) {
        if (out) PyErr_NoMemory();
        Py_XDECREF(out);
        PyBuffer_Release(&lv);
        return NULL;
    }
    int32_t *o = (int32_t *)col_data(out);
    const int32_t *launch = lv.buf;
    int bad = 0; /* 1: an item not an event; -1: the pids' compare raised */
    PyThreadState *ts = PyEval_SaveThread(); /* read without the GIL: passes.start_work */
    for (Py_ssize_t k = 0; k < nl && !bad; k++) {
        int32_t i = launch[k];
        if (i < 0 || i >= n) continue;
        Ev *e = ev_released(cpu, i);
        if (!e) { bad = 1; break; }
        if (!(e->flags & F_ARGS) || !(e->flags & F_CORR) || !HAS_OP(e)) continue;
        int64_t corr = op_int(e, F_CORR);
        size_t j = corr_slot(corr, mask);
        for (;; j = (j + 1) & mask) {
            CorrRow *r = &rows[j];
            if (!r->pid) { r->corr = corr; r->pid = EV_PID(e); r->first = k; r->last = i; break; }
            if (r->corr != corr) continue;
            /* the same id: the same process (the key's equality, as the dict's) or another row; the
             * scanner makes one object per pid written the same, so Python compares seldom */
            int eq = 1;
            if (r->pid != EV_PID(e)) {
                GIL_BACK(ts);
                eq = PyObject_RichCompareBool(r->pid, EV_PID(e), Py_EQ);
                ts = PyEval_SaveThread();
            }
            if (eq < 0) { bad = -1; break; }
            if (eq) { r->last = i; break; }
        }
    }
    for (Py_ssize_t g = 0; g < ng && !bad; g++) {
        Ev *e = ev_released(gpu, g);
        if (!e) { bad = 1; break; }
        o[g] = -1;
        if (!(e->flags & F_ARGS) || !(e->flags & F_CORR) || !HAS_OP(e)) continue;
        Py_ssize_t best = -1;
        int64_t corr = op_int(e, F_CORR);
        for (size_t j = corr_slot(corr, mask); rows[j].pid; j = (j + 1) & mask)
            if (rows[j].corr == corr && rows[j].first > best) { best = rows[j].first; o[g] = rows[j].last; }
    }
    GIL_BACK(ts);
    free(rows);
    PyBuffer_Release(&lv);
    if (bad) {
        if (bad > 0) not_an_event();
        Py_DECREF(out);
        return NULL;
    }
    return out;
}

/* replay(pre d, kind b, op_off i, op_stream i, op_dur d, step_rows i, scale d, gscale d, tail d, lat,
 * keep d, drop b, nonblock b) -> float: the replayed mean step (passes._replay_ref, the reference,
 * says what each column is). Kinds: 0 a launch that does not wait, 1 a call that waits for its own
 * ops, 2 a sync (waits for every stream), 3 a launch that waited for queue room. Streams are ids
 * in [0, max id]; their "when free" is kept in order of first use, as the reference's dict. */
static PyObject *replay(PyObject *mod, PyObject *args) {
    enum { PRE, KIND, OFF, STREAM, DUR, STEPS, SCALE, GSCALE, TAIL, KEEP, DROP, NONBLOCK, NBUF };
    Py_buffer b[NBUF];
    double lat;
    memset(b, 0, sizeof b);
    if (!PyArg_ParseTuple(args, "y*y*y*y*y*y*y*y*y*dy*y*y*", &b[PRE], &b[KIND], &b[OFF], &b[STREAM], &b[DUR],
                          &b[STEPS], &b[SCALE], &b[GSCALE], &b[TAIL], &lat, &b[KEEP], &b[DROP], &b[NONBLOCK]))
        return NULL;
    PyObject *res = NULL;
    double *freet = NULL;
    int32_t *order = NULL;
    char *seen = NULL;
    Py_ssize_t rows = b[PRE].len / 8, nops = b[DUR].len / 8, nsteps = b[STEPS].len / 4 - 1;
    const double *pre = b[PRE].buf, *opd = b[DUR].buf, *scale = b[SCALE].buf, *gscale = b[GSCALE].buf,
                 *tail = b[TAIL].buf, *keep = b[KEEP].buf;
    const unsigned char *kind = b[KIND].buf, *drop = b[DROP].buf, *nonblock = b[NONBLOCK].buf;
    const int32_t *off = b[OFF].buf, *stream = b[STREAM].buf, *steps = b[STEPS].buf;
    if (nsteps < 1 || b[KIND].len != rows || b[OFF].len / 4 != rows + 1 || b[STREAM].len / 4 != nops
        || b[SCALE].len / 8 < nsteps || b[GSCALE].len / 8 < nsteps || b[TAIL].len / 8 < nsteps
        || b[KEEP].len / 8 != rows || b[DROP].len != rows || b[NONBLOCK].len != rows) {
        PyErr_SetString(PyExc_ValueError, "replay: column sizes differ");
        goto done;
    }
    int32_t nstreams = 0;
    for (Py_ssize_t o = 0; o < nops; o++) {
        if (stream[o] < 0) { PyErr_SetString(PyExc_ValueError, "replay: a negative stream id"); goto done; }
        if (stream[o] >= nstreams) nstreams = stream[o] + 1;
    }
    freet = zeroed(nstreams ? nstreams : 1, sizeof(double));
    order = malloc(sizeof(int32_t) * (nstreams ? nstreams : 1));
    seen = zeroed(nstreams ? nstreams : 1, 1);
    if (!freet || !order || !seen) { PyErr_NoMemory(); goto done; }
    Py_ssize_t nseen = 0;
    double c = 0.0;
    for (Py_ssize_t k = 0; k < nsteps; k++) {
        double sc = scale[k], gs = gscale[k];
        Py_ssize_t r0 = steps[k], r1 = steps[k + 1];
        if (r0 < 0 || r1 > rows || r0 > r1) { PyErr_SetString(PyExc_ValueError, "replay: bad step rows"); goto done; }
        for (Py_ssize_t r = r0; r < r1; r++) {
            c += pre[r] * sc * keep[r];
            if (drop[r]) continue;
            double opend = c;
            Py_ssize_t o0 = off[r], o1 = off[r + 1];
            if (o0 < 0 || o1 > nops || o0 > o1) { PyErr_SetString(PyExc_ValueError, "replay: bad op offsets"); goto done; }
            for (Py_ssize_t o = o0; o < o1; o++) {
                int32_t s = stream[o];
                if (!seen[s]) { seen[s] = 1; order[nseen++] = s; }
                double t = freet[s], cl = c + lat;
                t = (cl > t ? cl : t) + opd[o] * gs;
                freet[s] = t;
                if (t > opend) opend = t;
            }
            unsigned char kd = kind[r];
            if (kd == 0 || kd == 3 || nonblock[r]) continue;
            if (kd == 2) {
                for (Py_ssize_t j = 0; j < nseen; j++)
                    if (freet[order[j]] > c) c = freet[order[j]];
            } else {
                c = opend;
            }
        }
        c += tail[k] * sc;
    }
    double last = c; /* max(free.values(), default=c): the first, then each one greater */
    if (nseen) {
        last = freet[order[0]];
        for (Py_ssize_t j = 1; j < nseen; j++)
            if (freet[order[j]] > last) last = freet[order[j]];
    }
    res = PyFloat_FromDouble((last > c ? last : c) / (double)nsteps);
done:
    free(freet); free(order); free(seen);
    for (int k = 0; k < NBUF; k++)
        if (b[k].obj) PyBuffer_Release(&b[k]);
    return res;
}

/* kernel_configs(gpu, classes, skip, launcher, ops_above, cpu, lines, frame_of, fwd_of)
 *   -> (configs: dict, dims: list)
 * kernel-jitter's configurations (passes._kernel_configs_ref): each kernel not of class ``skip``
 * keyed by (name, grid, block, the launching op's name, its line group's id ``lines[g]``, launched in
 * backward), the kernels' indices per key in order of first run; and per GPU event the launching
 * op's Input Dims (raw bytes) where it has some, else None. */
static PyObject *kernel_configs(PyObject *mod, PyObject *args) {
    PyObject *gpu, *classes, *skip, *cpu;
    Py_buffer lv, ov, fv, wv, iv;
    if (!PyArg_ParseTuple(args, "O!O!Oy*y*O!y*y*y*", &PyList_Type, &gpu, &PyList_Type, &classes, &skip, &lv,
                          &ov, &PyList_Type, &cpu, &iv, &fv, &wv))
        return NULL;
    PyObject *configs = NULL, *dims = NULL, *empty_b = NULL, *empty_s = NULL, *result = NULL;
    IdCache seen = ID_CACHE(6); /* (name, grid, block, op name, line, backward) */
    Py_ssize_t ng = PyList_GET_SIZE(gpu), n = PyList_GET_SIZE(cpu);
    if (PyList_GET_SIZE(classes) != ng || iv.len / 4 != ng || lv.len / 4 != ng ||
        ov.len / 4 != n || fv.len / 4 != n || wv.len / 4 != n) {
        PyErr_SetString(PyExc_ValueError, "kernel_configs: sizes differ");
        goto done;
    }
    configs = PyDict_New();
    dims = PyList_New(ng);
    empty_b = PyBytes_FromStringAndSize(NULL, 0);
    empty_s = PyUnicode_New(0, 0);
    if (!configs || !dims || !empty_b || !empty_s) goto done;
    for (Py_ssize_t g = 0; g < ng; g++) {
        Py_INCREF(Py_None);
        PyList_SET_ITEM(dims, g, Py_None);
    }
    const int32_t *launcher = lv.buf, *ops = ov.buf, *fof = fv.buf, *fwd = wv.buf, *line = iv.buf;
    for (Py_ssize_t g = 0; g < ng; g++) {
        Ev *e = ev_at(gpu, g);
        if (!e) goto done;
        if (!e->cat || !same(e->cat, S_kernel)) continue;
        int r = PyObject_RichCompareBool(PyList_GET_ITEM(classes, g), skip, Py_EQ);
        if (r < 0) goto done;
        if (r) continue;
        PyObject *grid = empty_b, *block = empty_b, *opname = empty_s;
        if (e->flags & F_ARGS) {
            PyObject *eg = op_obj(e, F_GRID), *eb = op_obj(e, F_BLOCK);
            if (eg) grid = eg;
            if (eb) block = eb;
        }
        int32_t li = launcher[g];
        int backward = 0;
        if (li >= 0 && li < n) {
            int32_t op = ops[li];
            backward = fof[li] < 0 && fwd[li] >= 0;
            if (op >= 0 && op < n) {
                Ev *oe = ev_at(cpu, op);
                if (!oe) goto done;
                if (oe->name) opname = oe->name;
                PyObject *od = oe->flags & F_ARGS ? op_obj(oe, F_DIMS) : NULL;
                if (od && PyObject_IsTrue(od) == 1) {
                    Py_INCREF(od);
                    PyList_SetItem(dims, g, od);
                }
            }
        }
        PyObject *name = e->name ? e->name : empty_s;
        uint64_t ck[KEY_W] = {(uintptr_t)name, (uintptr_t)grid, (uintptr_t)block, (uintptr_t)opname,
                              (uint32_t)line[g], (uint64_t)backward};
        PyObject *runs = id_get(&seen, ck);
        if (!runs) {
            PyObject *lid = PyLong_FromLong(line[g]);
            if (!lid) goto done;
            PyObject *key = PyTuple_Pack(6, name, grid, block, opname, lid, backward ? Py_True : Py_False);
            Py_DECREF(lid);
            if (!key) goto done;
            runs = PyDict_GetItemWithError(configs, key);
            if (!runs) {
                if (PyErr_Occurred() || !(runs = PyList_New(0)) || PyDict_SetItem(configs, key, runs) < 0) {
                    Py_XDECREF(runs); Py_DECREF(key); goto done;
                }
                Py_DECREF(runs); /* the dict holds it */
            }
            Py_DECREF(key);
            if (id_put(&seen, ck, runs) < 0) goto done;
        }
        PyObject *gi = PyLong_FromSsize_t(g);
        if (!gi || PyList_Append(runs, gi) < 0) { Py_XDECREF(gi); goto done; }
        Py_DECREF(gi);
    }
    result = PyTuple_Pack(2, configs, dims);
done:
    free(seen.s);
    Py_XDECREF(configs); Py_XDECREF(dims); Py_XDECREF(empty_b); Py_XDECREF(empty_s);
    PyBuffer_Release(&lv); PyBuffer_Release(&ov); PyBuffer_Release(&fv); PyBuffer_Release(&wv);
    PyBuffer_Release(&iv);
    return result;
}

/* line_gpu_sums(launcher, line_tokens, gpu) -> (keys int32, sums float64, first launch int32) bytes
 * Each GPU event's duration onto the line key (``line_tokens``) of the call that launched it
 * (passes._line_gpu_sums_ref): the keys in order of first event, their sums in event order, and
 * the launch call of each key's first event. */
static PyObject *line_gpu_sums(PyObject *mod, PyObject *args) {
    Py_buffer lv, kv;
    PyObject *gpu;
    if (!PyArg_ParseTuple(args, "y*y*O!", &lv, &kv, &PyList_Type, &gpu)) return NULL;
    PyObject *res = NULL;
    Py_ssize_t ng = PyList_GET_SIZE(gpu), n = kv.len / 4, nk = 0;
    int32_t *slot = NULL, *keys = NULL, *reps = NULL;
    double *sums = NULL;
    if (lv.len / 4 != ng) { PyErr_SetString(PyExc_ValueError, "line_gpu_sums: sizes differ"); goto done; }
    slot = malloc(sizeof(int32_t) * (2 * n + 1));
    keys = malloc(sizeof(int32_t) * (ng ? ng : 1));
    reps = malloc(sizeof(int32_t) * (ng ? ng : 1));
    sums = malloc(sizeof(double) * (ng ? ng : 1));
    if (!slot || !keys || !reps || !sums) { PyErr_NoMemory(); goto done; }
    for (Py_ssize_t k = 0; k < 2 * n + 1; k++) slot[k] = -1;
    const int32_t *launcher = lv.buf, *ck = kv.buf;
    for (Py_ssize_t g = 0; g < ng; g++) {
        int32_t li = launcher[g];
        if (li < 0 || li >= n) continue;
        int32_t c = ck[li];
        if (c == NOKEY || c < -n || c >= n) continue;
        Py_ssize_t s = (Py_ssize_t)c + n;
        if (slot[s] < 0) {
            slot[s] = (int32_t)nk;
            keys[nk] = c; reps[nk] = li; sums[nk] = 0.0;
            nk++;
        }
        Ev *e = ev_at(gpu, g);
        if (!e) goto done;
        sums[slot[s]] += e->dur;
    }
    res = Py_BuildValue("(NNN)", col_copy('i', keys, nk), col_copy('d', sums, nk), col_copy('i', reps, nk));
done:
    free(slot); free(keys); free(reps); free(sums);
    PyBuffer_Release(&lv); PyBuffer_Release(&kv);
    return res;
}

/* launch_runs(gpu, launcher, frame_of, lines, steps, cpu, durs) -> dict
 * launch-storm's runs (passes._launch_runs_ref): each kernel launched from a user frame, in a
 * step and on a line, as (duration, its launch call's duration, launch call) under its line
 * group's id (``lines``, int32; -1: none) and (kernel name, step number) (``steps``: per GPU
 * event the step number of its launch, None outside every step), in order of first run. */
static PyObject *launch_runs(PyObject *mod, PyObject *args) {
    PyObject *gpu, *steps, *cpu;
    Py_buffer lv, fv, iv, dv;
    if (!PyArg_ParseTuple(args, "O!y*y*y*O!O!y*", &PyList_Type, &gpu, &lv, &fv, &iv, &PyList_Type, &steps,
                          &PyList_Type, &cpu, &dv))
        return NULL;
    PyObject *per = NULL, *result = NULL;
    IdCache seen = ID_CACHE(3); /* (line, kernel name, step) */
    Py_ssize_t ng = PyList_GET_SIZE(gpu), n = PyList_GET_SIZE(cpu);
    if (lv.len / 4 != ng || iv.len / 4 != ng || PyList_GET_SIZE(steps) != ng || fv.len / 4 != n || dv.len / 8 != n) {
        PyErr_SetString(PyExc_ValueError, "launch_runs: sizes differ");
        goto done;
    }
    const double *durs = dv.buf; /* the launch calls' durations: the column, not the events */
    if (!(per = PyDict_New())) goto done;
    const int32_t *launcher = lv.buf, *fof = fv.buf, *line = iv.buf;
    for (Py_ssize_t g = 0; g < ng; g++) {
        int32_t li = launcher[g];
        if (li < 0 || li >= n || fof[li] < 0) continue;
        Ev *e = ev_at(gpu, g);
        if (!e) goto done;
        if (!e->cat || !same(e->cat, S_kernel)) continue;
        PyObject *step = PyList_GET_ITEM(steps, g);
        if (line[g] < 0 || step == Py_None) continue;
        uint64_t ck[KEY_W] = {(uint32_t)line[g], (uintptr_t)e->name, (uintptr_t)step};
        PyObject *runs = id_get(&seen, ck);
        if (!runs) {
            PyObject *lid = PyLong_FromLong(line[g]);
            if (!lid) goto done;
            PyObject *groups = PyDict_GetItemWithError(per, lid);
            if (!groups) {
                if (PyErr_Occurred() || !(groups = PyDict_New()) || PyDict_SetItem(per, lid, groups) < 0) {
                    Py_XDECREF(groups); Py_DECREF(lid); goto done;
                }
                Py_DECREF(groups);
            }
            Py_DECREF(lid);
            PyObject *key = PyTuple_Pack(2, e->name, step);
            if (!key) goto done;
            runs = PyDict_GetItemWithError(groups, key);
            if (!runs) {
                if (PyErr_Occurred() || !(runs = PyList_New(0)) || PyDict_SetItem(groups, key, runs) < 0) {
                    Py_XDECREF(runs); Py_DECREF(key); goto done;
                }
                Py_DECREF(runs);
            }
            Py_DECREF(key);
            if (id_put(&seen, ck, runs) < 0) goto done;
        }
        /* the tuple made directly: Py_BuildValue parses its format again each of 200,000 runs */
        PyObject *x = PyTuple_New(3), *a = PyFloat_FromDouble(e->dur), *b = PyFloat_FromDouble(durs[li]),
                 *c = PyLong_FromLong(li);
        if (!x || !a || !b || !c) { Py_XDECREF(x); Py_XDECREF(a); Py_XDECREF(b); Py_XDECREF(c); goto done; }
        PyTuple_SET_ITEM(x, 0, a);
        PyTuple_SET_ITEM(x, 1, b);
        PyTuple_SET_ITEM(x, 2, c);
        if (PyList_Append(runs, x) < 0) { Py_DECREF(x); goto done; }
        Py_DECREF(x);
    }
    result = per;
    per = NULL;
done:
    free(seen.s);
    Py_XDECREF(per);
    PyBuffer_Release(&lv); PyBuffer_Release(&fv); PyBuffer_Release(&iv); PyBuffer_Release(&dv);
    return result;
}

/* fixed_points(col) -> bytes: 1 where col[i] == i (passes._fixed_points_ref): the events that are
 * their own statement token (``token``), the user frames (``frame_of``). */
static PyObject *fixed_points(PyObject *mod, PyObject *args) {
    Py_buffer cv;
    if (!PyArg_ParseTuple(args, "y*", &cv)) return NULL;
    Py_ssize_t n = cv.len / 4;
    PyObject *out = PyBytes_FromStringAndSize(NULL, n);
    if (out) {
        const int32_t *col = cv.buf;
        char *o = PyBytes_AS_STRING(out);
        for (Py_ssize_t i = 0; i < n; i++) o[i] = col[i] == i;
    }
    PyBuffer_Release(&cv);
    return out;
}

/* positions(mask) -> int32 column: the positions of the set bytes, in order (the events of a mask
 * as indices: the statement tokens, the user frames). */
static PyObject *positions(PyObject *mod, PyObject *args) {
    Py_buffer mv;
    if (!PyArg_ParseTuple(args, "y*", &mv)) return NULL;
    const char *mask = mv.buf;
    Py_ssize_t n = mv.len, m = 0;
    for (Py_ssize_t i = 0; i < n; i++) m += mask[i] != 0;
    PyObject *out = new_column('i', m);
    if (out) {
        int32_t *o = (int32_t *)col_data(out);
        for (Py_ssize_t i = 0; i < n; i++)
            if (mask[i]) *o++ = (int32_t)i;
    }
    PyBuffer_Release(&mv);
    return out;
}

/* take(col int32, idx int32, default) -> int32 column: col[idx[k]] per k, ``default`` where idx[k]
 * is negative (or out of range): a column read through another (the launch calls' line tokens per
 * GPU event). */
static PyObject *take(PyObject *mod, PyObject *args) {
    Py_buffer cv, iv;
    int dflt;
    if (!PyArg_ParseTuple(args, "y*y*i", &cv, &iv, &dflt)) return NULL;
    Py_ssize_t n = cv.len / 4, m = iv.len / 4;
    PyObject *out = new_column('i', m);
    if (out) {
        const int32_t *col = cv.buf, *idx = iv.buf;
        int32_t *o = (int32_t *)col_data(out);
        for (Py_ssize_t k = 0; k < m; k++) o[k] = idx[k] >= 0 && idx[k] < n ? col[idx[k]] : dflt;
    }
    PyBuffer_Release(&cv); PyBuffer_Release(&iv);
    return out;
}

/* codes(col int32) -> (first int32 column, code int32 column): the column's distinct values in
 * order of first appearance, as the position of each one's first appearance, and per item the
 * place of its value among them (one open-addressing table of the distinct values). */
static PyObject *codes(PyObject *mod, PyObject *args) {
    Py_buffer cv;
    if (!PyArg_ParseTuple(args, "y*", &cv)) return NULL;
    Py_ssize_t n = cv.len / 4, cap = 16, nd = 0;
    while (cap < 2 * n) cap <<= 1;
    int32_t *slot = malloc(cap * sizeof(int32_t)), *first = malloc((n ? n : 1) * sizeof(int32_t));
    PyObject *cb = new_column('i', n), *res = NULL;
    if (!slot || !first || !cb) { if (!PyErr_Occurred()) PyErr_NoMemory(); goto done; }
    memset(slot, 0xff, cap * sizeof(int32_t)); /* -1: empty; else a distinct value's number */
    const int32_t *col = cv.buf;
    int32_t *code = (int32_t *)col_data(cb);
    for (Py_ssize_t k = 0; k < n; k++) {
        int32_t v = col[k];
        size_t h = ((uint32_t)v * 2654435761u) & (cap - 1);
        while (slot[h] >= 0 && col[first[slot[h]]] != v) h = (h + 1) & (cap - 1);
        if (slot[h] < 0) { slot[h] = (int32_t)nd; first[nd++] = (int32_t)k; }
        code[k] = slot[h];
    }
    PyObject *fb = col_copy('i', first, nd);
    if (fb) { res = Py_BuildValue("(NO)", fb, cb); }
done:
    free(slot); free(first);
    Py_XDECREF(cb);
    PyBuffer_Release(&cv);
    return res;
}

/* bisect.bisect_right over n sorted doubles */
static Py_ssize_t bisect_right_d(const double *a, Py_ssize_t n, double t) {
    Py_ssize_t lo = 0, hi = n;
    while (lo < hi) {
        Py_ssize_t mid = (lo + hi) / 2;
        if (t < a[mid]) hi = mid; else lo = mid + 1;
    }
    return lo;
}

/* step_of(idx int32, starts float64, step_starts float64, step_ends float64) -> int32 column: per
 * item the step (model.step_at) that the start of cpu event idx[k] falls in, -1 for none or for a
 * negative idx (the steps of the GPU events' launch calls). */
static PyObject *step_of(PyObject *mod, PyObject *args) {
    Py_buffer iv, tv, sv, ev;
    if (!PyArg_ParseTuple(args, "y*y*y*y*", &iv, &tv, &sv, &ev)) return NULL;
    Py_ssize_t m = iv.len / 4, n = tv.len / 8, ns = sv.len / 8;
    PyObject *out = NULL;
    if (ev.len / 8 != ns) { PyErr_SetString(PyExc_ValueError, "step_of: sizes differ"); goto done; }
    if (!(out = new_column('i', m))) goto done;
    const int32_t *idx = iv.buf;
    const double *ts = tv.buf, *ss = sv.buf, *se = ev.buf;
    int32_t *o = (int32_t *)col_data(out);
    for (Py_ssize_t k = 0; k < m; k++) {
        int32_t i = idx[k];
        o[k] = -1;
        if (i < 0 || i >= n) continue;
        double t = ts[i];
        Py_ssize_t j = bisect_right_d(ss, ns, t) - 1;
        if (j >= 0 && t <= se[j]) o[k] = (int32_t)j;
    }
done:
    PyBuffer_Release(&iv); PyBuffer_Release(&tv); PyBuffer_Release(&sv); PyBuffer_Release(&ev);
    return out;
}

/* replay_rows(idx, starts, durs, step_starts, step_ends, sync, blocking, off, launched, gpu, slack,
 * queue_wait) -> (rows, kinds, pre, step_rows, cpu_us, tail, op_off, ops, op_dur, lats) bytes: the
 * replay's calls (stepmodel.StepModel, passes._replay_rows_ref): of the launch and sync calls
 * ``idx`` those that start in a step, each step's in start order (ties in idx order), each with its
 * kind (a sync; a call that waits for its own GPU work or a blocking copy; one that waited for queue
 * room; else non-blocking), the profiled CPU time before it, its GPU events and their durations;
 * per step its CPU time between calls and after the last; and the launch-to-start times, in idx
 * order step by step. */
typedef struct { double ts; int32_t pos; } RowKey;

static int cmp_rowkeys(const void *x, const void *y) {
    const RowKey *a = x, *b = y;
    if (a->ts < b->ts) return -1;
    if (a->ts > b->ts) return 1;
    return (a->pos > b->pos) - (a->pos < b->pos);
}

static PyObject *replay_rows(PyObject *mod, PyObject *args) {
    Py_buffer iv, tv, dv, sv, ev, yv, bv, ov, lv;
    PyObject *gpu;
    double slack, queue_wait;
    if (!PyArg_ParseTuple(args, "y*y*y*y*y*y*y*y*y*O!dd", &iv, &tv, &dv, &sv, &ev, &yv, &bv, &ov, &lv,
                          &PyList_Type, &gpu, &slack, &queue_wait))
        return NULL;
    Py_ssize_t m = iv.len / 4, n = tv.len / 8, ns = sv.len / 8, noff = ov.len / 4, nl = lv.len / 4;
    Py_ssize_t ng = PyList_GET_SIZE(gpu), nops = 0, nlat = 0, nrows = 0;
    PyObject *res = NULL;
    int32_t *step = NULL, *order = NULL, *count = NULL, *rows = NULL, *step_rows = NULL, *op_off = NULL, *ops = NULL;
    unsigned char *kind = NULL, *kinds = NULL;
    double *pre = NULL, *cpu_us = NULL, *tail = NULL, *op_dur = NULL, *lats = NULL;
    RowKey *keys = NULL;
    if (dv.len / 8 != n || ev.len / 8 != ns || yv.len != m || bv.len != m) {
        PyErr_SetString(PyExc_ValueError, "replay_rows: sizes differ");
        goto done;
    }
    const int32_t *idx = iv.buf, *off = ov.buf, *launched = lv.buf;
    const double *ts = tv.buf, *dur = dv.buf, *ss = sv.buf, *se = ev.buf;
    const unsigned char *sync = yv.buf, *blocking = bv.buf;
    Py_ssize_t cap = m ? m : 1;
    step = malloc(sizeof(int32_t) * cap); kind = malloc(cap); order = malloc(sizeof(int32_t) * cap);
    count = zeroed(ns + 1, sizeof(int32_t));
    if (!step || !kind || !order || !count) { PyErr_NoMemory(); goto done; }
    for (Py_ssize_t k = 0; k < m; k++) {  /* each call's step and kind */
        int32_t i = idx[k];
        step[k] = -1;
        if (i < 0 || i >= n) continue;
        double t = ts[i];
        Py_ssize_t j = bisect_right_d(ss, ns, t) - 1;
        if (j < 0 || !(t <= se[j])) continue;
        step[k] = (int32_t)j;
        count[j + 1]++;
        nrows++;
        if (sync[k]) { kind[k] = 2; continue; }
        if (i + 1 >= noff || off[i] < 0 || off[i] > off[i + 1] || off[i + 1] > nl) goto bad;
        double end = t + dur[i], last = 0.0;
        int any = 0;
        for (int32_t o = off[i]; o < off[i + 1]; o++) {
            int32_t g = launched[o];
            if (g < 0 || g >= ng) goto bad;
            Ev *ge = ev_at(gpu, g);
            if (!ge) goto done;
            double e = ge->ts + ge->dur;
            if (!any || e > last) last = e;
            any = 1;
            nops++;
            if (ge->ts >= t) nlat++;
        }
        kind[k] = blocking[k] || (any && end >= last - slack) ? 1 : dur[i] > queue_wait ? 3 : 0;
    }
    for (Py_ssize_t j = 0; j < ns; j++) count[j + 1] += count[j];  /* each step's first row */
    {
        int32_t *at = malloc(sizeof(int32_t) * (ns + 1));
        if (!at) { PyErr_NoMemory(); goto done; }
        memcpy(at, count, sizeof(int32_t) * (ns + 1));
        for (Py_ssize_t k = 0; k < m; k++)  /* the calls step by step, in idx order */
            if (step[k] >= 0) order[at[step[k]]++] = (int32_t)k;
        free(at);
    }
    Py_ssize_t rc = nrows ? nrows : 1, oc = nops ? nops : 1;
    rows = malloc(sizeof(int32_t) * rc); kinds = malloc(rc); pre = malloc(sizeof(double) * rc);
    keys = malloc(sizeof(RowKey) * rc); op_off = malloc(sizeof(int32_t) * (nrows + 1));
    ops = malloc(sizeof(int32_t) * oc); op_dur = malloc(sizeof(double) * oc);
    lats = malloc(sizeof(double) * (nlat ? nlat : 1)); step_rows = malloc(sizeof(int32_t) * (ns + 1));
    cpu_us = malloc(sizeof(double) * (ns ? ns : 1)); tail = malloc(sizeof(double) * (ns ? ns : 1));
    if (!rows || !kinds || !pre || !keys || !op_off || !ops || !op_dur || !lats || !step_rows || !cpu_us || !tail) {
        PyErr_NoMemory();
        goto done;
    }
    Py_ssize_t nl2 = 0, no = 0;
    for (Py_ssize_t r = 0; r < nrows; r++) {  /* the launch-to-start times, before the sort */
        int32_t k = order[r], i = idx[k];
        if (kind[k] == 2) continue;
        for (int32_t o = off[i]; o < off[i + 1]; o++) {
            Ev *ge = (Ev *)PyList_GET_ITEM(gpu, launched[o]);
            if (ge->ts >= ts[i]) lats[nl2++] = ge->ts - ts[i];
        }
    }
    op_off[0] = 0;
    for (Py_ssize_t j = 0; j < ns; j++) {
        Py_ssize_t a = count[j], b = count[j + 1];
        for (Py_ssize_t r = a; r < b; r++) { keys[r].ts = ts[idx[order[r]]]; keys[r].pos = order[r]; }
        qsort(keys + a, b - a, sizeof(RowKey), cmp_rowkeys);
        double total = 0.0, anchor = ss[j];
        for (Py_ssize_t r = a; r < b; r++) {
            int32_t k = keys[r].pos, i = idx[k];
            double t = ts[i], p = t - anchor;
            p = p > 0.0 ? p : 0.0; /* max(0.0, p): 0.0 for NaN and -0.0, as Python's */
            total += p;
            anchor = kind[k] != 0 ? t + dur[i] : t;
            rows[r] = i; kinds[r] = kind[k]; pre[r] = p;
            if (kind[k] != 2)
                for (int32_t o = off[i]; o < off[i + 1]; o++) {
                    ops[no] = launched[o];
                    op_dur[no++] = ((Ev *)PyList_GET_ITEM(gpu, launched[o]))->dur;
                }
            op_off[r + 1] = (int32_t)no;
        }
        double t = se[j] - anchor;
        t = t > 0.0 ? t : 0.0;
        tail[j] = t;
        cpu_us[j] = total + t;
        step_rows[j] = (int32_t)a;
    }
    step_rows[ns] = (int32_t)nrows;
    res = Py_BuildValue("(NNNNNNNNNN)", col_copy('i', rows, nrows), PyBytes_FromStringAndSize((char *)kinds, nrows),
                        col_copy('d', pre, nrows), col_copy('i', step_rows, ns + 1), col_copy('d', cpu_us, ns),
                        col_copy('d', tail, ns), col_copy('i', op_off, nrows + 1), col_copy('i', ops, no),
                        col_copy('d', op_dur, no), col_copy('d', lats, nl2));
    goto done;
bad:
    PyErr_SetString(PyExc_IndexError, "replay_rows: an index out of range");
done:
    free(step); free(kind); free(order); free(count); free(rows); free(kinds); free(pre); free(keys);
    free(op_off); free(ops); free(op_dur); free(lats); free(step_rows); free(cpu_us); free(tail);
    PyBuffer_Release(&iv); PyBuffer_Release(&tv); PyBuffer_Release(&dv); PyBuffer_Release(&sv);
    PyBuffer_Release(&ev); PyBuffer_Release(&yv); PyBuffer_Release(&bv); PyBuffer_Release(&ov);
    PyBuffer_Release(&lv);
    return res;
}

/* launch_delays(gpu, launcher, cpu, min_delay) -> (delays float64 column, late int32 column):
 * gpu-contention's pass (passes._launch_delays_ref): per launched GPU event but each kernel name's
 * first, its start less its launch call's start; and the events whose delay is at least
 * min_delay and that start after their launch call returned. */
static PyObject *launch_delays(PyObject *mod, PyObject *args) {
    PyObject *gpu, *cpu;
    Py_buffer lv;
    double min_delay;
    if (!PyArg_ParseTuple(args, "O!y*O!d", &PyList_Type, &gpu, &lv, &PyList_Type, &cpu, &min_delay)) return NULL;
    Py_ssize_t ng = PyList_GET_SIZE(gpu), n = PyList_GET_SIZE(cpu), nd = 0, nl = 0;
    PyObject *seen = NULL, *res = NULL;
    double *d = NULL;
    int32_t *late = NULL;
    if (lv.len / 4 != ng) { PyErr_SetString(PyExc_ValueError, "launch_delays: sizes differ"); goto done; }
    d = malloc((ng ? ng : 1) * sizeof(double));
    late = malloc((ng ? ng : 1) * sizeof(int32_t));
    if (!d || !late) { PyErr_NoMemory(); goto done; }
    if (!(seen = PySet_New(NULL))) goto done;
    const int32_t *launcher = lv.buf;
    for (Py_ssize_t g = 0; g < ng; g++) {
        int32_t li = launcher[g];
        if (li < 0 || li >= n) continue;
        Ev *e = ev_at(gpu, g);
        if (!e) goto done;
        int had = PySet_Contains(seen, e->name);
        if (had < 0) goto done;
        if (!had) {
            if (PySet_Add(seen, e->name) < 0) goto done;
            continue;
        }
        Ev *call = ev_at(cpu, li);
        if (!call) goto done;
        double x = e->ts - call->ts, wait_from = call->ts + call->dur;
        d[nd++] = x;
        if (x >= min_delay && e->ts > wait_from) late[nl++] = (int32_t)g;
    }
    res = Py_BuildValue("(NN)", col_copy('d', d, nd), col_copy('i', late, nl));
done:
    free(d); free(late);
    Py_XDECREF(seen);
    PyBuffer_Release(&lv);
    return res;
}

/* group_min(groups int32, idx int32, values float64, lo, hi, n) -> (mins float64 column, seen
 * bytes): per group in [0, n), the least values[idx[k]] over the items k of that group whose idx
 * lies in [lo, hi) (the first launch of each step from the main thread's events), and whether it
 * had any. */
static PyObject *group_min(PyObject *mod, PyObject *args) {
    Py_buffer gv, iv, vv;
    Py_ssize_t lo, hi, n;
    if (!PyArg_ParseTuple(args, "y*y*y*nnn", &gv, &iv, &vv, &lo, &hi, &n)) return NULL;
    Py_ssize_t m = gv.len / 4, nv = vv.len / 8;
    PyObject *mb = NULL, *sb = NULL, *res = NULL;
    if (iv.len / 4 != m || n < 0) { PyErr_SetString(PyExc_ValueError, "group_min: sizes differ"); goto done; }
    if (!(mb = new_column('d', n)) || !(sb = PyBytes_FromStringAndSize(NULL, n))) goto done;
    double *mins = (double *)col_data(mb);
    char *seen = PyBytes_AS_STRING(sb);
    memset(seen, 0, n);
    for (Py_ssize_t g = 0; g < n; g++) mins[g] = 0.0;
    const int32_t *groups = gv.buf, *idx = iv.buf;
    const double *vals = vv.buf;
    for (Py_ssize_t k = 0; k < m; k++) {
        int32_t g = groups[k], i = idx[k];
        if (g < 0 || g >= n || i < lo || i >= hi || i < 0 || i >= nv) continue;
        if (!seen[g] || vals[i] < mins[g]) { mins[g] = vals[i]; seen[g] = 1; }
    }
    res = Py_BuildValue("(OO)", mb, sb);
done:
    Py_XDECREF(mb); Py_XDECREF(sb);
    PyBuffer_Release(&gv); PyBuffer_Release(&iv); PyBuffer_Release(&vv);
    return res;
}

/* gpu_under_all(off, kids, launch_off, launched, roots) -> int32 column: for each root in order,
 * the GPU events launched from it or anything nested in it (model.gpu_under: the subtree in
 * subtree's order, each event's launches in order), one after another. */
static PyObject *gpu_under_all(PyObject *mod, PyObject *args) {
    Py_buffer ov, kv, lov, lgv, rv;
    if (!PyArg_ParseTuple(args, "y*y*y*y*y*", &ov, &kv, &lov, &lgv, &rv)) return NULL;
    Py_ssize_t n = ov.len / 4 - 1, nk = kv.len / 4, nl = lov.len / 4 - 1, ng = lgv.len / 4, nr = rv.len / 4;
    const int32_t *off = ov.buf, *kids = kv.buf, *loff = lov.buf, *lgs = lgv.buf, *roots = rv.buf;
    int32_t *stack = NULL, *out = NULL;
    Py_ssize_t cap = 64, len = 0;
    PyObject *res = NULL;
    stack = malloc(sizeof(int32_t) * (nk + 1));
    out = malloc(sizeof(int32_t) * cap);
    if (!stack || !out) { PyErr_NoMemory(); goto done; }
    for (Py_ssize_t r = 0; r < nr; r++) {
        int32_t root = roots[r];
        if (root < 0 || root >= n) { PyErr_SetString(PyExc_IndexError, "gpu_under_all: no such event"); goto done; }
        Py_ssize_t top = 0;
        stack[top++] = root;
        while (top) {
            int32_t j = stack[--top];
            if (j < 0 || j >= n) continue;
            if (j < nl)
                for (int32_t q = loff[j]; q < loff[j + 1] && q < ng; q++) {
                    if (len == cap) {
                        int32_t *grown = realloc(out, sizeof(int32_t) * (cap *= 2));
                        if (!grown) { PyErr_NoMemory(); goto done; }
                        out = grown;
                    }
                    out[len++] = lgs[q];
                }
            for (int32_t k = off[j]; k < off[j + 1] && k < nk; k++) {
                if (top > nk) break;
                stack[top++] = kids[k];
            }
        }
    }
    res = col_copy('i', out, len);
done:
    free(stack); free(out);
    PyBuffer_Release(&ov); PyBuffer_Release(&kv); PyBuffer_Release(&lov); PyBuffer_Release(&lgv); PyBuffer_Release(&rv);
    return res;
}

/* iterations(parent, token, frame_of, op_mask, py_mask, lis) -> (ops int32 column, runs int32
 * bytes), one item per cpu event, -1 but at the events of lis: launch-storm's loop iteration of
 * each launch call (passes._iterations_ref) counted per innermost Python call (its outermost op
 * below the Python frame, else itself) and per run of its user frame's statement (climbing from
 * its statement token, else itself, to the child of its user frame). */
static PyObject *iterations(PyObject *mod, PyObject *args) {
    Py_buffer pv, tv, fv, ov, yv, lv;
    if (!PyArg_ParseTuple(args, "y*y*y*y*y*y*", &pv, &tv, &fv, &ov, &yv, &lv)) return NULL;
    Py_ssize_t n = pv.len / 4, nl = lv.len / 4;
    PyObject *ob = NULL, *rb = NULL, *res = NULL;
    if (tv.len / 4 != n || fv.len / 4 != n || ov.len != n || yv.len != n) {
        PyErr_SetString(PyExc_ValueError, "iterations: sizes differ");
        goto done;
    }
    if (!(ob = new_column('i', n)) || !(rb = new_column('i', n))) goto done;
    int32_t *ops = (int32_t *)col_data(ob), *runs = (int32_t *)col_data(rb);
    memset(ops, 0xff, n * 4);
    memset(runs, 0xff, n * 4);
    const int32_t *parent = pv.buf, *token = tv.buf, *fof = fv.buf, *lis = lv.buf;
    const unsigned char *op = ov.buf, *py = yv.buf;
    for (Py_ssize_t k = 0; k < nl; k++) {
        int32_t li = lis[k];
        if (li < 0 || li >= n || ops[li] >= 0) continue;
        int32_t best = op[li] ? li : -1;
        Py_ssize_t guard = 0;
        for (int32_t a = parent[li]; a >= 0 && a < n && guard++ <= n; a = parent[a]) {
            if (py[a]) break;
            if (op[a]) best = a;
        }
        ops[li] = best >= 0 ? best : li;
        int32_t t = token[li], i = t >= 0 ? t : li, f = fof[li];
        guard = 0;
        while (i >= 0 && i < n && parent[i] >= 0 && parent[i] != f && guard++ <= n) i = parent[i];
        runs[li] = i;
    }
    res = Py_BuildValue("(OO)", ob, rb);
done:
    Py_XDECREF(ob); Py_XDECREF(rb);
    PyBuffer_Release(&pv); PyBuffer_Release(&tv); PyBuffer_Release(&fv); PyBuffer_Release(&ov);
    PyBuffer_Release(&yv); PyBuffer_Release(&lv);
    return res;
}

/* points_into(col int32, mask bytes) -> int32 column: the items whose value is an index with a
 * set mask byte, in order (the backward events whose forward op is one of a set). */
static PyObject *points_into(PyObject *mod, PyObject *args) {
    Py_buffer cv, mv;
    if (!PyArg_ParseTuple(args, "y*y*", &cv, &mv)) return NULL;
    Py_ssize_t n = cv.len / 4, nm = mv.len, len = 0;
    const int32_t *col = cv.buf;
    const unsigned char *mask = mv.buf;
    PyObject *res = NULL;
    int32_t *out = malloc((n ? n : 1) * sizeof(int32_t));
    if (!out) { PyErr_NoMemory(); goto done; }
    for (Py_ssize_t i = 0; i < n; i++) {
        int32_t v = col[i];
        if (v >= 0 && v < nm && mask[v]) out[len++] = (int32_t)i;
    }
    res = col_copy('i', out, len);
done:
    free(out);
    PyBuffer_Release(&cv); PyBuffer_Release(&mv);
    return res;
}

/* owner_sums(rows int32, owner int32, nbytes int64) -> (owners int32 column, sums int64 column) or
 * None: over the rows, the positive byte counts summed per owner (>= 0), the owners in order of
 * first row (memory-child-pressure's allocations per event); None where an int64 sum would
 * overflow (a corrupt trace: the reference's Python ints then). */
static PyObject *owner_sums(PyObject *mod, PyObject *args) {
    Py_buffer rv, ov, bv;
    if (!PyArg_ParseTuple(args, "y*y*y*", &rv, &ov, &bv)) return NULL;
    Py_ssize_t nr = rv.len / 4, n = ov.len / 4, nd = 0;
    PyObject *res = NULL;
    int32_t *slot = NULL, *who = NULL;
    int64_t *sum = NULL;
    if (bv.len / 8 != n) { PyErr_SetString(PyExc_ValueError, "owner_sums: sizes differ"); goto done; }
    const int32_t *rows = rv.buf, *owner = ov.buf;
    const int64_t *nbytes = bv.buf;
    int32_t maxo = -1;
    for (Py_ssize_t k = 0; k < nr; k++) {
        int32_t r = rows[k];
        if (r >= 0 && r < n && owner[r] > maxo) maxo = owner[r];
    }
    slot = malloc(sizeof(int32_t) * ((Py_ssize_t)maxo + 2));
    who = malloc(sizeof(int32_t) * (nr ? nr : 1));
    sum = malloc(sizeof(int64_t) * (nr ? nr : 1));
    if (!slot || !who || !sum) { PyErr_NoMemory(); goto done; }
    memset(slot, 0xff, sizeof(int32_t) * ((Py_ssize_t)maxo + 2));
    for (Py_ssize_t k = 0; k < nr; k++) {
        int32_t r = rows[k];
        if (r < 0 || r >= n) continue;
        int32_t o = owner[r];
        int64_t b = nbytes[r];
        if (o < 0 || b <= 0) continue;
        if (slot[o] < 0) { slot[o] = (int32_t)nd; who[nd] = o; sum[nd++] = 0; }
        if (__builtin_add_overflow(sum[slot[o]], b, &sum[slot[o]])) { res = Py_None; Py_INCREF(res); goto done; }
    }
    res = Py_BuildValue("(NN)", col_copy('i', who, nd), col_copy('q', sum, nd));
done:
    free(slot); free(who); free(sum);
    PyBuffer_Release(&rv); PyBuffer_Release(&ov); PyBuffer_Release(&bv);
    return res;
}

/* scatter_sums(items int32, values float64, codes int32, off int32, targets int32, n) -> float64
 * bytes: per target in [0, n) values[items[k]] added, item after item, for each item whose code
 * is not negative onto each of that code's targets (targets[off[c]:off[c + 1]]), from 0.0: the
 * additions Python makes one after another (passes._scatter_sums_ref), so the same floats. */
static PyObject *scatter_sums(PyObject *mod, PyObject *args) {
    Py_buffer iv, vv, cv, ov, tv;
    Py_ssize_t n;
    if (!PyArg_ParseTuple(args, "y*y*y*y*y*n", &iv, &vv, &cv, &ov, &tv, &n)) return NULL;
    Py_ssize_t m = iv.len / 4, nv = vv.len / 8, nc = ov.len / 4 - 1, nt = tv.len / 4;
    PyObject *out = NULL;
    if (cv.len / 4 != m || n < 0 || nc < 0) { PyErr_SetString(PyExc_ValueError, "scatter_sums: sizes differ"); goto done; }
    if (!(out = new_column('d', n))) goto done;
    double *acc = (double *)col_data(out);
    for (Py_ssize_t t = 0; t < n; t++) acc[t] = 0.0;
    const int32_t *items = iv.buf, *code = cv.buf, *off = ov.buf, *targets = tv.buf;
    const double *values = vv.buf;
    for (Py_ssize_t k = 0; k < m; k++) {
        int32_t c = code[k], i = items[k];
        if (c < 0) continue;
        if (c >= nc || i < 0 || i >= nv || off[c] < 0 || off[c] > off[c + 1] || off[c + 1] > nt) goto bad;
        double v = values[i];
        for (int32_t j = off[c]; j < off[c + 1]; j++) {
            int32_t t = targets[j];
            if (t < 0 || t >= n) goto bad;
            acc[t] += v;
        }
    }
    goto done;
bad:
    PyErr_SetString(PyExc_IndexError, "scatter_sums: an index out of range");
    Py_CLEAR(out);
done:
    PyBuffer_Release(&iv); PyBuffer_Release(&vv); PyBuffer_Release(&cv); PyBuffer_Release(&ov); PyBuffer_Release(&tv);
    return out;
}

/* ---- the summary analyses and the module tree ------------------------------------------------
 * analyses.merge's unions, covered's index, step_gpu's per-step unions, the GPU events' class keys
 * and the module markers. Spans come as one float64 column, start and end alternating
 * (passes.Spans.flat); a NaN in them (whose order Python's sort leaves to chance) returns None and
 * the caller runs the reference. */
typedef struct { double a, b; Py_ssize_t idx; } Span;

static int cmp_spans(const void *x, const void *y) {
    const Span *p = x, *q = y; /* (start, end) as tuples compare, then place: a stable sort */
    if (p->a < q->a) return -1;
    if (p->a > q->a) return 1;
    if (p->b < q->b) return -1;
    if (p->b > q->b) return 1;
    return p->idx < q->idx ? -1 : p->idx > q->idx;
}

/* The spans of a flat float64 buffer, those whose mask byte is set (all without a mask), read
 * into a new array (*n of them). NULL with an error set for a bad size or no memory; NULL with
 * none when a span holds a NaN (the caller runs the reference). */
static Span *read_flat(const Py_buffer *fv, const Py_buffer *mv, Py_ssize_t *n) {
    Py_ssize_t m = fv->len / 16;
    if (fv->len % 16 || (mv && mv->len != m)) {
        PyErr_SetString(PyExc_ValueError, "spans: a flat column of (start, end) pairs, and a mask byte a span");
        return NULL;
    }
    Span *s = malloc(sizeof(Span) * (m ? m : 1));
    if (!s) { PyErr_NoMemory(); return NULL; }
    const double *f = fv->buf;
    const unsigned char *mask = mv ? mv->buf : NULL;
    Py_ssize_t k = 0;
    for (Py_ssize_t j = 0; j < m; j++) {
        if (mask && !mask[j]) continue;
        double a = f[2 * j], b = f[2 * j + 1];
        if (a != a || b != b) { free(s); return NULL; }
        s[k].a = a;
        s[k].b = b;
        s[k].idx = k;
        k++;
    }
    *n = k;
    return s;
}

/* Sorts s[0:n] and merges it in place as analyses._merge_ref does (touching spans join; a span
 * ending before the last one's end leaves it): the number of merged spans, in s[0:m]. */
static Py_ssize_t merge_spans(Span *s, Py_ssize_t n) {
    Py_ssize_t k = 1;
    while (k < n && cmp_spans(&s[k - 1], &s[k]) < 0) k++;
    if (k < n) qsort(s, n, sizeof(Span), cmp_spans); /* the GPU's spans come sorted, mostly */
    Py_ssize_t m = 0;
    for (Py_ssize_t j = 0; j < n; j++) {
        if (m && s[j].a <= s[m - 1].b) {
            if (s[j].b > s[m - 1].b) s[m - 1].b = s[j].b;
        } else {
            s[m].a = s[j].a;
            s[m].b = s[j].b;
            m++;
        }
    }
    return m;
}

static PyObject *flat_bytes(const Span *s, Py_ssize_t m) {
    PyObject *out = new_column('d', 2 * m);
    if (!out) return NULL;
    double *f = (double *)col_data(out);
    for (Py_ssize_t j = 0; j < m; j++) {
        f[2 * j] = s[j].a;
        f[2 * j + 1] = s[j].b;
    }
    return out;
}

/* One float64 column read off a list of events: each one's (start, end), start and end
 * alternating (``with_start``), or each one's duration. */
static PyObject *event_times(PyObject *args, int with_start) {
    PyObject *list;
    if (!PyArg_ParseTuple(args, "O!", &PyList_Type, &list)) return NULL;
    Py_ssize_t n = PyList_GET_SIZE(list), w = with_start ? 2 : 1;
    PyObject *out = new_column('d', n * w);
    if (!out) return NULL;
    double *f = (double *)col_data(out);
    for (Py_ssize_t j = 0; j < n; j++) {
        Ev *e = ev_at(list, j);
        if (!e) { Py_DECREF(out); return NULL; }
        if (with_start) {
            f[2 * j] = e->ts;
            f[2 * j + 1] = e->ts + e->dur;
        } else {
            f[j] = e->dur;
        }
    }
    return out;
}

/* spans(events) -> float64 column: each event's (start, end), start and end alternating (the
 * model's GPU spans). */
static PyObject *spans(PyObject *mod, PyObject *args) { return event_times(args, 1); }

/* durations(events) -> each event's duration, float64 column (analyses.analyze's GPU time: its
 * total and the kernel classes' sums). */
static PyObject *durations(PyObject *mod, PyObject *args) { return event_times(args, 0); }

/* merge(flat, mask or None) -> the union of the spans (those with their mask byte set) as flat
 * float64 column, sorted; None (see above). */
static PyObject *merge(PyObject *mod, PyObject *args) {
    Py_buffer fv, mv = {0};
    PyObject *mobj;
    if (!PyArg_ParseTuple(args, "y*O", &fv, &mobj)) return NULL;
    if (mobj != Py_None && PyObject_GetBuffer(mobj, &mv, PyBUF_SIMPLE) < 0) { PyBuffer_Release(&fv); return NULL; }
    Py_ssize_t n;
    Span *s = read_flat(&fv, mobj != Py_None ? &mv : NULL, &n);
    PyObject *out = s ? flat_bytes(s, merge_spans(s, n)) : NULL;
    if (!s && !PyErr_Occurred()) { out = Py_None; Py_INCREF(out); }
    free(s);
    PyBuffer_Release(&fv);
    if (mobj != Py_None) PyBuffer_Release(&mv);
    return out;
}

/* merge_groups(flat, groups int32, mask bytes, n) -> n flat float64 column: per group g in [0, n)
 * the union of the spans j with mask[j] set and groups[j] == g (step_gpu's per-step kernels and
 * copies); None (see above). */
static PyObject *merge_groups(PyObject *mod, PyObject *args) {
    PyObject *res = NULL;
    Py_buffer fv, gv, mv;
    Py_ssize_t ng;
    if (!PyArg_ParseTuple(args, "y*y*y*n", &fv, &gv, &mv, &ng)) return NULL;
    Py_ssize_t n = fv.len / 16;
    Py_ssize_t *off = NULL;
    Span *s = NULL;
    if (fv.len % 16 || gv.len / 4 != n || mv.len != n || ng < 0) {
        PyErr_SetString(PyExc_ValueError, "merge_groups: sizes differ");
        goto done;
    }
    const double *f = fv.buf;
    const int32_t *group = gv.buf;
    const unsigned char *mask = mv.buf;
    off = zeroed(ng + 2, sizeof(Py_ssize_t));
    s = malloc(sizeof(Span) * (n ? n : 1));
    if (!off || !s) { PyErr_NoMemory(); goto done; }
    for (Py_ssize_t j = 0; j < n; j++)
        if (mask[j] && group[j] >= 0 && group[j] < ng) off[group[j] + 2]++;
    for (Py_ssize_t g = 0; g < ng; g++) off[g + 2] += off[g + 1];
    for (Py_ssize_t j = 0; j < n; j++) { /* each group's spans in order: off[g + 1] fills group g */
        if (!mask[j] || group[j] < 0 || group[j] >= ng) continue;
        Py_ssize_t at = off[group[j] + 1]++;
        double a = f[2 * j], b = f[2 * j + 1];
        if (a != a || b != b) { res = Py_None; Py_INCREF(res); goto done; }
        s[at].a = a;
        s[at].b = b;
        s[at].idx = j;
    }
    if (!(res = PyList_New(ng))) goto done;
    for (Py_ssize_t g = 0; g < ng; g++) {
        Py_ssize_t lo = off[g], hi = off[g + 1];
        PyObject *one = flat_bytes(s + lo, merge_spans(s + lo, hi - lo));
        if (!one) { Py_CLEAR(res); goto done; }
        PyList_SET_ITEM(res, g, one);
    }
done:
    free(off); free(s);
    PyBuffer_Release(&fv); PyBuffer_Release(&gv); PyBuffer_Release(&mv);
    return res;
}

/* span_index(flat) -> (starts, ends, prefix) float64 column: covered's index of merged spans, the
 * prefix their running sum of lengths from 0.0. */
static PyObject *span_index(PyObject *mod, PyObject *args) {
    Py_buffer fv;
    if (!PyArg_ParseTuple(args, "y*", &fv)) return NULL;
    Py_ssize_t n = fv.len / 16;
    if (fv.len % 16) { PyBuffer_Release(&fv); PyErr_SetString(PyExc_ValueError, "span_index: (start, end) pairs"); return NULL; }
    PyObject *sb = new_column('d', n), *eb = new_column('d', n);
    PyObject *pb = new_column('d', (n + 1));
    if (!sb || !eb || !pb) { Py_XDECREF(sb); Py_XDECREF(eb); Py_XDECREF(pb); PyBuffer_Release(&fv); return NULL; }
    const double *f = fv.buf;
    double *st = (double *)col_data(sb), *en = (double *)col_data(eb);
    double *pre = (double *)col_data(pb);
    pre[0] = 0.0;
    for (Py_ssize_t j = 0; j < n; j++) {
        st[j] = f[2 * j];
        en[j] = f[2 * j + 1];
        pre[j + 1] = pre[j] + (en[j] - st[j]);
    }
    PyBuffer_Release(&fv);
    return Py_BuildValue("(NNN)", sb, eb, pb);
}

/* covered: how much of [lo, hi] merged spans cover, from their index (passes.covered_in, the
 * same operations in the same order: the same double). */
static double covered_in(const double *st, const double *en, const double *pre, Py_ssize_t n, double lo, double hi) {
    if (hi <= lo || n == 0) return 0.0;
    Py_ssize_t a = 0, b = n;
    while (a < b) { /* bisect_right(ends, lo) */
        Py_ssize_t mid = (a + b) / 2;
        if (lo < en[mid]) b = mid; else a = mid + 1;
    }
    Py_ssize_t i = a;
    a = 0, b = n;
    while (a < b) { /* bisect_left(starts, hi) */
        Py_ssize_t mid = (a + b) / 2;
        if (st[mid] < hi) a = mid + 1; else b = mid;
    }
    Py_ssize_t j = a;
    if (j <= i) return 0.0;
    double total = pre[j] - pre[i];
    double x = lo - st[i], y = en[j - 1] - hi;
    total -= x > 0.0 ? x : 0.0;
    total -= y > 0.0 ? y : 0.0;
    return total;
}

/* idle_waits(candidates int32, gpu_flat float64, launcher int32, cpu_starts, cpu_durs float64,
 * starts, ends, prefix float64, share) -> (delays float64 column, events int32 column)
 * (passes._idle_waits_ref): of the candidate GPU events, those whose wait after their launch call
 * returned the merged spans (the index) covered under ``share`` of; each one's delay from its
 * launch call's start. Columns only: no event is read. */
static PyObject *idle_waits(PyObject *mod, PyObject *args) {
    Py_buffer cv, fv, lv, sv, dv, stv, env, prv;
    double share;
    if (!PyArg_ParseTuple(args, "y*y*y*y*y*y*y*y*d", &cv, &fv, &lv, &sv, &dv, &stv, &env, &prv, &share)) return NULL;
    PyObject *res = NULL;
    Py_ssize_t nc = cv.len / 4, ng = fv.len / 16, nl = lv.len / 4, ncpu = sv.len / 8, ns = stv.len / 8, k = 0;
    double *d = malloc((nc ? nc : 1) * sizeof(double));
    int32_t *late = malloc((nc ? nc : 1) * sizeof(int32_t));
    if (!d || !late) { PyErr_NoMemory(); goto done; }
    if (dv.len / 8 != ncpu || env.len / 8 != ns || prv.len / 8 != ns + 1 || nl != ng) {
        PyErr_SetString(PyExc_ValueError, "idle_waits: sizes differ");
        goto done;
    }
    const int32_t *cand = cv.buf, *launcher = lv.buf;
    const double *flat = fv.buf, *cs = sv.buf, *cd = dv.buf, *st = stv.buf, *en = env.buf, *pre = prv.buf;
    for (Py_ssize_t q = 0; q < nc; q++) {
        int32_t g = cand[q];
        if (g < 0 || g >= ng || launcher[g] < 0 || launcher[g] >= ncpu) {
            PyErr_SetString(PyExc_IndexError, "idle_waits: an event or its launch call out of range");
            goto done;
        }
        double ts = flat[2 * g], call_ts = cs[launcher[g]];
        double wait_from = call_ts + cd[launcher[g]];
        if (covered_in(st, en, pre, ns, wait_from, ts) < share * (ts - wait_from)) {
            d[k] = ts - call_ts;
            late[k++] = g;
        }
    }
    res = Py_BuildValue("(NN)", col_copy('d', d, k), col_copy('i', late, k));
done:
    free(d); free(late);
    PyBuffer_Release(&cv); PyBuffer_Release(&fv); PyBuffer_Release(&lv); PyBuffer_Release(&sv);
    PyBuffer_Release(&dv); PyBuffer_Release(&stv); PyBuffer_Release(&env); PyBuffer_Release(&prv);
    return res;
}

/* gpu_keys(gpu, launcher int32, above int32, cpu) -> (keys, codes int32 column): per GPU event the
 * key it is classified by, (name, category, the name of the op above its launch call or None),
 * as a number into the distinct keys in order of first appearance (analyses.gpu_classes). */
static PyObject *gpu_keys(PyObject *mod, PyObject *args) {
    PyObject *gpu, *cpu, *keys = NULL, *index = NULL, *cb = NULL, *res = NULL;
    IdCache seen = ID_CACHE(3); /* (name, category, op name) */
    Py_buffer lv, av;
    if (!PyArg_ParseTuple(args, "O!y*y*O!", &PyList_Type, &gpu, &lv, &av, &PyList_Type, &cpu)) return NULL;
    Py_ssize_t n = PyList_GET_SIZE(gpu), nc = PyList_GET_SIZE(cpu), na = av.len / 4;
    if (lv.len / 4 != n) { PyErr_SetString(PyExc_ValueError, "gpu_keys: sizes differ"); goto done; }
    const int32_t *launcher = lv.buf, *above = av.buf;
    if (!(keys = PyList_New(0)) || !(index = PyDict_New()) || !(cb = new_column('i', n)))
        goto done;
    int32_t *code = (int32_t *)col_data(cb);
    for (Py_ssize_t g = 0; g < n; g++) {
        Ev *ev = ev_at(gpu, g);
        if (!ev) goto done;
        int32_t li = launcher[g];
        int32_t op = li >= 0 && li < na ? above[li] : -1;
        PyObject *opname = Py_None;
        if (op >= 0) {
            if (op >= nc) { PyErr_SetString(PyExc_IndexError, "gpu_keys: op out of range"); goto done; }
            Ev *oe = ev_at(cpu, op);
            if (!oe) goto done;
            opname = oe->name;
        }
        uint64_t ck[KEY_W] = {(uintptr_t)ev->name, (uintptr_t)ev->cat, (uintptr_t)opname};
        PyObject *got = id_get(&seen, ck);
        if (!got) {
            PyObject *key = PyTuple_Pack(3, ev->name, ev->cat, opname);
            if (!key) goto done;
            got = PyDict_GetItemWithError(index, key);
            if (!got) {
                if (PyErr_Occurred()) { Py_DECREF(key); goto done; }
                PyObject *num = PyLong_FromSsize_t(PyList_GET_SIZE(keys));
                if (!num || PyDict_SetItem(index, key, num) < 0 || PyList_Append(keys, key) < 0) {
                    Py_XDECREF(num); Py_DECREF(key); goto done;
                }
                got = num;
                Py_DECREF(num); /* the dict holds it */
            }
            Py_DECREF(key);
            if (id_put(&seen, ck, got) < 0) goto done;
        }
        code[g] = (int32_t)PyLong_AsLong(got);
    }
    res = Py_BuildValue("(OO)", keys, cb);
done:
    free(seen.s);
    Py_XDECREF(keys); Py_XDECREF(index); Py_XDECREF(cb);
    PyBuffer_Release(&lv); PyBuffer_Release(&av);
    return res;
}

/* marked(cpu, mask, prefix) -> int32 column: the events i with mask[i] set whose name starts with
 * prefix, in order (modules.ModuleIndex's ``nn.Module: `` markers among the python events). */
static PyObject *marked(PyObject *mod, PyObject *args) {
    PyObject *cpu, *prefix, *out = NULL;
    Py_buffer mv;
    if (!PyArg_ParseTuple(args, "O!y*U", &PyList_Type, &cpu, &mv, &prefix)) return NULL;
    Py_ssize_t n = PyList_GET_SIZE(cpu), cap = 64, k = 0;
    if (mv.len != n) { PyErr_SetString(PyExc_ValueError, "marked: sizes differ"); goto done; }
    const unsigned char *mask = mv.buf;
    int32_t *got = malloc(cap * sizeof(int32_t));
    if (!got) { PyErr_NoMemory(); goto done; }
    for (Py_ssize_t i = 0; i < n; i++) {
        if (!mask[i]) continue;
        Ev *e = ev_at(cpu, i);
        if (!e) break;
        Py_ssize_t hit = PyUnicode_Tailmatch(e->name, prefix, 0, PY_SSIZE_T_MAX, -1);
        if (hit < 0) break;
        if (!hit) continue;
        if (k == cap) {
            int32_t *more = realloc(got, 2 * cap * sizeof(int32_t));
            if (!more) { PyErr_NoMemory(); break; }
            got = more;
            cap *= 2;
        }
        got[k++] = (int32_t)i;
    }
    if (!PyErr_Occurred()) out = col_copy('i', got, k);
    free(got);
done:
    PyBuffer_Release(&mv);
    return out;
}

/* module_nodes(idx, frame_of, fwd_of, above, node_of, direct) -> (nodes int32, backward bytes):
 * per item the module node that cpu event idx[k] ran in (-1 for none, or for a negative idx): a
 * backward event (outside every user frame, with a forward op) by its forward op; its own node
 * where ``direct`` and it has one (a marker), else its nearest marker's (ModuleIndex.node_at);
 * and whether it was a backward event. */
static PyObject *module_nodes(PyObject *mod, PyObject *args) {
    Py_buffer iv, fv, wv, av, nv;
    int direct;
    if (!PyArg_ParseTuple(args, "y*y*y*y*y*p", &iv, &fv, &wv, &av, &nv, &direct)) return NULL;
    Py_ssize_t m = iv.len / 4, n = fv.len / 4;
    PyObject *ob = NULL, *bb = NULL, *res = NULL;
    if (wv.len / 4 != n || av.len / 4 != n || nv.len / 4 != n) {
        PyErr_SetString(PyExc_ValueError, "module_nodes: sizes differ");
        goto done;
    }
    if (!(ob = new_column('i', m)) || !(bb = PyBytes_FromStringAndSize(NULL, m))) goto done;
    const int32_t *idx = iv.buf, *frame_of = fv.buf, *fwd_of = wv.buf, *above = av.buf, *node_of = nv.buf;
    int32_t *o = (int32_t *)col_data(ob);
    char *back = PyBytes_AS_STRING(bb);
    for (Py_ssize_t k = 0; k < m; k++) {
        int32_t i = idx[k];
        o[k] = -1;
        back[k] = 0;
        if (i < 0 || i >= n) continue;
        if (frame_of[i] < 0 && fwd_of[i] >= 0) {
            back[k] = 1;
            if (fwd_of[i] >= n) continue;
            i = fwd_of[i];
        }
        if (direct && node_of[i] >= 0) { o[k] = node_of[i]; continue; }
        int32_t a = above[i];
        o[k] = a >= 0 && a < n ? node_of[a] : -1;
    }
    res = Py_BuildValue("(OO)", ob, bb);
done:
    Py_XDECREF(ob); Py_XDECREF(bb);
    PyBuffer_Release(&iv); PyBuffer_Release(&fv); PyBuffer_Release(&wv); PyBuffer_Release(&av); PyBuffer_Release(&nv);
    return res;
}

/* Rows (node, key) numbered in order of first appearance, found through one dict per node. */
typedef struct {
    PyObject **index; /* per node: key -> row number, made on first use */
    Py_ssize_t nodes, n;
    int32_t *node;
    PyObject **key, **cls; /* borrowed: the GPU events and the class list hold them */
    int64_t *count;
    double *sum;
} Rows;

static int rows_init(Rows *r, Py_ssize_t nodes, Py_ssize_t cap) {
    memset(r, 0, sizeof(Rows));
    r->nodes = nodes;
    cap = cap ? cap : 1;
    r->index = zeroed(nodes ? nodes : 1, sizeof(PyObject *));
    r->node = malloc(cap * sizeof(int32_t));
    r->key = malloc(cap * sizeof(PyObject *));
    r->cls = malloc(cap * sizeof(PyObject *));
    r->count = malloc(cap * sizeof(int64_t));
    r->sum = malloc(cap * sizeof(double));
    return r->index && r->node && r->key && r->cls && r->count && r->sum ? 0 : -1;
}

static void rows_free(Rows *r) {
    for (Py_ssize_t k = 0; r->index && k < r->nodes; k++) Py_XDECREF(r->index[k]);
    free(r->index); free(r->node); free(r->key); free(r->cls); free(r->count); free(r->sum);
}

/* The row of (node k, key), a new one (class cls, count 0, sum 0.0) at the end; -1 on error. */
static Py_ssize_t row_of(Rows *r, int32_t k, PyObject *key, PyObject *cls) {
    if (!r->index[k] && !(r->index[k] = PyDict_New())) return -1;
    PyObject *got = PyDict_GetItemWithError(r->index[k], key);
    if (got) return PyLong_AsSsize_t(got);
    if (PyErr_Occurred()) return -1;
    PyObject *num = PyLong_FromSsize_t(r->n);
    if (!num || PyDict_SetItem(r->index[k], key, num) < 0) { Py_XDECREF(num); return -1; }
    Py_DECREF(num);
    Py_ssize_t j = r->n++;
    r->node[j] = k; r->key[j] = key; r->cls[j] = cls; r->count[j] = 0; r->sum[j] = 0.0;
    return j;
}

/* Per node the list of its rows in order: (key, count, sum), or (key, class, count, sum). */
static PyObject *rows_lists(const Rows *r, int with_cls) {
    PyObject *out = PyList_New(r->nodes);
    for (Py_ssize_t k = 0; out && k < r->nodes; k++) {
        PyObject *one = PyList_New(0);
        if (!one) { Py_CLEAR(out); break; }
        PyList_SET_ITEM(out, k, one);
    }
    for (Py_ssize_t j = 0; out && j < r->n; j++) {
        PyObject *t = with_cls ? Py_BuildValue("(OOLd)", r->key[j], r->cls[j], (long long)r->count[j], r->sum[j])
                               : Py_BuildValue("(OLd)", r->key[j], (long long)r->count[j], r->sum[j]);
        if (!t || PyList_Append(PyList_GET_ITEM(out, r->node[j]), t) < 0) { Py_XDECREF(t); Py_CLEAR(out); break; }
        Py_DECREF(t);
    }
    return out;
}

/* module_gpu(gpu, classes, nodes int32, backward bytes, launcher int32, n) -> (forward, backward
 * float64 column, launches int32 column, by_class, by_name): build_tree's own GPU sums per module
 * node (passes._module_gpu_ref): each launched GPU event's time to its node (nodes[g], -1 for
 * none), forward or backward; the launch calls per node; and per node its kernel classes
 * [(class, kernels, time)] and its kernels [(name, class, count, time)] in order of first
 * appearance, times summed in event order. */
static PyObject *module_gpu(PyObject *mod, PyObject *args) {
    PyObject *gpu, *classes, *res = NULL;
    Py_buffer nv, bv, lv;
    Py_ssize_t nn;
    if (!PyArg_ParseTuple(args, "O!O!y*y*y*n", &PyList_Type, &gpu, &PyList_Type, &classes, &nv, &bv, &lv, &nn))
        return NULL;
    Py_ssize_t n = PyList_GET_SIZE(gpu);
    int32_t maxl = -1;
    Rows rc = {0}, rn = {0};
    PyObject *fb = NULL, *bb = NULL, *lb = NULL, *lc = NULL, *ln = NULL;
    unsigned char *seen = NULL;
    if (PyList_GET_SIZE(classes) != n || nv.len / 4 != n || bv.len != n || lv.len / 4 != n || nn < 0) {
        PyErr_SetString(PyExc_ValueError, "module_gpu: sizes differ");
        goto done;
    }
    const int32_t *node = nv.buf, *launcher = lv.buf;
    const char *back = bv.buf;
    for (Py_ssize_t g = 0; g < n; g++) if (launcher[g] > maxl) maxl = launcher[g];
    int ok_c = rows_init(&rc, nn, n), ok_n = rows_init(&rn, nn, n);
    fb = new_column('d', nn);
    bb = new_column('d', nn);
    lb = new_column('i', nn);
    seen = zeroed((size_t)maxl + 2, 1);
    if (ok_c < 0 || ok_n < 0 || !fb || !bb || !lb || !seen) { if (!PyErr_Occurred()) PyErr_NoMemory(); goto done; }
    double *fwd = (double *)col_data(fb), *bwd = (double *)col_data(bb);
    int32_t *launches = (int32_t *)col_data(lb);
    for (Py_ssize_t k = 0; k < nn; k++) { fwd[k] = 0.0; bwd[k] = 0.0; launches[k] = 0; }
    int32_t last_k = -1;
    PyObject *last_cls = NULL, *last_name = NULL;
    Py_ssize_t last_c = -1, last_n = -1;
    for (Py_ssize_t g = 0; g < n; g++) {
        int32_t k = node[g], li = launcher[g];
        if (li < 0 || k < 0 || k >= nn) continue;
        Ev *e = ev_at(gpu, g);
        PyObject *cls = PyList_GET_ITEM(classes, g);
        if (!e) goto done;
        double dur = e->dur;
        PyObject *name = e->name;
        if (back[g]) bwd[k] += dur; else fwd[k] += dur;
        if (!seen[li]) { seen[li] = 1; launches[k]++; }
        /* runs of one kernel in one node are common: the last rows again, without a lookup */
        Py_ssize_t c = k == last_k && cls == last_cls ? last_c : row_of(&rc, k, cls, cls);
        Py_ssize_t m = k == last_k && name == last_name ? last_n : row_of(&rn, k, name, cls);
        if (c < 0 || m < 0) goto done;
        rc.count[c]++; rc.sum[c] += dur;
        rn.count[m]++; rn.sum[m] += dur;
        last_k = k; last_cls = cls; last_name = name; last_c = c; last_n = m;
    }
    if ((lc = rows_lists(&rc, 0)) && (ln = rows_lists(&rn, 1))) res = Py_BuildValue("(OOOOO)", fb, bb, lb, lc, ln);
done:
    rows_free(&rc);
    rows_free(&rn);
    free(seen);
    Py_XDECREF(fb); Py_XDECREF(bb); Py_XDECREF(lb); Py_XDECREF(lc); Py_XDECREF(ln);
    PyBuffer_Release(&nv); PyBuffer_Release(&bv); PyBuffer_Release(&lv);
    return res;
}

/* survivors(rows int32, ts float64, nbytes int64, addr int64, step_starts, step_ends float64) ->
 * (rows, steps) int32 column: memory-growth's allocations that are never freed later (no free of
 * their block, by address, at or after them: passes._survivors_ref), inside a step but the last,
 * with the step each falls in. */
static PyObject *survivors(PyObject *mod, PyObject *args) {
    Py_buffer rv, tv, bv, av, sv, ev;
    if (!PyArg_ParseTuple(args, "y*y*y*y*y*y*", &rv, &tv, &bv, &av, &sv, &ev)) return NULL;
    Py_ssize_t nr = rv.len / 4, n = tv.len / 8, ns = sv.len / 8, cap = 16, k2 = 0;
    PyObject *res = NULL;
    int64_t *keys = NULL;
    double *last = NULL;
    int32_t *out_r = NULL, *out_s = NULL;
    unsigned char *used = NULL;
    if (bv.len / 8 != n || av.len / 8 != n || ev.len / 8 != ns) {
        PyErr_SetString(PyExc_ValueError, "survivors: sizes differ");
        goto done;
    }
    const int32_t *rows = rv.buf;
    const double *ts = tv.buf, *ss = sv.buf, *se = ev.buf;
    const int64_t *nbytes = bv.buf, *addr = av.buf;
    for (Py_ssize_t k = 0; k < nr; k++)
        if (rows[k] < 0 || rows[k] >= n) { PyErr_SetString(PyExc_IndexError, "survivors: row out of range"); goto done; }
    while (cap < 2 * nr) cap <<= 1;
    keys = malloc(cap * sizeof(int64_t));
    last = malloc(cap * sizeof(double));
    used = zeroed(cap, 1);
    out_r = malloc((nr ? nr : 1) * sizeof(int32_t));
    out_s = malloc((nr ? nr : 1) * sizeof(int32_t));
    if (!keys || !last || !used || !out_r || !out_s) { PyErr_NoMemory(); goto done; }
    /* each block's last free: rows are in time order, the last one written wins */
    for (Py_ssize_t k = 0; k < nr; k++) {
        int32_t r = rows[k];
        if (nbytes[r] >= 0 || !addr[r]) continue;
        size_t h = ((uint64_t)addr[r] * 0x9E3779B97F4A7C15ull) >> 32 & (cap - 1);
        while (used[h] && keys[h] != addr[r]) h = (h + 1) & (cap - 1);
        used[h] = 1;
        keys[h] = addr[r];
        last[h] = ts[r];
    }
    for (Py_ssize_t k = 0; k < nr; k++) {
        int32_t r = rows[k];
        double t = ts[r];
        if (nbytes[r] <= 0 || !addr[r]) continue;
        size_t h = ((uint64_t)addr[r] * 0x9E3779B97F4A7C15ull) >> 32 & (cap - 1);
        while (used[h] && keys[h] != addr[r]) h = (h + 1) & (cap - 1);
        double freed = used[h] ? last[h] : -1.0;
        if (freed > t) continue;
        Py_ssize_t s = bisect_right_d(ss, ns, t) - 1;
        if (s < 0 || t > se[s] || s == ns - 1) continue;
        out_r[k2] = r;
        out_s[k2++] = (int32_t)s;
    }
    res = Py_BuildValue("(NN)", col_copy('i', out_r, k2), col_copy('i', out_s, k2));
done:
    free(keys); free(last); free(used); free(out_r); free(out_s);
    PyBuffer_Release(&rv); PyBuffer_Release(&tv); PyBuffer_Release(&bv); PyBuffer_Release(&av);
    PyBuffer_Release(&sv); PyBuffer_Release(&ev);
    return res;
}

/* group_by(items, keys) -> list of lists: the items (a list) grouped by keys[item] (a list; equal
 * by value, as a dict's keys), the groups in order of first appearance (kernel-jitter's problems
 * by the launching op's input shapes). */
static PyObject *group_by(PyObject *mod, PyObject *args) {
    PyObject *items, *keys;
    if (!PyArg_ParseTuple(args, "O!O!", &PyList_Type, &items, &PyList_Type, &keys)) return NULL;
    PyObject *index = PyDict_New(), *out = PyList_New(0), *last_key = NULL, *last_group = NULL;
    if (!index || !out) goto fail;
    Py_ssize_t n = PyList_GET_SIZE(items), nk = PyList_GET_SIZE(keys);
    for (Py_ssize_t k = 0; k < n; k++) {
        PyObject *item = PyList_GET_ITEM(items, k);
        Py_ssize_t i = PyLong_AsSsize_t(item);
        if (i == -1 && PyErr_Occurred()) goto fail;
        if (i < 0) i += nk; /* as keys[i] reads a negative index */
        if (i < 0 || i >= nk) { PyErr_SetString(PyExc_IndexError, "group_by: item out of range"); goto fail; }
        PyObject *key = PyList_GET_ITEM(keys, i), *group;
        if (key == last_key) {
            group = last_group; /* one object: the same key (runs of one problem are common) */
        } else if (!(group = PyDict_GetItemWithError(index, key))) {
            if (PyErr_Occurred() || !(group = PyList_New(0))) goto fail;
            if (PyDict_SetItem(index, key, group) < 0 || PyList_Append(out, group) < 0) { Py_DECREF(group); goto fail; }
            Py_DECREF(group); /* the dict and the list hold it */
        }
        if (PyList_Append(group, item) < 0) goto fail;
        last_key = key;
        last_group = group;
    }
    Py_DECREF(index);
    return out;
fail:
    Py_XDECREF(index);
    Py_XDECREF(out);
    return NULL;
}

/* The holes in [lo, hi] that merged spans s[0:n] leave, as analyses.gaps finds them, onto out
 * (2 doubles each): their number. */
static Py_ssize_t holes(const Span *s, Py_ssize_t n, double lo, double hi, double *out) {
    Py_ssize_t m = 0;
    double cur = lo;
    for (Py_ssize_t j = 0; j < n; j++) {
        double a = s[j].a, b = s[j].b;
        if (b <= cur) continue;
        if (a >= hi) break;
        if (a > cur) { out[2 * m] = cur; out[2 * m + 1] = a; m++; }
        if (b > cur) cur = b; /* max(cur, b): cur where they compare equal or b is NaN */
    }
    if (cur < hi) { out[2 * m] = cur; out[2 * m + 1] = hi; m++; }
    return m;
}

/* gaps(flat, lo, hi) -> the holes in [lo, hi] that merged spans leave, as a list of (start,
 * end), or None (see above). */
static PyObject *gaps(PyObject *mod, PyObject *args) {
    Py_buffer fv;
    double lo, hi;
    Py_ssize_t n;
    if (!PyArg_ParseTuple(args, "y*dd", &fv, &lo, &hi)) return NULL;
    Span *s = read_flat(&fv, NULL, &n);
    PyBuffer_Release(&fv);
    if (!s) { if (PyErr_Occurred()) return NULL; Py_RETURN_NONE; }
    double *h = malloc(sizeof(double) * 2 * (n + 1));
    if (!h) { free(s); return PyErr_NoMemory(); }
    Py_ssize_t m = holes(s, n, lo, hi, h);
    PyObject *out = PyList_New(m);
    for (Py_ssize_t j = 0; out && j < m; j++) {
        PyObject *t = Py_BuildValue("(dd)", h[2 * j], h[2 * j + 1]);
        if (!t) { Py_CLEAR(out); break; }
        PyList_SET_ITEM(out, j, t);
    }
    free(s); free(h);
    return out;
}

/* long_gaps(merged, lo, hi, step_starts, step_ends, share) -> [(start, end, step)], or None (see
 * above): the holes (``gaps``) that start inside a step (model.step_at) and last ``share`` of it
 * or more (host_stages' candidates). */
static PyObject *long_gaps(PyObject *mod, PyObject *args) {
    PyObject *out = NULL;
    double lo, hi, share;
    Py_buffer fv, sv, ev;
    Py_ssize_t n;
    if (!PyArg_ParseTuple(args, "y*ddy*y*d", &fv, &lo, &hi, &sv, &ev, &share)) return NULL;
    Py_ssize_t ns = sv.len / 8;
    Span *s = NULL;
    double *h = NULL;
    if (ev.len / 8 != ns) { PyErr_SetString(PyExc_ValueError, "long_gaps: sizes differ"); goto done; }
    if (!(s = read_flat(&fv, NULL, &n))) { if (!PyErr_Occurred()) { out = Py_None; Py_INCREF(out); } goto done; }
    if (!(h = malloc(sizeof(double) * 2 * (n + 1)))) { PyErr_NoMemory(); goto done; }
    Py_ssize_t m = holes(s, n, lo, hi, h);
    const double *ss = sv.buf, *se = ev.buf;
    if (!(out = PyList_New(0))) goto done;
    for (Py_ssize_t j = 0; j < m; j++) {
        double x = h[2 * j], y = h[2 * j + 1];
        Py_ssize_t k = bisect_right_d(ss, ns, x) - 1;
        if (k < 0 || !(x <= se[k]) || !(y - x >= share * (se[k] - ss[k]))) continue;
        PyObject *t = Py_BuildValue("(ddn)", x, y, k);
        if (!t || PyList_Append(out, t) < 0) { Py_XDECREF(t); Py_CLEAR(out); goto done; }
        Py_DECREF(t);
    }
done:
    free(s); free(h);
    PyBuffer_Release(&fv); PyBuffer_Release(&sv); PyBuffer_Release(&ev);
    return out;
}

/* An int64 key's slot in an open-addressing table of cap (a power of two) slots. */
static size_t key_slot(const int64_t *keys, const unsigned char *used, size_t cap, int64_t key) {
    size_t h = ((uint64_t)key * 0x9E3779B97F4A7C15ull) >> 32 & (cap - 1);
    while (used[h] && keys[h] != key) h = (h + 1) & (cap - 1);
    return h;
}

/* loop_calls(launched, frames_above, frame_of, ops, runs, least) -> list of lists: launch-storm's
 * calls of one kernel's launches from one line in one step (x: (duration, launch duration,
 * launch call)): per call of the innermost Python frame (``ops``: the iteration of each launch
 * call) and, when the line calls into library code, per call of the user's frame (``runs``),
 * those with ``least`` launches or more from ``least`` iterations or more, in order of first
 * launch (passes._loop_calls_ref). */
static PyObject *loop_calls(PyObject *mod, PyObject *args) {
    PyObject *launched, *out = NULL;
    Py_buffer av, fv, ov, rv;
    Py_ssize_t least;
    if (!PyArg_ParseTuple(args, "O!y*y*y*y*n", &PyList_Type, &launched, &av, &fv, &ov, &rv, &least)) return NULL;
    Py_ssize_t n = PyList_GET_SIZE(launched), nc = av.len / 4, nb = 0;
    size_t cap = 16;
    while (cap < 4 * (size_t)n) cap <<= 1;
    int64_t *keys = malloc(cap * sizeof(int64_t)), *seen_k = malloc(cap * sizeof(int64_t));
    int32_t *slot_b = malloc(cap * sizeof(int32_t));
    unsigned char *used = zeroed(cap, 1), *seen_u = zeroed(cap, 1);
    int32_t *li = malloc((n ? n : 1) * sizeof(int32_t)), *item_b = malloc((2 * n + 1) * sizeof(int32_t));
    Py_ssize_t *off = zeroed(2 * n + 2, sizeof(Py_ssize_t)), *fill = NULL;
    int32_t *members = malloc((2 * n + 1) * sizeof(int32_t)), *touched = malloc((n ? n : 1) * sizeof(int32_t));
    if (fv.len / 4 != nc || ov.len / 4 != nc || rv.len / 4 != nc) {
        PyErr_SetString(PyExc_ValueError, "loop_calls: sizes differ");
        goto done;
    }
    if (!keys || !seen_k || !slot_b || !used || !seen_u || !li || !item_b || !off || !members || !touched) { PyErr_NoMemory(); goto done; }
    const int32_t *above = av.buf, *frame_of = fv.buf, *its[2] = {ov.buf, rv.buf};
    Py_ssize_t ni = 0; /* (item, bucket) pairs, in order: item k's ops bucket, then its runs one */
    int32_t *pair_item = malloc((2 * n + 1) * sizeof(int32_t));
    if (!pair_item) { PyErr_NoMemory(); goto done; }
    for (Py_ssize_t k = 0; k < n; k++) {
        PyObject *x = PyList_GET_ITEM(launched, k);
        if (!PyTuple_Check(x) || PyTuple_GET_SIZE(x) < 3) { PyErr_SetString(PyExc_TypeError, "loop_calls: not a run"); break; }
        long v = PyLong_AsLong(PyTuple_GET_ITEM(x, 2));
        if (v == -1 && PyErr_Occurred()) break;
        if (v < 0 || v >= nc) { PyErr_SetString(PyExc_IndexError, "loop_calls: launch call out of range"); break; }
        li[k] = (int32_t)v;
        int32_t inner = above[v], f = frame_of[v];
        int64_t ks[2] = {(int64_t)(uint32_t)inner, ((int64_t)1 << 32) | (uint32_t)f};
        for (int w = 0; w < (f != inner ? 2 : 1); w++) {
            size_t h = key_slot(keys, used, cap, ks[w]);
            if (!used[h]) { used[h] = 1; keys[h] = ks[w]; slot_b[h] = (int32_t)nb++; }
            pair_item[ni] = (int32_t)k;
            item_b[ni++] = slot_b[h] * 2 + w; /* the bucket, and which column counts its iterations */
        }
    }
    if (PyErr_Occurred()) { free(pair_item); goto done; }
    for (Py_ssize_t j = 0; j < ni; j++) off[item_b[j] / 2 + 1]++;
    for (Py_ssize_t b = 0; b < nb; b++) off[b + 1] += off[b];
    if (!(fill = malloc((nb + 1) * sizeof(Py_ssize_t)))) { free(pair_item); PyErr_NoMemory(); goto done; }
    memcpy(fill, off, (nb + 1) * sizeof(Py_ssize_t));
    unsigned char *how = zeroed(nb + 1, 1);
    if (!how) { free(pair_item); PyErr_NoMemory(); goto done; }
    for (Py_ssize_t j = 0; j < ni; j++) {
        int32_t b = item_b[j] / 2;
        how[b] = (unsigned char)(item_b[j] % 2);
        members[fill[b]++] = pair_item[j];
    }
    free(pair_item);
    if (!(out = PyList_New(0))) { free(how); goto done; }
    for (Py_ssize_t b = 0; b < nb; b++) {
        Py_ssize_t lo = off[b], hi = off[b + 1];
        if (hi - lo < least) continue;
        const int32_t *col = its[how[b]];
        Py_ssize_t distinct = 0; /* the iterations among its launches, until there are enough */
        for (Py_ssize_t j = lo; j < hi && distinct < least; j++) {
            int64_t it = col[li[members[j]]];
            size_t h = key_slot(seen_k, seen_u, cap, it);
            if (!seen_u[h]) { seen_u[h] = 1; seen_k[h] = it; touched[distinct++] = (int32_t)h; }
        }
        for (Py_ssize_t j = 0; j < distinct; j++) seen_u[touched[j]] = 0; /* empty for the next bucket */
        if (distinct < least) continue;
        PyObject *xs = PyList_New(hi - lo);
        if (!xs) { Py_CLEAR(out); break; }
        for (Py_ssize_t j = lo; j < hi; j++) {
            PyObject *x = PyList_GET_ITEM(launched, members[j]);
            Py_INCREF(x);
            PyList_SET_ITEM(xs, j - lo, x);
        }
        if (PyList_Append(out, xs) < 0) { Py_DECREF(xs); Py_CLEAR(out); break; }
        Py_DECREF(xs);
    }
    free(how);
done:
    free(keys); free(seen_k); free(slot_b); free(used); free(seen_u); free(li); free(item_b); free(off); free(fill);
    free(members); free(touched);
    PyBuffer_Release(&av); PyBuffer_Release(&fv); PyBuffer_Release(&ov); PyBuffer_Release(&rv);
    return out;
}

/* ---- statements: frames of the same shape (statements.py's memo per shape) ------------------ */

/* An event's input dims as the statements read them (``bytes(args.input_dims)``, b"" without
 * args): NULL for b"". */
static PyObject *dims_of(Ev *e) {
    PyObject *dims = e->flags & F_ARGS ? op_obj(e, F_DIMS) : NULL;
    if (!dims) return NULL;
    Py_ssize_t k = PyObject_Length(dims);
    if (k < 0) { PyErr_Clear(); return dims; }
    return k ? dims : NULL;
}

static inline uint64_t mix64(uint64_t h, uint64_t v) {
    h ^= v + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2);
    h *= 0xff51afd7ed558ccdULL;
    return h ^ (h >> 33);
}

/* frame_shapes(cpu, off, kids, frame_of, fids) -> (frames, place, shape, tok_off, toks, tokpos,
 * tokshape), int32 column (passes._frame_shapes_ref): the user frames in event order, each one's
 * place among them, its shape (frames with equal subtrees: every event's cat, name, parsed frame,
 * input dims and children, in order; numbered by first appearance), its statement tokens
 * (statements.frame_tokens) as one flat index, per event its position among its frame's tokens,
 * and per token the shape of its own subtree (numbered by first appearance among the tokens). The subtrees are
 * hash-consed bottom-up: an event's structure is its own fields and its children's structures, so
 * two events share one when those compare equal (one event and its children at a time, exact). */
static PyObject *frame_shapes(PyObject *mod, PyObject *args) {
    PyObject *cpu, *result = NULL;
    Py_buffer ov, kv, fv, iv;
    if (!PyArg_ParseTuple(args, "O!y*y*y*y*", &PyList_Type, &cpu, &ov, &kv, &fv, &iv)) return NULL;
    Py_ssize_t n = PyList_GET_SIZE(cpu), nk = kv.len / 4, nf = 0, nt = 0, ns = 0, cap = 16;
    int32_t *frames = NULL, *place = NULL, *shape = NULL, *toff = NULL, *toks = NULL, *tpos = NULL, *tshape = NULL;
    int32_t *stack = NULL, *pos = NULL, *sid = NULL, *rep = NULL, *chain = NULL, *head = NULL, *code = NULL, *tcode = NULL;
    uint64_t *shash = NULL;
    PyObject **scat = NULL, **sname = NULL, **sdims = NULL; /* each structure's own fields */
    PyThreadState *ts = NULL; /* released while the events are read (see "with the GIL released") */
    /* the two columns of an item an event are made here and filled in place: copied at the end they
     * held the GIL back from the rules a few ms at 1 GB, where the pass runs beside them */
    PyObject *place_col = NULL, *tpos_col = NULL;
    if (ov.len / 4 != n + 1 || fv.len / 4 != n || iv.len / 4 != n) {
        PyErr_SetString(PyExc_ValueError, "frame_shapes: sizes differ");
        goto done;
    }
    /* each event read is checked to be this module's (check_events would read every event once more) */
    const int32_t *off = ov.buf, *kids = kv.buf, *fof = fv.buf, *fid = iv.buf;
    place_col = new_column('i', n);
    tpos_col = new_column('i', n);
    if (!place_col || !tpos_col) goto done;
    place = (int32_t *)col_data(place_col);
    tpos = (int32_t *)col_data(tpos_col);
    ts = PyEval_SaveThread();
    for (Py_ssize_t i = 0; i < n; i++)
        if (off[i] < 0 || off[i] > off[i + 1] || off[i + 1] > nk) {
            GIL_BACK(ts);
            PyErr_SetString(PyExc_ValueError, "frame_shapes: bad offsets");
            goto done;
        }
    for (Py_ssize_t j = 0; j < nk; j++)
        if (kids[j] < 0 || kids[j] >= n) { GIL_BACK(ts); PyErr_SetString(PyExc_ValueError, "frame_shapes: bad child"); goto done; }
    Py_ssize_t m = n ? n : 1, inside = 0;
    frames = malloc(4 * m); toks = malloc(4 * m);
    stack = malloc(4 * (m + nk)); pos = malloc(4 * m); sid = malloc(4 * m); tshape = malloc(4 * m);
    if (!frames || !toks || !stack || !pos || !sid || !tshape) { GIL_BACK(ts); PyErr_NoMemory(); goto done; }
    for (Py_ssize_t i = 0; i < n; i++) {
        place[i] = tpos[i] = -1;
        pos[i] = -1; /* -1: not reached yet; else the next child to visit */
        sid[i] = -1; /* -1: no structure yet */
        if (fof[i] >= 0) inside++;
        if (fof[i] == i) { place[i] = (int32_t)nf; frames[nf++] = (int32_t)i; }
    }
    cap = 1024; /* grows with the distinct structures (few where steps repeat): a small table stays in cache */
    rep = malloc(4 * (inside ? inside : 1)); chain = malloc(4 * (inside ? inside : 1));
    shash = malloc(8 * (inside ? inside : 1)); head = malloc(4 * cap);
    scat = malloc(sizeof(PyObject *) * (inside ? inside : 1));
    sname = malloc(sizeof(PyObject *) * (inside ? inside : 1));
    sdims = malloc(sizeof(PyObject *) * (inside ? inside : 1));
    if (!rep || !chain || !shash || !head || !scat || !sname || !sdims) { GIL_BACK(ts); PyErr_NoMemory(); goto done; }
    memset(head, 0xff, 4 * cap);
    /* the structure of each event inside a user frame (all its descendants are), children first */
    for (Py_ssize_t r = 0; r < n; r++) {
        if (pos[r] >= 0 || fof[r] < 0) continue;
        Py_ssize_t sp = 0;
        stack[sp++] = (int32_t)r;
        pos[r] = 0;
        while (sp) {
            int32_t i = stack[sp - 1];
            int32_t k = off[i] + pos[i];
            if (k < off[i + 1]) {
                int32_t c = kids[k];
                pos[i]++;
                if (pos[c] < 0) {
                    if (sp >= n) { GIL_BACK(ts); PyErr_SetString(PyExc_ValueError, "frame_shapes: not a tree"); goto done; }
                    pos[c] = 0;
                    stack[sp++] = c;
                } else if (sid[c] < 0) { /* on the walk's stack: a cycle */
                    GIL_BACK(ts);
                    PyErr_SetString(PyExc_ValueError, "frame_shapes: not a tree");
                    goto done;
                }
                continue;
            }
            sp--;
            Ev *e = ev_released(cpu, i);
            if (!e) { GIL_BACK(ts); not_an_event(); goto done; }
            Py_hash_t hc = hash_released(e->cat, &ts), hn = hc == -1 ? -1 : hash_released(e->name, &ts);
            if (hn == -1) { GIL_BACK(ts); goto done; }
            PyObject *d = dims_released(e, &ts);
            Py_hash_t hd = 0;
            if (d && (hd = hash_released(d, &ts)) == -1) { GIL_BACK(ts); goto done; }
            Py_ssize_t nc = off[i + 1] - off[i];
            uint64_t h = mix64(mix64(mix64((uint64_t)hc, (uint64_t)hn), (uint64_t)(int64_t)fid[i]), (uint64_t)hd);
            h = mix64(h, (uint64_t)nc);
            for (int32_t q = off[i]; q < off[i + 1]; q++) h = mix64(h, (uint64_t)(uint32_t)sid[kids[q]]);
            size_t b = (size_t)(h & (cap - 1));
            int32_t got = -1;
            for (int32_t s = head[b]; s >= 0 && got < 0; s = chain[s]) {
                int32_t g = rep[s];
                if (shash[s] != h || off[g + 1] - off[g] != nc || fid[g] != fid[i]) continue;
                int eq = same_released(scat[s], e->cat, &ts);
                if (eq > 0) eq = same_released(sname[s], e->name, &ts);
                if (eq > 0 && sdims[s] != d) eq = !sdims[s] || !d ? 0 : equal_released(sdims[s], d, &ts);
                if (eq < 0) { GIL_BACK(ts); goto done; }
                if (!eq) continue;
                Py_ssize_t q = 0;
                while (q < nc && sid[kids[off[g] + q]] == sid[kids[off[i] + q]]) q++;
                if (q == nc) got = s;
            }
            if (got < 0) {
                if (ns >= inside) { GIL_BACK(ts); PyErr_SetString(PyExc_ValueError, "frame_shapes: not a tree"); goto done; }
                if (2 * (ns + 1) > cap) { /* rehash into twice the buckets */
                    int32_t *nh = malloc(4 * 2 * cap);
                    if (!nh) { GIL_BACK(ts); PyErr_NoMemory(); goto done; }
                    free(head);
                    head = nh;
                    cap *= 2;
                    memset(head, 0xff, 4 * cap);
                    for (Py_ssize_t q = 0; q < ns; q++) {
                        size_t qb = (size_t)(shash[q] & (cap - 1));
                        chain[q] = head[qb];
                        head[qb] = (int32_t)q;
                    }
                    b = (size_t)(h & (cap - 1));
                }
                got = (int32_t)ns++;
                rep[got] = i;
                shash[got] = h;
                scat[got] = e->cat;
                sname[got] = e->name;
                sdims[got] = d;
                chain[got] = head[b];
                head[b] = got;
            }
            sid[i] = got;
        }
    }
    /* the statement tokens of each frame, in frame_tokens' order */
    toff = malloc(4 * (nf + 1));
    shape = malloc(4 * (nf ? nf : 1));
    code = malloc(4 * (ns ? ns : 1));
    tcode = malloc(4 * (ns ? ns : 1));
    if (!toff || !shape || !code || !tcode) { GIL_BACK(ts); PyErr_NoMemory(); goto done; }
    for (Py_ssize_t s = 0; s < ns; s++) code[s] = tcode[s] = -1;
    Py_ssize_t nshape = 0, ntshape = 0;
    for (Py_ssize_t k = 0; k < nf; k++) {
        int32_t f = frames[k];
        if (code[sid[f]] < 0) code[sid[f]] = (int32_t)nshape++; /* shapes by first frame */
        shape[k] = code[sid[f]];
        toff[k] = (int32_t)nt;
        Py_ssize_t sp = 0;
        for (int32_t q = off[f + 1] - 1; q >= off[f]; q--) stack[sp++] = kids[q];
        int32_t at = 0;
        while (sp) {
            int32_t i = stack[--sp];
            if (tpos[i] >= 0 || nt >= n) { GIL_BACK(ts); PyErr_SetString(PyExc_ValueError, "frame_shapes: not a tree"); goto done; }
            tpos[i] = at++;
            if (sid[i] < 0) { GIL_BACK(ts); PyErr_SetString(PyExc_ValueError, "frame_shapes: not a tree"); goto done; }
            if (tcode[sid[i]] < 0) tcode[sid[i]] = (int32_t)ntshape++; /* token shapes by first token */
            tshape[nt] = tcode[sid[i]];
            toks[nt++] = i;
            Ev *e = ev_released(cpu, i);
            if (!e) { GIL_BACK(ts); not_an_event(); goto done; }
            int label = same_released(e->cat, S_user_annotation, &ts);
            if (label < 0) { GIL_BACK(ts); goto done; }
            if (label)
                for (int32_t q = off[i + 1] - 1; q >= off[i]; q--) stack[sp++] = kids[q];
        }
    }
    toff[nf] = (int32_t)nt;
    GIL_BACK(ts);
    result = Py_BuildValue("(NONNNON)", col_copy('i', frames, nf), place_col, col_copy('i', shape, nf),
                           col_copy('i', toff, nf + 1), col_copy('i', toks, nt), tpos_col,
                           col_copy('i', tshape, nt));
done:
    GIL_BACK(ts);
    Py_XDECREF(place_col); Py_XDECREF(tpos_col);
    free(frames); free(shape); free(toff); free(toks); free(tshape); free(tcode);
    free(stack); free(pos); free(sid); free(rep); free(chain); free(head); free(code); free(shash);
    free(scat); free(sname); free(sdims);
    PyBuffer_Release(&ov); PyBuffer_Release(&kv); PyBuffer_Release(&fv); PyBuffer_Release(&iv);
    return result;
}

/* line_key_ids(line_tokens, frame_of, place, tokpos, base) -> int32 column
 * (passes._line_key_ids_ref): per item of line_tokens (each event's, or some of them) the number of
 * its line key (or call group: Context._token_groups), from its frame's place in
 * ``base``: a statement token's events base + 1 + the token's position among its frame's tokens,
 * a frame's own line base; -1 without a line (NOKEY), -2 (or the frame's negative base) where the
 * key is asked event by event. */
static PyObject *line_key_ids(PyObject *mod, PyObject *args) {
    Py_buffer tv, fv, pv, qv, bv;
    if (!PyArg_ParseTuple(args, "y*y*y*y*y*", &tv, &fv, &pv, &qv, &bv)) return NULL;
    Py_ssize_t n = tv.len / 4, ne = fv.len / 4, nb = bv.len / 4; /* items, events, frames */
    PyObject *out = NULL;
    if (pv.len / 4 != ne || qv.len / 4 != ne) {
        PyErr_SetString(PyExc_ValueError, "line_key_ids: sizes differ");
        goto done;
    }
    out = new_column('i', n);
    if (!out) goto done;
    const int32_t *lt = tv.buf, *fof = fv.buf, *place = pv.buf, *tokpos = qv.buf, *base = bv.buf;
    int32_t *o = (int32_t *)col_data(out);
    for (Py_ssize_t i = 0; i < n; i++) {
        int32_t c = lt[i], id = -2;
        if (c == NOKEY) id = -1;
        else {
            int32_t f = c >= 0 ? (c < ne ? fof[c] : -1) : -(c + 1);
            int32_t k = f >= 0 && f < ne ? place[f] : -1;
            int32_t b = k >= 0 && k < nb ? base[k] : -2;
            if (b < 0) id = b;
            else if (c < 0) id = b;
            else if (tokpos[c] >= 0) id = b + 1 + tokpos[c];
        }
        o[i] = id;
    }
done:
    PyBuffer_Release(&tv); PyBuffer_Release(&fv); PyBuffer_Release(&pv); PyBuffer_Release(&qv);
    PyBuffer_Release(&bv);
    return out;
}

/* ------------------------------------------------------------------ medians by selection
 * The k-th smallest of n doubles in place (a[k] it, a[..k] no larger, a[k+1..] no smaller):
 * quickselect on a median-of-three pivot, O(n) expected; past 2 log2 n + 8 rounds (an input made
 * to defeat the pivots) the rest is sorted, so O(n log n) at worst. NaN-free input only. */
static int cmp_double(const void *x, const void *y) {
    double a = *(const double *)x, b = *(const double *)y;
    return (a > b) - (a < b);
}

static void select_kth(double *a, Py_ssize_t n, Py_ssize_t k) {
    Py_ssize_t lo = 0, hi = n - 1;
    int rounds = 8;
    for (Py_ssize_t m = n; m > 1; m >>= 1) rounds += 2;
    while (hi > lo) {
        if (rounds-- == 0) {
            qsort(a + lo, (size_t)(hi - lo + 1), sizeof(double), cmp_double);
            return;
        }
        Py_ssize_t mid = lo + (hi - lo) / 2;
        double x = a[lo], y = a[mid], z = a[hi];
        double pivot = x < y ? (y < z ? y : (x < z ? z : x)) : (x < z ? x : (y < z ? z : y));
        Py_ssize_t i = lo, j = hi;
        while (i <= j) { /* Hoare: a[lo..j] <= pivot <= a[i..hi] */
            while (a[i] < pivot) i++;
            while (a[j] > pivot) j--;
            if (i <= j) {
                double t = a[i]; a[i] = a[j]; a[j] = t;
                i++; j--;
            }
        }
        if (k <= j) hi = j;
        else if (k >= i) lo = i;
        else return; /* between the two parts: equal to the pivot */
    }
}

/* The median of n doubles as rules.util.median gives it (the mean of the middle two of an even
 * count); 1 when it is known, 0 when the reference must decide: a NaN (sorted() orders none), or a
 * middle value of zero (the sort keeps 0.0 and -0.0 in their order, a selection need not, and the
 * report would print the sign). */
static int median_of(double *a, Py_ssize_t n, double *out) {
    if (n == 0) { *out = 0.0; return 1; }
    for (Py_ssize_t j = 0; j < n; j++)
        if (a[j] != a[j]) return 0;
    Py_ssize_t k = n / 2;
    select_kth(a, n, k);
    double hi = a[k];
    if (hi == 0.0) return 0;
    if (n % 2) { *out = hi; return 1; }
    double lo = a[0];
    for (Py_ssize_t j = 1; j < k; j++)
        if (a[j] > lo) lo = a[j];
    if (lo == 0.0) return 0;
    *out = (lo + hi) / 2;
    return 1;
}

/* run_medians(runs) -> (median of the runs' first items, of their second), or None where the
 * reference must decide (an item not a float, a NaN, a zero in the middle): launch-storm's kernel
 * and launch-call medians (passes._run_medians_ref) by selection, not two sorts of every run. */
static PyObject *run_medians(PyObject *mod, PyObject *args) {
    PyObject *runs;
    if (!PyArg_ParseTuple(args, "O!", &PyList_Type, &runs)) return NULL;
    Py_ssize_t n = PyList_GET_SIZE(runs);
    double *a = malloc(sizeof(double) * (n ? n : 1)), *b = malloc(sizeof(double) * (n ? n : 1));
    if (!a || !b) { free(a); free(b); return PyErr_NoMemory(); }
    PyObject *res = NULL;
    int known = 1;
    for (Py_ssize_t j = 0; j < n && known; j++) {
        PyObject *x = PyList_GET_ITEM(runs, j);
        if (!PyTuple_Check(x) || PyTuple_GET_SIZE(x) < 2 || !PyFloat_CheckExact(PyTuple_GET_ITEM(x, 0)) ||
            !PyFloat_CheckExact(PyTuple_GET_ITEM(x, 1)))
            known = 0;
        else {
            a[j] = PyFloat_AS_DOUBLE(PyTuple_GET_ITEM(x, 0));
            b[j] = PyFloat_AS_DOUBLE(PyTuple_GET_ITEM(x, 1));
        }
    }
    double ma, mb;
    if (known && median_of(a, n, &ma) && median_of(b, n, &mb)) res = Py_BuildValue("(dd)", ma, mb);
    else { res = Py_None; Py_INCREF(res); }
    free(a);
    free(b);
    return res;
}

PyMethodDef PASS_METHODS[] = {
    {"array_columns", array_columns, METH_VARARGS, "array_columns([on]) -> whether the passes' columns are arrays"},
    {"line_key_ids", line_key_ids, METH_VARARGS, "line_key_ids(line_tokens, frame_of, place, tokpos, base) -> int32 column"},
    {"frame_shapes", frame_shapes, METH_VARARGS, "frame_shapes(cpu, off, kids, frame_of, fids) -> (frames, place, shape, tok_off, toks, tokpos)"},
    {"scatter_sums", scatter_sums, METH_VARARGS, "scatter_sums(items, values, codes, off, targets, n) -> float64 column"},
    {"owner_sums", owner_sums, METH_VARARGS, "owner_sums(rows, owner, nbytes) -> (owners, sums) or None"},
    {"points_into", points_into, METH_VARARGS, "points_into(col, mask) -> int32 column: i where mask[col[i]]"},
    {"iterations", iterations, METH_VARARGS, "iterations(parent, token, frame_of, op_mask, py_mask, lis) -> (ops, runs)"},
    {"group_min", group_min, METH_VARARGS, "group_min(groups, idx, values, lo, hi, n) -> (mins, seen)"},
    {"gpu_under_all", gpu_under_all, METH_VARARGS, "gpu_under_all(off, kids, launch_off, launched, roots) -> int32 column"},
    {"positions", positions, METH_VARARGS, "positions(mask) -> int32 column: the positions of the set bytes"},
    {"replay_rows", replay_rows, METH_VARARGS, "replay_rows(idx, starts, durs, step_starts, step_ends, sync, blocking, off, launched, gpu, slack, queue_wait) -> the replay's rows"},
    {"take", take, METH_VARARGS, "take(col, idx, default) -> int32 column: col[idx[k]], default where idx[k] < 0"},
    {"codes", codes, METH_VARARGS, "codes(col) -> (first, code) int32 column: distinct values by first appearance"},
    {"step_of", step_of, METH_VARARGS, "step_of(idx, starts, step_starts, step_ends) -> int32 column"},
    {"launch_delays", launch_delays, METH_VARARGS, "launch_delays(gpu, launcher, cpu, min_delay) -> (delays, late)"},
    {"replay", replay, METH_VARARGS, "replay(rows..., steps..., lat, keep, drop, nonblock) -> the mean step"},
    {"line_gpu_sums", line_gpu_sums, METH_VARARGS, "line_gpu_sums(launcher, line_tokens, gpu) -> (keys, sums, first launch)"},
    {"launch_runs", launch_runs, METH_VARARGS, "launch_runs(gpu, launcher, frame_of, lines, steps, cpu, durs) -> dict"},
    {"fixed_points", fixed_points, METH_VARARGS, "fixed_points(int32 column) -> bytes: 1 where col[i] == i"},
    {"kernel_configs", kernel_configs, METH_VARARGS, "kernel_configs(...) -> (configs, dims) (see passes._kernel_configs_ref)"},
    {"launchers", launchers, METH_VARARGS, "launchers(cpu, launches, gpu) -> int32 column"},
    {"nearest", nearest, METH_VARARGS, "nearest(parent, mask) -> int32 column"},
    {"line_tokens", line_tokens, METH_VARARGS, "line_tokens(frame_of, fwd_of, token) -> int32 column"},
    {"ancestor_sums", ancestor_sums, METH_VARARGS, "ancestor_sums(parent, items, values) -> (events, totals)"},
    {"ancestors", ancestors, METH_VARARGS, "ancestors(parent, items) -> bytes: the items and every event above them"},
    {"subtree", subtree, METH_VARARGS, "subtree(off, kids, i) -> list of event indices"},
    {"cpu_total", cpu_total, METH_VARARGS, "cpu_total(cpu, parent, durs, python) -> float"},
    {"hot_lines", hot_lines, METH_VARARGS, "hot_lines(...) -> per hot line sums (see passes._hot_sums_ref)"},
    {"classify", classify, METH_VARARGS, "classify(events, cpu_cats, gpu_cats) -> the model's first pass"},
    {"frames", frames, METH_VARARGS, "frames(cpu, parent, parse_frame) -> the model's frame/token/name pass"},
    {"inherit", inherit, METH_VARARGS, "inherit(parent, frame_of, target) -> int32 column"},
    {"owners", owners, METH_VARARGS, "owners(cpu, parent, events, starts, bases, slack, cat) -> (owner, thread, threads)"},
    {"memory_columns", memory_columns, METH_VARARGS, "memory_columns(samples) -> column bytes"},
    {"by_start", by_start, METH_VARARGS, "by_start(events) -> the events sorted by start, stable"},
    {"nest", nest, METH_VARARGS, "nest(events, base, slack, cats) -> (parent int32, starts, durs float64, codes) bytes"},
    {"children", children, METH_VARARGS, "children(parent int32 buffer[, n]) -> (offsets, kids) int32 column"},
    /* the summary analyses and the module tree */
    {"spans", spans, METH_VARARGS, "spans(events) -> each event's (start, end), flat float64 column"},
    {"durations", durations, METH_VARARGS, "durations(events) -> each event's duration, float64 column"},
    {"merge", merge, METH_VARARGS, "merge(flat, mask) -> merged spans as flat float64 column, or None"},
    {"merge_groups", merge_groups, METH_VARARGS, "merge_groups(flat, groups, mask, n) -> n merged flat bytes, or None"},
    {"span_index", span_index, METH_VARARGS, "span_index(flat) -> (starts, ends, prefix) float64 column"},
    {"idle_waits", idle_waits, METH_VARARGS,
     "idle_waits(candidates, gpu_flat, launcher, cpu_starts, cpu_durs, starts, ends, prefix, share) -> "
     "(delays float64, events int32 column)"},
    {"gpu_keys", gpu_keys, METH_VARARGS, "gpu_keys(gpu, launcher, above, cpu) -> (keys, codes int32 column)"},
    {"marked", marked, METH_VARARGS, "marked(cpu, mask, prefix) -> int32 column"},
    {"module_nodes", module_nodes, METH_VARARGS, "module_nodes(idx, frame_of, fwd_of, above, node_of, direct) -> (nodes, backward)"},
    {"survivors", survivors, METH_VARARGS, "survivors(rows, ts, nbytes, addr, step_starts, step_ends) -> (rows, steps)"},
    {"group_by", group_by, METH_VARARGS, "group_by(items, keys) -> the items grouped by keys[item], in order"},
    {"gaps", gaps, METH_VARARGS, "gaps(flat, lo, hi) -> the holes, or None"},
    {"long_gaps", long_gaps, METH_VARARGS, "long_gaps(flat, lo, hi, step_starts, step_ends, share) -> [(start, end, step)], or None"},
    {"loop_calls", loop_calls, METH_VARARGS, "loop_calls(launched, frames_above, frame_of, ops, runs, least) -> list of runs"},
    {"run_medians", run_medians, METH_VARARGS, "run_medians(runs) -> (median of the first items, of the second), or None"},
    {"module_gpu", module_gpu, METH_VARARGS, "module_gpu(gpu, classes, nodes, backward, launcher, n) -> per node GPU sums"},
    {NULL},
};

/* The names the passes compare categories with, interned once (a phase is a byte: _scan.h). */
int passes_init(void) {
    PyObject **consts[] = {&S_fwdbwd, &S_gpu_ann, &S_memory, &S_thread_name,
                           &S_python_function, &S_user_annotation, &S_cpu_op, &S_user, &S_Memcpy, &S_Memset,
                           &S_gpu_memcpy, &S_gpu_memset, &S_kernel, &S_ProfilerStep};
    const char *texts[] = {"fwdbwd", "gpu_user_annotation", "[memory]", "thread_name",
                           "python_function", "user_annotation", "cpu_op", "user", "Memcpy", "Memset",
                           "gpu_memcpy", "gpu_memset", "kernel", "ProfilerStep#"};
    for (size_t k = 0; k < sizeof(texts) / sizeof(texts[0]); k++)
        if (!(*consts[k] = PyUnicode_InternFromString(texts[k]))) return -1;
    return check_array_layout();
}
