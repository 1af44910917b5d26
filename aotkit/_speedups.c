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
 * or raises it without aotkit's frames.
 *
 * `Dispatching` is the base class of `jit(f)` objects: calling one calls its `_dispatch`.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>
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
    PyObject *ndarray_type;   /* numpy.ndarray */
    PyObject *exact_scalars;  /* frozenset: NumPy scalar types of exact dtypes */
    PyObject *exact_dtypes;   /* tuple: NumPy dtypes x64 mode does not narrow */
    PyObject *python_scalars; /* frozenset: bool, int, float, complex */
    PyObject *clear_cache;    /* forgets the C++ dispatch's cached signatures */
    PyObject *settle;         /* settle(out): waits until every result in `out` is ready */
    Py_ssize_t in_place_from; /* NumPy arrays this large the transfer may read in place */
    Py_ssize_t staged_from;   /* NumPy arrays this large go to `slow` (it may stage them) */
    /* `exact_dtypes` by identity, and their item sizes: an array's dtype is one of these
     * objects (NumPy's own instances of its built-in dtypes) or the array goes to `slow`. */
    Py_ssize_t n_exact;
    PyObject *exact[MAX_EXACT];
    Py_ssize_t itemsize[MAX_EXACT];
    /* The members of `exact_scalars` and `python_scalars` (types: compared by identity, as
     * set membership compares them, without hashing). */
    Py_ssize_t n_exact_scalars, n_python_scalars;
    PyObject *exact_scalar_types[MAX_EXACT];
    PyObject *python_scalar_types[MAX_PYTHON];
} Front;

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
#define N_HELD 11

static void
held(Front *self, PyObject **slots[N_HELD])
{
    PyObject **all[N_HELD] = {
        &self->wide, &self->narrow, &self->slow, &self->failed, &self->array_type,
        &self->ndarray_type, &self->exact_scalars, &self->exact_dtypes,
        &self->python_scalars, &self->clear_cache, &self->settle,
    };
    memcpy(slots, all, sizeof(all));
}

/* What this front makes of a NumPy array: SMALL, of an exact dtype and under
 * `in_place_from` bytes (the transfer copies it); IN_PLACE, of an exact dtype and under
 * `staged_from` bytes (the transfer may read it in place while the call runs); else 0.
 * Reads the array's head: no attribute lookups, no dtype hashing (each costs more here than
 * the rest of this front does). */
#define SMALL 1
#define IN_PLACE 2

static int
exact_array(Front *self, PyObject *arg)
{
    const ArrayHead *head = (const ArrayHead *)arg;
    for (Py_ssize_t i = 0; i < self->n_exact; i++) {
        if (head->descr == self->exact[i]) {
            Py_ssize_t nbytes = self->itemsize[i];
            for (int d = 0; d < head->nd && nbytes < self->staged_from; d++) {
                nbytes *= head->dimensions[d];
            }
            return nbytes < self->in_place_from ? SMALL
                   : nbytes < self->staged_from ? IN_PLACE
                                                : 0;
        }
    }
    return 0;
}

/* Reads the head of an array made here against what NumPy says of it; -1 (an error set)
 * where they differ. */
static int
check_array_head(Front *self)
{
    PyObject *shape = Py_BuildValue("(nn)", (Py_ssize_t)3, (Py_ssize_t)5);
    if (shape == NULL) {
        return -1;
    }
    PyObject *probe = PyObject_CallFunctionObjArgs(
        self->ndarray_type, shape, self->exact[0], NULL);
    Py_DECREF(shape);
    if (probe == NULL) {
        return -1;
    }
    const ArrayHead *head = (const ArrayHead *)probe;
    /* Fields are read only from an object of that type and at least that size. */
    int same = Py_TYPE(probe) == (PyTypeObject *)self->ndarray_type &&
               Py_TYPE(probe)->tp_basicsize >= (Py_ssize_t)sizeof(ArrayHead) && head->nd == 2 &&
               head->dimensions[0] == 3 && head->dimensions[1] == 5 &&
               head->descr == self->exact[0];
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
takes(Front *self, PyObject *arg, int depth, int *python_scalar, int *in_place)
{
    PyObject *type = (PyObject *)Py_TYPE(arg);
    if (type == self->array_type) {
        return 1;
    }
    if (type == self->ndarray_type) {
        int kind = exact_array(self, arg);
        if (kind == IN_PLACE && depth == 0) {
            *in_place = 1;
            return 1;
        }
        return kind == SMALL;
    }
    if (is_one_of(self->exact_scalar_types, self->n_exact_scalars, type)) {
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
            if (!takes(self, PyTuple_GET_ITEM(arg, i), depth + 1, python_scalar, in_place)) {
                return 0;
            }
        }
        return 1;
    }
    if (PyList_CheckExact(arg)) {
        for (Py_ssize_t i = 0; i < PyList_GET_SIZE(arg); i++) {
            if (!takes(self, PyList_GET_ITEM(arg, i), depth + 1, python_scalar, in_place)) {
                return 0;
            }
        }
        return 1;
    }
    if (PyDict_CheckExact(arg)) {
        Py_ssize_t position = 0;
        PyObject *key, *value;
        while (PyDict_Next(arg, &position, &key, &value)) {
            if (!takes(self, value, depth + 1, python_scalar, in_place)) {
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
    PyObject *out = PyObject_CallFunctionObjArgs(self->failed, error, tuple, NULL);
    Py_DECREF(tuple);
    Py_DECREF(error);
    return out;
}

static PyObject *
front_vectorcall(PyObject *op, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    Front *self = (Front *)op;
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    int python_scalar = 0, in_place = 0;
    if (kwnames != NULL && PyTuple_GET_SIZE(kwnames) > 0) {
        goto slow;
    }
    for (Py_ssize_t i = 0; i < nargs; i++) {
        if (!takes(self, args[i], 0, &python_scalar, &in_place)) {
            goto slow;
        }
    }
    if (python_scalar && in_place) {
        goto slow;  /* the Python front switches the x64 mode around such a call */
    }
    /* A Python scalar is the weakly typed 32-bit value of x64 off: `narrow` keys and runs
     * calls in that mode, and switches a call made in x64 mode on its own (its cache miss). */
    PyObject *dispatch = python_scalar ? self->narrow : self->wide;
    PyObject *out = PyObject_Vectorcall(dispatch, args, nargsf, NULL);
    if (out == NULL) {
        return after_failure(self, args, nargs);
    }
    if (in_place) {
        /* The caller may write to its arrays once the call returns. */
        PyObject *ready = Py_TYPE(out) == (PyTypeObject *)self->array_type
                              ? PyObject_CallMethod(out, "block_until_ready", NULL)
                              : PyObject_CallOneArg(self->settle, out);
        if (ready == NULL) {
            Py_DECREF(out);
            return NULL;
        }
        Py_DECREF(ready);
    }
    return out;
slow:
    return PyObject_Vectorcall(self->slow, args, nargsf, kwnames);
}

static int
front_init(PyObject *op, PyObject *args, PyObject *kwargs)
{
    Front *self = (Front *)op;
    static char *names[] = {
        "wide", "narrow", "slow", "failed", "array_type", "ndarray_type", "exact_scalars",
        "exact_dtypes", "python_scalars", "clear_cache", "settle", "in_place_from",
        "staged_from", NULL,
    };
    PyObject *wide, *narrow, *slow, *failed, *array_type, *ndarray_type, *exact_scalars,
        *exact_dtypes, *python_scalars, *clear_cache, *settle;
    Py_ssize_t in_place_from, staged_from;
    if (!PyArg_ParseTupleAndKeywords(
            args, kwargs, "$OOOOOOO!O!O!OOnn", names, &wide, &narrow, &slow, &failed,
            &array_type, &ndarray_type, &PyFrozenSet_Type, &exact_scalars, &PyTuple_Type,
            &exact_dtypes, &PyFrozenSet_Type, &python_scalars, &clear_cache, &settle,
            &in_place_from, &staged_from)) {
        return -1;
    }
    if (in_place_from < 0 || staged_from < in_place_from) {
        PyErr_Format(PyExc_ValueError,
                     "in_place_from and staged_from: 0 <= in_place_from <= staged_from, got %zd "
                     "and %zd",
                     in_place_from, staged_from);
        return -1;
    }
    Py_ssize_t n_exact = PyTuple_GET_SIZE(exact_dtypes);
    if (n_exact < 1 || n_exact > MAX_EXACT) {
        PyErr_Format(PyExc_ValueError, "exact_dtypes: 1 to %d dtypes, got %zd", MAX_EXACT,
                     n_exact);
        return -1;
    }
    PyObject **slots[N_HELD];
    held(self, slots);
    PyObject *values[N_HELD] = {
        wide, narrow, slow, failed, array_type, ndarray_type, exact_scalars, exact_dtypes,
        python_scalars, clear_cache, settle,
    };
    for (int i = 0; i < N_HELD; i++) {
        Py_INCREF(values[i]);
        Py_XSETREF(*slots[i], values[i]);
    }
    self->in_place_from = in_place_from;
    self->staged_from = staged_from;
    self->n_exact_scalars = self->n_python_scalars = 0;
    if (members(exact_scalars, self->exact_scalar_types, MAX_EXACT, &self->n_exact_scalars,
                "exact_scalars") < 0 ||
        members(python_scalars, self->python_scalar_types, MAX_PYTHON,
                &self->n_python_scalars, "python_scalars") < 0) {
        return -1;
    }
    self->n_exact = 0;
    for (Py_ssize_t i = 0; i < n_exact; i++) {
        PyObject *dtype = PyTuple_GET_ITEM(exact_dtypes, i);
        PyObject *size = PyObject_GetAttrString(dtype, "itemsize");
        if (size == NULL) {
            return -1;
        }
        self->itemsize[i] = PyLong_AsSsize_t(size);
        Py_DECREF(size);
        if (self->itemsize[i] == -1 && PyErr_Occurred()) {
            return -1;
        }
        self->exact[i] = dtype;  /* held by `exact_dtypes` */
    }
    self->n_exact = n_exact;
    return check_array_head(self);
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

static PyMemberDef front_members[] = {
    {"clear_cache", T_OBJECT, offsetof(Front, clear_cache), READONLY,
     "Forgets every argument signature the C++ dispatch cached."},
    {"slow", T_OBJECT, offsetof(Front, slow), READONLY,
     "The Python front, which takes every call this one does not."},
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
        PyErr_Format(PyExc_TypeError, "'%.200s' object is not set up to be called",
                     Py_TYPE(op)->tp_name);
        return NULL;
    }
    return PyObject_Vectorcall(dispatch, args, nargsf, kwnames);
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
    if (PyModule_AddIntConstant(module, "VERSION", 3) < 0) {
        return -1;
    }
    if (add_type(module, &front_spec, "Front") < 0) {
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
