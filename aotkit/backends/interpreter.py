"""The `interpreter` backend: StableHLO's reference interpreter, a slow golden backend for tests.

"Compiling" legalizes CHLO to StableHLO and checks, before anything reaches
`stablehlo.eval_module`, that every op and element type is one the interpreter carries:
in jaxlib 0.10.2 an unsupported op ends the process (LLVM ERROR / SIGABRT) instead of
raising, and so does converting a complex result back to Python. What is refused raises
here, in Python: an op the interpreter does not implement is a `CompileError`, an element
type outside aotkit's dtypes a `TypeError`.

bfloat16 and complex values are carried anyway: arguments go in as raw bits, and the
evaluated copy of `@main` returns bf16 results widened to f32 (exact) and complex results
as real and imaginary parts, which are reassembled in NumPy.

`as_text()` is the final StableHLO (after legalization); cost and memory analyses are
`None`. Results are NumPy arrays. Each executable evaluates in a lowering context of its
own; the MLIR attributes that carry a call's arguments stay in it, so the executable moves
to a fresh context once they add up to `RECONTEXT_BYTES`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
from jaxlib.mlir import ir, passmanager
from jaxlib.mlir.dialects import func, stablehlo

from aotkit import _context, dtypes, modules
from aotkit._context import IR_LOCK
from aotkit.backends.base import ArgumentMismatch, Backend, Executable, describe, host_value
from aotkit.errors import CompileError

_LEGALIZE = "builtin.module(func.func(chlo-legalize-to-stablehlo))"
# Argument bytes an executable's context may hold before it moves to a fresh one.
RECONTEXT_BYTES = 64 << 20

# Ops the reference interpreter in jaxlib 0.10.2 evaluates. Everything else (custom_call,
# rng, rng_bit_generator, cholesky, fft, collectives, infeed/outfeed, tokens, dynamic-shape
# ops, ...) aborts the process inside eval_module, so it is refused before the call.
_SUPPORTED_OPS = frozenset(
    ["builtin.module", "func.func", "func.return", "func.call"]
    + [
        "stablehlo." + name
        for name in """
        abs add and atan2 bitcast_convert broadcast_in_dim case cbrt ceil clamp compare
        complex composite concatenate constant convert convolution cosine
        count_leading_zeros divide dot_general dynamic_slice dynamic_update_slice
        exponential exponential_minus_one floor gather get_tuple_element if imag iota
        is_finite log log_plus_one logistic map maximum minimum multiply negate not
        optimization_barrier or pad popcnt power real reduce reduce_precision
        reduce_window remainder reshape return reverse round_nearest_afz
        round_nearest_even rsqrt scatter select select_and_scatter shift_left
        shift_right_arithmetic shift_right_logical sign sine slice sort sqrt subtract
        tan tanh transpose triangular_solve tuple while xor
        """.split()
    ]
)


def create() -> InterpreterBackend:
    return InterpreterBackend()


class InterpreterBackend(Backend):
    name = "interpreter"
    platform = "interpreter"

    def devices(self) -> list:
        return ["interpreter:0"]

    @property
    def version(self) -> str:
        return f"StableHLO {stablehlo.get_current_version()}"

    def compile(self, module: ir.Module, options: Mapping[str, object] | None = None):
        name = modules.module_name(module)
        where = f"backend 'interpreter': module {name!r}"
        if options:
            raise ValueError(
                f"backend 'interpreter': takes no compile options, got {dict(options)!r}; "
                "XLA options apply to backend='cpu'"
            )
        in_specs, out_specs = modules.signature(module, where)
        with IR_LOCK:
            try:
                module.operation.verify()
            except ir.MLIRError as e:
                raise CompileError(
                    f"backend 'interpreter' rejected module {name!r}: it does not verify: "
                    f"{modules.diagnostic(e)}; build modules with aotkit.lower",
                    backend="interpreter",
                    module_name=name,
                ) from e
        data = modules.bytecode(module)
        with IR_LOCK, _context.LoweringContext() as lc:
            runnable = ir.Module.parse(data)
            passmanager.PassManager.parse(_LEGALIZE).run(runnable.operation)
            _check_carried(runnable, name, where)
            _copy_scatter_operands(runnable)
            text = runnable.operation.get_asm()
            decoders = _widen_results(runnable, out_specs)
            prepared = modules.bytecode(runnable)
        return InterpreterExecutable(
            self, name, text, (lc, runnable), prepared, in_specs, out_specs, decoders
        )


def _check_carried(module: ir.Module, name: str, where: str) -> None:
    """Refuses ops and element types the interpreter would abort on (caller holds IR_LOCK)."""

    def visit(op: ir.Operation) -> None:
        op_name = op.name
        if op_name not in _SUPPORTED_OPS:
            raise CompileError(
                f"backend 'interpreter' rejected module {name!r}: the reference interpreter "
                f"cannot run op {op_name}{_custom_call_origin(op)}; use backend='cpu'",
                backend="interpreter",
                module_name=name,
            )
        for result in op.results:
            _check_type(result.type, op_name, where)
        for region in op.regions:
            for block in region.blocks:
                for arg in block.arguments:
                    _check_type(arg.type, op_name, where)
                for inner in block.operations:
                    visit(inner.operation)

    visit(module.operation)


def _custom_call_origin(op: ir.Operation) -> str:
    """` @target`, and the function that emitted it when aotkit marked one, for a custom call."""
    if op.name != "stablehlo.custom_call":
        return ""
    target = ir.StringAttr(op.attributes["call_target_name"]).value
    if "aotkit.function" not in op.attributes:
        return f" @{target}"
    fn = ir.StringAttr(op.attributes["aotkit.function"]).value
    return f" @{target} (emitted by aotkit.numpy.{fn}, which needs LAPACK)"


def _copy_scatter_operands(module: ir.Module) -> None:
    """Feeds every `stablehlo.scatter` a fresh copy of its operands (caller holds IR_LOCK).

    jaxlib 0.10.2's interpreter updates a scatter's operand buffer in place: another use of
    the same value (the array itself returned next to `x.at[i].add(v)`, or a second scatter
    into one shared zeros constant) then sees the updates. `select(true, x, x)` is an exact
    copy into a new buffer.
    """
    scatters: list[ir.Operation] = []

    def visit(op: ir.Operation) -> ir.WalkResult:
        if op.name == "stablehlo.scatter":
            scatters.append(op)
        return ir.WalkResult.ADVANCE

    module.operation.walk(visit)
    for op in scatters:
        n = (len(op.operands) - 1) // 2
        with ir.InsertionPoint(op), op.location:
            # A 1-byte i1 buffer is a splat of its bits: 0xFF is true.
            true = stablehlo.constant(
                ir.DenseElementsAttr.get(
                    np.array([0xFF], np.uint8), type=ir.IntegerType.get_signless(1), shape=[]
                )
            )
            for i in range(n):
                x = op.operands[i]
                op.operands[i] = stablehlo.select(true, x, x)


_CARRIED: dict[str, np.dtype] = {}


def _check_type(t: ir.Type, op_name: str, where: str) -> None:
    if isinstance(t, ir.TupleType):
        for i in range(t.num_types):
            _check_type(t.get_type(i), op_name, where)
        return
    if not isinstance(t, ir.RankedTensorType):
        raise TypeError(
            f"{where}: op {op_name} has a value of type {t}, which the reference interpreter "
            "does not carry; use backend='cpu'"
        )
    element = t.element_type
    key = str(element)
    if key in _CARRIED:
        return
    try:
        _CARRIED[key] = dtypes.dtype_of_ir_type(element)
    except TypeError:
        raise TypeError(
            f"{where}: op {op_name} uses element type {key}, which the interpreter backend "
            f"does not carry (it carries {', '.join(dtypes.SHORT_NAMES)}); use backend='cpu'"
        ) from None


def _widen_results(module: ir.Module, out_specs) -> list[tuple[str, int]]:
    """Rewrites `@main` to return bf16 as f32 and complex as (real, imag); caller holds IR_LOCK.

    Returns one decoder per original result: ('plain' | 'bf16' | 'complex', first index).
    """
    main = modules.main_function(module)
    block = main.regions[0].blocks[0]
    ret = block.operations[len(block.operations) - 1]
    decoders = []
    values = []
    with ir.InsertionPoint(ret), ir.Location.unknown():
        for value, spec in zip(ret.operands, out_specs):
            index = len(values)
            if dtypes.is_complex(spec.dtype):
                values += [stablehlo.real(value), stablehlo.imag(value)]
                decoders.append(("complex", index))
            elif spec.dtype == dtypes.bfloat16:
                f32 = dtypes.tensor_type(spec.shape, np.dtype(np.float32))
                values.append(stablehlo.convert(f32, value))
                decoders.append(("bf16", index))
            else:
                values.append(value)
                decoders.append(("plain", index))
        func.ReturnOp(values)
    ret.erase()
    ftype = ir.FunctionType(ir.TypeAttr(main.attributes["function_type"]).value)
    main.attributes["function_type"] = ir.TypeAttr.get(
        ir.FunctionType.get(list(ftype.inputs), [v.type for v in values])
    )
    if "res_attrs" in main.attributes:
        del main.attributes["res_attrs"]
    module.operation.verify()
    return decoders


def _to_attribute(x: np.ndarray, spec) -> ir.DenseElementsAttr:
    """A DenseElementsAttr holding `x` bit for bit (caller holds IR_LOCK inside the context)."""
    x = np.ascontiguousarray(x)
    dtype = spec.dtype
    if dtypes.is_bool(dtype):
        buffer = x.view(np.uint8)
    elif dtype == dtypes.bfloat16:
        buffer = x.view(np.uint16)
    elif dtypes.is_complex(dtype):
        buffer = x.view(dtypes.real_dtype(dtype)).reshape(x.shape + (2,))
    else:
        buffer = x
    element = dtypes.ir_element_type(dtype)
    return ir.DenseElementsAttr.get(buffer, type=element, shape=list(spec.shape))


class InterpreterExecutable(Executable):
    def __init__(self, backend, name, text, loaded, prepared, in_specs, out_specs, decoders):
        self.backend = backend
        self.name = name
        self.in_specs = tuple(in_specs)
        self.out_specs = tuple(out_specs)
        self._text = text
        # (lowering context, module) the calls evaluate in; `prepared` is that module's
        # bytecode, to parse into a fresh context when the arguments have filled this one.
        self._loaded = loaded
        self._prepared = prepared
        self._decoders = decoders

    def _host(self, index: int, leaf, spec) -> np.ndarray:
        if isinstance(leaf, np.ndarray | np.generic) or dtypes.weak_kind(leaf) is not None:
            return host_value(index, leaf, spec)
        # Device arrays of other backends (e.g. a jax.Array from `cpu`) by their NumPy view.
        if hasattr(leaf, "__array__") and hasattr(leaf, "shape") and hasattr(leaf, "dtype"):
            if leaf.shape == spec.shape and leaf.dtype == spec.dtype:
                return np.asarray(leaf)
            raise ArgumentMismatch(index, f"expected {spec}, got {describe(leaf)}")
        return host_value(index, leaf, spec)

    def execute(self, leaves: Sequence) -> list:
        hosts = [self._host(i, x, s) for i, (x, s) in enumerate(zip(leaves, self.in_specs))]
        with IR_LOCK:
            lc, module = self._loaded
            if lc.constant_bytes >= RECONTEXT_BYTES:
                lc = _context.LoweringContext()
                with lc:
                    module = ir.Module.parse(self._prepared)
                self._loaded = (lc, module)
            lc.add_constant_bytes(sum(x.nbytes for x in hosts))
        with IR_LOCK, lc:
            attrs = [_to_attribute(x, s) for x, s in zip(hosts, self.in_specs)]
            try:
                raw = stablehlo.eval_module(module, attrs)
            except ValueError as e:
                raise RuntimeError(
                    f"backend 'interpreter': evaluating module {self.name!r} failed: {e}"
                ) from e
            arrays = [np.array(a) for a in raw]
        outs = []
        for (how, i), spec in zip(self._decoders, self.out_specs):
            if how == "complex":
                # Assigning parts keeps inf/nan parts apart (`1j * inf` would be nan+infj).
                value = np.empty(spec.shape, spec.dtype)
                value.real = arrays[i].reshape(spec.shape)
                value.imag = arrays[i + 1].reshape(spec.shape)
            else:
                value = np.asarray(arrays[i], dtype=spec.dtype).reshape(spec.shape)
            outs.append(value)
        return outs

    def as_text(self) -> str:
        return self._text

    def runtime_executable(self):
        return self._loaded[1]
