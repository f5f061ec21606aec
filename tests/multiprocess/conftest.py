"""Fixtures of the two-process tests."""

import pytest

from tests.helpers import write
from tests.samples import REVIEWS, csv_rows

# 7 rows: with 2 processes and batch 2 the last batch is padded with duplicates, which must
# not be scored twice.
ROWS = [*REVIEWS, "good fun,pos", "awful boring,neg", "very good,pos"]


@pytest.fixture
def reviews(tmp_path):
    """``(train.csv, dev.csv)``: the 7 rows four times, and once."""
    return write(tmp_path / "train.csv", csv_rows(ROWS * 4)), write(tmp_path / "dev.csv", csv_rows(ROWS))
