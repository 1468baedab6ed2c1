"""The guided consultation (`dam consult`): which question to ask next, why, and how answers are read."""
