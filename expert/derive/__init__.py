"""Derived quantities with provenance: `formulas` (the arithmetic: intensity, MFU, bandwidth use, the iron law, C³
terms), `registry` (every derivation with its inputs and its gate declared as a rule condition) and `graph` (the one
walker: applying them, and what feeds what)."""
