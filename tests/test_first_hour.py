"""The Python API in a newcomer's first hour (issue 22): the default front end, one result
type per backend, `aotkit.lower` taking jit's options, tracebacks without aotkit's frames,
`aotkit.load` given a module file, unusable donations, signatures named by leaf path."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import traceback
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import tree_util

import aotkit
import aotkit.numpy as anp
from aotkit import arguments, backends, config

X4 = np.arange(4, dtype=np.float32)
AOTKIT_DIR = os.path.dirname(os.path.abspath(aotkit.__file__)) + os.sep


def fresh(fn):
    """A new function object: caches are per function."""
    return lambda *a, **k: fn(*a, **k)


# --- 1. the default front end is `auto`, as in the CLI -----------------------------------------


def jax_sine(x):
    return jnp.sin(x) * 2.0


def _jax_helper(x):
    return jnp.cos(x)


def calls_a_jax_helper(x):
    return _jax_helper(x) + 1.0


def test_jit_of_a_jax_numpy_function_is_lowered_by_jax():
    out = aotkit.jit(jax_sine)(X4)
    np.testing.assert_allclose(np.asarray(out), np.sin(X4) * 2.0, rtol=1e-6)
    assert aotkit.jit(jax_sine).lower(X4).frontend == "jax"


def test_lower_of_a_jax_numpy_function_is_lowered_by_jax():
    assert aotkit.lower(jax_sine, X4).frontend == "jax"


def test_aotkit_numpy_code_still_takes_the_tracer():
    assert aotkit.lower(lambda x: anp.sin(x), X4).frontend == "aotkit"
    assert aotkit.lower(lambda x: np.sin(x), X4).frontend == "aotkit"


@pytest.mark.parametrize("frontend", ["auto", "aotkit"])
def test_jax_called_on_tracers_says_to_pass_frontend_jax(frontend):
    # `auto` sees no JAX in the function itself (only a helper calls jax.numpy).
    with pytest.raises(
        TypeError,
        match="^"
        + re.escape(
            "trace(calls_a_jax_helper): calls_a_jax_helper calls JAX (jax.numpy, jax.lax, ...) "
            "on aotkit's traced values, which JAX cannot take (Argument 'Tracer<f32[4]>' of "
            "type <class 'aotkit.tracing.core.Tracer'> is not a valid JAX type.); pass "
            "frontend='jax' to let JAX lower calls_a_jax_helper, or write it with aotkit.numpy"
        )
        + "$",
    ):
        aotkit.jit(calls_a_jax_helper, frontend=frontend)(X4)


def test_frontend_jax_then_runs_it():
    out = aotkit.jit(calls_a_jax_helper, frontend="jax")(X4)
    np.testing.assert_allclose(np.asarray(out), np.cos(X4) + 1.0, rtol=1e-6)


# --- 2. one result type per backend --------------------------------------------------------------

RESULT_BACKENDS = ["cpu", "interpreter"] + (
    ["iree"] if "iree" in [b.name for b in backends.available()] else []
)


def _many_results(x):
    return {"vector": anp.sin(x), "scalar": x.sum(), "bool": x > 1, "complex": x * 1j}


@pytest.mark.parametrize("name", RESULT_BACKENDS)
def test_every_result_is_the_backends_result_type(name):
    backend = backends.get(name)
    compiled = aotkit.lower(_many_results, X4).compile(name)
    outs = compiled(X4)
    for key, out in outs.items():
        assert isinstance(out, backend.result_type), (key, type(out))
        if backend.result_type is np.ndarray:
            assert type(out) is np.ndarray, (key, type(out))  # never a NumPy scalar
    np.testing.assert_allclose(np.asarray(outs["vector"]), np.sin(X4), rtol=1e-6)


def test_pjrt_results_are_jax_arrays_and_the_others_numpy():
    assert backends.get("cpu").result_type is jax.Array
    assert backends.get("interpreter").result_type is np.ndarray


def test_results_of_one_backend_are_arguments_of_another():
    on_cpu = aotkit.lower(lambda x: x * 2, X4).compile("cpu")
    on_interpreter = aotkit.lower(lambda x: x + 1, X4).compile("interpreter")
    np.testing.assert_array_equal(on_cpu(on_interpreter(X4)), (X4 + 1) * 2)
    np.testing.assert_array_equal(on_interpreter(on_cpu(X4)), X4 * 2 + 1)


# --- 3. aotkit.lower takes jit's options ---------------------------------------------------------


def scaled(x, n):
    return x * n


def test_lower_takes_static_argnums():
    lowered = aotkit.lower(scaled, X4, 2, static_argnums=1)
    assert [str(s) for s in lowered.flat_in_specs] == ["f32[4]"]
    np.testing.assert_array_equal(np.asarray(lowered.compile()(X4)), X4 * 2)


def test_lower_takes_static_argnames():
    lowered = aotkit.lower(scaled, X4, n=3, static_argnames="n")
    np.testing.assert_array_equal(np.asarray(lowered.compile()(X4)), X4 * 3)


def test_lower_takes_donate_argnums():
    assert aotkit.lower(lambda x: x + 1, X4, donate_argnums=0).donated == (True,)


def test_lower_takes_backend_and_pipeline():
    lowered = aotkit.lower(lambda x: x * 1.0, X4, backend="interpreter", pipeline="none")
    assert lowered.backend == "interpreter"
    assert lowered.pipeline == "none"
    assert "stablehlo.multiply" in lowered.as_text()  # the pipeline "none" keeps x * 1
    assert lowered.compile().backend.name == "interpreter"


def test_lower_takes_dump_dir(tmp_path):
    lowered = aotkit.lower(lambda x: x + 1, X4, dump_dir=tmp_path)
    assert lowered.dump_paths
    assert all(str(p).startswith(str(tmp_path)) for p in lowered.dump_paths)


def test_lower_checks_its_options_as_jit_does():
    with pytest.raises(
        TypeError, match=r"^lower: static_argnums must be an int or a tuple of ints, got 'a'$"
    ):
        aotkit.lower(scaled, X4, 2, static_argnums="a")
    with pytest.raises(TypeError, match=r"^lower: backend must be a name such as 'cpu', got 3$"):
        aotkit.lower(scaled, X4, 2, backend=3)


# --- 4. tracebacks without aotkit's frames --------------------------------------------------------


def _broken_inner(x):
    return x + np.ones(5, np.float32)  # (4,) and (5,) do not broadcast


def broken(x):
    return _broken_inner(x) * 2


def _frames(error: BaseException) -> list[traceback.FrameSummary]:
    return traceback.extract_tb(error.__traceback__)


def _aotkit_frames(error: BaseException) -> list[str]:
    return [f.name for f in _frames(error) if os.path.abspath(f.filename).startswith(AOTKIT_DIR)]


ENTRY_POINTS = {
    "jit-lower": lambda fn: aotkit.jit(fn).lower(X4),
    "jit-trace": lambda fn: aotkit.jit(fn).trace(X4),
    "jit-call": lambda fn: aotkit.jit(fn)(X4),
    "jit-call-static": lambda fn: aotkit.jit(lambda x, n: fn(x), static_argnums=1)(X4, 1),
    "lower": lambda fn: aotkit.lower(fn, X4),
}


@pytest.mark.parametrize("entry", ENTRY_POINTS)
def test_user_errors_show_the_users_frames_and_none_of_aotkits(entry):
    with pytest.raises(ValueError, match=r"^add \(at .*\): shapes \(4,\) and \(5,\)") as e:
        ENTRY_POINTS[entry](fresh(broken))
    assert _aotkit_frames(e.value) == []
    names = [f.name for f in _frames(e.value)]
    assert names[0] == "test_user_errors_show_the_users_frames_and_none_of_aotkits"
    assert names[-2:] == ["broken", "_broken_inner"]


def test_errors_of_a_compiled_call_show_no_aotkit_frame():
    compiled = aotkit.lower(lambda x: x, X4).compile()
    with pytest.raises(TypeError, match=r"argument x expected f32\[4\]") as e:
        compiled(np.ones(3, np.float32))
    assert _aotkit_frames(e.value) == []


def test_filtering_off_shows_aotkits_frames():
    config.update("traceback_filtering", False)
    try:
        with pytest.raises(ValueError) as e:
            aotkit.jit(fresh(broken)).lower(X4)
    finally:
        config.update("traceback_filtering", True)
    internal = _aotkit_frames(e.value)
    assert "trace_function" in internal and "trace_to_module" in internal
    names = [f.name for f in _frames(e.value)]
    assert "broken" in names and "_broken_inner" in names


@pytest.mark.parametrize(
    ("text", "value"), [("", True), ("off", False), ("0", False), ("on", True)]
)
def test_filtering_reads_its_environment_variable(text, value):
    env = dict(os.environ, AOTKIT_TRACEBACK_FILTERING=text)
    code = "import aotkit.config as c; print(c.get('traceback_filtering'))"
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    )
    assert out.stdout.strip() == str(value)


# --- 5. aotkit.load given a module file -----------------------------------------------------------


def test_load_of_module_text_says_to_use_load_module(tmp_path):
    path = tmp_path / "f.mlir"
    path.write_text(aotkit.lower(lambda x: x + 1, X4).as_text())
    with pytest.raises(
        aotkit.ArtifactError,
        match="^"
        + re.escape(
            f"aotkit.load: {path} is StableHLO MLIR text, not an aotkit artifact; load a module "
            f"with aotkit.load_module('{path}') (then .compile() it), or save an artifact with "
            "Compiled.save"
        )
        + "$",
    ):
        aotkit.load(str(path))
    assert aotkit.load_module(str(path)).compile()(X4).shape == (4,)


def test_load_of_module_bytecode_says_to_use_load_module():
    data = aotkit.lower(lambda x: x + 1, X4).as_bytecode()
    with pytest.raises(
        aotkit.ArtifactError,
        match="^"
        + re.escape(
            "aotkit.load: <bytes> is MLIR bytecode (a StableHLO module or portable artifact), "
            "not an aotkit artifact; load a module with aotkit.load_module(data) (then "
            ".compile() it), or save an artifact with Compiled.save"
        )
        + "$",
    ):
        aotkit.load(data)


# --- 6. donated buffers XLA cannot reuse ----------------------------------------------------------


def test_an_unusable_donation_warns_naming_the_leaf():
    def count(params, x):
        return (params["w"] > 0).sum(dtype=np.int32) + x

    with pytest.warns(
        UserWarning,
        match="^"
        + re.escape(
            "Some donated buffers were not usable: params['w']: f32[4]; lowering 'count': no "
            "result left has that shape and dtype for XLA to write into (results: out: i32[]); "
            "drop them from donate_argnums, or return a value of their shape and dtype"
        )
        + "$",
    ) as record:
        aotkit.jit(count, donate_argnums=0).lower({"w": X4}, np.int32(1))
    assert record[0].filename == __file__  # the user's line, not aotkit's


def test_a_donation_of_another_shape_warns():
    with pytest.warns(UserWarning, match=r"^Some donated buffers were not usable: x: f32"):
        aotkit.lower(lambda x: x[:2], X4, donate_argnums=0)


def test_usable_donations_do_not_warn():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        lowered = aotkit.lower(lambda x, y: (x + y, y), X4, X4, donate_argnums=(0, 1))
    assert lowered.donated == (True, True)


# --- 7. signatures name leaves by path ------------------------------------------------------------


def _layer(params, x, *, scale):
    return {"y": params["w"] @ x * scale}


LAYER_ARGS = ({"w": np.ones((4, 3), np.float32)}, np.ones(3, np.float32))


def test_lowered_repr_names_leaves_by_path():
    lowered = aotkit.lower(_layer, *LAYER_ARGS, scale=2.0)
    assert repr(lowered) == (
        "<Lowered _layer(params['w']: f32[4,3], x: f32[3], scale: f32[]) -> (out['y']: f32[4])>"
    )
    assert repr(aotkit.jit(_layer).trace(*LAYER_ARGS, scale=2.0)) == (
        "<Traced _layer(params['w']: f32[4,3], x: f32[3], scale: f32[]) -> "
        "(out['y']: f32[4]) from aotkit>"
    )


def test_format_signature_takes_parameter_names():
    lowered = aotkit.lower(_layer, *LAYER_ARGS, scale=2.0)
    assert arguments.format_signature(lowered, ["p", "v"]) == (
        "_layer(p['w']: f32[4,3], v: f32[3], scale: f32[]) -> (out['y']: f32[4])"
    )


def test_a_pytree_mismatch_shows_the_compiled_signature():
    compiled = aotkit.lower(_layer, *LAYER_ARGS, scale=2.0).compile()
    with pytest.raises(TypeError) as e:
        compiled(LAYER_ARGS[0], scale=2.0)
    assert str(e.value).endswith(
        "; call it with the structure it was compiled for: _layer(params['w']: f32[4,3], "
        "x: f32[3], scale: f32[]) -> (out['y']: f32[4])"
    )


def test_jax_pytree_utilities_do_not_choose_jax():
    def tree_sum(tree):
        return sum(tree_util.tree_leaves(tree_util.tree_map(np.sin, tree)))

    assert aotkit.lower(tree_sum, {"a": X4, "b": X4}).frontend == "aotkit"


# --- 8. arguments named by the function's parameters (issue 43) ------------------------------


def _affine(x, w, *rest, bias):
    return x @ w + bias


def test_stages_name_arguments_by_their_parameters():
    x, w, b = np.ones((2, 3), np.float32), np.ones((3, 4), np.float32), np.ones(4, np.float32)
    lowered = aotkit.jit(_affine).lower(x, w, bias=b)
    assert repr(lowered) == (
        "<Lowered _affine(x: f32[2,3], w: f32[3,4], bias: f32[4]) -> (out: f32[2,4])>"
    )
    # Positions past the named parameters (into *rest) keep args[i].
    lowered = aotkit.jit(_affine).lower(x, w, np.float32(1), bias=b)
    assert "_affine(x: f32[2,3], w: f32[3,4], args[2]: f32[], bias: f32[4])" in repr(lowered)
    # A keyword call names the keyword as JAX does: no args[0] next to y.
    lowered = aotkit.jit(lambda x, y: x + y).lower(X4, y=X4)
    assert repr(lowered) == "<Lowered lambda(x: f32[4], y: f32[4]) -> (out: f32[4])>"
    compiled = lowered.compile()
    assert repr(compiled) == "<Compiled lambda(x: f32[4], y: f32[4]) -> (out: f32[4]) on cpu>"
    got = compiled(X4, y=X4)
    assert got.dtype == np.float32
    np.testing.assert_array_equal(got, X4 + X4)


def test_errors_name_arguments_by_their_parameters():
    compiled = aotkit.jit(lambda x, y: x + y).lower(X4, X4).compile()
    with pytest.raises(
        TypeError, match=r"^Compiled 'lambda': argument y expected f32\[4\], got f32"
    ):
        compiled(X4, np.ones(5, np.float32))
    with pytest.raises(TypeError, match=r"first difference at y: expected an array, got a list"):
        compiled(X4, [X4])
    with pytest.raises(TypeError, match=r"^f: argument y of type object is not an array"):

        def f(x, y):
            return x

        aotkit.lower(f, X4, object())
    with pytest.raises(TypeError, match=r"static argument shape = \[2\] is not hashable"):
        aotkit.jit(lambda x, shape: x, static_argnums=1)(X4, [2])


def test_a_loaded_artifact_keeps_the_names(tmp_path):
    compiled = aotkit.jit(lambda x, y: x * y).lower(X4, X4).compile()
    path = tmp_path / "mul.aotx"
    compiled.save(path)
    loaded = aotkit.load(path)
    assert repr(loaded) == repr(compiled)
    for bad in ((X4, np.ones(3, np.float32)),):
        with pytest.raises(TypeError) as want:
            compiled(*bad)
        with pytest.raises(TypeError) as got:
            loaded(*bad)
        assert str(got.value) == str(want.value)
        assert "argument y expected f32[4], got f32[3]" in str(got.value)
    np.testing.assert_array_equal(loaded(X4, X4), X4 * X4)


@pytest.mark.parametrize("names", [["x"], ["x", "y z"], "xy", [None, 3]])
def test_an_artifact_with_bad_argument_names_is_refused(names):
    from aotkit import artifacts

    data = aotkit.jit(lambda x, y: x * y).lower(X4, X4).compile().serialize()
    art = artifacts.unpack(data)
    header = {k: v for k, v in art.header.items() if k != "sections"}
    assert header["arg_names"] == ["x", "y"]
    header["arg_names"] = names
    rewritten = artifacts.pack(header, {n: bytes(v) for n, v in art.sections.items()})
    with pytest.raises(
        aotkit.ArtifactError,
        match=r"^aotkit.load: <bytes>: header field 'arg_names' is .*, not a list of 2 parameter "
        r"names \(identifiers or null\); ",
    ):
        aotkit.load(rewritten)
