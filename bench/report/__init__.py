"""The report: its schema, the per-row metrics, the targets, the printed summary and the plot."""
