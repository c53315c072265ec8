/* encode_run: a leader's batch of bodies as entries and index units (entry.encode_run). */
#include "hotpath.h"

/* metas (offset -> META_SIZE bytes) as a table of count slots of 1 + META_SIZE bytes (a flag, the run).
 * 1 with *table set (NULL for None or an empty dict); 0 when metas is not what this code takes (not
 * a dict, a key not an int in range, a value not META_SIZE bytes: Python refuses it); -1 on error. */
static int meta_table(PyObject *metas, Py_ssize_t count, unsigned char **table)
{
    Py_ssize_t i = 0;
    PyObject *key, *value;
    *table = NULL;
    if (metas == NULL || metas == Py_None || (PyDict_CheckExact(metas) && PyDict_GET_SIZE(metas) == 0))
        return 1;
    if (!PyDict_CheckExact(metas))
        return 0;
    *table = PyMem_Calloc((size_t)count, 1 + META_SIZE);
    if (*table == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    while (PyDict_Next(metas, &i, &key, &value)) {
        long long at;
        Py_buffer v;
        if (!PyLong_CheckExact(key) || !to_i64(key, &at) || at < 0 || at >= count || !get_bytes(value, &v))
            goto refuse;
        if (v.len != META_SIZE) {
            PyBuffer_Release(&v);
            goto refuse;
        }
        (*table)[at * (1 + META_SIZE)] = 1;
        memcpy(*table + at * (1 + META_SIZE) + 1, v.buf, META_SIZE);
        PyBuffer_Release(&v);
    }
    return 1;
refuse:
    PyMem_Free(*table);
    *table = NULL;
    return 0;
}

/* The bytes of one body: bytes directly, anything else through the buffer protocol (*held then set). */
static int body_bytes(PyObject *b, Py_buffer *v, int *held, const unsigned char **p, Py_ssize_t *len)
{
    if (PyBytes_CheckExact(b)) {
        *held = 0;
        *p = (const unsigned char *)PyBytes_AS_STRING(b);
        *len = PyBytes_GET_SIZE(b);
        return 1;
    }
    if (!get_bytes(b, v))
        return 0;
    *held = 1;
    *p = v->buf;
    *len = v->len;
    return 1;
}

const char ql_encode_run_doc[] =
"encode_run(bodies, magic, first_index, term, first_pos, prev_chain, positions, metas=None)\n--\n\n"
"entry.encode_run in C: (data, index_units, last_chain), each position appended to positions.";

PyObject *ql_encode_run(PyObject *module, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"bodies", "magic", "first_index", "term", "first_pos", "prev_chain", "positions",
                             "metas", NULL};
    PyObject *bodies, *o_magic, *o_first, *o_term, *o_pos, *o_prev, *positions, *metas = NULL;
    PyObject *data = NULL, *units = NULL, *last = NULL, *result = NULL;
    PyObject **items;
    long long magic, first, term, first_pos, off;
    uint32_t chain;
    Py_ssize_t n, i, *lens = NULL;
    unsigned char *table = NULL, *d, *u;
    int r;
    (void)module;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "OOOOOOO|O:encode_run", kwlist, &bodies, &o_magic, &o_first, &o_term,
                                     &o_pos, &o_prev, &positions, &metas))
        return NULL;
    if (!(PyList_CheckExact(bodies) || PyTuple_CheckExact(bodies)) || !PyList_CheckExact(positions)
        || positions == bodies)
        goto python;
    n = PySequence_Fast_GET_SIZE(bodies);
    if (n == 0 || !to_i64(o_magic, &magic) || magic < INT32_MIN || magic > INT32_MAX || !to_i64(o_first, &first)
        || first > LLONG_MAX - (n - 1) || !to_i64(o_term, &term) || !to_i64(o_pos, &first_pos)
        || !to_seed(o_prev, &chain))
        goto python;
    r = meta_table(metas, n, &table);
    if (r < 0)
        return NULL;
    if (r == 0)
        goto python;
    lens = PyMem_Malloc((size_t)n * sizeof(Py_ssize_t));
    if (lens == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    /* First pass: every body is bytes-like and every field fits, else Python raises where it would. */
    items = PySequence_Fast_ITEMS(bodies);
    off = 0;
    for (i = 0; i < n; i++) {
        Py_buffer v;
        const unsigned char *p;
        int held;
        long long size, pos;
        if (!body_bytes(items[i], &v, &held, &p, &lens[i]))
            goto python;
        if (held)
            PyBuffer_Release(&v);
        size = (long long)HEADER_SIZE + (table && table[i * (1 + META_SIZE)] ? META_SIZE : 0);
        if (lens[i] > INT32_MAX - size || __builtin_add_overflow(first_pos, off, &pos)
            || __builtin_add_overflow(off, size + lens[i], &off) || off > PY_SSIZE_T_MAX)
            goto python;
    }
    data = PyByteArray_FromStringAndSize(NULL, (Py_ssize_t)off);
    units = PyByteArray_FromStringAndSize(NULL, n * INDEX_UNIT_SIZE);
    if (data == NULL || units == NULL)
        goto done;
    d = (unsigned char *)PyByteArray_AS_STRING(data);
    u = (unsigned char *)PyByteArray_AS_STRING(units);
    off = 0;
    for (i = 0; i < n; i++) {
        Py_buffer v;
        const unsigned char *body, *meta;
        Py_ssize_t len;
        int held = 0, channel;
        long long size, pos = first_pos + off, index = first + i;
        unsigned char *h = d + off, *unit = u + i * INDEX_UNIT_SIZE;
        uint32_t body_crc;
        PyObject *p;
        if (!body_bytes(items[i], &v, &held, &body, &len) || len != lens[i]) {
            if (held)
                PyBuffer_Release(&v);
            PyErr_SetString(PyExc_RuntimeError, "encode_run: a body changed while it was encoded");
            goto done;
        }
        meta = table && table[i * (1 + META_SIZE)] ? table + i * (1 + META_SIZE) + 1 : NULL;
        channel = meta ? META_SIZE : 0;
        size = HEADER_SIZE + channel + len;
        body_crc = ql_crc32(meta ? ql_crc32(0, meta, META_SIZE) : 0, body, (size_t)len);
        put32(h, (uint32_t)magic);
        put32(h + 4, (uint32_t)size);
        put64(h + 8, (uint64_t)index);
        put64(h + 16, (uint64_t)term);
        put64(h + 24, (uint64_t)pos);
        put32(h + 32, (uint32_t)channel);
        put32(h + 40, body_crc);
        put32(h + 44, (uint32_t)len);
        chain = chain_of(h, chain);
        put32(h + CHAIN_SPAN, chain);
        if (meta)
            memcpy(h + HEADER_SIZE, meta, META_SIZE);
        if (len)
            memcpy(h + HEADER_SIZE + channel, body, (size_t)len);
        if (held)
            PyBuffer_Release(&v);
        put32(unit, (uint32_t)magic);
        put64(unit + 4, (uint64_t)pos);
        put32(unit + 12, (uint32_t)size);
        put64(unit + 16, (uint64_t)index);
        put64(unit + 24, (uint64_t)term);
        p = PyLong_FromLongLong(pos);
        if (p == NULL || PyList_Append(positions, p) < 0) {
            Py_XDECREF(p);
            goto done;
        }
        Py_DECREF(p);
        off += size;
    }
    last = PyLong_FromUnsignedLong(chain);
    if (last != NULL)
        result = PyTuple_Pack(3, data, units, last);
    goto done;
python:
    result = ql_reference(PY_ENCODE_RUN, args, kw);
done:
    Py_XDECREF(data);
    Py_XDECREF(units);
    Py_XDECREF(last);
    PyMem_Free(lens);
    PyMem_Free(table);
    return result;
}

