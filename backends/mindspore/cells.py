"""Cells the native lowering hands to ``mindspore.nn`` optimizers (imports mindspore)."""

from __future__ import annotations

import numpy as np
from mindspore import Tensor, nn, ops


class PerStepTable(nn.Cell):
    """Dynamic weight decay in MindSpore's Cell form: the optimizer calls it with its
    ``global_step`` (the 0-based step being taken) and decays by ``values[step]``, held in
    float32 like every MindSpore hyperparameter. Past the end it raises the Gather range
    error, as a per-step lr list does."""

    def __init__(self, values):
        super().__init__()
        self.table = Tensor(np.asarray(values, dtype=np.float32))
        self.gather = ops.Gather()

    def construct(self, global_step):
        return self.gather(self.table, global_step, 0).reshape(())
