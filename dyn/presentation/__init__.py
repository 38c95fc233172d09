"""What users see: the `dyn` command, plots, summaries and comparisons of sweep files.

cli          the `dyn` command line (`python -m dyn`)
analysis     `dyn.open`, `dyn show`, and the marks of points whose numbers are not answers yet
plot, marks  `dyn plot`
comparison   `dyn.compare`, `dyn compare`
tokens       `dyn plot --tokens`, `dyn animate`: the saved states of one run
"""
