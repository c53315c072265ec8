/* walk_segment: the loop of store.reader.checked_runs over one segment, the raw read path's per-entry cost
 * (READ answers, pushes). The caller (quorumlog.hotpath) switches segments and words the errors. */
#include "hotpath.h"

static int add_run(PyObject *runs, PyObject *view, long long start, long long end)
{
    PyObject *part = PySequence_GetSlice(view, (Py_ssize_t)start, (Py_ssize_t)end);
    int r;
    if (part == NULL)
        return -1;
    r = PyList_Append(runs, part);
    Py_DECREF(part);
    return r;
}

/* Nothing walked: the caller runs the Python version. */
static PyObject *unsupported(void)
{
    return Py_BuildValue("(iiiiO)", WALK_UNSUPPORTED, 0, 0, 0, Py_None);
}

const char ql_walk_segment_doc[] =
"walk_segment(view, rel, seg_bytes, base, index, last, start, used, max_bytes, chain, control, max_body, runs)\n"
"--\n\n"
"checked_runs' loop over one segment (view, starting at byte base): walks entries from rel while\n"
"index <= last and (used < max_bytes or index == start), appending the runs of kept entries to runs.\n"
"Returns (status, rel, index, used, chain): WALK_DONE (the loop ended), WALK_BLANK (a blank at rel: the\n"
"next entry starts the next segment), WALK_BAD (the entry at rel fails its checks), WALK_UNSUPPORTED\n"
"(arguments outside what C takes, nothing walked: use the Python version).";

PyObject *ql_walk_segment(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    PyObject *view, *o_chain, *runs, *o_out_chain;
    long long rel, seg_bytes, base, index, last, start, used, max_bytes, max_body, seg_stop, run_start = -1,
              run_end = -1;
    uint32_t chain = 0;
    int has_chain, control, walked = 0, status = WALK_DONE;
    Py_buffer v;
    const unsigned char *p;
    header h;
    (void)module;
    if (nargs != 13) {
        PyErr_SetString(PyExc_TypeError, "walk_segment takes 13 arguments");
        return NULL;
    }
    view = args[0];
    o_chain = args[9];
    runs = args[12];
    control = PyObject_IsTrue(args[10]);
    if (control < 0)
        return NULL;
    has_chain = o_chain != Py_None;
    if (!to_i64(args[1], &rel) || !to_i64(args[2], &seg_bytes) || !to_i64(args[3], &base)
        || !to_i64(args[4], &index) || !to_i64(args[5], &last) || !to_i64(args[6], &start)
        || !to_i64(args[7], &used) || !to_i64(args[8], &max_bytes) || !to_i64(args[11], &max_body)
        || (has_chain && !to_seed(o_chain, &chain)) || !PyList_CheckExact(runs) || last == LLONG_MAX
        || rel < 0 || rel > seg_bytes || __builtin_add_overflow(base, seg_bytes, &seg_stop))
        return unsupported();
    if (!get_bytes(view, &v))
        return unsupported();
    if (v.len != seg_bytes) {
        PyBuffer_Release(&v);
        return unsupported();
    }
    p = v.buf;
    while (index <= last && (used < max_bytes || index == start)) {
        long long end_rel;
        if (rel + HEADER_SIZE > seg_bytes) {
            /* No room for a header: the magic is what int.from_bytes makes of the (up to 4) bytes left,
             * -1 (a blank) only when there are some and all are 0xff. */
            long long left = seg_bytes - rel > 4 ? 4 : seg_bytes - rel, k;
            for (k = 0; k < left && p[rel + k] == 0xff; k++)
                ;
            status = left > 0 && k == left ? WALK_BLANK : WALK_BAD;
            break;
        }
        read_header(p + rel, &h);
        if (h.magic == MAGIC_BLANK) {
            status = WALK_BLANK;
            break;
        }
        end_rel = rel + h.size;
        if (!header_ok(&h, max_body) || end_rel > seg_bytes || h.index != index || h.pos != base + rel
            || (has_chain && chain_of(p + rel, chain) != h.chain)
            || ql_crc32(0, p + rel + HEADER_SIZE, (size_t)h.size - HEADER_SIZE) != h.body_crc) {
            status = WALK_BAD;
            break;
        }
        if (control || h.magic == MAGIC_NORMAL) {
            if (rel != run_end) {
                if (run_end >= 0 && add_run(runs, view, run_start, run_end) < 0)
                    goto error;
                run_start = rel;
            }
            run_end = end_rel;
        }
        chain = h.chain;
        has_chain = walked = 1;
        if (__builtin_add_overflow(used, h.size, &used))
            used = LLONG_MAX;  /* past any max_bytes, as Python's unbounded sum would be */
        rel = end_rel;
        index++;
    }
    if (status != WALK_BAD && run_end >= 0 && add_run(runs, view, run_start, run_end) < 0)
        goto error;
    PyBuffer_Release(&v);
    o_out_chain = walked ? PyLong_FromUnsignedLong(chain) : Py_NewRef(o_chain);
    if (o_out_chain == NULL)
        return NULL;
    return Py_BuildValue("(iLLLN)", status, rel, index, used, o_out_chain);
error:
    PyBuffer_Release(&v);
    return NULL;
}

