/* Strided run copies for the CPU fallback: one C call instead of one torch call per run.
 *
 * copy_runs(src, dst, src_offset, dst_offset, items, item, src_step, dst_step, pieces, src_piece, dst_piece)
 *
 * src, dst                        data addresses (torch.Tensor.data_ptr()).
 * src_offset, dst_offset, items   C-contiguous int64 buffers [n]: run r starts at byte
 *                                 src_offset[r] / dst_offset[r] and has items[r] items.
 * For every run (s, d, k), every piece p < pieces and every item i < k:
 *     copy `item` bytes from src + s + p*src_piece + i*src_step
 *                       to   dst + d + p*dst_piece + i*dst_step.
 * item must be a multiple of 32 bytes (every row and NZ fractal row is). Bytes move in 32-byte
 * chunks: measured faster than glibc memcpy for these sizes (a memcpy of a few MB may take
 * `rep movsb` or non-temporal stores, which lose to a plain vector loop when the data would stay
 * in cache). A run whose items are back to back on both sides (pieces == 1, steps == item) is
 * one stretch of chunks.
 * The caller guarantees that every address is inside its tensor and that writes do not overlap
 * (ascend_kv.checks validated the call). The GIL is released while copying.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

/* n bytes, n a multiple of 32: a constant-size memcpy compiles to vector moves. */
static void copy_chunks(char *d, const char *s, int64_t n) {
    for (int64_t i = 0; i < n; i += 32) memcpy(d + i, s + i, 32);
}

static void copy_items(const char *s, char *d, int64_t k, int64_t item, int64_t s_step, int64_t d_step) {
    if (item == 32) { /* one NZ fractal row per item */
        for (int64_t i = 0; i < k; ++i) memcpy(d + i * d_step, s + i * s_step, 32);
        return;
    }
    for (int64_t i = 0; i < k; ++i) copy_chunks(d + i * d_step, s + i * s_step, item);
}

static PyObject *copy_runs(PyObject *self, PyObject *args) {
    unsigned long long src_addr, dst_addr;
    Py_buffer so, dof, it;
    long long item, s_step, d_step, pieces, s_piece, d_piece;
    (void)self;
    if (!PyArg_ParseTuple(args, "KKy*y*y*LLLLLL", &src_addr, &dst_addr, &so, &dof, &it, &item, &s_step, &d_step,
                          &pieces, &s_piece, &d_piece))
        return NULL;
    const Py_ssize_t n = it.len / (Py_ssize_t)sizeof(int64_t);
    if (it.len % (Py_ssize_t)sizeof(int64_t) != 0 || so.len != it.len || dof.len != it.len || item <= 0 ||
        item % 32 != 0 || pieces <= 0) {
        PyBuffer_Release(&so);
        PyBuffer_Release(&dof);
        PyBuffer_Release(&it);
        PyErr_SetString(PyExc_ValueError, "copy_runs: offsets and items must be int64 [n]; item a positive multiple of 32; pieces positive");
        return NULL;
    }
    const int64_t *src_off = (const int64_t *)so.buf, *dst_off = (const int64_t *)dof.buf;
    const int64_t *items = (const int64_t *)it.buf;
    const char *src = (const char *)(uintptr_t)src_addr;
    char *dst = (char *)(uintptr_t)dst_addr;
    const int back_to_back = pieces == 1 && s_step == item && d_step == item;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t j = 0; j < n; ++j) {
        const char *s = src + src_off[j];
        char *d = dst + dst_off[j];
        const int64_t k = items[j];
        if (back_to_back) {
            copy_chunks(d, s, k * item);
            continue;
        }
        for (int64_t p = 0; p < pieces; ++p) copy_items(s + p * s_piece, d + p * d_piece, k, item, s_step, d_step);
    }
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&so);
    PyBuffer_Release(&dof);
    PyBuffer_Release(&it);
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
