"""The oracle of the transform tests: many named cases in one traced program, checked against
JAX's transforms of their jax.numpy twins, central differences and the transpose identity.

A family (elementwise ops, layout ops, ...) is a dict of `Case`s. `Family.result(name,
dtype)` runs every case of the family through aotkit's `jvp`, `vjp` and `vmap` inside one
`aotkit.jit` program, and the twins through JAX's inside one `jax.jit` program, so a family
costs two programs per dtype however many ops it holds; the tests then check each case on
its own (`check_*`), so a failure names the op and dtype. When the family's program cannot
be built (a rule raises), each case runs alone, and only the failing ones fail.

Both programs run on the StableHLO reference interpreter by default (`backend=`; the
accelerator AOTKIT_TEST_BACKEND names, where it names one: tests/lane.py): XLA
would spend tens of seconds compiling programs that run once on arrays of a dozen
elements. JAX's program is the one `jax.jit` lowers (aotkit's JAX front end keeps it as
it is); families with complex values, which the interpreter does not carry, run on `cpu`
with `jax.jit` itself.

What each check compares:
- `check_primal`: the output, against the twin's (values and dtypes);
- `check_jvp`, `check_vjp`: aotkit.jvp / aotkit.vjp against jax.jvp / jax.vjp;
- `check_vmap`: aotkit.vmap against jax.vmap and against a Python loop over the batch;
- `check_fd`: the JVP against central differences of aotkit's own program (float64);
- `check_transpose`: `<vjp(u), v> == <u, jvp(v)>`, the identity that ties reverse mode to
  forward mode.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import jax
import numpy as np
import pytest
from jax import tree_util

import aotkit
from tests import lane

BATCH = 3
FD_STEP = 1e-6

# (rtol, atol) by dtype: what XLA's own transcendental and summation order leaves, and
# tight enough that a wrong derivative fails.
TOLERANCES = {
    np.dtype(np.float32): (2e-5, 2e-5),
    np.dtype(np.complex64): (2e-5, 2e-5),
    np.dtype(np.float64): (1e-10, 1e-10),
    np.dtype(np.complex128): (1e-10, 1e-10),
}


@dataclasses.dataclass(frozen=True)
class Case:
    """One op under test. `make(rng, dtype)` gives its arguments (a tuple of NumPy arrays);
    `diff` the positions differentiated (default: the inexact ones); `in_axes` the vmap
    axes, one per argument (0 or None); `fd` whether central differences apply (the op is
    smooth at the sampled points); `tol` overrides (rtol, atol); `vjp` whether reverse mode
    is checked."""

    fa: Callable
    fj: Callable
    make: Callable
    diff: tuple[int, ...] | None = None
    in_axes: tuple | None = None
    fd: bool = True
    tol: tuple[float, float] | None = None
    vjp: bool = True  # False: forward mode and batching only (JAX has no vjp of the op)

    def diff_positions(self, args) -> tuple[int, ...]:
        if self.diff is not None:
            return self.diff
        return tuple(i for i, a in enumerate(args) if np.asarray(a).dtype.kind in "fc")

    def axes(self, args) -> tuple:
        return self.in_axes if self.in_axes is not None else (0,) * len(args)


def _inexact(dtype) -> bool:
    return np.dtype(dtype).kind in "fc"


def _random_like(rng, a):
    a = np.asarray(a)
    if a.dtype.kind == "c":
        return (rng.standard_normal(a.shape) + 1j * rng.standard_normal(a.shape)).astype(a.dtype)
    return rng.standard_normal(a.shape).astype(a.dtype)


@dataclasses.dataclass
class Inputs:
    args: dict  # name -> tuple of all arguments
    diff: dict  # name -> tuple of the differentiated ones
    const: dict  # name -> tuple of the others
    tangents: dict
    cotangents: dict
    batched: dict  # name -> tuple of arguments with a batch axis where in_axes is 0
    axes: dict


def _merge(case: Case, args, diff, const):
    out, d, c = [], iter(diff), iter(const)
    positions = case.diff_positions(args)
    for i in range(len(args)):
        out.append(next(d) if i in positions else next(c))
    return tuple(out)


class Family:
    """The cases of one family and their results, computed once per dtype."""

    def __init__(
        self,
        cases: dict[str, Case],
        seed: int = 0,
        backend: str | None = None,
        autograph: bool = False,
    ):
        self.cases = cases
        self.seed = seed
        # The interpreter, or the lane's accelerator where AOTKIT_TEST_BACKEND names one.
        self.backend = backend or (lane.NAME if lane.ON else "interpreter")
        self.autograph = autograph  # whether aotkit's program converts Python control flow
        self._results: dict = {}
        self._single: dict = {}

    # -- inputs -----------------------------------------------------------------------------

    def inputs(self, names, dtype) -> Inputs:
        args, diff, const, tangents, batched, axes = {}, {}, {}, {}, {}, {}
        for name in names:
            case = self.cases[name]
            # One generator per case: a case's inputs do not depend on which others run.
            rng = np.random.default_rng([self.seed, *name.encode()])
            a = tuple(np.asarray(x) for x in case.make(rng, np.dtype(dtype)))
            pos = case.diff_positions(a)
            args[name] = a
            diff[name] = tuple(a[i] for i in pos)
            const[name] = tuple(x for i, x in enumerate(a) if i not in pos)
            tangents[name] = tuple(_random_like(rng, x) for x in diff[name])
            ax = case.axes(a)
            samples = [a] + [
                tuple(np.asarray(x) for x in case.make(rng, np.dtype(dtype)))
                for _ in range(BATCH - 1)
            ]
            batched[name] = tuple(
                np.stack([s[i] for s in samples]) if ax[i] == 0 else a[i] for i in range(len(a))
            )
            axes[name] = tuple(ax)
        with jax.enable_x64(True):
            shapes = jax.eval_shape(lambda d, c: self._apply_jax(names, args, d, c), diff, const)
        rng = np.random.default_rng(self.seed + 1)
        cotangents = {
            n: tree_util.tree_map(
                lambda s: _random_like(rng, np.zeros(s.shape, s.dtype)), shapes[n]
            )
            for n in names
            if self.cases[n].vjp
        }
        return Inputs(args, diff, const, tangents, cotangents, batched, axes)

    def _apply(self, fn_of, names, args, diff, const):
        return {
            n: fn_of(self.cases[n])(*_merge(self.cases[n], args[n], diff[n], const[n]))
            for n in names
        }

    def _apply_jax(self, names, args, diff, const):
        return self._apply(lambda c: c.fj, names, args, diff, const)

    # -- the two programs -------------------------------------------------------------------

    def _aotkit(self, names, inp: Inputs, with_fd: bool):
        cases, args = self.cases, inp.args

        def program(diff, const, tangents, cotangents, batched):
            def f(d):
                return self._apply(lambda c: c.fa, names, args, d, const)

            def g(b):
                return {n: cases[n].fa(*b[n]) for n in names}

            out, tan = aotkit.jvp(f, (diff,), (tangents,))
            rev = list(cotangents)  # the cases reverse mode checks
            _, pull = aotkit.vjp(
                lambda d: self._apply(lambda c: c.fa, rev, args, d, const), _only(diff, rev)
            )
            (ct,) = pull(cotangents)
            vm = aotkit.vmap(g, in_axes=(inp.axes,))(batched)
            res = {"out": out, "tan": tan, "ct": ct, "vm": vm}
            if with_fd:
                res["fdp"] = f(_step(diff, tangents, FD_STEP))
                res["fdm"] = f(_step(diff, tangents, -FD_STEP))
            return res

        jitted = aotkit.jit(
            program, frontend="aotkit", autograph=self.autograph, backend=self.backend
        )
        a = (inp.diff, inp.const, inp.tangents, inp.cotangents, inp.batched)
        found = jitted.lower(*a).compile(options=_options(self.backend))(*a)
        # The loop over the batch: the untransformed program, compiled once, per lane.
        lane = aotkit.jit(
            lambda b: {n: cases[n].fa(*b[n]) for n in names},
            frontend="aotkit",
            autograph=self.autograph,
            backend=self.backend,
        )
        found["loop"] = [lane(_lane(inp.batched, inp.axes, i)) for i in range(BATCH)]
        return tree_util.tree_map(np.asarray, found)

    def _jax(self, names, inp: Inputs):
        cases, args = self.cases, inp.args

        def program(diff, const, tangents, cotangents, batched):
            def f(d):
                return self._apply_jax(names, args, d, const)

            def g(b):
                return {n: cases[n].fj(*b[n]) for n in names}

            out, tan = jax.jvp(f, (diff,), (tangents,))
            rev = list(cotangents)
            _, pull = jax.vjp(lambda d: self._apply_jax(rev, args, d, const), _only(diff, rev))
            (ct,) = pull(cotangents)
            vm = jax.vmap(g, in_axes=(inp.axes,))(batched)
            return {"out": out, "tan": tan, "ct": ct, "vm": vm}

        # 'highest': aotkit's default precision, which an accelerator's default is not.
        with jax.enable_x64(True), jax.default_matmul_precision("highest"):
            a = (inp.diff, inp.const, inp.tangents, inp.cotangents, inp.batched)
            if self.backend == "cpu" or (lane.ON and self.backend == lane.NAME):
                # On the lane JAX's program runs on the CPU: the accelerator's results are
                # compared with the CPU's (at the lane's tolerances), and the accelerator
                # compiles aotkit's programs only.
                a = jax.device_put(a, jax.devices("cpu")[0])
                found = jax.jit(program).lower(*a).compile(_options("cpu"))(*a)
            else:
                # JAX's transforms write the program; the interpreter runs it (XLA would
                # spend seconds compiling what runs once).
                found = aotkit.jit(program, frontend="jax", backend=self.backend)(*a)
            return tree_util.tree_map(np.asarray, found)

    def _run(self, names, dtype):
        inp = self.inputs(names, dtype)
        with_fd = np.dtype(dtype) in (np.dtype(np.float64), np.dtype(np.complex128))
        return inp, self._aotkit(names, inp, with_fd), self._jax(names, inp)

    def result(self, name: str, dtype):
        """(inputs, aotkit's results, JAX's results) of the family's program holding `name`:
        the whole family's, or `name`'s alone when the family's could not be built."""
        key = np.dtype(dtype)
        lane.skip_emulated_float64_derivatives(self.backend, key)
        if key not in self._results:
            try:
                self._results[key] = self._run(list(self.cases), key)
            except Exception:  # noqa: BLE001 (each case then runs alone and shows its error)
                self._results[key] = None
        if self._results[key] is not None:
            return self._results[key]
        if (name, key) not in self._single:
            # Kept when it fails too: each check of the case shows the error, compiled once.
            try:
                self._single[(name, key)] = self._run([name], key)
            except Exception as e:  # noqa: BLE001
                self._single[(name, key)] = e
        found = self._single[(name, key)]
        if isinstance(found, Exception):
            raise found
        return found

    # -- checks -----------------------------------------------------------------------------

    def tolerance(self, name, dtype):
        case = self.cases[name]
        if case.tol is not None:
            return case.tol
        return lane.tolerances(self.backend, TOLERANCES)[np.dtype(dtype)]

    def check_primal(self, name, dtype):
        _, got, want = self.result(name, dtype)
        assert_close(got["out"][name], want["out"][name], self.tolerance(name, dtype), "output")

    def check_jvp(self, name, dtype):
        _, got, want = self.result(name, dtype)
        tol = self.tolerance(name, dtype)
        assert_close(got["out"][name], want["out"][name], tol, "jvp primal")
        assert_close(got["tan"][name], want["tan"][name], tol, "jvp tangent")

    def check_vjp(self, name, dtype):
        _, got, want = self.result(name, dtype)
        assert_close(got["ct"][name], want["ct"][name], self.tolerance(name, dtype), "vjp")

    def check_vmap(self, name, dtype):
        _, got, want = self.result(name, dtype)
        tol = self.tolerance(name, dtype)
        assert_close(got["vm"][name], want["vm"][name], tol, "vmap against jax.vmap")
        loop = tree_util.tree_map(lambda *xs: np.stack(xs), *[r[name] for r in got["loop"]])
        assert_close(got["vm"][name], loop, tol, "vmap against a loop")

    def check_fd(self, name, dtype):
        _, got, _ = self.result(name, dtype)
        fd = tree_util.tree_map(
            lambda p, m: (
                (p.astype(np.complex128 if p.dtype.kind == "c" else np.float64) - m) / (2 * FD_STEP)
            ),
            got["fdp"][name],
            got["fdm"][name],
        )
        assert_close(got["tan"][name], fd, (1e-6, 1e-6), "central differences", dtypes=False)

    def check_transpose(self, name, dtype):
        inp, got, _ = self.result(name, dtype)
        lhs = _inner(got["ct"][name], inp.tangents[name])
        rhs = _inner(inp.cotangents[name], got["tan"][name])
        rtol, atol = self.tolerance(name, dtype)
        scale = max(1.0, abs(lhs), abs(rhs))
        assert abs(lhs - rhs) <= 10 * (atol + rtol) * scale, (
            f"<vjp(u), v> = {lhs} but <u, jvp(v)> = {rhs}"
        )


def _only(tree: dict, names) -> dict:
    return {n: tree[n] for n in names}


def _options(backend: str):
    """XLA's quickest compile (these programs run once, on a few elements)."""
    return {"xla_backend_optimization_level": 0} if backend == "cpu" else None


def _lane(batched, axes, i):
    return {
        n: tuple(x[i] if a == 0 else x for x, a in zip(batched[n], axes[n], strict=True))
        for n in batched
    }


def _step(diff, tangents, h):
    return tree_util.tree_map(lambda x, t: x + t * np.asarray(h, x.dtype), diff, tangents)


def _inner(a, b) -> float:
    """`Re(sum(a * b))`: the pairing under which JAX's vjp (and aotkit's) is the transpose of
    the jvp, complex values included (no conjugate: the jvp is only R-linear)."""
    pairs = zip(tree_util.tree_leaves(a), tree_util.tree_leaves(b), strict=True)
    total = sum(
        np.sum(np.asarray(x, np.complex128) * np.asarray(y, np.complex128)) for x, y in pairs
    )
    return float(np.real(total))


def assert_close(got, want, tol, what: str, *, dtypes: bool = True) -> None:
    """Same tree, shapes and (with `dtypes`) dtypes; values within `tol` = (rtol, atol)."""
    got_leaves, got_tree = tree_util.tree_flatten(got)
    want_leaves, want_tree = tree_util.tree_flatten(want)
    assert got_tree == want_tree, f"{what}: structure {got_tree} != {want_tree}"
    rtol, atol = tol
    for i, (g, w) in enumerate(zip(got_leaves, want_leaves, strict=True)):
        g, w = np.asarray(g), np.asarray(w)
        label = f"{what} (leaf {i})"
        assert g.shape == w.shape, f"{label}: shape {g.shape} != {w.shape}"
        if dtypes:
            assert g.dtype == w.dtype, f"{label}: dtype {g.dtype} != {w.dtype}"
        if g.dtype.kind in "fc" or w.dtype.kind in "fc":
            np.testing.assert_allclose(g, w, rtol=rtol, atol=atol, err_msg=label)
        else:
            np.testing.assert_array_equal(g, w, err_msg=label)


# --- the tests every family runs ---------------------------------------------------------------


def rule_tests(families, cases, fd_cases, reverse=None):
    """The five tests of a family's rules, for its test module to bind to these names:

        test_jvp, test_vjp, test_vmap, test_transpose, test_central_differences = rule_tests(...)

    `families` is a Family, or a dict of them (then each case starts with its key); `cases`
    are (name, dtype) pairs or pytest.params of them, which jvp and vmap check; `reverse`
    the cases vjp and the transpose identity check (default: `cases`); `fd_cases` those the
    central differences check."""

    def param(p):
        values, given = (p.values, p.id) if hasattr(p, "values") else (tuple(p), None)
        return pytest.param(values, id=given or "-".join(map(str, values)))

    def check(kind: str, case: tuple) -> None:
        family, rest = (
            (families[case[0]], case[1:]) if isinstance(families, dict) else (families, case)
        )
        getattr(family, f"check_{kind}")(*rest)

    forward = [param(p) for p in cases]
    backward = [param(p) for p in (cases if reverse is None else reverse)]

    @pytest.mark.parametrize("case", forward)
    def test_jvp(case):
        check("jvp", case)

    @pytest.mark.parametrize("case", backward)
    def test_vjp(case):
        check("vjp", case)

    @pytest.mark.parametrize("case", forward)
    def test_vmap(case):
        check("vmap", case)

    @pytest.mark.parametrize("case", backward)
    def test_transpose(case):
        check("transpose", case)

    @pytest.mark.parametrize("case", [param(p) for p in fd_cases])
    def test_central_differences(case):
        check("fd", case)

    return test_jvp, test_vjp, test_vmap, test_transpose, test_central_differences
