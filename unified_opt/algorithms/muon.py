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
frameworks' kernels do) rounded to it, and :math:`O` taken back to the parameter's.
The lr is adjusted to the shape :math:`(A, B)`: ``adjust_lr_fn="original"`` (Keller
Jordan's) :math:`\eta' = \eta\sqrt{\max(1, A/B)}`, ``"match_rms_adamw"`` (Moonlight's)
:math:`\eta' = 0.2\,\eta\sqrt{\max(A, B)}`.

A parameter that does not take Muon (``others='adamw'``: one that is not a matrix, or
that ``adamw_names`` names; a conv kernel unless ``muon_params='matrices_and_conv'``,
which flattens it to :math:`(d_0, d_1 d_2\cdots)`) takes :class:`unified_opt.AdamW`'s
update with ``adamw_betas``, ``adamw_eps`` and the spec's lr and weight decay.

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
    muon_params: which parameters take Muon: ``'matrices'`` (2-D), or
        ``'matrices_and_conv'``: also tensors of three or more dimensions (conv
        kernels), each on its flattening :math:`(d_0, d_1 d_2\cdots)` (the
        orthogonalisation and the lr's shape adjustment), as Keller Jordan's
        implementation flattens them.
    others: what the other parameters take: ``'refuse'`` (an update of one raises, as
        ``torch.optim.Muon`` does) or ``'adamw'``: the auxiliary AdamW of most Muon
        trainings, torch's form (:class:`unified_opt.AdamW`: bias correction, eps
        outside the square root, the decay :math:`\eta\lambda` applied first) with
        ``adamw_betas`` and ``adamw_eps``, this spec's lr and weight decay. Their own
        lr and decay (Keller Jordan's ``3e-4`` and 0 beside Muon's ``0.02``) come from
        ``uo.Group(match=..., lr=... or lr_scale=..., weight_decay=...)``, as each
        group's do; Moonlight's ``match_rms_adamw`` shares one lr.
    adamw_names: shell-style name patterns of matrices that take the auxiliary AdamW
        too (embeddings, the output head), with ``others='adamw'``.
    adamw_betas: the auxiliary AdamW's :math:`(\beta_1, \beta_2)`.
    adamw_eps: the auxiliary AdamW's :math:`\epsilon` > 0.
    takes_adamw: every parameter takes the auxiliary AdamW (what a matrix that
        ``adamw_names`` matches is given).

Differences between frameworks
------------------------------
* ``torch.optim.Muon`` (torch 2.13) is this update with ``ns_dtype='bfloat16'``: its
  ``addmm``\ s round :math:`bA + cAA` and :math:`aX + B'X` once, as the spec does.
  Its ``adjust_lr_fn=None`` is ``"original"``; it takes 2-D parameters only, as this
  spec does (an update of another shape raises). On CUDA, and on a CPU with bfloat16
  matrix instructions (x86's ``avx512_bf16`` or ``amx_bf16``), the own path runs the
  same operations on bfloat16 tensors: on an AMD EPYC with ``avx512_bf16``, one
  thread, the iteration on a 1000 x 512 matrix took 32.7 ms so, against 73.5 ms in
  float32 with each result rounded. On another CPU it computes each in float32 and
  rounds the result, as on Paddle and MindSpore below: torch's bfloat16 matrix
  product on a CPU without bfloat16 instructions took 2.2 s for the iteration on one
  512 x 512 matrix (the own path: 50 ms).
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
  norms), as two optimizers (``torch.optim.Muon`` and ``torch.optim.AdamW``) or as
  groups of one (Keller Jordan's ``MuonWithAuxAdam``, pytorch-optimizer's ``Muon``
  with ``use_muon``). ``others='adamw'`` is that set-up in one spec, the AdamW part
  torch's; Moonlight's ``match_rms_adamw`` lets both share one lr.
"""

from __future__ import annotations

import functools
import math
from typing import Any

from .. import _validation as v
from ..ops import Ops
from ..records import CaseSketch, Planted, record
from ..schedules import Schedule
from ..spec import Spec, State, Tensor, register, spec_dataclass
from ._adam_moments import adam_state_names
from .adamw import AdamW

ADJUST_LR_FNS = ("original", "match_rms_adamw")
NS_DTYPES = ("bfloat16",)
MUON_PARAMS = ("matrices", "matrices_and_conv")
OTHERS = ("refuse", "adamw")
#: the conformance parameters: matrices only (every kernel size among their elements, and
#: a 0-size one, as every case but the presets has)
MATRICES = {"w": (65, 65), "tall": (40, 24), "wide": (16, 48), "one": (1, 1),
            "row": (1, 7), "eight": (2, 4), "nine": (3, 3), "square": (8, 8),
            "empty": (0, 5)}


def orthogonalised(update: Tensor, flat: tuple[int, int], coefficients: tuple[float, ...],
                   steps: int, eps: float, low: str | None, *, ops: Ops) -> Tensor:
    """:math:`\\mathrm{NS}^{(a,b,c)}_k(U)` (see the module) of ``update`` seen as the
    matrix ``flat`` (a conv kernel's flattening), in ``low`` (``ns_dtype``): every
    operation's result rounded to it, as a framework computing in it rounds (its input,
    the norm, the normalised matrix, each product: ``torch.optim.Muon``'s
    ``addmm``\\ s round once), and returned in ``update``'s shape and dtype. The update
    calls it through ``ops.matrix_function``: one node of a trace, which the CPU kernels
    run on the host between their elementwise phases."""
    shape = tuple(update.shape)
    if flat != shape:
        update = ops.reshape(update, flat)
    a, b, c = coefficients

    def held(x: Tensor) -> Tensor:
        return x if low is None else ops.rounded(x, low)

    rows, columns = flat
    x = held(update)
    x = ops.transpose(x) if rows > columns else x
    norm = held(ops.norm(x))
    x = held(x / held(ops.maximum(norm, ops.full_like(norm, eps))))
    for _ in range(steps):
        gram = held(ops.matmul(x, ops.transpose(x)))
        polynomial = held(ops.addmm(gram, gram, gram, beta=b, alpha=c))
        x = held(ops.addmm(x, polynomial, x, beta=a, alpha=1.0))
    x = ops.transpose(x) if rows > columns else x
    x = x if low is None else ops.cast_like(x, update)
    return ops.reshape(x, shape) if flat != shape else x


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
    muon_params: str = "matrices"
    others: str = "refuse"
    adamw_names: tuple[str, ...] = ()
    adamw_betas: tuple[float, float] = (0.9, 0.95)
    adamw_eps: float = 1e-10
    #: set by :meth:`for_parameter` for a matrix ``adamw_names`` matches
    takes_adamw: bool = False

    @property
    def low_precision_update(self) -> str | None:
        return self.ns_dtype

    def full_precision(self) -> tuple[str, Spec] | None:
        return None if self.ns_dtype is None else ("ns_dtype=None",
                                                   self.replace(ns_dtype=None))

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
                v.check_choice(owner, "ns_dtype", self.ns_dtype, NS_DTYPES),
                "muon_params": v.check_choice(owner, "muon_params", self.muon_params,
                                              MUON_PARAMS),
                **self._check_others(owner)}

    def _check_others(self, owner: str) -> dict[str, Any]:
        others = v.check_choice(owner, "others", self.others, OTHERS)
        names = v.check_names(owner, "adamw_names", self.adamw_names)
        takes_adamw = v.check_bool(owner, "takes_adamw", self.takes_adamw)
        if others == "refuse" and (names or takes_adamw):
            raise ValueError(f"{owner}: adamw_names={names!r} needs others='adamw' (the "
                             "matrices they name take the auxiliary AdamW)")
        return {"others": others, "adamw_names": names, "takes_adamw": takes_adamw,
                "adamw_betas": v.check_betas(owner, "adamw_betas", self.adamw_betas),
                "adamw_eps": v.check_range(owner, "adamw_eps", self.adamw_eps, low=0.0,
                                           low_open=True)}

    def for_parameter(self, name: str | None) -> Spec:
        from ..groups import name_matches

        if not self.adamw_names:
            return self
        if name is None:
            raise ValueError(f"Muon: adamw_names={self.adamw_names!r} needs parameter "
                             "names; pass a module or (name, parameter) pairs")
        if name_matches(name, self.adamw_names):
            return self.replace(adamw_names=(), takes_adamw=True)
        return self.replace(adamw_names=())

    def takes_muon(self, shape: tuple[int, ...]) -> bool:
        """Whether a parameter of ``shape`` takes Muon (else ``others``)."""
        if self.takes_adamw:
            return False
        return len(shape) == 2 or (len(shape) > 2 and self.muon_params == "matrices_and_conv")

    def updates_shape(self, shape: tuple[int, ...]) -> bool:
        return self.others == "adamw" or self.takes_muon(tuple(shape))

    def auxiliary(self) -> Spec:
        """The AdamW the other parameters take (``others='adamw'``)."""
        return _auxiliary_adamw(self.adamw_betas, self.adamw_eps, self.weight_decay)

    def state_names(self) -> tuple[str, ...]:
        if self.others == "adamw":
            return ("momentum_buffer",) + adam_state_names(self.auxiliary())
        return ("momentum_buffer",)

    def init(self, param: Tensor, ops: Ops) -> State:
        if self.others == "adamw" and not self.takes_muon(tuple(param.shape)):
            return self.auxiliary().init(param, ops)
        return {"momentum_buffer": ops.zeros_like(param)}

    def update(self, param: Tensor, grad: Tensor, state: State, *, lr: float, step: int,
               ops: Ops) -> tuple[Tensor, State]:
        shape = tuple(param.shape)
        if not self.updates_shape(shape):
            raise ValueError(f"Muon: updates matrices (2-D parameters), got one of shape "
                             f"{shape}; give the others the auxiliary AdamW "
                             "(others='adamw') or another optimizer")
        if not self.takes_muon(shape):
            return self.auxiliary().update(param, grad, state, lr=lr, step=step, ops=ops)
        buffer = state["momentum_buffer"] + (grad - state["momentum_buffer"]) * (
            1.0 - self.momentum)
        direction = grad + (buffer - grad) * self.momentum if self.nesterov else buffer
        flat = (shape[0], math.prod(shape[1:])) if len(shape) > 2 else shape
        orthogonal = ops.matrix_function(orthogonalised, direction, flat,
                                         tuple(self.ns_coefficients), self.ns_steps, self.eps,
                                         self.ns_dtype)
        param = param * (1.0 - lr * self.weight_decay)
        param = param - orthogonal * adjusted_lr(lr, self.adjust_lr_fn, flat)
        return param, {"momentum_buffer": buffer}


@functools.lru_cache(maxsize=64)
def _auxiliary_adamw(betas: tuple[float, float], eps: float, weight_decay: float) -> Spec:
    # torch.optim.AdamW's form (the AdamW defaults); the lr is the update's
    return AdamW(lr=0.0, betas=betas, eps=eps, weight_decay=weight_decay)


_PLAIN = Muon(lr=0.02)
_MOONLIGHT = Muon(lr=0.01, weight_decay=0.05, adjust_lr_fn="match_rms_adamw",
                  nesterov=False, momentum=0.9)
#: torch.optim.Muon's defaults but the lr
_TORCH = Muon(lr=0.02, ns_dtype="bfloat16")
#: some matrices (by name: wide, one, nine, square; w2 of the update-contract tests'
#: model) take the auxiliary AdamW
_AUXILIARY = Muon(lr=0.02, others="adamw", adamw_names=("*e", "w2"),
                  adamw_betas=(0.8, 0.99), adamw_eps=1e-8)

RECORD = record(
    Muon,
    samples=(_PLAIN, _MOONLIGHT, Muon(lr=0.02, ns_steps=3, eps=0.5), _TORCH, _AUXILIARY),
    planted=(Planted(_PLAIN, {"nesterov": False}),
             Planted(_PLAIN, {"adjust_lr_fn": "match_rms_adamw"}),
             Planted(_MOONLIGHT, {"momentum": 0.8}),
             Planted(_PLAIN, {"ns_steps": 4}),
             Planted(_PLAIN, {"ns_coefficients": (3.0, -4.7750, 2.0315)}),
             Planted(_TORCH, {"ns_dtype": None}),
             Planted(_TORCH, {"ns_steps": 4}),
             Planted(_TORCH, {"momentum": 0.9}),
             Planted(_AUXILIARY, {"adamw_names": ("*ne", "w2")}),
             Planted(_AUXILIARY, {"adamw_betas": (0.9, 0.99)}),
             Planted(_AUXILIARY, {"adamw_eps": 1e-3})),
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
    case_module="unified_opt.conformance.cases.muon_with_adamw",
    nonfinite={"lr": 0.02},
    params=MATRICES,
)
