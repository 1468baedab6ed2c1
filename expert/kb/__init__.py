"""The knowledge base: fact vocabulary, units, hardware and interconnect catalogs, optimizations, regimes, tools."""
