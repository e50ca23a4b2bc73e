r"""Adam with its optimizer state on the host: :mod:`~unified_opt.algorithms.adam`'s
math, every knob included, run where the state lives.

The first and second moments (and the step) stay in host memory; each step moves the
gradient to the host, computes the update there, and writes only the new parameters
back to the parameter's device. Device memory then holds no optimizer state, at the cost
of two transfers per step: a model whose Adam state does not fit on the accelerator can
still train. The numbers are Adam's (:class:`~unified_opt.algorithms.adam.Adam`, written
once there); only the placement differs, which ``state_device`` records for the backends.

Args:
    nesterov: ``True``: the TF/MindSpore Nesterov form of Adam's numerator
        (:math:`\beta_1 m_t + (1-\beta_1) g`); ``False``: :math:`m_t`.

Differences between frameworks
------------------------------
* ``mindspore.nn.AdamOffload`` and ``mindspore.nn.Adam(use_offload=True)``: MindSpore's
  Adam (``eps_placement="eps_hat"``, L2 decay for names without ``beta``/``gamma``,
  TF-style ``nesterov``); the kernel ``AdamNoUpdateParam`` runs on the host and returns
  the step, which is added to the parameter on its device. No amsgrad.
* torch (``unified_opt.backends.torch.offload.OffloadAdam``): torch's fused CPU Adam
  kernel over host state, for the torch Adam form (eps outside, bias correction).
* DeepSpeed's ``DeepSpeedCPUAdam`` (ZeRO-Offload) computes torch's Adam/AdamW formula.
"""

from __future__ import annotations

from typing import ClassVar

from ..records import record
from ..spec import register, spec_dataclass
from .adam import Adam


@register
@spec_dataclass
class AdamOffload(Adam):
    __doc__ = __doc__
    name = "adam_offload"

    #: where the optimizer state lives and the update is computed
    state_device: ClassVar[str] = "host"


RECORD = record(AdamOffload,
                samples=(AdamOffload(lr=0.01, eps=1e-3, amsgrad=True),),
                case_module="unified_opt.conformance.cases.memory_saving",
                nonfinite={"lr": 0.01})
