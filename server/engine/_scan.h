/* profd.server.engine._scan: what the scanner (_scan.c) and the passes over its events
 * (_passes.c) share: the event's layouts and flags. One extension module, two files: reading the
 * events, and computing on them (each pass has a Python twin in server/engine/passes.py). */
#ifndef PROFD_SCAN_H
#define PROFD_SCAN_H
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* ------------------------------------------------------------------ the event type */
enum {
    F_EXT = 1 << 0, F_CORR = 1 << 1, F_SEQ = 1 << 2, F_FWD = 1 << 3, F_ID = 1 << 4,
    F_DEVTYPE = 1 << 5, F_MEMB = 1 << 6, F_TALLOC = 1 << 7, F_TRES = 1 << 8, F_NBYTES = 1 << 9,
    F_ARGS = 1 << 10, F_ADDR = 1 << 11,
    F_DEVICE = 1 << 12, F_STREAM = 1 << 13, /* args.device / args.stream not null */
    /* an object field present (set by new_event from the parsed event's non-NULL pointers) */
    F_DIMS = 1 << 14, F_TYPES = 1 << 15, F_GRID = 1 << 16, F_BLOCK = 1 << 17, F_ANAME = 1 << 18,
    F_CALL_FROM = 1 << 19,
};
/* The op fields an event keeps only when present, one 8-byte slot each after the prefix, in the
 * order of their flag bits (op_slot). */
#define PACKED (F_EXT | F_CORR | F_SEQ | F_FWD | F_ID | F_NBYTES | F_DIMS | F_TYPES | F_GRID | F_BLOCK | \
                F_ANAME | F_CALL_FROM)

/* Four layouts sharing one initial sequence (EvBase), all this module's Event (the others are
 * subtypes):
 * - Event, 64 bytes: no read arg present (python frames, most annotations: a quarter of a trace);
 * - OpEvent: op/launch/kernel args (ids, shapes, grid, ...), the prefix and then only the op fields
 *   the event has, 8 bytes each in the order of their flags (PACKED; op_slot finds one): a CPU op
 *   with its ids and shapes 88 bytes, a kernel 96, a runtime call 80, a flow end 72, where a slot
 *   for every field took 160 (12 slots, of which a trace's events fill 1 to 5);
 * - EvMem, 104 bytes: allocator samples (device type, bytes, totals, address);
 * - EventWithArgs: both kinds at once (never in a Kineto trace, but legal): the op slots, then the
 *   allocator's five.
 * The thread is one pointer to the (pid, tid) pair the scanner made once per distinct pair, and
 * the phase one byte (the scanner keeps only events of a one-letter phase). */
#define EV_BASE_FIELDS \
    PyObject_HEAD \
    PyObject *name, *cat; /* interned, never NULL */ \
    PyObject *thread; /* (pid, tid), shared by the events of one thread; never NULL */ \
    double ts, dur; \
    uint32_t flags; \
    unsigned char ph; /* the phase letter ('X', 'i', 's', ...) */

#define EV_PID(e) PyTuple_GET_ITEM(((const EvBase *)(e))->thread, 0) /* borrowed */
#define EV_TID(e) PyTuple_GET_ITEM(((const EvBase *)(e))->thread, 1)

typedef struct {
    EV_BASE_FIELDS
} EvBase;

/* An event as stored: its fields past the prefix are read through op_obj, op_int, mem_fields. */
typedef EvBase Ev;

typedef struct {
    EV_BASE_FIELDS
    int64_t devtype, memb, talloc, tres, addr;
} EvMem;

typedef struct {
    PyObject_HEAD
    Ev *ev;
} ArgsView;

extern PyTypeObject EvType, EvOpType, EvMemType, EvFullType;
#define IS_FULL(e) (Py_TYPE(e) == &EvFullType)
#define HAS_OP(e) (Py_TYPE(e) == &EvOpType || IS_FULL(e))

/* The slots past the prefix of an event with op fields. */
static inline const int64_t *op_slots(const void *e) {
    return (const int64_t *)((const char *)e + sizeof(EvBase));
}

/* The slot of op field ``f`` (one F_ flag of PACKED) when the event has it, else NULL. */
static inline const int64_t *op_slot(const void *e, uint32_t f) {
    uint32_t flags = ((const EvBase *)e)->flags;
    if (!(flags & f) || !HAS_OP(e)) return NULL;
    return op_slots(e) + __builtin_popcount(flags & PACKED & (f - 1));
}

/* An object field (dims, types, grid, block, aname, call_from; F_DIMS ...): borrowed, or NULL. */
static inline PyObject *op_obj(const void *e, uint32_t f) {
    const int64_t *s = op_slot(e, f);
    return s ? *(PyObject *const *)s : NULL;
}

/* An id field (ext, corr, seq, fwd, id, nbytes; F_EXT ...), 0 when absent (as the flags say). */
static inline int64_t op_int(const void *e, uint32_t f) {
    const int64_t *s = op_slot(e, f);
    return s ? *s : 0;
}

/* devtype, memb, talloc, tres, addr of an event that has them, else NULL */
static inline const int64_t *mem_fields(const void *e) {
    if (IS_FULL(e)) return op_slots(e) + __builtin_popcount(((const EvBase *)e)->flags & PACKED);
    if (Py_TYPE(e) == &EvMemType) return &((const EvMem *)e)->devtype;
    return NULL;
}

/* A flag is set only where the event's layout holds the value (new_event picks the layout). */
static inline PyObject *int_or_none(const Ev *e, uint32_t flag, int64_t v) {
    if (e->flags & flag) return PyLong_FromLongLong(v);
    Py_RETURN_NONE;
}

/* calloc for a table that is read before it is written (a hash table probed, sums added to).
 * calloc's fresh pages are the kernel's shared zero page until written: each page of such a table
 * faulted twice, and the second fault flushed the TLB of the other core (an interrupt to whatever
 * thread ran there; ~8,000 in a 1 GB analysis, most from launchers' table). Written first here,
 * each page faults once. */
static inline void *zeroed(size_t n, size_t size) {
    if (size && n > SIZE_MAX / size) return NULL;
    size_t bytes = n * size;
    void *p = malloc(bytes ? bytes : 1);
    if (p) memset(p, 0, bytes);
    return p;
}

/* _passes.c: the module's pass functions, and what they need made once at import */
extern PyMethodDef PASS_METHODS[];
int passes_init(void);
int sha256_init(PyObject *m); /* _sha256.c: adds Sha256 and sha256_native to the module */

#endif
