/* profd.server.engine._scan.Sha256: the trace's content key (sha256 of its JSON bytes) with the
 * CPU's SHA extensions (SHA-NI), where the CPU has them.
 *
 * Why not hashlib: it is OpenSSL's, as fast (both ~1 GB/s here with SHA-NI), but loading it
 * (libcrypto and its digest tables) costs 3.7 MiB of resident memory, 7% of a 51 MB trace's whole
 * analysis (issue 32: peak RSS at most the file's size). The interpreter's own sha256 costs
 * nothing to load and hashes 5x slower (~200 MB/s), which a 1 GB trace would wait for. This is the
 * one digest the engine computes, so the instructions are used directly: 64 rounds of two
 * instructions per four rounds, the message schedule in two more.
 *
 * Where the CPU lacks them (older x86, other architectures) ``sha256_native()`` is False and the
 * loader takes hashlib. tests/test_loader_stream.py checks this against hashlib on every length around a
 * block and padding boundary and on split updates.
 *
 * The rounds follow Intel's published use of the instructions ("Intel SHA Extensions", Gulley et
 * al., 2013), as in Jeffrey Walton's public-domain SHA-Intrinsics (github.com/noloader). */
#include "_scan.h"
#include <string.h>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <cpuid.h>
#include <immintrin.h>
#define HAVE_SHA_NI_CODE 1
#else
#define HAVE_SHA_NI_CODE 0
#endif

static const uint32_t K256[64] = {
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
    0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
    0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
    0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
    0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
    0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
    0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
    0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2,
};

static const uint32_t H0[8] = {0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
                               0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19};

#if HAVE_SHA_NI_CODE
/* The state as the instructions hold it: ABEF in one register, CDGH in the other. */
__attribute__((target("sha,sse4.1,ssse3"))) static void blocks_ni(uint32_t state[8], const uint8_t *p, size_t n) {
    const __m128i bswap = _mm_set_epi64x(0x0c0d0e0f08090a0bULL, 0x0405060700010203ULL);
    __m128i tmp = _mm_loadu_si128((const __m128i *)&state[0]);    /* ABCD */
    __m128i st1 = _mm_loadu_si128((const __m128i *)&state[4]);    /* EFGH */
    tmp = _mm_shuffle_epi32(tmp, 0xB1);                            /* CDAB */
    st1 = _mm_shuffle_epi32(st1, 0x1B);                            /* EFGH -> HGFE */
    __m128i st0 = _mm_alignr_epi8(tmp, st1, 8);                    /* ABEF */
    st1 = _mm_blend_epi16(st1, tmp, 0xF0);                         /* CDGH */
    for (; n; n--, p += 64) {
        __m128i abef = st0, cdgh = st1, w[16];
#pragma GCC unroll 16 /* the schedule's words in registers: 1.4x the loop's speed */
        for (int i = 0; i < 16; i++) {
            if (i < 4)
                w[i] = _mm_shuffle_epi8(_mm_loadu_si128((const __m128i *)(p + 16 * i)), bswap);
            else /* W[t] = s1(W[t-2]) + W[t-7] + s0(W[t-15]) + W[t-16], four words at a time */
                w[i] = _mm_sha256msg2_epu32(
                    _mm_add_epi32(_mm_sha256msg1_epu32(w[i - 4], w[i - 3]), _mm_alignr_epi8(w[i - 1], w[i - 2], 4)),
                    w[i - 1]);
            __m128i msg = _mm_add_epi32(w[i], _mm_loadu_si128((const __m128i *)&K256[4 * i]));
            st1 = _mm_sha256rnds2_epu32(st1, st0, msg);
            st0 = _mm_sha256rnds2_epu32(st0, st1, _mm_shuffle_epi32(msg, 0x0E));
        }
        st0 = _mm_add_epi32(st0, abef);
        st1 = _mm_add_epi32(st1, cdgh);
    }
    tmp = _mm_shuffle_epi32(st0, 0x1B);                            /* FEBA */
    st1 = _mm_shuffle_epi32(st1, 0xB1);                            /* DCHG */
    st0 = _mm_blend_epi16(tmp, st1, 0xF0);                         /* DCBA */
    st1 = _mm_alignr_epi8(st1, tmp, 8);                            /* ABEF -> HGFE */
    _mm_storeu_si128((__m128i *)&state[0], st0);
    _mm_storeu_si128((__m128i *)&state[4], st1);
}

static int cpu_has_sha_ni(void) {
    unsigned a, b, c, d;
    if (!__get_cpuid(1, &a, &b, &c, &d)) return 0;
    int sse41 = (c >> 19) & 1, ssse3 = (c >> 9) & 1;
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return 0;
    return sse41 && ssse3 && ((b >> 29) & 1);
}
#else
static void blocks_ni(uint32_t state[8], const uint8_t *p, size_t n) { (void)state, (void)p, (void)n; } /* never called */
#endif

static int HAVE_NI = 0; /* set once at import: the CPU has the instructions */

typedef struct {
    PyObject_HEAD
    uint32_t state[8];
    uint64_t length;       /* bytes hashed so far */
    uint8_t tail[64];      /* the bytes past the last whole block */
    size_t ntail;
    PyThread_type_lock lock; /* an update releases the GIL: two threads must not interleave */
} Sha256Object;

/* The GIL is let go for updates at least this long (so the scanner runs meanwhile); shorter ones
 * hash in less time than the hand-off would take. */
#define RELEASE_GIL_BYTES 4096

static void sha_feed(Sha256Object *h, const uint8_t *p, size_t n) {
    h->length += n;
    if (h->ntail) {
        size_t take = 64 - h->ntail < n ? 64 - h->ntail : n;
        memcpy(h->tail + h->ntail, p, take);
        h->ntail += take, p += take, n -= take;
        if (h->ntail < 64) return;
        blocks_ni(h->state, h->tail, 1);
        h->ntail = 0;
    }
    if (n >= 64) blocks_ni(h->state, p, n / 64);
    p += n - n % 64, n %= 64;
    memcpy(h->tail, p, n);
    h->ntail = n;
}

static PyObject *sha_new(PyTypeObject *type, PyObject *args, PyObject *kw) {
    if (!HAVE_NI) {
        PyErr_SetString(PyExc_RuntimeError, "this CPU has no SHA extensions (use hashlib)");
        return NULL;
    }
    if ((kw && PyDict_GET_SIZE(kw)) || PyTuple_GET_SIZE(args)) {
        PyErr_SetString(PyExc_TypeError, "Sha256() takes no arguments");
        return NULL;
    }
    Sha256Object *h = (Sha256Object *)type->tp_alloc(type, 0);
    if (!h) return NULL;
    memcpy(h->state, H0, sizeof H0);
    h->lock = PyThread_allocate_lock();
    if (!h->lock) {
        Py_DECREF(h);
        return PyErr_NoMemory();
    }
    return (PyObject *)h;
}

static void sha_dealloc(Sha256Object *h) {
    if (h->lock) PyThread_free_lock(h->lock);
    Py_TYPE(h)->tp_free((PyObject *)h);
}

static PyObject *sha_update(Sha256Object *h, PyObject *arg) {
    Py_buffer view;
    if (PyObject_GetBuffer(arg, &view, PyBUF_SIMPLE) < 0) return NULL;
    PyThreadState *released = view.len >= RELEASE_GIL_BYTES ? PyEval_SaveThread() : NULL;
    PyThread_acquire_lock(h->lock, 1);
    sha_feed(h, view.buf, (size_t)view.len);
    PyThread_release_lock(h->lock);
    if (released) PyEval_RestoreThread(released);
    PyBuffer_Release(&view);
    Py_RETURN_NONE;
}

#ifndef _WIN32
#include <errno.h>
#include <unistd.h>
/* The bytes update_from reads at a time: within the L2 cache, so each is hashed where the copy out
 * of the page cache left it. */
#define FROM_FD_BYTES (256 << 10)

/* update_from(fd, offset, length) -> int: hash the next ``length`` bytes of the file open at ``fd``
 * from ``offset`` (pread: the descriptor's own offset is left alone), without the GIL from the
 * first read to the last, so a thread can hash a file beside Python's work and take the GIL once.
 * Returns how many bytes it hashed: fewer than ``length`` when the file ended first. */
static PyObject *sha_update_from(Sha256Object *h, PyObject *args) {
    int fd;
    long long offset, length;
    if (!PyArg_ParseTuple(args, "iLL", &fd, &offset, &length)) return NULL;
    if (offset < 0 || length < 0) {
        PyErr_SetString(PyExc_ValueError, "update_from: a negative offset or length");
        return NULL;
    }
    uint8_t *buf = PyMem_RawMalloc(FROM_FD_BYTES);
    if (!buf) return PyErr_NoMemory();
    long long done = 0;
    int err = 0;
    Py_BEGIN_ALLOW_THREADS
    PyThread_acquire_lock(h->lock, 1);
    while (done < length) {
        size_t want = length - done < FROM_FD_BYTES ? (size_t)(length - done) : FROM_FD_BYTES;
        ssize_t got = pread(fd, buf, want, (off_t)(offset + done));
        if (got < 0 && errno == EINTR) continue; /* the main thread runs the handler */
        if (got < 0) { err = errno; break; }
        if (got == 0) break;
        sha_feed(h, buf, (size_t)got);
        done += got;
    }
    PyThread_release_lock(h->lock);
    Py_END_ALLOW_THREADS
    PyMem_RawFree(buf);
    if (err) {
        errno = err;
        return PyErr_SetFromErrno(PyExc_OSError);
    }
    return PyLong_FromLongLong(done);
}
#endif

/* The digest of what was fed so far; the object can be fed on (as hashlib's). */
static PyObject *sha_hexdigest(Sha256Object *h, PyObject *unused) {
    uint32_t st[8];
    uint8_t pad[128] = {0};
    PyThread_acquire_lock(h->lock, 1);
    memcpy(st, h->state, sizeof st);
    size_t n = h->ntail;
    memcpy(pad, h->tail, n);
    uint64_t bits = h->length * 8;
    PyThread_release_lock(h->lock);
    pad[n] = 0x80;
    size_t total = n + 1 + 8 <= 64 ? 64 : 128;
    for (int i = 0; i < 8; i++) pad[total - 1 - i] = (uint8_t)(bits >> (8 * i));
    blocks_ni(st, pad, total / 64);
    static const char hex[] = "0123456789abcdef";
    char out[64];
    for (int i = 0; i < 32; i++) {
        uint8_t byte = (uint8_t)(st[i / 4] >> (24 - 8 * (i % 4)));
        out[2 * i] = hex[byte >> 4];
        out[2 * i + 1] = hex[byte & 15];
    }
    return PyUnicode_FromStringAndSize(out, 64);
}

static PyMethodDef sha_methods[] = {
    {"update", (PyCFunction)sha_update, METH_O, "update(bytes-like): hash these bytes next"},
#ifndef _WIN32
    {"update_from", (PyCFunction)sha_update_from, METH_VARARGS,
     "update_from(fd, offset, length) -> int: hash the file's next bytes, read without the GIL; "
     "returns how many (fewer where the file ends first)"},
#endif
    {"hexdigest", (PyCFunction)sha_hexdigest, METH_NOARGS, "the sha256 of the bytes fed so far, in hex"},
    {NULL},
};

static PyTypeObject Sha256Type = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "profd.server.engine._scan.Sha256",
    .tp_basicsize = sizeof(Sha256Object),
    .tp_dealloc = (destructor)sha_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "sha256 with the CPU's SHA extensions (only where sha256_native() is True)",
    .tp_methods = sha_methods,
    .tp_new = sha_new,
};

static PyObject *sha256_native(PyObject *mod, PyObject *unused) { return PyBool_FromLong(HAVE_NI); }

static PyMethodDef sha_module_methods[] = {
    {"sha256_native", sha256_native, METH_NOARGS, "sha256_native() -> bool: Sha256 works on this CPU"},
    {NULL},
};

int sha256_init(PyObject *m) {
#if HAVE_SHA_NI_CODE
    HAVE_NI = cpu_has_sha_ni();
#endif
    if (PyType_Ready(&Sha256Type) < 0) return -1;
    Py_INCREF(&Sha256Type);
    if (PyModule_AddObject(m, "Sha256", (PyObject *)&Sha256Type) < 0) {
        Py_DECREF(&Sha256Type);
        return -1;
    }
    return PyModule_AddFunctions(m, sha_module_methods);
}
