"""The studies whose records the README and the docs quote: one folder per study (script, JSON record, report),
:mod:`benchmarks.records` shared by them, closed studies in ``archive/``; ``README.md`` indexes them. Run a study
from the repository root: ``python -m benchmarks.<study>.<study>``."""
