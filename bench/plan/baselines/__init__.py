"""One module per baseline; each registers itself with ``@bench.plan.registry.register``."""
