"""Adam's update, written once for every Python backend (TensorFlow, NumPy, CuPy arrays).

Keras 3 form: with ``alpha = lr * sqrt(1 - b2^t) / (1 - b1^t)``,

    m += (g - m) * (1 - b1)
    v += (g^2 - v) * (1 - b2)
    w -= alpha * m / (sqrt(v) + eps)

:func:`adam_update` holds this math and nothing else: the callers decide which elements
it runs on (all of them for the MLP, the touched rows for the lazy embedding update).
It uses only arithmetic operators and the ``sqrt`` it is given, so the same function
runs on TensorFlow tensors, NumPy arrays and CuPy arrays. The CUDA kernels in
:mod:`.cupy_ops` carry the only other copy (``adam_element``), checked against this one
by ``benchmarks/gpu_check.py``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np


@dataclass(frozen=True)
class AdamCoefficients:
    """The scalars of one Adam step (Python floats, or tensors inside a TF graph)."""

    one_minus_beta_1: Any
    one_minus_beta_2: Any
    alpha: Any
    epsilon: Any


def keras_adam_alpha(learning_rate: float, beta_1: float, beta_2: float, step: int) -> float:
    """Adam's bias-corrected step size exactly as Keras 3 computes it.

    Keras holds the learning rate in a float32 variable and raises float32-rounded betas
    to the step; the moment updates use the exact Python floats. Mirroring this lets the
    float64 NumPy reference match the TensorFlow paths to rounding error.
    """
    lr, b1, b2 = (float(np.float32(x)) for x in (learning_rate, beta_1, beta_2))
    return lr * (1 - b2**step) ** 0.5 / (1 - b1**step)


def adam_coefficients(
    learning_rate: float, beta_1: float, beta_2: float, epsilon: float, step: int
) -> AdamCoefficients:
    """Coefficients of step ``step`` (1-based). ``1 - beta`` is formed in float64, as
    Keras does: ``1 - float32(0.999)`` would be off by 1.3e-5 relative."""
    return AdamCoefficients(
        one_minus_beta_1=1.0 - beta_1,
        one_minus_beta_2=1.0 - beta_2,
        alpha=keras_adam_alpha(learning_rate, beta_1, beta_2, step),
        epsilon=epsilon,
    )


def adam_update(
    m: Any, v: Any, g: Any, c: AdamCoefficients, sqrt: Callable[[Any], Any]
) -> tuple[Any, Any, Any]:
    """New first and second moments, and the amount to subtract from the weights."""
    m = m + (g - m) * c.one_minus_beta_1
    v = v + (g * g - v) * c.one_minus_beta_2
    return m, v, c.alpha * m / (sqrt(v) + c.epsilon)
