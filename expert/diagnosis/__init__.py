"""From an engine run to a verdict and a Report: the decision, conclusions, what to measure, provenance."""
