"""The rule language: its schema, condition-tree logic, evaluation, the loaded rule set, lint, rule tests, docs."""
