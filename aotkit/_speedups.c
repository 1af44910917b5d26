/* aotkit._speedups: the C parts of aotkit's call path (aotkit/_native.py says what stands in
 * for them where the install found no C compiler).
 *
 * `Front` is what `compiled(*args)` and `jit(f)(*args)` call once jaxlib's C++ dispatch
 * stands behind them (aotkit/backends/pjrt.py, `native_dispatcher`). It does the common
 * case of that function's Python `call` without a Python frame: a call of positional device
 * arrays, small NumPy values of dtypes x64 mode keeps, Python scalars, and lists, tuples and
 * dicts of them goes straight to jaxlib's C++ dispatch for its x64 mode, and so does one
 * with NumPy arrays of those dtypes under `staged_from` bytes as positional arguments (it
 * returns once its results are ready: the transfer may read such an array in place); every
 * other call goes to the Python `call`, which holds the full rules. The two must agree on
 * every call this one takes (tests/backends/test_dispatch_fronts.py compares them call by
 * call).
 *
 * An exception from the C++ dispatch goes to the Python `failed(error, args)`, which
 * either recovers (an array donated to an earlier call: the checked call words the error)
 * or raises it without aotkit's frames. A call's lists and dicts are copied first
 * (`snapshot`), as the Python front copies them (`aotkit._native.snapshot`): what the C++
 * dispatch keys is what it traces and runs, whatever another thread does to the caller's.
 *
 * `Dispatching` is the base class of `jit(f)` objects: calling one calls its `_dispatch`.
 *
 * `Binder` is `aotkit.tracing.core.bind` where it can be: the tracer's hot path, the
 * common case of making one StableHLO op, without a Python frame (see below).
 *
 * Every entry of every type refuses an object its `__init__` did not set up (made by
 * `__new__` alone, or whose `__init__` failed) with a TypeError; an `__init__` that fails
 * leaves what the object held before, whole; a call that leads back to its own object
 * (`j._dispatch = j`) is Python's RecursionError.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>
#include <stdint.h>
#include <string.h>

/* The head of NumPy's array object (`PyArrayObject_fields` in numpy/ndarraytypes.h), read
 * without NumPy's headers. Extensions compiled against NumPy read these fields at these
 * offsets, so NumPy keeps them; `Front` checks them on an array of its own before use. */
typedef struct {
    PyObject_HEAD
    char *data;
    int nd;
    Py_ssize_t *dimensions;
    Py_ssize_t *strides;
    PyObject *base;
    PyObject *descr;
} ArrayHead;

/* At most this many exact NumPy dtypes (and as many scalar types), and Python scalar types. */
#define MAX_EXACT 32
#define MAX_PYTHON 8

typedef struct {
    PyObject_HEAD
    vectorcallfunc vectorcall;
    PyObject *wide;           /* C++ dispatch, calls that key alike in either x64 mode */
    PyObject *narrow;         /* C++ dispatch for calls with a Python scalar, x64 off */
    PyObject *slow;           /* the Python `call`: every call this front does not take */
    PyObject *failed;         /* failed(error, args): recovers or raises */
    PyObject *array_type;     /* jaxlib's device array type */
    PyObject *key_type;       /* JAX's typed PRNG key arrays (device data, keyed alike) */
    PyObject *ndarray_type;   /* numpy.ndarray */
    PyObject *exact_scalars;  /* frozenset: NumPy scalar types of exact dtypes */
    PyObject *exact_dtypes;   /* tuple: NumPy dtypes x64 mode does not narrow */
    PyObject *python_scalars; /* frozenset: bool, int, float, complex */
    PyObject *wide_dtypes;    /* tuple: NumPy dtypes x64 mode keeps and x64-off narrows */
    PyObject *wide_scalars;   /* frozenset: NumPy scalar types of `wide_dtypes` */
    PyObject *x64;            /* its `value`: JAX's x64 mode on this thread */
    PyObject *scalars_64;     /* [True] once the programs take x64 mode's Python scalars */
    PyObject *clear_cache;    /* forgets the C++ dispatch's cached signatures */
    PyObject *settle;         /* settle(out): waits until every result in `out` is ready */
    Py_ssize_t in_place_from; /* NumPy arrays this large the transfer may read in place */
    Py_ssize_t staged_from;   /* NumPy arrays this large go to `slow` (it may stage them) */
    Py_ssize_t copied_below;  /* ... and under this the transfer copies unaligned ones */
    int copy_arrays;          /* copies the arrays it would wait for (a client that may read
                                 any of them after the call: copies cost no wait) */
    uint64_t unread;          /* bit i: positional argument i is a leaf the executable does
                                 not read (a pruned one): an array of an exact dtype there
                                 is neither waited for nor copied, whatever its size */
    /* `exact_dtypes` by identity, and their item sizes: an array's dtype is one of these
     * objects (NumPy's own instances of its built-in dtypes) or the array goes to `slow`. */
    Py_ssize_t n_exact;
    PyObject *exact[MAX_EXACT];
    Py_ssize_t itemsize[MAX_EXACT];
    /* `wide_dtypes` likewise. */
    Py_ssize_t n_wide;
    PyObject *wide_dtype[MAX_EXACT];
    Py_ssize_t wide_itemsize[MAX_EXACT];
    /* The members of `exact_scalars`, `wide_scalars` and `python_scalars` (types: compared
     * by identity, as set membership compares them, without hashing). */
    Py_ssize_t n_exact_scalars, n_wide_scalars, n_python_scalars;
    PyObject *exact_scalar_types[MAX_EXACT];
    PyObject *wide_scalar_types[MAX_EXACT];
    PyObject *python_scalar_types[MAX_PYTHON];
    char ready; /* 1 once an `__init__` ran to its end: until then every entry refuses */
} Front;

/* What a `Front`'s `__init__` reads from its arguments before it sets any of it (a front
 * whose `__init__` fails keeps what it held: in use, a front stays whole). */
typedef struct {
    Py_ssize_t n_exact;
    PyObject *exact[MAX_EXACT];
    Py_ssize_t itemsize[MAX_EXACT];
    Py_ssize_t n_wide;
    PyObject *wide_dtype[MAX_EXACT];
    Py_ssize_t wide_itemsize[MAX_EXACT];
    Py_ssize_t n_exact_scalars, n_wide_scalars, n_python_scalars;
    PyObject *exact_scalar_types[MAX_EXACT];
    PyObject *wide_scalar_types[MAX_EXACT];
    PyObject *python_scalar_types[MAX_PYTHON];
} FrontTables;

/* The TypeError of an entry of an object its `__init__` never set up (made by `__new__`
 * alone, or whose `__init__` failed). */
static void
not_initialised(const char *name, const char *why, const char *how)
{
    PyErr_Format(PyExc_TypeError, "%s: this object was not initialised (%s); %s", name, why,
                 how);
}

#define NEVER_SET_UP "made by __new__ alone, or its __init__ failed"

#define FRONT_HOW "make one with Front(wide=..., narrow=..., slow=..., ...)"

static int
is_one_of(PyObject *const *types, Py_ssize_t n, PyObject *type)
{
    for (Py_ssize_t i = 0; i < n; i++) {
        if (types[i] == type) {
            return 1;
        }
    }
    return 0;
}

/* The members of a frozenset into `out` (borrowed: the set holds them); -1 on error. */
static int
members(PyObject *set, PyObject **out, Py_ssize_t capacity, Py_ssize_t *n, const char *name)
{
    Py_ssize_t size = PySet_GET_SIZE(set);
    if (size > capacity) {
        PyErr_Format(PyExc_ValueError, "%s: at most %zd types, got %zd", name, capacity,
                     size);
        return -1;
    }
    PyObject *iterator = PyObject_GetIter(set);
    if (iterator == NULL) {
        return -1;
    }
    PyObject *item;
    Py_ssize_t i = 0;
    while ((item = PyIter_Next(iterator)) != NULL) {
        out[i++] = item;
        Py_DECREF(item);
    }
    Py_DECREF(iterator);
    if (PyErr_Occurred()) {
        return -1;
    }
    *n = i;
    return 0;
}

/* The objects a `Front` holds, in `__init__`'s keyword order: the one list that setting,
 * visiting and clearing them go through. */
#define N_HELD 16

static void
held(Front *self, PyObject **slots[N_HELD])
{
    PyObject **all[N_HELD] = {
        &self->wide, &self->narrow, &self->slow, &self->failed, &self->array_type,
        &self->key_type, &self->ndarray_type, &self->exact_scalars, &self->exact_dtypes,
        &self->python_scalars, &self->wide_dtypes, &self->wide_scalars, &self->x64,
        &self->scalars_64, &self->clear_cache, &self->settle,
    };
    memcpy(slots, all, sizeof(all));
}

/* What this front makes of a NumPy array: SMALL, of an exact dtype and under
 * `in_place_from` bytes, or under `copied_below` and not 64-byte aligned (the transfer copies
 * it while the call runs); IN_PLACE, of an exact dtype and under
 * `staged_from` bytes (the transfer may read it in place while the call runs); else 0.
 * Reads the array's head: no attribute lookups, no dtype hashing (each costs more here than
 * the rest of this front does). */
#define SMALL 1
#define IN_PLACE 2

static int
array_kind(Front *self, PyObject *arg, PyObject *const *dtypes, const Py_ssize_t *itemsize,
           Py_ssize_t n)
{
    const ArrayHead *head = (const ArrayHead *)arg;
    for (Py_ssize_t i = 0; i < n; i++) {
        if (head->descr == dtypes[i]) {
            Py_ssize_t nbytes = itemsize[i];
            for (int d = 0; d < head->nd && nbytes < self->staged_from; d++) {
                nbytes *= head->dimensions[d];
            }
            if (nbytes < self->in_place_from) {
                return SMALL;
            }
            if (nbytes < self->copied_below && (uintptr_t)head->data % 64 != 0) {
                return SMALL; /* copied while the call runs: not read in place */
            }
            return nbytes < self->staged_from ? IN_PLACE : 0;
        }
    }
    return 0;
}

static int
exact_array(Front *self, PyObject *arg)
{
    return array_kind(self, arg, self->exact, self->itemsize, self->n_exact);
}

/* Whether positional argument `i` is an array the executable does not read (`unread`), of an
 * exact dtype: it keys alike in either x64 mode, and nothing transfers it. */
static int
unread_array(Front *self, Py_ssize_t i, PyObject *arg)
{
    if (i >= 64 || !((self->unread >> i) & 1) ||
        Py_TYPE(arg) != (PyTypeObject *)self->ndarray_type) {
        return 0;
    }
    const ArrayHead *head = (const ArrayHead *)arg;
    for (Py_ssize_t k = 0; k < self->n_exact; k++) {
        if (head->descr == self->exact[k]) {
            return 1;
        }
    }
    return 0;
}

/* Reads the head of an array made here against what NumPy says of it; -1 (an error set)
 * where they differ. */
static int
check_array_head(PyObject *ndarray_type, PyObject *dtype)
{
    PyObject *shape = Py_BuildValue("(nn)", (Py_ssize_t)3, (Py_ssize_t)5);
    if (shape == NULL) {
        return -1;
    }
    PyObject *probe = PyObject_CallFunctionObjArgs(ndarray_type, shape, dtype, NULL);
    Py_DECREF(shape);
    if (probe == NULL) {
        return -1;
    }
    const ArrayHead *head = (const ArrayHead *)probe;
    /* Fields are read only from an object of that type and at least that size. */
    int same = Py_TYPE(probe) == (PyTypeObject *)ndarray_type &&
               Py_TYPE(probe)->tp_basicsize >= (Py_ssize_t)sizeof(ArrayHead) && head->nd == 2 &&
               head->dimensions[0] == 3 && head->dimensions[1] == 5 && head->descr == dtype;
    Py_DECREF(probe);
    if (!same) {
        PyErr_SetString(PyExc_RuntimeError,
                        "aotkit._speedups: NumPy's array head is not the one this build reads");
        return -1;
    }
    return 0;
}

/* Containers nested deeper than this go to `slow`. */
#define MAX_DEPTH 16

/* Whether this front takes an argument: a device array, a NumPy array or scalar of an exact
 * dtype (an array under `in_place_from` bytes, or, as a positional argument itself, under
 * `staged_from` bytes: noted in `in_place`), a Python scalar (noted in `python_scalar`),
 * None, or a list, tuple or dict (exactly those types, as the Python front's `_CONTAINERS`)
 * of such. Reads no attribute and runs no Python code, so the containers cannot change
 * while it looks. */
static int
takes(Front *self, PyObject *arg, int depth, int *python_scalar, int *in_place, int *wide)
{
    PyObject *type = (PyObject *)Py_TYPE(arg);
    if (type == self->array_type || type == self->key_type) {
        return 1;
    }
    if (type == self->ndarray_type) {
        int kind = exact_array(self, arg);
        if (kind == IN_PLACE && depth == 0) {
            *in_place = 1;
            return 1;
        }
        if (kind == 0) {
            kind = array_kind(self, arg, self->wide_dtype, self->wide_itemsize, self->n_wide);
            if (kind == SMALL || (kind == IN_PLACE && depth == 0)) {
                *wide = 1; /* keys as itself in x64 mode only */
                *in_place |= kind == IN_PLACE;
                return 1;
            }
            return 0;
        }
        return kind == SMALL;
    }
    if (is_one_of(self->exact_scalar_types, self->n_exact_scalars, type)) {
        return 1;
    }
    if (is_one_of(self->wide_scalar_types, self->n_wide_scalars, type)) {
        *wide = 1;
        return 1;
    }
    if (is_one_of(self->python_scalar_types, self->n_python_scalars, type)) {
        *python_scalar = 1;
        return 1;
    }
    if (arg == Py_None) {
        return 1;
    }
    if (depth >= MAX_DEPTH) {
        return 0;
    }
    if (PyTuple_CheckExact(arg)) {
        for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(arg); i++) {
            if (!takes(self, PyTuple_GET_ITEM(arg, i), depth + 1, python_scalar, in_place, wide)) {
                return 0;
            }
        }
        return 1;
    }
    if (PyList_CheckExact(arg)) {
        for (Py_ssize_t i = 0; i < PyList_GET_SIZE(arg); i++) {
            if (!takes(self, PyList_GET_ITEM(arg, i), depth + 1, python_scalar, in_place, wide)) {
                return 0;
            }
        }
        return 1;
    }
    if (PyDict_CheckExact(arg)) {
        Py_ssize_t position = 0;
        PyObject *key, *value;
        while (PyDict_Next(arg, &position, &key, &value)) {
            if (!takes(self, value, depth + 1, python_scalar, in_place, wide)) {
                return 0;
            }
        }
        return 1;
    }
    return 0;
}

/* The C++ dispatch raised: `failed(error, args)` recovers or raises it filtered. Errors
 * that are not `Exception`s (KeyboardInterrupt) leave as they are, as from the Python
 * front. */
static PyObject *
after_failure(Front *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (!PyErr_ExceptionMatches(PyExc_Exception)) {
        return NULL;
    }
#if PY_VERSION_HEX >= 0x030C0000
    PyObject *error = PyErr_GetRaisedException();
#else
    PyObject *type, *error, *traceback;
    PyErr_Fetch(&type, &error, &traceback);
    PyErr_NormalizeException(&type, &error, &traceback);
    if (traceback != NULL) {
        PyException_SetTraceback(error, traceback);
    }
    Py_XDECREF(type);
    Py_XDECREF(traceback);
#endif
    PyObject *tuple = PyTuple_New(nargs);
    if (tuple == NULL) {
        Py_DECREF(error);
        return NULL;
    }
    for (Py_ssize_t i = 0; i < nargs; i++) {
        Py_INCREF(args[i]);
        PyTuple_SET_ITEM(tuple, i, args[i]);
    }
    PyObject *failed = Py_NewRef(self->failed);
    PyObject *out = PyObject_CallFunctionObjArgs(failed, error, tuple, NULL);
    Py_DECREF(failed);
    Py_DECREF(tuple);
    Py_DECREF(error);
    return out;
}

/* Whether `arg` is a container this front looks into. */
static int
is_container(PyObject *arg)
{
    return PyTuple_CheckExact(arg) || PyList_CheckExact(arg) || PyDict_CheckExact(arg);
}

/* `arg` with each list and dict in it copied (tuples holding one rebuilt): the call's own
 * structure, which another thread changing the caller's lists and dicts cannot change while
 * the C++ dispatch keys, transfers and (on a miss) traces it (issue 43). Each container is
 * copied whole at once, then its copy's items; below `MAX_DEPTH`, which `takes` sends to
 * `slow`, nothing is copied. A new reference, or NULL with an error set. */
static PyObject *
snapshot(PyObject *arg, int depth)
{
    if (depth >= MAX_DEPTH) {
        return Py_NewRef(arg);
    }
    if (PyList_CheckExact(arg)) {
        PyObject *copy = PyList_GetSlice(arg, 0, PY_SSIZE_T_MAX);
        for (Py_ssize_t i = 0; copy != NULL && i < PyList_GET_SIZE(copy); i++) {
            PyObject *item = PyList_GET_ITEM(copy, i);
            if (is_container(item)) {
                PyObject *inner = snapshot(item, depth + 1);
                if (inner == NULL) {
                    Py_CLEAR(copy);
                    break;
                }
                PyList_SET_ITEM(copy, i, inner);
                Py_DECREF(item);
            }
        }
        return copy;
    }
    if (PyDict_CheckExact(arg)) {
        PyObject *copy = PyDict_Copy(arg);
        if (copy == NULL) {
            return NULL;
        }
        /* Values replaced in place: the keys (and so the iteration) stay as they are. */
        Py_ssize_t position = 0;
        PyObject *key, *value;
        while (PyDict_Next(copy, &position, &key, &value)) {
            if (is_container(value)) {
                PyObject *inner = snapshot(value, depth + 1);
                int failed = inner == NULL || PyDict_SetItem(copy, key, inner) < 0;
                Py_XDECREF(inner);
                if (failed) {
                    Py_DECREF(copy);
                    return NULL;
                }
            }
        }
        return copy;
    }
    if (PyTuple_CheckExact(arg)) {
        Py_ssize_t n = PyTuple_GET_SIZE(arg);
        int any = 0;
        for (Py_ssize_t i = 0; i < n && !any; i++) {
            any = is_container(PyTuple_GET_ITEM(arg, i));
        }
        if (!any) {
            return Py_NewRef(arg);
        }
        PyObject *copy = PyTuple_New(n);
        for (Py_ssize_t i = 0; copy != NULL && i < n; i++) {
            PyObject *inner = snapshot(PyTuple_GET_ITEM(arg, i), depth + 1);
            if (inner == NULL) {
                Py_CLEAR(copy);
                break;
            }
            PyTuple_SET_ITEM(copy, i, inner);
        }
        return copy;
    }
    return Py_NewRef(arg);
}

/* Calls this many positional arguments and fewer copy them onto the C stack. */
#define SMALL_CALL 8

/* A call of `args` (the call's own: no container in them another thread can change). */
static PyObject *
front_call(Front *self, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    int python_scalar = 0, in_place = 0, wide = 0;
    if (kwnames != NULL && PyTuple_GET_SIZE(kwnames) > 0) {
        goto slow;
    }
    for (Py_ssize_t i = 0; i < nargs; i++) {
        if (!unread_array(self, i, args[i]) &&
            !takes(self, args[i], 0, &python_scalar, &in_place, &wide)) {
            goto slow;
        }
    }
    /* In x64 mode a 64-bit NumPy value keys as itself, in `wide`, and a Python scalar with
     * it keys as x64 mode's (as under jax.jit); so does a Python scalar alone where the
     * programs take x64 mode's scalars (JAX functions: `scalars_64`). With x64 off the
     * Python front switches the mode around a call of 64-bit values. */
    int in_wide = !python_scalar;
    if (wide || python_scalar) {
        int x64_scalars = PyList_CheckExact(self->scalars_64) &&
                          PyList_GET_SIZE(self->scalars_64) > 0 &&
                          PyList_GET_ITEM(self->scalars_64, 0) == Py_True;
        if (wide || x64_scalars) {
            PyObject *mode = PyObject_GetAttrString(self->x64, "value");
            if (mode == NULL) {
                return NULL;
            }
            in_wide = mode == Py_True;
            Py_DECREF(mode);
            if (wide && !in_wide) {
                goto slow;
            }
        }
    }
    if (!in_wide && in_place) {
        goto slow;  /* the Python front switches the x64 mode around such a call */
    }
    /* A client that may read a NumPy argument after the call returns gets copies of the
     * positional arrays instead (nested ones went to `slow`, which copies them): nobody else
     * holds a copy, and the transfer keeps it alive until it has read it. */
    PyObject *stack[SMALL_CALL];
    PyObject **copies = NULL;
    if (in_place && self->copy_arrays) {
        copies = nargs <= SMALL_CALL ? stack : PyMem_New(PyObject *, nargs);
        if (copies == NULL) {
            return PyErr_NoMemory();
        }
        for (Py_ssize_t i = 0; i < nargs; i++) {
            copies[i] = Py_TYPE(args[i]) == (PyTypeObject *)self->ndarray_type &&
                                !unread_array(self, i, args[i])
                            ? PyObject_CallMethod(args[i], "copy", NULL)
                            : Py_NewRef(args[i]);
            if (copies[i] == NULL) {
                for (Py_ssize_t j = 0; j < i; j++) {
                    Py_DECREF(copies[j]);
                }
                if (copies != stack) {
                    PyMem_Free(copies);
                }
                return NULL;
            }
        }
        in_place = 0; /* nothing of the caller's goes to the transfer: nothing to wait for */
    }
    /* A Python scalar is otherwise the weakly typed 32-bit value of x64 off: `narrow` keys
     * and runs calls in that mode, and switches a call made in x64 mode on its own (its
     * cache miss). Each callable is held while it runs: Python code in it may set this front
     * up again. */
    PyObject *dispatch = Py_NewRef(in_wide ? self->wide : self->narrow);
    /* (The copies without the offset flag: `copies` has no slot before its first one.) */
    PyObject *out = copies != NULL ? PyObject_Vectorcall(dispatch, copies, (size_t)nargs, NULL)
                                   : PyObject_Vectorcall(dispatch, args, nargsf, NULL);
    Py_DECREF(dispatch);
    if (copies != NULL) {
        for (Py_ssize_t i = 0; i < nargs; i++) {
            Py_DECREF(copies[i]);
        }
        if (copies != stack) {
            PyMem_Free(copies);
        }
    }
    if (out == NULL) {
        return after_failure(self, args, nargs);
    }
    if (in_place) {
        /* The caller may write to its arrays once the call returns. */
        PyObject *ready;
        if (Py_TYPE(out) == (PyTypeObject *)self->array_type) {
            ready = PyObject_CallMethod(out, "block_until_ready", NULL);
        }
        else {
            PyObject *settle = Py_NewRef(self->settle);
            ready = PyObject_CallOneArg(settle, out);
            Py_DECREF(settle);
        }
        if (ready == NULL) {
            Py_DECREF(out);
            return NULL;
        }
        Py_DECREF(ready);
    }
    return out;
slow:;
    PyObject *slow = Py_NewRef(self->slow);
    PyObject *result = PyObject_Vectorcall(slow, args, nargsf, kwnames);
    Py_DECREF(slow);
    return result;
}

static PyObject *
front_vectorcall(PyObject *op, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    Front *self = (Front *)op;
    if (!self->ready) {
        not_initialised("Front", NEVER_SET_UP, FRONT_HOW);
        return NULL;
    }
    /* A front set up again with itself (or a `Dispatching` that calls it) behind it. */
    if (Py_EnterRecursiveCall(" in a call through aotkit's C dispatch front")) {
        return NULL;
    }
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    int containers = 0;
    for (Py_ssize_t i = 0; i < nargs && !containers; i++) {
        containers = is_container(args[i]);
    }
    PyObject *out;
    if (!containers || (kwnames != NULL && PyTuple_GET_SIZE(kwnames) > 0)) {
        out = front_call(self, args, nargsf, kwnames); /* (keywords: `slow` copies them) */
    }
    else {
        PyObject *stack[SMALL_CALL];
        PyObject **copied = nargs <= SMALL_CALL ? stack : PyMem_New(PyObject *, nargs);
        Py_ssize_t made = 0;
        if (copied == NULL) {
            PyErr_NoMemory();
        }
        else {
            for (; made < nargs; made++) {
                if ((copied[made] = snapshot(args[made], 0)) == NULL) {
                    break;
                }
            }
        }
        /* Without the offset flag: `copied` has no slot before its first argument. */
        out = made == nargs ? front_call(self, copied, (size_t)nargs, NULL) : NULL;
        for (Py_ssize_t i = 0; i < made; i++) {
            Py_DECREF(copied[i]);
        }
        if (copied != stack) {
            PyMem_Free(copied);
        }
    }
    Py_LeaveRecursiveCall();
    return out;
}

/* The dtypes of a tuple (`least` to MAX_EXACT of them) and their item sizes into `dtypes` and
 * `itemsize` (borrowed: the tuple holds them); -1 on error. */
static int
dtype_table(PyObject *tuple, Py_ssize_t least, PyObject **dtypes, Py_ssize_t *itemsize,
            Py_ssize_t *n, const char *name)
{
    Py_ssize_t size = PyTuple_GET_SIZE(tuple);
    if (size < least || size > MAX_EXACT) {
        PyErr_Format(PyExc_ValueError, "%s: %zd to %d dtypes, got %zd", name, least, MAX_EXACT,
                     size);
        return -1;
    }
    for (Py_ssize_t i = 0; i < size; i++) {
        PyObject *dtype = PyTuple_GET_ITEM(tuple, i);
        PyObject *bytes = PyObject_GetAttrString(dtype, "itemsize");
        if (bytes == NULL) {
            return -1;
        }
        itemsize[i] = PyLong_AsSsize_t(bytes);
        Py_DECREF(bytes);
        if (itemsize[i] == -1 && PyErr_Occurred()) {
            return -1;
        }
        if (itemsize[i] < 1) {
            PyErr_Format(PyExc_ValueError, "%s: %R has item size %zd", name, dtype, itemsize[i]);
            return -1;
        }
        dtypes[i] = dtype;
    }
    *n = size;
    return 0;
}

static int
front_init(PyObject *op, PyObject *args, PyObject *kwargs)
{
    Front *self = (Front *)op;
    static char *names[] = {
        "wide", "narrow", "slow", "failed", "array_type", "key_type", "ndarray_type",
        "exact_scalars", "exact_dtypes", "python_scalars", "wide_dtypes", "wide_scalars", "x64",
        "scalars_64", "clear_cache", "settle", "in_place_from", "staged_from", "copied_below",
        "copy_arrays", "unread", NULL,
    };
    PyObject *wide, *narrow, *slow, *failed, *array_type, *key_type, *ndarray_type,
        *exact_scalars, *exact_dtypes, *python_scalars, *wide_dtypes, *wide_scalars, *x64,
        *scalars_64, *clear_cache, *settle;
    Py_ssize_t in_place_from, staged_from, copied_below;
    int copy_arrays;
    PyObject *unread_positions;
    if (!PyArg_ParseTupleAndKeywords(
            args, kwargs, "$OOOOOOOO!O!O!O!O!OO!OOnnnpO!", names, &wide, &narrow, &slow, &failed,
            &array_type, &key_type, &ndarray_type, &PyFrozenSet_Type, &exact_scalars,
            &PyTuple_Type, &exact_dtypes, &PyFrozenSet_Type, &python_scalars, &PyTuple_Type,
            &wide_dtypes, &PyFrozenSet_Type, &wide_scalars, &x64, &PyList_Type, &scalars_64,
            &clear_cache, &settle, &in_place_from, &staged_from, &copied_below,
            &copy_arrays, &PyTuple_Type, &unread_positions)) {
        return -1;
    }
    uint64_t unread = 0;
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(unread_positions); i++) {
        PyObject *item = PyTuple_GET_ITEM(unread_positions, i);
        long position = PyLong_CheckExact(item) ? PyLong_AsLong(item) : -1;
        if (position == -1 && PyErr_Occurred()) {
            PyErr_Clear();
        }
        if (position < 0 || position >= 64) {
            PyErr_SetString(PyExc_ValueError,
                            "unread: a tuple of positional argument indices, 0 to 63");
            return -1;
        }
        unread |= (uint64_t)1 << position;
    }
    /* Read with the set's own iteration, which runs no Python code (a subclass's might
     * hand out types the set does not hold). */
    if (!PyFrozenSet_CheckExact(exact_scalars) || !PyFrozenSet_CheckExact(python_scalars) ||
        !PyFrozenSet_CheckExact(wide_scalars)) {
        PyErr_SetString(PyExc_TypeError,
                        "Front: exact_scalars, wide_scalars and python_scalars must be "
                        "frozensets (not of a subclass)");
        return -1;
    }
    if (in_place_from < 0 || staged_from < in_place_from) {
        PyErr_Format(PyExc_ValueError,
                     "in_place_from and staged_from: 0 <= in_place_from <= staged_from, got %zd "
                     "and %zd",
                     in_place_from, staged_from);
        return -1;
    }
    if (copied_below < 0 || copied_below > staged_from) {
        PyErr_Format(PyExc_ValueError,
                     "copied_below: 0 <= copied_below <= staged_from, got %zd and %zd",
                     copied_below, staged_from);
        return -1;
    }
    /* Everything is read and checked first, and set only once all of it is at hand (the
     * call's arguments hold the objects meanwhile): a front whose `__init__` fails keeps
     * what it had, whole, or stays refusing. */
    FrontTables t;
    if (members(exact_scalars, t.exact_scalar_types, MAX_EXACT, &t.n_exact_scalars,
                "exact_scalars") < 0 ||
        members(wide_scalars, t.wide_scalar_types, MAX_EXACT, &t.n_wide_scalars,
                "wide_scalars") < 0 ||
        members(python_scalars, t.python_scalar_types, MAX_PYTHON, &t.n_python_scalars,
                "python_scalars") < 0 ||
        dtype_table(exact_dtypes, 1, t.exact, t.itemsize, &t.n_exact, "exact_dtypes") < 0 ||
        dtype_table(wide_dtypes, 0, t.wide_dtype, t.wide_itemsize, &t.n_wide, "wide_dtypes") <
            0) {
        return -1;
    }
    if (check_array_head(ndarray_type, t.exact[0]) < 0) {
        return -1;
    }
    PyObject **slots[N_HELD];
    held(self, slots);
    PyObject *values[N_HELD] = {
        wide, narrow, slow, failed, array_type, key_type, ndarray_type, exact_scalars,
        exact_dtypes, python_scalars, wide_dtypes, wide_scalars, x64, scalars_64, clear_cache,
        settle,
    };
    /* The old objects are let go only once the new ones are all in place (letting one go
     * may run Python code, which may call this front). */
    PyObject *old[N_HELD];
    for (int i = 0; i < N_HELD; i++) {
        old[i] = *slots[i];
        *slots[i] = Py_NewRef(values[i]);
    }
    self->in_place_from = in_place_from;
    self->staged_from = staged_from;
    self->copied_below = copied_below;
    self->copy_arrays = copy_arrays;
    self->unread = unread;
    self->n_exact = t.n_exact;
    memcpy(self->exact, t.exact, sizeof(t.exact));
    memcpy(self->itemsize, t.itemsize, sizeof(t.itemsize));
    self->n_wide = t.n_wide;
    memcpy(self->wide_dtype, t.wide_dtype, sizeof(t.wide_dtype));
    memcpy(self->wide_itemsize, t.wide_itemsize, sizeof(t.wide_itemsize));
    self->n_exact_scalars = t.n_exact_scalars;
    self->n_wide_scalars = t.n_wide_scalars;
    self->n_python_scalars = t.n_python_scalars;
    memcpy(self->exact_scalar_types, t.exact_scalar_types, sizeof(t.exact_scalar_types));
    memcpy(self->wide_scalar_types, t.wide_scalar_types, sizeof(t.wide_scalar_types));
    memcpy(self->python_scalar_types, t.python_scalar_types, sizeof(t.python_scalar_types));
    self->ready = 1;
    for (int i = 0; i < N_HELD; i++) {
        Py_XDECREF(old[i]);
    }
    return 0;
}

static int
front_traverse(PyObject *op, visitproc visit, void *arg)
{
    Front *self = (Front *)op;
    Py_VISIT(Py_TYPE(op));
    PyObject **slots[N_HELD];
    held(self, slots);
    for (int i = 0; i < N_HELD; i++) {
        Py_VISIT(*slots[i]);
    }
    return 0;
}

static int
front_clear(PyObject *op)
{
    Front *self = (Front *)op;
    PyObject **slots[N_HELD];
    held(self, slots);
    self->ready = 0;
    for (int i = 0; i < N_HELD; i++) {
        Py_CLEAR(*slots[i]);
    }
    return 0;
}

static void
front_dealloc(PyObject *op)
{
    PyTypeObject *type = Py_TYPE(op);
    PyObject_GC_UnTrack(op);
    front_clear(op);
    type->tp_free(op);
    Py_DECREF(type);
}

static PyObject *
front_new(PyTypeObject *type, PyObject *args, PyObject *kwargs)
{
    (void)args;  /* `__init__` reads them */
    (void)kwargs;
    Front *self = (Front *)type->tp_alloc(type, 0);
    if (self != NULL) {
        self->vectorcall = front_vectorcall;
    }
    return (PyObject *)self;
}

/* A getter of an object a front holds, refusing on a front never set up. */
static PyObject *
front_get(PyObject *op, void *offset)
{
    Front *self = (Front *)op;
    if (!self->ready) {
        not_initialised("Front", NEVER_SET_UP, FRONT_HOW);
        return NULL;
    }
    return Py_NewRef(*(PyObject **)((char *)self + (Py_ssize_t)offset));
}

static PyGetSetDef front_getset[] = {
    {"clear_cache", front_get, NULL,
     "Forgets every argument signature the C++ dispatch cached.",
     (void *)offsetof(Front, clear_cache)},
    {"slow", front_get, NULL, "The Python front, which takes every call this one does not.",
     (void *)offsetof(Front, slow)},
    {NULL},
};

static PyMemberDef front_members[] = {
    {"__vectorcalloffset__", T_PYSSIZET, offsetof(Front, vectorcall), READONLY, NULL},
    {NULL},
};

static PyType_Slot front_slots[] = {
    {Py_tp_doc, "The C front of a native dispatch (see aotkit/_speedups.c)."},
    {Py_tp_new, front_new},
    {Py_tp_init, front_init},
    {Py_tp_call, PyVectorcall_Call},
    {Py_tp_traverse, front_traverse},
    {Py_tp_clear, front_clear},
    {Py_tp_dealloc, front_dealloc},
    {Py_tp_members, front_members},
    {Py_tp_getset, front_getset},
    {0, NULL},
};

static PyType_Spec front_spec = {
    .name = "aotkit._speedups.Front",
    .basicsize = sizeof(Front),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL,
    .slots = front_slots,
};

/* `Dispatching`: a base class whose instances' call is their `_dispatch` attribute, with no
 * Python frame nor attribute lookup in between (`jit(f)(x)` calls `Front` through it). */
typedef struct {
    PyObject_HEAD
    vectorcallfunc vectorcall;
    PyObject *dispatch;
} Dispatching;

static PyObject *
dispatching_vectorcall(PyObject *op, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    PyObject *dispatch = ((Dispatching *)op)->dispatch;
    if (dispatch == NULL) {
        not_initialised(Py_TYPE(op)->tp_name, "its _dispatch is not set",
                        "make one by calling its class, whose __init__ sets _dispatch");
        return NULL;
    }
    /* A `_dispatch` that leads back to this object (itself, or objects that call each
     * other) is Python's RecursionError, as a Python `__call__` would be. */
    if (Py_EnterRecursiveCall(" in a call of a jitted function whose _dispatch calls it again")) {
        return NULL;
    }
    /* Held while it runs: Python code in it may set `_dispatch` again. */
    Py_INCREF(dispatch);
    PyObject *out = PyObject_Vectorcall(dispatch, args, nargsf, kwnames);
    Py_DECREF(dispatch);
    Py_LeaveRecursiveCall();
    return out;
}

static PyObject *
dispatching_new(PyTypeObject *type, PyObject *args, PyObject *kwargs)
{
    (void)args;  /* the subclass's `__init__` reads them */
    (void)kwargs;
    Dispatching *self = (Dispatching *)type->tp_alloc(type, 0);
    if (self != NULL) {
        self->vectorcall = dispatching_vectorcall;
    }
    return (PyObject *)self;
}

static int
dispatching_traverse(PyObject *op, visitproc visit, void *arg)
{
    Py_VISIT(Py_TYPE(op));
    Py_VISIT(((Dispatching *)op)->dispatch);
    return 0;
}

static int
dispatching_clear(PyObject *op)
{
    Py_CLEAR(((Dispatching *)op)->dispatch);
    return 0;
}

static void
dispatching_dealloc(PyObject *op)
{
    PyTypeObject *type = Py_TYPE(op);
    PyObject_GC_UnTrack(op);
    dispatching_clear(op);
    type->tp_free(op);
    Py_DECREF(type);
}

/* A class statement deriving from `Dispatching` (without a `__call__` of its own): calls of
 * its instances take the vectorcall protocol, as Python 3.12 and newer arrange themselves;
 * Python 3.11 leaves the flag off a class defined in Python, and each call then builds a
 * tuple of its arguments first. */
static PyObject *
dispatching_init_subclass(PyObject *cls, PyObject *args, PyObject *kwargs)
{
    (void)args;
    (void)kwargs;
    PyTypeObject *type = (PyTypeObject *)cls;
    if (type->tp_call == PyVectorcall_Call &&
        type->tp_vectorcall_offset == offsetof(Dispatching, vectorcall)) {
        type->tp_flags |= Py_TPFLAGS_HAVE_VECTORCALL;
    }
    Py_RETURN_NONE;
}

static PyMethodDef dispatching_methods[] = {
    {"__init_subclass__", (PyCFunction)(void (*)(void))dispatching_init_subclass,
     METH_VARARGS | METH_KEYWORDS | METH_CLASS, NULL},
    {NULL},
};

static PyMemberDef dispatching_members[] = {
    {"_dispatch", T_OBJECT_EX, offsetof(Dispatching, dispatch), 0,
     "What a call of this object calls, with the same arguments."},
    {"__vectorcalloffset__", T_PYSSIZET, offsetof(Dispatching, vectorcall), READONLY, NULL},
    {NULL},
};

static PyType_Slot dispatching_slots[] = {
    {Py_tp_doc, "A base class whose instances' call is their `_dispatch` attribute."},
    {Py_tp_new, dispatching_new},
    {Py_tp_call, PyVectorcall_Call},
    {Py_tp_traverse, dispatching_traverse},
    {Py_tp_clear, dispatching_clear},
    {Py_tp_dealloc, dispatching_dealloc},
    {Py_tp_members, dispatching_members},
    {Py_tp_methods, dispatching_methods},
    {0, NULL},
};

static PyType_Spec dispatching_spec = {
    .name = "aotkit._speedups.Dispatching",
    .basicsize = sizeof(Dispatching),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC |
             Py_TPFLAGS_HAVE_VECTORCALL,
    .slots = dispatching_slots,
};

/* `Binder`: the common case of `aotkit.tracing.core.bind` (the Python function it is built
 * with, `fallback`) without a Python frame: an op that is one StableHLO op
 * (`register_direct`) on tracers of the innermost open scope, whose result type the
 * lowering context already holds (an elementwise op's, by its operands' type; any other's
 * in the op's plan) and whose location it already holds (`lc.location`, or the location of
 * the line that called the caller). It checks all of that before it changes anything; every
 * other call goes to `fallback` as it came, which holds the full rules and fills the caches
 * this one reads. What it does with a call it takes is what `fallback` does, step by step
 * (tests/tracing/test_binder.py lowers programs with both and compares the modules). */

/* The slots of aotkit's classes that `Binder` reads and writes, by offset: their
 * `__slots__` member descriptors say where. */
enum { T_VALUE, T_SHAPE, T_DTYPE, T_WEAK, T_SCOPE, T_SEQ, T_TRANSPOSED, N_TRACER };
static const char *const TRACER_SLOTS[N_TRACER] = {
    "value", "shape", "dtype", "weak", "_scope", "seq", "transposed"};
enum { E_USED, E_DUPLICATES, E_SYMBOLIC, E_OPAQUE, E_FIRST_OP, E_CHLO, E_SIMPLIFY,
       E_CONSTANTS, N_EMITTED };
static const char *const EMITTED_SLOTS[N_EMITTED] = {
    "used", "duplicates", "symbolic", "opaque", "first_op", "chlo", "simplify", "constants"};
enum { C_PLANS, C_TENSOR_TYPES, C_LOCATION, C_LOCATIONS, N_CONTEXT };
static const char *const CONTEXT_SLOTS[N_CONTEXT] = {
    "plans", "tensor_types", "location", "locations"};
/* The fields of an op rule (`core.OpRule`, a named tuple) that `Binder` reads, found by name
 * in its `_fields`: the declaration is Python's, and this is only what is read of it. */
enum { R_HLO, R_ATTRIBUTES, R_CHLO, R_ELEMENTWISE, R_SIMPLIFIABLE, N_RULE };
static const char *const RULE_FIELDS[N_RULE] = {
    "hlo", "attributes", "chlo", "elementwise", "simplifiable"};

typedef struct {
    PyObject_HEAD
    vectorcallfunc vectorcall;
    PyObject *fallback;       /* the Python `bind`: every call this one does not take */
    PyObject *rules;          /* dict: op name -> its `_rules` entry */
    PyObject *tls;            /* `_tls` (threading.local): `scopes`, the open scopes */
    PyObject *contexts;       /* `_context._state` (threading.local): `stack` */
    PyObject *tracer_type;    /* `Tracer` */
    PyObject *scope_type;     /* `TraceScope` */
    PyObject *emitted_type;   /* `Emitted` */
    PyObject *context_type;   /* `_context.LoweringContext` */
    PyObject *create;         /* `ir.Operation.create` */
    PyObject *has_equal_user; /* `_has_equal_user(op, values)` */
    PyObject *with_constants; /* `_SIMPLIFY_WITH_CONSTANTS`: op name -> what it needs */
    PyObject *simplify_if;    /* `_SIMPLIFY_IF`: op name -> check(aval, out, params, x) */
    PyObject *internal;       /* `_internal_files`: file name -> whether it is aotkit's own */
    PyObject *rule_type;      /* `OpRule`: the type of every `rules` entry it takes */
    PyObject *create_names;   /* the keywords of `create`'s call */
    PyObject *str_scopes, *str_stack, *str_result, *str_first, *str_all;
    char enabled;             /* 0: every call goes to `fallback` */
    int busy;                 /* calls making an op now, past the checks (they ran Python code) */
    char first;               /* 1: returns the one result (`bind1`), else a list of it */
    Py_ssize_t tracer_at[N_TRACER];
    Py_ssize_t scope_emitted_at, scope_open_at;
    Py_ssize_t emitted_at[N_EMITTED];
    Py_ssize_t context_at[N_CONTEXT];
    Py_ssize_t rule_at[N_RULE];
    Py_ssize_t rule_size; /* len(OpRule._fields) */
} Binder;

#define BINDER_HOW "make one with Binder(fallback=..., rules=..., ...)"

#define SLOT(obj, offset) (*(PyObject **)((char *)(obj) + (offset)))

/* Sets a slot to a new reference of `value`. */
static void
set_slot(PyObject *obj, Py_ssize_t offset, PyObject *value)
{
    PyObject *old = SLOT(obj, offset);
    SLOT(obj, offset) = Py_NewRef(value);
    Py_XDECREF(old);
}

/* Whether the slot `EMITTED_SLOTS[which]` of `emitted` holds a true value; -1 on error. A
 * slot emptied while Python code ran (`del`) reads as Python reads it: an AttributeError. */
static int
emitted_truth(PyObject *emitted, const Py_ssize_t *offsets, int which)
{
    PyObject *value = SLOT(emitted, offsets[which]);
    if (value != NULL) {
        return PyObject_IsTrue(value);
    }
    value = PyObject_GetAttrString(emitted, EMITTED_SLOTS[which]);
    int truth = value == NULL ? -1 : PyObject_IsTrue(value);
    Py_XDECREF(value);
    return truth;
}

/* The offsets of `names` among `type`'s slots; -1 (an error set) if one is not a slot. */
static int
slot_offsets(PyObject *type, const char *const *names, int n, Py_ssize_t *out)
{
    for (int i = 0; i < n; i++) {
        PyObject *descr = PyObject_GetAttrString(type, names[i]);
        /* A slot of this class or a base of it (a descriptor of another class's slot, set
         * on this one, would name an offset of that other layout), inside its instances. */
        int ok = descr != NULL && Py_IS_TYPE(descr, &PyMemberDescr_Type) &&
                 ((PyMemberDescrObject *)descr)->d_member->type == T_OBJECT_EX &&
                 PyType_IsSubtype((PyTypeObject *)type,
                                  ((PyMemberDescrObject *)descr)->d_common.d_type) &&
                 ((PyMemberDescrObject *)descr)->d_member->offset >=
                     (Py_ssize_t)sizeof(PyObject) &&
                 ((PyMemberDescrObject *)descr)->d_member->offset +
                         (Py_ssize_t)sizeof(PyObject *) <=
                     ((PyTypeObject *)type)->tp_basicsize;
        if (ok) {
            out[i] = ((PyMemberDescrObject *)descr)->d_member->offset;
        }
        Py_XDECREF(descr);
        if (!ok) {
            PyErr_Clear();
            PyErr_Format(PyExc_TypeError, "Binder: %R.%s is not a slot", type, names[i]);
            return -1;
        }
    }
    return 0;
}

/* The indices of `names` among the fields of the named tuple type `type`, and their count;
 * -1 (an error set) if it is not one or lacks one of them. */
static int
field_indices(PyObject *type, const char *const *names, int n, Py_ssize_t *out,
              Py_ssize_t *size)
{
    PyObject *fields = NULL;
    if (PyType_IsSubtype((PyTypeObject *)type, &PyTuple_Type)) {
        fields = PyObject_GetAttrString(type, "_fields");
        if (fields == NULL) {
            PyErr_Clear();
        }
    }
    int ok = fields != NULL && PyTuple_CheckExact(fields);
    for (Py_ssize_t i = 0; ok && i < PyTuple_GET_SIZE(fields); i++) {
        ok = PyUnicode_CheckExact(PyTuple_GET_ITEM(fields, i));
    }
    if (!ok) {
        Py_XDECREF(fields);
        PyErr_Format(PyExc_TypeError,
                     "Binder: rule=%R is not a named tuple type (a tuple subclass whose "
                     "_fields is a tuple of names)",
                     type);
        return -1;
    }
    for (int k = 0; k < n; k++) {
        out[k] = -1;
        for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(fields); i++) {
            if (PyUnicode_CompareWithASCIIString(PyTuple_GET_ITEM(fields, i), names[k]) == 0) {
                out[k] = i;
                break;
            }
        }
        if (out[k] < 0) {
            PyErr_Format(PyExc_TypeError, "Binder: rule=%R has no field %s", type, names[k]);
            Py_DECREF(fields);
            return -1;
        }
    }
    *size = PyTuple_GET_SIZE(fields);
    Py_DECREF(fields);
    return 0;
}

#define N_BINDER_HELD 15

static void
binder_held(Binder *self, PyObject **slots[N_BINDER_HELD])
{
    PyObject **all[N_BINDER_HELD] = {
        &self->fallback, &self->rules, &self->tls, &self->contexts, &self->tracer_type,
        &self->scope_type, &self->emitted_type, &self->context_type, &self->create,
        &self->has_equal_user, &self->with_constants, &self->simplify_if, &self->internal,
        &self->rule_type, &self->create_names,
    };
    memcpy(slots, all, sizeof(all));
}

/* The last item of the list `owner.<name>` (a borrowed reference, kept alive by the list,
 * which its owner keeps), or NULL with no error set where there is none. */
static PyObject *
top_of(PyObject *owner, PyObject *name)
{
    PyObject *stack = PyObject_GetAttr(owner, name);
    if (stack == NULL) {
        PyErr_Clear();
        return NULL;
    }
    PyObject *top = NULL;
    if (PyList_CheckExact(stack) && PyList_GET_SIZE(stack) > 0) {
        top = PyList_GET_ITEM(stack, PyList_GET_SIZE(stack) - 1);
    }
    Py_DECREF(stack);
    return top;
}

/* `_constant_operands(values, constants, need)`: whether the constant operands among
 * `values` may let `aotkit-simplify` rewrite the op; -1 on error. */
static int
constant_operands(Binder *self, PyObject *const *values, Py_ssize_t n, PyObject *constants,
                  PyObject *need)
{
    if (PyUnicode_Check(need) && PyUnicode_Compare(need, self->str_first) == 0) {
        return n > 0 ? PyDict_Contains(constants, values[0]) : 0;
    }
    if (!(PyUnicode_Check(need) && PyUnicode_Compare(need, self->str_all) == 0)) {
        /* (unit, positions): an identity (x + 0, x - 0, x * 1) */
        if (!PyTuple_Check(need) || PyTuple_GET_SIZE(need) != 2 ||
            !PyTuple_Check(PyTuple_GET_ITEM(need, 1))) {
            PyErr_Format(PyExc_TypeError, "Binder: unexpected constant rule %R", need);
            return -1;
        }
        PyObject *unit = PyTuple_GET_ITEM(need, 0);
        PyObject *positions = PyTuple_GET_ITEM(need, 1);
        for (Py_ssize_t j = 0; j < PyTuple_GET_SIZE(positions); j++) {
            Py_ssize_t i = PyLong_AsSsize_t(PyTuple_GET_ITEM(positions, j));
            if (i == -1 && PyErr_Occurred()) {
                return -1;
            }
            if (i < 0 || i >= n) {
                PyErr_Format(PyExc_TypeError, "Binder: unexpected constant rule %R", need);
                return -1;
            }
            PyObject *c = PyDict_GetItemWithError(constants, values[i]);
            if (c == NULL) {
                if (PyErr_Occurred()) {
                    return -1;
                }
                continue;
            }
            if (c == Py_None) {
                return 1;
            }
            int equal = PyObject_RichCompareBool(c, unit, Py_EQ);
            if (equal != 0) {
                return equal;
            }
        }
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        int found = PyDict_Contains(constants, values[i]);
        if (found <= 0) {
            return found;
        }
    }
    return 1; /* a fold */
}

/* The parameters of a call as a dict (for a `_SIMPLIFY_IF` check). */
static PyObject *
params_dict(PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames)
{
    PyObject *params = PyDict_New();
    if (params == NULL || kwnames == NULL) {
        return params;
    }
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(kwnames); i++) {
        if (PyDict_SetItem(params, PyTuple_GET_ITEM(kwnames, i), args[nargs + i]) < 0) {
            Py_DECREF(params);
            return NULL;
        }
    }
    return params;
}

/* After the op is made: `bind`'s check of whether `aotkit-simplify` may rewrite it. */
static int
note_simplify(Binder *self, PyObject *emitted, PyObject *hlo, PyObject *values,
              PyObject *const *operands, PyObject *shape, PyObject *dtype,
              PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames)
{
    PyObject *constants = SLOT(emitted, self->emitted_at[E_CONSTANTS]);
    if (constants != NULL && PyDict_CheckExact(constants) && PyDict_GET_SIZE(constants) > 0) {
        PyObject *need = PyDict_GetItemWithError(self->with_constants, hlo);
        if (need == NULL && PyErr_Occurred()) {
            return -1;
        }
        if (need != NULL) {
            int found = constant_operands(self, PySequence_Fast_ITEMS(values),
                                          PyList_GET_SIZE(values), constants, need);
            if (found < 0) {
                return -1;
            }
            set_slot(emitted, self->emitted_at[E_SIMPLIFY], found ? Py_True : Py_False);
        }
    }
    PyObject *check = PyDict_GetItemWithError(self->simplify_if, hlo);
    if (check == NULL) {
        return PyErr_Occurred() ? -1 : 0;
    }
    PyObject *first = operands[0];
    PyObject *aval = PyTuple_Pack(2, SLOT(first, self->tracer_at[T_SHAPE]),
                                  SLOT(first, self->tracer_at[T_DTYPE]));
    PyObject *out = PyTuple_Pack(2, shape, dtype);
    PyObject *params = params_dict(args, nargs, kwnames);
    PyObject *result = NULL;
    if (aval != NULL && out != NULL && params != NULL) {
        result = PyObject_CallFunctionObjArgs(check, aval, out, params,
                                              PyList_GET_ITEM(values, 0), NULL);
    }
    Py_XDECREF(aval);
    Py_XDECREF(out);
    Py_XDECREF(params);
    if (result == NULL) {
        return -1;
    }
    int truth = PyObject_IsTrue(result);
    Py_DECREF(result);
    if (truth < 0) {
        return -1;
    }
    if (truth) {
        set_slot(emitted, self->emitted_at[E_SIMPLIFY], Py_True);
    }
    return 0;
}

/* Frames `known_location` walks before it leaves the search to `fallback`. */
#define MAX_WALK 32

/* The user's location, as `bind` finds it, where the lowering context holds it already: from
 * the caller's caller (`bind`'s `sys._getframe(2)`) out, the first frame whose file is not
 * aotkit's or NumPy's own (`internal`: file name -> whether it is; a file it has not seen
 * yet ends the walk), looked up in `locations`. A borrowed reference, or NULL (no error
 * set) where the walk ends without one: `fallback` then walks, and caches what it finds. */
static PyObject *
known_location(PyObject *internal, PyObject *locations)
{
    PyFrameObject *caller = PyEval_GetFrame(); /* borrowed: the Python code calling bind */
    if (caller == NULL || !PyDict_Check(locations) || !PyDict_Check(internal)) {
        return NULL;
    }
    PyFrameObject *f = PyFrame_GetBack(caller);
    PyObject *loc = NULL;
    for (int depth = 0; f != NULL && depth < MAX_WALK; depth++) {
        PyCodeObject *code = PyFrame_GetCode(f);
        PyObject *skip = PyDict_GetItemWithError(internal, code->co_filename);
        if (skip == Py_False) {
            PyObject *key = Py_BuildValue("(Ni)", PyLong_FromVoidPtr(code), PyFrame_GetLasti(f));
            if (key != NULL) {
                loc = PyDict_GetItemWithError(locations, key);
                Py_DECREF(key);
            }
        }
        Py_DECREF(code);
        if (skip != Py_True) {
            break;
        }
        PyFrameObject *back = PyFrame_GetBack(f);
        Py_DECREF(f);
        f = back;
    }
    Py_XDECREF(f);
    if (loc == NULL) {
        PyErr_Clear();
    }
    return loc;
}

/* The op's result type and attributes from the lowering context, or 0 where it has not got
 * them (borrowed references, held by the context's caches). */
static int
planned(Binder *self, PyObject *lc, PyObject *emitted, PyObject *entry, PyObject *op,
        PyObject *const *operands, Py_ssize_t n, PyObject *const *args, Py_ssize_t nargs,
        PyObject *kwnames, PyObject **shape, PyObject **dtype, PyObject **result_type,
        PyObject **attributes)
{
    Py_ssize_t nkw = kwnames == NULL ? 0 : PyTuple_GET_SIZE(kwnames);
    if (PyTuple_GET_ITEM(entry, self->rule_at[R_ELEMENTWISE]) == Py_True) {
        /* The result has the last operand's shape and dtype. */
        if (n == 0 || PyTuple_GET_ITEM(entry, self->rule_at[R_ATTRIBUTES]) != Py_None) {
            return 0;
        }
        PyObject *last = operands[n - 1];
        *shape = SLOT(last, self->tracer_at[T_SHAPE]);
        *dtype = SLOT(last, self->tracer_at[T_DTYPE]);
        PyObject *types = SLOT(lc, self->context_at[C_TENSOR_TYPES]);
        if (*shape == NULL || *dtype == NULL || types == NULL || !PyDict_Check(types)) {
            return 0;
        }
        PyObject *key = PyTuple_Pack(2, *shape, *dtype);
        if (key == NULL) {
            PyErr_Clear();
            return 0;
        }
        *result_type = PyDict_GetItemWithError(types, key);
        Py_DECREF(key);
        *attributes = Py_None;
    }
    else {
        /* The op's plan: by (op, (shape, dtype) of each operand, (name, value) of each
         * parameter), as `bind` keys it. None in a trace with symbolic dimensions. */
        PyObject *plans = SLOT(lc, self->context_at[C_PLANS]);
        if (SLOT(emitted, self->emitted_at[E_SYMBOLIC]) != Py_None || plans == NULL ||
            !PyDict_Check(plans)) {
            return 0;
        }
        PyObject *key = PyTuple_New(1 + n + nkw);
        if (key == NULL) {
            PyErr_Clear();
            return 0;
        }
        PyTuple_SET_ITEM(key, 0, Py_NewRef(op));
        for (Py_ssize_t i = 0; i < n; i++) {
            PyObject *aval = PyTuple_Pack(2, SLOT(operands[i], self->tracer_at[T_SHAPE]),
                                          SLOT(operands[i], self->tracer_at[T_DTYPE]));
            if (aval == NULL) {
                Py_DECREF(key);
                PyErr_Clear();
                return 0;
            }
            PyTuple_SET_ITEM(key, 1 + i, aval);
        }
        for (Py_ssize_t i = 0; i < nkw; i++) {
            PyObject *item = PyTuple_Pack(2, PyTuple_GET_ITEM(kwnames, i), args[nargs + i]);
            if (item == NULL) {
                Py_DECREF(key);
                PyErr_Clear();
                return 0;
            }
            PyTuple_SET_ITEM(key, 1 + n + i, item);
        }
        PyObject *plan = PyDict_GetItemWithError(plans, key); /* unhashable: TypeError */
        Py_DECREF(key);
        if (plan == NULL || !PyTuple_CheckExact(plan) || PyTuple_GET_SIZE(plan) != 4) {
            PyErr_Clear();
            return 0;
        }
        *shape = PyTuple_GET_ITEM(plan, 0);
        *dtype = PyTuple_GET_ITEM(plan, 1);
        *result_type = PyTuple_GET_ITEM(plan, 2);
        *attributes = PyTuple_GET_ITEM(plan, 3);
    }
    if (*result_type == NULL || *result_type == Py_None) {
        PyErr_Clear();
        return 0;
    }
    return 1;
}

static PyObject *
binder_vectorcall(PyObject *callable, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    Binder *self = (Binder *)callable;
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    if (self->str_all == NULL) { /* `__init__` never ran to its end (it sets this last) */
        not_initialised("Binder", NEVER_SET_UP, BINDER_HOW);
        return NULL;
    }
    if (!self->enabled || nargs < 1) {
        return PyObject_Vectorcall(self->fallback, args, nargsf, kwnames);
    }
    PyObject *op = args[0];
    PyObject *const *operands = args + 1;
    Py_ssize_t n = nargs - 1;

    /* Everything this call needs, checked before anything changes. */
    PyObject *entry = PyDict_GetItemWithError(self->rules, op);
    if (entry == NULL || (PyObject *)Py_TYPE(entry) != self->rule_type ||
        PyTuple_GET_SIZE(entry) != self->rule_size) {
        goto slow;
    }
    PyObject *hlo = PyTuple_GET_ITEM(entry, self->rule_at[R_HLO]);
    if (hlo == Py_None) {
        goto slow; /* a lowering rule of its own */
    }
    PyObject *scope = top_of(self->tls, self->str_scopes);
    if (scope == NULL || (PyObject *)Py_TYPE(scope) != self->scope_type) {
        goto slow;
    }
    PyObject *emitted = SLOT(scope, self->scope_emitted_at);
    if (emitted == NULL || (PyObject *)Py_TYPE(emitted) != self->emitted_type) {
        goto slow;
    }
    /* `bind` reads and writes these slots of `Emitted`; each holds what its `__init__` put
     * there (a bool, or a bytearray, dict or op as named). */
    PyObject *used = SLOT(emitted, self->emitted_at[E_USED]);
    PyObject *constants = SLOT(emitted, self->emitted_at[E_CONSTANTS]);
    if (used == NULL || !PyByteArray_CheckExact(used) || constants == NULL ||
        !PyDict_CheckExact(constants)) {
        goto slow;
    }
    for (int i = 0; i < N_EMITTED; i++) {
        if (SLOT(emitted, self->emitted_at[i]) == NULL) {
            goto slow;
        }
    }
    Py_ssize_t n_used = PyByteArray_GET_SIZE(used);
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *t = operands[i];
        if ((PyObject *)Py_TYPE(t) != self->tracer_type ||
            SLOT(t, self->tracer_at[T_VALUE]) == NULL ||
            SLOT(t, self->tracer_at[T_SHAPE]) == NULL ||
            SLOT(t, self->tracer_at[T_DTYPE]) == NULL) {
            goto slow; /* (a tracer whose `__init__` never ran has empty slots) */
        }
        PyObject *own = SLOT(t, self->tracer_at[T_SCOPE]);
        if (own != scope) {
            /* A value of an enclosing scope of this module, still open (a loop's or branch's
             * body reading a value from outside it): used as it is, nothing marked. */
            if (own == NULL || (PyObject *)Py_TYPE(own) != self->scope_type ||
                SLOT(own, self->scope_open_at) != Py_True ||
                SLOT(own, self->scope_emitted_at) != emitted) {
                goto slow;
            }
            continue;
        }
        PyObject *seq = SLOT(t, self->tracer_at[T_SEQ]);
        if (seq == NULL || (seq != Py_None && !PyLong_CheckExact(seq))) {
            goto slow;
        }
        if (seq != Py_None) {
            Py_ssize_t s = PyLong_AsSsize_t(seq);
            if (s < 0 || s >= n_used) {
                PyErr_Clear();
                goto slow;
            }
        }
    }
    PyObject *lc = top_of(self->contexts, self->str_stack);
    if (lc == NULL || (PyObject *)Py_TYPE(lc) != self->context_type) {
        goto slow;
    }
    PyObject *shape, *dtype, *result_type, *attributes;
    if (!planned(self, lc, emitted, entry, op, operands, n, args, nargs, kwnames, &shape,
                 &dtype, &result_type, &attributes)) {
        goto slow;
    }
    PyObject *loc = SLOT(lc, self->context_at[C_LOCATION]);
    if (loc == NULL) {
        goto slow;
    }
    if (loc == Py_None) {
        loc = known_location(self->internal, SLOT(lc, self->context_at[C_LOCATIONS]));
        if (loc == NULL) {
            goto slow; /* a line seen for the first time, or below aotkit's own frames */
        }
    }

    /* The operands: which values a vouched op uses now for the first time. */
    PyObject *values = PyList_New(n);
    if (values == NULL) {
        return NULL;
    }
    int fresh = 0;
    char *marks = PyByteArray_AS_STRING(used);
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *t = operands[i];
        PyList_SET_ITEM(values, i, Py_NewRef(SLOT(t, self->tracer_at[T_VALUE])));
        if (SLOT(t, self->tracer_at[T_SCOPE]) != scope) {
            continue;
        }
        PyObject *seq = SLOT(t, self->tracer_at[T_SEQ]);
        if (seq == Py_None) {
            set_slot(emitted, self->emitted_at[E_DUPLICATES], Py_True);
        }
        else {
            Py_ssize_t s = PyLong_AsSsize_t(seq);
            if (!marks[s]) {
                marks[s] = 1;
                fresh = 1;
            }
        }
    }
    /* Held across the calls below, which run Python code. */
    Py_INCREF(entry);
    Py_INCREF(scope);
    Py_INCREF(emitted);
    Py_INCREF(shape);
    Py_INCREF(dtype);
    Py_INCREF(loc);
    Py_INCREF(attributes);
    Py_INCREF(used);
    /* The offsets read above stay this Binder's until `done` (`__init__` refuses meanwhile). */
    self->busy++;
    PyObject *results = PyList_New(1);
    PyObject *created = NULL, *result = NULL, *tracer = NULL, *out = NULL;
    if (results == NULL) {
        goto done;
    }
    PyList_SET_ITEM(results, 0, Py_NewRef(result_type));
    PyObject *call_args[6] = {NULL, hlo, results, values, attributes, loc};
    created = PyObject_Vectorcall(self->create, call_args + 1,
                                  1 | PY_VECTORCALL_ARGUMENTS_OFFSET, self->create_names);
    if (created == NULL) {
        goto done;
    }
    result = PyObject_GetAttr(created, self->str_result);
    if (result == NULL) {
        goto done;
    }
    if (PyTuple_GET_ITEM(entry, self->rule_at[R_CHLO]) == Py_True) {
        set_slot(emitted, self->emitted_at[E_CHLO], Py_True);
    }
    PyObject *seq = Py_None;
    PyObject *new_seq = NULL;
    int is_opaque = emitted_truth(emitted, self->emitted_at, E_OPAQUE);
    if (is_opaque < 0) {
        goto done;
    }
    if (!is_opaque) {
        if (SLOT(emitted, self->emitted_at[E_FIRST_OP]) == Py_None) {
            set_slot(emitted, self->emitted_at[E_FIRST_OP], created);
        }
        if (!fresh) {
            int duplicates = emitted_truth(emitted, self->emitted_at, E_DUPLICATES);
            if (duplicates < 0) {
                goto done;
            }
            if (!duplicates) {
                PyObject *equal =
                    PyObject_CallFunctionObjArgs(self->has_equal_user, created, values, NULL);
                if (equal == NULL) {
                    goto done;
                }
                set_slot(emitted, self->emitted_at[E_DUPLICATES], equal);
                Py_DECREF(equal);
            }
        }
        /* The bytearray read first, as `bind` appends to it. */
        Py_ssize_t size = PyByteArray_GET_SIZE(used);
        new_seq = PyLong_FromSsize_t(size);
        if (new_seq == NULL || PyByteArray_Resize(used, size + 1) < 0) {
            Py_XDECREF(new_seq);
            goto done;
        }
        PyByteArray_AS_STRING(used)[size] = 0;
        seq = new_seq;
    }
    if (PyTuple_GET_ITEM(entry, self->rule_at[R_SIMPLIFIABLE]) == Py_True) {
        int simplified = emitted_truth(emitted, self->emitted_at, E_SIMPLIFY);
        if (simplified < 0 ||
            (!simplified && note_simplify(self, emitted, hlo, values, operands, shape, dtype,
                                          args, nargs, kwnames) < 0)) {
            Py_XDECREF(new_seq);
            goto done;
        }
    }
    /* `Tracer(result, shape, dtype, scope, False, seq)`, its slots set as its `__init__`
     * sets them. */
    PyTypeObject *type = (PyTypeObject *)self->tracer_type;
    tracer = type->tp_alloc(type, 0);
    if (tracer == NULL) {
        Py_XDECREF(new_seq);
        goto done;
    }
    set_slot(tracer, self->tracer_at[T_VALUE], result);
    set_slot(tracer, self->tracer_at[T_SHAPE], shape);
    set_slot(tracer, self->tracer_at[T_DTYPE], dtype);
    set_slot(tracer, self->tracer_at[T_WEAK], Py_False);
    set_slot(tracer, self->tracer_at[T_SCOPE], scope);
    set_slot(tracer, self->tracer_at[T_SEQ], seq);
    set_slot(tracer, self->tracer_at[T_TRANSPOSED], Py_None);
    Py_XDECREF(new_seq);
    if (self->first) {
        out = Py_NewRef(tracer);
    }
    else if ((out = PyList_New(1)) != NULL) {
        PyList_SET_ITEM(out, 0, Py_NewRef(tracer));
    }
done:
    Py_XDECREF(tracer);
    Py_XDECREF(result);
    Py_XDECREF(created);
    Py_XDECREF(results);
    Py_DECREF(values);
    Py_DECREF(entry);
    Py_DECREF(scope);
    Py_DECREF(emitted);
    Py_DECREF(shape);
    Py_DECREF(dtype);
    Py_DECREF(loc);
    Py_DECREF(attributes);
    Py_DECREF(used);
    self->busy--;
    return out;
slow:
    if (PyErr_Occurred()) {
        PyErr_Clear();
    }
    return PyObject_Vectorcall(self->fallback, args, nargsf, kwnames);
}

static PyObject *
binder_new(PyTypeObject *type, PyObject *args, PyObject *kwargs)
{
    (void)args;
    (void)kwargs;
    Binder *self = (Binder *)type->tp_alloc(type, 0);
    if (self != NULL) {
        self->vectorcall = binder_vectorcall;
    }
    return (PyObject *)self;
}

static int
binder_init(PyObject *op, PyObject *args, PyObject *kwargs)
{
    Binder *self = (Binder *)op;
    if (self->busy) {
        PyErr_SetString(PyExc_RuntimeError,
                        "Binder: cannot be set up again while it makes an op (its callables "
                        "called __init__); make another Binder instead");
        return -1;
    }
    static char *names[] = {
        "fallback", "rules", "tls", "contexts", "tracer", "scope", "emitted", "context",
        "create", "has_equal_user", "with_constants", "simplify_if", "internal", "rule",
        "first", NULL};
    PyObject *given[14] = {NULL};
    int first = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "|$O!O!OOO!O!O!O!OOO!O!O!O!p:Binder", names,
                                     &PyFunction_Type, &given[0], &PyDict_Type, &given[1],
                                     &given[2], &given[3], &PyType_Type, &given[4],
                                     &PyType_Type, &given[5], &PyType_Type, &given[6],
                                     &PyType_Type, &given[7], &given[8], &given[9],
                                     &PyDict_Type, &given[10], &PyDict_Type, &given[11],
                                     &PyDict_Type, &given[12], &PyType_Type, &given[13],
                                     &first)) {
        return -1;
    }
    for (int i = 0; i < 14; i++) {
        if (given[i] == NULL) {
            PyErr_Format(PyExc_TypeError, "Binder: missing keyword argument %s", names[i]);
            return -1;
        }
    }
    /* Everything is read and made first, and set only once all of it is at hand: a Binder
     * in use keeps its classes and their slots' offsets together. */
    Py_ssize_t tracer_at[N_TRACER], scope_at[2], emitted_at[N_EMITTED], context_at[N_CONTEXT];
    Py_ssize_t rule_at[N_RULE], rule_size;
    static const char *const scope_slots[2] = {"emitted", "open"};
    if (slot_offsets(given[4], TRACER_SLOTS, N_TRACER, tracer_at) < 0 ||
        slot_offsets(given[5], scope_slots, 2, scope_at) < 0 ||
        slot_offsets(given[6], EMITTED_SLOTS, N_EMITTED, emitted_at) < 0 ||
        slot_offsets(given[7], CONTEXT_SLOTS, N_CONTEXT, context_at) < 0 ||
        field_indices(given[13], RULE_FIELDS, N_RULE, rule_at, &rule_size) < 0) {
        return -1;
    }
    const char *texts[5] = {"scopes", "stack", "result", "first", "all"};
    PyObject *made[6] = {NULL};
    made[5] = Py_BuildValue("(ssss)", "results", "operands", "attributes", "loc");
    for (int i = 0; i < 5 && made[5] != NULL; i++) {
        if ((made[i] = PyUnicode_InternFromString(texts[i])) == NULL) {
            break;
        }
    }
    for (int i = 0; i < 6; i++) {
        if (made[i] == NULL) {
            for (int j = 0; j < 6; j++) {
                Py_XDECREF(made[j]);
            }
            return -1;
        }
    }
    memcpy(self->tracer_at, tracer_at, sizeof(tracer_at));
    self->scope_emitted_at = scope_at[0];
    self->scope_open_at = scope_at[1];
    memcpy(self->emitted_at, emitted_at, sizeof(emitted_at));
    memcpy(self->context_at, context_at, sizeof(context_at));
    memcpy(self->rule_at, rule_at, sizeof(rule_at));
    self->rule_size = rule_size;
    PyObject **slots[N_BINDER_HELD];
    binder_held(self, slots);
    for (int i = 0; i < 14; i++) {
        Py_XSETREF(*slots[i], Py_NewRef(given[i]));
    }
    Py_XSETREF(self->create_names, made[5]);
    PyObject **strings[5] = {&self->str_scopes, &self->str_stack, &self->str_result,
                             &self->str_first, &self->str_all};
    for (int i = 0; i < 5; i++) {
        Py_XSETREF(*strings[i], made[i]);
    }
    self->first = (char)first;
    self->enabled = 1;
    return 0;
}

static int
binder_traverse(PyObject *op, visitproc visit, void *arg)
{
    Py_VISIT(Py_TYPE(op));
    PyObject **slots[N_BINDER_HELD];
    binder_held((Binder *)op, slots);
    for (int i = 0; i < N_BINDER_HELD; i++) {
        Py_VISIT(*slots[i]);
    }
    return 0;
}

static int
binder_clear(PyObject *op)
{
    Binder *self = (Binder *)op;
    PyObject **slots[N_BINDER_HELD];
    binder_held(self, slots);
    for (int i = 0; i < N_BINDER_HELD; i++) {
        Py_CLEAR(*slots[i]);
    }
    Py_CLEAR(self->str_scopes);
    Py_CLEAR(self->str_stack);
    Py_CLEAR(self->str_result);
    Py_CLEAR(self->str_first);
    Py_CLEAR(self->str_all);
    return 0;
}

static void
binder_dealloc(PyObject *op)
{
    PyTypeObject *type = Py_TYPE(op);
    PyObject_GC_UnTrack(op);
    binder_clear(op);
    type->tp_free(op);
    Py_DECREF(type);
}

static PyObject *
binder_fallback(PyObject *op, void *closure)
{
    (void)closure;
    Binder *self = (Binder *)op;
    if (self->str_all == NULL) {
        not_initialised("Binder", NEVER_SET_UP, BINDER_HOW);
        return NULL;
    }
    return Py_NewRef(self->fallback);
}

/* `fill(tracer, value, shape, dtype, weak, scope, seq)`: `Tracer.__init__`'s body, its
 * slots set as the Python setters would set them (`transposed` to None), without a call of
 * the setter per slot: `Tracer` refuses assignments of its slots from Python code. */
static PyObject *
binder_fill(PyObject *op, PyObject *const *args, Py_ssize_t nargs)
{
    Binder *self = (Binder *)op;
    if (self->str_all == NULL) {
        not_initialised("Binder", NEVER_SET_UP, BINDER_HOW);
        return NULL;
    }
    if (nargs != 7) {
        PyErr_Format(PyExc_TypeError,
                     "Binder.fill: takes (tracer, value, shape, dtype, weak, scope, seq), got %zd "
                     "arguments",
                     nargs);
        return NULL;
    }
    PyObject *t = args[0];
    /* The offsets are the tracer class's: valid in its instances and its subclasses'. */
    if (!PyObject_TypeCheck(t, (PyTypeObject *)self->tracer_type)) {
        PyErr_Format(PyExc_TypeError, "Binder.fill: %.200s is not a %.200s", Py_TYPE(t)->tp_name,
                     ((PyTypeObject *)self->tracer_type)->tp_name);
        return NULL;
    }
    static const int order[6] = {T_VALUE, T_SHAPE, T_DTYPE, T_WEAK, T_SCOPE, T_SEQ};
    for (int i = 0; i < 6; i++) {
        set_slot(t, self->tracer_at[order[i]], args[1 + i]);
    }
    set_slot(t, self->tracer_at[T_TRANSPOSED], Py_None);
    Py_RETURN_NONE;
}

static PyMethodDef binder_methods[] = {
    {"fill", (PyCFunction)(void (*)(void))binder_fill, METH_FASTCALL,
     "fill(tracer, value, shape, dtype, weak, scope, seq): sets a new tracer's slots."},
    {NULL},
};

static PyGetSetDef binder_getset[] = {
    {"fallback", binder_fallback, NULL,
     "The Python bind, which takes every call this one does not.", NULL},
    {NULL},
};

/* (`enabled` and `first` are flags: read or set on a Binder never set up, they change
 * nothing its calls would do; those refuse.) */
static PyMemberDef binder_members[] = {
    {"enabled", T_BOOL, offsetof(Binder, enabled), 0,
     "False: every call goes to `fallback` (the tests compare the two)."},
    {"first", T_BOOL, offsetof(Binder, first), READONLY,
     "True: a call returns the op's one result (bind1), else a list of it (bind)."},
    {"__vectorcalloffset__", T_PYSSIZET, offsetof(Binder, vectorcall), READONLY, NULL},
    {NULL},
};

static PyType_Slot binder_slots[] = {
    {Py_tp_doc, "The common case of aotkit.tracing.core.bind (see aotkit/_speedups.c)."},
    {Py_tp_new, binder_new},
    {Py_tp_init, binder_init},
    {Py_tp_call, PyVectorcall_Call},
    {Py_tp_traverse, binder_traverse},
    {Py_tp_clear, binder_clear},
    {Py_tp_dealloc, binder_dealloc},
    {Py_tp_members, binder_members},
    {Py_tp_getset, binder_getset},
    {Py_tp_methods, binder_methods},
    {0, NULL},
};

static PyType_Spec binder_spec = {
    .name = "aotkit._speedups.Binder",
    .basicsize = sizeof(Binder),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL,
    .slots = binder_slots,
};

static int
add_type(PyObject *module, PyType_Spec *spec, const char *name)
{
    PyObject *type = PyType_FromModuleAndSpec(module, spec, NULL);
    if (type == NULL) {
        return -1;
    }
    int failed = PyModule_AddObjectRef(module, name, type);
    Py_DECREF(type);
    return failed;
}

static int
speedups_exec(PyObject *module)
{
    /* aotkit/_native.py uses this module only where the two agree (an install that did
     * not rebuild it after its source changed keeps an older one). */
    if (PyModule_AddIntConstant(module, "VERSION", 8) < 0) {
        return -1;
    }
    if (add_type(module, &front_spec, "Front") < 0 ||
        add_type(module, &binder_spec, "Binder") < 0) {
        return -1;
    }
    return add_type(module, &dispatching_spec, "Dispatching");
}

static PyModuleDef_Slot speedups_slots[] = {
    {Py_mod_exec, speedups_exec},
    {0, NULL},
};

static struct PyModuleDef speedups_module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "aotkit._speedups",
    .m_doc = "C fronts of aotkit's hot paths; optional (pure-Python fallbacks stand in).",
    .m_size = 0,
    .m_slots = speedups_slots,
};

PyMODINIT_FUNC
PyInit__speedups(void)
{
    return PyModuleDef_Init(&speedups_module);
}
