/* The index-value rules of kv_cache and paged_cache_load (docs/semantics.md), and the host plans
 * they derive, at C speed. The rules that need no index value are Python's (kv_cache.py,
 * paged_cache_load.py), which call these once those have passed.
 *
 * kv_cache(token_offset, seq_len, ntokens, max_seq_len) -> (seq_len, read_start, write_start)
 * paged_cache_load(context_lens, seq_starts, block_table, cumsum, block_size, num_blocks)
 *     -> (blocks, lens, out_start, first_column, end_row)
 *
 * Index tensors are host int32/int64 tensors of the ranks the structure rules checked (seq_starts
 * and block_table may be None: none given, or the block table not to be checked); they are read
 * through their data_ptr() and strides, only the entries the rules need. Each rule raises
 * ValueError with the message the Python rules gave, naming the first offending entry; the
 * results are lists of ints (the Plans' fields, docs in ascend_kv/rules/forms.py).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#define INT32_LIMIT 2147483647LL

typedef __int128 wide; /* sums and column ends of int64 entries, exact */

/* A host index tensor as the rules read it: entry (i, j) at data + (i * stride0 + j * stride1) * itemsize. */
typedef struct {
    const char *data;
    Py_ssize_t itemsize, stride0, stride1, size0, size1;
} Index;

static PyObject *name_data_ptr, *name_element_size, *name_stride, *name_shape;

static long long attribute_int(PyObject *object, PyObject *method) {
    PyObject *value = PyObject_CallMethodNoArgs(object, method);
    if (value == NULL) return -1;
    const long long result = PyLong_AsLongLong(value);
    Py_DECREF(value);
    return result;
}

/* Reads the layout of a 1-D or 2-D host index tensor; -1 with an exception set on failure. */
static int read_index(PyObject *tensor, Index *index) {
    PyObject *pointer = PyObject_CallMethodNoArgs(tensor, name_data_ptr);
    if (pointer == NULL) return -1;
    const unsigned long long address = PyLong_AsUnsignedLongLong(pointer);
    Py_DECREF(pointer);
    if (PyErr_Occurred()) return -1;
    index->itemsize = (Py_ssize_t)attribute_int(tensor, name_element_size);
    if (PyErr_Occurred()) return -1;
    if (index->itemsize != 4 && index->itemsize != 8) {
        PyErr_SetString(PyExc_TypeError, "_values: index tensors must be int32 or int64");
        return -1;
    }
    PyObject *strides = PyObject_CallMethodNoArgs(tensor, name_stride);
    PyObject *shape = strides == NULL ? NULL : PyObject_GetAttr(tensor, name_shape);
    int status = -1;
    if (shape == NULL) goto done;
    const Py_ssize_t rank = PyTuple_Size(strides);
    if (rank < 1 || rank > 2 || PyTuple_Size(shape) != rank) {
        PyErr_SetString(PyExc_ValueError, "_values: index tensors must be 1-D or 2-D");
        goto done;
    }
    index->stride0 = PyLong_AsSsize_t(PyTuple_GET_ITEM(strides, 0));
    index->size0 = PyLong_AsSsize_t(PyTuple_GET_ITEM(shape, 0));
    index->stride1 = rank == 2 ? PyLong_AsSsize_t(PyTuple_GET_ITEM(strides, 1)) : 0;
    index->size1 = rank == 2 ? PyLong_AsSsize_t(PyTuple_GET_ITEM(shape, 1)) : 1;
    index->data = (const char *)(uintptr_t)address;
    status = PyErr_Occurred() ? -1 : 0;
done:
    Py_XDECREF(strides);
    Py_XDECREF(shape);
    return status;
}

static inline int64_t entry(const Index *index, Py_ssize_t i, Py_ssize_t j) {
    const char *at = index->data + (i * index->stride0 + j * index->stride1) * index->itemsize;
    if (index->itemsize == 4) {
        int32_t value;
        memcpy(&value, at, 4);
        return value;
    }
    int64_t value;
    memcpy(&value, at, 8);
    return value;
}

/* A wide integer as a Python int (sums of int64 entries may not fit in 64 bits). */
static PyObject *wide_to_python(wide value) {
    if (value >= INT64_MIN && value <= INT64_MAX) return PyLong_FromLongLong((long long)value);
    PyObject *high = PyLong_FromLongLong((long long)(value >> 62)), *low = PyLong_FromLongLong((long long)(value & ((1LL << 62) - 1)));
    PyObject *shift = PyLong_FromLong(62), *shifted = NULL, *result = NULL;
    if (high != NULL && low != NULL && shift != NULL) shifted = PyNumber_Lshift(high, shift);
    if (shifted != NULL) result = PyNumber_Add(shifted, low);
    Py_XDECREF(high);
    Py_XDECREF(low);
    Py_XDECREF(shift);
    Py_XDECREF(shifted);
    return result;
}

/* ValueError(message) where message is format with each %S filled by a wide integer (at most 7). */
static PyObject *value_error(const char *format, int count, const wide *values) {
    PyObject *parts[7] = {NULL, NULL, NULL, NULL, NULL, NULL, NULL};
    for (int k = 0; k < count; ++k) {
        parts[k] = wide_to_python(values[k]);
        if (parts[k] == NULL) goto done;
    }
    PyObject *message =
        PyUnicode_FromFormat(format, parts[0], parts[1], parts[2], parts[3], parts[4], parts[5], parts[6]);
    if (message != NULL) {
        PyErr_SetObject(PyExc_ValueError, message);
        Py_DECREF(message);
    }
done:
    for (int k = 0; k < count; ++k) Py_XDECREF(parts[k]);
    return NULL;
}

static PyObject *list_of(const int64_t *values, Py_ssize_t n) {
    PyObject *list = PyList_New(n);
    if (list == NULL) return NULL;
    for (Py_ssize_t i = 0; i < n; ++i) {
        PyObject *item = PyLong_FromLongLong(values[i]);
        if (item == NULL) {
            Py_DECREF(list);
            return NULL;
        }
        PyList_SET_ITEM(list, i, item);
    }
    return list;
}

/* Takes a reference to each list; NULL (with the exception kept) if any is NULL. */
static PyObject *tuple_of_lists(int count, PyObject **lists) {
    for (int k = 0; k < count; ++k) {
        if (lists[k] == NULL) {
            for (int j = 0; j < count; ++j) Py_XDECREF(lists[j]);
            return NULL;
        }
    }
    PyObject *tuple = PyTuple_New(count);
    if (tuple == NULL) {
        for (int j = 0; j < count; ++j) Py_DECREF(lists[j]);
        return NULL;
    }
    for (int k = 0; k < count; ++k) PyTuple_SET_ITEM(tuple, k, lists[k]);
    return tuple;
}

/* ----------------------------------------------------------------------------- kv_cache */

static PyObject *kv_cache(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    if (nargs != 4) {
        PyErr_SetString(PyExc_TypeError, "kv_cache(token_offset, seq_len, ntokens, max_seq_len)");
        return NULL;
    }
    Index offsets, lengths;
    if (read_index(args[0], &offsets) != 0 || read_index(args[1], &lengths) != 0) return NULL;
    const long long ntokens = PyLong_AsLongLong(args[2]), max_seq_len = PyLong_AsLongLong(args[3]);
    if (PyErr_Occurred()) return NULL;
    const Py_ssize_t batch = lengths.size0;
    if (offsets.size0 != batch) {
        PyErr_SetString(PyExc_ValueError, "_values.kv_cache: token_offset and seq_len must have one entry per batch entry");
        return NULL;
    }
    int64_t *values = PyMem_Malloc(3 * (size_t)(batch > 0 ? batch : 1) * sizeof(int64_t));
    if (values == NULL) return PyErr_NoMemory();
    int64_t *seq_len = values, *read_start = values + batch, *write_start = values + 2 * batch;
    PyObject *result = NULL;
    wide total = 0;
    for (Py_ssize_t b = 0; b < batch; ++b) {
        seq_len[b] = entry(&lengths, b, 0);
        if (seq_len[b] < 0) {
            const wide found[2] = {b, seq_len[b]};
            value_error("seq_len[%S] = %S is negative", 2, found);
            goto done;
        }
        read_start[b] = (int64_t)total; /* total < ntokens or the sum check below raises */
        total += seq_len[b];
    }
    if (total != ntokens) {
        const wide found[2] = {total, ntokens};
        value_error("sum(seq_len) = %S must equal ntokens = %S (rows of new_kv)", 2, found);
        goto done;
    }
    for (Py_ssize_t b = 0; b < batch; ++b) {
        const int64_t offset = entry(&offsets, b, 0);
        if (offset < seq_len[b]) {
            const wide found[2] = {b, offset};
            value_error("token_offset[%S] = %S is smaller than seq_len at that index", 2, found);
            goto done;
        }
        write_start[b] = offset - seq_len[b];
    }
    for (Py_ssize_t b = 0; b < batch; ++b) {
        const int64_t offset = entry(&offsets, b, 0);
        if (offset > max_seq_len) {
            const wide found[3] = {b, offset, max_seq_len};
            value_error("token_offset[%S] = %S exceeds max_seq_len = %S (past.shape[2])", 3, found);
            goto done;
        }
    }
    PyObject *lists[3] = {list_of(seq_len, batch), list_of(read_start, batch), list_of(write_start, batch)};
    result = tuple_of_lists(3, lists);
done:
    PyMem_Free(values);
    return result;
}

/* ----------------------------------------------------------------------------- paged_cache_load */

/* lens[b], out_start[b] per batch entry from context_lens in either mode; -1 with an exception set. */
static int lengths_and_starts(const Index *given, int cumsum, Py_ssize_t batch, int64_t *lens, int64_t *out_start,
                              wide *end_row) {
    const Py_ssize_t n = given->size0;
    for (Py_ssize_t i = 0; i < n; ++i) {
        const int64_t value = entry(given, i, 0);
        if (value < 0) {
            const wide found[2] = {i, value};
            value_error("context_lens[%S] = %S is negative", 2, found);
            return -1;
        }
    }
    if (cumsum) {
        for (Py_ssize_t b = 0; b < batch; ++b) {
            const int64_t start = entry(given, b, 0), end = entry(given, b + 1, 0);
            if (end < start) {
                const wide found[4] = {b + 1, end, b, start};
                value_error("context_lens[%S] = %S is smaller than context_lens[%S] = %S: "
                            "cumulative lengths must be non-decreasing", 4, found);
                return -1;
            }
            lens[b] = end - start;
            out_start[b] = start;
        }
        *end_row = entry(given, n - 1, 0); /* context_lens[-1] rows, even with batch 0 */
        return 0;
    }
    wide total = 0;
    for (Py_ssize_t b = 0; b < batch; ++b) {
        lens[b] = entry(given, b, 0);
        out_start[b] = total <= INT64_MAX ? (int64_t)total : INT64_MAX; /* the row-limit check raises then */
        total += lens[b];
    }
    *end_row = total;
    return 0;
}

static PyObject *paged_cache_load(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    if (nargs != 6) {
        PyErr_SetString(PyExc_TypeError,
                        "paged_cache_load(context_lens, seq_starts, block_table, cumsum, block_size, num_blocks)");
        return NULL;
    }
    Index given, starts, table;
    const int has_starts = args[1] != Py_None, check_table = args[2] != Py_None;
    if (read_index(args[0], &given) != 0 || (has_starts && read_index(args[1], &starts) != 0) ||
        (check_table && read_index(args[2], &table) != 0))
        return NULL;
    const int cumsum = PyObject_IsTrue(args[3]);
    const long long block_size = PyLong_AsLongLong(args[4]), num_blocks = PyLong_AsLongLong(args[5]);
    if (cumsum < 0 || PyErr_Occurred()) return NULL;
    if (block_size <= 0) {
        PyErr_SetString(PyExc_ValueError, "_values: block_size must be positive");
        return NULL;
    }
    const Py_ssize_t batch = cumsum ? given.size0 - 1 : given.size0;
    if (batch < 0 || (has_starts && starts.size0 != batch) || (check_table && table.size0 != batch)) {
        PyErr_SetString(PyExc_ValueError, "_values.paged_cache_load: context_lens, seq_starts and block_table "
                                          "must agree on the batch (the structure rules check it)");
        return NULL;
    }
    const size_t slots = (size_t)(batch > 0 ? batch : 1);
    int64_t *values = PyMem_Malloc(3 * slots * sizeof(int64_t));
    wide *last_column = PyMem_Malloc(slots * sizeof(wide));
    int64_t *blocks = NULL;
    PyObject *result = NULL;
    if (values == NULL || last_column == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    int64_t *lens = values, *out_start = values + batch, *first_column = values + 2 * batch;
    wide end_row;
    if (lengths_and_starts(&given, cumsum, batch, lens, out_start, &end_row) != 0) goto done;
    for (Py_ssize_t b = 0; b < batch; ++b) {
        const int64_t start = has_starts ? entry(&starts, b, 0) : 0;
        if (start < 0) {
            const wide found[2] = {b, start};
            value_error("seq_starts[%S] = %S is negative", 2, found);
            goto done;
        }
        first_column[b] = start / block_size;
    }
    if (end_row > INT32_LIMIT) {
        const wide found[2] = {end_row, INT32_LIMIT};
        value_error("the output would have %S rows (from context_lens), more than the kernels' int32 limit %S", 2,
                    found);
        goto done;
    }
    Py_ssize_t needed = 0; /* end_row <= INT32_LIMIT bounds every length, so the blocks fit */
    if (check_table) {
        const Py_ssize_t max_blocks = table.size1;
        for (Py_ssize_t b = 0; b < batch; ++b) {
            last_column[b] = (wide)first_column[b] + (lens[b] + block_size - 1) / block_size;
            if (last_column[b] > max_blocks) {
                const wide found[7] = {max_blocks, b, first_column[b], last_column[b] - 1, lens[b], first_column[b],
                                       block_size};
                value_error("block_table has %S columns, but batch entry %S needs columns %S..%S (%S tokens from "
                            "column %S, block_size %S)", 7, found);
                goto done;
            }
            needed += (Py_ssize_t)(last_column[b] - first_column[b]);
        }
        blocks = PyMem_Malloc((size_t)(needed > 0 ? needed : 1) * sizeof(int64_t));
        if (blocks == NULL) {
            PyErr_NoMemory();
            goto done;
        }
        Py_ssize_t k = 0;
        for (Py_ssize_t b = 0; b < batch; ++b) {
            for (Py_ssize_t c = first_column[b]; c < (Py_ssize_t)last_column[b]; ++c) {
                const int64_t block = entry(&table, b, c);
                if (block < 0 || block >= num_blocks) {
                    const wide found[4] = {b, c, block, num_blocks};
                    value_error("block_table[%S, %S] = %S is outside [0, %S) (num_blocks = key_cache.shape[0])", 4,
                                found);
                    goto done;
                }
                blocks[k++] = block;
            }
        }
    }
    PyObject *lists[5] = {list_of(blocks, needed), list_of(lens, batch), list_of(out_start, batch),
                          list_of(first_column, batch), wide_to_python(end_row)};
    result = tuple_of_lists(5, lists);
done:
    PyMem_Free(values);
    PyMem_Free(last_column);
    PyMem_Free(blocks);
    return result;
}

static PyMethodDef methods[] = {
    {"kv_cache", (PyCFunction)(void (*)(void))kv_cache, METH_FASTCALL,
     "kv_cache's index-value rules and host plan (see the source header)."},
    {"paged_cache_load", (PyCFunction)(void (*)(void))paged_cache_load, METH_FASTCALL,
     "paged_cache_load's index-value rules and host plan (see the source header)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_values", "Index-value rules at C speed.", -1, methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__values(void) {
    PyObject **names[] = {&name_data_ptr, &name_element_size, &name_stride, &name_shape};
    const char *texts[] = {"data_ptr", "element_size", "stride", "shape"};
    for (size_t k = 0; k < sizeof names / sizeof names[0]; ++k) {
        *names[k] = PyUnicode_InternFromString(texts[k]);
        if (*names[k] == NULL) return NULL;
    }
    return PyModule_Create(&module);
}
