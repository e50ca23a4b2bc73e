"""``uo.convert_checkpoint`` for torch: files of ``optimizer.state_dict()`` and
``scheduler.state_dict()`` written by ``torch.save``, loaded into the optimizer rebuilt as
the script builds it (``weights_only=True``: no code runs), give the state file that
``uo.save_state`` writes of the live run; what is not such a file is refused."""

import pickle

import numpy as np
import pytest

import unified_opt as uo
from unified_opt.conformance.cases import DENSE_PARAMS, Case
from unified_opt.porting.state import read_state

torch = pytest.importorskip("torch")
CASE = Case(id="checkpoints", spec=uo.AdamW(), params=DENSE_PARAMS, steps=50)


def _script(steps: int):
    """A user's torch AdamW + OneCycleLR, ``steps`` steps in."""
    params = [(n, torch.nn.Parameter(torch.from_numpy(a)))
              for n, a in CASE.initial_params().items()]
    optimizer = torch.optim.AdamW([p for _, p in params], lr=1e-3, weight_decay=0.05)
    scheduler = torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=0.01, total_steps=50)
    for t in range(steps):
        for n, p in params:
            p.grad = torch.from_numpy(CASE.gradients(t)[n])
        optimizer.step()
        scheduler.step()
    return params, optimizer, scheduler


def test_a_torch_checkpoint_becomes_the_live_run_s_state_file(tmp_path):
    params, optimizer, scheduler = _script(9)
    torch.save(optimizer.state_dict(), tmp_path / "opt.pt")
    torch.save(scheduler.state_dict(), tmp_path / "sched.pt")
    uo.save_state(optimizer, tmp_path / "live.safetensors", lr_scheduler=scheduler,
                  names=params)
    fresh_params, fresh, fresh_scheduler = _script(0)
    uo.convert_checkpoint(tmp_path / "opt.pt", tmp_path / "converted.safetensors",
                          optimizer=fresh, lr_scheduler=fresh_scheduler,
                          scheduler_checkpoint=tmp_path / "sched.pt", names=fresh_params)
    live, converted = (read_state(tmp_path / f) for f in ("live.safetensors",
                                                          "converted.safetensors"))
    assert (converted.spec, converted.steps, converted.position) == (live.spec, 9, 9)
    assert converted.spec.lr.cycle_momentum
    for name in live.names:
        assert converted.param_steps[name] == 9
        for key, array in live.arrays[name].items():
            np.testing.assert_array_equal(converted.arrays[name][key], array)


def _sgd(steps: int, scheduled: bool):
    params = [(n, torch.nn.Parameter(torch.from_numpy(a)))
              for n, a in CASE.initial_params().items()]
    optimizer = torch.optim.SGD([p for _, p in params], lr=0.1, momentum=0.9)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, 2) if scheduled else None
    for t in range(steps):
        for n, p in params:
            p.grad = torch.from_numpy(CASE.gradients(t)[n])
        optimizer.step()
        if scheduler is not None:
            scheduler.step()
    return params, optimizer, scheduler


def test_sgd_keeps_no_step_count_its_scheduler_gives_it(tmp_path):
    """A loaded state dict is taken too; torch's SGD holds only momentum_buffer."""
    params, optimizer, scheduler = _sgd(3, scheduled=True)
    fresh_params, fresh, fresh_scheduler = _sgd(0, scheduled=True)
    uo.convert_checkpoint(optimizer.state_dict(), tmp_path / "x.safetensors",
                          optimizer=fresh, lr_scheduler=fresh_scheduler,
                          scheduler_checkpoint=scheduler.state_dict(), names=fresh_params)
    saved = read_state(tmp_path / "x.safetensors")
    assert (saved.steps, saved.position, saved.param_steps["w"]) == (3, 3, 3)
    np.testing.assert_array_equal(saved.arrays["w"]["momentum_buffer"],
                                  optimizer.state[params[0][1]]["momentum_buffer"].numpy())
    params, optimizer, _ = _sgd(3, scheduled=False)
    with pytest.raises(ValueError, match="torch.optim.SGD keeps no step count"):
        uo.save_state(optimizer, tmp_path / "y.safetensors", names=params)
    assert not (tmp_path / "y.safetensors").exists()


def test_uo_built_sgd_resumes_with_its_momentum(tmp_path):
    """torch.optim.SGD under uo.build: no step in its state; the schedule counts."""
    spec = uo.SGD(lr=uo.schedules.Cosine(lr=0.1, T_max=20), momentum=0.9)

    def run(steps, state=None):
        params = [(n, torch.nn.Parameter(torch.from_numpy(a)))
                  for n, a in CASE.initial_params().items()]
        optimizer = uo.build(spec, params)
        assert uo.explain(optimizer).native == "torch.optim.SGD"
        scheduler = uo.native_scheduler(optimizer)
        if state is not None:
            for (n, p), value in zip(params, state[0]):
                p.data.copy_(value)
            uo.load_state(optimizer, state[1])
        for t in steps:
            for n, p in params:
                p.grad = torch.from_numpy(CASE.gradients(t)[n])
            optimizer.step()
            scheduler.step()
        return params, optimizer

    whole, _ = run(range(10))
    first, optimizer = run(range(5))
    uo.save_state(optimizer, tmp_path / "sgd.safetensors")
    second, _ = run(range(5, 10), ([p.detach().clone() for _, p in first],
                                   tmp_path / "sgd.safetensors"))
    for (n, a), (_, b) in zip(whole, second):
        torch.testing.assert_close(a, b, rtol=0, atol=0, msg=n)


def test_a_pickle_with_code_is_refused_and_runs_nothing(tmp_path):
    marker = tmp_path / "ran"

    class Payload:
        def __reduce__(self):
            return (open, (str(marker), "w"))

    evil = tmp_path / "evil.pt"
    torch.save(Payload(), evil, _use_new_zipfile_serialization=True)
    assert not marker.exists()
    fresh_params, fresh, _ = _script(0)
    with pytest.raises(ValueError, match="not a torch state dict readable with "
                                         "weights_only=True"):
        uo.convert_checkpoint(evil, tmp_path / "x.safetensors", optimizer=fresh,
                              names=fresh_params)
    assert not marker.exists()
    (tmp_path / "raw.pkl").write_bytes(pickle.dumps(Payload()))
    with pytest.raises(ValueError, match="weights_only"):
        uo.convert_checkpoint(tmp_path / "raw.pkl", tmp_path / "x.safetensors",
                              optimizer=fresh, names=fresh_params)
    assert not marker.exists() and not (tmp_path / "x.safetensors").exists()


def test_what_is_not_an_optimizer_checkpoint_is_refused(tmp_path):
    params, optimizer, scheduler = _script(2)
    fresh_params, fresh, fresh_scheduler = _script(0)
    torch.save({"model": {}, "optimizer": optimizer.state_dict()}, tmp_path / "all.pt")
    with pytest.raises(ValueError, match=r"pass checkpoint\['optimizer'\]"):
        uo.convert_checkpoint(tmp_path / "all.pt", tmp_path / "x.safetensors",
                              optimizer=fresh, names=fresh_params)
    (tmp_path / "cut.pt").write_bytes(b"PK\x03\x04 truncated")
    with pytest.raises(ValueError, match="cut.pt"):
        uo.convert_checkpoint(tmp_path / "cut.pt", tmp_path / "x.safetensors",
                              optimizer=fresh, names=fresh_params)
    with pytest.raises(ValueError, match="give lr_scheduler and scheduler_checkpoint"):
        uo.convert_checkpoint(optimizer.state_dict(), tmp_path / "x.safetensors",
                              optimizer=fresh, lr_scheduler=fresh_scheduler,
                              names=fresh_params)
    with pytest.raises(TypeError, match="checkpoint must be a path or a state dict"):
        uo.convert_checkpoint(3, tmp_path / "x.safetensors", optimizer=fresh,
                              names=fresh_params)
    built = uo.build(uo.AdamW(), [p for _, p in fresh_params])
    with pytest.raises(TypeError, match="not one made by uo.build"):
        uo.convert_checkpoint(optimizer.state_dict(), tmp_path / "x.safetensors",
                              optimizer=built)
    assert not (tmp_path / "x.safetensors").exists()
