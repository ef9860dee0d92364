/* profd.server.engine._scan: the traceEvents array -> compact event objects, one block at a time.
 *
 * Why by hand: no JSON library decodes "an array of objects, keep these ten keys, intern the
 * strings, store numbers unboxed, drop the events nobody reads" while streaming. msgspec decodes
 * into structs that hold a Python object per field (~640 B per event on Kineto traces); this
 * scanner stores numbers as C doubles/int64, shares every name/category/shape through one intern
 * table, and skips the events the model never reads (ac2g flows, most instants, metadata) without
 * allocating them. It is resumable at event granularity, so the loader feeds it fixed-size blocks
 * and never holds the whole file.
 *
 * Two stages: a lexer reads an element into a record (numbers in place, strings as ids of its own
 * intern table: no Python object, so it can run without the GIL), and the scanner makes the
 * record's event (the objects, the event, the list) under the GIL. A big block is lexed by two
 * threads, the far part by a worker (below, "the worker"), whose records the scanner adopts only
 * where its own reading proves the worker began at an element.
 *
 * It accepts exactly the inputs msgspec's typed decode (loader.TraceDoc) accepts and gives the same
 * values. Anything it is unsure about (a string id, a float in an int field, an escaped key, bad
 * JSON, a truncated file) raises ValueError, and the loader falls back to msgspec, which then gives
 * the precise error or the correct (slower) result. So this file never decides what is valid.
 */
#include "_scan.h"
#include <stdlib.h>
#include <string.h>
#ifdef __SSE2__
#include <emmintrin.h> /* the string scan's sixteen-byte steps (x86-64 always has SSE2) */
#endif

/* Nesting, counted from the document's top (the object = 1, traceEvents = 2, an event = 3, its
 * args = 4): loader.MAX_NESTING, the one limit on every path. No shipped trace nests past 7;
 * deeper files are declined here, and the loader's byte-level rule (depth() below) refuses them. */
#define MAX_DEPTH 64
#define EVENT_DEPTH 3
#include <math.h>
#if defined(__GLIBC__)
#include <malloc.h> /* mallopt, malloc_trim: malloc_arenas, trim_malloc */
#endif

/* ------------------------------------------------------------------ intern table
 * Token bytes -> a small id, with no Python object: a Lexer (below) runs on a thread without the
 * GIL. The object of an id is made once, under the GIL, when an event first needs it (tok_obj). */
typedef uint32_t Tok; /* TOK_ABSENT, TOK_NULL, LONG_TOK | k (the k-th long token of the lexer's
                       * current event or run), or an interned id (FIRST_ID on) */
#define TOK_ABSENT 0u
#define TOK_NULL 1u
#define FIRST_ID 2u
#define LONG_TOK 0x80000000u

typedef struct {
    uint64_t hash;
    char *key; /* kind byte + token bytes: keys[id] */
    Py_ssize_t klen;
    Tok id; /* 0: an empty slot */
} Slot;

/* A token too long to intern: its bytes where they lie in the block (scanned while it is held). */
typedef struct {
    const char *s;
    Py_ssize_t n;
    char kind;
} Span;

typedef struct {
    Slot *slots;
    size_t cap, used;
    char **keys;        /* per id: kind byte + token bytes, malloc'd */
    Py_ssize_t *klens;  /* per id: the key's length */
    PyObject **objs;    /* per id: its object once made, or NULL (owned by a scanner's own table,
                         * borrowed from it in its worker's) */
    size_t ids, ids_cap; /* the next id; the per-id arrays' room */
    Span *longs;        /* the current event's (or worker run's) long tokens */
    size_t nlongs, longs_cap;
} Table;

/* A token longer than this is not interned: the table would keep a copy of its bytes (a 1 GB name
 * would cost the buffer + that copy + the str: 3x its size). No shipped trace has a name, shape
 * or id this long (the longest name, a templated kernel's, is 5 KB); one that repeats is then a
 * str per event, which the input's own size bounds. */
#define INTERN_MAX (64 << 10)

/* Eight bytes a step (names are long: python frames carry their file paths). */
static uint64_t hash_bytes(char kind, const char *s, Py_ssize_t n) {
    uint64_t h = 0x9E3779B97F4A7C15ULL ^ (uint64_t)(uint8_t)kind ^ ((uint64_t)n << 8);
    const char *end = s + n;
    uint64_t w = 0;
    if (n >= 8) {
        for (; end - s > 8; s += 8) {
            memcpy(&w, s, 8);
            h = (h ^ w) * 0xff51afd7ed558ccdULL;
            h ^= h >> 32;
        }
        /* the last eight bytes, overlapping the words before: one load, not a byte loop */
        memcpy(&w, end - 8, 8);
    } else if (n >= 4) {
        uint32_t a, b;
        memcpy(&a, s, 4);
        memcpy(&b, end - 4, 4);
        w = (uint64_t)a | (uint64_t)b << 32;
    } else if (n) {
        w = (uint64_t)(uint8_t)s[0] | (uint64_t)(uint8_t)s[n / 2] << 8 | (uint64_t)(uint8_t)end[-1] << 16;
    }
    h = (h ^ w) * 0xc4ceb9fe1a85ec53ULL;
    h ^= h >> 29;
    return h ? h : 1;
}

/* Whether n bytes at a and b are equal, for the short tokens the intern table compares (most keys
 * and names are under 32 bytes): two overlapping word loads instead of a call into libc's memcmp
 * (3.6% of the scanner's time, measured with perf); never reads outside either span. */
static inline int same_bytes(const char *a, const char *b, Py_ssize_t n) {
    uint64_t x, y;
    if (n >= 8) {
        for (; n > 8; a += 8, b += 8, n -= 8) {
            memcpy(&x, a, 8);
            memcpy(&y, b, 8);
            if (x != y) return 0;
        }
        memcpy(&x, a + n - 8, 8);
        memcpy(&y, b + n - 8, 8);
        return x == y;
    }
    if (n >= 4) {
        uint32_t p, q, r, t;
        memcpy(&p, a, 4); memcpy(&q, b, 4); memcpy(&r, a + n - 4, 4); memcpy(&t, b + n - 4, 4);
        return p == q && r == t;
    }
    for (Py_ssize_t i = 0; i < n; i++)
        if (a[i] != b[i]) return 0;
    return 1;
}

/* ``owns``: the objects are the table's own (the scanner's), not borrowed (its worker's). */
static void table_free(Table *t, int owns) {
    for (size_t id = FIRST_ID; id < t->ids; id++) {
        free(t->keys[id]);
        if (owns) Py_XDECREF(t->objs[id]);
    }
    free(t->slots); free(t->keys); free(t->klens); free(t->objs); free(t->longs);
    memset(t, 0, sizeof *t);
}

static int table_grow(Table *t) {
    size_t ncap = t->cap ? t->cap * 2 : 1024;
    Slot *ns = zeroed(ncap, sizeof(Slot));
    if (!ns) return -1;
    for (size_t i = 0; i < t->cap; i++) {
        Slot *s = &t->slots[i];
        if (!s->id) continue;
        size_t j = s->hash & (ncap - 1);
        while (ns[j].id) j = (j + 1) & (ncap - 1);
        ns[j] = *s;
    }
    free(t->slots);
    t->slots = ns;
    t->cap = ncap;
    return 0;
}

static int table_more_ids(Table *t) {
    size_t cap = t->ids_cap ? 2 * t->ids_cap : 1024;
    char **k = realloc(t->keys, cap * sizeof *k);
    if (!k) return -1;
    t->keys = k;
    Py_ssize_t *l = realloc(t->klens, cap * sizeof *l);
    if (!l) return -1;
    t->klens = l;
    PyObject **o = realloc(t->objs, cap * sizeof *o);
    if (!o) return -1;
    memset(o + t->ids_cap, 0, (cap - t->ids_cap) * sizeof *o);
    t->objs = o;
    t->ids_cap = cap;
    if (!t->ids) t->ids = FIRST_ID;
    return 0;
}

/* The token (kind, s[0:n]) as an id of t, into *out: 0, or -1 out of memory. No Python. */
static int table_tok(Table *t, char kind, const char *s, Py_ssize_t n, Tok *out) {
    if (n > INTERN_MAX) {
        if (t->nlongs == t->longs_cap) {
            size_t cap = t->longs_cap ? 2 * t->longs_cap : 16;
            Span *l = realloc(t->longs, cap * sizeof *l);
            if (!l) return -1;
            t->longs = l;
            t->longs_cap = cap;
        }
        t->longs[t->nlongs] = (Span){s, n, kind};
        *out = LONG_TOK | (Tok)t->nlongs++;
        return 0;
    }
    if ((t->used + 1) * 2 > t->cap && table_grow(t) < 0) return -1;
    uint64_t h = hash_bytes(kind, s, n);
    size_t j = h & (t->cap - 1);
    for (;;) {
        Slot *sl = &t->slots[j];
        if (!sl->id) break;
        if (sl->hash == h && sl->klen == n + 1 && sl->key[0] == kind && same_bytes(sl->key + 1, s, n)) {
            *out = sl->id;
            return 0;
        }
        j = (j + 1) & (t->cap - 1);
    }
    if (t->ids >= t->ids_cap && table_more_ids(t) < 0) return -1;
    char *k = malloc(n + 1);
    if (!k) return -1;
    k[0] = kind;
    memcpy(k + 1, s, n);
    Tok id = (Tok)t->ids++;
    t->keys[id] = k;
    t->klens[id] = n + 1;
    t->slots[j] = (Slot){h, k, n + 1, id};
    t->used++;
    *out = id;
    return 0;
}

/* The last token one field read and its id: the same value again (the phase, category, pid and
 * tid of the next event, often its name) is its id at the cost of one compare, not a hash and a
 * probe. ``key`` is the table's copy (kind byte + bytes), which lives as long as the table. */
typedef struct {
    const char *key;
    Py_ssize_t klen;
    Tok id; /* 0: none yet */
} Last;

static inline int table_tok_last(Table *t, Last *last, char kind, const char *s, Py_ssize_t n, Tok *out) {
    if (last->id && last->klen == n + 1 && last->key[0] == kind && same_bytes(last->key + 1, s, n)) {
        *out = last->id;
        return 0;
    }
    if (table_tok(t, kind, s, n, out) < 0) return -1;
    if (!(*out & LONG_TOK)) {
        last->key = t->keys[*out];
        last->klen = n + 1;
        last->id = *out;
    }
    return 0;
}

/* ------------------------------------------------------------------ where the events live
 * The scanner makes an event per trace event (4 million in a 1 GB trace, ~400 MB): from the
 * allocator, each new 4 KB page of them faulted and zeroed by the kernel on the scanning thread
 * (~20% of its time at 1 GB, measured with perf). Here events come from 1 MiB slabs that a helper
 * thread maps and touches ahead of the scanner (one ready at a time, only while a scanner is at
 * work), so the faults happen on the second core. A slab's header counts its live events; the
 * last one freed unmaps it (memory goes back as with pymalloc's arenas). Linux only (mmap,
 * pthreads); elsewhere events use the object allocator as before. */
#if defined(__linux__)
#include <pthread.h>
#include <sys/mman.h>
/* 1 MiB: the slabs the helper has touched and the scanner not filled yet (the one ready, the two
 * streams' current ones) are the scan's transient, let go when it ends: 2 MiB slabs peaked the 51
 * MB tiling's load 1.5 MiB higher, at no measured speed (255 MB and 1 GB loads, alternating). */
#define SLAB_BYTES ((size_t)1 << 20)
#define SLAB_HEAD 64 /* the header's room: events start 64-byte aligned */
#define POOL_N 1

typedef struct {
    Py_ssize_t live; /* events allocated from it and not freed */
} Slab;

static Slab *slab_cur[2];     /* per stream, the slab events are allocated from (NULL: none yet) */
static char *slab_bump[2], *slab_end[2];
static pthread_mutex_t pool_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t pool_cv = PTHREAD_COND_INITIALIZER;
static Slab *pool[POOL_N];    /* mapped and touched, waiting for the scanner */
static int pool_n, pool_want, pool_started;
static Py_ssize_t pool_users; /* scanners at work (under the GIL) */

static inline Slab *slab_of(const void *p) { return (Slab *)((uintptr_t)p & ~(uintptr_t)(SLAB_BYTES - 1)); }

/* A SLAB_BYTES-aligned mapping (so an event finds its slab by masking its address), or NULL. */
static Slab *slab_map(void) {
    char *p = mmap(NULL, 2 * SLAB_BYTES, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) return NULL;
    char *a = (char *)(((uintptr_t)p + SLAB_BYTES - 1) & ~(uintptr_t)(SLAB_BYTES - 1));
    if (a > p) munmap(p, (size_t)(a - p));
    if (a + SLAB_BYTES < p + 2 * SLAB_BYTES) munmap(a + SLAB_BYTES, (size_t)(p + 2 * SLAB_BYTES - (a + SLAB_BYTES)));
    return (Slab *)a;
}

static void *pool_run(void *arg) {
    (void)arg;
    pthread_mutex_lock(&pool_mu);
    for (;;) {
        while (pool_n >= pool_want) pthread_cond_wait(&pool_cv, &pool_mu);
        pthread_mutex_unlock(&pool_mu);
        Slab *s = slab_map();
        if (s)
            for (size_t o = 0; o < SLAB_BYTES; o += 4096) ((volatile char *)s)[o] = 0; /* the faults, here */
        pthread_mutex_lock(&pool_mu);
        if (s && pool_n < pool_want) pool[pool_n++] = s;
        else if (s) munmap(s, SLAB_BYTES);
        else pool_want = 0; /* out of memory: the scanner maps its own (and fails there, in Python) */
    }
    return NULL;
}

/* The pool across fork(): its mutex held while forking, so the child's copy of the pool is
 * consistent. The child has no helper thread: it starts over, with its copies of the ready slabs
 * let go and a new mutex and condition (the copy of the condition still counted the parent's
 * waiting helper, and the child's first scan hung on it). */
static void pool_prepare(void) { pthread_mutex_lock(&pool_mu); }
static void pool_parent(void) { pthread_mutex_unlock(&pool_mu); }
static void pool_child(void) {
    for (int k = 0; k < pool_n; k++) munmap(pool[k], SLAB_BYTES);
    pool_n = pool_want = pool_started = 0;
    pool_users = 0;
    pthread_mutex_init(&pool_mu, NULL);
    pthread_cond_init(&pool_cv, NULL);
}

/* A scanner starts (+1) or ends (-1) its work: the helper keeps slabs ready only meanwhile. */
static void pool_use(int d) {
    pool_users = pool_users + d > 0 ? pool_users + d : 0; /* a forked child may end a scan its parent began */
    Slab *drop[POOL_N];
    int nd = 0;
    pthread_mutex_lock(&pool_mu);
    pool_want = pool_users > 0 ? POOL_N : 0;
    if (pool_want && !pool_started) {
        pthread_t t;
        pthread_attr_t at;
        pthread_attr_init(&at);
        pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
        pthread_attr_setstacksize(&at, 64 << 10);
        pool_started = pthread_create(&t, &at, pool_run, NULL) == 0;
        pthread_attr_destroy(&at);
    }
    if (!pool_want)
        while (pool_n) drop[nd++] = pool[--pool_n];
    pthread_cond_signal(&pool_cv);
    pthread_mutex_unlock(&pool_mu);
    while (nd) munmap(drop[--nd], SLAB_BYTES);
    if (!pool_users) /* the touched, unused ends of the slabs in use: let go (zero pages if used later) */
        for (int k = 0; k < 2; k++) {
            char *from = slab_cur[k] ? (char *)(((uintptr_t)slab_bump[k] + 4095) & ~(uintptr_t)4095) : NULL;
            if (from && from < slab_end[k]) madvise(from, (size_t)(slab_end[k] - from), MADV_DONTNEED);
        }
}

static Slab *slab_take(void) {
    Slab *s = NULL;
    pthread_mutex_lock(&pool_mu);
    if (pool_n) s = pool[--pool_n];
    pthread_cond_signal(&pool_cv);
    pthread_mutex_unlock(&pool_mu);
    return s ? s : slab_map();
}

/* An event's memory (under the GIL), or NULL. Two streams of slabs: the complete events ('X',
 * which the model keeps) and the others (allocator samples, flows, metadata), which the model lets
 * go of once it has read them: apart, their slabs empty and are unmapped then (mixed, their holes
 * kept 17 MB of a 255 MB trace's analysis mapped, measured). */
static void *ev_malloc(size_t size, int stream) {
    size = (size + 7) & ~(size_t)7; /* 8-byte aligned: an event's widest field (a pointer, a double) */
    if (!slab_cur[stream] || slab_bump[stream] + size > slab_end[stream]) {
        Slab *s = slab_take();
        if (!s) return NULL;
        Slab *old = slab_cur[stream];
        s->live = 0;
        slab_cur[stream] = s;
        slab_bump[stream] = (char *)s + SLAB_HEAD;
        slab_end[stream] = (char *)s + SLAB_BYTES;
        if (old && old->live == 0) munmap(old, SLAB_BYTES);
    }
    void *p = slab_bump[stream];
    slab_bump[stream] += size;
    slab_cur[stream]->live++;
    return p;
}

static void ev_free(void *p) {
    Slab *s = slab_of(p);
    if (--s->live) return;
    for (int k = 0; k < 2; k++)
        if (s == slab_cur[k]) { /* empty and still filled: start it over, its pages back while no scan runs */
            char *used = (char *)(((uintptr_t)slab_bump[k] + 4095) & ~(uintptr_t)4095);
            if (!pool_users && used > (char *)s + 4096) madvise((char *)s + 4096, (size_t)(used - (char *)s - 4096), MADV_DONTNEED);
            slab_bump[k] = (char *)s + SLAB_HEAD;
            return;
        }
    munmap(s, SLAB_BYTES);
}

static void pool_init(void) { pthread_atfork(pool_prepare, pool_parent, pool_child); }
#else
static void *ev_malloc(size_t size, int stream) { (void)stream; return PyObject_Malloc(size); }
static void ev_free(void *p) { PyObject_Free(p); }
static void pool_use(int d) { (void)d; }
static void pool_init(void) {}
#endif

/* ------------------------------------------------------------------ the event type (layouts: _scan.h) */
static PyTypeObject ArgsType;

/* The object fields, in the order of their flags (PACKED). */
static const uint32_t OBJ_FLAGS[] = {F_DIMS, F_TYPES, F_GRID, F_BLOCK, F_ANAME, F_CALL_FROM};

static void ev_dealloc(Ev *e) {
    Py_XDECREF(e->name); Py_XDECREF(e->cat); Py_XDECREF(e->thread);
    for (int k = 0; k < 6; k++) Py_XDECREF(op_obj(e, OBJ_FLAGS[k]));
    Py_TYPE(e)->tp_free((PyObject *)e);
}

static PyObject *obj_or(PyObject *o, PyObject *dflt) {
    PyObject *r = o ? o : dflt;
    Py_INCREF(r);
    return r;
}

static PyObject *EMPTY_BYTES, *EMPTY_STR;

#define EV(self) ((Ev *)(self))
static PyObject *ev_ph(PyObject *s, void *c) {
    return EV(s)->ph ? PyUnicode_FromOrdinal(EV(s)->ph) : obj_or(NULL, EMPTY_STR); /* a cached str */
}
static PyObject *ev_name(PyObject *s, void *c) { return obj_or(EV(s)->name, EMPTY_STR); }
static PyObject *ev_cat(PyObject *s, void *c) { return obj_or(EV(s)->cat, EMPTY_STR); }
static PyObject *ev_pid(PyObject *s, void *c) { return obj_or(EV(s)->thread ? EV_PID(s) : NULL, Py_None); }
static PyObject *ev_tid(PyObject *s, void *c) { return obj_or(EV(s)->thread ? EV_TID(s) : NULL, Py_None); }
static PyObject *ev_ts(PyObject *s, void *c) { return PyFloat_FromDouble(EV(s)->ts); }
static PyObject *ev_dur(PyObject *s, void *c) { return PyFloat_FromDouble(EV(s)->dur); }
static PyObject *ev_id(PyObject *s, void *c) { return int_or_none(EV(s), F_ID, op_int(s, F_ID)); }
static PyObject *ev_none(PyObject *s, void *c) { Py_RETURN_NONE; }
static PyObject *ev_args(PyObject *s, void *c) {
    if (!(EV(s)->flags & F_ARGS)) Py_RETURN_NONE;
    ArgsView *a = PyObject_New(ArgsView, &ArgsType);
    if (!a) return NULL;
    Py_INCREF(s);
    a->ev = EV(s);
    return (PyObject *)a;
}

/* The one field a pass changes: classify gives an event the category of its role (the reference
 * pass sets it as it would on msgspec's events). */
static int ev_set_cat(PyObject *s, PyObject *v, void *c) {
    if (!v || !PyUnicode_Check(v)) {
        PyErr_SetString(PyExc_TypeError, "cat must be a str");
        return -1;
    }
    Py_INCREF(v);
    Py_SETREF(EV(s)->cat, v);
    return 0;
}

/* The bytes of an event with these flags: the prefix, a slot per op field it has (op) and the
 * allocator's five (mem). What new_event allocates and sys.getsizeof says. */
static size_t ev_bytes(uint32_t flags, int op, int mem) {
    return sizeof(EvBase) + (op ? 8 * (size_t)__builtin_popcount(flags & PACKED) : 0) +
           (mem ? 5 * sizeof(int64_t) : 0);
}

static PyObject *ev_sizeof(PyObject *s, PyObject *unused) {
    return PyLong_FromSize_t(ev_bytes(EV(s)->flags, HAS_OP(s), IS_FULL(s) || Py_TYPE(s) == &EvMemType));
}

static PyMethodDef ev_methods[] = {
    {"__sizeof__", ev_sizeof, METH_NOARGS, NULL},
    {NULL},
};

static PyGetSetDef ev_getset[] = {
    {"ph", ev_ph, NULL, NULL, NULL},
    {"name", ev_name, NULL, NULL, NULL},
    {"cat", ev_cat, ev_set_cat, NULL, NULL},
    {"pid", ev_pid, NULL, NULL, NULL},
    {"tid", ev_tid, NULL, NULL, NULL},
    {"ts", ev_ts, NULL, NULL, NULL},
    {"dur", ev_dur, NULL, NULL, NULL},
    {"id", ev_id, NULL, NULL, NULL},
    {"bp", ev_none, NULL, NULL, NULL},
    {"args", ev_args, NULL, NULL, NULL},
    {NULL},
};

static PyObject *ev_repr(PyObject *s) {
    Ev *e = EV(s);
    PyObject *ts = PyFloat_FromDouble(e->ts), *dur = PyFloat_FromDouble(e->dur), *ph = ev_ph(s, NULL);
    PyObject *r = ts && dur && ph ? PyUnicode_FromFormat("Event(ph=%R, cat=%R, name=%R, ts=%R, dur=%R)",
                                                         ph, e->cat, e->name, ts, dur) : NULL;
    Py_XDECREF(ph);
    Py_XDECREF(ts);
    Py_XDECREF(dur);
    return r;
}

PyTypeObject EvType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "profd.server.engine._scan.Event",
    .tp_basicsize = sizeof(EvBase),
    .tp_dealloc = (destructor)ev_dealloc,
    .tp_free = ev_free,
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE,
    .tp_doc = "One trace event (read-only but its category; numbers unboxed, strings interned).",
    .tp_getset = ev_getset,
    .tp_methods = ev_methods,
    .tp_repr = ev_repr,
};

PyTypeObject EvFullType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "profd.server.engine._scan.EventWithArgs",
    .tp_basicsize = sizeof(EvBase), /* and its slots: new_event sizes each event */
    .tp_dealloc = (destructor)ev_dealloc,
    .tp_free = ev_free,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "One trace event with op and allocator args.",
};

PyTypeObject EvOpType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "profd.server.engine._scan.OpEvent",
    .tp_basicsize = sizeof(EvBase), /* and its slots: new_event sizes each event */
    .tp_dealloc = (destructor)ev_dealloc,
    .tp_free = ev_free,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "One trace event with op, launch or kernel args.",
};

PyTypeObject EvMemType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "profd.server.engine._scan.MemoryEvent",
    .tp_basicsize = sizeof(EvMem),
    .tp_dealloc = (destructor)ev_dealloc,
    .tp_free = ev_free,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "One allocator sample.",
};

static void args_dealloc(ArgsView *a) {
    Py_DECREF(a->ev);
    PyObject_Free(a);
}

#define AV(self) (((ArgsView *)(self))->ev)
#define AVM(self, k) (mem_fields(AV(self)) ? mem_fields(AV(self))[k] : 0)
static PyObject *a_ext(PyObject *s, void *c) { return int_or_none(AV(s), F_EXT, op_int(AV(s), F_EXT)); }
static PyObject *a_corr(PyObject *s, void *c) { return int_or_none(AV(s), F_CORR, op_int(AV(s), F_CORR)); }
static PyObject *a_seq(PyObject *s, void *c) { return int_or_none(AV(s), F_SEQ, op_int(AV(s), F_SEQ)); }
static PyObject *a_fwd(PyObject *s, void *c) { return int_or_none(AV(s), F_FWD, op_int(AV(s), F_FWD)); }
static PyObject *a_devtype(PyObject *s, void *c) { return int_or_none(AV(s), F_DEVTYPE, AVM(s, 0)); }
static PyObject *a_memb(PyObject *s, void *c) { return int_or_none(AV(s), F_MEMB, AVM(s, 1)); }
static PyObject *a_talloc(PyObject *s, void *c) { return int_or_none(AV(s), F_TALLOC, AVM(s, 2)); }
static PyObject *a_tres(PyObject *s, void *c) { return int_or_none(AV(s), F_TRES, AVM(s, 3)); }
static PyObject *a_addr(PyObject *s, void *c) { return int_or_none(AV(s), F_ADDR, AVM(s, 4)); }
static PyObject *a_nbytes(PyObject *s, void *c) { return int_or_none(AV(s), F_NBYTES, op_int(AV(s), F_NBYTES)); }
static PyObject *a_dims(PyObject *s, void *c) { return obj_or(op_obj(AV(s), F_DIMS), EMPTY_BYTES); }
static PyObject *a_types(PyObject *s, void *c) { return obj_or(op_obj(AV(s), F_TYPES), EMPTY_BYTES); }
static PyObject *a_grid(PyObject *s, void *c) { return obj_or(op_obj(AV(s), F_GRID), EMPTY_BYTES); }
static PyObject *a_block(PyObject *s, void *c) { return obj_or(op_obj(AV(s), F_BLOCK), EMPTY_BYTES); }
static PyObject *a_name(PyObject *s, void *c) { return obj_or(op_obj(AV(s), F_ANAME), Py_None); }
static PyObject *a_call_from(PyObject *s, void *c) { return obj_or(op_obj(AV(s), F_CALL_FROM), Py_None); }
/* stream and device are kept as "given or not", all the model reads of them (gpu_role): True or None */
static PyObject *a_flag(const Ev *e, uint32_t flag) {
    if (e->flags & flag) Py_RETURN_TRUE;
    Py_RETURN_NONE;
}
static PyObject *a_stream(PyObject *s, void *c) { return a_flag(AV(s), F_STREAM); }
static PyObject *a_device(PyObject *s, void *c) { return a_flag(AV(s), F_DEVICE); }

static PyGetSetDef args_getset[] = {
    {"external_id", a_ext, NULL, NULL, NULL},
    {"correlation", a_corr, NULL, NULL, NULL},
    {"seq", a_seq, NULL, NULL, NULL},
    {"fwd_tid", a_fwd, NULL, NULL, NULL},
    {"device_type", a_devtype, NULL, NULL, NULL},
    {"mem_bytes", a_memb, NULL, NULL, NULL},
    {"total_allocated", a_talloc, NULL, NULL, NULL},
    {"total_reserved", a_tres, NULL, NULL, NULL},
    {"addr", a_addr, NULL, NULL, NULL},
    {"nbytes", a_nbytes, NULL, NULL, NULL},
    {"input_dims", a_dims, NULL, NULL, NULL},
    {"input_types", a_types, NULL, NULL, NULL},
    {"grid", a_grid, NULL, NULL, NULL},
    {"block", a_block, NULL, NULL, NULL},
    {"name", a_name, NULL, NULL, NULL},
    {"call_from", a_call_from, NULL, NULL, NULL},
    {"stream", a_stream, NULL, NULL, NULL},
    {"device", a_device, NULL, NULL, NULL},
    {NULL},
};

static PyTypeObject ArgsType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "profd.server.engine._scan.Args",
    .tp_basicsize = sizeof(ArgsView),
    .tp_dealloc = (destructor)args_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "The args of one event (a view).",
    .tp_getset = args_getset,
};

/* ------------------------------------------------------------------ the scanner */
/* One (pid, tid) pair, found by the identity of its two objects: the table interns both, so the
 * same token is the same object, and the pair holds them, so their addresses are not reused. */
typedef struct {
    PyObject *pid, *tid; /* borrowed from pair */
    PyObject *pair;      /* owned; NULL: an empty slot */
} ThreadSlot;

/* What a lexer keeps between events: its table and each field's last token. No Python object:
 * the scanner's own lexer runs under the GIL, its worker's without it. */
typedef struct {
    Table table;
    Last last_ph, last_cat, last_name, last_pid, last_tid, last_other;
} Lexer;

/* One array element as a lexer reads it: numbers in place, strings as tokens of its table. */
typedef struct {
    double ts, dur;
    uint32_t flags;
    Tok ph, cat, name, pid, tid, bp;
    Tok objs[6]; /* dims, types, grid, block, aname, call_from: in the order of OBJ_FLAGS */
    int64_t ext, corr, seq, fwd, id, nbytes;
    int64_t devtype, memb, talloc, tres, addr; /* in this order in EvMem too */
} Rec;
enum { O_DIMS, O_TYPES, O_GRID, O_BLOCK, O_ANAME, O_CALL_FROM };

typedef struct Worker Worker;

typedef struct {
    PyObject_HEAD
    Lexer lex;
    PyObject *x_cats, *flow_cats, *instant_names, *meta_names; /* sets, or None: keep all */
    Py_ssize_t total;  /* array elements seen */
    int state;         /* 0: at '[' content start, 1: after ',', 2: after an element, 3: done */
    PyObject *big;     /* list: the objects of the current event's long tokens, or NULL */
    ThreadSlot *threads; /* open addressing on the (pid, tid) objects: one pair per distinct two */
    size_t threads_cap, threads_used;
    int pooling; /* counted in pool_users: between its first scan and the array's end */
    Worker *worker; /* lexes the far part of a big block on the second core (NULL: none yet) */
    double share;   /* the part of a block the worker takes, from the two threads' last rates */
} Scanner;

typedef struct {
    const char *p, *end, *base;
    int incomplete; /* ran out of input */
    const char *err; /* invalid or unsupported */
} Cur;

#define NEED(c, n) do { if ((c)->end - (c)->p < (n)) { (c)->incomplete = 1; return -1; } } while (0)
#define FAIL(c, msg) do { (c)->err = (msg); return -1; } while (0)

/* Past JSON whitespace. The plain loop is the fastest measured: an SSE step for Kineto's 3-7
 * blank runs, inlined or called out of line, made the scan 3-5% slower on compact and pretty
 * traces (fewer instructions, by callgrind, yet more time; scanner.scan timed alternately in one
 * process, issue 32). */
static inline int is_ws(char ch) { return ch == ' ' || ch == '\n' || ch == '\r' || ch == '\t'; }

static inline const char *past_ws(const char *p, const char *end) {
    while (p < end && is_ws(*p)) p++;
    return p;
}

static inline void skip_ws(Cur *c) { c->p = past_ws(c->p, c->end); }

#define ONES 0x0101010101010101ULL
#define HIGHS 0x8080808080808080ULL
#define HAS_ZERO(v) (((v) - ONES) & ~(v) & HIGHS)
#define HAS_BYTE(w, b) HAS_ZERO((w) ^ (ONES * (uint64_t)(b)))
#define HAS_LESS(w, b) (((w) - ONES * (uint64_t)(b)) & ~(w) & HIGHS) /* some byte < b (b <= 128) */
static unsigned char STR_STOP[256]; /* the bytes that end a plain run in a string: '"', '\\', controls */

/* The value of four hex digits at h (the end of a \\u escape), or -1: incomplete / invalid. */
static int hex4(Cur *c, const char *h) {
    if (c->end - h < 4) { c->incomplete = 1; return -1; }
    int v = 0;
    for (int k = 0; k < 4; k++) {
        char ch = h[k];
        int d = ch >= '0' && ch <= '9' ? ch - '0' : ch >= 'a' && ch <= 'f' ? ch - 'a' + 10 :
                ch >= 'A' && ch <= 'F' ? ch - 'A' + 10 : -1;
        if (d < 0) FAIL(c, "bad \\u escape");
        v = v * 16 + d;
    }
    return v;
}

/* The rest of a string from q (inside it: past the opening quote, or where an earlier call left
 * off): 0 with *close at the closing quote; -1 with c->err (invalid) or c->incomplete, and then
 * *safe is how far the bytes are known good (a plain run ended there, or an escape that does not
 * end in the buffer starts there), so a resumable caller goes on from *safe with more bytes. */
static inline __attribute__((always_inline)) int string_rest(Cur *c, const char *q, int *esc, const char **close, const char **safe) {
    for (;;) {
        const char *hit = q;
#ifdef __SSE2__
        /* Sixteen bytes a step, and the first stop byte found by its bit: keys and short names
         * end within the first step (the eight-byte loop below then tested bytes one by one). */
        while (c->end - hit >= 16) {
            __m128i v = _mm_loadu_si128((const __m128i *)hit);
            __m128i stop = _mm_or_si128(_mm_or_si128(_mm_cmpeq_epi8(v, _mm_set1_epi8('"')),
                                                     _mm_cmpeq_epi8(v, _mm_set1_epi8('\\'))),
                                        _mm_cmpeq_epi8(_mm_min_epu8(v, _mm_set1_epi8(0x1F)), v)); /* v <= 0x1F */
            int mask = _mm_movemask_epi8(stop);
            if (mask) {
                hit += __builtin_ctz((unsigned)mask);
                goto found;
            }
            hit += 16;
        }
#endif
        while (c->end - hit >= 8) { /* eight bytes a step while none is '"', '\\' or a control */
            uint64_t w;
            memcpy(&w, hit, 8);
            if (HAS_BYTE(w, 0x22) | HAS_BYTE(w, 0x5C) | HAS_LESS(w, 0x20)) break;
            hit += 8;
        }
        while (hit < c->end && !STR_STOP[(uint8_t)*hit]) hit++;
#ifdef __SSE2__
    found:
#endif
        *safe = hit;
        if (hit >= c->end) {
            c->incomplete = 1;
            return -1;
        }
        if (*hit == '"') {
            *close = hit;
            return 0;
        }
        if (*hit == '\\') {
            *esc = 1;
            if (hit + 1 >= c->end) {
                c->incomplete = 1;
                return -1;
            }
            char x = hit[1];
            if (x == 'u') {
                int cp = hex4(c, hit + 2);
                if (cp < 0) return -1;
                q = hit + 6;
                /* Surrogates only in pairs (msgspec refuses a lone one, even in a value it skips). */
                if (cp >= 0xDC00 && cp <= 0xDFFF) FAIL(c, "lone surrogate");
                if (cp >= 0xD800 && cp <= 0xDBFF) {
                    if (c->end - q < 2 || q[0] != '\\' || q[1] != 'u') {
                        if (c->end - q < 2) c->incomplete = 1;
                        else FAIL(c, "lone surrogate");
                        return -1;
                    }
                    int lo = hex4(c, q + 2);
                    if (lo < 0) return -1;
                    if (lo < 0xDC00 || lo > 0xDFFF) FAIL(c, "lone surrogate");
                    q += 6;
                }
            } else if (x && strchr("\"\\/bfnrt", x)) {
                q = hit + 2;
            } else {
                FAIL(c, "bad escape");
            }
            continue;
        }
        FAIL(c, "control character in string");
    }
}

/* A string token at c->p (on the opening quote): content span and whether it has escapes. Inlined
 * at each caller: nine tokens in ten are keys and short names, for which the call itself (saving
 * and restoring five registers, the cursor through memory) was most of the cost: the scan took
 * 5-10% less time inlined (measured, a 51 MB trace, min of 25 alternating runs; -O3 instead was
 * 24% slower). */
static inline __attribute__((always_inline)) int scan_string(Cur *c, const char **s, Py_ssize_t *n, int *esc) {
    NEED(c, 1);
    if (*c->p != '"') FAIL(c, "expected a string");
    const char *start = ++c->p, *close, *safe;
    *esc = 0;
    if (string_rest(c, start, esc, &close, &safe) < 0) return -1;
    *s = start;
    *n = close - start;
    c->p = close + 1;
    return 0;
}

/* The first byte from p on that is not a digit (e if none): sixteen bytes a step where SSE2 is. */
static inline const char *digits_end(const char *p, const char *e) {
#ifdef __SSE2__
    while (e - p >= 16) {
        __m128i d = _mm_sub_epi8(_mm_loadu_si128((const __m128i *)p), _mm_set1_epi8('0'));
        int other = ~_mm_movemask_epi8(_mm_cmpeq_epi8(_mm_min_epu8(d, _mm_set1_epi8(9)), d)) & 0xFFFF;
        if (other) return p + __builtin_ctz((unsigned)other);
        p += 16;
    }
#endif
    while (p < e && *p >= '0' && *p <= '9') p++;
    return p;
}

/* A number token: span, and whether it is an integer (no fraction/exponent). Inlined, as
 * scan_string: most numbers are a few digits (ids, shape sizes), the call was a share of them
 * (the scan 0.99x its time, measured as scan_string's). */
static inline __attribute__((always_inline)) int scan_number(Cur *c, const char **s, Py_ssize_t *n, int *is_int) {
    const char *p = c->p, *e = c->end;
    *s = p;
    *is_int = 1;
    if (p < e && *p == '-') p++;
    if (p >= e) { c->incomplete = 1; return -1; }
    if (*p == '0') p++;
    else if (*p >= '1' && *p <= '9') p = digits_end(p + 1, e);
    else FAIL(c, "bad number");
    if (p < e && *p == '.') {
        *is_int = 0;
        p++;
        const char *d = p;
        p = digits_end(p, e);
        if (p == d) { if (p >= e) { c->incomplete = 1; return -1; } FAIL(c, "bad number"); }
    }
    if (p < e && (*p == 'e' || *p == 'E')) {
        *is_int = 0;
        p++;
        if (p < e && (*p == '+' || *p == '-')) p++;
        const char *d = p;
        p = digits_end(p, e);
        if (p == d) { if (p >= e) { c->incomplete = 1; return -1; } FAIL(c, "bad number"); }
    }
    if (p >= e) { c->incomplete = 1; return -1; } /* a number may continue in the next block */
    *n = p - *s;
    c->p = p;
    return 0;
}

static int parse_int64(const char *s, Py_ssize_t n, int64_t *out) {
    int neg = 0;
    Py_ssize_t i = 0;
    if (s[0] == '-') { neg = 1; i = 1; }
    if (n - i > 18) return -1; /* may overflow: let msgspec have it */
    int64_t v = 0;
    for (; i < n; i++) v = v * 10 + (s[i] - '0');
    *out = neg ? -v : v;
    return 0;
}

static const double POW10[] = {1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11,
                               1e12, 1e13, 1e14, 1e15, 1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22};

/* Correctly rounded, like msgspec: Clinger's fast path when exact, else strtod. */
static double parse_double(const char *s, Py_ssize_t n) {
    uint64_t m = 0;
    int digits = 0, frac = 0, neg = 0, seen_dot = 0;
    Py_ssize_t i = 0;
    if (s[0] == '-') { neg = 1; i = 1; }
    for (; i < n; i++) {
        char ch = s[i];
        if (ch >= '0' && ch <= '9') {
            if (digits >= 19) goto slow;
            if (m || ch != '0') digits++;
            m = m * 10 + (uint64_t)(ch - '0');
            if (seen_dot) frac++;
        } else if (ch == '.') {
            seen_dot = 1;
        } else {
            goto slow; /* exponent */
        }
    }
    if (m <= (1ULL << 53) && frac <= 22) {
        if (!m && !seen_dot) return 0.0; /* "-0" is msgspec's int 0, which reads as +0.0 */
        double v = (double)m / POW10[frac];
        return neg ? -v : v;
    }
slow:;
    char tmp[128];
    if (n >= (Py_ssize_t)sizeof(tmp)) {
        char *big = malloc(n + 1);
        if (!big) return 0.0;
        memcpy(big, s, n);
        big[n] = 0;
        double v = strtod(big, NULL);
        free(big);
        return v;
    }
    memcpy(tmp, s, n);
    tmp[n] = 0;
    return strtod(tmp, NULL);
}

static int skip_literal(Cur *c, const char *lit, Py_ssize_t n) {
    Py_ssize_t have = c->end - c->p;
    if (memcmp(c->p, lit, have < n ? have : n) != 0) FAIL(c, "bad literal");
    NEED(c, n + 1); /* and the byte after it, so "nul" | "l" across blocks resumes */
    c->p += n;
    return 0;
}

/* ------------------------------------------------------------------ skipping a value
 * One JSON value skipped with the validation msgspec applies when it skips a value (strings as
 * scan_string, numbers, literals; nesting up to MAX_DEPTH), as a state machine, so it can also
 * stop where a buffer ends and go on with the next: the scanner skips the members it does not read
 * with it (skip_value), and the loader streams what follows the events through it (the Skipper
 * type). Each byte is looked at once, except a number or literal that does not end in the buffer:
 * that is resumed at its start (the loader then reads until the buffer has doubled). */
enum { SK_VALUE, SK_FIRST_VALUE, SK_FIRST_KEY, SK_KEY, SK_COLON, SK_AFTER, SK_STRING };
#define SK_KEY_MAX 128 /* a member name longer than this is none of the document's fields */

typedef struct {
    int base;         /* the level of a container opened with nothing open */
    int n;            /* containers open */
    int state, str_key, done;
    PyObject *keys;   /* tuple of bytes: the members to hand back (object mode), or NULL */
    Py_ssize_t klen;  /* the member name being read, at the object's own level: */
    int kesc, kover, kpending;
    char kbuf[SK_KEY_MAX];
    char stack[MAX_DEPTH + 2];
} SkState;

static void sk_value(SkState *sk, int level) {
    sk->base = level;
    sk->n = sk->done = sk->kpending = 0;
    sk->state = SK_VALUE;
    sk->keys = NULL;
}

/* Whether the member name just read is one to hand back. */
static int sk_wanted(SkState *sk) {
    if (!sk->keys || sk->n != 1 || sk->kover) return 0;
    if (sk->kesc) return 1; /* the loader unescapes it and decides */
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(sk->keys); i++) {
        PyObject *k = PyTuple_GET_ITEM(sk->keys, i);
        if (PyBytes_Check(k) && PyBytes_GET_SIZE(k) == sk->klen && memcmp(PyBytes_AS_STRING(k), sk->kbuf, sk->klen) == 0)
            return 1;
    }
    return 0;
}

static void sk_key_bytes(SkState *sk, const char *s, Py_ssize_t n) {
    if (!sk->keys || sk->n != 1) return;
    if (sk->kover || sk->klen + n > SK_KEY_MAX) { sk->kover = 1; return; }
    memcpy(sk->kbuf + sk->klen, s, n);
    sk->klen += n;
}

/* A value (or a closing '}'/']') has ended: what comes next. */
static void sk_after(SkState *sk) {
    if (sk->n == 0) sk->done = 1;
    else sk->state = SK_AFTER;
}

/* Skip on from c->p: 1 done (c->p past the value, or past the object's '}'), 2 a wanted member
 * (c->p at its value: the caller reads it, then runs this again from its end), 0 the buffer
 * ended (c->p where to go on), -1 invalid (c->err). */
static int sk_run(SkState *sk, Cur *c) {
    for (;;) {
        if (sk->done) return 1;
        if (sk->state == SK_STRING) {
            const char *close, *safe, *from = c->p;
            int esc = 0;
            if (string_rest(c, c->p, &esc, &close, &safe) < 0) {
                if (c->err) return -1;
                if (sk->str_key) { sk_key_bytes(sk, from, safe - from); sk->kesc |= esc; }
                c->p = safe;
                return 0;
            }
            if (sk->str_key) {
                sk_key_bytes(sk, from, close - from);
                sk->kesc |= esc;
                sk->kpending = sk_wanted(sk);
                sk->state = SK_COLON;
            } else {
                sk_after(sk);
            }
            c->p = close + 1;
            continue;
        }
        skip_ws(c);
        if (c->p >= c->end) return 0;
        char ch = *c->p;
        switch (sk->state) {
        case SK_FIRST_VALUE:
            if (ch == ']') { c->p++; sk->n--; sk_after(sk); continue; }
            /* fall through */
        case SK_VALUE:
            if (sk->kpending) { /* the caller takes this member's value */
                sk->kpending = 0;
                sk->state = SK_AFTER;
                return 2;
            }
            if (ch == '"') { c->p++; sk->state = SK_STRING; sk->str_key = 0; continue; }
            if (ch == '{' || ch == '[') {
                if (sk->base + sk->n > MAX_DEPTH) FAIL(c, "unsupported: nested deeper than the scanner follows");
                sk->stack[sk->n++] = ch;
                c->p++;
                sk->state = ch == '{' ? SK_FIRST_KEY : SK_FIRST_VALUE;
                continue;
            }
            {
                const char *start = c->p, *s;
                Py_ssize_t n;
                int is_int, r;
                if (ch == 't') r = skip_literal(c, "true", 4);
                else if (ch == 'f') r = skip_literal(c, "false", 5);
                else if (ch == 'n') r = skip_literal(c, "null", 4);
                else if (ch == '-' || (ch >= '0' && ch <= '9')) r = scan_number(c, &s, &n, &is_int);
                else FAIL(c, "unexpected character");
                if (r < 0) {
                    if (c->err) return -1;
                    c->p = start; /* resumed at the token's start */
                    return 0;
                }
                sk_after(sk);
            }
            continue;
        case SK_FIRST_KEY:
            if (ch == '}') { c->p++; sk->n--; sk_after(sk); continue; }
            /* fall through */
        case SK_KEY:
            if (ch != '"') FAIL(c, "expected a string");
            c->p++;
            sk->state = SK_STRING;
            sk->str_key = 1;
            sk->klen = sk->kesc = sk->kover = 0;
            continue;
        case SK_COLON:
            if (ch != ':') FAIL(c, "expected ':'");
            c->p++;
            sk->state = SK_VALUE;
            continue;
        case SK_AFTER: {
            char open = sk->stack[sk->n - 1], close = open == '{' ? '}' : ']';
            if (ch == ',') { c->p++; sk->state = open == '{' ? SK_KEY : SK_VALUE; continue; }
            if (ch == close) { c->p++; sk->n--; sk_after(sk); continue; }
            FAIL(c, "expected ',' or a closing bracket");
        }
        }
    }
}

/* An array of strings, numbers and such arrays (the shapes, strides and concrete inputs of an op:
 * most of what the state machine skipped) skipped by recursive descent within the buffer: 1 done,
 * c->p past it; 0 anything else or any doubt (an object, a literal, the buffer's end, an error),
 * and the caller restores c and lets sk_run decide, with its words. */
static int quick_array(Cur *c, int depth) {
    if (depth > MAX_DEPTH) return 0;
    c->p++; /* '[' */
    skip_ws(c);
    if (c->p >= c->end) return 0;
    if (*c->p == ']') { c->p++; return 1; }
    for (;;) {
        const char *s;
        Py_ssize_t n;
        int flag;
        char ch = *c->p;
        if (ch == '"') { if (scan_string(c, &s, &n, &flag) < 0) return 0; }
        else if (ch == '-' || (ch >= '0' && ch <= '9')) { if (scan_number(c, &s, &n, &flag) < 0) return 0; }
        else if (ch == '[') { if (!quick_array(c, depth + 1)) return 0; }
        else return 0;
        skip_ws(c);
        if (c->p >= c->end) return 0;
        if (*c->p == ']') { c->p++; return 1; }
        if (*c->p != ',') return 0;
        c->p++;
        skip_ws(c);
        if (c->p >= c->end) return 0;
    }
}

/* One value at c->p, at nesting ``depth``, within the buffer: 0, or -1 (incomplete, or c->err).
 * A string or a number (most members an event's reader skips) is the token function sk_run would
 * call, without setting up the state machine: that cost the scanner ~8% when it replaced the
 * recursive skip (c4b2d9f); an array tries quick_array first. */
static int skip_value(Cur *c, int depth) {
    if (c->p < c->end) {
        const char *s;
        Py_ssize_t n;
        int flag;
        if (*c->p == '"') return scan_string(c, &s, &n, &flag);
        if (*c->p == '-' || (*c->p >= '0' && *c->p <= '9')) return scan_number(c, &s, &n, &flag);
        if (*c->p == '[') {
            Cur saved = *c;
            if (quick_array(c, depth)) return 0;
            *c = saved;
        }
    }
    SkState sk;
    sk_value(&sk, depth);
    int r = sk_run(&sk, c);
    if (r == 1) return 0;
    if (r == 0) c->incomplete = 1;
    return -1;
}

/* The strs and bytes the table keeps are hashed as they are made, once a distinct value: the
 * object keeps its hash, which a pass reading events without the GIL (_passes.c, "with the GIL
 * released") then only reads, where asking Python for it would wait for the GIL. */
static PyObject *hashed(PyObject *r) {
    if (r && PyObject_Hash(r) == -1) Py_CLEAR(r);
    return r;
}

static PyObject *make_str(const char *s, Py_ssize_t n) {
    PyObject *r = PyUnicode_DecodeUTF8(s, n, NULL);
    if (r && n <= INTERN_MAX) PyUnicode_InternInPlace(&r);
    return hashed(r);
}

/* The four hex digits at h (validated by string_rest). */
static int hex_value(const char *h) {
    int v = 0;
    for (int k = 0; k < 4; k++) {
        char ch = h[k];
        v = v * 16 + (ch <= '9' ? ch - '0' : (ch | 0x20) - 'a' + 10);
    }
    return v;
}

/* A string with escapes, unescaped here: its escapes are valid and its surrogates paired
 * (string_rest checked both as it found the string's end), so this only writes them out as UTF-8,
 * and the str decode checks the bytes between them as make_str does (an invalid byte is a
 * ValueError: the loader falls back to msgspec). Not json.loads of the token: importing json was
 * 2% of a small trace's `profd-client analyze`, and an import from a deep call stack can fail. */
static PyObject *make_escaped(const char *s, Py_ssize_t n) {
    char *buf = malloc(n ? n : 1); /* an escape's UTF-8 is never longer than the escape */
    if (!buf) return PyErr_NoMemory();
    Py_ssize_t o = 0;
    for (Py_ssize_t i = 0; i < n;) {
        char ch = s[i];
        if (ch != '\\') {
            buf[o++] = ch;
            i++;
            continue;
        }
        char x = s[i + 1];
        if (x != 'u') {
            buf[o++] = x == 'b' ? '\b' : x == 'f' ? '\f' : x == 'n' ? '\n' : x == 'r' ? '\r' : x == 't' ? '\t' : x;
            i += 2;
            continue;
        }
        uint32_t cp = (uint32_t)hex_value(s + i + 2);
        i += 6;
        if (cp >= 0xD800 && cp <= 0xDBFF) { /* its low half follows (checked) */
            cp = 0x10000 + ((cp - 0xD800) << 10) + ((uint32_t)hex_value(s + i + 2) - 0xDC00);
            i += 6;
        }
        if (cp < 0x80) {
            buf[o++] = (char)cp;
        } else if (cp < 0x800) {
            buf[o++] = (char)(0xC0 | (cp >> 6));
            buf[o++] = (char)(0x80 | (cp & 0x3F));
        } else if (cp < 0x10000) {
            buf[o++] = (char)(0xE0 | (cp >> 12));
            buf[o++] = (char)(0x80 | ((cp >> 6) & 0x3F));
            buf[o++] = (char)(0x80 | (cp & 0x3F));
        } else {
            buf[o++] = (char)(0xF0 | (cp >> 18));
            buf[o++] = (char)(0x80 | ((cp >> 12) & 0x3F));
            buf[o++] = (char)(0x80 | ((cp >> 6) & 0x3F));
            buf[o++] = (char)(0x80 | (cp & 0x3F));
        }
    }
    PyObject *r = make_str(buf, o);
    free(buf);
    return r;
}

static PyObject *make_bytes(const char *s, Py_ssize_t n) { return hashed(PyBytes_FromStringAndSize(s, n)); }

static PyObject *make_int(const char *s, Py_ssize_t n) {
    char tmp[32];
    if (n >= (Py_ssize_t)sizeof(tmp)) { PyErr_SetString(PyExc_ValueError, "int too long"); return NULL; }
    memcpy(tmp, s, n);
    tmp[n] = 0;
    return PyLong_FromString(tmp, NULL, 10);
}

/* A string value as a token (``last``: the field's last token). -1 with c->err for a non-string
 * (the typed decode would reject it). */
static int read_str(Lexer *lx, Cur *c, Tok *out, Last *last) {
    const char *s; Py_ssize_t n; int esc;
    if (scan_string(c, &s, &n, &esc) < 0) return -1;
    if (table_tok_last(&lx->table, last, esc ? 'e' : 's', s, n, out) < 0) FAIL(c, "out of memory");
    return 0;
}

/* Whether s[0:n] is exactly one JSON number (roctracer writes numbers as strings: "bytes": "256"). */
static int json_number(const char *s, Py_ssize_t n, int *is_int) {
    Py_ssize_t i = 0;
    *is_int = 1;
    if (i < n && s[i] == '-') i++;
    if (i >= n) return 0;
    if (s[i] == '0') i++;
    else if (s[i] >= '1' && s[i] <= '9') while (i < n && s[i] >= '0' && s[i] <= '9') i++;
    else return 0;
    if (i < n && s[i] == '.') {
        Py_ssize_t d = ++i;
        while (i < n && s[i] >= '0' && s[i] <= '9') i++;
        if (i == d) return 0;
        *is_int = 0;
    }
    if (i < n && (s[i] == 'e' || s[i] == 'E')) {
        i++;
        if (i < n && (s[i] == '+' || s[i] == '-')) i++;
        Py_ssize_t d = i;
        while (i < n && s[i] >= '0' && s[i] <= '9') i++;
        if (i == d) return 0;
        *is_int = 0;
    }
    return i == n;
}

/* A number written as a string, as the typed decode (strict=False) reads it into a number field:
 * its span, or "unsupported" (escapes, anything but one JSON number: msgspec then decides). */
static int scan_numeric_string(Cur *c, const char **s, Py_ssize_t *n, int *is_int) {
    int esc;
    if (scan_string(c, s, n, &esc) < 0) return -1;
    if (esc || !json_number(*s, *n, is_int)) FAIL(c, "unsupported: string in a number field");
    return 0;
}

/* An int value into *out; 1 when null (absent). Floats are "unsupported", and so are strings
 * unless ``numeric_str`` (a number field, not an id: the typed decode keeps a string id a str). */
static int read_i64(Cur *c, int64_t *out, int numeric_str) {
    NEED(c, 1);
    if (*c->p == 'n') {
        if (skip_literal(c, "null", 4) < 0) return -1;
        return 1;
    }
    const char *s; Py_ssize_t n; int is_int;
    if (*c->p == '"' && numeric_str) {
        if (scan_numeric_string(c, &s, &n, &is_int) < 0) return -1;
    } else {
        if (*c->p != '-' && (*c->p < '0' || *c->p > '9')) FAIL(c, "unsupported: non-integer id");
        if (scan_number(c, &s, &n, &is_int) < 0) return -1;
    }
    if (!is_int || parse_int64(s, n, out) < 0) FAIL(c, "unsupported: non-int64 number");
    return 0;
}

/* int | str | null, as the typed decode's Id accepts, as a token (pid, tid). */
static int read_id_tok(Lexer *lx, Cur *c, Tok *out, Last *last) {
    NEED(c, 1);
    if (*c->p == '"') return read_str(lx, c, out, last);
    if (*c->p == 'n') {
        if (skip_literal(c, "null", 4) < 0) return -1;
        *out = TOK_NULL;
        return 0;
    }
    const char *s; Py_ssize_t n; int is_int;
    if (*c->p != '-' && (*c->p < '0' || *c->p > '9')) FAIL(c, "unsupported: id type");
    if (scan_number(c, &s, &n, &is_int) < 0) return -1;
    if (!is_int) FAIL(c, "unsupported: float id");
    if (table_tok_last(&lx->table, last, 'i', s, n, out) < 0) FAIL(c, "out of memory");
    return 0;
}

/* Validate int | str | null for an Id field the analyses do not read. */
static int check_id(Cur *c) {
    NEED(c, 1);
    const char *s; Py_ssize_t n; int is_int, esc;
    if (*c->p == '"') return scan_string(c, &s, &n, &esc);
    if (*c->p == 'n') return skip_literal(c, "null", 4);
    if (*c->p != '-' && (*c->p < '0' || *c->p > '9')) FAIL(c, "unsupported: id type");
    if (scan_number(c, &s, &n, &is_int) < 0) return -1;
    if (!is_int) FAIL(c, "unsupported: float id");
    return 0;
}

static int read_raw(Lexer *lx, Cur *c, Tok *out) {
    const char *start = c->p;
    if (skip_value(c, EVENT_DEPTH + 2) < 0) return -1;
    if (table_tok(&lx->table, 'r', start, c->p - start, out) < 0) FAIL(c, "out of memory");
    return 0;
}

/* Eight ASCII digits at p as their value (1), or 0 when one of them is not a digit: the digits
 * tested and combined as one word (little-endian, as simdjson's parse_eight_digits_unrolled). A
 * timestamp's 13-16 digits one at a time are a chain of multiply-adds, each waiting on the last. */
static inline int eight_digits(const char *p, uint64_t *out) {
    uint64_t w;
    memcpy(&w, p, 8);
    if (((w & 0xF0F0F0F0F0F0F0F0ULL) | (((w + 0x0606060606060606ULL) & 0xF0F0F0F0F0F0F0F0ULL) >> 4)) !=
        0x3333333333333333ULL)
        return 0;
    w -= 0x3030303030303030ULL;
    w = w * 10 + (w >> 8);
    w = ((w & 0x000000FF000000FFULL) * (100 + (1000000ULL << 32)) +
         ((w >> 16) & 0x000000FF000000FFULL) * (1 + (10000ULL << 32))) >> 32;
    *out = w;
    return 1;
}

/* The common ts/dur (unsigned, digits with an optional fraction, no exponent, 19 digits at most,
 * exact in Clinger's fast path) read in the one pass that finds its end: 1 and c->p past it, with
 * parse_double's value for the same digits; 0 for anything else (the general path decides). */
static inline int plain_double(Cur *c, double *out) {
    const char *p = c->p, *e = c->end;
    uint64_t m = 0;
    if (p < e && *p == '0') p++;
    else if (p < e && (unsigned)(*p - '1') < 9u) {
        uint64_t eight;
        while (e - p >= 8 && eight_digits(p, &eight)) { /* wraps past 19 digits: refused below */
            m = m * 100000000ULL + eight;
            p += 8;
        }
        while (p < e && (unsigned)(*p - '0') < 10u) m = m * 10 + (uint64_t)(*p++ - '0');
    } else return 0;
    Py_ssize_t whole = p - c->p, frac = 0;
    if (p < e && *p == '.') {
        const char *d = ++p;
        while (p < e && (unsigned)(*p - '0') < 10u) m = m * 10 + (uint64_t)(*p++ - '0');
        frac = p - d;
        if (!frac) return 0;
    }
    /* the end must be in the buffer (a number may go on in the next block), and not an exponent
     * or a second leading digit ("01": invalid, the general path says so) */
    if (p >= e || *p == 'e' || *p == 'E' || (whole == 1 && c->p[0] == '0' && (unsigned)(*p - '0') < 10u)) return 0;
    if (whole + frac > 19 || m > (1ULL << 53) || frac > 22) return 0;
    *out = (double)m / POW10[frac];
    c->p = p;
    return 1;
}

/* A time (ts, dur): a number, or a number written as a string; finite (loader.Time). */
static int read_double(Cur *c, double *out) {
    NEED(c, 1);
    if (plain_double(c, out)) return 0;
    const char *s; Py_ssize_t n; int is_int;
    if (*c->p == '"') {
        if (scan_numeric_string(c, &s, &n, &is_int) < 0) return -1;
    } else {
        if (*c->p != '-' && (*c->p < '0' || *c->p > '9')) FAIL(c, "unsupported: ts/dur not a number");
        if (scan_number(c, &s, &n, &is_int) < 0) return -1;
    }
    *out = parse_double(s, n);
    if (!isfinite(*out)) FAIL(c, "unsupported: number out of range"); /* msgspec names it */
    return 0;
}

static int set_i64(Cur *c, Rec *e, uint32_t flag, int64_t *slot) {
    /* the allocator and copy sizes are numbers (int | float); the others are ids (int | str) */
    int r = read_i64(c, slot, flag & (F_MEMB | F_TALLOC | F_TRES | F_NBYTES));
    if (r < 0) return -1;
    if (r == 0) e->flags |= flag;
    else e->flags &= ~flag;
    return 0;
}

/* One member's value, by key: 0 ok, -1 incomplete/error. */
typedef int (*MemberFn)(Lexer *lx, Cur *c, Rec *e, const char *k, Py_ssize_t n);

/* The members of the object at c->p ('{'), each handed to ``member``. Inlined into its two
 * callers, so ``member`` is a direct call the compiler can see (3-4% of the scan, measured as
 * scan_string's). */
static inline __attribute__((always_inline)) int each_member(Lexer *lx, Cur *c, Rec *e, MemberFn member) {
    c->p++; /* '{' */
    skip_ws(c);
    NEED(c, 1);
    if (*c->p == '}') { c->p++; return 0; }
    for (;;) {
        const char *k; Py_ssize_t n; int esc;
        if (scan_string(c, &k, &n, &esc) < 0) return -1;
        if (esc) FAIL(c, "unsupported: escaped key");
        skip_ws(c);
        NEED(c, 1);
        if (*c->p != ':') FAIL(c, "expected ':'");
        c->p++;
        skip_ws(c);
        if (member(lx, c, e, k, n) < 0) return -1;
        skip_ws(c);
        NEED(c, 1);
        if (*c->p == ',') { c->p++; skip_ws(c); continue; }
        if (*c->p == '}') { c->p++; return 0; }
        FAIL(c, "expected ',' or '}'");
    }
}

/* A string member that may be null (absent): args' name and CallFrom, the event's bp. */
static int str_or_null(Lexer *lx, Cur *c, Tok *slot) {
    NEED(c, 1);
    if (*c->p != 'n') return read_str(lx, c, slot, &lx->last_other);
    *slot = TOK_ABSENT;
    return skip_literal(c, "null", 4);
}

/* args' stream or device: an id, or null (absent); the flag says which (model._classify). */
static int arg_lane(Cur *c, Rec *e, uint32_t flag) {
    NEED(c, 1);
    if (*c->p == 'n') { e->flags &= ~flag; return skip_literal(c, "null", 4); }
    e->flags |= flag;
    return check_id(c);
}

/* The member key k (of length n, which the switch around it has matched) is ``lit``. */
#define IS(lit) (memcmp(k, lit, sizeof(lit) - 1) == 0)

/* One member of args, by key: found by the key's length first, then its bytes (an op's args hold
 * a dozen keys, most of them skipped: each went down the whole list of compares before). */
static int args_member(Lexer *lx, Cur *c, Rec *e, const char *k, Py_ssize_t n) {
    switch (n) {
    case 4:
        if (IS("Addr")) return set_i64(c, e, F_ADDR, &e->addr);
        if (IS("grid")) return read_raw(lx, c, &e->objs[O_GRID]);
        if (IS("name")) return str_or_null(lx, c, &e->objs[O_ANAME]);
        break;
    case 5:
        if (IS("Bytes")) return set_i64(c, e, F_MEMB, &e->memb);
        if (IS("bytes")) return set_i64(c, e, F_NBYTES, &e->nbytes);
        if (IS("block")) return read_raw(lx, c, &e->objs[O_BLOCK]);
        break;
    case 6:
        if (IS("stream")) return arg_lane(c, e, F_STREAM);
        if (IS("device")) return arg_lane(c, e, F_DEVICE);
        break;
    case 8:
        if (IS("CallFrom")) return str_or_null(lx, c, &e->objs[O_CALL_FROM]);
        break;
    case 9:
        if (IS("Python id") || IS("Device Id")) return check_id(c);
        break;
    case 10:
        if (IS("Input Dims")) return read_raw(lx, c, &e->objs[O_DIMS]);
        if (IS("Input type")) return read_raw(lx, c, &e->objs[O_TYPES]);
        break;
    case 11:
        if (IS("External id")) return set_i64(c, e, F_EXT, &e->ext);
        if (IS("correlation")) return set_i64(c, e, F_CORR, &e->corr);
        if (IS("Device Type")) return set_i64(c, e, F_DEVTYPE, &e->devtype);
        break;
    case 13:
        if (IS("Fwd thread id")) return set_i64(c, e, F_FWD, &e->fwd);
        break;
    case 14:
        if (IS("Total Reserved")) return set_i64(c, e, F_TRES, &e->tres);
        break;
    case 15:
        if (IS("Sequence number")) return set_i64(c, e, F_SEQ, &e->seq);
        if (IS("Total Allocated")) return set_i64(c, e, F_TALLOC, &e->talloc);
        break;
    case 16:
        if (IS("Python parent id")) return check_id(c);
        break;
    }
    return skip_value(c, EVENT_DEPTH + 2);
}

/* The event's args: an object, or null (absent). */
static int event_args(Lexer *lx, Cur *c, Rec *e) {
    NEED(c, 1);
    if (*c->p == 'n') {
        e->flags &= ~F_ARGS;
        return skip_literal(c, "null", 4);
    }
    if (*c->p != '{') FAIL(c, "unsupported: args is not an object");
    e->flags |= F_ARGS;
    return each_member(lx, c, e, args_member);
}

/* One member of an event, by key: by its length first, as args_member. */
static int event_member(Lexer *lx, Cur *c, Rec *e, const char *k, Py_ssize_t n) {
    switch (n) {
    case 2:
        if (IS("ph")) return read_str(lx, c, &e->ph, &lx->last_ph);
        if (IS("ts")) return read_double(c, &e->ts);
        if (IS("id")) return set_i64(c, e, F_ID, &e->id);
        if (IS("bp")) return str_or_null(lx, c, &e->bp); /* unread, but its string is checked as the others' */
        break;
    case 3:
        if (IS("cat")) return read_str(lx, c, &e->cat, &lx->last_cat);
        if (IS("pid")) return read_id_tok(lx, c, &e->pid, &lx->last_pid);
        if (IS("tid")) return read_id_tok(lx, c, &e->tid, &lx->last_tid);
        if (IS("dur")) return read_double(c, &e->dur);
        break;
    case 4:
        if (IS("name")) return read_str(lx, c, &e->name, &lx->last_name);
        if (IS("args")) return event_args(lx, c, e);
        break;
    }
    return skip_value(c, EVENT_DEPTH + 1);
}
#undef IS

/* One array element into *e (zeroed by the caller). 0 ok, -1 incomplete/error. No Python. */
static int parse_event(Lexer *lx, Cur *c, Rec *e) {
    NEED(c, 1);
    if (*c->p != '{') FAIL(c, "unsupported: event is not an object");
    return each_member(lx, c, e, event_member);
}

static int contains(PyObject *set, PyObject *v) {
    if (set == Py_None) return 1;
    return v && PySet_Contains(set, v) == 1;
}

/* Each set None keeps every event of its phases; other phases are never kept. */
static int keep(Scanner *sc, PyObject *ph, PyObject *cat, PyObject *name) {
    if (!ph || PyUnicode_GET_LENGTH(ph) != 1) return 0;
    switch (PyUnicode_READ_CHAR(ph, 0)) {
    case 'X': return contains(sc->x_cats, cat ? cat : EMPTY_STR);
    case 's': case 'f': return contains(sc->flow_cats, cat ? cat : EMPTY_STR);
    case 'i': case 'I': return contains(sc->instant_names, name ? name : EMPTY_STR);
    case 'M': return contains(sc->meta_names, name ? name : EMPTY_STR);
    default: return 0;
    }
}

static size_t thread_slot(const ThreadSlot *t, size_t cap, PyObject *pid, PyObject *tid) {
    size_t h = (((uintptr_t)pid >> 4) * 0x9E3779B97F4A7C15ull ^ ((uintptr_t)tid >> 4)) * 0xff51afd7ed558ccdull;
    h = (h >> 32) & (cap - 1);
    while (t[h].pair && (t[h].pid != pid || t[h].tid != tid)) h = (h + 1) & (cap - 1);
    return h;
}

static void threads_free(Scanner *sc) {
    for (size_t k = 0; k < sc->threads_cap; k++) Py_XDECREF(sc->threads[k].pair);
    free(sc->threads);
    sc->threads = NULL;
    sc->threads_cap = sc->threads_used = 0;
}

/* The (pid, tid) pair of an event, one object per distinct two (borrowed). A trace has a few
 * threads and streams, whose events interleave: a probe, no allocation, an event. */
static PyObject *thread_of(Scanner *sc, PyObject *pid, PyObject *tid) {
    if (2 * (sc->threads_used + 1) > sc->threads_cap) {
        size_t cap = sc->threads_cap ? 2 * sc->threads_cap : 16;
        ThreadSlot *t = calloc(cap, sizeof(ThreadSlot));
        if (!t) { PyErr_NoMemory(); return NULL; }
        for (size_t k = 0; k < sc->threads_cap; k++)
            if (sc->threads[k].pair) t[thread_slot(t, cap, sc->threads[k].pid, sc->threads[k].tid)] = sc->threads[k];
        free(sc->threads);
        sc->threads = t;
        sc->threads_cap = cap;
    }
    ThreadSlot *slot = &sc->threads[thread_slot(sc->threads, sc->threads_cap, pid, tid)];
    if (!slot->pair) {
        if (!(slot->pair = PyTuple_Pack(2, pid, tid))) return NULL;
        slot->pid = pid;
        slot->tid = tid;
        sc->threads_used++;
    }
    return slot->pair;
}

/* The event of record r, whose strings are ``name``, ``cat``, ``objs`` (borrowed, or NULL). */
static PyObject *new_event(Scanner *sc, const Rec *r, unsigned char ph, PyObject *name, PyObject *cat,
                           PyObject *thread, PyObject *const objs[6]) {
    const uint32_t MEM = F_DEVTYPE | F_MEMB | F_TALLOC | F_TRES | F_ADDR;
    uint32_t flags = r->flags;
    for (int k = 0; k < 6; k++) /* an object field is present where the record has its token */
        flags = objs[k] ? flags | OBJ_FLAGS[k] : flags & ~OBJ_FLAGS[k];
    int op = (flags & ~(uint32_t)(F_ARGS | MEM)) != 0;
    int mem = (flags & MEM) != 0;
    PyTypeObject *type = op && mem ? &EvFullType : op ? &EvOpType : mem ? &EvMemType : &EvType;
    Ev *e = (Ev *)ev_malloc(ev_bytes(flags, op, mem), ph != 'X');
    if (!e) return PyErr_NoMemory();
    PyObject_Init((PyObject *)e, type);
    e->name = name ? name : EMPTY_STR;
    e->cat = cat ? cat : EMPTY_STR;
    e->thread = thread;
    e->ts = r->ts;
    e->dur = r->dur;
    e->flags = flags;
    e->ph = ph;
    Py_INCREF(e->name); Py_INCREF(e->cat); Py_INCREF(e->thread);
    int64_t *slot = (int64_t *)((char *)e + sizeof(EvBase));
    if (op) { /* the present fields in the order of their flags (PACKED), as op_slot finds them */
        const int64_t ints[6] = {r->ext, r->corr, r->seq, r->fwd, r->id, r->nbytes};
        const uint32_t int_flags[6] = {F_EXT, F_CORR, F_SEQ, F_FWD, F_ID, F_NBYTES};
        for (int k = 0; k < 6; k++)
            if (flags & int_flags[k]) *slot++ = ints[k];
        for (int k = 0; k < 6; k++)
            if (objs[k]) {
                Py_INCREF(objs[k]);
                memcpy(slot++, &objs[k], sizeof(PyObject *));
            }
    }
    if (mem) memcpy(slot, &r->devtype, 5 * sizeof(int64_t));
    return (PyObject *)e;
}

static PyObject *ZERO;

static PyObject *make_token(char kind, const char *s, Py_ssize_t n) {
    switch (kind) {
    case 's': return make_str(s, n);
    case 'e': return make_escaped(s, n);
    case 'i': return make_int(s, n);
    default: return make_bytes(s, n); /* 'r' */
    }
}

/* The object of token k of table t (sc's own lexer's, or its worker's), into *out: borrowed, NULL
 * for an absent token. Made on first use; a worker's token takes the object of the same token in
 * the scanner's own table, so one value is one object, whichever thread read it. A long token's
 * object is new each time, held by sc->big until its event is built. 0, or -1 with an exception. */
static int tok_obj_slow(Scanner *sc, Table *t, Tok k, PyObject **out);

static inline __attribute__((always_inline)) int tok_obj(Scanner *sc, Table *t, Tok k, PyObject **out) {
    if (k >= FIRST_ID && !(k & LONG_TOK) && t->objs[k]) { /* the common case: made before */
        *out = t->objs[k];
        return 0;
    }
    if (k < FIRST_ID) {
        *out = k == TOK_NULL ? Py_None : NULL;
        return 0;
    }
    return tok_obj_slow(sc, t, k, out);
}

static int tok_obj_slow(Scanner *sc, Table *t, Tok k, PyObject **out) {
    if (k & LONG_TOK) {
        const Span *sp = &t->longs[k & ~LONG_TOK];
        PyObject *v = make_token(sp->kind, sp->s, sp->n);
        if (!v) return -1;
        if (!sc->big && !(sc->big = PyList_New(0))) { Py_DECREF(v); return -1; }
        int r = PyList_Append(sc->big, v);
        Py_DECREF(v);
        *out = v;
        return r;
    }
    PyObject *v = t->objs[k];
    if (!v) {
        const char *key = t->keys[k];
        Py_ssize_t n = t->klens[k] - 1;
        if (t == &sc->lex.table) {
            if (!(v = make_token(key[0], key + 1, n))) return -1;
        } else {
            Tok own;
            if (table_tok(&sc->lex.table, key[0], key + 1, n, &own) < 0) { PyErr_NoMemory(); return -1; }
            if (tok_obj(sc, &sc->lex.table, own, &v) < 0) return -1;
        }
        t->objs[k] = v;
    }
    *out = v;
    return 0;
}

/* Record r (tokens of table t) as an event appended to ``out``, if the scanner keeps it: each of
 * its strings made (or found) first, kept or not, so a bad string is refused as the typed decode
 * would. 0, or -1 with an exception. */
static inline __attribute__((always_inline)) int emit(Scanner *sc, Table *t, const Rec *r, PyObject *out) {
    PyObject *ph, *cat, *name, *pid, *tid, *bp, *objs[6];
    if (tok_obj(sc, t, r->ph, &ph) < 0 || tok_obj(sc, t, r->cat, &cat) < 0 || tok_obj(sc, t, r->name, &name) < 0 ||
        tok_obj(sc, t, r->pid, &pid) < 0 || tok_obj(sc, t, r->tid, &tid) < 0 || tok_obj(sc, t, r->bp, &bp) < 0)
        return -1;
    for (int k = 0; k < 6; k++)
        if (tok_obj(sc, t, r->objs[k], &objs[k]) < 0) return -1;
    if (!keep(sc, ph, cat, name)) return 0;
    PyObject *thread = thread_of(sc, pid ? pid : ZERO, tid ? tid : ZERO); /* absent: 0, as the typed decode */
    if (!thread) return -1;
    unsigned char letter = (unsigned char)PyUnicode_READ_CHAR(ph, 0); /* keep() took only one-letter phases */
    PyObject *ev = new_event(sc, r, letter, name, cat, thread, objs);
    if (!ev) return -1;
    int rc = PyList_Append(out, ev);
    Py_DECREF(ev);
    return rc;
}

/* Let go of the event's long tokens (its Event, if kept, holds its own references). */
static void event_done(Scanner *sc) {
    sc->lex.table.nlongs = 0;
    if (sc->big && PyList_GET_SIZE(sc->big)) PyList_SetSlice(sc->big, 0, PyList_GET_SIZE(sc->big), NULL);
}

/* ------------------------------------------------------------------ the worker
 * A big block is lexed by two threads: the scanner from its start, and a worker thread (no GIL, no
 * Python object: records of tokens) from the first element it finds past a split point. The
 * worker's place is a guess (a '}' ',' '{' '"' run, which a string or a nested object may also
 * hold): its records are taken only when the scanner, reading on from its own start, arrives at
 * an element at that very byte, where lexing from there is what it would have done itself. Any
 * other arrival drops them, and the scanner reads on alone: the result never depends on the guess,
 * only the speed. The scanner then makes the records' events (objects, the intern table, the list:
 * all under the GIL), and goes on from where the worker stopped (the block's end, an element that
 * does not end in it, or one the worker could not read, which the scanner reads again and refuses
 * or resumes as its own). */
static Py_ssize_t SPLIT_MIN = 256 << 10; /* a block shorter than twice this is scanned alone */
#define REGION_MAX ((Py_ssize_t)8 << 20) /* one job at most (a whole buffer scanned at once: _rescan) */
static Py_ssize_t SPLITS[3]; /* jobs posted, jobs taken, elements the worker read (split_stats) */

#ifndef _WIN32
#include <pthread.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

struct Worker {
    pthread_t th;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    pid_t pid;           /* the process that started it (a forked child has no such thread) */
    int quit, posted, done;
    int cancel;          /* atomic: the scanner no longer wants the job */
    const char *base, *from, *to, *end; /* the job: start past ``from``, stop at an element past ``to`` */
    const char *start, *stop; /* the result: where it began (NULL: no element found) and stopped */
    int stop_state;      /* the scanner's state at ``stop`` (1: at an element, 2: after one) */
    Rec *recs;
    size_t n, cap;
    Lexer lex;
    int64_t ns;          /* the job's time */
};

static int64_t now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
}

/* The first '{' in [p, end) that looks like an element's start: after '}' ',' and before '"'
 * (blanks between). A guess: the scanner checks it (the worker's comment). */
static const char *guess_element(const char *base, const char *p, const char *end) {
    while (p < end) {
        const char *q = memchr(p, ',', end - p);
        if (!q) return NULL;
        const char *a = q;
        while (a > base && is_ws(a[-1])) a--;
        if (a > base && a[-1] == '}') {
            const char *b = past_ws(q + 1, end);
            if (b < end && *b == '{') {
                const char *d = past_ws(b + 1, end);
                if (d < end && *d == '"') return b;
            }
        }
        p = q + 1;
    }
    return NULL;
}

/* The worker's records in a mapping of their own, grown by doubling: unmapped, they go back to the
 * system at once. Had the worker's thread malloc'd them, they would sit in its own malloc arena,
 * which keeps freed pages: a few MB more resident after some loads (a test reloads a trace twelve
 * times). Returns 0 when no memory is left (the old records stay). */
static int recs_grow(Worker *w) {
    size_t cap = w->cap ? 2 * w->cap : 4096;
    void *p = mmap(NULL, cap * sizeof(Rec), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) return 0;
    if (w->recs) {
        memcpy(p, w->recs, w->n * sizeof(Rec));
        munmap(w->recs, w->cap * sizeof(Rec));
    }
    w->recs = p;
    w->cap = cap;
    return 1;
}

static void worker_job(Worker *w) {
    int64_t t0 = now_ns();
    w->n = 0;
    w->lex.table.nlongs = 0;
    w->stop_state = 1;
    w->start = w->stop = guess_element(w->base, w->from, w->end);
    if (!w->start) goto out;
    Cur c = {.base = w->base, .p = w->start, .end = w->end};
    for (;;) {
        if (__atomic_load_n(&w->cancel, __ATOMIC_RELAXED)) break;
        if (w->n == w->cap && !recs_grow(w)) break;
        Rec *r = &w->recs[w->n];
        memset(r, 0, sizeof *r);
        size_t longs = w->lex.table.nlongs;
        if (parse_event(&w->lex, &c, r) < 0) { /* incomplete or refused: the scanner reads it again */
            w->lex.table.nlongs = longs;
            break;
        }
        w->n++;
        w->stop = c.p;
        w->stop_state = 2;
        skip_ws(&c);
        if (c.p < c.end && *c.p == ',') {
            c.p++;
            skip_ws(&c);
            w->stop = c.p;
            w->stop_state = 1;
            if (c.p >= w->to) break;
            continue;
        }
        w->stop = c.p; /* ']', the block's end, or what the scanner refuses */
        break;
    }
out:
    w->ns = now_ns() - t0;
}

static void *worker_run(void *arg) {
    Worker *w = arg;
    pthread_mutex_lock(&w->mu);
    for (;;) {
        while (!w->posted && !w->quit) pthread_cond_wait(&w->cv, &w->mu);
        if (w->quit) break;
        pthread_mutex_unlock(&w->mu);
        worker_job(w);
        pthread_mutex_lock(&w->mu);
        w->posted = 0;
        w->done = 1;
        pthread_cond_broadcast(&w->cv);
    }
    pthread_mutex_unlock(&w->mu);
    return NULL;
}

/* The scanner's worker, started on first use; NULL when none can run (no thread, a forked child). */
static Worker *worker_of(Scanner *sc) {
    Worker *w = sc->worker;
    if (w) return w->pid == getpid() ? w : NULL;
    if (!(w = calloc(1, sizeof *w))) return NULL;
    pthread_mutex_init(&w->mu, NULL);
    pthread_cond_init(&w->cv, NULL);
    w->pid = getpid();
    w->done = 1;
    /* a small stack, as the slab helper's: the lexer's deepest call is MAX_DEPTH levels of
     * skip_value, and a default 8 MB stack counts against a daemon worker's RLIMIT_DATA cap */
    pthread_attr_t at;
    pthread_attr_init(&at);
    pthread_attr_setstacksize(&at, 256 << 10);
    int failed = pthread_create(&w->th, &at, worker_run, w) != 0;
    pthread_attr_destroy(&at);
    if (failed) {
        pthread_mutex_destroy(&w->mu);
        pthread_cond_destroy(&w->cv);
        free(w);
        return NULL;
    }
    sc->worker = w;
    return w;
}

static void worker_post(Worker *w, const char *base, const char *from, const char *to, const char *end) {
    pthread_mutex_lock(&w->mu);
    w->base = base; w->from = from; w->to = to; w->end = end;
    __atomic_store_n(&w->cancel, 0, __ATOMIC_RELAXED);
    w->done = 0;
    w->posted = 1;
    pthread_cond_broadcast(&w->cv);
    pthread_mutex_unlock(&w->mu);
}

/* Wait for the posted job (without the GIL when it is not done yet); ``cancel``: stop it soon. */
static void worker_wait(Worker *w, int cancel) {
    if (cancel) __atomic_store_n(&w->cancel, 1, __ATOMIC_RELAXED);
    pthread_mutex_lock(&w->mu);
    int done = w->done;
    pthread_mutex_unlock(&w->mu);
    if (done) return;
    Py_BEGIN_ALLOW_THREADS
    pthread_mutex_lock(&w->mu);
    while (!w->done) pthread_cond_wait(&w->cv, &w->mu);
    pthread_mutex_unlock(&w->mu);
    Py_END_ALLOW_THREADS
}

static void worker_free(Worker *w) {
    if (!w) return;
    if (w->pid == getpid()) {
        pthread_mutex_lock(&w->mu);
        w->quit = 1;
        pthread_cond_broadcast(&w->cv);
        pthread_mutex_unlock(&w->mu);
        pthread_join(w->th, NULL);
        pthread_mutex_destroy(&w->mu);
        pthread_cond_destroy(&w->cv);
    }
    table_free(&w->lex.table, 0);
    if (w->recs) munmap(w->recs, w->cap * sizeof(Rec));
    free(w);
}
#else
struct Worker { int unused; };
static Worker *worker_of(Scanner *sc) { (void)sc; return NULL; }
static void worker_free(Worker *w) { (void)w; }
#endif

/* scan(buf, pos, final) -> (events, pos, done) */
static PyObject *scanner_scan(Scanner *sc, PyObject *args) {
    Py_buffer view;
    Py_ssize_t pos;
    int final;
    PyObject *out = NULL; /* the caller's list to append to (loader._events: one list, no copy a block) */
    if (!PyArg_ParseTuple(args, "y*np|O!", &view, &pos, &final, &PyList_Type, &out)) return NULL;
    if (out) Py_INCREF(out);
    else if (!(out = PyList_New(0))) { PyBuffer_Release(&view); return NULL; }
    Cur c = {.base = view.buf, .p = (const char *)view.buf + pos, .end = (const char *)view.buf + view.len};
    Worker *w = NULL; /* with a job posted: the worker lexes past ``from`` */
    const char *from = NULL;
#ifndef _WIN32
    const char *posted_at = NULL;
    int64_t posted_ns = 0;
#endif
    if (pos < 0 || pos > view.len) { c.err = "bad position"; goto fail; }
    const char *yielded = c.p;
    if (!sc->pooling && sc->state != 3) { pool_use(1); sc->pooling = 1; }
    while (sc->state != 3) {
        if (c.p - yielded > (1 << 16)) {
            /* Let the reader thread take the GIL for its next read/inflate/hash (which release it
             * again at once): without this it waits for the whole block and the two serialise.
             * Every 64 KB (~0.1 ms of scanning): an inflate takes the GIL back many times a block,
             * each waiting for the next offer (loader.load's switch interval says more; every MB,
             * every 256 KB and every 16 KB were slower on a gzipped trace, and no faster on plain
             * JSON, measured). An offer nobody takes costs an unlocked mutex. */
            Py_BEGIN_ALLOW_THREADS
            Py_END_ALLOW_THREADS
            yielded = c.p;
        }
        skip_ws(&c);
        if (c.p >= c.end) { c.incomplete = 1; break; } /* the whitespace is consumed: linear */
        if (sc->state == 2) { /* after an element: ',' or ']' */
            if (*c.p == ',') { c.p++; sc->state = 1; continue; }
            if (*c.p == ']') { c.p++; sc->state = 3; break; }
            c.err = "expected ',' or ']' after an event";
            goto fail;
        }
        if (sc->state == 0 && *c.p == ']') { c.p++; sc->state = 3; break; }
#ifndef _WIN32
        if (w && c.p >= from) { /* at the first element past the split: the worker's, if it began here */
            int64_t arrived = now_ns();
            worker_wait(w, 0);
            int took = w->start == c.p;
            if (took && w->stop > w->start && w->ns > 0 && arrived > posted_ns) {
                /* the next split from the two rates: the worker's part should end as the scanner
                 * arrives (a moving average: one block's rates are noisy) */
                double mine = (double)(c.p - posted_at) / (double)(arrived - posted_ns);
                double its = (double)(w->stop - w->start) / (double)w->ns;
                double want = 0.85 * its / (mine + its); /* a little early: a late worker holds the scanner up */
                sc->share = 0.7 * sc->share + 0.3 * (want < 0.1 ? 0.1 : want > 0.9 ? 0.9 : want);
            }
            Worker *done = w;
            w = NULL;
            if (took) {
                SPLITS[1]++;
                SPLITS[2] += (Py_ssize_t)done->n;
                for (size_t k = 0; k < done->n; k++) {
                    sc->total++;
                    int r = emit(sc, &done->lex.table, &done->recs[k], out);
                    event_done(sc);
                    if (r < 0) goto fail_py;
                }
                c.p = done->stop;
                sc->state = done->stop_state;
                continue;
            }
        } else if (!w && c.end - c.p >= 2 * SPLIT_MIN && (w = worker_of(sc))) {
            Py_ssize_t region = c.end - c.p < REGION_MAX ? c.end - c.p : REGION_MAX;
            from = c.p + (Py_ssize_t)((double)region * (1.0 - sc->share));
            worker_post(w, c.base, from, c.p + region, c.end);
            SPLITS[0]++;
            posted_at = c.p;
            posted_ns = now_ns();
        }
#endif
        Rec rec;
        memset(&rec, 0, sizeof(rec));
        const char *start = c.p;
        if (parse_event(&sc->lex, &c, &rec) < 0) {
            event_done(sc);
            if (c.err) goto fail;
            c.p = start; /* incomplete: resume at this element with the next block */
            break;
        }
        sc->total++;
        sc->state = 2;
        int r = emit(sc, &sc->lex.table, &rec, out);
        event_done(sc);
        if (r < 0) goto fail_py;
    }
    if (w) worker_wait(w, 1); /* the buffer is let go below: the worker must be off it */
    if (c.incomplete && final && sc->state != 3) { c.err = "truncated"; goto fail; }
    if (sc->pooling && sc->state == 3) { pool_use(-1); sc->pooling = 0; }
    PyObject *res = Py_BuildValue("(Nni)", out, (Py_ssize_t)(c.p - c.base), sc->state == 3);
    PyBuffer_Release(&view);
    return res;
fail:
    if (PyErr_Occurred()) PyErr_Clear();
    PyErr_Format(PyExc_ValueError, "%s at byte %zd of the block", c.err, (Py_ssize_t)(c.p - c.base));
fail_py:
    if (w) worker_wait(w, 1);
    Py_DECREF(out);
    PyBuffer_Release(&view);
    if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "scan failed");
    return NULL;
}

static int scanner_init(Scanner *sc, PyObject *args, PyObject *kw) {
    PyObject *x = Py_None, *fl = Py_None, *ins = Py_None, *meta = Py_None;
    if (!PyArg_ParseTuple(args, "|OOOO", &x, &fl, &ins, &meta)) return -1;
    PyObject *objs[4] = {x, fl, ins, meta};
    for (int i = 0; i < 4; i++)
        if (objs[i] != Py_None && !PyAnySet_Check(objs[i])) {
            PyErr_SetString(PyExc_TypeError, "Scanner(x_cats, flow_cats, instant_names, meta_names): sets or None");
            return -1;
        }
    Py_INCREF(x); Py_INCREF(fl); Py_INCREF(ins); Py_INCREF(meta);
    Py_XSETREF(sc->x_cats, x);
    Py_XSETREF(sc->flow_cats, fl);
    Py_XSETREF(sc->instant_names, ins);
    Py_XSETREF(sc->meta_names, meta);
    if (sc->pooling) { pool_use(-1); sc->pooling = 0; }
    sc->state = 0;
    sc->total = 0;
    sc->share = 0.5;
    threads_free(sc);
    return 0;
}

static void scanner_dealloc(Scanner *sc) {
    if (sc->pooling) pool_use(-1);
    worker_free(sc->worker);
    table_free(&sc->lex.table, 1);
    Py_XDECREF(sc->big);
    Py_XDECREF(sc->x_cats); Py_XDECREF(sc->flow_cats); Py_XDECREF(sc->instant_names); Py_XDECREF(sc->meta_names);
    threads_free(sc);
    Py_TYPE(sc)->tp_free((PyObject *)sc);
}

static PyObject *scanner_total(Scanner *sc, void *c) { return PyLong_FromSsize_t(sc->total); }

static PyMethodDef scanner_methods[] = {
    {"scan", (PyCFunction)scanner_scan, METH_VARARGS,
     "scan(buf, pos, final[, into]) -> (events, pos, done): parse the array elements from pos on; "
     "stops at an element that does not end in buf (pos points to it) or after the closing ']'. "
     "The events are appended to the list ``into`` when given (and it is returned; on an error those "
     "read before it stay appended), else to a new one."},
    {NULL},
};

static PyGetSetDef scanner_getset[] = {
    {"total", (getter)scanner_total, NULL, "array elements seen", NULL},
    {NULL},
};

static PyTypeObject ScannerType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "profd.server.engine._scan.Scanner",
    .tp_basicsize = sizeof(Scanner),
    .tp_dealloc = (destructor)scanner_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Scanner(x_cats, flow_cats, instant_names, meta_names): resumable traceEvents decoder.",
    .tp_methods = scanner_methods,
    .tp_getset = scanner_getset,
    .tp_init = (initproc)scanner_init,
    .tp_new = PyType_GenericNew,
};


/* ------------------------------------------------------------------ skipper
 * sk_run across blocks, for what follows the events: the loader feeds it the bytes as they come. */
typedef struct {
    PyObject_HEAD
    SkState st;
} Skipper;

static int skipper_init(Skipper *self, PyObject *args, PyObject *kw) {
    int level;
    PyObject *keys = Py_None;
    if (!PyArg_ParseTuple(args, "i|O", &level, &keys)) return -1;
    if (level < 2) {
        PyErr_SetString(PyExc_ValueError, "Skipper(level, keys): level >= 2 (the document is level 1)");
        return -1;
    }
    if (keys != Py_None && !PyTuple_Check(keys)) {
        PyErr_SetString(PyExc_TypeError, "Skipper(level, keys): keys a tuple of bytes or None");
        return -1;
    }
    SkState *sk = &self->st;
    Py_CLEAR(sk->keys);
    sk_value(sk, level); /* one value at ``level`` */
    if (keys != Py_None) { /* inside an object at level - 1, after a member: its other members, then '}' */
        Py_INCREF(keys);
        sk->keys = keys;
        sk->base = level - 1;
        sk->n = 1;
        sk->stack[0] = '{';
        sk->state = SK_AFTER;
    }
    return 0;
}

static void skipper_dealloc(Skipper *self) {
    Py_XDECREF(self->st.keys);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* feed(buf, pos, final) -> (pos, status, key) */
static PyObject *skipper_feed(Skipper *self, PyObject *args) {
    Py_buffer view;
    Py_ssize_t pos;
    int final;
    if (!PyArg_ParseTuple(args, "y*np", &view, &pos, &final)) return NULL;
    Cur c = {.base = view.buf, .p = (const char *)view.buf + pos, .end = (const char *)view.buf + view.len};
    int r = -1;
    if (pos < 0 || pos > view.len) c.err = "bad position";
    else r = sk_run(&self->st, &c);
    if (r == 0 && final) c.err = "truncated";
    if (r < 0 || c.err) {
        PyErr_Format(PyExc_ValueError, "%s at byte %zd of the block", c.err, (Py_ssize_t)(c.p - c.base));
        PyBuffer_Release(&view);
        return NULL;
    }
    PyObject *res = r == 2 ? Py_BuildValue("(niy#)", (Py_ssize_t)(c.p - c.base), 2, self->st.kbuf, self->st.klen)
                           : Py_BuildValue("(niO)", (Py_ssize_t)(c.p - c.base), r, Py_None);
    PyBuffer_Release(&view);
    return res;
}

static PyMethodDef skipper_methods[] = {
    {"feed", (PyCFunction)skipper_feed, METH_VARARGS,
     "feed(buf, pos, final) -> (pos, status, key): status 0 needs more (resume at pos), 1 done, "
     "2 a wanted member (key its raw name; pos at its value)."},
    {NULL},
};

static PyTypeObject SkipperType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "profd.server.engine._scan.Skipper",
    .tp_basicsize = sizeof(Skipper),
    .tp_dealloc = (destructor)skipper_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Skipper(level[, keys]): one JSON value at nesting ``level`` skipped across blocks; with "
              "``keys`` (a tuple of bytes), the rest of an object's members instead, handing back those named.",
    .tp_methods = skipper_methods,
    .tp_init = (initproc)skipper_init,
    .tp_new = PyType_GenericNew,
};

/* depth(buf, depth, in_string, escaped, limit) -> (depth, in_string, escaped, over)
 * The nesting rule both decoders apply to the whole file, block by block: a '\\' takes the next
 * byte with it; otherwise a '"' starts or ends a string, and outside strings each '[' or '{' opens
 * a level and each ']' or '}' closes one. ``over`` is whether some prefix opened more than
 * ``limit`` levels. Bytes only (valid JSON or not), so the answer is the same on any input, in
 * any blocks; passes._depth_ref is the same rule for an interpreter without this extension. */
static unsigned char DEPTH_STOP[256]; /* outside a string: '"', '\\' and brackets */
static PyObject *depth_scan(PyObject *mod, PyObject *args) {
    Py_buffer view;
    Py_ssize_t depth, limit;
    int in_str, esc;
    if (!PyArg_ParseTuple(args, "y*nppn", &view, &depth, &in_str, &esc, &limit)) return NULL;
    const unsigned char *p = view.buf, *e = p + view.len;
    int over = 0;
    while (p < e) {
        if (esc) { esc = 0; p++; continue; }
        if (in_str) {
            while (p < e && *p != '"' && *p != '\\') p++;
            if (p >= e) break;
            if (*p++ == '\\') esc = 1;
            else in_str = 0;
            continue;
        }
        while (p < e && !DEPTH_STOP[*p]) p++;
        if (p >= e) break;
        unsigned char ch = *p++;
        if (ch == '"') in_str = 1;
        else if (ch == '\\') esc = 1;
        else if (ch == '[' || ch == '{') { if (++depth > limit) over = 1; }
        else depth--;
    }
    PyBuffer_Release(&view);
    return Py_BuildValue("(nOOO)", depth, in_str ? Py_True : Py_False, esc ? Py_True : Py_False,
                         over ? Py_True : Py_False);
}


/* malloc_arenas(n) -> bool: glibc's malloc gives the process at most n arenas (True where it took
 * the setting). Each thread that mallocs otherwise gets an arena of its own, and the passes run
 * beside the rules keep theirs: 3.5 MB of the 51 MB tiling's 63.5 MB peak, 10 MB at 255 MB
 * (measured with MALLOC_ARENA_MAX=1, the same setting). For profd-client's process
 * (passes.own_the_heap), not at import: a program that embeds the engine keeps its own. */
static PyObject *malloc_arenas(PyObject *mod, PyObject *arg) {
    long n = PyLong_AsLong(arg);
    if (n == -1 && PyErr_Occurred()) return NULL;
#if defined(__GLIBC__) && defined(M_ARENA_MAX)
    return PyBool_FromLong(n > 0 && mallopt(M_ARENA_MAX, (int)n) == 1);
#else
    (void)n;
    Py_RETURN_FALSE;
#endif
}

/* trim_malloc() -> bool: glibc gives the free pages of its heaps back to the system (True where
 * it can: glibc). Without the GIL: the passes beside the rules go on meanwhile. For
 * passes.trim_malloc. */
static PyObject *trim_malloc(PyObject *mod, PyObject *unused) {
    (void)mod;
    (void)unused;
#if defined(__GLIBC__)
    Py_BEGIN_ALLOW_THREADS
    malloc_trim(0);
    Py_END_ALLOW_THREADS
    Py_RETURN_TRUE;
#else
    Py_RETURN_FALSE;
#endif
}

/* split_bytes(n) -> the old value: a block shorter than 2n is scanned by one thread (tests lower
 * it, so their small traces take the two-thread path; 0 and less: never split). */
static PyObject *split_bytes(PyObject *mod, PyObject *arg) {
    Py_ssize_t n = PyLong_AsSsize_t(arg);
    if (n == -1 && PyErr_Occurred()) return NULL;
    Py_ssize_t was = SPLIT_MIN;
    SPLIT_MIN = n > 0 ? n : PY_SSIZE_T_MAX / 4;
    return PyLong_FromSsize_t(was);
}

static PyObject *split_stats(PyObject *mod, PyObject *unused) {
    return Py_BuildValue("(nnn)", SPLITS[0], SPLITS[1], SPLITS[2]);
}

static PyMethodDef module_methods[] = {
    {"split_stats", split_stats, METH_NOARGS, "split_stats() -> (jobs posted, jobs taken, elements the worker read), since import"},
    {"split_bytes", split_bytes, METH_O, "split_bytes(n) -> old n: blocks of 2n bytes and more are lexed by two threads"},
    {"depth", depth_scan, METH_VARARGS, "depth(buf, depth, in_string, escaped, limit) -> (depth, in_string, escaped, over)"},
    {"malloc_arenas", malloc_arenas, METH_O, "malloc_arenas(n) -> bool: at most n malloc arenas (glibc)"},
    {"trim_malloc", trim_malloc, METH_NOARGS, "trim_malloc() -> bool: the heaps' free pages back to the system (glibc)"},
    {NULL},
};

static struct PyModuleDef moddef = {PyModuleDef_HEAD_INIT, "_scan", "traceEvents -> compact events", -1, module_methods};

PyMODINIT_FUNC PyInit__scan(void) {
    for (int b = 0; b < 256; b++) STR_STOP[b] = b < 0x20 || b == '"' || b == '\\';
    for (int b = 0; b < 256; b++) DEPTH_STOP[b] = b == '"' || b == '\\' || b == '[' || b == ']' || b == '{' || b == '}';
    EvFullType.tp_base = EvOpType.tp_base = EvMemType.tp_base = &EvType;
    if (passes_init() < 0) return NULL;
    pool_init();
    if (PyType_Ready(&EvType) < 0 || PyType_Ready(&EvFullType) < 0 || PyType_Ready(&EvOpType) < 0 ||
        PyType_Ready(&EvMemType) < 0 || PyType_Ready(&ArgsType) < 0 ||
        PyType_Ready(&ScannerType) < 0 || PyType_Ready(&SkipperType) < 0) return NULL;
    EMPTY_BYTES = PyBytes_FromStringAndSize("", 0);
    EMPTY_STR = PyUnicode_FromString("");
    ZERO = PyLong_FromLong(0);
    if (!EMPTY_BYTES || !EMPTY_STR || !ZERO) return NULL;
    PyObject *m = PyModule_Create(&moddef);
    if (!m) return NULL;
    if (PyModule_AddFunctions(m, PASS_METHODS) < 0 || sha256_init(m) < 0) { Py_DECREF(m); return NULL; }
    Py_INCREF(&ScannerType);
    Py_INCREF(&EvType);
    PyModule_AddObject(m, "Scanner", (PyObject *)&ScannerType);
    PyModule_AddObject(m, "Event", (PyObject *)&EvType);
    Py_INCREF(&SkipperType);
    PyModule_AddObject(m, "Skipper", (PyObject *)&SkipperType);
    PyModule_AddIntConstant(m, "MAX_DEPTH", MAX_DEPTH);
    return m;
}
