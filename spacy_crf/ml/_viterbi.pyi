from typing import Optional, Tuple

import numpy

def decode_flat(
    emissions: numpy.ndarray,
    offsets: numpy.ndarray,
    transitions: numpy.ndarray,
    start: numpy.ndarray,
    end: numpy.ndarray,
    allowed: Optional[numpy.ndarray] = ...,
) -> Tuple[numpy.ndarray, numpy.ndarray]: ...
