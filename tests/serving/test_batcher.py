"""The server's dynamic batcher: concurrent requests share batches cut by a token budget, answers come back
in each request's order, a failing batch fails only its requests, and the heap is trimmed between batches."""

import asyncio
import threading
import time

import pytest

from bertforge.serving.batcher import Batcher, Overloaded


def row(n: int) -> dict:
    return {"input_ids": list(range(1, n + 1)), "token_type_ids": [0] * n}


class Model:
    """A forward that answers each row with its real length and records the padded shapes it saw."""

    def __init__(self, fail_on: int | None = None):
        self.shapes, self.fail_on = [], fail_on

    def __call__(self, batch):
        self.shapes.append(tuple(batch["input_ids"].shape))
        lengths = batch["attention_mask"].sum(1).tolist()
        if self.fail_on in lengths:
            raise RuntimeError("model failure")
        return lengths


async def submit_all(batcher, requests):
    return await asyncio.gather(*(batcher.submit(rows) for rows in requests), return_exceptions=True)


def test_concurrent_requests_are_batched_by_tokens_and_answered_in_order():
    model = Model()
    requests = [[row(3), row(9)], [row(5)], [row(2), row(7), row(4)]]

    async def main():
        batcher = Batcher(model, pad_id=0, max_tokens=16, max_pending=8, max_wait=0.05)
        try:
            return await submit_all(batcher, requests)
        finally:
            batcher.close()

    answers = asyncio.run(main())
    assert answers == [[3, 9], [5], [2, 7, 4]]
    assert all(b * length <= 16 or b == 1 for b, length in model.shapes)
    assert sum(b for b, _ in model.shapes) == 6 and len(model.shapes) < 6  # rows shared batches


def test_a_padded_runtime_gets_batches_cut_by_length():
    """With call_tokens (ONNX Runtime computes on the padding), three short rows and a long one run as two
    calls instead of one padded to the longest; answers still in order."""
    requests = [[row(5), row(60)], [row(5)], [row(5)]]
    shapes = {}
    for call_tokens in (None, 16):
        model = Model()

        async def main():
            batcher = Batcher(model, pad_id=0, max_tokens=1024, max_pending=8, max_wait=0.05,
                              call_tokens=call_tokens)
            try:
                return await submit_all(batcher, requests)
            finally:
                batcher.close()

        assert asyncio.run(main()) == [[5, 60], [5], [5]]
        shapes[call_tokens] = sorted(model.shapes)
    assert shapes == {None: [(4, 60)], 16: [(1, 60), (3, 5)]}


def test_a_failing_batch_fails_its_requests_only():
    """A request the model fails on, merged with others: its rows run again alone and fail, with its own error;
    the others' run again alone and are answered."""
    model = Model(fail_on=9)

    async def main():
        batcher = Batcher(model, pad_id=0, max_tokens=64, max_pending=8, max_wait=0.05)
        try:
            return await submit_all(batcher, [[row(9)], [row(2), row(3)]])
        finally:
            batcher.close()

    failed, fine = asyncio.run(main())
    assert isinstance(failed, RuntimeError) and fine == [2, 3]
    assert model.shapes == [(3, 9), (2, 3), (1, 9)]


def test_a_batch_that_fails_merged_answers_each_request_alone():
    """A model that cannot take the rows of two requests together (each alone it can): both are answered."""
    shapes = []

    def forward(batch):
        shapes.append(tuple(batch["input_ids"].shape))
        if len(batch["input_ids"]) > 1:
            raise RuntimeError("rows of several requests")
        return batch["attention_mask"].sum(1).tolist()

    async def main():
        batcher = Batcher(forward, pad_id=0, max_tokens=64, max_pending=8, max_wait=0.05)
        try:
            return await submit_all(batcher, [[row(4)], [row(6)]])
        finally:
            batcher.close()

    assert asyncio.run(main()) == [[4], [6]]
    assert shapes == [(2, 6), (1, 4), (1, 6)]


def test_full_queue_is_refused():
    async def main():
        batcher = Batcher(Model(), pad_id=0, max_tokens=64, max_pending=1, max_wait=0.05)
        try:
            first = batcher.submit([row(4)])
            with pytest.raises(Overloaded, match="--max-concurrent 1"):
                batcher.submit([row(4)])
            return await first
        finally:
            batcher.close()

    assert asyncio.run(main()) == [4]


def test_heap_trimmed_between_batches_at_most_once_a_second():
    trims = []

    async def main():
        batcher = Batcher(Model(), pad_id=0, max_tokens=64, max_pending=8, max_wait=0.0)
        batcher.trim = trims.append
        try:
            await batcher.submit([row(3)])
            await asyncio.sleep(0.05)  # the worker trims after answering
            await batcher.submit([row(4)])
            await asyncio.sleep(0.05)
        finally:
            batcher.close()

    asyncio.run(main())
    assert trims == [0]  # two idle moments within a second: one trim


def test_requests_arriving_one_after_another_join_one_batch():
    model = Model()

    async def main():
        batcher = Batcher(model, pad_id=0, max_tokens=64, max_pending=8, max_wait=0.25)
        try:
            futures = []
            for n in (3, 4, 5):  # each within the window of the one before, the last after the first's window
                futures.append(batcher.submit([row(n)]))
                await asyncio.sleep(0.15)
            return await asyncio.gather(*futures)
        finally:
            batcher.close()

    assert asyncio.run(main()) == [[3], [4], [5]]
    assert model.shapes == [(3, 5)]


def test_a_lone_client_waits_for_nobody():
    async def main():
        batcher = Batcher(Model(), pad_id=0, max_tokens=64, max_pending=8, max_wait=0.5)
        try:
            await batcher.submit([row(3)])  # the first batch waits its window: nobody joins
            began = time.perf_counter()
            await batcher.submit([row(4)])
            return time.perf_counter() - began
        finally:
            batcher.close()

    assert asyncio.run(main()) < 0.25


def test_workers_run_batches_at_the_same_time():
    """With two workers, two batches run at once (each forward waits for the other); with one, they cannot."""
    def answers(workers):
        barrier = threading.Barrier(2, timeout=2)

        def forward(batch):
            barrier.wait()
            return batch["attention_mask"].sum(1).tolist()

        async def main():
            batcher = Batcher(forward, pad_id=0, max_tokens=8, max_pending=8, max_wait=0.05, workers=workers)
            try:
                return await submit_all(batcher, [[row(8)], [row(8)]])  # each fills a batch alone
            finally:
                batcher.close()
        return asyncio.run(main())

    assert answers(2) == [[8], [8]]
    assert all(isinstance(a, threading.BrokenBarrierError) for a in answers(1))


def test_a_dropped_request_is_not_computed():
    """A request whose client went away (Batcher.drop) is never run, and stops counting as pending."""
    model = Model()

    async def main():
        batcher = Batcher(model, pad_id=0, max_tokens=64, max_pending=8, max_wait=0.2)
        try:
            kept, dropped = batcher.submit([row(3)]), batcher.submit([row(5), row(6)])
            batcher.drop(dropped)
            return await kept, dropped.cancelled(), batcher.pending, batcher.jobs
        finally:
            batcher.close()

    answer, cancelled, pending, jobs = asyncio.run(main())
    assert answer == [3] and cancelled and pending == 0 and jobs == {}
    assert model.shapes == [(1, 3)]
