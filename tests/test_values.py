"""The type predicates of untrusted values (``pdevision._values``): what each takes and refuses."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from pdevision._values import is_finite_number, is_finite_scalar, is_int, is_integer_scalar

# value, is_int, is_finite_number, is_integer_scalar, is_finite_scalar
CASES = [
    (3, True, True, True, True),
    (True, False, False, False, False),
    (np.int64(3), False, False, True, True),
    (np.bool_(True), False, False, False, False),
    (torch.tensor(3), False, False, True, True),
    (torch.tensor(True), False, False, False, False),
    (torch.tensor([3]), False, False, False, False),  # one element, but not a scalar
    (1.5, False, True, False, True),
    (math.nan, False, False, False, False),
    (np.float32(2.0), False, False, False, True),
    (np.float64(math.inf), False, False, False, False),
    (torch.tensor(1.5), False, False, False, True),
    (torch.tensor(math.nan), False, False, False, False),
    ("3", False, False, False, False),
    (None, False, False, False, False),
    (complex(1, 0), False, False, False, False),
]


@pytest.mark.parametrize(("value", "python_int", "python_number", "integer", "finite"), CASES, ids=repr)
def test_each_predicate_takes_what_it_names(
    value: object, python_int: bool, python_number: bool, integer: bool, finite: bool
) -> None:
    assert is_int(value) is python_int
    assert is_integer_scalar(value) is integer
    assert is_finite_scalar(value) is finite
    assert is_finite_number(value) is python_number
