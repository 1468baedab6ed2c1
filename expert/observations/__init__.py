"""Observations: validating and normalising facts (units, percentages, aliases), and observation files."""
