"""The guided consultation: `session` (the Consultation and its records), `planner` (what could still change the
answer, what to ask next), `witness` (values that would make a rule fire), `questions` (the wording), `tools` (the
tools question), `combined` (questions that ask for several facts at once)."""
