"""`aotkit.check` and `aotkit check`: one program on every backend, compared with cpu.

A fake backend (cpu with a perturbation) stands for a backend that computes something else,
so that disagreement, refusal and failure are tested whatever is installed.
"""

from __future__ import annotations

import textwrap

import numpy as np
import pytest

import aotkit
import aotkit.numpy as anp
from aotkit import backends, cli
from aotkit.backends.base import Backend, Executable
from aotkit.crosscheck import _max_ulp, check, check_lowered, random_input, tolerance
from aotkit.errors import CompileError
from tests.helpers import BACKENDS


class _Perturbed(Executable):
    def __init__(self, backend, inner, change):
        self.backend, self._inner, self._change = backend, inner, change
        self.name, self.in_specs, self.out_specs = inner.name, inner.in_specs, inner.out_specs
        self.seen = []

    def execute(self, leaves):
        self.backend.seen.append([np.array(x) for x in leaves])
        return [self._change(np.asarray(x)) for x in self._inner.execute(leaves)]

    def as_text(self):
        return self._inner.as_text()

    def runtime_executable(self):
        return None


class FakeBackend(Backend):
    """cpu, with every output passed through `change` (or failing as asked)."""

    platform = "fake"

    def __init__(self, name, change=lambda x: x, *, refuse=False, fail=False):
        self.name, self._change, self._refuse, self._fail = name, change, refuse, fail
        self.seen = []

    def devices(self):
        return ["fake:0"]

    def compile(self, module, options=None):
        if self._refuse:
            raise CompileError(f"backend {self.name!r} rejected module 'f': no such op")
        exe = _Perturbed(self, backends.get("cpu").compile(module, options), self._change)
        if self._fail:

            def execute(leaves):
                raise RuntimeError(f"backend {self.name!r}: device lost")

            exe.execute = execute
        return exe


@pytest.fixture
def register(monkeypatch):
    monkeypatch.setattr(backends, "_started", dict(backends._started))

    def add(backend):
        backends._started[backend.name] = backend
        return backend

    return add


def f(x, y):
    return {"sum": x * y + anp.sin(x), "count": (x > 0).sum()}


SPECS = (aotkit.spec("f32[3,4]"), aotkit.spec("f32[4]"))


def test_agreeing_backends_are_ok():
    report = check(f, *SPECS)
    assert report.ok and report.disagreeing == []
    names = [row.backend for row in report.rows]
    assert names[:2] == ["cpu", "cpu"]
    assert {"interpreter"} <= set(names)
    available = {info.name for info in backends.available()}
    assert set(names) == available
    by_output = {(row.backend, row.output): row for row in report.rows}
    assert by_output[("cpu", "out['sum']")].note == "reference"
    assert by_output[("interpreter", "out['count']")].max_abs == 0
    assert by_output[("interpreter", "out['sum']")].spec == "f32[3,4]"


@pytest.mark.parametrize("backend", BACKENDS)
def test_each_backend_agrees_on_a_small_program(backend):
    report = check(f, *SPECS, backends=[backend])
    assert report.ok, report.table()
    assert {row.backend for row in report.rows} == {"cpu", backend}


def test_table_lists_every_backend_and_output(register):
    register(FakeBackend("same"))
    text = check(f, *SPECS, backends=["cpu", "same"]).table()
    lines = text.splitlines()
    assert lines[0] == "f(f32[3,4], f32[4]), seed 0, reference cpu"
    assert lines[1].split() == ["BACKEND", "OUTPUT", "SPEC", "MAX", "ABS", "DIFF", "MAX", "ULP"] + [
        "DIFF",
        "RESULT",
    ]
    assert lines[2].split() == ["cpu", "out['count']", "i64[]", "-", "-", "reference"]
    assert lines[5].split() == ["same", "out['sum']", "f32[3,4]", "0", "0", "ok"]


def test_a_backend_beyond_tolerance_disagrees(register):
    register(FakeBackend("wrong", lambda x: x + 1e-3 if x.dtype.kind == "f" else x))
    report = check(f, *SPECS, backends=["wrong"])
    assert not report.ok
    assert report.disagreeing == ["wrong"]
    rows = {row.output: row for row in report.rows if row.backend == "wrong"}
    assert not rows["out['sum']"].ok and rows["out['sum']"].max_abs == pytest.approx(1e-3, rel=1e-2)
    assert rows["out['sum']"].max_ulp > 1000
    assert rows["out['count']"].ok
    assert "DIFFERS" in report.table().splitlines()[-1]


def test_tolerance_can_be_widened(register):
    register(FakeBackend("close", lambda x: x + 1e-3 if x.dtype.kind == "f" else x))
    assert check(f, *SPECS, backends=["close"], atol=1e-2).ok


def test_a_different_dtype_disagrees(register):
    register(FakeBackend("wide", lambda x: x.astype(np.float64) if x.dtype.kind == "f" else x))
    report = check(f, *SPECS, backends=["wide"])
    (row,) = [r for r in report.rows if r.backend == "wide" and r.output == "out['sum']"]
    assert not row.ok and row.note == "DIFFERS: f64[3,4] instead of f32[3,4]"


def test_nan_where_cpu_has_a_number_disagrees(register):
    register(FakeBackend("nan", lambda x: np.full_like(x, np.nan) if x.dtype.kind == "f" else x))
    report = check(f, *SPECS, backends=["nan"])
    (row,) = [r for r in report.rows if r.backend == "nan" and r.output == "out['sum']"]
    assert not row.ok and row.max_abs == np.inf and row.max_ulp == np.inf


def test_refusing_or_failing_backends_are_reported_not_counted(register):
    register(FakeBackend("picky", refuse=True))
    register(FakeBackend("broken", fail=True))
    report = check(f, *SPECS, backends=["picky", "broken", "cuda"])
    assert report.ok
    notes = {row.backend: row.note for row in report.rows if row.backend != "cpu"}
    assert notes["picky"] == "not compiled: backend 'picky' rejected module 'f': no such op"
    assert notes["broken"] == "failed to run: backend 'broken': device lost"
    assert notes["cuda"].startswith("not available: backends.get: backend 'cuda' is not installed")


def test_an_unknown_backend_name_is_an_error_not_a_row(capsys, tmp_path):
    unknown = r"check\(f\): unknown backend\(s\) 'nosuch'; known here: cpu, "
    with pytest.raises(ValueError, match=unknown):
        check(f, *SPECS, backends=["cpu", "nosuch"])
    user = tmp_path / "m.py"
    user.write_text("def h(x):\n    return x + 1\n")
    assert cli.main(["check", f"{user}:h", "--shapes", "f32[]", "--backends", "nosuch"]) == 1
    assert "aotkit check: error: " in capsys.readouterr().err


def test_values_are_used_and_specs_get_seeded_data(register):
    fake = register(FakeBackend("spy"))
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    check(f, x, SPECS[1], backends=["spy"], seed=7)
    (seen,) = fake.seen
    np.testing.assert_array_equal(seen[0], x)
    want = random_input(np.random.default_rng(7), SPECS[1])  # the generator's first draw
    np.testing.assert_array_equal(seen[1], want)


@pytest.mark.parametrize("dtype", ["bool", "i8", "u16", "i64", "f16", "bf16", "f64", "c64"])
def test_random_inputs_have_the_spec(dtype):
    spec = aotkit.spec(f"{dtype}[5,2]")
    a = random_input(np.random.default_rng(3), spec)
    b = random_input(np.random.default_rng(3), spec)
    assert a.dtype == spec.dtype and a.shape == spec.shape
    np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize(
    ("want", "got", "ulps"),
    [
        (np.float32([1.0]), np.float32([np.nextafter(np.float32(1), np.float32(2))]), 1),
        (np.float32([-0.0]), np.float32([0.0]), 0),
        (np.float32([-1e-45]), np.float32([1e-45]), 2),
        (np.float64([1.0]), np.float64([1.0 + 2**-50]), 4),
        (np.float16([1.0]), np.float16([1.5]), 512),
    ],
    ids=["f32 next", "signed zeros", "across zero", "f64 4 ulp", "f16 half"],
)
def test_ulp_distance(want, got, ulps):
    assert _max_ulp(want, got) == ulps


BAD = [
    ({"rtol": -1.0}, ValueError, r"^check\(f\): rtol must be a number >= 0, got -1.0$"),
    ({"atol": "x"}, ValueError, r"^check\(f\): atol must be a number >= 0, got 'x'$"),
    ({"backends": "cpu"}, TypeError, r"^check\(f\): backends must be a list of backend names"),
]


@pytest.mark.parametrize(("kwargs", "kind", "message"), BAD, ids=str)
def test_bad_arguments(kwargs, kind, message):
    with pytest.raises(kind, match=message):
        check(f, *SPECS, **kwargs)


def test_wrong_number_of_leaves():
    lowered = aotkit.lower(f, *SPECS)
    with pytest.raises(
        ValueError,
        match=r"^check\(f\): 1 argument\(s\) for 2 argument slot\(s\) \(f32\[3,4\], f32\[4\]\); "
        r"give one value or spec per argument$",
    ):
        check_lowered(lowered, [np.zeros((3, 4), np.float32)])


def test_reference_that_cannot_compile_raises(register):
    register(FakeBackend("picky", refuse=True))
    with pytest.raises(CompileError, match="backend 'picky' rejected module 'f'"):
        check(f, *SPECS, reference="picky", backends=["cpu"])


# -- the CLI -------------------------------------------------------------------------------------


@pytest.fixture
def user(tmp_path):
    path = tmp_path / "prog.py"
    path.write_text(
        textwrap.dedent(
            """
            import aotkit.numpy as anp

            def f(x, y):
                return x * y + anp.sin(x)
            """
        )
    )
    return path


def test_cli_check_prints_the_table(user, capsys):
    code = cli.main(["check", f"{user}:f", "--shapes", "f32[3,4]", "f32[4]", "--seed", "2"])
    out = capsys.readouterr().out
    assert code == 0
    assert out == check(_load(user), *SPECS, seed=2).table()


def test_cli_check_exits_1_on_disagreement(user, capsys, register):
    register(FakeBackend("wrong", lambda x: x * 2))
    argv = ["check", f"{user}:f", "--shapes", "f32[3,4]", "f32[4]", "--backends", "wrong"]
    assert cli.main(argv) == 1
    captured = capsys.readouterr()
    assert "DIFFERS" in captured.out
    assert captured.err.endswith("aotkit check: wrong disagree with cpu beyond tolerance\n")


def test_cli_check_uses_given_inputs(user, tmp_path, capsys, register):
    fake = register(FakeBackend("spy"))
    x, y = np.ones((3, 4), np.float32), np.arange(4, dtype=np.float32)
    np.save(tmp_path / "x.npy", x)
    np.save(tmp_path / "y.npy", y)
    argv = ["check", f"{user}:f", "--inputs", str(tmp_path / "x.npy"), str(tmp_path / "y.npy")]
    assert cli.main([*argv, "--backends", "spy"]) == 0
    np.testing.assert_array_equal(fake.seen[0][1], y)


def test_cli_check_refuses_inputs_of_the_wrong_spec(user, tmp_path, capsys):
    np.save(tmp_path / "x.npy", np.ones((3, 4), np.float32))
    np.save(tmp_path / "y.npy", np.ones((5,), np.float32))
    argv = ["check", f"{user}:f", "--shapes", "f32[3,4]", "f32[4]", "--inputs"]
    assert cli.main([*argv, str(tmp_path / "x.npy"), str(tmp_path / "y.npy")]) == 1
    assert "holds f32[5] but argument y is f32[4]" in capsys.readouterr().err


def _load(path):
    import importlib.util

    spec = importlib.util.spec_from_file_location("prog_for_check", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.f


# --- accelerators: tolerances per platform and dtype (issue 42.5) --------------------------------


def small_tanh(x):
    # Results below 0.01: an error of 4.2e-6 (what a TPU's float32 tanh was measured at) is
    # far beyond cpu's float32 tolerance (1e-6 + 2e-5 * |x|), within a TPU's. Each test
    # checks a function of its own: the jit caches know a backend by its name.
    return anp.tanh(x) * 0.01 + anp.exp(-x * x) * 0.001


def tanh_again(x):
    return anp.tanh(x) * 0.01 + anp.exp(-x * x) * 0.001


def _tpu_like(register, error: float):
    from tests.standin_backends import Wrong

    return register(Wrong("tpu", "tpu", "PJRT C API\nTFRT TPU v5 lite\nBuilt on ...", error))


@pytest.mark.parametrize(
    ("dtype", "platforms", "expected"),
    [
        ("float32", ("cpu", "cpu"), (2e-5, 1e-6)),
        ("float32", ("cpu", "tpu"), (5e-4, 1e-4)),
        ("float32", ("tpu", "cpu"), (5e-4, 1e-4)),
        ("complex64", ("cpu", "tpu"), (5e-4, 1e-4)),
        ("float32", ("cpu", "cuda"), (5e-5, 5e-6)),
        ("float64", ("cpu", "tpu"), (1e-12, 1e-14)),
        ("float16", ("cpu", "tpu"), (2e-3, 1e-3)),
        ("float32", ("cpu", "interpreter"), (2e-5, 1e-6)),
    ],
)
def test_tolerance_per_platform_and_dtype(dtype, platforms, expected):
    assert tolerance(dtype, *platforms) == expected


def test_a_correct_tpu_result_reads_ok(register):
    _tpu_like(register, 4.2e-6)
    report = check(small_tanh, aotkit.spec("f32[64]"), backends=["tpu"])
    assert report.ok, report.table()
    (row,) = [r for r in report.rows if r.backend == "tpu"]
    assert row.max_abs == pytest.approx(4.2e-6, rel=0.05)
    assert row.max_ulp > 100  # many ULP apart, as measured on the chip
    # The same difference on a platform held to cpu's tolerance is a disagreement.
    register(FakeBackend("close", lambda x: x + np.float32(4.2e-6)))
    assert check(small_tanh, aotkit.spec("f32[64]"), backends=["close"]).disagreeing == ["close"]


def test_a_wrong_tpu_result_still_differs(register):
    _tpu_like(register, 1e-3)
    report = check(tanh_again, aotkit.spec("f32[64]"), backends=["tpu"])
    assert report.disagreeing == ["tpu"]
    (row,) = [r for r in report.rows if r.backend == "tpu"]
    assert row.note == "DIFFERS (rtol 0.0005, atol 0.0001)"
    assert report.table().splitlines()[-1].endswith("DIFFERS (rtol 0.0005, atol 0.0001)")


@pytest.fixture
def tanh_user(tmp_path):
    path = tmp_path / "tanh_user.py"
    path.write_text(
        "import aotkit.numpy as anp\n\n"
        "def small_tanh(x):\n"
        "    return anp.tanh(x) * 0.01 + anp.exp(-x * x) * 0.001\n"
    )
    return path


def test_cli_check_on_a_tpu_and_its_overrides(register, tanh_user, capsys):
    _tpu_like(register, 4.2e-6)
    argv = ["check", f"{tanh_user}:small_tanh", "--shapes", "f32[64]", "--backends", "tpu"]
    assert cli.main(argv) == 0
    assert capsys.readouterr().out.splitlines()[-1].split()[-1] == "ok"
    assert cli.main([*argv, "--rtol", "0", "--atol", "1e-6"]) == 1
    captured = capsys.readouterr()
    assert captured.out.splitlines()[-1].endswith("DIFFERS (rtol 0, atol 1e-06)")
    assert captured.err.endswith("aotkit check: tpu disagree with cpu beyond tolerance\n")


def test_cli_check_a_wrong_tpu_differs_unless_widened(register, tanh_user, capsys):
    _tpu_like(register, 1e-3)
    argv = ["check", f"{tanh_user}:small_tanh", "--shapes", "f32[64]", "--backends", "tpu"]
    assert cli.main(argv) == 1
    assert "DIFFERS (rtol 0.0005, atol 0.0001)" in capsys.readouterr().out
    assert cli.main([*argv, "--atol", "1e-2"]) == 0
