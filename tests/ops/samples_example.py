"""OpInfo samples: a first few ops (families add their own samples_<family>.py).

add, add_scalar and relu moved to samples_elementwise.py / samples_activation.py.
"""

import torch
import torch.nn.functional as F

from tests.ops.op_db import OpInfo, Sample, make

aten = torch.ops.aten

OPS = [
    OpInfo("linear", F.linear, (aten.linear.default,),
           lambda dt: [Sample((make((2, 5), dt), make((3, 5), dt), make((3,), dt))),
                       Sample((make((2, 4, 5), dt), make((3, 5), dt)), name="nobias"),
                       # a 1-D weight: one output row, the last dim dropped (the row once contracted dim 1)
                       Sample((make((2, 4, 5), dt), make((5,), dt), make((), dt)), name="vector_weight")]),
]
