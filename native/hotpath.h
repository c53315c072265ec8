/* Shared by the parts of quorumlog._hotpath: the entry layout (entry.py's docstring), its big-endian
 * fields, the argument conversions, and the way back to the Python side. */
#ifndef QUORUMLOG_HOTPATH_H
#define QUORUMLOG_HOTPATH_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <limits.h>
#include <stdint.h>
#include <string.h>

#include "crc32.h"

enum { HEADER_SIZE = 48, CHAIN_SPAN = 36, BODY_CRC_AT = 40, INDEX_UNIT_SIZE = 32, META_SIZE = 28, BLANK_SIZE = 8 };
enum { MAGIC_NORMAL = 1, MAGIC_CONFIG = 3, MAGIC_BLANK = -1 };
/* walk_segment's outcomes. */
enum { WALK_DONE = 0, WALK_BLANK = 1, WALK_BAD = 2, WALK_UNSUPPORTED = 3 };

/* -- big-endian fields ------------------------------------------------------------------------- */

static inline uint32_t get32(const unsigned char *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | (uint32_t)p[3];
}

static inline uint64_t get64(const unsigned char *p)
{
    return (uint64_t)get32(p) << 32 | get32(p + 4);
}

static inline void put32(unsigned char *p, uint32_t v)
{
    p[0] = (unsigned char)(v >> 24);
    p[1] = (unsigned char)(v >> 16);
    p[2] = (unsigned char)(v >> 8);
    p[3] = (unsigned char)v;
}

static inline void put64(unsigned char *p, uint64_t v)
{
    put32(p, (uint32_t)(v >> 32));
    put32(p + 4, (uint32_t)v);
}

/* The 48-byte header: magic i32, size i32, index i64, term i64, pos i64, channel i32, chain_crc u32,
 * body_crc u32, body_size i32. */
typedef struct {
    int32_t magic, size;
    int64_t index, term, pos;
    int32_t channel;
    uint32_t chain, body_crc;
    int32_t body_size;
} header;

static inline void read_header(const unsigned char *p, header *h)
{
    h->magic = (int32_t)get32(p);
    h->size = (int32_t)get32(p + 4);
    h->index = (int64_t)get64(p + 8);
    h->term = (int64_t)get64(p + 16);
    h->pos = (int64_t)get64(p + 24);
    h->channel = (int32_t)get32(p + 32);
    h->chain = get32(p + 36);
    h->body_crc = get32(p + 40);
    h->body_size = (int32_t)get32(p + 44);
}

/* check_entry's rules on the header alone: a valid magic, sizes that agree with each other and max_body. */
static inline int header_ok(const header *h, long long max_body)
{
    return h->magic >= MAGIC_NORMAL && h->magic <= MAGIC_CONFIG && h->body_size >= 0 && h->body_size <= max_body
        && (h->channel == 0 || h->channel == META_SIZE)
        && (int64_t)h->size == (int64_t)HEADER_SIZE + h->channel + h->body_size;
}

/* The chain CRC of the header at p: bytes 0..35, then body_crc, seeded with the predecessor's. */
static inline uint32_t chain_of(const unsigned char *p, uint32_t prev)
{
    return ql_crc32(ql_crc32(prev, p, CHAIN_SPAN), p + BODY_CRC_AT, 4);
}

/* -- arguments --------------------------------------------------------------------------------- */

/* An int that fits int64: 1; anything else 0, with no error set (the caller hands the call to Python). */
static inline int to_i64(PyObject *o, long long *out)
{
    int overflow;
    long long v;
    if (!PyLong_Check(o))
        return 0;
    v = PyLong_AsLongLongAndOverflow(o, &overflow);
    if (overflow || (v == -1 && PyErr_Occurred())) {
        PyErr_Clear();
        return 0;
    }
    *out = v;
    return 1;
}

/* The seed zlib.crc32 takes from an int (its low 32 bits): 1; a non-int 0, with no error set. */
static inline int to_seed(PyObject *o, uint32_t *out)
{
    unsigned long v;
    if (!PyLong_Check(o))
        return 0;
    v = PyLong_AsUnsignedLongMask(o);
    if (v == (unsigned long)-1 && PyErr_Occurred()) {
        PyErr_Clear();
        return 0;
    }
    *out = (uint32_t)v;
    return 1;
}

/* The bytes of a bytes, bytearray or memoryview whose len() and slices count single bytes (one
 * dimension, unsigned bytes, contiguous): 1 with the buffer held; anything else 0, no error set. */
static inline int get_bytes(PyObject *o, Py_buffer *view)
{
    if (!PyBytes_CheckExact(o) && !PyByteArray_CheckExact(o) && !PyMemoryView_Check(o))
        return 0;
    if (PyObject_GetBuffer(o, view, PyBUF_FULL_RO) < 0) {
        PyErr_Clear();
        return 0;
    }
    /* Format "B" alone: a memoryview of another format does not take slice assignment from bytes. */
    if (view->ndim != 1 || view->itemsize != 1 || !PyBuffer_IsContiguous(view, 'C')
        || (view->format != NULL && strcmp(view->format, "B") != 0)) {
        PyBuffer_Release(view);
        return 0;
    }
    return 1;
}

/* -- the Python side ----------------------------------------------------------------------------- */

/* Python objects this module hands work to, looked up on first use (their modules import this one). */
typedef enum { PY_CORRUPT_ENTRY_ERROR, PY_FAIL_RUN, PY_ENCODE_RUN, PY_VERIFY_RUN, PY_INDEX_UNITS, PY_REFS } py_ref;

/* The object (a borrowed reference), or NULL with an error set. */
PyObject *ql_python(py_ref which);

/* The Python version called with the arguments this call was given. */
PyObject *ql_reference(py_ref which, PyObject *args, PyObject *kw);

/* Raise CorruptEntryError(message); returns NULL. */
PyObject *ql_corrupt(const char *format, ...);

PyObject *ql_encode_run(PyObject *module, PyObject *args, PyObject *kw);
PyObject *ql_verify_run(PyObject *module, PyObject *args, PyObject *kw);
PyObject *ql_walk_segment(PyObject *module, PyObject *const *args, Py_ssize_t nargs);
PyObject *ql_index_units(PyObject *module, PyObject *args);
extern const char ql_encode_run_doc[], ql_verify_run_doc[], ql_walk_segment_doc[], ql_index_units_doc[];

#endif
