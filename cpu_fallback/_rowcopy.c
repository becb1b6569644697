/* Strided run copies for the CPU fallback: one C call instead of one torch call per run.
 *
 * copy_runs(steps, src, dst, src_index, dst_index, items, stream_min_bytes)
 *   steps = (src_index_step, dst_index_step, dst_run_step, item, src_step, dst_step, pieces, src_piece, dst_piece)
 *
 * src, dst                       data addresses (torch.Tensor.data_ptr(), plus any offset).
 * src_index, dst_index, items    sequences of n ints (lists, as the fallback holds them), one per run;
 *                                src_index None means run r reads from index r, items None one item per run.
 * Run r starts at   s = src + src_index[r] * src_index_step
 *                   d = dst + dst_index[r] * dst_index_step + r * dst_run_step
 * and for every piece p < pieces and every item i < items[r] copies `item` bytes
 *     from s + p * src_piece + i * src_step   to   d + p * dst_piece + i * dst_step.
 * (kv_cache: runs are batch entries, items rows; paged ND: runs are blocks, items token rows;
 * paged NZ: items are tokens and pieces their 32-byte fractal rows; reshape_and_cache: runs are
 * tokens, dst_index their slots, negative for padding.) Indices and byte steps
 * let the caller pass its metadata lists as they are, with no per-call arithmetic in Python; they
 * are read into one C array here.
 *
 * item must be a positive multiple of 32 bytes (every row and NZ fractal row is). Bytes move in
 * 32-byte chunks (as fast as torch's copy_ on these sizes: docs/benchmarks.md). A run whose items are back to back on both sides (pieces == 1, steps == item) is one
 * stretch of chunks. Runs with 0 items or a negative dst_index copy nothing (their addresses are not
 * touched).
 *
 * Streaming (x86-64 only): when the call writes at least stream_min_bytes in total
 * and the destination address and every destination byte step are multiples of 16, the bytes go
 * out through 16-byte non-temporal stores, and one store fence ends the call. Why: a large KV
 * cache write or paged load fills the caches with lines this thread does not read again soon,
 * and each one costs a read for ownership first; streamed stores skip both. A copy whose bytes
 * stay in the caches is slower streamed, hence the threshold each operation sets
 * (docs/benchmarks.md, "How the fallback chooses"). Streamed NZ pieces go eight at a time, item by item
 * within the group (see stream_items). Elsewhere (e.g. aarch64 hosts), or built with -DROWCOPY_PORTABLE
 * (how the tests run that build on x86-64), the chunk loop always runs.
 * copy_runs returns whether it streamed.
 *
 * The caller guarantees that every address is inside its tensor and that writes do not overlap
 * (ascend_kv.checks validated the call). The GIL is released while copying.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <limits.h>
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

#if (defined(__x86_64__) || defined(_M_X64)) && !defined(ROWCOPY_PORTABLE)
#include <emmintrin.h> /* SSE2: baseline on x86-64 */
#define CAN_STREAM 1
/* n bytes, n a multiple of 32, d 16-byte aligned: non-temporal stores (the caller fences). */
static void stream_chunks(char *d, const char *s, int64_t n) {
    for (int64_t i = 0; i < n; i += 32) { /* both loads before the stores (faster: docs/benchmarks.md) */
        const __m128i a = _mm_loadu_si128((const __m128i *)(s + i)), b = _mm_loadu_si128((const __m128i *)(s + i + 16));
        _mm_stream_si128((__m128i *)(d + i), a);
        _mm_stream_si128((__m128i *)(d + i + 16), b);
    }
}
#define store_fence() _mm_sfence()
#else /* streaming is off: stream_items below is never called */
#define CAN_STREAM 0
#define stream_chunks copy_chunks
#define store_fence() ((void)0)
#endif

/* Pieces eight at a time, item by item within a group. For NZ (32-byte pieces) each item's group
 * is 256 destination bytes, whole cache lines, and the source is read as eight sequential
 * streams: fewer pieces leave half-written lines in the write-combining buffers, more read the
 * source in too many streams (the group sizes measured: docs/benchmarks.md). */
#define PIECE_GROUP 8
static void stream_items(const char *s, char *d, int64_t k, int64_t item, int64_t s_step, int64_t d_step,
                         int64_t pieces, int64_t s_piece, int64_t d_piece) {
    for (int64_t p0 = 0; p0 < pieces; p0 += PIECE_GROUP) {
        const int64_t p1 = p0 + PIECE_GROUP < pieces ? p0 + PIECE_GROUP : pieces;
        for (int64_t i = 0; i < k; ++i)
            for (int64_t p = p0; p < p1; ++p) stream_chunks(d + i * d_step + p * d_piece, s + i * s_step + p * s_piece, item);
    }
}

/* The three run sequences as one malloc'ed int64 array [3][n] (PyMem_Free() it), or NULL with an exception set.
 * A None src_index (k = 0) reads as 0 .. n - 1, a None items (k = 2) as all ones. */
static int64_t *read_runs(PyObject *const sequences[3], Py_ssize_t *n) {
    PyObject *fast[3] = {NULL, NULL, NULL};
    int64_t *runs = NULL;
    for (int k = 0; k < 3; ++k) {
        if (k != 1 && sequences[k] == Py_None) continue;
        fast[k] = PySequence_Fast(sequences[k], "copy_runs: src_index, dst_index and items must be sequences of ints");
        if (fast[k] == NULL) goto done;
    }
    *n = PySequence_Fast_GET_SIZE(fast[1]);
    if ((fast[0] != NULL && PySequence_Fast_GET_SIZE(fast[0]) != *n) ||
        (fast[2] != NULL && PySequence_Fast_GET_SIZE(fast[2]) != *n)) {
        PyErr_SetString(PyExc_ValueError, "copy_runs: src_index, dst_index and items must have one entry per run");
        goto done;
    }
    runs = PyMem_Malloc(3 * (size_t)(*n > 0 ? *n : 1) * sizeof(int64_t));
    if (runs == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    for (int k = 0; k < 3; ++k) {
        if (fast[k] == NULL) {
            for (Py_ssize_t r = 0; r < *n; ++r) runs[k * *n + r] = k == 0 ? r : 1;
            continue;
        }
        PyObject **values = PySequence_Fast_ITEMS(fast[k]);
        for (Py_ssize_t r = 0; r < *n; ++r) {
            const long long value = PyLong_AsLongLong(values[r]);
            if (value == -1 && PyErr_Occurred()) {
                PyMem_Free(runs);
                runs = NULL;
                goto done;
            }
            runs[k * *n + r] = value;
        }
    }
done:
    for (int k = 0; k < 3; ++k) Py_XDECREF(fast[k]);
    return runs;
}

/* The nine byte steps (cpu_fallback/native.py's Steps, a tuple of ints) in their order, or -1 with an exception set. */
static int read_steps(PyObject *steps, long long out[9]) {
    if (!PyTuple_Check(steps) || PyTuple_GET_SIZE(steps) != 9) {
        PyErr_SetString(PyExc_TypeError, "copy_runs: steps must be a tuple of 9 ints");
        return -1;
    }
    for (Py_ssize_t k = 0; k < 9; ++k) {
        out[k] = PyLong_AsLongLong(PyTuple_GET_ITEM(steps, k));
        if (out[k] == -1 && PyErr_Occurred()) return -1;
    }
    return 0;
}

static PyObject *copy_runs(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    if (nargs != 7) {
        PyErr_SetString(PyExc_TypeError, "copy_runs takes 7 arguments");
        return NULL;
    }
    const unsigned long long src_addr = PyLong_AsUnsignedLongLong(args[1]), dst_addr = PyLong_AsUnsignedLongLong(args[2]);
    const long long stream_min = PyLong_AsLongLong(args[6]);
    long long fixed[9];
    if (PyErr_Occurred() || read_steps(args[0], fixed) != 0) return NULL;
    PyObject *sequences[3] = {args[3], args[4], args[5]};
    const long long si_step = fixed[0], di_step = fixed[1], run_step = fixed[2], item = fixed[3], s_step = fixed[4],
                    d_step = fixed[5], pieces = fixed[6], s_piece = fixed[7], d_piece = fixed[8];
    if (item <= 0 || item % 32 != 0 || pieces <= 0) {
        PyErr_SetString(PyExc_ValueError, "copy_runs: item must be a positive multiple of 32 and pieces positive");
        return NULL;
    }
    Py_ssize_t n;
    int64_t *runs = read_runs(sequences, &n);
    if (runs == NULL) return NULL;
    const int64_t *src_index = runs, *dst_index = runs + n, *items = runs + 2 * n;
    const char *src = (const char *)(uintptr_t)src_addr;
    char *dst = (char *)(uintptr_t)dst_addr;
    const int back_to_back = pieces == 1 && s_step == item && d_step == item;
    int64_t total = 0;
    for (Py_ssize_t r = 0; r < n; ++r) total += items[r] > 0 && dst_index[r] >= 0 ? items[r] : 0;
    total *= item * pieces;
    const int stream = CAN_STREAM && total >= stream_min &&
                       (dst_addr | (uint64_t)(di_step | run_step | d_step | d_piece)) % 16 == 0;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t r = 0; r < n; ++r) {
        const int64_t k = items[r];
        if (k <= 0 || dst_index[r] < 0) continue;
        const char *s = src + src_index[r] * si_step;
        char *d = dst + dst_index[r] * di_step + r * run_step;
        if (stream) {
            stream_items(s, d, k, item, s_step, d_step, pieces, s_piece, d_piece);
            continue;
        }
        if (back_to_back) {
            copy_chunks(d, s, k * item);
            continue;
        }
        for (int64_t p = 0; p < pieces; ++p) copy_items(s + p * s_piece, d + p * d_piece, k, item, s_step, d_step);
    }
    if (stream) store_fence(); /* the non-temporal stores are done before the GIL is taken back */
    Py_END_ALLOW_THREADS
    PyMem_Free(runs);
    return PyBool_FromLong(stream);
}

static PyMethodDef methods[] = {
    {"copy_runs", (PyCFunction)(void (*)(void))copy_runs, METH_FASTCALL,
     "Copy strided runs of fixed-size items (see the source header)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_rowcopy", "Strided run copies for the CPU fallback.", -1, methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__rowcopy(void) { return PyModule_Create(&module); }
