/* profd.server.engine._scan: what the scanner (_scan.c) and the passes over its events
 * (_passes.c) share: the event's layouts and flags. One extension module, two files: reading the
 * events, and computing on them (each pass has a Python twin in server/engine/passes.py). */
#ifndef PROFD_SCAN_H
#define PROFD_SCAN_H
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stddef.h>
#include <stdint.h>

/* ------------------------------------------------------------------ the event type */
enum {
    F_EXT = 1 << 0, F_CORR = 1 << 1, F_SEQ = 1 << 2, F_FWD = 1 << 3, F_ID = 1 << 4,
    F_DEVTYPE = 1 << 5, F_MEMB = 1 << 6, F_TALLOC = 1 << 7, F_TRES = 1 << 8, F_NBYTES = 1 << 9,
    F_ARGS = 1 << 10, F_ADDR = 1 << 11,
    F_DEVICE = 1 << 12, F_STREAM = 1 << 13, /* args.device / args.stream not null */
};

/* Four layouts sharing one initial sequence, all this module's Event (the others are subtypes):
 * - EvBase, 64 bytes: no read arg present (python frames, most annotations: a quarter of a trace);
 * - EvOp, 160 bytes: op/launch/kernel args (ids, shapes, grid, ...), the Ev prefix up to devtype;
 * - EvMem, 104 bytes: allocator samples (device type, bytes, totals, address);
 * - Ev, 200 bytes: both kinds at once (never in a Kineto trace, but legal).
 * The thread is one pointer to the (pid, tid) pair the scanner made once per distinct pair, and
 * the phase one byte (the scanner keeps only events of a one-letter phase): 16 bytes an event
 * less than a pointer each, which the allocator's 16-byte size classes turn into 16 bytes saved. */
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

typedef struct {
    EV_BASE_FIELDS
    PyObject *dims, *types, *grid, *block, *aname, *call_from;   /* interned or NULL */
    int64_t ext, corr, seq, fwd, id, nbytes;
    int64_t devtype, memb, talloc, tres, addr; /* in this order in EvMem too */
} Ev;

typedef struct {
    EV_BASE_FIELDS
    int64_t devtype, memb, talloc, tres, addr;
} EvMem;

#define OP_SIZE offsetof(Ev, devtype)

typedef struct {
    PyObject_HEAD
    Ev *ev;
} ArgsView;

extern PyTypeObject EvType, EvOpType, EvMemType, EvFullType;
#define IS_FULL(e) (Py_TYPE(e) == &EvFullType)
#define HAS_OP(e) (Py_TYPE(e) == &EvOpType || IS_FULL(e))

/* devtype, memb, talloc, tres, addr of an event that has them, else NULL */
static inline const int64_t *mem_fields(const void *e) {
    if (IS_FULL(e)) return &((const Ev *)e)->devtype;
    if (Py_TYPE(e) == &EvMemType) return &((const EvMem *)e)->devtype;
    return NULL;
}

/* A flag is set only where the event's layout holds the value (new_event picks the layout). */
static inline PyObject *int_or_none(const Ev *e, uint32_t flag, int64_t v) {
    if (e->flags & flag) return PyLong_FromLongLong(v);
    Py_RETURN_NONE;
}

/* _passes.c: the module's pass functions, and what they need made once at import */
extern PyMethodDef PASS_METHODS[];
int passes_init(void);

#endif
