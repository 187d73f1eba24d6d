"""Every report in one history: an embedded DuckDB store, a regression view over commits and machines, a static site.

``invoke bench.history`` ingests the report CSVs under ``reports/`` (and any
``--from`` folders) into ``build/history.duckdb``, judges each report against
the previous one of the same machine and run options, looks for level shifts
in each row's medians, and optionally writes Parquet (``--export-parquet``)
and a static dashboard (``--site``). The modules, in the order data flows:

  sources.py      the one adapter onto the rest of bench/ (row key, samples type, the interval statistics)
  reader.py       finding report files, reading one with its samples, its content hash
  migrate.py      every report schema version brought to the store's columns (one function)
  labels.py       machine names the reports' columns cannot tell apart
  store.py        the DuckDB tables and the incremental ingest
  regressions.py  each report against the previous one of its machine and run options
  changepoints.py level shifts over each row's series of medians (binary segmentation)
  export.py       Parquet, partitioned by machine
  site/           the static dashboard
  cli.py          what the invoke task runs
  synthetic.py    synthetic histories for the tests and the scale benchmark
"""
