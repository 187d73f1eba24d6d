"""One module per baseline; each registers itself with ``@bench.registry.register``."""
