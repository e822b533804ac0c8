"""Regions: the bytes a tensor value can touch inside its storage, and overlap tests.

A :class:`Region` is a strided set of elements: element offset ``offset`` plus
``sum(i_k * strides[k])`` for ``0 <= i_k < sizes[k]``, each element covering
``itemsize`` bytes (offset and strides count elements, as tensors report them;
overlap is decided in bytes, so regions of different dtypes compare exactly).
Sizes, strides and the offset may be ``torch.SymInt`` (dynamic shapes).

:func:`regions_may_overlap` answers "can these two regions touch a common
byte?" It is exact for concrete regions (a bounded Diophantine solver with a
work limit; when the limit is hit it answers ``True``) and, for symbolic
regions, proves disjointness where the symbolic expressions allow:

1. an empty region touches nothing;
2. disjoint byte intervals ``[lo, hi)`` (proved with the shape environment's
   ``statically_known_true``);
3. a common outer stride ``S`` under which both regions' remaining dimensions
   fit inside one period: the regions are then "rows" of a 2-d grid, and they
   overlap only if their row ranges *and* their in-row patterns overlap (this
   covers splits, chunks, narrows and slices along any dimension with a dynamic
   outer size, and interleaved strides such as ``x[:, ::2]`` vs ``x[:, 1::2]``).

Anything else answers ``True`` ("may overlap"): unknown is never "no".

Example
-------
>>> q = Region(offset=0, sizes=(4, 8), strides=(24, 1), itemsize=4)
>>> k = Region(offset=8, sizes=(4, 8), strides=(24, 1), itemsize=4)
>>> regions_may_overlap(q, k)
False
"""

from __future__ import annotations

import math
from functools import lru_cache
from typing import NamedTuple

import torch

__all__ = ["Region", "SizeLike", "regions_may_overlap", "static_int"]

SizeLike = int | torch.SymInt

#: Search steps allowed for the exact solver before answering "may overlap".
WORK_LIMIT = 20_000


class Region(NamedTuple):
    """A strided region inside one storage: offset, sizes and strides in **elements**
    of ``itemsize`` bytes (as tensors report them). Overlap is decided in bytes."""

    offset: SizeLike
    sizes: tuple[SizeLike, ...]
    strides: tuple[SizeLike, ...]
    itemsize: int

    @property
    def is_concrete(self) -> bool:
        """True when no field is symbolic."""
        return type(self.offset) is int and all(type(s) is int for s in self.sizes) and all(
            type(s) is int for s in self.strides
        )

    def in_bytes(self) -> Region:
        """The same region with offset and strides in bytes and ``itemsize`` kept."""
        item = self.itemsize
        return Region(self.offset * item, self.sizes, tuple(s * item for s in self.strides), item)

    def describe(self) -> str:
        """A short text form: ``offset+[sizes]:[strides]xitemsize`` (elements)."""
        sizes = ",".join(str(s) for s in self.sizes)
        strides = ",".join(str(s) for s in self.strides)
        return f"{self.offset}+[{sizes}]:[{strides}]x{self.itemsize}"


def _known(cond: object) -> bool:
    """True only when ``cond`` is provably true (a bool, or a SymBool the shape env can decide)."""
    if isinstance(cond, bool):
        return cond
    try:
        from torch.fx.experimental.symbolic_shapes import statically_known_true

        return bool(statically_known_true(cond))  # type: ignore[arg-type]
    except Exception:  # an undecidable or malformed expression is simply "not proved"
        return False


def _known_le(a: SizeLike, b: SizeLike) -> bool:
    """True only when ``a <= b`` is provable.

    Beyond the shape environment's own reasoning, floor divisions by a positive
    constant are bounded term by term (``x // c`` lies in ``[(x - c + 1) / c, x / c]``),
    so that ``n // 3 <= n`` and ``2 * (n // 3) + (n - 2 * (n // 3)) <= n`` are proved
    (splits of a dynamic dimension into equal parts).
    """
    if type(a) is int and type(b) is int:
        return a <= b
    if _known(a <= b):
        return True
    diff = b - a
    node = getattr(diff, "node", None)
    if node is None:
        return False
    try:
        return _nonneg_by_floor_bounds(node.expr, node.shape_env)
    except Exception:  # an expression outside what the bound handles: not proved
        return False


def _nonneg_by_floor_bounds(expr: object, shape_env: object) -> bool:
    import sympy
    from torch.utils._sympy.functions import FloorDiv

    lower = sympy.Integer(0)
    for term in sympy.Add.make_args(sympy.expand(expr)):
        coeff, rest = term.as_coeff_Mul()
        if isinstance(rest, FloorDiv):
            x, c = rest.args
            if not (c.is_Integer and c > 0) or x.has(FloorDiv):
                return False
            lower += coeff * ((x - c + 1) / c if coeff > 0 else x / c)
        elif term.has(FloorDiv):
            return False
        else:
            lower += term
    ranges = shape_env.bound_sympy(sympy.expand(lower))  # type: ignore[attr-defined]
    return bool(ranges.lower >= 0)


def _is_empty(r: Region) -> bool:
    return any(_known(s == 0) for s in r.sizes)


def _bounds(r: Region) -> tuple[SizeLike, SizeLike]:
    """Byte interval ``[lo, hi)`` of a non-empty region with non-negative strides."""
    hi: SizeLike = r.offset + r.itemsize
    for size, stride in zip(r.sizes, r.strides):
        hi = hi + (size - 1) * stride
    return r.offset, hi


def regions_may_overlap(a: Region, b: Region) -> bool:
    """Return False only when ``a`` and ``b`` provably touch no common byte.

    Parameters
    ----------
    a, b : Region
        Regions in the same storage (offsets and strides in elements).

    Examples
    --------
    >>> even = Region(0, (4, 4), (8, 2), 4)   # x[:, ::2] of a 4x8 float tensor
    >>> odd = Region(1, (4, 4), (8, 2), 4)    # x[:, 1::2]
    >>> regions_may_overlap(even, odd)
    False
    """
    if a.is_concrete and b.is_concrete:
        return _concrete_overlap(_key(a), _key(b))
    return _symbolic_overlap(a.in_bytes(), b.in_bytes())


# ---------------------------------------------------------------------------
# concrete regions


def _key(r: Region) -> tuple[int, tuple[int, ...], tuple[int, ...], int]:
    item = r.itemsize
    return (int(r.offset) * item, tuple(int(s) for s in r.sizes), tuple(int(s) * item for s in r.strides), item)


Key = tuple[int, tuple[int, ...], tuple[int, ...], int]


def _dims(key: Key) -> list[tuple[int, int]]:
    """(stride, count) pairs of the dimensions that matter (size > 1, stride != 0)."""
    return [(st, sz) for sz, st in zip(key[1], key[2]) if sz > 1 and st != 0]


def _dense(dims: list[tuple[int, int]], itemsize: int) -> bool:
    """Do the elements tile the byte interval exactly (non-overlapping and dense)?"""
    expected = itemsize
    for stride, count in sorted(dims):
        if stride != expected:
            return False
        expected = stride * count
    return True


@lru_cache(maxsize=65536)
def _concrete_overlap(a: Key, b: Key) -> bool:
    if 0 in a[1] or 0 in b[1]:
        return False
    if any(s < 0 for s in a[2]) or any(s < 0 for s in b[2]):
        return True  # torch has no negative strides; stay conservative if one appears
    da, db = _dims(a), _dims(b)
    lo_a = a[0]
    hi_a = lo_a + a[3] + sum((n - 1) * s for s, n in da)
    lo_b = b[0]
    hi_b = lo_b + b[3] + sum((n - 1) * s for s, n in db)
    if hi_a <= lo_b or hi_b <= lo_a:
        return False
    if _dense(da, a[3]) and _dense(db, b[3]):
        return True  # both regions cover their whole byte intervals, which intersect
    return _solve(a[0], da, a[3], b[0], db, b[3])


def _solve(
    off_a: int, da: list[tuple[int, int]], item_a: int, off_b: int, db: list[tuple[int, int]], item_b: int
) -> bool:
    """Exact test: do a and b share a byte? Bounded Diophantine search with a work limit."""
    # Byte p of element x of a equals byte q of element y of b:
    #   off_a + sum(i*sa) + p == off_b + sum(j*sb) + q,  0<=p<item_a, 0<=q<item_b.
    # When both item sizes agree and every offset/stride is a multiple of it, elements
    # are aligned and it suffices to compare element starts.
    terms: list[tuple[int, int]] = []  # (coefficient > 0, upper bound) ; x in [0, bound]
    target = off_b - off_a
    g = item_a if item_a == item_b else 1
    if g > 1 and all(v % g == 0 for v in (off_a, off_b, *(s for s, _ in da), *(s for s, _ in db))):
        target //= g
        da = [(s // g, n) for s, n in da]
        db = [(s // g, n) for s, n in db]
    else:
        da = da + [(1, item_a)]
        db = db + [(1, item_b)]
    # sum(i*sa) - sum(j*sb) = target; substitute j' = n-1-j for the b terms.
    for s, n in da:
        terms.append((s, n - 1))
    for s, n in db:
        terms.append((s, n - 1))
        target += s * (n - 1)
    merged: dict[int, int] = {}
    for c, u in terms:
        merged[c] = merged.get(c, 0) + u
    coeffs = sorted(merged.items(), reverse=True)
    return _subset_sum(tuple(coeffs), target)


def _subset_sum(coeffs: tuple[tuple[int, int], ...], target: int) -> bool:
    """Is there x with sum(c_k x_k) == target, 0 <= x_k <= u_k? ``True`` if unsure."""
    n = len(coeffs)
    rest_max = [0] * (n + 1)
    rest_gcd = [0] * (n + 1)
    for k in range(n - 1, -1, -1):
        c, u = coeffs[k]
        rest_max[k] = rest_max[k + 1] + c * u
        rest_gcd[k] = math.gcd(rest_gcd[k + 1], c)
    work = 0

    def search(k: int, t: int) -> bool:
        nonlocal work
        work += 1
        if work > WORK_LIMIT:
            raise _TooHard
        if t < 0 or t > rest_max[k]:
            return False
        if k == n:
            return t == 0
        if rest_gcd[k] and t % rest_gcd[k]:
            return False
        c, u = coeffs[k]
        g = rest_gcd[k + 1]
        lo = max(0, -((rest_max[k + 1] - t) // c))  # ceil((t - rest_max)/c)
        hi = min(u, t // c)
        if lo > hi:
            return False
        if g == 0:
            return t % c == 0 and lo <= t // c <= hi
        # c*x == t (mod g)  ->  x == x0 (mod g / gcd(c, g))
        step = g // math.gcd(c, g)
        x = lo
        while x <= hi and (t - c * x) % g:
            x += 1
            if x - lo > step:
                return False
        while x <= hi:
            if search(k + 1, t - c * x):
                return True
            x += step
        return False

    try:
        return search(0, target)
    except _TooHard:
        return True


class _TooHard(Exception):
    pass


# ---------------------------------------------------------------------------
# symbolic regions


def _bytes_overlap(a: Region, b: Region) -> bool:
    """Overlap of two regions already in bytes (``itemsize`` = element extent)."""
    if a.is_concrete and b.is_concrete:
        return _concrete_overlap(
            (int(a.offset), tuple(int(s) for s in a.sizes), tuple(int(s) for s in a.strides), a.itemsize),
            (int(b.offset), tuple(int(s) for s in b.sizes), tuple(int(s) for s in b.strides), b.itemsize),
        )
    return _symbolic_overlap(a, b)


def _symbolic_overlap(a: Region, b: Region) -> bool:
    if _is_empty(a) or _is_empty(b):
        return False
    lo_a, hi_a = _bounds(a)
    lo_b, hi_b = _bounds(b)
    if _known_le(hi_a, lo_b) or _known_le(hi_b, lo_a):
        return False
    return _peel(a, b)


def static_int(v: object) -> int | None:
    """The value of an int, or of a SymInt that is a known constant; None otherwise.

    Examples
    --------
    >>> static_int(3), static_int(True), static_int(2.0)
    (3, None, None)
    >>> from torch.fx.experimental.symbolic_shapes import ShapeEnv
    >>> env = ShapeEnv()
    >>> s = env.create_unbacked_symint()
    >>> static_int(s) is None, static_int(s * 0 + 4)
    (True, 4)
    """
    if type(v) is int:
        return v
    if isinstance(v, torch.SymInt):
        try:
            value = v.node.maybe_as_int()
        except Exception:
            return None
        return int(value) if value is not None else None
    return None


def _peel(a: Region, b: Region) -> bool:
    """Rule 3 of the module docstring: split both regions on a common outer stride."""
    off_a, off_b = a.offset, b.offset
    for ia, sa in enumerate(a.strides):
        for ib, sb in enumerate(b.strides):
            if not (_known(sa == sb) and _known(sa > 0)):
                continue
            split_a = _split(a, ia, off_a)
            split_b = _split(b, ib, off_b)
            if split_a is None or split_b is None:
                continue
            (qa, na, pat_a), (qb, nb, pat_b) = split_a, split_b
            if not _bytes_overlap(pat_a, pat_b):
                return False
            if _known(qa + na <= qb) or _known(qb + nb <= qa):
                return False
    return True


def _split(region: Region, dim: int, offset: SizeLike) -> tuple[int, SizeLike, Region] | None:
    """Rows of ``region`` along ``dim``: (first row, row count, in-row pattern), if the
    pattern provably fits inside one period of the row stride; else None.

    A symbolic offset (a split of a dynamic dimension: ``qkv.split(n // 3, -1)``)
    counts as being inside the first row when ``0 <= offset`` and the pattern
    provably ends within the period."""
    period = region.strides[dim]
    sizes = tuple(s for k, s in enumerate(region.sizes) if k != dim)
    strides = tuple(s for k, s in enumerate(region.strides) if k != dim)
    span: SizeLike = region.itemsize
    for n, st in zip(sizes, strides):
        span = span + (n - 1) * st
    static_period, static_offset = static_int(period), static_int(offset)
    q: int
    r: SizeLike
    if static_period is not None and static_offset is not None:
        q, r = divmod(static_offset, static_period)
    elif _known_le(0, offset):
        q, r = 0, offset
    else:
        return None
    if not _known_le(r + span, period):
        return None
    return q, region.sizes[dim], Region(r, sizes, strides, region.itemsize)
