/* The aliasing screen of every call at C speed (ascend_kv/rules/memory.py, written_ranges_meet).
 *
 * written_ranges_meet(written, written_extents, others, other_extents) -> bool
 *
 * written, others                     tuples of tensors (None entries are skipped).
 * written_extents, other_extents      tuples of ints: each tensor's extent, the bytes from its first
 *                                     address to one past its last (memory.extent, kept per call
 *                                     signature by the structure rules).
 *
 * True when the address range [data_ptr, data_ptr + extent) of a written tensor meets another
 * written one's or one of the others': only then do the full aliasing rules need to run.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

static PyObject *name_data_ptr;

typedef struct {
    unsigned long long first, end;
} Range;

/* The ranges of the non-None tensors; their count, or -1 with an exception set. */
static Py_ssize_t read_ranges(PyObject *tensors, PyObject *extents, Range *ranges, Py_ssize_t capacity) {
    if (!PyTuple_Check(tensors) || !PyTuple_Check(extents) || PyTuple_GET_SIZE(tensors) != PyTuple_GET_SIZE(extents) ||
        PyTuple_GET_SIZE(tensors) > capacity) {
        PyErr_SetString(PyExc_TypeError, "written_ranges_meet: tensors and extents must be tuples of one length (<= 8)");
        return -1;
    }
    Py_ssize_t count = 0;
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(tensors); ++i) {
        PyObject *tensor = PyTuple_GET_ITEM(tensors, i);
        if (tensor == Py_None) continue;
        PyObject *pointer = PyObject_CallMethodNoArgs(tensor, name_data_ptr);
        if (pointer == NULL) return -1;
        const unsigned long long first = PyLong_AsUnsignedLongLong(pointer);
        Py_DECREF(pointer);
        const unsigned long long extent = PyLong_AsUnsignedLongLong(PyTuple_GET_ITEM(extents, i));
        if (PyErr_Occurred()) return -1;
        ranges[count].first = first;
        ranges[count].end = first + extent;
        ++count;
    }
    return count;
}

static int meet(const Range *a, const Range *b) { return a->first < b->end && b->first < a->end; }

static PyObject *written_ranges_meet(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    if (nargs != 4) {
        PyErr_SetString(PyExc_TypeError, "written_ranges_meet(written, written_extents, others, other_extents)");
        return NULL;
    }
    Range written[8], others[8];
    const Py_ssize_t w = read_ranges(args[0], args[1], written, 8);
    const Py_ssize_t o = w < 0 ? -1 : read_ranges(args[2], args[3], others, 8);
    if (o < 0) return NULL;
    for (Py_ssize_t i = 0; i < w; ++i) {
        for (Py_ssize_t j = i + 1; j < w; ++j)
            if (meet(&written[i], &written[j])) Py_RETURN_TRUE;
        for (Py_ssize_t j = 0; j < o; ++j)
            if (meet(&written[i], &others[j])) Py_RETURN_TRUE;
    }
    Py_RETURN_FALSE;
}

static PyMethodDef methods[] = {
    {"written_ranges_meet", (PyCFunction)(void (*)(void))written_ranges_meet, METH_FASTCALL,
     "Whether a written tensor's address range meets another's (see the source header)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_ranges", "The aliasing screen at C speed.", -1, methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__ranges(void) {
    name_data_ptr = PyUnicode_InternFromString("data_ptr");
    return name_data_ptr == NULL ? NULL : PyModule_Create(&module);
}
