"""Derived quantities with provenance: `formulas` (the arithmetic: intensity, MFU, bandwidth use, the iron law, C³
terms), the derivations by topic (`single_gpu`: peaks, roofline, scorecard, iron law; `llm`: LLM training and serving,
host side, memory capacity; `cluster`: C³; `margins`: consistency margins; `derivation`: the record types they share),
`registry` (all of them in the one order they apply, each with its inputs and its gate declared as a rule condition)
and `graph` (the one walker: applying them, and what feeds what)."""
