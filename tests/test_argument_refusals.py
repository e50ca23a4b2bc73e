"""Bad arguments found by probing the public API as a user would, each refused with the
error type the project's rule gives (TypeError for a wrong type, ValueError for a wrong
value) and a message naming the argument and the value: a table of calls."""

import pytest
from conftest import require

import unified_opt as uo

ADAM = {"algorithm": "adam", "hyperparameters": {}}

CASES = {
    "spec-dict-unknown-key": (lambda: uo.spec_from_dict({**ADAM, "bogus": 1}), ValueError,
                              "spec_from_dict: unknown keys ['bogus']"),
    "spec-dict-bool-version": (lambda: uo.spec_from_dict({**ADAM, "format_version": True}),
                               ValueError, "spec_from_dict: format_version True is not "
                                           "supported"),
    "spec-dict-hyperparameters": (lambda: uo.spec_from_dict({**ADAM, "hyperparameters": "x"}),
                                  TypeError, "spec_from_dict: hyperparameters must be a "
                                             "mapping, got 'x' of type str"),
    "int-beyond-float": (lambda: uo.Adam(lr=10 ** 400), ValueError, "Adam: lr must be finite"),
    "group-exclude-str": (lambda: uo.Group.from_dict({"match": "*",
                                                      "exclude_from": "grad_clip"}),
                          TypeError, "Group: exclude_from must be a tuple of ('weight_decay', "
                                     "'grad_clip'), got 'grad_clip'"),
    "explain-backend-type": (lambda: uo.explain(uo.Adam(), backend=3), TypeError,
                             "explain: backend must be one of ('torch', 'paddle', "
                             "'mindspore'), got 3 of type int"),
}


@pytest.mark.parametrize("call, error, words", CASES.values(), ids=CASES.keys())
def test_bad_arguments_are_refused_naming_them(call, error, words):
    with pytest.raises(error) as raised:
        call()
    assert words in str(raised.value)


def test_a_group_read_from_json_takes_its_lists_as_tuples():
    group = uo.Group.from_dict({"match": ["*.bias"], "exclude_from": ["weight_decay"]})
    assert group.match == ("*.bias",) and group.exclude_from == ("weight_decay",)


@require("torch")
@pytest.mark.parametrize("kwargs, error, words", [
    ({"path": None}, TypeError,
     "build: path must be one of ('auto', 'native', 'own'), got None of type NoneType"),
    ({"backend": 3}, TypeError, "build: backend must be one of ('torch', 'paddle', "
                                "'mindspore'), got 3 of type int"),
    ({"options": {"foreach": "yes"}}, TypeError,
     "build: options foreach='yes' must be a bool or None (a flag of torch.optim.adam.Adam)"),
    ({"options": {"capturable": 1}}, TypeError, "build: options capturable=1 must be a bool"),
], ids=["path", "backend", "foreach", "capturable"])
def test_torch_build_arguments_of_the_wrong_type_are_type_errors(kwargs, error, words):
    import torch

    with pytest.raises(error) as raised:
        uo.build(uo.Adam(), [torch.nn.Parameter(torch.ones(2))], **kwargs)
    assert words in str(raised.value)
