"""Build environment of fusedbench: pins, toolchain record, builds.

Nothing here imports ``ops``: the op package sits above this one and reads the
toolchain record to explain a failed load.
"""
