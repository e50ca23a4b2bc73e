r"""Muon (Jordan et al., 2024): momentum orthogonalised by a Newton–Schulz iteration.

For a matrix parameter (2-D) :math:`\theta`, step :math:`t`, gradient :math:`g`,
momentum :math:`\mu`:

.. math::

    B &\leftarrow B + (g - B)(1 - \mu) \\
    U &= g + (B - g)\,\mu \ \text{(nesterov)}, \text{ else } B \\
    O &= \mathrm{NS}^{(a,b,c)}_k(U) \\
    \theta &\leftarrow \theta\,(1 - \eta\lambda) - \eta'\, O

where :math:`\mathrm{NS}` starts from :math:`X = U^{(\top)} / \max(\lVert U\rVert, \epsilon)`
(transposed when it has more rows than columns) and repeats :math:`k` times

.. math::

    A = X X^\top, \qquad B' = b A + c A A, \qquad X \leftarrow a X + B' X

(transposed back at the end), in the parameter's precision, or with ``ns_dtype`` in
that dtype: every result of the iteration (its input, the norm, the normalised matrix,
:math:`A`, :math:`B'` and the new :math:`X`, each product accumulated in float32 as the
frameworks' kernels do) rounded to it, and :math:`O` taken back to the parameter's. The lr is adjusted to the
shape :math:`(A, B)`: ``adjust_lr_fn="original"`` (Keller Jordan's)
:math:`\eta' = \eta\sqrt{\max(1, A/B)}`, ``"match_rms_adamw"`` (Moonlight's)
:math:`\eta' = 0.2\,\eta\sqrt{\max(A, B)}`.

Args:
    momentum: :math:`\mu` >= 0, the momentum's decay (its buffer is an average).
    nesterov: ``True``: the step uses :math:`g + (B - g)\mu`; ``False``: :math:`B`.
    ns_coefficients: :math:`(a, b, c)`, the quintic iteration's coefficients.
    ns_steps: :math:`k`, the iteration's steps, an int in [0, 100).
    eps: :math:`\epsilon` >= 0, the floor of the norm the iteration divides by.
    adjust_lr_fn: the lr's adjustment to the matrix's shape: ``'original'`` or
        ``'match_rms_adamw'`` (see above).
    ns_dtype: the dtype the iteration computes in: None (the parameter's) or
        ``'bfloat16'`` (``torch.optim.Muon``'s).

Differences between frameworks
------------------------------
* ``torch.optim.Muon`` (torch 2.13) is this update with ``ns_dtype='bfloat16'``: its
  ``addmm``\ s round :math:`bA + cAA` and :math:`aX + B'X` once, as the spec does.
  Its ``adjust_lr_fn=None`` is ``"original"``; it takes 2-D parameters only, as this
  spec does (an update of another shape raises). On CUDA the own path runs the same
  operations on bfloat16 tensors. On the CPU it computes each in float32 and rounds
  the result, as on Paddle and MindSpore below: torch's bfloat16 matrix product on a
  CPU without bfloat16 instructions took 2.2 s for the iteration on one 512 x 512
  matrix (the own path: 50 ms).
* A bfloat16 rounding lands on either side of a boundary as the float32 sum before it
  was accumulated, in an order each CPU kernel chooses; the conformance rule holds one
  bfloat16 ulp of :math:`O` times :math:`\eta'` per step for it (a reference whose
  :math:`O` is one bfloat16 ulp nearer zero everywhere,
  :class:`unified_opt.ops.UlpOffOps`).
* Paddle and MindSpore ship no Muon: they run this update (own implementation), the
  iteration in their matrix product. Their CPU kernels have no bfloat16 matrix product,
  so with ``ns_dtype='bfloat16'`` they compute each operation in float32 and round its
  result to bfloat16 values (the numbers of a bfloat16 kernel that accumulates in
  float32).
* Most training scripts give Muon the matrices and AdamW the rest (embeddings, biases,
  norms), as two optimizers; Moonlight's ``match_rms_adamw`` lets both share one lr.
"""

from __future__ import annotations

import math
from typing import Any

from .. import _validation as v
from ..ops import Ops
from ..records import CaseSketch, Planted, record
from ..schedules import Schedule
from ..spec import Spec, State, Tensor, register, spec_dataclass

ADJUST_LR_FNS = ("original", "match_rms_adamw")
NS_DTYPES = ("bfloat16",)
#: the conformance parameters: matrices only (every kernel size among their elements, and
#: a 0-size one, as every case but the presets has)
MATRICES = {"w": (65, 65), "tall": (40, 24), "wide": (16, 48), "one": (1, 1),
            "row": (1, 7), "eight": (2, 4), "nine": (3, 3), "square": (8, 8),
            "empty": (0, 5)}


def orthogonalised(update: Tensor, spec: "Muon", ops: Ops) -> Tensor:
    """:math:`\\mathrm{NS}^{(a,b,c)}_k(U)` (see the module), in ``spec.ns_dtype``: every
    operation's result rounded to it, as a framework computing in it rounds (its input,
    the norm, the normalised matrix, each product: ``torch.optim.Muon``'s
    ``addmm``\\ s round once), and returned in ``update``'s dtype."""
    a, b, c = spec.ns_coefficients
    low = spec.ns_dtype

    def held(x: Tensor) -> Tensor:
        return x if low is None else ops.rounded(x, low)

    rows, columns = update.shape
    x = held(update)
    x = ops.transpose(x) if rows > columns else x
    norm = held(ops.norm(x))
    x = held(x / held(ops.maximum(norm, ops.full_like(norm, spec.eps))))
    for _ in range(spec.ns_steps):
        gram = held(ops.matmul(x, ops.transpose(x)))
        polynomial = held(ops.addmm(gram, gram, gram, beta=b, alpha=c))
        x = held(ops.addmm(x, polynomial, x, beta=a, alpha=1.0))
    x = ops.transpose(x) if rows > columns else x
    return x if low is None else ops.cast_like(x, update)


def adjusted_lr(lr: float, how: str, shape: tuple[int, ...]) -> float:
    rows, columns = shape[:2]
    if how == "original":
        return lr * math.sqrt(max(1.0, rows / columns))
    return lr * 0.2 * math.sqrt(max(rows, columns))


@register
@spec_dataclass
class Muon(Spec):
    __doc__ = __doc__
    name = "muon"

    lr: float | Schedule = 1e-3
    weight_decay: float = 0.1
    momentum: float = 0.95
    nesterov: bool = True
    ns_coefficients: tuple[float, float, float] = (3.4445, -4.7750, 2.0315)
    eps: float = 1e-7
    ns_steps: int = 5
    adjust_lr_fn: str = "original"
    ns_dtype: str | None = None

    @property
    def low_precision_update(self) -> str | None:
        return self.ns_dtype

    def _check(self, owner: str) -> dict[str, Any]:
        steps = self.ns_steps
        if isinstance(steps, bool) or not isinstance(steps, int):
            raise TypeError(f"{owner}: ns_steps must be an int, got {steps!r}")
        if not 0 <= steps < 100:
            raise ValueError(f"{owner}: ns_steps must be in [0, 100), got {steps!r}")
        coefficients = v.check_sequence(owner, "ns_coefficients", self.ns_coefficients, 3)
        return {"weight_decay": v.check_range(owner, "weight_decay", self.weight_decay,
                                              low=0.0),
                "momentum": v.check_range(owner, "momentum", self.momentum, low=0.0),
                "nesterov": v.check_bool(owner, "nesterov", self.nesterov),
                "ns_coefficients": tuple(
                    v.check_range(owner, f"ns_coefficients[{i}]", value)
                    for i, value in enumerate(coefficients)),
                "eps": v.check_range(owner, "eps", self.eps, low=0.0),
                "adjust_lr_fn": v.check_choice(owner, "adjust_lr_fn", self.adjust_lr_fn,
                                               ADJUST_LR_FNS),
                "ns_dtype": None if self.ns_dtype is None else
                v.check_choice(owner, "ns_dtype", self.ns_dtype, NS_DTYPES)}

    def state_names(self) -> tuple[str, ...]:
        return ("momentum_buffer",)

    def update(self, param: Tensor, grad: Tensor, state: State, *, lr: float, step: int,
               ops: Ops) -> tuple[Tensor, State]:
        if len(param.shape) != 2:
            raise ValueError(f"Muon: updates matrices (2-D parameters), got one of shape "
                             f"{tuple(param.shape)}; give the others another optimizer "
                             "(AdamW, as torch.optim.Muon's users do)")
        buffer = state["momentum_buffer"] + (grad - state["momentum_buffer"]) * (
            1.0 - self.momentum)
        direction = grad + (buffer - grad) * self.momentum if self.nesterov else buffer
        orthogonal = orthogonalised(direction, self, ops)
        param = param * (1.0 - lr * self.weight_decay)
        param = param - orthogonal * adjusted_lr(lr, self.adjust_lr_fn, tuple(param.shape))
        return param, {"momentum_buffer": buffer}


_PLAIN = Muon(lr=0.02)
_MOONLIGHT = Muon(lr=0.01, weight_decay=0.05, adjust_lr_fn="match_rms_adamw",
                  nesterov=False, momentum=0.9)
#: torch.optim.Muon's defaults but the lr
_TORCH = Muon(lr=0.02, ns_dtype="bfloat16")

RECORD = record(
    Muon,
    samples=(_PLAIN, _MOONLIGHT, Muon(lr=0.02, ns_steps=3, eps=0.5), _TORCH),
    planted=(Planted(_PLAIN, {"nesterov": False}),
             Planted(_PLAIN, {"adjust_lr_fn": "match_rms_adamw"}),
             Planted(_MOONLIGHT, {"momentum": 0.8}),
             Planted(_PLAIN, {"ns_steps": 4}),
             Planted(_PLAIN, {"ns_coefficients": (3.0, -4.7750, 2.0315)}),
             Planted(_TORCH, {"ns_dtype": None}),
             Planted(_TORCH, {"ns_steps": 4}),
             Planted(_TORCH, {"momentum": 0.9})),
    cases=(CaseSketch("muon_default", Muon(lr=0.02)),
           CaseSketch("muon_match_rms_adamw", _MOONLIGHT,
                      "Moonlight's lr adjustment, plain momentum"),
           CaseSketch("muon_three_steps_large_eps", Muon(lr=0.02, ns_steps=3, eps=0.5,
                                                         weight_decay=0.0),
                      "three steps of the iteration, a norm floor that acts"),
           CaseSketch("muon_bfloat16", _TORCH,
                      "torch.optim.Muon's: the iteration in bfloat16"),
           CaseSketch("muon_bfloat16_match_rms_adamw",
                      Muon(lr=0.01, weight_decay=0.05, adjust_lr_fn="match_rms_adamw",
                           ns_steps=3, eps=0.5, ns_dtype="bfloat16"),
                      "Moonlight's lr adjustment, three steps of the iteration in "
                      "bfloat16, a norm floor that acts")),
    nonfinite={"lr": 0.02},
    params=MATRICES,
)
