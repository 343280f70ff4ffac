"""Scripts that print measured numbers (not tests), one per question, run from the repository root as
`python -m benchmarks.<name>`; what they share is in benchmarks/lib/. benchmarks/README.md has the current table of
each question, with the command, machine, date and commit that made it.
"""
