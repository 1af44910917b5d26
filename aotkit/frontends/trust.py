"""The trust boundary: what a module from outside aotkit asks a backend to run, checked first.

Shared by the file and JAX front ends, after the module is parsed (in the sandbox, for files)
and adopted, before the `Traced` stage exists and so before any backend sees it. aotkit's
own tracer emits nothing this refuses and is not checked.

What jaxlib 0.10.2's CPU client does with what is refused here (each measured in a child
process, see tests/reliability/test_trust.py): a host callback compiles and then segfaults
when run (its target points at a Python object of the process that lowered it); a LAPACK
custom call whose result shapes disagree with its operands writes past its buffers ("malloc():
invalid size"); a call to an unknown target is a compile error at best; `infeed`/`outfeed`
compile and then block forever (no host feeds them); `send`/`recv` are compile errors; a
recursive call graph, or a function declared without a body, segfaults the compiler; a value
of more than 2**63 - 1 bytes aborts it.

So a module passes only if:
- every op is StableHLO, CHLO or Shardy (`func.call`, `func.return` and a top-level
  `sdy.mesh` aside), and none is `infeed`, `outfeed`, `send` or `recv`;
- every jax.export `shape_assertion` takes an i1 condition and integer scalars and gives
  nothing (specializing a symbolic program decides and removes it);
- every GSPMD sharding annotation (`@Sharding`, `@SPMDFullToShardShape`,
  `@SPMDShardToFullShape`: the partitioner rewrites them, no kernel runs) takes one value and
  gives one of the same element type and rank;
- every custom call targets `ALLOWED_TARGETS`, and its operands, results and attributes keep
  that target's contract (`_CONTRACTS`: ranks, shapes, element types, batch dimensions and
  the `mhlo.backend_config` attributes the kernel reads, as JAX 0.10.2 emits them on CPU,
  and jax 0.12.1's elementwise `cpu_lgamma_ffi` and `cpu_digamma_ffi` where jaxlib has them);
- every function has a body and no function reaches itself through `func.call` or a
  composite's decomposition;
- every value with a static shape fits in 2**63 - 1 bytes.

Anything else is an `aotkit.UnsupportedModuleError` naming the op and its location. The
check is one walk over the ops (a few µs per op), so it runs on every loaded module.
Collectives are left to XLA: on one device it runs them or refuses them with an error.
"""

from __future__ import annotations

import re
from collections.abc import Callable

import numpy as np
from jaxlib.mlir import ir

from aotkit import _compat, _context, dtypes, modules, specs
from aotkit.errors import UnsupportedModuleError

# Custom calls through which a JAX program calls back into the Python process that lowered
# it (jax.debug.print, jax.pure_callback, io_callback): their targets point at live Python
# objects of that process, which an aotkit executable does not keep.
HOST_CALLBACK_TARGETS = frozenset(
    {
        "xla_python_cpu_callback",
        "xla_ffi_python_cpu_callback",
        "xla_python_gpu_callback",
        "xla_ffi_python_gpu_callback",
        "xla_ffi_partitioned_python_cpu_callback",
        "xla_ffi_partitioned_python_gpu_callback",
    }
)

# Ops that compile on the CPU and then wait forever for a host that never feeds them, or that
# no single-device aotkit executable can serve.
REFUSED_OPS = {
    "stablehlo.infeed": "reads from a host infeed queue, which nothing feeds (the call would "
    "block forever)",
    "stablehlo.outfeed": "writes to a host outfeed queue, which nothing drains (the call would "
    "block forever)",
    "stablehlo.send": "sends to another device or the host, which an aotkit executable cannot "
    "serve",
    "stablehlo.recv": "receives from another device or the host, which an aotkit executable "
    "cannot serve",
}
_OTHER_OPS = frozenset({"func.call", "func.return"})
# Dialects whose ops a module may hold: StableHLO, CHLO, and Shardy's sharding annotations
# (`sdy.sharding_constraint`, `sdy.manual_computation`, ...), which XLA's partitioner
# consumes; `sdy.mesh` is the one op besides functions at the top of a module.
_DIALECTS = ("stablehlo.", "chlo.", "sdy.")
_TOP_LEVEL_OPS = frozenset({"func.func", "sdy.mesh"})
# GSPMD's sharding annotations: custom calls XLA's partitioner rewrites away (they reach no
# kernel). Each takes one value and gives one of the same element type and rank; `Sharding`
# gives the same type.
SHARDING_TARGETS = frozenset({"Sharding", "SPMDFullToShardShape", "SPMDShardToFullShape"})
# jax.export's check of a symbolic program's shapes: a condition and the integers its error
# message shows. No kernel runs it: specializing the program to concrete shapes decides it
# and removes it (aotkit/symbolic/specialize.py); XLA refuses a module that still has one.
SHAPE_ASSERTION = "shape_assertion"

# The largest value XLA's CPU compiler sizes without aborting ("overflow in static extent
# product"): its byte size must fit an int64.
MAX_BYTES = specs.MAX_BYTES

_LAPACK_PREFIXES = {
    "s": np.dtype(np.float32),
    "d": np.dtype(np.float64),
    "c": np.dtype(np.complex64),
    "z": np.dtype(np.complex128),
}
_I32 = np.dtype(np.int32)
_LAPACK_TARGET = re.compile(r"^lapack_([sdcz])([a-z0-9]+)_ffi$")


class _Broken(Exception):
    """A custom call that breaks its target's contract; the message says how."""


def _char(*allowed: str) -> Callable[[object], bool]:
    codes = {ord(c) for c in allowed}

    def check(value) -> bool:
        return isinstance(value, int) and not isinstance(value, bool) and value in codes

    check.expected = " or ".join(f"{ord(c)} ({c!r})" for c in allowed)
    return check


def _boolean(value) -> bool:
    return isinstance(value, bool)


_boolean.expected = "true or false"


def _i32(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


_i32.expected = "an integer"


Shape = tuple[int, ...]
Aval = tuple[Shape, np.dtype]


def _matrix(avals: list[Aval], i: int, dtype: np.dtype, *, square=False) -> tuple:
    """(batch, rows, cols) of operand `i`, which must be a (stack of) `dtype` matrices."""
    shape, got = avals[i]
    if got != dtype:
        raise _Broken(f"operand {i} is {got.name}, the target computes in {dtype.name}")
    if len(shape) < 2:
        raise _Broken(f"operand {i} has shape {shape}, not a (stack of) matrices")
    if square and shape[-1] != shape[-2]:
        raise _Broken(f"operand {i} has shape {shape}, whose matrices are not square")
    return shape[:-2], shape[-2], shape[-1]


def _vector(avals: list[Aval], i: int, dtype: np.dtype, batch: Shape) -> int:
    """The length of operand `i`, a (stack of) `dtype` vectors with leading dims `batch`."""
    shape, got = avals[i]
    if got != dtype:
        raise _Broken(f"operand {i} is {got.name}, the target computes in {dtype.name}")
    if len(shape) != len(batch) + 1 or shape[:-1] != batch:
        raise _Broken(
            f"operand {i} has shape {shape}; expected one vector per matrix, {batch} + (k,)"
        )
    return shape[-1]


def _real(dtype: np.dtype) -> np.dtype:
    return dtypes.real_dtype(dtype)


def _complex(dtype: np.dtype) -> np.dtype:
    return np.dtype(np.complex64) if dtype == np.float32 else np.dtype(np.complex128)


# Each contract: (operand count, {attribute: check}, rule). A rule takes the target's
# element type, the operands' (shape, dtype) and the attributes, refuses operands the kernel
# would misread, and returns the results' (shape, dtype) the kernel writes: exactly the
# shapes JAX 0.10.2's CPU lowering (jax/_src/lax/linalg.py) declares, since the kernels size
# their loops from the operands and write the results without looking at their shapes.


def _potrf(t, avals, attrs):
    batch, _, _ = _matrix(avals, 0, t, square=True)
    return [avals[0], (batch, _I32)]


def _getrf(t, avals, attrs):
    batch, m, n = _matrix(avals, 0, t)
    return [avals[0], (batch + (min(m, n),), _I32), (batch, _I32)]


def _geqrf(t, avals, attrs):
    batch, m, n = _matrix(avals, 0, t)
    return [avals[0], (batch + (min(m, n),), t)]


def _geqp3(t, avals, attrs):
    batch, m, n = _matrix(avals, 0, t)
    if avals[1] != (batch + (n,), _I32):
        raise _Broken(f"the pivots are {_show(avals[1])}; expected {_show((batch + (n,), _I32))}")
    return [avals[0], avals[1], (batch + (min(m, n),), t)]


def _orgqr(t, avals, attrs):
    batch, m, n = _matrix(avals, 0, t)
    k = _vector(avals, 1, t, batch)
    if not m >= n >= k:
        raise _Broken(f"needs rows >= columns >= reflectors, got a {m}x{n} matrix and {k}")
    return [avals[0]]


def _ormqr(t, avals, attrs):
    batch, m, cols = _matrix(avals, 0, t)
    k = _vector(avals, 1, t, batch)
    c_batch, c_rows, c_cols = _matrix(avals, 2, t)
    if c_batch != batch:
        raise _Broken(f"operand batches {batch} and {c_batch} differ")
    applied = c_rows if attrs["left"] else c_cols
    if applied != m or k > min(m, cols):
        raise _Broken(
            f"reflectors of shape {avals[0][0]} ({k} of them) cannot apply to a matrix of "
            f"shape {avals[2][0]} from the {'left' if attrs['left'] else 'right'}"
        )
    return [avals[2]]


def _syevd(t, avals, attrs):
    batch, _, n = _matrix(avals, 0, t, square=True)
    return [avals[0], (batch + (n,), _real(t)), (batch, _I32)]


def _geev(t, avals, attrs):
    batch, _, n = _matrix(avals, 0, t, square=True)
    vectors = (avals[0][0], _complex(t) if t.kind == "f" else t)
    values = [(batch + (n,), t)] * (2 if t.kind == "f" else 1)
    return [*values, vectors, vectors, (batch, _I32)]


def _gees(t, avals, attrs):
    batch, _, n = _matrix(avals, 0, t, square=True)
    values = [(batch + (n,), t)] * (2 if t.kind == "f" else 1)
    return [avals[0], avals[0], *values, (batch, _I32), (batch, _I32)]


def _gehrd(t, avals, attrs):
    batch, _, n = _matrix(avals, 0, t, square=True)
    low, high = attrs["low"], attrs["high"]
    if n < 1 or not 1 <= low <= high <= n:
        raise _Broken(f"needs 1 <= low <= high <= n, got low={low}, high={high}, n={n}")
    return [avals[0], (batch + (n - 1,), t), (batch, _I32)]


def _sytrd(t, avals, attrs):
    batch, _, n = _matrix(avals, 0, t, square=True)
    if n < 1:
        raise _Broken(f"needs a non-empty matrix, got shape {avals[0][0]}")
    r = _real(t)
    return [
        avals[0],
        (batch + (n,), r),
        (batch + (n - 1,), r),
        (batch + (n - 1,), t),
        (batch, _I32),
    ]


def _gesdd(t, avals, attrs):
    batch, m, n = _matrix(avals, 0, t)
    k = min(m, n)
    reduced = attrs["mode"] == ord("S")
    u = (batch + (m, k if reduced else m), t)
    vt = (batch + (k if reduced else n, n), t)
    return [avals[0], (batch + (k,), _real(t)), u, vt, (batch, _I32)]


def _trsm(t, avals, attrs):
    batch, _, k = _matrix(avals, 0, t, square=True)
    b_batch, m, n = _matrix(avals, 1, t)
    if b_batch != batch:
        raise _Broken(f"operand batches {batch} and {b_batch} differ")
    left = attrs["side"] == ord("L")
    if (m if left else n) != k:
        raise _Broken(
            f"a triangular matrix of shape {avals[0][0]} cannot solve a right-hand side of "
            f"shape {avals[1][0]} from the {'left' if left else 'right'}"
        )
    return [avals[1]]


def _tridiagonal(t, avals, attrs):
    shape, got = avals[3]
    if got != t or len(shape) < 2:
        raise _Broken(f"operand 3 is {_show(avals[3])}, not a (stack of) {t.name} matrices")
    for i in range(3):
        if avals[i] != (shape[:-1], t):
            raise _Broken(
                f"diagonal operand {i} is {_show(avals[i])}; expected {_show((shape[:-1], t))}"
            )
    return avals[3]


def _gtsv(t, avals, attrs):
    return [*avals[:3], _tridiagonal(t, avals, attrs), (avals[3][0][:-2], _I32)]


def _perturbed(t, avals, attrs):
    return [_tridiagonal(t, avals, attrs)]


_UPLO = _char("L", "U")
# base name -> (operand count, attribute checks, rule)
_LAPACK = {
    "potrf": (1, {"uplo": _UPLO}, _potrf),
    "getrf": (1, {}, _getrf),
    "geqrf": (1, {}, _geqrf),
    "geqp3": (2, {}, _geqp3),
    "orgqr": (2, {}, _orgqr),
    "ungqr": (2, {}, _orgqr),
    "ormqr": (3, {"left": _boolean, "transpose": _boolean}, _ormqr),
    "unmqr": (3, {"left": _boolean, "transpose": _boolean}, _ormqr),
    "syevd": (1, {"mode": _char("V", "N"), "uplo": _UPLO}, _syevd),
    "heevd": (1, {"mode": _char("V", "N"), "uplo": _UPLO}, _syevd),
    "geev": (1, {"compute_left": _char("V", "N"), "compute_right": _char("V", "N")}, _geev),
    "gees": (1, {"mode": _char("V", "N"), "sort": _char("N")}, _gees),
    "gehrd": (1, {"low": _i32, "high": _i32}, _gehrd),
    "sytrd": (1, {"uplo": _UPLO}, _sytrd),
    "hetrd": (1, {"uplo": _UPLO}, _sytrd),
    "gesdd": (1, {"mode": _char("A", "S", "N")}, _gesdd),
    "gesvd": (1, {"mode": _char("A", "S", "N")}, _gesdd),
    "trsm": (
        2,
        {
            "side": _char("L", "R"),
            "uplo": _UPLO,
            "trans_x": _char("N", "T", "C"),
            "diag": _char("U", "N"),
        },
        _trsm,
    ),
    "gtsv": (4, {}, _gtsv),
}
# Which bases exist for which element types (LAPACK names its routines by both).
_REAL_ONLY = frozenset({"orgqr", "ormqr", "syevd", "sytrd"})
_COMPLEX_ONLY = frozenset({"ungqr", "unmqr", "heevd", "hetrd"})


def _kernel_contracts() -> dict[str, tuple]:
    contracts = {}
    for prefix, dtype in _LAPACK_PREFIXES.items():
        for base, contract in _LAPACK.items():
            if base in (_REAL_ONLY if dtype.kind == "c" else _COMPLEX_ONLY):
                continue
            contracts[f"lapack_{prefix}{base}_ffi"] = (dtype, *contract)
    # jax.lax.linalg.tridiagonal_solve(..., perturb_singular=True): one target for all types.
    contracts["tridiagonal_solve_perturbed_ffi"] = (None, 4, {}, _perturbed)
    # jaxlib 0.12.1's elementwise math kernels (lax.lgamma, lax.digamma): one array of a
    # float type in, one of its shape and type out. Only where this jaxlib registers them.
    for target in sorted(_MATH_TARGETS & _compat.cpu_math_targets()):
        contracts[target] = (_MATH_TYPES, 1, {}, _elementwise)
    return contracts


def _elementwise(t, avals, attrs):
    return [avals[0]]


_MATH_TARGETS = frozenset({"cpu_lgamma_ffi", "cpu_digamma_ffi"})
_MATH_TYPES = frozenset(np.dtype(t) for t in (np.float16, dtypes.bfloat16, np.float32, np.float64))


# target -> (element type, or None for "the operands'" (one of LAPACK's four types), or a set
# of the types the operands may have; operand count, attributes, rule)
_CONTRACTS = _kernel_contracts()
ALLOWED_TARGETS = tuple(sorted(_CONTRACTS))


def allowlist() -> str:
    """The custom-call targets aotkit runs, one line per family (for docs and errors)."""
    families: dict[str, list[str]] = {}
    for target in ALLOWED_TARGETS:
        m = _LAPACK_TARGET.match(target)
        if m is None:
            families.setdefault(target, [])
        else:
            families.setdefault(m.group(2), []).append(m.group(1))
    lines = []
    for base, prefixes in families.items():
        lines.append(f"lapack_{{{','.join(prefixes)}}}{base}_ffi" if prefixes else base)
    return ", ".join(lines)


# --- the check ---------------------------------------------------------------------------


def check(module: ir.Module, where: str) -> None:
    """Refuses (`UnsupportedModuleError`) what `module` must not ask a backend to run; see
    the module docstring. `where` starts every message (`load_module: model.mlir`)."""
    with _context.of(module):
        _Checker(where).run(module)


class _Checker:
    def __init__(self, where: str):
        self.where = where
        self.seen_types: set = set()
        self.calls: dict[str, list[tuple[str, ir.Operation]]] = {}

    def refuse(self, op: ir.Operation, what: str, fix: str, name: str | None = None):
        name = name or op.name
        loc = modules.op_location(op)
        raise UnsupportedModuleError(f"{self.where}: {what}{loc} {fix}", op=name, location=loc)

    def run(self, module: ir.Module) -> None:
        functions: dict[str, ir.Operation] = {}
        for item in module.body.operations:
            op = item.operation
            if op.name not in _TOP_LEVEL_OPS:
                self.refuse(
                    op,
                    f"op {op.name}",
                    "is not a function at the top of the module; aotkit compiles modules of "
                    "func.func functions (and sdy.mesh): remove it",
                )
            if op.name == "sdy.mesh":
                continue
            symbol = ir.StringAttr(op.attributes["sym_name"]).value
            functions[symbol] = op
            if not op.regions[0].blocks:
                self.refuse(
                    op,
                    f"function @{symbol}",
                    "is declared without a body (XLA's compiler crashes on such a module); "
                    "define it in the module or remove the declaration",
                    name="func.func",
                )
            ftype = modules.function_type(op)
            for t in (*ftype.inputs, *ftype.results):
                self._check_type(t, op)
            calls = self.calls[symbol] = []
            # A stack, not recursion: a crafted module may nest regions deeper than Python's
            # recursion limit.
            stack = [op]
            while stack:
                for region in stack.pop().regions:
                    for block in region.blocks:
                        for inner in block.operations:
                            inner = inner.operation
                            self._check_op(inner, calls)
                            if len(inner.regions):
                                stack.append(inner)
        self._check_recursion(functions)

    def _check_op(self, op: ir.Operation, calls: list) -> None:
        name = op.name
        if name == "stablehlo.custom_call":
            self._check_custom_call(op)
        elif name in REFUSED_OPS:
            self.refuse(op, f"op {name}", f"{REFUSED_OPS[name]}; remove it from the module")
        elif name == "func.call":
            calls.append((ir.FlatSymbolRefAttr(op.attributes["callee"]).value, op))
        elif name == "stablehlo.composite":
            calls.append((ir.FlatSymbolRefAttr(op.attributes["decomposition"]).value, op))
        elif not (name.startswith(_DIALECTS) or name in _OTHER_OPS):
            self.refuse(
                op,
                f"op {name}",
                "is not a StableHLO op; aotkit compiles StableHLO and CHLO (with func.call and "
                "Shardy's sharding annotations): lower the program to StableHLO",
            )
        for result in op.results:
            self._check_type(result.type, op)

    def _check_type(self, t: ir.Type, op: ir.Operation) -> None:
        if t in self.seen_types:
            return
        if isinstance(t, ir.RankedTensorType) and t.has_static_shape:
            count = 1
            for d in t.shape:
                count *= d
            bits = _element_bits(t.element_type)
            if count * bits > MAX_BYTES * 8:
                self.refuse(
                    op,
                    f"op {op.name}",
                    f"has a value of type {t} ({count * bits // 8:,} bytes), more than "
                    f"XLA can address ({MAX_BYTES:,} bytes); use smaller shapes",
                )
        self.seen_types.add(t)

    def _check_custom_call(self, op: ir.Operation) -> None:
        target = ir.StringAttr(op.attributes["call_target_name"]).value
        described = f"custom call @{target}"
        name = f"stablehlo.custom_call @{target}"
        if target in HOST_CALLBACK_TARGETS:
            self.refuse(
                op,
                described,
                "calls back into Python (jax.debug.print, jax.pure_callback or io_callback); "
                "an aotkit executable cannot call Python: remove the callback",
                name,
            )
        if target in SHARDING_TARGETS:
            self._check_sharding_call(op, described, name, same_type=target == "Sharding")
            return
        if target == SHAPE_ASSERTION:
            self._check_shape_assertion(op, described, name)
            return
        contract = _CONTRACTS.get(target)
        if contract is None:
            self.refuse(
                op,
                described,
                "targets a function aotkit does not run (it runs the custom calls "
                f"{allowlist()}); remove the call, or compute it with StableHLO ops",
                name,
            )
        try:
            self._check_contract(op, target, contract)
        except _Broken as broken:
            self.refuse(
                op,
                described,
                f"breaks the target's contract: {broken} (the kernel would read or write "
                "past its buffers); re-export the module from JAX or aotkit",
                name,
            )

    def _check_shape_assertion(self, op, described: str, name: str) -> None:
        operands = [v.type for v in op.operands]
        broken = None
        if len(op.results) or not operands:
            broken = f"it takes {len(operands)} operand(s) and gives {len(op.results)} result(s)"
        elif (
            not all(
                isinstance(t, ir.RankedTensorType)
                and t.rank == 0
                and isinstance(t.element_type, ir.IntegerType)
                for t in operands
            )
            or ir.IntegerType(ir.RankedTensorType(operands[0]).element_type).width != 1
        ):
            broken = f"its operands are ({', '.join(map(str, operands))})"
        elif "called_computations" in op.attributes and len(
            ir.ArrayAttr(op.attributes["called_computations"])
        ):
            broken = "it calls other functions"
        elif "error_message" in op.attributes and not isinstance(
            op.attributes["error_message"], ir.StringAttr
        ):
            broken = "its error_message is not a string"
        if broken is not None:
            self.refuse(
                op,
                described,
                "is a jax.export shape assertion, which takes a condition (i1) and integer "
                f"scalars and gives nothing, but {broken}; re-export the module from JAX",
                name,
            )

    def _check_sharding_call(self, op, described: str, name: str, same_type: bool) -> None:
        operands = [v.type for v in op.operands]
        results = [r.type for r in op.results]
        broken = None
        if len(operands) != 1 or len(results) != 1:
            broken = f"it takes {len(operands)} operand(s) and gives {len(results)} result(s)"
        elif same_type and operands[0] != results[0]:
            broken = f"it turns {operands[0]} into {results[0]}"
        elif not same_type and not (
            isinstance(operands[0], ir.RankedTensorType)
            and isinstance(results[0], ir.RankedTensorType)
            and operands[0].element_type == results[0].element_type
            and operands[0].rank == results[0].rank
        ):
            broken = f"it turns {operands[0]} into {results[0]}"
        elif "called_computations" in op.attributes and len(
            ir.ArrayAttr(op.attributes["called_computations"])
        ):
            broken = "it calls other functions"
        if broken is not None:
            self.refuse(
                op,
                described,
                f"is a GSPMD sharding annotation, which takes one value and gives one of the "
                f"same element type and rank, but {broken}; re-export the module from JAX",
                name,
            )

    def _check_contract(self, op: ir.Operation, target: str, contract: tuple) -> None:
        dtype, n_operands, attr_checks, rule = contract
        attrs = op.attributes
        for key in ("called_computations",):
            if key in attrs and len(ir.ArrayAttr(attrs[key])):
                raise _Broken("it calls other functions, which LAPACK kernels never do")
        if "backend_config" in attrs:
            config = attrs["backend_config"]
            if not isinstance(config, ir.StringAttr) or config.value:
                raise _Broken(
                    f"backend_config is {config}; its attributes go in mhlo.backend_config"
                )
        if "api_version" in attrs and ir.IntegerAttr(attrs["api_version"]).value not in (1, 4):
            raise _Broken(
                f"api_version is {ir.IntegerAttr(attrs['api_version']).value}; the kernel is "
                "called through XLA's typed FFI (api_version 1 with a dictionary "
                "mhlo.backend_config, or 4)"
            )
        values = self._backend_config(op, attr_checks)
        operands = [self._aval(v.type, f"operand {i}") for i, v in enumerate(op.operands)]
        results = [self._aval(r.type, f"result {i}") for i, r in enumerate(op.results)]
        if len(operands) != n_operands:
            raise _Broken(f"it takes {n_operands} operand(s), got {len(operands)}")
        if dtype is None or isinstance(dtype, frozenset):  # the operands' (of these types)
            allowed = dtype or frozenset(_LAPACK_PREFIXES.values())
            dtype = operands[-1][1] if operands else None
            if dtype not in allowed:
                raise _Broken(f"operands of {_show(operands[-1])}: no kernel for that type")
        expected = rule(dtype, operands, values)
        if results != expected:
            raise _Broken(
                f"operands ({', '.join(map(_show, operands))}) give results "
                f"({', '.join(map(_show, expected))}), but the call declares "
                f"({', '.join(map(_show, results))})"
            )

    def _backend_config(self, op: ir.Operation, attr_checks: dict) -> dict:
        if "mhlo.backend_config" not in op.attributes:
            if attr_checks:
                raise _Broken(f"mhlo.backend_config is missing; it needs {', '.join(attr_checks)}")
            return {}
        config = op.attributes["mhlo.backend_config"]
        if not isinstance(config, ir.DictAttr):
            raise _Broken(f"mhlo.backend_config is {config}, not a dictionary of attributes")
        names = [a.name for a in config]
        if sorted(names) != sorted(attr_checks):
            raise _Broken(
                f"mhlo.backend_config has attributes ({', '.join(sorted(names)) or 'none'}); "
                f"the kernel reads ({', '.join(sorted(attr_checks)) or 'none'})"
            )
        values = {}
        for key, ok in attr_checks.items():
            try:
                attr = config[key]
            except TypeError:  # a value the bindings cannot read (a complex dense attribute)
                attr = None
            if isinstance(attr, ir.BoolAttr):
                value = attr.value
            elif isinstance(attr, ir.IntegerAttr):
                value = attr.value
            else:
                value = None
            if value is None or not ok(value):
                raise _Broken(f"{key} is {attr}; expected {ok.expected}")
            values[key] = value
        return values

    @staticmethod
    def _aval(t: ir.Type, what: str) -> Aval:
        if not isinstance(t, ir.RankedTensorType) or not t.has_static_shape:
            raise _Broken(f"{what} has type {t}, not a tensor of static shape")
        try:
            return tuple(t.shape), dtypes.dtype_of_ir_type(t.element_type)
        except TypeError:
            raise _Broken(
                f"{what} has element type {t.element_type}, which no kernel takes"
            ) from None

    def _check_recursion(self, functions: dict[str, ir.Operation]) -> None:
        """Refuses a cycle in the call graph; depth-first with an explicit stack."""
        done: set[str] = set()
        for root in functions:
            if root in done:
                continue
            path = [root]
            on_path = {root}
            pending = [iter(self.calls.get(root, ()))]
            while pending:
                step = next(pending[-1], None)
                if step is None:
                    pending.pop()
                    done.add(path[-1])
                    on_path.discard(path.pop())
                    continue
                callee, op = step
                if callee in on_path:
                    cycle = " -> ".join(f"@{s}" for s in path[path.index(callee) :] + [callee])
                    self.refuse(
                        op,
                        f"{op.name} @{callee}",
                        f"makes the call graph recursive ({cycle}), which crashes XLA's "
                        "compiler; write the recursion as a loop (stablehlo.while)",
                    )
                if callee not in done and callee in functions:
                    path.append(callee)
                    on_path.add(callee)
                    pending.append(iter(self.calls.get(callee, ())))


def _element_bits(t: ir.Type) -> int:
    """Bits per element of `t` as XLA stores it (at least one byte); 8 when unknown."""
    if isinstance(t, ir.ComplexType):
        return 2 * _element_bits(t.element_type)
    width = getattr(t, "width", None)
    if isinstance(width, int) and width > 0:
        return max(8, width)
    return 8 if not isinstance(t, ir.IndexType) else 64


def _show(aval: Aval) -> str:
    shape, dtype = aval
    return f"{dtypes.short_name(dtype)}[{','.join(map(str, shape))}]"
