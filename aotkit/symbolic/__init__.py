"""Symbolic shapes: one program for every size of a dimension (`f32[b,784]`).

- `algebra`: the dimension algebra, `Dim` expressions over named symbols, and the
  `SymbolicScope` of constraints that decides comparisons between them (a value layer: it
  builds no IR);
- `prover`: a dynamic StableHLO module's dimensions proven over the symbols, for backends
  that compile one executable for every shape;
- `signatures`: specs with symbolic dimensions and the values a call's arguments give the
  symbols;
- `specialize`: symbolic programs compiled per shape, and `Lowered.specialize`.

The tracer emits a symbolic trace's dynamic ops in aotkit/tracing/symbolic.py; this package
imports nothing from the tracer. Its modules sit at different layers (tests/test_layers.py):
importing this package itself imports nothing.
"""
