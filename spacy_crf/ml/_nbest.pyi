from typing import Optional, Tuple

import numpy

def nbest_flat(
    emissions: numpy.ndarray,
    offsets: numpy.ndarray,
    transitions: numpy.ndarray,
    start: numpy.ndarray,
    end: numpy.ndarray,
    k: int,
    allowed: Optional[numpy.ndarray] = ...,
) -> Tuple[numpy.ndarray, numpy.ndarray, numpy.ndarray]: ...
