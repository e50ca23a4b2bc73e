r"""Deep Gradient Compression momentum (Lin et al., ICLR 2018), as Paddle runs it.

A data-parallel algorithm: :math:`N` workers, worker :math:`r` with gradient
:math:`g_r` (the mean gradient of its own batch). As in Paddle's collective training
the update works on :math:`\tilde g_r = g_r / N`, the worker's share of the global mean.
:math:`t = ` step :math:`- 1` (Paddle's 0-based global step), :math:`t_0 = `
``rampup_begin_step``, momentum :math:`\mu`, L2 coefficient :math:`\lambda`.

**Dense steps** (:math:`t < t_0`, and every step of a parameter with fewer than
``min_numel`` elements), the momentum buffer :math:`u` shared by all workers:

.. math::

    G = \frac{1}{N}\sum_r (N\tilde g_r + \lambda\theta)
        \quad\Big(\text{small parameters: }
            G = \mathrm{clip}_{C_d}\big(\textstyle\sum_r \tilde g_r\big)
        + \lambda\theta\Big), \qquad
    u \leftarrow \mu u + G, \qquad \theta \leftarrow \theta - \eta\,(G + \mu u
        \text{ if Nesterov else } u)

**Sparse steps** (:math:`t \ge t_0`), on each worker: local clipping
:math:`\tilde g_r \leftarrow \tilde g_r \min(1, C\,n^{-1/2} / \lVert\tilde g_r\rVert)`
(``local_grad_clip_norm`` :math:`C`, ``num_trainers`` :math:`n`), :math:`g'_r = N\tilde g_r
+ \lambda\theta`, momentum correction :math:`u_r \leftarrow \mu u_r + g'_r`,
:math:`v_r \leftarrow v_r + u_r` (Nesterov: :math:`u_r \leftarrow \mu(u_r + g'_r)`,
:math:`v_r \leftarrow v_r + u_r + g'_r`), then the :math:`k` entries of largest
:math:`|v_r|` (set :math:`I_r`) are sent and cleared, momentum factor masking included:

.. math::

    k = \lfloor n_\theta (1 - s_t) \rfloor,\quad
    s_t = S\big[\min(\lfloor (t - t_0)\,|S| / T \rfloor, |S| - 1)\big], \qquad
    v_r[I_r] \leftarrow 0,\ u_r[I_r] \leftarrow 0, \qquad
    \theta \leftarrow \theta - \frac{\eta}{N} \sum_r \mathrm{scatter}(I_r, v_r[I_r])

(:math:`S` = ``sparsity``, :math:`T` = ``rampup_step``, :math:`n_\theta` the number of
elements). The sum over workers goes through an :class:`~unified_opt.exchange.Exchange`:
the identity at world size 1 (:meth:`update`), simulated workers in
``uo.reference(spec, params, workers=N)``, and the ranks of a process group: built inside
an initialized ``torch.distributed`` group (``options={"process_group": pg}`` for another
than the default), after ``paddle.distributed.init_parallel_env()`` or after
``mindspore.communication.init()``, each rank is one worker, sends only its (index,
value) pairs and sums everyone's in rank order
(:class:`~unified_opt.exchange.CollectiveExchange`; ``uo.exchange_stats`` counts the
bytes). A launcher's environment saying there are several ranks before the script joins
the group is refused at build.

Args:
    momentum: :math:`\mu` >= 0, the momentum factor (dense steps and the momentum
        correction).
    rampup_begin_step: :math:`t_0`, an int >= 0: the 0-based step the sparse
        (compressed) steps start at; before it every step is dense.
    rampup_step: :math:`T`, an int >= 1: the steps over which ``sparsity`` ramps
        through its values.
    sparsity: :math:`S`, a non-empty list of fractions in [0, 1): the fraction of
        entries kept back at each stage of the ramp (0.999: the top 0.1% is sent).
    use_nesterov: ``True``: the Nesterov forms of both momentum steps; ``False``: not.
    local_grad_clip_norm: :math:`C` > 0: each worker's gradient is clipped to norm
        :math:`C n^{-1/2}` before compression (needs ``num_trainers``); ``None``: no
        local clip.
    num_trainers: :math:`n`, an int >= 1, Paddle's ``nranks``: must equal the world
        size when given; ``None``: the world size.
    dense_clip_norm: > 0: the clip of the summed gradient on dense steps of small
        parameters (Paddle's ordinary ``grad_clip``); ``None``: none.
    weight_decay: :math:`\lambda` >= 0, L2 decay added to each worker's gradient.
    min_numel: an int >= 0: parameters with fewer elements always take dense steps
        (Paddle compresses from 16384).

Differences between frameworks
------------------------------
* Paddle's ``DGCMomentumOptimizer`` (``paddle.distributed.fleet.meta_optimizers``, formerly
  ``paddle.fluid.optimizer``) runs only in static graphs on CUDA; its GPU kernel picks
  the top :math:`k` **approximately** (a threshold from sampled blocks, possibly fewer
  than :math:`k` entries). This spec selects exactly, ties going to the lower index.
  Paddle compresses only float32 parameters of at least 16384 elements
  (``min_numel``); the others run plain momentum with the ordinary ``grad_clip``
  (``dense_clip_norm``) on the averaged gradient. Paddle's ``nranks`` is
  ``num_trainers``: here it must equal the world size when given.
* torch and MindSpore have no DGC. Under torch's ``DistributedDataParallel`` the
  gradients arrive averaged, which is not what DGC compresses: build it on the local
  model in a process group instead (it does its own exchange).
"""

from __future__ import annotations

from typing import Any, ClassVar, Sequence

from .. import _validation as v
from ..exchange import LOCAL, Exchange
from ..ops import Ops
from ..records import record
from ..schedules import Schedule
from ..spec import Spec, State, Tensor, register, spec_dataclass


@register
@spec_dataclass
class DGCMomentum(Spec):
    __doc__ = __doc__
    name = "dgc_momentum"

    #: steps take one gradient per worker and an exchange (``exchange_step``)
    data_parallel: ClassVar[bool] = True

    lr: float | Schedule = 1e-3
    momentum: float = 0.9
    rampup_begin_step: int = 0
    rampup_step: int = 1
    sparsity: tuple[float, ...] = (0.999,)
    use_nesterov: bool = False
    local_grad_clip_norm: float | None = None
    num_trainers: int | None = None
    dense_clip_norm: float | None = None
    weight_decay: float = 0.0
    min_numel: int = 16384

    def _check(self, owner: str) -> dict[str, Any]:
        sparsity = self.sparsity
        if isinstance(sparsity, str) or not isinstance(sparsity, (list, tuple)):
            raise TypeError(f"{owner}: sparsity must be a list or tuple of floats, got "
                            f"{sparsity!r} of type {type(sparsity).__name__}")
        if not sparsity:
            raise ValueError(f"{owner}: sparsity must not be empty, got {sparsity!r}")
        out = {"momentum": v.check_range(owner, "momentum", self.momentum, low=0.0),
               "rampup_begin_step": v.check_int(owner, "rampup_begin_step",
                                                self.rampup_begin_step, low=0),
               "rampup_step": v.check_int(owner, "rampup_step", self.rampup_step, low=1),
               "sparsity": tuple(v.check_range(owner, f"sparsity[{i}]", s, low=0.0, high=1.0,
                                               high_open=True)
                                 for i, s in enumerate(sparsity)),
               "use_nesterov": v.check_bool(owner, "use_nesterov", self.use_nesterov),
               "weight_decay": v.check_range(owner, "weight_decay", self.weight_decay, low=0.0),
               "min_numel": v.check_int(owner, "min_numel", self.min_numel, low=0)}
        for name in ("local_grad_clip_norm", "dense_clip_norm"):
            value = getattr(self, name)
            out[name] = None if value is None else v.check_range(owner, name, value, low=0.0,
                                                                 low_open=True)
        out["num_trainers"] = None if self.num_trainers is None else \
            v.check_int(owner, "num_trainers", self.num_trainers, low=1)
        if out["local_grad_clip_norm"] is not None and out["num_trainers"] is None:
            raise ValueError(f"{owner}: local_grad_clip_norm={self.local_grad_clip_norm!r} "
                             "needs num_trainers (the clip norm is scaled by "
                             "num_trainers ** -0.5)")
        return out

    # -- the schedule --------------------------------------------------------------
    def sparsity_at(self, step: int) -> float | None:
        """The sparsity of 1-based ``step``; None on a dense (warm-up) step."""
        t = step - 1 - self.rampup_begin_step
        if t < 0:
            return None
        index = min(t * len(self.sparsity) // self.rampup_step, len(self.sparsity) - 1)
        return self.sparsity[index]

    def sent_count(self, numel: int, step: int) -> int:
        """How many entries one worker sends for a parameter of ``numel`` elements
        (``numel`` on dense steps and for parameters below ``min_numel``)."""
        sparsity = self.sparsity_at(step)
        if sparsity is None or numel < self.min_numel:
            return numel
        return int(numel * (1.0 - sparsity))

    # -- the math --------------------------------------------------------------------
    def state_names(self, shape: tuple[int, ...] | None = None) -> tuple[str, ...]:
        return ("u", "v")

    def update(self, param: Tensor, grad: Tensor, state: State, *, lr: float, step: int,
               ops: Ops) -> tuple[Tensor, State]:
        """World size 1: the exchange is the identity."""
        new_param, (new_state,) = self.exchange_step(param, [grad], [state], lr=lr, step=step,
                                                     ops=ops, exchange=LOCAL)
        return new_param, new_state

    def exchange_step(self, param: Tensor, grads: Sequence[Tensor], states: Sequence[State],
                      *, lr: float, step: int, ops: Ops,
                      exchange: Exchange) -> tuple[Tensor, list[State]]:
        """One step of this process's workers (``grads``, ``states``: one per local
        worker); ``exchange`` sums over all workers. Returns ``(param, states)``."""
        world = exchange.world_size
        if self.num_trainers is not None and self.num_trainers != world:
            raise ValueError(f"DGCMomentum: num_trainers={self.num_trainers} but the exchange "
                             f"has {world} workers")
        numel = ops.numel(param)
        compressed = numel >= self.min_numel
        shares = [g / float(world) for g in grads] if world != 1 else list(grads)
        if not compressed or self.sparsity_at(step) is None:
            return self._dense(param, shares, states, compressed, lr, world, ops, exchange)
        k = self.sent_count(numel, step)
        sent, new_states = [], []
        for share, state in zip(shares, states):
            if self.local_grad_clip_norm is not None:
                # _check: local_grad_clip_norm needs num_trainers
                trainers: int = self.num_trainers  # type: ignore[assignment]
                share = clip_by_norm(share, self.local_grad_clip_norm * trainers ** -0.5, ops)
            g = self._with_decay(share * float(world) if world != 1 else share, param)
            if self.use_nesterov:
                u = (state["u"] + g) * self.momentum
                accumulated = state["v"] + u + g
            else:
                u = state["u"] * self.momentum + g
                accumulated = state["v"] + u
            mask = ops.topk_mask(ops.abs(accumulated), k)
            zeros = ops.zeros_like(accumulated)
            sent.append(ops.where(mask, accumulated, zeros))
            # momentum factor masking: what was sent leaves both buffers
            new_states.append({"u": ops.where(mask, zeros, u),
                               "v": ops.where(mask, zeros, accumulated)})
        total = exchange.sum_sparse(sent)
        if world != 1:
            total = total / float(world)
        return param - total * lr, new_states

    def _dense(self, param, shares, states, compressed, lr, world, ops, exchange):
        if compressed:      # Paddle's dgc op: N g + decay per worker, summed, / N
            scaled = [share * float(world) if world != 1 else share for share in shares]
            total = exchange.sum_dense([self._with_decay(s, param) for s in scaled])
            gradient = total / float(world) if world != 1 else total
        else:               # plain Momentum on the all-reduced gradient
            gradient = exchange.sum_dense(shares)
            if self.dense_clip_norm is not None:
                gradient = clip_by_norm(gradient, self.dense_clip_norm, ops)
            gradient = self._with_decay(gradient, param)
        u = states[0]["u"] * self.momentum + gradient   # the same on every worker
        direction = gradient + u * self.momentum if self.use_nesterov else u
        return param - direction * lr, [{"u": u, "v": state["v"]} for state in states]

    def _with_decay(self, gradient, param):
        return gradient + param * self.weight_decay if self.weight_decay != 0.0 else gradient

    def alternatives(self) -> list[tuple[str, Spec]]:
        return [(f"use_nesterov={not self.use_nesterov}",
                 self.replace(use_nesterov=not self.use_nesterov)),
                (f"rampup_begin_step={self.rampup_begin_step + 1} (schedule one step later)",
                 self.replace(rampup_begin_step=self.rampup_begin_step + 1))]


def clip_by_norm(x, max_norm: float, ops):
    """``x * max_norm / ||x||`` when ``||x|| > max_norm``, else ``x`` unchanged."""
    norm = ops.norm(x)
    return x * (max_norm / ops.maximum(norm, ops.full_like(norm, max_norm)))


RECORD = record(DGCMomentum,
                case_module="unified_opt.conformance.cases.communication",
                nonfinite={"lr": 0.05})
