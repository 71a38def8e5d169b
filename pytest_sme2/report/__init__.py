"""report: Verdicts + Profiles → what people read.

One module per audience: ``terminal`` (the end-of-session table), ``html`` + ``charts``
(pytest-html extras), ``markdown`` (report.md for a pull request), ``artifacts`` (the reference
workflow's CSV/JSON files, so its users find what they look for), ``chrome_trace`` (Perfetto),
``rundir`` (the same reports from ETDumps made anywhere: ``sme2 report`` / ``sme2 compare``) and
``hooks`` (the pytest glue). Nothing here measures or judges; it only presents.
"""
