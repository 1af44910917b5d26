"""The stages as values: Traced -> Lowered -> Compiled, immutable, on one path for every
front end; lowering contexts that let go; and the regressions of issue 11."""

from __future__ import annotations

import re
import subprocess
import sys
import textwrap
import threading

import jax
import numpy as np
import pytest
from jaxlib.mlir import ir

import aotkit
import aotkit.numpy as anp
from aotkit import Traced, _context
from aotkit.api import lower_function
from tests.helpers import assert_matches

F4 = aotkit.spec("f32[4]")


def fresh(fn):
    """A new function object: caches are per function."""
    return lambda *a, **k: fn(*a, **k)


# --- Traced -------------------------------------------------------------------------------------


def test_trace_is_the_module_before_the_pipeline():
    f = fresh(lambda x: x * 1.0 + 0.0)
    traced = aotkit.jit(f).trace(F4)
    assert isinstance(traced, Traced)
    assert traced.frontend == "aotkit"
    assert "stablehlo.multiply" in traced.as_text()  # the pipeline removes x * 1
    lowered = traced.lower()
    assert "stablehlo.multiply" not in lowered.as_text()
    # The Traced is unchanged by lowering it, and lowers again to the same module.
    assert "stablehlo.multiply" in traced.as_text()
    assert traced.lower(pipeline="none").as_text() != lowered.as_text()
    assert traced.in_specs == lowered.in_specs and traced.out_specs == lowered.out_specs


def test_trace_then_lower_shares_the_jit_cache():
    f = fresh(lambda x: x + 1)
    jitted = aotkit.jit(f)
    first = jitted.trace(F4).lower()
    assert jitted.lower(F4) is first
    info = jitted.cache_info()
    assert (info.traces, info.lowerings) == (1, 1)
    jitted.trace(F4).lower()  # traced again, lowered from the cache
    info = jitted.cache_info()
    assert (info.traces, info.lowerings, info.hits) == (2, 1, 2)


def test_trace_has_the_source_locations():
    def f(x):
        return anp.sin(x)

    text = aotkit.jit(f).trace(F4).as_text(debug_info=True)
    assert "test_stages.py" in text


def test_every_front_end_gives_a_program_that_the_stages_wrap(tmp_path):
    from aotkit.frontends import files
    from aotkit.frontends.jax import trace_jax
    from aotkit.program import Program, Signature
    from aotkit.tracing.trace import trace

    text = aotkit.lower(lambda x: x + x, F4).as_text()
    path = tmp_path / "m.mlir"
    path.write_text(text)
    programs = {
        "file": files.read_module(path),
        "jax": trace_jax(lambda x: jax.numpy.sin(x), (F4,), {}),
        "aotkit": trace(lambda x: x * 2, (F4,), {}),
    }
    for frontend, program in programs.items():
        assert isinstance(program, Program) and program.frontend == frontend
        assert isinstance(program.signature, Signature)
        assert program.signature.flat_in_specs == (F4,)
    from_jax = aotkit.jit(lambda x: jax.numpy.sin(x), frontend="jax").trace(F4)
    assert isinstance(from_jax, Traced) and from_jax.frontend == "jax"
    # jit knows the function's parameter names; the front end alone does not.
    named = programs["jax"].signature.replace(name=from_jax.name, arg_names=("x",))
    assert from_jax.signature == named
    assert aotkit.load_module(path).pipeline == "none"  # a file runs as written by default
    assert from_jax.lower().pipeline == "none"  # so is a JAX module (jax.jit's, bit for bit)


# --- immutable stages ---------------------------------------------------------------------------


@pytest.mark.parametrize("stage", ["traced", "lowered", "compiled"])
def test_stages_are_immutable(stage):
    traced = aotkit.jit(fresh(lambda x: x + 1)).trace(F4)
    value = {
        "traced": lambda: traced,
        "lowered": traced.lower,
        "compiled": lambda: traced.lower().compile(),
    }[stage]()
    for name in ("name", "in_tree", "flat_in_specs", "donated"):
        with pytest.raises(AttributeError, match=r"is immutable: cannot set '" + name):
            setattr(value, name, None)
    with pytest.raises(AttributeError, match=r"is immutable: cannot delete 'name'"):
        del value.name


def test_lowered_module_is_a_copy():
    lowered = aotkit.lower(lambda x: x + 1, F4)
    before = lowered.as_text()
    module = lowered.module
    with _context.of(module):
        module.operation.attributes["sym_name"] = ir.StringAttr.get("changed")
    assert "@changed" in str(module)
    assert lowered.as_text() == before


# --- donation (defect 2) ------------------------------------------------------------------------


def test_lower_function_honours_donation_on_the_tracer_path():
    lowered = lower_function(lambda s, g: s - g, (F4, F4), {}, donate_argnums=(0,))
    assert lowered.donated == (True, False)
    assert "tf.aliasing_output = 0" in lowered.as_text()


def test_final_dump_is_what_the_backend_gets(tmp_path):
    jitted = aotkit.jit(fresh(lambda s, g: s - g), donate_argnums=0, dump_dir=tmp_path)
    lowered = jitted.lower(F4, F4)
    (final,) = tmp_path.glob("*-final.mlir")
    assert "tf.aliasing_output = 0" in final.read_text()
    assert final.read_text().strip() == lowered.as_text().strip()


# --- jit inside a trace (defect 3) --------------------------------------------------------------


def test_jit_called_inside_a_trace_is_traced_inline():
    g = aotkit.jit(fresh(lambda x: anp.sin(x) * 2.0))

    def f(x):
        return g(x) + 1.0

    x = np.linspace(0, 1, 3, dtype=np.float32)
    got = aotkit.jit(f)(x)
    assert_matches(got, np.sin(x) * 2.0 + 1.0)
    assert g.cache_info().compiles == 0  # nothing compiled for the inner function
    assert "stablehlo.sine" in aotkit.lower(f, x).as_text()


def test_jax_jit_inside_an_aotkit_trace_is_lowered_by_jax_inline():
    g = aotkit.jit(lambda x: jax.numpy.sin(x), frontend="jax")
    x = np.linspace(0, 1, 3, dtype=np.float32)
    got = aotkit.jit(lambda x: g(x) * 2.0, frontend="aotkit")(x)
    want = jax.jit(lambda x: jax.numpy.sin(x) * 2.0)(x)
    assert got.dtype == want.dtype
    np.testing.assert_allclose(got, want, rtol=1e-6)
    assert g.cache_info().compiles == 0  # nothing compiled for the inner function


def test_jax_jit_with_statics_inside_an_aotkit_trace_is_refused():
    g = aotkit.jit(lambda x, n: jax.numpy.sin(x) * n, frontend="jax", static_argnums=1)
    with pytest.raises(
        TypeError,
        match=r"a JAX function \(frontend='jax'\) with static arguments was called inside a "
        r"function aotkit is tracing, which passes it traced arrays only; close over",
    ):
        aotkit.lower(lambda x: g(x, 2), F4, frontend="aotkit")


# --- tracing is per thread (defect 4) -----------------------------------------------------------


def test_numpy_outside_a_trace_in_another_thread_gets_aotkits_error():
    started, release = threading.Event(), threading.Event()
    seen = []

    def f(x):
        started.set()
        release.wait(10)
        return x + 1

    tracer = threading.Thread(target=lambda: aotkit.lower(f, F4))
    tracer.start()
    started.wait(10)
    try:
        for call in (lambda: anp.sin(np.ones(3)), lambda: aotkit.cond(True, anp.sin, anp.cos, 1)):
            with pytest.raises(RuntimeError) as e:
                call()
            seen.append(str(e.value))
    finally:
        release.set()
        tracer.join()
    assert "aotkit.numpy has no eager mode" in seen[0]
    assert seen[0].startswith("aotkit.numpy.sin was called outside a traced function")
    assert "no function is being traced" in seen[1]


def test_numpy_function_outside_any_trace_says_there_is_no_eager_mode():
    with pytest.raises(
        RuntimeError,
        match=r"^aotkit.numpy.sin was called outside a traced function: aotkit.numpy has no "
        r"eager mode: it builds StableHLO",
    ):
        anp.sin(np.ones(3))
    with pytest.raises(RuntimeError, match=r"^an aotkit.numpy function was called outside"):
        anp.zeros(3) + 1
    # A function whose first op has no operands (an iota) says so too.
    with pytest.raises(
        RuntimeError,
        match=r"^aotkit.numpy \(its 'iota' op\) was called outside a traced function: "
        r"aotkit.numpy has no eager mode",
    ):
        anp.arange(5)


# --- lowering contexts let go (defect 1) --------------------------------------------------------


def test_contexts_retire_after_their_constant_budget():
    first = _context.for_lowering()
    first.add_constant_bytes(_context.RETIRE_BYTES)
    assert first.retired
    assert _context.for_lowering() is not first


def test_a_dropped_lowering_frees_its_context():
    import gc
    import weakref

    w = np.arange(1 << 16, dtype=np.float32)  # 256 KiB of constant data
    lowered = aotkit.lower(lambda x: x + w, aotkit.spec("f32[65536]"))
    ref = weakref.ref(lowered._lc)
    # Retire the context it used, as a later big constant would.
    lowered._lc.add_constant_bytes(_context.RETIRE_BYTES)
    _context.for_lowering()
    del lowered
    gc.collect()
    assert ref() is None


def test_relowering_programs_with_new_weights_keeps_memory_flat():
    # In a child process: RSS is the process's own.
    code = textwrap.dedent(
        """
        import gc, numpy as np, aotkit
        def rss():
            return int(open("/proc/self/statm").read().split()[1]) * 4096 / 2**20
        spec = aotkit.spec("f32[1048576]")
        def once(i):
            w = np.full(1 << 20, i, np.float32) + np.arange(1 << 20, dtype=np.float32)
            aotkit.lower(lambda x: x + w, spec)
        for i in range(5):
            once(i)
        gc.collect()
        start = rss()
        for i in range(40):
            once(i)
        gc.collect()
        print(rss() - start)
        """
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    growth = float(out.stdout.split()[-1])
    assert growth < 10, f"RSS grew {growth:.1f} MiB over 40 lowerings of 4 MiB constants"


# --- fori_loop's index (defect 6) and integer powers (defect 8) --------------------------------


def test_fori_loop_index_promotes_like_a_python_int():
    def with_fori(x):
        return aotkit.fori_loop(0, 4, lambda i, c: c * 2.0 + i, x)

    def with_python(x):
        for i in range(4):
            x = x * 2.0 + i
        return x

    x = np.ones(4, np.float32)
    assert_matches(aotkit.jit(with_fori)(x), with_python(x))


# --- quiet by default (defect 7) ----------------------------------------------------------------


def test_compiling_prints_nothing_to_stderr():
    import os

    env = {k: v for k, v in os.environ.items() if k != "TF_CPP_MIN_LOG_LEVEL"}
    code = "import numpy as np, aotkit; print(aotkit.jit(lambda x: x + 1)(np.float32(1)))"
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True
    )
    assert out.stdout.strip() == "2.0"
    assert out.stderr == ""


# --- JAX's stage names (docs/stages.md has the table) ---------------------------------------------


def _pair(x, y):
    return x * 2, {"total": y.sum()}


@pytest.fixture(scope="module")
def both():
    import jax

    args = (np.ones(3, np.float32), np.ones((2, 2), np.float32))
    ours = aotkit.jit(_pair, donate_argnums=0, frontend="jax")
    theirs = jax.jit(_pair, donate_argnums=0)
    return args, ours, theirs, ours.lower(*args), theirs.lower(*args)


def test_args_info_out_info_and_donate_argnums_are_jaxs(both):
    from jax import tree_util

    args, _, _, lowered, jax_lowered = both
    for stage in (lowered, lowered.compile()):
        infos = tree_util.tree_leaves(stage.args_info, is_leaf=lambda v: hasattr(v, "donated"))
        theirs = tree_util.tree_leaves(
            jax_lowered.args_info, is_leaf=lambda v: hasattr(v, "donated")
        )
        assert [(i.shape, i.dtype, i.donated) for i in infos] == [
            (t.shape, t.dtype, t.donated) for t in theirs
        ]
        assert tree_util.tree_structure(stage.args_info) == tree_util.tree_structure(
            jax_lowered.args_info, is_leaf=lambda v: hasattr(v, "donated")
        )
        out = [(o.shape, o.dtype) for o in tree_util.tree_leaves(stage.out_info)]
        assert out == [(o.shape, o.dtype) for o in tree_util.tree_leaves(jax_lowered.out_info)]
        assert [(a.shape, a.dtype) for a in tree_util.tree_leaves(stage.in_avals)] == [
            (a.shape, a.dtype) for a in tree_util.tree_leaves(jax_lowered.in_avals)
        ]
        assert stage.donate_argnums == jax_lowered.donate_argnums == (0,)


def test_lowered_cost_analysis_is_xlas_estimate_before_compiling(both):
    _, _, _, lowered, jax_lowered = both
    ours, theirs = lowered.cost_analysis(), jax_lowered.cost_analysis()
    assert ours["flops"] == theirs["flops"] and ours["bytes accessed"] == theirs["bytes accessed"]
    on_interpreter = aotkit.jit(_pair).lower(np.ones(3), np.ones((2, 2)))
    assert on_interpreter.cost_analysis("interpreter") is None


def test_compiler_ir_is_a_copy_of_the_stablehlo_module(both):
    _, _, _, lowered, _ = both
    module = lowered.compiler_ir()
    assert str(module) == lowered.as_text() and module is not lowered.compiler_ir("stablehlo")
    with pytest.raises(ValueError, match=re.escape(
        "compiler_ir: dialect 'hlo' is not available here; aotkit's stages hold StableHLO "
        "(dialect='stablehlo'); the backend's optimized HLO is Compiled.as_text()"
    )):  # fmt: skip
        lowered.compiler_ir("hlo")


def test_compiled_input_and_output_shardings_are_jaxs(both):
    args, _, _, lowered, jax_lowered = both
    compiled, jax_compiled = lowered.compile(), jax_lowered.compile()
    assert compiled.input_shardings == jax_compiled.input_shardings
    assert compiled.output_shardings == jax_compiled.output_shardings
    interpreted = aotkit.jit(_pair, backend="interpreter").lower(*args).compile()
    assert interpreted.input_shardings is None and interpreted.output_shardings is None


def test_eval_shape_is_jaxs_without_lowering(both):
    import jax

    args, ours, theirs, _, _ = both

    def pair(x, y):  # a function of its own: the jit caches are per function
        return _pair(x, y)

    fresh = aotkit.jit(pair)
    shapes = fresh.eval_shape(*args)
    expected = theirs.eval_shape(*args)
    assert shapes[0].shape == expected[0].shape and shapes[0].dtype == expected[0].dtype
    assert shapes[1]["total"].shape == () and shapes[1]["total"].dtype == np.float32
    assert fresh.cache_info().lowerings == 0
    assert jax.tree_util.tree_structure(shapes) == jax.tree_util.tree_structure(expected)


def test_clear_cache_forgets_lowerings_and_executables():
    jitted = aotkit.jit(lambda x: x + 1)
    x = np.ones(3, np.float32)
    jitted(x)
    assert jitted.cache_info().entries == 2
    jitted.clear_cache()
    assert jitted.cache_info().entries == 0
    assert np.asarray(jitted(x)).tolist() == [2.0, 2.0, 2.0]
    assert jitted.cache_info().entries == 2 and jitted.cache_info().lowerings == 2
