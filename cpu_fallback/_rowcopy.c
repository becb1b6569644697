/* Strided run copies for the CPU fallback: one C call instead of one torch call per run.
 *
 * copy_runs(src, dst, src_index, dst_index, items, src_index_step, dst_index_step, dst_run_step,
 *           item, src_step, dst_step, pieces, src_piece, dst_piece)
 *
 * src, dst                       data addresses (torch.Tensor.data_ptr(), plus any offset).
 * src_index, dst_index, items    C-contiguous int64 buffers [n], one entry per run.
 * Run r starts at   s = src + src_index[r] * src_index_step
 *                   d = dst + dst_index[r] * dst_index_step + r * dst_run_step
 * and for every piece p < pieces and every item i < items[r] copies `item` bytes
 *     from s + p * src_piece + i * src_step   to   d + p * dst_piece + i * dst_step.
 * (kv_cache: runs are batch entries, items rows; paged ND: runs are blocks, items token rows;
 * paged NZ: items are tokens and pieces their 32-byte fractal rows.) Indices and byte steps
 * let the caller pass its metadata arrays as they are, with no per-call arithmetic in Python.
 *
 * item must be a positive multiple of 32 bytes (every row and NZ fractal row is). Bytes move in
 * 32-byte chunks: measured as fast as torch's copy_ and at least as fast as glibc memcpy on these
 * sizes. A run whose items are back to back on both sides (pieces == 1, steps == item) is one
 * stretch of chunks. Runs with 0 items copy nothing (their addresses are not touched).
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
    Py_buffer si, di, it;
    long long si_step, di_step, run_step, item, s_step, d_step, pieces, s_piece, d_piece;
    (void)self;
    if (!PyArg_ParseTuple(args, "KKy*y*y*LLLLLLLLL", &src_addr, &dst_addr, &si, &di, &it, &si_step, &di_step,
                          &run_step, &item, &s_step, &d_step, &pieces, &s_piece, &d_piece))
        return NULL;
    const Py_ssize_t n = it.len / (Py_ssize_t)sizeof(int64_t);
    if (it.len % (Py_ssize_t)sizeof(int64_t) != 0 || si.len != it.len || di.len != it.len || item <= 0 ||
        item % 32 != 0 || pieces <= 0) {
        PyBuffer_Release(&si);
        PyBuffer_Release(&di);
        PyBuffer_Release(&it);
        PyErr_SetString(PyExc_ValueError,
                        "copy_runs: indices and items must be int64 [n]; item a positive multiple of 32; pieces positive");
        return NULL;
    }
    const int64_t *src_index = (const int64_t *)si.buf, *dst_index = (const int64_t *)di.buf;
    const int64_t *items = (const int64_t *)it.buf;
    const char *src = (const char *)(uintptr_t)src_addr;
    char *dst = (char *)(uintptr_t)dst_addr;
    const int back_to_back = pieces == 1 && s_step == item && d_step == item;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t r = 0; r < n; ++r) {
        const int64_t k = items[r];
        if (k <= 0) continue;
        const char *s = src + src_index[r] * si_step;
        char *d = dst + dst_index[r] * di_step + r * run_step;
        if (back_to_back) {
            copy_chunks(d, s, k * item);
            continue;
        }
        for (int64_t p = 0; p < pieces; ++p) copy_items(s + p * s_piece, d + p * d_piece, k, item, s_step, d_step);
    }
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&si);
    PyBuffer_Release(&di);
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
