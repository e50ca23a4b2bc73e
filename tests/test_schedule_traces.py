"""A schedule is never frozen silently (issue 22): a torch optimizer whose param groups
carry a scheduler's traces (``initial_lr``, ``max_lr``, ``base_momentum``, ...) is
refused by ``uo.from_native``, ``uo.save_state`` and ``uo.convert_checkpoint`` without
its scheduler, naming the keys, unless ``constant_lr=True``; Paddle's optimizer given
the very scheduler it holds is read as without one, another scheduler is refused."""

import pytest
from conftest import require

import unified_opt as uo


def _torch_one_cycle():
    import torch

    model = torch.nn.Linear(3, 2)
    opt = torch.optim.AdamW(model.parameters(), lr=0.01, weight_decay=0.1)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=0.01, total_steps=20)
    for _ in range(3):
        for p in model.parameters():
            p.grad = torch.ones_like(p)
        opt.step()
        sched.step()
    return model, opt, sched


@require("torch")
def test_a_torch_optimizer_with_scheduler_traces_is_refused_without_its_scheduler(tmp_path):
    model, opt, sched = _torch_one_cycle()
    for call in (lambda: uo.from_native(opt),
                 lambda: uo.save_state(opt, tmp_path / "a.safetensors", names=model),
                 lambda: uo.convert_checkpoint(opt.state_dict(), tmp_path / "b.safetensors",
                                               optimizer=opt, names=model)):
        with pytest.raises(ValueError, match=r"'initial_lr', 'max_lr', 'min_lr', "
                                             r"'base_momentum', 'max_momentum'.*constant_lr"):
            call()
    assert not (tmp_path / "a.safetensors").exists()
    # with its scheduler: the schedule; with constant_lr=True: today's lr and beta1
    spec, _ = uo.from_native(opt, sched)
    assert isinstance(spec.lr, uo.schedules.OneCycle)
    frozen, _ = uo.from_native(opt, constant_lr=True)
    assert frozen.lr == opt.param_groups[0]["lr"]
    assert frozen.betas[0] == opt.param_groups[0]["betas"][0] != 0.9
    uo.save_state(opt, tmp_path / "c.safetensors", names=model, lr_scheduler=sched)
    with pytest.raises(TypeError, match="constant_lr must be a bool"):
        uo.from_native(opt, constant_lr="yes")


@require("torch")
def test_a_plain_torch_optimizer_needs_no_flag():
    import torch

    opt = torch.optim.SGD(torch.nn.Linear(2, 2).parameters(), lr=0.1)
    spec, groups = uo.from_native(opt)
    assert spec.lr == 0.1 and groups == []


@require("paddle")
def test_paddle_accepts_the_scheduler_it_holds_and_refuses_another(tmp_path):
    import paddle

    layer = paddle.nn.Linear(3, 2)
    sched = paddle.optimizer.lr.CosineAnnealingDecay(learning_rate=0.01, T_max=10)
    opt = paddle.optimizer.AdamW(learning_rate=sched, parameters=layer.parameters(),
                                 weight_decay=0.1)
    alone = uo.from_native(opt)
    assert uo.from_native(opt, sched) == alone
    assert isinstance(alone[0].lr, uo.schedules.Cosine)
    uo.save_state(opt, tmp_path / "held.safetensors", lr_scheduler=sched)
    other = paddle.optimizer.lr.CosineAnnealingDecay(learning_rate=0.01, T_max=10)
    with pytest.raises(TypeError, match="is not the one it holds"):
        uo.from_native(opt, other)
    with pytest.raises(TypeError, match="is not the one it holds"):
        uo.save_state(opt, tmp_path / "other.safetensors", lr_scheduler=other)
