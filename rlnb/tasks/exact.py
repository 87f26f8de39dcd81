"""``statistics.stdev`` and ``statistics.pstdev`` of floats, the same bits in two Python calls.

``statistics`` sums in ``Fraction``s: ~90 Python calls for a group of 8 rewards (each value's ``_exact_ratio``, a
``Fraction`` made and added per denominator), the largest Python cost a batched member would add to a step
(bench/README.md). Here every value is one integer over a common power of two, so the exact sums are ``int`` sums in
C, the variance one integer ratio reduced as ``Fraction`` reduces it, and its square root is rounded as
``statistics._float_sqrt_of_frac`` rounds it: the result is the correctly rounded square root of the same exact
variance, bit for bit ``statistics``' (``tests/tasks/test_exact.py`` compares bits). ``finite_mean`` and
``finite_stdev`` take finite values of any size (rewards near 1e308), scaled by a power of two that changes no bit.
"""

from __future__ import annotations

import math
import operator
import statistics
import sys
from collections.abc import Sequence
from itertools import repeat

_SQRT_BITS = 2 * sys.float_info.mant_dig + 3
"""``statistics._sqrt_bit_width``: the root is rounded to odd at about 55 bits, then once to a float's 53."""


_RATIO = operator.methodcaller("as_integer_ratio")
"""A float's, int's or bool's exact ``(numerator, denominator)``, in C."""


def stdev(values: Sequence[float]) -> float:
    """``statistics.stdev(values)`` (the sample std, n - 1) of at least two finite numbers (floats, ints, bools):
    the same float."""
    if len(values) < 2:
        raise statistics.StatisticsError("stdev requires at least two data points")
    return _root_of_variance(values, 1)


def pstdev(values: Sequence[float]) -> float:
    """``statistics.pstdev(values)`` (the population std, n) of at least one finite number: the same float."""
    if len(values) < 1:
        raise statistics.StatisticsError("pstdev requires at least one data point")
    return _root_of_variance(values, 0)


def _root_of_variance(values: Sequence[float], ddof: int) -> float:
    """The correctly rounded square root of the exact variance of ``values`` over ``len(values) - ddof``.

    Each float is ``num / den`` with ``den`` a power of two, so with ``scale`` the largest ``den`` every value is
    the integer ``num * (scale // den)`` over ``scale``: with n values, integer sum ``s`` and sum of squares ``q``,
    the sum of squared deviations is ``(n*q - s*s) / (n * scale**2)``, exactly. An ``OverflowError`` where the root
    passes a float's largest, as ``statistics`` raises it."""
    nums, dens = zip(*map(_RATIO, values), strict=True)  # NaN: ValueError, inf: OverflowError (float's own)
    scale = max(dens)
    ints = list(map(operator.mul, nums, map(operator.floordiv, repeat(scale), dens)))
    n = len(ints)
    total = sum(ints)
    num = n * sum(map(operator.mul, ints, ints)) - total * total
    den = n * (n - ddof) * scale * scale
    g = math.gcd(num, den)  # lowest terms, as the Fraction statistics rounds: the very same integers below
    num, den = num // g, den // g
    # statistics._float_sqrt_of_frac(num, den), its _integer_sqrt_of_frac_rto inlined (round to odd)
    q = (num.bit_length() - den.bit_length() - _SQRT_BITS) // 2
    if q >= 0:
        m = den << 2 * q
        a = math.isqrt(num // m)
        return ((a | (a * a * m != num)) << q) / 1
    n2 = num << -2 * q
    a = math.isqrt(n2 // den)
    return (a | (a * a * den != n2)) / (1 << -q)


def exponent(values: Sequence[float]) -> int:
    """``e`` such that every value over ``2**e`` lies in (-1, 1) (0 for values below 1): scaling by a power of two
    changes no bit, and a sum of such values, or of their squares, cannot overflow."""
    return max(math.frexp(max(map(abs, values), default=0.0))[1], 0)


def finite_mean(values: Sequence[float]) -> float:
    """``statistics.fmean(values)`` of finite values, without its ``OverflowError`` when their sum passes a float's
    largest (three rewards of 1e308)."""
    e = exponent(values)
    return math.ldexp(statistics.fmean(list(map(math.ldexp, values, repeat(-e)))), e)


def finite_stdev(values: Sequence[float]) -> float:
    """``statistics.stdev(values)`` of finite values (``exact.stdev``: the same bits), computed on them over a power
    of two as ever; ``inf`` when the std itself passes a float's largest."""
    e = exponent(values)
    try:
        return math.ldexp(stdev(list(map(math.ldexp, values, repeat(-e)))), e)
    except OverflowError:
        return math.inf
