"""Derived quantities: formulas over observed facts (intensity, MFU, bandwidth use, C³ terms), with provenance."""
