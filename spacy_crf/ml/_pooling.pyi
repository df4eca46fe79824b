from typing import Sequence

import numpy

def mean_rows(
    sources: Sequence[numpy.ndarray],
    indices: Sequence[numpy.ndarray],
    lengths: Sequence[numpy.ndarray],
    out: numpy.ndarray,
) -> None: ...
