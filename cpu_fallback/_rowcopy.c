/* Strided run copies for the CPU fallback: one C call instead of one torch call per run.
 *
 * copy_runs(src, dst, runs, item, src_step, dst_step, pieces, src_piece, dst_piece)
 *
 * src, dst   data addresses (torch.Tensor.data_ptr()).
 * runs       a C-contiguous int64 buffer [n, 3]: (src byte offset, dst byte offset, items).
 * For every run (s, d, k), every piece p < pieces and every item i < k:
 *     copy `item` bytes from src + s + p*src_piece + i*src_step
 *                       to   dst + d + p*dst_piece + i*dst_step.
 * A run whose items are back to back on both sides (pieces == 1, steps == item) is one memcpy.
 * The caller guarantees that every address is inside its tensor and that writes do not overlap
 * (ascend_kv.checks validated the call). The GIL is released while copying.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

/* One 32-byte NZ fractal row: a constant size lets the compiler emit two vector moves. */
static void copy_items32(const char *s, char *d, int64_t k, int64_t s_step, int64_t d_step) {
    for (int64_t i = 0; i < k; ++i) memcpy(d + i * d_step, s + i * s_step, 32);
}

static void copy_items(const char *s, char *d, int64_t k, int64_t item, int64_t s_step, int64_t d_step) {
    for (int64_t i = 0; i < k; ++i) memcpy(d + i * d_step, s + i * s_step, (size_t)item);
}

static PyObject *copy_runs(PyObject *self, PyObject *args) {
    unsigned long long src_addr, dst_addr;
    Py_buffer runs;
    long long item, s_step, d_step, pieces, s_piece, d_piece;
    (void)self;
    if (!PyArg_ParseTuple(args, "KKy*LLLLLL", &src_addr, &dst_addr, &runs, &item, &s_step, &d_step,
                          &pieces, &s_piece, &d_piece))
        return NULL;
    if (runs.len % (3 * (Py_ssize_t)sizeof(int64_t)) != 0 || item <= 0 || pieces <= 0) {
        PyBuffer_Release(&runs);
        PyErr_SetString(PyExc_ValueError, "copy_runs: runs must be int64 [n, 3]; item and pieces positive");
        return NULL;
    }
    const int64_t *r = (const int64_t *)runs.buf;
    const Py_ssize_t n = runs.len / (3 * (Py_ssize_t)sizeof(int64_t));
    const char *src = (const char *)(uintptr_t)src_addr;
    char *dst = (char *)(uintptr_t)dst_addr;
    const int back_to_back = pieces == 1 && s_step == item && d_step == item;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t j = 0; j < n; ++j) {
        const char *s = src + r[3 * j];
        char *d = dst + r[3 * j + 1];
        const int64_t k = r[3 * j + 2];
        if (back_to_back) {
            memcpy(d, s, (size_t)(k * item));
            continue;
        }
        for (int64_t p = 0; p < pieces; ++p) {
            if (item == 32)
                copy_items32(s + p * s_piece, d + p * d_piece, k, s_step, d_step);
            else
                copy_items(s + p * s_piece, d + p * d_piece, k, item, s_step, d_step);
        }
    }
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&runs);
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"copy_runs", copy_runs, METH_VARARGS, "Copy strided runs of fixed-size items (see the source header)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_rowcopy", "Strided run copies for the CPU fallback.", -1, methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__rowcopy(void) { return PyModule_Create(&module); }
