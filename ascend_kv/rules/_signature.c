/* The structure memo's call signature (ascend_kv/rules/memo.py), at C speed: it is computed on
 * every call.
 *
 * signature(arguments, written) -> tuple
 *
 * arguments   the call's arguments, a tuple.
 * written     positions (a tuple of ints) of the arguments the call writes.
 *
 * The result is a tuple: per argument, for a torch.Tensor (dtype, shape, stride(), True on the
 * host else its device), anything else itself; then per written argument (requires_grad,
 * inference_mode or is_inference()) for a tensor, None otherwise; then inference_mode,
 * torch.is_inference_mode_enabled(). tests/test_memo.py checks that a remembered call lets
 * through no call differing in any of these.
 * An attribute that raises (a sparse tensor has no strides) raises here, so the memo checks that
 * call afresh. torch is imported before this module (memo.py imports it first).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

static PyTypeObject *tensor_type;          /* torch.Tensor */
static PyObject *is_inference_mode_enabled; /* torch.is_inference_mode_enabled */
static PyObject *name_dtype, *name_shape, *name_stride, *name_is_cpu, *name_device, *name_requires_grad,
    *name_is_inference;

/* (dtype, shape, stride(), True or device) of a tensor, or NULL with an exception set. */
static PyObject *tensor_key(PyObject *tensor) {
    PyObject *key = PyTuple_New(4);
    if (key == NULL) return NULL;
    PyObject *is_cpu = PyObject_GetAttr(tensor, name_is_cpu);
    PyObject *parts[4] = {
        PyObject_GetAttr(tensor, name_dtype),
        PyObject_GetAttr(tensor, name_shape),
        PyObject_CallMethodNoArgs(tensor, name_stride),
        is_cpu == Py_True ? (Py_INCREF(Py_True), Py_True) : (is_cpu != NULL ? PyObject_GetAttr(tensor, name_device) : NULL),
    };
    Py_XDECREF(is_cpu);
    for (Py_ssize_t k = 0; k < 4; ++k) {
        if (parts[k] == NULL) {
            for (Py_ssize_t j = k; j < 4; ++j) Py_XDECREF(parts[j]);
            Py_DECREF(key);
            return NULL;
        }
        PyTuple_SET_ITEM(key, k, parts[k]);
    }
    return key;
}

/* (requires_grad, inference_mode or is_inference()) of a written tensor, or NULL with an exception set. */
static PyObject *written_key(PyObject *tensor, int inference_mode) {
    PyObject *requires_grad = PyObject_GetAttr(tensor, name_requires_grad);
    if (requires_grad == NULL) return NULL;
    PyObject *inference = inference_mode ? (Py_INCREF(Py_True), Py_True) : PyObject_CallMethodNoArgs(tensor, name_is_inference);
    if (inference == NULL) {
        Py_DECREF(requires_grad);
        return NULL;
    }
    PyObject *key = PyTuple_Pack(2, requires_grad, inference);
    Py_DECREF(requires_grad);
    Py_DECREF(inference);
    return key;
}

static PyObject *signature(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    if (nargs != 2 || !PyTuple_Check(args[0]) || !PyTuple_Check(args[1])) {
        PyErr_SetString(PyExc_TypeError, "signature(arguments: tuple, written: tuple)");
        return NULL;
    }
    PyObject *arguments = args[0], *written = args[1];
    PyObject *mode = PyObject_CallNoArgs(is_inference_mode_enabled);
    if (mode == NULL) return NULL;
    const int inference_mode = PyObject_IsTrue(mode);
    Py_DECREF(mode);
    if (inference_mode < 0) return NULL;
    const Py_ssize_t n = PyTuple_GET_SIZE(arguments), w = PyTuple_GET_SIZE(written);
    PyObject *key = PyTuple_New(n + w + 1);
    if (key == NULL) return NULL;
    Py_ssize_t filled = 0;
    for (Py_ssize_t i = 0; i < n; ++i, ++filled) {
        PyObject *argument = PyTuple_GET_ITEM(arguments, i);
        PyObject *part = PyObject_TypeCheck(argument, tensor_type) ? tensor_key(argument) : (Py_INCREF(argument), argument);
        if (part == NULL) goto fail;
        PyTuple_SET_ITEM(key, filled, part);
    }
    for (Py_ssize_t k = 0; k < w; ++k) {
        const Py_ssize_t i = PyLong_AsSsize_t(PyTuple_GET_ITEM(written, k));
        if (i == -1 && PyErr_Occurred()) goto fail;
        if (i < 0 || i >= n) {
            PyErr_SetString(PyExc_IndexError, "signature: a written position is outside the arguments");
            goto fail;
        }
        PyObject *argument = PyTuple_GET_ITEM(arguments, i);
        PyObject *part = PyObject_TypeCheck(argument, tensor_type) ? written_key(argument, inference_mode)
                                                                   : (Py_INCREF(Py_None), Py_None);
        if (part == NULL) goto fail;
        PyTuple_SET_ITEM(key, filled++, part);
    }
    PyObject *flag = inference_mode ? Py_True : Py_False;
    Py_INCREF(flag);
    PyTuple_SET_ITEM(key, filled, flag);
    return key;
fail:
    Py_DECREF(key); /* unfilled items are NULL, which tuple deallocation skips */
    return NULL;
}

static PyMethodDef methods[] = {
    {"signature", (PyCFunction)(void (*)(void))signature, METH_FASTCALL,
     "The structure memo's call signature (see the source header)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_signature", "The structure memo's call signature at C speed.", -1, methods,
    NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__signature(void) {
    PyObject **names[] = {&name_dtype, &name_shape, &name_stride, &name_is_cpu, &name_device, &name_requires_grad,
                          &name_is_inference};
    const char *texts[] = {"dtype", "shape", "stride", "is_cpu", "device", "requires_grad", "is_inference"};
    for (size_t k = 0; k < sizeof names / sizeof names[0]; ++k) {
        *names[k] = PyUnicode_InternFromString(texts[k]);
        if (*names[k] == NULL) return NULL;
    }
    PyObject *torch = PyImport_ImportModule("torch");
    if (torch == NULL) return NULL;
    tensor_type = (PyTypeObject *)PyObject_GetAttrString(torch, "Tensor");
    is_inference_mode_enabled = PyObject_GetAttrString(torch, "is_inference_mode_enabled");
    Py_DECREF(torch);
    if (tensor_type == NULL || is_inference_mode_enabled == NULL) return NULL;
    if (!PyType_Check(tensor_type)) {
        PyErr_SetString(PyExc_TypeError, "torch.Tensor is not a type");
        return NULL;
    }
    return PyModule_Create(&module);
}
