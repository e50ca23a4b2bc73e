"""``unified-opt port`` of a torch script keeps the script's code and maps only framework
calls (``unified_opt.porting.mapper``): what each call becomes, that nothing is read or
baked in while porting (each of the silent changes a port used to make is a test here,
run on torch with what the port wrote), and that whatever is not mapped is marked in
place, every reason in one run, with exit status 1."""

import textwrap

import pytest
import torch

import unified_opt as uo
import unified_opt.porting
from unified_opt import cli
from unified_opt.backend import record_of
from unified_opt.porting.script import port_source

MARK = "# unified-opt port: not ported: "


def _port(source: str, to: str = "paddle"):
    return port_source(textwrap.dedent(source), to)


def _run(code: str, **namespace) -> dict:
    """Execute ported code here (torch parameters: ``uo.build`` builds on torch), as the
    script would run it."""
    namespace = {"__name__": "ported", **namespace}
    exec(compile(code, "ported.py", "exec"), namespace)
    return namespace


def _model():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Embedding(7, 4), torch.nn.Linear(4, 3),
                               torch.nn.LayerNorm(3))


# -- what each call becomes -----------------------------------------------------------

def test_an_optimizer_keeps_its_expressions_and_becomes_its_preset():
    ported = _port("""\
        import torch
        def make(model, lr, betas):
            return torch.optim.AdamW(model.parameters(), lr, betas, weight_decay=lr / 10)
        """)
    assert ported.refusals == []
    assert ("    return uo.build(uo.preset('torch.optim.AdamW', lr=lr, betas=betas, "
            "weight_decay=lr / 10), model.parameters())") in ported.source
    optimizer = _run(ported.source)["make"](_model(), 0.03, (0.8, 0.9))
    assert record_of(optimizer).spec == uo.preset("torch.optim.AdamW", lr=0.03,
                                                  betas=(0.8, 0.9), weight_decay=0.003)


@pytest.mark.parametrize("to, expected", [
    ("paddle", ["model.named_parameters()", "model.sublayers(include_self=True)",
                "model.named_sublayers(include_self=True)",
                "m.named_parameters(include_sublayers=False)", "p.size",
                "isinstance(m, (paddle.nn.Linear, paddle.nn.LayerNorm))",
                "uo.clip_grad_norm_(model.parameters(), 1.0)"]),
    ("mindspore", ["uo.porting.named_parameters(model)",
                   "(cell for _, cell in model.cells_and_names())",
                   "model.cells_and_names()", "uo.porting.named_parameters(m, recurse=False)",
                   "p.numel()", "isinstance(m, (mindspore.nn.Dense, mindspore.nn.LayerNorm))",
                   "uo.porting.check_clip_in_step(opt, model.trainable_params(), 1.0)"]),
])
def test_parameter_selection_classes_and_clips_are_the_targets(to, expected):
    ported = _port("""\
        import torch
        from torch import nn
        def make(model):
            a = [p for n, p in model.named_parameters() if p.dim() >= 2 and p.requires_grad]
            b = list(model.modules())
            c = [n for n, m in model.named_modules()]
            d = [n for m in b for n, p in m.named_parameters(recurse=False)]
            e = sum(p.numel() for p in a)
            f = [m for m in b if isinstance(m, (nn.Linear, torch.nn.LayerNorm))]
            return torch.optim.SGD(model.parameters(), lr=0.1)
        opt = make(model)
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        """, to)
    assert ported.refusals == []
    for code in expected:
        assert code in ported.source, (code, ported.source)
    assert f"import {to}\nimport unified_opt as uo" in ported.source


def test_schedulers_become_uo_lr_scheduler_and_their_steps_stay():
    source = """\
        import torch
        from torch.optim.lr_scheduler import LinearLR, CosineAnnealingLR, SequentialLR
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        warm = LinearLR(opt, start_factor=0.1, total_iters=5)
        sched = SequentialLR(opt, [warm, CosineAnnealingLR(opt, T_max=20)], milestones=[5])
        for _ in range(3):
            opt.step()
            sched.step()
        """
    ported = _port(source)
    assert ported.refusals == []
    assert "warm = uo.lr_scheduler.LinearLR(opt, start_factor=0.1, total_iters=5)" in \
        ported.source
    assert ("sched = uo.lr_scheduler.SequentialLR(opt, [warm, uo.lr_scheduler."
            "CosineAnnealingLR(opt, T_max=20)], milestones=[5])") in ported.source
    assert ported.source.endswith("    opt.step()\n    sched.step()\n")


def test_optimizer_state_save_and_load_become_uo_state_files():
    ported = _port("""\
        import torch
        opt = torch.optim.Adam(model.parameters(), lr=1e-3)
        torch.save(opt.state_dict(), path)
        opt.load_state_dict(torch.load(path))
        """)
    assert "uo.save_state(opt, path)" in ported.source
    assert "uo.load_state(opt, path)" in ported.source


def test_a_fused_signature_test_reads_torchs_signature_without_torch():
    ported = _port("""\
        import inspect, torch
        fused = "fused" in inspect.signature(torch.optim.AdamW).parameters
        extra = dict(fused=True) if fused else dict()
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3, **extra)
        """)
    assert ported.refusals == []        # it was refused as an alias
    assert "uo.porting.torch_signature('torch.optim.AdamW').parameters" in ported.source
    signature = uo.porting.torch_signature("torch.optim.AdamW")
    assert list(signature.parameters)[:2] == ["params", "lr"] and "fused" in \
        signature.parameters
    # **extra is checked where it is known, at run time, by the preset: fused chooses
    # torch's kernel, not the numbers: warned about, not carried
    with pytest.warns(UserWarning, match="fused=True chooses an implementation"):
        optimizer = _run(ported.source, model=_model())["opt"]
    assert record_of(optimizer).spec == uo.preset("torch.optim.AdamW", lr=1e-3)
    with pytest.raises(TypeError, match=r"unexpected keyword argument\(s\) \['fusd'\]"):
        _run(ported.source.replace("dict(fused=True)", "dict(fusd=True)"), model=_model())


# -- the silent changes a port used to make ----------------------------------------------

def test_a_function_parameter_is_not_read_as_the_global_it_shadows():
    """A function's parameter LR was read as the module-level LR (0.1 where 0.5 came)."""
    ported = _port("""\
        import torch
        LR = 0.1
        def make(model, LR):
            return torch.optim.SGD(model.parameters(), lr=LR)
        """)
    assert "lr=LR" in ported.source and "0.1)" not in ported.source.split("def make")[1]
    optimizer = _run(ported.source)["make"](_model(), 0.5)
    assert optimizer.param_groups[0]["lr"] == 0.5
    assert record_of(optimizer).spec.lr == 0.5


def test_a_scheduler_in_a_helper_never_called_attaches_to_nothing():
    """A StepLR in a helper never called was attached to the module's optimizer."""
    ported = _port("""\
        import torch
        def unused(optimizer):
            return torch.optim.lr_scheduler.StepLR(optimizer, step_size=2, gamma=0.1)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        for _ in range(6):
            model(x).sum().backward()
            opt.step()
        """)
    assert "return uo.lr_scheduler.StepLR(optimizer, step_size=2, gamma=0.1)" in ported.source
    assert "opt = uo.build(uo.preset('torch.optim.SGD', lr=0.1), model.parameters())" in \
        ported.source
    model = torch.nn.Linear(3, 1)
    namespace = _run(ported.source, model=model, x=torch.ones(2, 3))
    assert namespace["opt"].param_groups[0]["lr"] == 0.1        # no decay was added


def test_a_param_groups_loop_stays_and_drives_the_ported_optimizer():
    """The loop was left while the optimizer lost param_groups (AttributeError), and a
    user deleting it trained at a constant lr."""
    source = """\
        import torch
        opt = torch.optim.AdamW(model.parameters(), lr=1.0, weight_decay=0.1)
        for it in range(5):
            for group in opt.param_groups:
                group["lr"] = 0.01 * (it + 1)
            model.weight.grad = torch.full_like(model.weight, 0.5)
            opt.step()
        """
    ported = _port(source)
    assert "    for group in opt.param_groups:\n        group[\"lr\"] = 0.01 * (it + 1)" \
        in ported.source
    ours, theirs = torch.nn.Linear(2, 1, bias=False), torch.nn.Linear(2, 1, bias=False)
    theirs.load_state_dict(ours.state_dict())
    start = ours.weight.detach().clone()
    optimizer = _run(ported.source, model=ours)["opt"]
    _run(textwrap.dedent(source), model=theirs)          # torch's own AdamW
    assert optimizer.param_groups[0]["lr"] == pytest.approx(0.05)
    torch.testing.assert_close(ours.weight, theirs.weight, rtol=0, atol=1e-7)
    # five steps of Adam at lrs 0.01..0.05 move each weight by about their sum
    moved = (start - ours.weight.detach()).abs()
    assert torch.all((moved > 0.13) & (moved < 0.16)), moved


def test_another_librarys_scheduler_is_marked_not_left_silently(tmp_path, capsys):
    script = tmp_path / "train.py"
    script.write_text(textwrap.dedent("""\
        import torch
        from timm.scheduler import CosineLRScheduler
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        sched = CosineLRScheduler(opt, t_initial=10)
        """))
    out = tmp_path / "out.py"
    assert cli.main(["port", str(script), "--to", "paddle", "-o", str(out)]) == 1
    assert f"{script}:4: cannot port: timm.scheduler.CosineLRScheduler is handed the " \
           "optimizer opt" in capsys.readouterr().err
    lines = out.read_text().splitlines()
    index = lines.index("sched = CosineLRScheduler(opt, t_initial=10)")
    assert lines[index - 1].startswith(MARK + "timm.scheduler.CosineLRScheduler")


def test_values_a_configurator_overrides_are_read_at_run_time(tmp_path):
    """nanoGPT's exec(open('configurator.py').read()) overrides: the port baked the
    defaults in."""
    config = tmp_path / "config.py"
    config.write_text("learning_rate = 0.5\nweight_decay = 0.25\n")
    ported = _port(f"""\
        import torch
        learning_rate = 6e-4
        weight_decay = 0.1
        exec(open({str(config)!r}).read())
        opt = torch.optim.AdamW(model.parameters(), lr=learning_rate,
                                weight_decay=weight_decay)
        """)
    assert "6e-4" not in ported.source.split("exec(")[1]
    optimizer = _run(ported.source, model=_model())["opt"]
    assert record_of(optimizer).spec == uo.preset("torch.optim.AdamW", lr=0.5,
                                                  weight_decay=0.25)


# -- what is not mapped: marked in place, all in one run ----------------------------------

def test_every_reason_is_marked_in_place_in_one_run():
    source = textwrap.dedent("""\
        import functools, torch
        OptCls = torch.optim.AdamW
        make = functools.partial(torch.optim.SGD, lr=0.1)
        opt = torch.optim.SparseAdam(model.parameters())
        opt2 = torch.optim.Adam(*args)
        s = torch.optim.lr_scheduler.NoSuchLR(opt)
        scaler = torch.amp.GradScaler()
        ok = torch.optim.SGD(model.parameters(), lr=0.1)
        class Mine(torch.optim.lr_scheduler.LRScheduler):
            pass
        """)
    ported = port_source(source, "mindspore")
    lines = [line for line, _ in ported.refusals]
    assert lines == [2, 3, 4, 5, 6, 7, 9], ported.refusals
    # each statement left as written, its reason right above it
    out = ported.source.splitlines()
    for line, message in ported.refusals:
        assert out[out.index(source.splitlines()[line - 1]) - 1] == MARK + message
    assert "ok = uo.build(uo.preset('torch.optim.SGD', lr=0.1), model.trainable_params())" \
        in ported.source


@pytest.mark.parametrize("loop, words", [
    # the clip's max_norm is the helper's parameter: not what the builder sees
    ("def step(model, opt, clip):\n"
     "    torch.nn.utils.clip_grad_norm_(model.parameters(), clip)\n    opt.step()\n",
     "max_norm=clip is bound otherwise where the optimizer is built"),
    ("def step(model, opt):\n"
     "    torch.nn.utils.clip_grad_norm_(model.parameters(), CLIP)\n"
     "    print('clipped')\n    opt.step()\n", "the next statement is not the optimizer"),
    ("def step(model, opt):\n"
     "    torch.nn.utils.clip_grad_norm_(model.parameters(), CLIP, norm_type=1)\n"
     "    opt.step()\n", "norm_type=1"),
    ("def step(model, opt):\n"
     "    torch.nn.utils.clip_grad_value_(model.parameters(), CLIP)\n    opt.step()\n",
     "clip by value"),
    # nanoGPT's `if grad_clip != 0.0:` around its clip: a grad_clip would clip always
    ("def step(model, opt):\n    if CLIP != 0.0:\n"
     "        torch.nn.utils.clip_grad_norm_(model.parameters(), CLIP)\n    opt.step()\n",
     "it runs under an if: moved into the optimizer, the clip would run at every"),
], ids=["parameter", "not-before-step", "norm-type", "value", "under-an-if"])
def test_to_mindspore_a_clip_the_optimizer_cannot_take_exactly_is_marked(loop, words):
    source = ("import torch\nCLIP = 1.0\n"
              "def make(model):\n    return torch.optim.SGD(model.parameters(), lr=0.1)\n"
              + loop)
    ported = port_source(source, "mindspore")
    assert len(ported.refusals) == 1 and words in ported.refusals[0][1], ported.refusals
    assert "grad_clip" not in ported.source
    to_paddle = port_source(source, "paddle").refusals      # Paddle keeps gradients
    if "norm_type" in loop:     # but uo.clip_grad_norm_ takes the 2-norm only
        assert len(to_paddle) == 1 and "norm_type=1: the spec's clip" in to_paddle[0][1]
        # left as written, not rewritten into a call that raises
        assert "    torch.nn.utils.clip_grad_norm_(model.parameters(), CLIP, norm_type=1)\n" \
            in port_source(source, "paddle").source
    else:
        assert to_paddle == []


def test_to_mindspore_a_clip_before_the_step_moves_into_the_optimizer():
    source = ("import torch\nCLIP = 0.5\n"
              "def make(model):\n    return torch.optim.SGD(model.parameters(), lr=0.1)\n"
              "def step(model, opt):\n"
              "    torch.nn.utils.clip_grad_norm_(model.parameters(), CLIP)\n"
              "    opt.step()\n")
    ported = port_source(source, "mindspore")
    assert ported.refusals == []
    assert (".replace(grad_clip=uo.ClipByGlobalNorm(max_norm=CLIP, eps=1e-6)), "
            "model.trainable_params())") in ported.source
    assert "    uo.porting.check_clip_in_step(opt, model.trainable_params(), CLIP)\n" \
           "    opt.step()" in ported.source
    assert any("optimizer's grad_clip now" in note for note in ported.notes)


def test_to_mindspore_a_clip_before_a_step_of_self_optimizer_moves_into_it():
    """minGPT's Trainer steps ``self.optimizer``: the step right after the clip was not
    recognised ("the next statement is not the optimizer's .step()")."""
    source = ("import torch\n"
              "class Trainer:\n"
              "    def __init__(self, model):\n"
              "        self.model = model\n"
              "        self.optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)\n"
              "    def step(self):\n"
              "        torch.nn.utils.clip_grad_norm_(self.model.parameters(), 1.0)\n"
              "        self.optimizer.step()\n")
    ported = port_source(source, "mindspore")
    assert ported.refusals == []
    assert ".replace(grad_clip=uo.ClipByGlobalNorm(max_norm=1.0, eps=1e-6))" in ported.source
    assert ("        uo.porting.check_clip_in_step(self.optimizer, "
            "self.model.trainable_params(), 1.0)\n        self.optimizer.step()") in ported.source


def test_a_model_s_zero_grad_does_not_make_it_an_optimizer():
    """A Module has zero_grad too: ``model.zero_grad()`` made the port take ``model`` for
    an optimizer and mark a call of another library handed it ("is handed the optimizer
    model", exit 1). An optimizer-like variable handed to one is still marked."""
    source = ("import torch\nfrom helper_lib import describe\n"
              "model = torch.nn.Linear(4, 2)\n"
              "opt = torch.optim.AdamW(model.parameters(), lr=1e-3)\n"
              "model.zero_grad(set_to_none=True)\nopt.step()\ndescribe(model)\n")
    assert port_source(source, "paddle").refusals == []
    handed = port_source(source.replace("describe(model)", "describe(opt)"), "paddle")
    assert [line for line, _ in handed.refusals] == [7]
    assert "is handed the optimizer opt" in handed.refusals[0][1]


def test_an_optimizer_s_state_in_a_checkpoint_dict_or_read_directly_is_marked():
    """The ImageNet example's resume (``optimizer.load_state_dict(checkpoint["optimizer"])``
    of a ``torch.load``-ed dict) and save (``torch.save({"optimizer":
    optimizer.state_dict(), ...}, f)``), and a read of ``optimizer.state[p]``, were left
    as written, exit 0: on the target the optimizer's state_dict() is unified-opt's
    portable form of the target's tensors, which torch.load(weights_only=True) refuses,
    and it has no ``.state``. Each is marked, naming uo.save_state / uo.load_state; the
    direct forms are still rewritten to them."""
    source = ("import torch\nmodel = torch.nn.Linear(4, 2)\n"
              "opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)\n"
              "checkpoint = torch.load('ck.pth')\n"
              "opt.load_state_dict(checkpoint['optimizer'])\n"
              "print(opt.state[model.weight]['momentum_buffer'])\n"
              "torch.save({'optimizer': opt.state_dict(), 'epoch': 3}, 'ck.pth')\n"
              "torch.save(opt.state_dict(), 'opt.pth')\n"
              "opt.load_state_dict(torch.load('opt.pth'))\n")
    for target in ("paddle", "mindspore"):
        ported = port_source(source, target)
        refused = dict(ported.refusals)
        assert sorted(refused) == [5, 6, 7], ported.refusals
        assert refused[5].startswith("opt.load_state_dict(...) of something other than "
                                     "torch.load(f) (a checkpoint's entry)")
        assert refused[6].startswith(f"opt.state: torch's per-parameter state; the optimizer "
                                     f"built on {target} keeps its state in {target}'s form")
        assert refused[7].startswith(f"torch.save of opt.state_dict() inside another object: "
                                     f"on {target} it is unified-opt's portable form")
        assert all("uo.save_state(opt, path) / uo.load_state(opt, path)" in m
                   for m in refused.values())
        assert "uo.save_state(opt, 'opt.pth')" in ported.source
        assert "uo.load_state(opt, 'opt.pth')" in ported.source


def test_a_checkpoint_dict_bound_to_a_name_before_it_is_saved_is_marked():
    """A GPT training script builds its checkpoint in a variable (``checkpoint =
    {..., 'optimizer': optimizer.state_dict(), ...}``, then ``torch.save(checkpoint,
    path)``) and resumes from ``checkpoint = torch.load(path)``: the save was left as
    written, exit 0, while the same dict written inline was marked. The name is followed
    within its function (or the module): a dict literal, ``dict(...)``, an entry written
    into it later; each save is marked with the inline form's message, the resume too."""
    source = textwrap.dedent("""\
        import os
        import torch
        net = torch.nn.Linear(4, 2)
        optimizer = torch.optim.AdamW(net.parameters(), lr=1e-3)
        if os.path.exists('run.pt'):
            checkpoint = torch.load('run.pt', map_location='cpu')
            net.load_state_dict(checkpoint['net'])
            optimizer.load_state_dict(checkpoint['optimizer'])
        def save(step):
            checkpoint = {'net': net.state_dict(), 'optimizer': optimizer.state_dict(),
                          'step': step}
            torch.save(checkpoint, 'run.pt')
            state = dict(net=net.state_dict(), optimizer=optimizer.state_dict())
            torch.save(state, 'state.pt')
            extra = {'step': step}
            extra['optimizer'] = optimizer.state_dict()
            torch.save(extra, 'extra.pt')
            weights = {'net': net.state_dict()}
            torch.save(weights, 'weights.pt')
        torch.save({'optimizer': optimizer.state_dict()}, 'inline.pt')
        """)
    for target in ("paddle", "mindspore"):
        ported = port_source(source, target)
        refused = dict(ported.refusals)
        assert sorted(refused) == [8, 12, 14, 17, 20], ported.refusals
        assert refused[8].startswith("optimizer.load_state_dict(...) of something other "
                                     "than torch.load(f) (a checkpoint's entry)")
        assert refused[20].startswith("torch.save of optimizer.state_dict() inside another "
                                      f"object: on {target} it is unified-opt's portable form")
        assert refused[12] == refused[14] == refused[17] == refused[20]
        out = ported.source.splitlines()
        for line, message in ported.refusals:     # left as written, marked above it
            assert out[out.index(source.splitlines()[line - 1]) - 1].endswith(
                MARK.strip() + " " + message)


def test_a_read_of_the_state_dict_s_torch_entries_is_marked():
    """``opt.state_dict()["param_groups"][0]["lr"]`` (a logging line of public scripts) and
    ``sd["state"]`` after ``sd = opt.state_dict()`` were left as written, exit 0: the
    optimizer uo.build makes gives the portable form, without either entry (KeyError at
    run time, shown below on torch). Each is marked, naming what to read instead."""
    source = ("import torch\nmodel = torch.nn.Linear(4, 2)\n"
              "opt = torch.optim.AdamW(model.parameters(), lr=1e-3)\n"
              "print(opt.state_dict()['param_groups'][0]['lr'])\n"
              "sd = opt.state_dict()\n"
              "print(len(sd['state']))\n"
              "print(sd['format'], model.state_dict()['weight'])\n")
    for target in ("paddle", "mindspore"):
        ported = port_source(source, target)
        refused = dict(ported.refusals)
        assert sorted(refused) == [4, 6], ported.refusals
        assert refused[4].startswith("opt.state_dict()'s 'param_groups' entry: the optimizer "
                                     f"built on {target} gives unified-opt's portable form")
        assert "read opt.param_groups" in refused[4]
        assert refused[6].startswith("opt.state_dict()'s 'state' entry: torch's per-parameter "
                                     "state by index")
        assert "uo.save_state(opt, path) / uo.load_state(opt, path)" in refused[6]
    built = uo.build(uo.preset("torch.optim.AdamW", lr=1e-3), torch.nn.Linear(4, 2).parameters())
    assert set(built.state_dict()) == {"format", "metadata", "tensors"}
    assert built.param_groups[0]["lr"] == 1e-3


def test_a_method_of_another_library_s_object_handed_the_optimizer_is_marked():
    """The Hugging Face no-trainer scripts hand the optimizer to
    ``accelerator.prepare(model, optimizer, ...)`` (accelerate wraps torch's optimizer
    API): the port left it unmarked, exit 0. A method of an object built from another
    library's class is that library's call; one of the script's own objects is not."""
    source = ("import torch\nfrom accelerate import Accelerator\n"
              "accelerator = Accelerator()\nmodel = torch.nn.Linear(4, 2)\n"
              "opt = torch.optim.AdamW(model.parameters(), lr=1e-3)\n"
              "model, opt = accelerator.prepare(model, opt)\n"
              "class Logger:\n    def watch(self, optimizer):\n        pass\n"
              "logger = Logger()\nlogger.watch(opt)\naccelerator.backward(model)\n")
    for target in ("paddle", "mindspore"):
        ported = port_source(source, target)
        assert [line for line, _ in ported.refusals] == [6], ported.refusals
        assert ported.refusals[0][1].startswith(
            "accelerate.Accelerator(...).prepare is handed the optimizer opt")
    # transformers' Trainer takes it inside a tuple (it steps and schedules it itself)
    trainer = ("import torch\nfrom transformers import Trainer\n"
               "model = torch.nn.Linear(4, 2)\n"
               "opt = torch.optim.AdamW(model.parameters(), lr=1e-3)\n"
               "trainer = Trainer(model=model, optimizers=(opt, None))\n")
    ported = port_source(trainer, "paddle")
    assert [line for line, _ in ported.refusals] == [5], ported.refusals
    assert ported.refusals[0][1].startswith("transformers.Trainer is handed the optimizer opt")


def test_check_clip_in_step_refuses_another_clip_or_other_parameters():
    model = _model()
    spec = uo.SGD(lr=0.1, grad_clip=uo.ClipByGlobalNorm(max_norm=0.5, eps=1e-6))
    optimizer = uo.build(spec, model.parameters())
    uo.porting.check_clip_in_step(optimizer, model.parameters(), 0.5)
    with pytest.raises(ValueError, match="clips with .*max_norm=0.5.* the script with "
                                         ".*max_norm=1.0"):
        uo.porting.check_clip_in_step(optimizer, model.parameters(), 1.0)
    with pytest.raises(ValueError, match="steps 0 parameter.* clips 1 it does not step"):
        uo.porting.check_clip_in_step(optimizer, [*model.parameters(), torch.ones(1)], 0.5)


def test_the_fixtures_port_with_nothing_marked_and_exit_0(tmp_path, capsys):
    from pathlib import Path

    for fixture in sorted((Path(__file__).parent / "port_fixtures").glob("*.py")):
        for to in ("paddle", "mindspore"):
            out = tmp_path / f"{fixture.stem}_{to}.py"
            assert cli.main(["port", str(fixture), "--to", to, "-o", str(out)]) == 0, \
                capsys.readouterr().err
            assert MARK not in out.read_text()
            compile(out.read_text(), str(out), "exec")


def test_imports_only_mapped_code_read_are_removed_and_said():
    ported = _port("""\
        import math
        import torch
        from torch.optim import AdamW, SGD
        from transformers import get_linear_schedule_with_warmup as warmup
        opt = AdamW(model.parameters(), lr=math.pi / 100)
        sched = warmup(opt, num_warmup_steps=2, num_training_steps=10)
        keep = isinstance(opt, SGD)
        """)
    assert ported.source.splitlines()[:4] == [
        "import math", "import torch", "from torch.optim import SGD", "import unified_opt as uo"]
    assert "sched = uo.lr_scheduler.get_linear_schedule_with_warmup(opt, " \
           "num_warmup_steps=2, num_training_steps=10)" in ported.source
    assert [n for n in ported.notes if "import" in n] == [
        "line 3: the import of AdamW is removed: every use of it was mapped",
        "line 4: the import of warmup is removed: every use of it was mapped"]


def test_named_parameters_takes_a_mindspore_cell_only():
    with pytest.raises(TypeError, match="module must be a MindSpore Cell, got Sequential"):
        list(uo.porting.named_parameters(_model()))
    with pytest.raises(ValueError, match="qualified_name must name a torch optimizer class"):
        uo.porting.torch_signature("torch.optim.NoSuch")
