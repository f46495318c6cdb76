"""Standard normal noise for the Monte-Carlo steps of training, drawn fast.

Every stochastic method draws ``S x D`` standard normals per step: the reparameterised samples of Bayes by
Backprop and k-tied training, the weight samples of SLANG and the natural-gradient methods. At D of 1e5 to 1e6
that draw is a sizeable part of the step: NumPy's ``Generator.standard_normal`` costs about 13 ns per number on
this project's machines, in float32 as in float64, more than a whole Adam update of the same parameter.

:func:`standard_normal` draws them by the Box-Muller transform in float32 instead,
``z1 = r cos(2 pi u2)``, ``z2 = r sin(2 pi u2)`` with ``r = sqrt(-2 log(1 - u1))``, from float32 uniforms made from the generator's raw bits, whose
logarithms, roots and sines NumPy evaluates with vector instructions: about 3 ns per number, and exact in
distribution up to float32 rounding. What the float32 uniforms (multiples of 2^-23) give up: ``|z|`` never exceeds
``sqrt(46 log 2) = 5.65``, which a standard normal exceeds with probability 1.6e-8; and each number carries float32's
7 significant digits. Neither matters to a Monte-Carlo gradient or a weight sample, whose noise is itself the
estimate's error; both would matter to a statistical test of extreme tails, which is not what this is for.

The draws are deterministic given the generator's state, like NumPy's own; they are not the same numbers
``Generator.standard_normal`` would give.
"""

from __future__ import annotations

import math

import numpy as np

# The most numbers transformed in one pass: the transform makes a few temporaries of the block's size, which
# stay in cache at this size, and a (S, D) draw at MNIST scale (2e6 numbers) would otherwise allocate 40 MB.
_BLOCK = 1 << 16


def standard_normal(rng: np.random.Generator, shape) -> np.ndarray:
    """A float32 array of the given shape (an int or a tuple) of independent standard normals."""
    out = np.empty(shape, dtype=np.float32)
    flat = out.reshape(-1)
    n = flat.size
    for start in range(0, n, 2 * _BLOCK):
        stop = min(n, start + 2 * _BLOCK)
        _box_muller(rng, flat[start:stop])
    return out


def sample_columns(rng: np.random.Generator, D: int, S: int) -> np.ndarray:
    """``(D, S)`` standard normals, one column per weight sample, Fortran-ordered: the transpose of a
    ``(S, D)`` draw, so each sample is contiguous. Elementwise work on a C-ordered ``(D, S)`` array with S of a few
    runs an inner loop of length S (at MNIST scale, 4-5x slower than over contiguous columns), and the network
    takes its weight samples as the rows of ``(S, D)``."""
    return standard_normal(rng, (S, D)).T


def _box_muller(rng: np.random.Generator, out: np.ndarray) -> None:
    """Fill ``out`` (float32, 1-d, contiguous) with standard normals."""
    n = out.size
    h = (n + 1) // 2
    # Uniforms on [1, 2) straight from the generator's 64-bit output, 2 per word: 23 random bits as the mantissa
    # under the exponent of 1.0 (cheaper than converting integers to floating point)
    bits = rng.bit_generator.random_raw(h).view(np.uint32)
    bits >>= np.uint32(9)
    bits |= np.uint32(0x3F800000)
    u = bits.view(np.float32)
    r = u[:h]
    np.subtract(np.float32(2.0), r, out=r)  # 1 - u1 on (0, 1], exact: a multiple of 2^-23, so its log is finite
    np.log(r, out=r)
    r *= np.float32(-2.0)
    np.sqrt(r, out=r)
    angle = u[h:]
    angle *= np.float32(2.0 * math.pi)  # 2 pi (1 + u2): the same sines as 2 pi u2
    np.cos(angle, out=out[:h])
    out[:h] *= r
    np.sin(angle[: n - h], out=out[h:])
    out[h:] *= r[: n - h]
