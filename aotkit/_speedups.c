/* aotkit._speedups: the front of a compiled function's native dispatch, in C.
 *
 * `Front` is what `compiled(*args)` and `jit(f)(*args)` call once jaxlib's C++ dispatch
 * stands behind them (aotkit/backends/pjrt.py, `native_dispatcher`). It does the common
 * case of that function's Python `call` without a Python frame: a call of positional device
 * arrays, NumPy values of dtypes x64 mode keeps (small enough to be copied by the transfer)
 * and Python scalars goes straight to jaxlib's C++ dispatch in the right x64 mode; every
 * other call goes to the Python `call`, which holds the full rules. The two must agree
 * on the calls this one takes (tests/lowering/test_dispatch.py runs both fronts).
 *
 * An exception from the C++ dispatch goes to the Python `failed(error, args)`, which
 * either recovers (an array donated to an earlier call: the checked call words the error)
 * or raises it without aotkit's frames. Building this module is optional: without it,
 * the Python `call` is the front, with the same results.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>

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
    PyObject *exact_dtypes;   /* frozenset: NumPy dtypes x64 mode does not narrow */
    PyObject *python_scalars; /* frozenset: bool, int, float, complex */
    PyObject *x64;            /* JAX's x64 state: `.value` is this thread's mode */
    PyObject *clear_cache;    /* forgets the C++ dispatch's cached signatures */
    Py_ssize_t in_place_from; /* NumPy arrays this large go to `slow` */
} Front;

static PyObject *str_dtype, *str_nbytes, *str_value;

/* 1: the array is of an exact dtype and under `in_place_from` bytes; 0: not; -1: error. */
static int
small_exact_array(Front *self, PyObject *arg)
{
    PyObject *dtype = PyObject_GetAttr(arg, str_dtype);
    if (dtype == NULL) {
        return -1;
    }
    int found = PySet_Contains(self->exact_dtypes, dtype);
    Py_DECREF(dtype);
    if (found <= 0) {
        return found;
    }
    PyObject *nbytes = PyObject_GetAttr(arg, str_nbytes);
    if (nbytes == NULL) {
        return -1;
    }
    Py_ssize_t n = PyLong_AsSsize_t(nbytes);
    Py_DECREF(nbytes);
    if (n == -1 && PyErr_Occurred()) {
        return -1;
    }
    return n < self->in_place_from;
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
    int python_scalar = 0;
    if (kwnames != NULL && PyTuple_GET_SIZE(kwnames) > 0) {
        goto slow;
    }
    for (Py_ssize_t i = 0; i < nargs; i++) {
        PyObject *arg = args[i];
        PyObject *type = (PyObject *)Py_TYPE(arg);
        int found;
        if (type == self->array_type) {
            continue;
        }
        if (type == self->ndarray_type) {
            found = small_exact_array(self, arg);
            if (found < 0) {
                return NULL;
            }
            if (!found) {
                goto slow;
            }
            continue;
        }
        found = PySet_Contains(self->exact_scalars, type);
        if (found < 0) {
            return NULL;
        }
        if (found) {
            continue;
        }
        found = PySet_Contains(self->python_scalars, type);
        if (found < 0) {
            return NULL;
        }
        if (!found) {
            goto slow;
        }
        python_scalar = 1;
    }
    PyObject *dispatch = self->wide;
    if (python_scalar) {
        /* A Python scalar is the weakly typed 32-bit value of x64 off: only a thread in
         * that mode calls without switching it (the Python front switches). */
        PyObject *mode = PyObject_GetAttr(self->x64, str_value);
        if (mode == NULL) {
            return NULL;
        }
        int off = mode == Py_False;
        Py_DECREF(mode);
        if (!off) {
            goto slow;
        }
        dispatch = self->narrow;
    }
    PyObject *out = PyObject_Vectorcall(dispatch, args, nargsf, NULL);
    if (out != NULL) {
        return out;
    }
    return after_failure(self, args, nargs);
slow:
    return PyObject_Vectorcall(self->slow, args, nargsf, kwnames);
}

static int
front_init(PyObject *op, PyObject *args, PyObject *kwargs)
{
    Front *self = (Front *)op;
    static char *names[] = {
        "wide", "narrow", "slow", "failed", "array_type", "ndarray_type", "exact_scalars",
        "exact_dtypes", "python_scalars", "x64", "clear_cache", "in_place_from", NULL,
    };
    PyObject *wide, *narrow, *slow, *failed, *array_type, *ndarray_type, *exact_scalars,
        *exact_dtypes, *python_scalars, *x64, *clear_cache;
    Py_ssize_t in_place_from;
    if (!PyArg_ParseTupleAndKeywords(
            args, kwargs, "$OOOOOOO!O!O!OOn", names, &wide, &narrow, &slow, &failed,
            &array_type, &ndarray_type, &PyFrozenSet_Type, &exact_scalars,
            &PyFrozenSet_Type, &exact_dtypes, &PyFrozenSet_Type, &python_scalars, &x64,
            &clear_cache, &in_place_from)) {
        return -1;
    }
    PyObject **slots[] = {
        &self->wide, &self->narrow, &self->slow, &self->failed, &self->array_type,
        &self->ndarray_type, &self->exact_scalars, &self->exact_dtypes,
        &self->python_scalars, &self->x64, &self->clear_cache,
    };
    PyObject *values[] = {
        wide, narrow, slow, failed, array_type, ndarray_type, exact_scalars, exact_dtypes,
        python_scalars, x64, clear_cache,
    };
    for (size_t i = 0; i < sizeof(slots) / sizeof(slots[0]); i++) {
        Py_INCREF(values[i]);
        Py_XSETREF(*slots[i], values[i]);
    }
    self->in_place_from = in_place_from;
    return 0;
}

static int
front_traverse(PyObject *op, visitproc visit, void *arg)
{
    Front *self = (Front *)op;
    Py_VISIT(Py_TYPE(op));
    Py_VISIT(self->wide);
    Py_VISIT(self->narrow);
    Py_VISIT(self->slow);
    Py_VISIT(self->failed);
    Py_VISIT(self->array_type);
    Py_VISIT(self->ndarray_type);
    Py_VISIT(self->exact_scalars);
    Py_VISIT(self->exact_dtypes);
    Py_VISIT(self->python_scalars);
    Py_VISIT(self->x64);
    Py_VISIT(self->clear_cache);
    return 0;
}

static int
front_clear(PyObject *op)
{
    Front *self = (Front *)op;
    Py_CLEAR(self->wide);
    Py_CLEAR(self->narrow);
    Py_CLEAR(self->slow);
    Py_CLEAR(self->failed);
    Py_CLEAR(self->array_type);
    Py_CLEAR(self->ndarray_type);
    Py_CLEAR(self->exact_scalars);
    Py_CLEAR(self->exact_dtypes);
    Py_CLEAR(self->python_scalars);
    Py_CLEAR(self->x64);
    Py_CLEAR(self->clear_cache);
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

static int
speedups_exec(PyObject *module)
{
    str_dtype = PyUnicode_InternFromString("dtype");
    str_nbytes = PyUnicode_InternFromString("nbytes");
    str_value = PyUnicode_InternFromString("value");
    if (str_dtype == NULL || str_nbytes == NULL || str_value == NULL) {
        return -1;
    }
    PyObject *type = PyType_FromModuleAndSpec(module, &front_spec, NULL);
    if (type == NULL) {
        return -1;
    }
    int failed = PyModule_AddObjectRef(module, "Front", type);
    Py_DECREF(type);
    return failed;
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
