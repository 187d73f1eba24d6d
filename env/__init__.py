"""Build environment of fusedbench, on two floors.

The ground floor is ``paths``, ``files`` and ``repo``: the only modules ``ops``
may import. Above it sit the tools: ``builder`` (build steps and toolchain),
``lock`` (pins), ``image`` (the container image), ``lint``, ``tiers`` and
``cli`` (the tasks' option parsing). Nothing here imports ``ops`` or ``bench``.
"""
