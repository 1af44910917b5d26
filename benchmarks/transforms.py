"""Transforms: aotkit's grad against JAX's on the same programs, in one run.

    python benchmarks/transforms.py [--repeat 7] [--calls 200]

1. Trace + transform + lower: `aotkit.jit(aotkit.grad(loss)).lower(*args)` against
   `jax.jit(jax.grad(loss)).lower(*args)`, for the 5,000-op elementwise chain and the
   32-layer MLP of benchmarks/lowering.py (a fresh Python function each round, so no cache
   helps either side; aotkit's and JAX's rounds interleaved). Best of the rounds.
2. The compiled gradient: the MLP's, and a 500-op chain's (XLA takes minutes to compile the
   5,000-op chain's gradient, JAX's and aotkit's alike), run on device arrays, best and
   median of `--calls` calls (after a warm-up), aotkit / JAX.
3. Memory of reverse mode through a 1,000-step loop (`fori_loop` whose body is a small MLP
   layer on a 256-wide state): XLA's temp allocation of the compiled gradient, with what
   each iteration's backward step reads stored (aotkit's default, as JAX), with
   `checkpoint_loops="sqrt"` (about 2 sqrt(n) carries stored, the body recomputed), and
   JAX's.
4. Reverse mode through JAX programs with loops, `aotkit.jit(loss, frontend="jax")
   .lower(*args).grad()` against `jax.jit(jax.grad(loss))`, both compiled, best and median
   of `--loop-calls` interleaved calls on device arrays (gradients checked equal first): a
   64-step tanh RNN written with `lax.scan` (hidden 64, batch 16), a Flax LSTM and GRU
   (`nn.RNN`, the same sizes), an Equinox GRUCell under `lax.scan`, and the gradient of a
   small GELU + LayerNorm MLP exported with `jax.export` and loaded with
   `aotkit.load_module`. A program whose library is not installed is skipped, saying so.
   Then XLA's temp memory of each loop program's gradient: aotkit's default, with
   `checkpoint_loops="sqrt"`, and JAX's.
"""

from __future__ import annotations

import argparse
import statistics
import time

import jax
import jax.numpy as jnp
import numpy as np

import aotkit
import aotkit.numpy as anp

CHAIN_OPS = 5000
MLP_LAYERS = 32
MLP_WIDTH = 256
LOOP_STEPS = 1000
LOOP_WIDTH = 256
RNN_STEPS = 64
RNN_HIDDEN = 64
RNN_BATCH = 16


def make_chain(xp, ops: int = CHAIN_OPS):
    def loss(x, y):
        z = x
        for i in range(ops):
            k = i % 4
            if k == 0:
                z = xp.sin(z)
            elif k == 1:
                z = z * y
            elif k == 2:
                z = z + x
            else:
                z = xp.tanh(z)
        return xp.sum(z)

    return loss


def make_mlp(xp):
    def loss(params, x):
        for w, b in params:
            x = xp.maximum(x @ w + b, 0.0)
        return xp.sum(x * x)

    return loss


def make_loop(xp, fori_loop):
    def loss(w, x):
        def body(i, h):
            return xp.tanh(h @ w) * 0.9 + h * 0.1

        return xp.sum(fori_loop(0, LOOP_STEPS, body, x))

    return loss


def programs(chain_ops: int = CHAIN_OPS):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((8, 128)).astype(np.float32)
    y = rng.standard_normal((8, 128)).astype(np.float32)
    params = [
        (
            (rng.standard_normal((MLP_WIDTH, MLP_WIDTH)) / np.sqrt(MLP_WIDTH)).astype(np.float32),
            np.zeros(MLP_WIDTH, np.float32),
        )
        for _ in range(MLP_LAYERS)
    ]
    xm = rng.standard_normal((16, MLP_WIDTH)).astype(np.float32)
    return {
        f"chain ({chain_ops} ops)": (lambda xp: make_chain(xp, chain_ops), (x, y)),
        f"MLP ({MLP_LAYERS} layers)": (make_mlp, (params, xm)),
    }


def lowering_times(rounds: int) -> list[tuple]:
    rows = []
    for name, (make, args) in programs().items():
        best = {"aotkit": float("inf"), "jax": float("inf")}
        for _ in range(rounds):
            for side in ("aotkit", "jax"):
                t0 = time.perf_counter()
                if side == "aotkit":
                    # autograph=False: the chain stays 5,000 unrolled ops, as under jax.jit.
                    aotkit.jit(aotkit.grad(make(anp)), autograph=False).lower(*args)
                else:
                    jax.jit(jax.grad(make(jnp))).lower(*args)
                best[side] = min(best[side], time.perf_counter() - t0)
        rows.append((name, best["aotkit"], best["jax"]))
    return rows


def step_times(calls: int) -> list[tuple]:
    rows = []
    for name, (make, args) in programs(chain_ops=500).items():
        dev = jax.device_put(args)
        ours = aotkit.jit(aotkit.grad(make(anp)), autograph=False).lower(*args).compile()
        theirs = jax.jit(jax.grad(make(jnp))).lower(*args).compile()
        for fn in (ours, theirs):
            jax.block_until_ready(fn(*dev))
        rows.append((name, *interleaved(ours, theirs, dev, calls)))
    return rows


def interleaved(ours, theirs, args, calls: int) -> tuple[float, float, float, float]:
    """(aotkit's best, median, jax's best, median) seconds over `calls` rounds of one call
    each on `args`, interleaved."""
    samples = {"aotkit": [], "jax": []}
    for _ in range(calls):
        for side, fn in (("aotkit", ours), ("jax", theirs)):
            t0 = time.perf_counter()
            jax.block_until_ready(fn(*args))
            samples[side].append(time.perf_counter() - t0)
    a, j = samples["aotkit"], samples["jax"]
    return min(a), statistics.median(a), min(j), statistics.median(j)


def loop_memory() -> list[tuple]:
    rng = np.random.default_rng(1)
    w = (rng.standard_normal((LOOP_WIDTH, LOOP_WIDTH)) / np.sqrt(LOOP_WIDTH)).astype(np.float32)
    x = rng.standard_normal((4, LOOP_WIDTH)).astype(np.float32)
    loss = make_loop(anp, aotkit.fori_loop)
    rows = []
    for label, policy in (
        ("aotkit, residuals (default)", None),
        ("aotkit, sqrt checkpoints", "sqrt"),
    ):
        compiled = aotkit.jit(aotkit.grad(loss, checkpoint_loops=policy)).lower(w, x).compile()
        got = np.asarray(compiled(w, x))
        rows.append((label, compiled.memory_analysis().temp_size_in_bytes, got))
    theirs = jax.jit(jax.grad(make_loop(jnp, jax.lax.fori_loop))).lower(w, x).compile()
    want = np.asarray(theirs(w, x))
    rows.append(("jax", theirs.memory_analysis().temp_size_in_bytes, want))
    for label, _, got in rows:
        np.testing.assert_allclose(got, want, rtol=2e-3, atol=1e-4, err_msg=label)
    return [(label, size) for label, size, _ in rows]


# --- part 4: reverse mode through JAX programs with loops -----------------------------------------


def _rnn():
    rng = np.random.default_rng(2)
    h, b = RNN_HIDDEN, RNN_BATCH
    params = {
        "wx": (rng.standard_normal((h, h)) / np.sqrt(h)).astype(np.float32),
        "wh": (rng.standard_normal((h, h)) / np.sqrt(h)).astype(np.float32),
        "b": np.zeros(h, np.float32),
    }
    xs = rng.standard_normal((RNN_STEPS, b, h)).astype(np.float32)

    def loss(p, xs):
        def step(state, x):
            state = jnp.tanh(x @ p["wx"] + state @ p["wh"] + p["b"])
            return state, state

        _, states = jax.lax.scan(step, jnp.zeros((b, h), xs.dtype), xs)
        return jnp.mean(states * states)

    return loss, (params, xs)


def _flax(cell: str):
    def make():
        import flax.linen as nn

        model = nn.RNN(getattr(nn, cell)(features=RNN_HIDDEN))
        xs = np.random.default_rng(3).standard_normal((RNN_BATCH, RNN_STEPS, RNN_HIDDEN))
        xs = xs.astype(np.float32)
        params = model.init(jax.random.key(0), xs)

        def loss(p, xs):
            return jnp.mean(model.apply(p, xs) ** 2)

        return loss, (params, xs)

    return make


def _equinox_gru():
    import equinox as eqx

    cell = eqx.nn.GRUCell(RNN_HIDDEN, RNN_HIDDEN, key=jax.random.key(4))
    params, static = eqx.partition(cell, eqx.is_array)
    xs = np.random.default_rng(5).standard_normal((RNN_STEPS, RNN_BATCH, RNN_HIDDEN))
    xs = xs.astype(np.float32)

    def loss(p, xs):
        gru = jax.vmap(eqx.combine(p, static))  # the cell is per example: the batch mapped

        def step(state, x):
            state = gru(x, state)
            return state, state

        _, states = jax.lax.scan(step, jnp.zeros((RNN_BATCH, RNN_HIDDEN), xs.dtype), xs)
        return jnp.mean(states * states)

    return loss, (params, xs)


def _mlp_loss(params, x):
    for w, b, g in params:
        x = jax.nn.gelu(x @ w + b)
        mean = jnp.mean(x, -1, keepdims=True)
        var = jnp.mean((x - mean) ** 2, -1, keepdims=True)
        x = (x - mean) * jax.lax.rsqrt(var + 1e-5) * g
    return jnp.mean(x * x)


def _exported_mlp():
    rng = np.random.default_rng(6)
    params = [
        (
            (rng.standard_normal((128, 128)) / np.sqrt(128)).astype(np.float32),
            np.zeros(128, np.float32),
            np.ones(128, np.float32),
        )
        for _ in range(3)
    ]
    x = rng.standard_normal((32, 128)).astype(np.float32)
    return _mlp_loss, (params, x)


LOOP_PROGRAMS = {
    f"tanh RNN, lax.scan ({RNN_STEPS})": (_rnn, None),
    "Flax LSTM (nn.RNN)": (_flax("LSTMCell"), "flax"),
    "Flax GRU (nn.RNN)": (_flax("GRUCell"), "flax"),
    "Equinox GRU + lax.scan": (_equinox_gru, "equinox"),
    "GELU+LayerNorm MLP, export": (_exported_mlp, None),
}


def _missing(module: str | None) -> str | None:
    if module is None:
        return None
    try:
        __import__(module)
    except ImportError as e:
        return f"{module} is not installed ({e})"
    return None


def loop_grad_times(calls: int) -> list[tuple]:
    rows = []
    for name, (make, needs) in LOOP_PROGRAMS.items():
        reason = _missing(needs)
        if reason is not None:
            rows.append((name, reason))
            continue
        loss, args = make()
        if "export" in name:
            exported = jax.export.export(jax.jit(loss))(*args)
            ours = aotkit.load_module(exported.serialize()).grad().compile()
        else:
            ours = aotkit.jit(loss, frontend="jax").lower(*args).grad().compile()
        theirs = jax.jit(jax.grad(loss)).lower(*args).compile()
        dev = jax.device_put(args)
        got, want = ours(*dev), theirs(*dev)
        for g, w in zip(jax.tree.leaves(got), jax.tree.leaves(want), strict=True):
            np.testing.assert_allclose(np.asarray(g), np.asarray(w), rtol=1e-4, atol=1e-6)
        rows.append((name, interleaved(ours, theirs, dev, calls)))
    return rows


def loop_grad_memory() -> list[tuple]:
    """XLA's temp memory of each loop program's compiled gradient: aotkit's default (the
    residuals JAX stores), with `checkpoint_loops="sqrt"`, and JAX's."""
    rows = []
    for name, (make, needs) in LOOP_PROGRAMS.items():
        if "export" in name:
            continue
        reason = _missing(needs)
        if reason is not None:
            rows.append((name, reason))
            continue
        loss, args = make()
        lowered = aotkit.jit(loss, frontend="jax").lower(*args)
        sizes = [
            lowered.grad(checkpoint_loops=policy).compile().memory_analysis().temp_size_in_bytes
            for policy in (None, "sqrt")
        ]
        theirs = jax.jit(jax.grad(loss)).lower(*args).compile()
        rows.append((name, (*sizes, theirs.memory_analysis().temp_size_in_bytes)))
    return rows


def other_parts(a) -> None:
    print(f"Trace + grad + lower (best of {a.repeat}), ms")
    print(f"{'program':<22}{'aotkit':>10}{'jax':>10}{'jax/aotkit':>12}")
    for name, ours, theirs in lowering_times(a.repeat):
        print(f"{name:<22}{ours * 1e3:>10.1f}{theirs * 1e3:>10.1f}{theirs / ours:>11.1f}x")
    print()
    print(f"Compiled gradient, one call on device arrays ({a.calls} calls), us")
    header = f"{'program':<22}{'aotkit best':>12}{'median':>9}{'jax best':>10}{'median':>9}"
    print(header + f"{'best ratio':>12}{'median ratio':>14}")
    for name, ob, om, jb, jm in step_times(a.calls):
        print(
            f"{name:<22}{ob * 1e6:>12.0f}{om * 1e6:>9.0f}{jb * 1e6:>10.0f}{jm * 1e6:>9.0f}"
            f"{ob / jb:>11.2f}x{om / jm:>13.2f}x"
        )
    print()
    print(f"Reverse mode through a {LOOP_STEPS}-step loop: XLA temp memory of the gradient")
    for label, size in loop_memory():
        print(f"  {label:<30}{size / 2**20:>8.2f} MiB")
    print()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--loop-calls", type=int, default=100)
    parser.add_argument(
        "--only-loops", action="store_true", help="run part 4 only (reverse mode through loops)"
    )
    a = parser.parse_args()
    if not a.only_loops:
        other_parts(a)
    print(f"Compiled gradient of JAX programs with loops ({a.loop_calls} calls), us")
    header = f"{'program':<26}{'aotkit best':>12}{'median':>9}{'jax best':>10}{'median':>9}"
    print(header + f"{'best ratio':>12}{'median ratio':>14}")
    for name, row in loop_grad_times(a.loop_calls):
        if isinstance(row, str):
            print(f"{name:<26}skipped: {row}")
            continue
        ob, om, jb, jm = row
        print(
            f"{name:<26}{ob * 1e6:>12.0f}{om * 1e6:>9.0f}{jb * 1e6:>10.0f}{jm * 1e6:>9.0f}"
            f"{ob / jb:>11.2f}x{om / jm:>13.2f}x"
        )
    print()
    print("XLA temp memory of the same gradients, MiB")
    print(f"{'program':<26}{'aotkit':>9}{'sqrt ckpt':>11}{'jax':>9}")
    for name, row in loop_grad_memory():
        if isinstance(row, str):
            print(f"{name:<26}skipped: {row}")
            continue
        print(f"{name:<26}" + "".join(f"{v / 2**20:>{w}.2f}" for v, w in zip(row, (9, 11, 9))))


if __name__ == "__main__":
    main()
