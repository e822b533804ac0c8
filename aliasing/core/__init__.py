"""The analysis core: facts read from node metadata, the effect of each op, and ``analyze``.

Everything here reads a graph and never changes it; the public names are
re-exported by :mod:`aliasing`.
"""
