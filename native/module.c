/* quorumlog._hotpath: the per-entry loops of entry.encode_run, store.base.verify_run and the walk of
 * one segment in store.reader.checked_runs, in C, with the same results and errors byte for byte.
 *
 * The Python versions stay the reference. Any input outside what this code takes (a type other than
 * a list or tuple of bytes, bytearray or byte memoryviews; an integer outside its field; arithmetic
 * that would leave 64 bits) is handed to them with the same arguments, so that they answer or raise
 * exactly as they would. Sizes come from untrusted bytes: each is checked against the buffer before
 * anything it describes is read. The GIL is kept: a call covers one batch (microseconds), and
 * releasing and taking it back would cost about as much as it lets other threads run. */
#include "hotpath.h"

static const struct {
    const char *module, *name;
} refs[PY_REFS] = {
    [PY_CORRUPT_ENTRY_ERROR] = {"quorumlog.errors", "CorruptEntryError"},
    [PY_FAIL_RUN] = {"quorumlog.store.base", "_fail_run"},
    [PY_ENCODE_RUN] = {"quorumlog.entry", "encode_run"},
    [PY_VERIFY_RUN] = {"quorumlog.store.base", "verify_run"},
    [PY_INDEX_UNITS] = {"quorumlog.store.base", "index_units"},
};
static PyObject *cache[PY_REFS];

PyObject *ql_python(py_ref which)
{
    if (cache[which] == NULL) {
        PyObject *m = PyImport_ImportModule(refs[which].module);
        if (m == NULL)
            return NULL;
        cache[which] = PyObject_GetAttrString(m, refs[which].name);
        Py_DECREF(m);
    }
    return cache[which];
}

PyObject *ql_reference(py_ref which, PyObject *args, PyObject *kw)
{
    PyObject *fn = ql_python(which);
    return fn == NULL ? NULL : PyObject_Call(fn, args, kw);
}

PyObject *ql_corrupt(const char *format, ...)
{
    va_list va;
    PyObject *cls, *msg, *exc;
    cls = ql_python(PY_CORRUPT_ENTRY_ERROR);
    if (cls == NULL)
        return NULL;
    va_start(va, format);
    msg = PyUnicode_FromFormatV(format, va);
    va_end(va);
    if (msg == NULL)
        return NULL;
    exc = PyObject_CallOneArg(cls, msg);
    Py_DECREF(msg);
    if (exc == NULL)
        return NULL;
    PyErr_SetObject((PyObject *)Py_TYPE(exc), exc);
    Py_DECREF(exc);
    return NULL;
}

PyDoc_STRVAR(crc32_doc,
"crc32(data, value=0, tables=False)\n--\n\n"
"zlib.crc32 as this module computes it; with tables, by the tables alone (for tests).");

static PyObject *crc32(PyObject *module, PyObject *args)
{
    Py_buffer v;
    unsigned long value = 0;
    int tables = 0;
    uint32_t crc;
    (void)module;
    if (!PyArg_ParseTuple(args, "y*|kp:crc32", &v, &value, &tables))
        return NULL;
    crc = (tables ? ql_crc32_tables : ql_crc32)((uint32_t)value, v.buf, (size_t)v.len);
    PyBuffer_Release(&v);
    return PyLong_FromUnsignedLong(crc);
}

static PyMethodDef methods[] = {
    {"encode_run", (PyCFunction)(void (*)(void))ql_encode_run, METH_VARARGS | METH_KEYWORDS, ql_encode_run_doc},
    {"verify_run", (PyCFunction)(void (*)(void))ql_verify_run, METH_VARARGS | METH_KEYWORDS, ql_verify_run_doc},
    {"walk_segment", (PyCFunction)(void (*)(void))ql_walk_segment, METH_FASTCALL, ql_walk_segment_doc},
    {"index_units", ql_index_units, METH_VARARGS, ql_index_units_doc},
    {"crc32", crc32, METH_VARARGS, crc32_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT, "quorumlog._hotpath",
    "The per-entry loops of the entry codec, the follower's checks and the raw read walk, in C.", -1, methods,
    NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__hotpath(void)
{
    PyObject *m;
    ql_crc32_init();
    m = PyModule_Create(&module_def);
    if (m == NULL)
        return NULL;
    if (PyModule_AddIntConstant(m, "WALK_DONE", WALK_DONE) < 0
        || PyModule_AddIntConstant(m, "WALK_BLANK", WALK_BLANK) < 0
        || PyModule_AddIntConstant(m, "WALK_BAD", WALK_BAD) < 0
        || PyModule_AddIntConstant(m, "WALK_UNSUPPORTED", WALK_UNSUPPORTED) < 0
        || PyModule_AddStringConstant(m, "CRC", ql_crc32_folding() ? "pclmul folding" : "slicing-by-8") < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
