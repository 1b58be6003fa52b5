"""model/formats/sizes.py's no_random_init: the initialisers are no-ops inside it and torch's own again after it,
also when threads build models at once and leave in another order than they came in."""

import threading

import torch

from bertforge.model.formats.sizes import INITIALISERS, no_random_init


def test_initialisers_are_skipped_inside_and_restored_after():
    before = {name: getattr(torch.nn.init, name) for name in INITIALISERS}
    weight = torch.full((3, 3), 7.0)
    with no_random_init():
        torch.nn.init.normal_(weight)
        assert (weight == 7).all()
    assert {name: getattr(torch.nn.init, name) for name in INITIALISERS} == before
    torch.nn.init.normal_(weight)
    assert not (weight == 7).all()


def test_threads_whose_exits_cross_leave_torchs_initialisers():
    """A enters, B enters, A leaves, B leaves (as two models loading behind one server can): each saving and
    restoring its own copy left the no-ops in place for good (every later model drew no weights)."""
    before = {name: getattr(torch.nn.init, name) for name in INITIALISERS}
    a_in, b_in, a_out = threading.Event(), threading.Event(), threading.Event()
    seen = {}

    def a():
        with no_random_init():
            a_in.set()
            b_in.wait(10)
        a_out.set()

    def b():
        a_in.wait(10)
        with no_random_init():
            b_in.set()
            a_out.wait(10)
            weight = torch.full((2,), 7.0)
            torch.nn.init.uniform_(weight)
            seen["inside after A left"] = weight.tolist()

    threads = [threading.Thread(target=a), threading.Thread(target=b)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(20)
    assert seen["inside after A left"] == [7.0, 7.0]  # still skipped while B is inside
    assert {name: getattr(torch.nn.init, name) for name in INITIALISERS} == before
    assert abs(torch.nn.Linear(4, 4)(torch.ones(1, 4))).max() < 10  # a fresh layer draws its weights again
