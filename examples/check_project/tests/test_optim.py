"""The project's optimizer against the spec it claims, in its own test suite: the
unified-opt pytest plugin gives every project the fixture ``uo_check`` (installed with
unified-opt; nothing to configure)."""

from mypkg.optim import make_lamb

import unified_opt as uo


def test_my_lamb_is_lamb(uo_check):
    uo_check(make_lamb, uo.Lamb(lr=1e-3, weight_decay=0.01))
