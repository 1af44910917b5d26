"""The `interpreter` backend: StableHLO's reference interpreter, a slow golden backend for tests.

"Compiling" works on a copy of the module, in a lowering context of the executable's own:
it drops the functions `@main` never calls, legalizes CHLO to StableHLO, checks that every
op, element type and shape left is one the interpreter carries (`checks`), and rewrites the
ops jaxlib 0.10.2's interpreter gets wrong or crashes on into ones it evaluates with XLA's
values (`rewrites`). All of that happens before anything reaches `stablehlo.eval_module`,
because there an unsupported op ends the process (LLVM ERROR / SIGABRT) instead of
raising, and so does converting a complex result back to Python. What is refused raises
here, in Python: an op the interpreter cannot run is a `CompileError` naming the op and its
location, an element type outside aotkit's dtypes a `TypeError`.

bfloat16, the float8/int4 types and complex values are carried anyway: arguments go in as
raw bits, and the evaluated copy of `@main` returns bf16 and float8/float4 results widened
to f32, int2/int4 ones to 8 bits (`dtypes.exact_wide`, exact), and complex results as real
and imaginary parts, which are reassembled in NumPy. Element types the interpreter computes
wrong values for are refused (`checks`).

`as_text()` is the final StableHLO (after legalization and the rewrites); cost and memory
analyses are `None`. Results are `numpy.ndarray` (its `result_type`; see
aotkit/backends/base.py). The MLIR attributes that carry a call's arguments stay in the
executable's context, so the executable moves to a fresh context once they add up to
`RECONTEXT_BYTES`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
from jaxlib.mlir import ir, passmanager
from jaxlib.mlir.dialects import func, stablehlo

from aotkit import _context, dtypes, modules
from aotkit.backends.base import (
    ArgumentMismatch,
    Backend,
    Executable,
    check_verifies,
    describe,
    host_value,
)
from aotkit.backends.interpreter import checks, rewrites

_LEGALIZE = "builtin.module(func.func(chlo-legalize-to-stablehlo))"
# Argument bytes an executable's context may hold before it moves to a fresh one.
RECONTEXT_BYTES = 64 << 20


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

    def compile(
        self,
        module: ir.Module,
        options: Mapping[str, object] | None = None,
        *,
        target: str | None = None,
        target_options: Mapping[str, str] | None = None,
    ):
        self.normalize_target(target, target_options)  # runs on the host only
        name = modules.module_name(module)
        where = f"backend 'interpreter': module {name!r}"
        if options:
            raise ValueError(
                f"backend 'interpreter': takes no compile options, got {dict(options)!r}; "
                "XLA options apply to backend='cpu'"
            )
        in_specs, out_specs = modules.signature(module, where)
        with _context.of(module):
            check_verifies(module, name, "backend 'interpreter'", "interpreter")
        data = modules.bytecode(module)
        with _context.LoweringContext() as lc:
            runnable = ir.Module.parse(data)
            functions = checks.reachable(runnable, name)
            rewrites.restore_chlo(functions)
            passmanager.PassManager.parse(_LEGALIZE).run(runnable.operation)
            checks.check_carried(functions, name, where)
            rewrites.apply(functions, name)
            runnable.operation.verify()
            text = runnable.operation.get_asm()
            decoders = _widen_results(runnable, out_specs)
            prepared = modules.bytecode(runnable)
        return InterpreterExecutable(
            self, name, text, (lc, runnable), prepared, in_specs, out_specs, decoders
        )


def _widen_results(module: ir.Module, out_specs) -> list[tuple[str, int]]:
    """Rewrites `@main` to return bf16 (float8, int4, ...) in `dtypes.exact_wide` and complex
    as (real, imag); the caller is inside `with lc:` for its context.

    Returns one decoder per original result: ('plain' | 'wide' | 'complex', first index).
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
            elif dtypes.exact_wide(spec.dtype) != spec.dtype:
                wide = dtypes.tensor_type(spec.shape, dtypes.exact_wide(spec.dtype))
                values.append(stablehlo.convert(wide, value))
                decoders.append(("wide", index))
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
    """A DenseElementsAttr holding `x` bit for bit (caller is inside `with lc:`)."""
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
        lc, module = self._loaded
        if lc.constant_bytes >= RECONTEXT_BYTES:
            lc = _context.LoweringContext()
            with lc:
                module = ir.Module.parse(self._prepared)
            self._loaded = (lc, module)
        lc.add_constant_bytes(sum(x.nbytes for x in hosts))
        with lc:
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
