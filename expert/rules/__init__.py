"""The rule language: its schema (model), condition-tree logic (logic: the one owner of traversal, three-valued logic,
operators, normal forms and constraint boxes), evaluation, the loaded rule set, reference checks shared by the loader
and lint, what a rule concludes in words, lint, rule tests, docs."""
