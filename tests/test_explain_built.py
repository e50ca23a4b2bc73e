"""``uo.explain(optimizer)`` of a built optimizer says how its groups and pre-step were
lowered, as docs/training.md promises; a native class's non-finite caveat that depends
on a flag (Paddle's amsgrad) is said only where the spec sets it (issue 22)."""

from conftest import require

import unified_opt as uo


@require("torch")
def test_a_built_torch_optimizer_explains_its_groups_and_clipping():
    import torch

    model = torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.LayerNorm(2))
    spec = uo.AdamW(lr=0.1, grad_clip=uo.ClipByGlobalNorm(max_norm=1.0))
    rules = [uo.Group(match=("*bias*", "1.*"), weight_decay=0.0),
             uo.Group(match="0.weight", lr_scale=0.5, exclude_from=("grad_clip",))]
    decision = uo.explain(uo.build(spec, model, groups=rules, path="native"))
    assert decision.path == "native" and decision.native == "torch.optim.AdamW"
    text = str(decision).splitlines()
    assert "  groups: 2 rules over 4 parameters, lowered to 2 param groups of the " \
           "optimizer" in text, text
    assert "    uo.Group(match=['*bias*', '1.*'], weight_decay=0.0): 3 parameters " \
           "(0.bias, 1.weight, 1.bias)" in text
    assert "    uo.Group(match='0.weight', lr_scale=0.5, exclude_from=['grad_clip']): " \
           "1 parameter (0.weight)" in text
    assert "    the spec's own values: 0 parameters" in text
    assert text[-1] == ("  pre-step: grad_clip=ClipByGlobalNorm(max_norm=1.0, eps=0.0, "
                        "per_group=False) over 3 parameters (1 excluded by a group); run by "
                        "a step pre-hook on torch.optim.AdamW, before its step")
    own = str(uo.explain(uo.build(uo.SGD(lr=0.1, loss_scale=8.0), model, path="own")))
    assert own.endswith("  groups: none (all 4 parameters run the spec's own values)\n"
                        "  pre-step: loss_scale=8.0 (gradients unscaled first); run in the "
                        "own step before the update (unified_opt.pre_step)")


def test_paddle_amsgrad_caveat_only_with_amsgrad():
    from unified_opt.backend import load

    # the lowering table's decision (the native class), whatever a speed preference picks
    decide = load("paddle").decide
    without = decide(uo.AdamW(lr=0.1)).reason
    assert without.startswith("paddle.optimizer.AdamW computes exactly this spec")
    assert "amsgrad" not in without
    assert "with a non-finite gradient it departs: with amsgrad" in decide(
        uo.AdamW(lr=0.1, amsgrad=True)).reason
