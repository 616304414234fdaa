"""``$MURMUR_HOME``: where everything a run keeps lives (docs/runtime-files.md).

``paths`` (the home and its folders), ``records`` (records directories, running records,
formation directories and retention) and ``trace`` (trace files: writing and reading).
"""
