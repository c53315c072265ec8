/* verify_run: a follower's checks of pushed entries against the log they extend (store.base.verify_run). */
#include "hotpath.h"

/* The message of a bad entry comes from base._fail_run, which checks it again the slow way. */
static PyObject *fail_run(PyObject *data, Py_ssize_t off, long long index, int has_chain, uint32_t chain,
                          PyObject *o_first_chain, PyObject *o_max_body, const char *fallback)
{
    PyObject *fn, *o_chain, *r;
    fn = ql_python(PY_FAIL_RUN);
    if (fn == NULL)
        return NULL;
    /* The chain _fail_run is given: the caller's prev_chain until an entry passed, then that entry's. */
    o_chain = o_first_chain != NULL ? Py_NewRef(o_first_chain)
              : has_chain ? PyLong_FromUnsignedLong(chain) : Py_NewRef(Py_None);
    if (o_chain == NULL)
        return NULL;
    r = PyObject_CallFunction(fn, "OnLOOs", data, off, index, o_chain, o_max_body, fallback);
    Py_DECREF(o_chain);
    if (r != NULL) {
        Py_DECREF(r);
        PyErr_SetString(PyExc_SystemError, "_fail_run returned");
    }
    return NULL;
}

/* One (offset, pos, size, index, term, magic) tuple. */
static PyObject *run_item(Py_ssize_t off, const header *h)
{
    return Py_BuildValue("(nLiLLi)", off, (long long)h->pos, (int)h->size, (long long)h->index,
                         (long long)h->term, (int)h->magic);
}

const char ql_verify_run_doc[] =
"verify_run(data, first_index, write_pos, prev_chain, end_term, segment_bytes, max_body)\n--\n\n"
"store.base.verify_run in C: (run, metas), or CorruptEntryError with the same message.";

PyObject *ql_verify_run(PyObject *module, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"data", "first_index", "write_pos", "prev_chain", "end_term", "segment_bytes",
                             "max_body", NULL};
    PyObject *data, *o_first, *o_wp, *o_prev, *o_term, *o_seg, *o_max;
    PyObject *out = NULL, *metas = NULL, *first_chain, *result = NULL;
    long long index, wp, term_floor, seg, max_body, seg_end, need;
    uint32_t chain = 0;
    int has_chain;
    Py_ssize_t n, off = 0;
    Py_buffer buf;
    const unsigned char *p;
    header h;
    (void)module;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "OOOOOOO:verify_run", kwlist, &data, &o_first, &o_wp, &o_prev,
                                     &o_term, &o_seg, &o_max))
        return NULL;
    has_chain = o_prev != Py_None;
    if (!to_i64(o_first, &index) || !to_i64(o_wp, &wp) || !to_i64(o_term, &term_floor) || !to_i64(o_seg, &seg)
        || !to_i64(o_max, &max_body) || (has_chain && !to_seed(o_prev, &chain)) || seg <= 0 || wp < 0
        || __builtin_add_overflow(wp - wp % seg, seg, &seg_end))
        goto python_unheld;
    if (!get_bytes(data, &buf))
        goto python_unheld;
    n = buf.len;
    p = buf.buf;
    /* Entries are at least HEADER_SIZE bytes: the last index stays within int64. */
    if (index > LLONG_MAX - n / HEADER_SIZE - 1)
        goto python;
    out = PyList_New(0);
    metas = PyList_New(0);
    if (out == NULL || metas == NULL)
        goto release;
    first_chain = o_prev;  /* until an entry passes, the chain is the caller's object */
    while (off < n) {
        const unsigned char *e = p + off;
        int bad;
        PyObject *item;
        if (n - off < HEADER_SIZE) {
            PyBuffer_Release(&buf);
            fail_run(data, off, index, has_chain, chain, first_chain, o_max, "truncated header");
            goto done;
        }
        read_header(e, &h);
        bad = !header_ok(&h, max_body) || h.size > n - off || (has_chain && chain_of(e, chain) != h.chain)
              || ql_crc32(0, e + HEADER_SIZE, (size_t)h.size - HEADER_SIZE) != h.body_crc;
        if (bad) {
            PyBuffer_Release(&buf);
            fail_run(data, off, index, has_chain, chain, first_chain, o_max, "bad entry");
            goto done;
        }
        if (h.index != index) {
            PyBuffer_Release(&buf);
            ql_corrupt("pushed entry at byte %zd has index %lld, expected %lld", off, (long long)h.index, index);
            goto done;
        }
        if (h.term < term_floor) {
            PyBuffer_Release(&buf);
            ql_corrupt("pushed entry %lld has term %lld below the previous %lld", index, (long long)h.term, term_floor);
            goto done;
        }
        if (__builtin_add_overflow(wp, (long long)h.size + BLANK_SIZE, &need))
            goto python;
        if (need > seg_end) {  /* place(): the entry starts the next segment */
            wp = seg_end;
            if (__builtin_add_overflow(seg_end, seg, &seg_end))
                goto python;
        }
        if (h.pos != wp) {
            PyBuffer_Release(&buf);
            ql_corrupt("pushed entry %lld has pos %lld, this log would put it at %lld", index, (long long)h.pos, wp);
            goto done;
        }
        item = run_item(off, &h);
        if (item == NULL || PyList_Append(out, item) < 0) {
            Py_XDECREF(item);
            goto release;
        }
        Py_DECREF(item);
        if (h.channel != 0) {
            item = Py_BuildValue("(Ly#)", index, (const char *)e + HEADER_SIZE, (Py_ssize_t)META_SIZE);
            if (item == NULL || PyList_Append(metas, item) < 0) {
                Py_XDECREF(item);
                goto release;
            }
            Py_DECREF(item);
        }
        chain = h.chain;
        has_chain = 1;
        first_chain = NULL;
        term_floor = h.term;
        if (__builtin_add_overflow(h.pos, h.size, &wp))
            goto python;
        off += h.size;
        index++;
    }
    PyBuffer_Release(&buf);
    result = PyTuple_Pack(2, out, metas);
    goto done;
python:
    /* A position or index past int64: Python's integers carry on, so Python answers. */
    PyBuffer_Release(&buf);
python_unheld:
    result = ql_reference(PY_VERIFY_RUN, args, kw);
    goto done;
release:
    PyBuffer_Release(&buf);
done:
    Py_XDECREF(out);
    Py_XDECREF(metas);
    return result;
}


const char ql_index_units_doc[] =
"index_units(data, count)\n--\n\n"
"store.base.index_units in C: the index units of the first count entries of data, from their headers.";

PyObject *ql_index_units(PyObject *module, PyObject *args)
{
    PyObject *data, *o_count, *units;
    Py_ssize_t count, n, off = 0, i;
    Py_buffer buf;
    const unsigned char *p;
    unsigned char *u;
    header h;
    (void)module;
    if (!PyArg_ParseTuple(args, "OO:index_units", &data, &o_count))
        return NULL;
    count = PyLong_Check(o_count) ? PyLong_AsSsize_t(o_count) : -1;
    if (count == -1 && PyErr_Occurred())
        PyErr_Clear();
    if (count < 0 || count > PY_SSIZE_T_MAX / INDEX_UNIT_SIZE || !get_bytes(data, &buf))
        return ql_reference(PY_INDEX_UNITS, args, NULL);  /* it raises what Python raises */
    n = buf.len;
    p = buf.buf;
    units = PyByteArray_FromStringAndSize(NULL, count * INDEX_UNIT_SIZE);
    if (units == NULL) {
        PyBuffer_Release(&buf);
        return NULL;
    }
    u = (unsigned char *)PyByteArray_AS_STRING(units);
    for (i = 0; i < count; i++, u += INDEX_UNIT_SIZE) {
        if (n - off < HEADER_SIZE)
            break;
        read_header(p + off, &h);
        if (h.size < HEADER_SIZE)
            break;
        put32(u, (uint32_t)h.magic);
        put64(u + 4, (uint64_t)h.pos);
        put32(u + 12, (uint32_t)h.size);
        put64(u + 16, (uint64_t)h.index);
        put64(u + 24, (uint64_t)h.term);
        off += h.size;
    }
    PyBuffer_Release(&buf);
    if (i < count) {  /* not entries verify_run passed: the reference says what is wrong */
        Py_DECREF(units);
        return ql_reference(PY_INDEX_UNITS, args, NULL);
    }
    return units;
}
