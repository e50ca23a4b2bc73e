"""``uo.clip_grad_norm_`` / ``uo.clip_grad_value_`` in one framework's process
(``test_grad_clip.py``): ``python grad_clip_worker.py FRAMEWORK``. Prints one JSON line.

Paddle: float64 and float32 parameters whose gradients are :func:`gradients`, one
parameter without a gradient; the total norms and the clipped gradients, and whether a
reference taken to a gradient before clipping sees the clipped values (in place).
MindSpore: the refusal messages.
"""

import json
import sys

import numpy as np

import unified_opt as uo

SHAPES = ((3, 4), (7,), (0,), (2, 3, 5))


def gradients(scale):
    rng = np.random.default_rng(7)
    return [rng.standard_normal(s) * scale for s in SHAPES]


def paddle_run():
    import paddle
    out = {}
    for dtype in ("float64", "float32"):
        for scale in (1e-3, 50.0):
            params = []
            for g in gradients(scale):
                p = paddle.create_parameter(list(g.shape), dtype)
                (p * paddle.to_tensor(g.astype(dtype))).sum().backward()
                params.append(p)
            extra = paddle.create_parameter([4], dtype)       # no gradient: skipped
            held = params[0].grad
            total = uo.clip_grad_norm_(params + [extra], 1.0)
            norm = {"total": float(total), "dtype": str(total.dtype),
                    "grads": [p.grad.numpy().astype(np.float64).ravel().tolist()
                              for p in params],
                    "in_place": bool(np.array_equal(held.numpy(), params[0].grad.numpy())),
                    "extra": extra.grad is None}
            uo.clip_grad_value_(params, 0.004)
            norm["value"] = [p.grad.numpy().astype(np.float64).ravel().tolist()
                             for p in params]
            out[f"{dtype}-{scale}"] = norm
    return out


def mindspore_run():
    import mindspore as ms
    p = ms.Parameter(ms.Tensor(np.ones(3, np.float32)), name="w")
    out = {}
    for name, call in (("norm", lambda: uo.clip_grad_norm_([p], 1.0)),
                       ("value", lambda: uo.clip_grad_value_([p], 0.5))):
        try:
            call()
            out[name] = None
        except TypeError as exc:
            out[name] = str(exc)
    return out


if __name__ == "__main__":
    run = paddle_run() if sys.argv[1] == "paddle" else mindspore_run()
    print(json.dumps(run))
