"""Privacy accounting: GDP ↔ (ε, δ), Gaussian calibration, Rényi-DP of synthetic generation.

The calculators (CLI and POST /v1/accounting/*) accept inputs in these ranges, where every answer is finite.
"""

MIN_EPSILON, MAX_EPSILON = 1e-6, 100.0
"""ε beyond 100 protects nothing (e^100 ≈ 10^43) and overflows the calculators' floats."""
MIN_DELTA = 1e-300
"""Smallest δ: below it 1.25/δ (the classic calibration) overflows a float."""
MIN_SCALE, MAX_SCALE = 1e-6, 1e6
"""Range of the continuous scales: Gaussian sensitivity, clip bound, temperature."""
