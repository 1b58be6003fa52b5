"""Dynamic batching for the server: rows of concurrent requests gathered into batches by a token budget.

Requests put their encoded rows on a queue and await a future. A worker thread runs the model: it takes
what is queued (once a first request is in, waiting for more until none has come for `max_wait`, ten such
windows at most, and no longer than the budget needs), cuts those rows into batches of at most `max_tokens`
padded tokens (shortest first, see inference.batches.plan_batches; for a runtime that computes on the padding, cut
further by length), runs them, and completes each request's future as its last row is done. Under load,
clients answered by one batch send their next requests together, and the sliding window gathers them into
the next batch instead of running the first few alone. A request whose client went away is dropped (`drop`):
its rows that no batch has taken are not computed. A batch that fails is run again one request at a time
(`run_rows`): each request gets its own answer or its own error. With several workers, one gathers the next batch
while the others run theirs (on 2 cores, two single-threaded batches at once ran 8% faster offline than one
on two threads; under load the gain was not established: BENCHMARKS.md, "Serving").
"""

import asyncio
import queue
import threading
import time
from dataclasses import dataclass, field

from ..core.heap import heap_trimmer
from ..inference.batches import plan_batches, row_sizes, rows_tokens, run_batch


class Overloaded(Exception):
    """The queue holds max_pending requests already (the server's 429)."""


@dataclass
class Request:
    """One request's rows on their way through the batches, and its future."""

    rows: list
    future: asyncio.Future
    loop: asyncio.AbstractEventLoop
    results: list = field(default_factory=list)
    left: int = 0
    failed: bool = False
    dropped: bool = False  # its client went away: its rows not yet run are not computed
    closed: bool = False  # done (answered, failed or dropped) and no longer counted as pending

    def __post_init__(self):
        self.results, self.left = [None] * len(self.rows), len(self.rows)

    @property
    def tokens(self) -> int:
        return rows_tokens(self.rows)

    def finish(self, error: BaseException | None = None):
        def complete():
            if self.future.done():  # the client went away
                return
            if error is not None:
                self.future.set_exception(error)
            else:
                self.future.set_result(self.results)
        self.loop.call_soon_threadsafe(complete)


class Batcher:
    def __init__(self, forward, pad_id: int, max_tokens: int, max_pending: int, max_wait: float = 0.002,
                 on_batch=None, workers: int = 1, call_tokens: int | None = None):
        self.forward, self.pad_id, self.max_tokens, self.call_tokens = forward, pad_id, max_tokens, call_tokens
        self.max_pending, self.max_wait, self.on_batch = max_pending, max_wait, on_batch
        self.queue: queue.Queue = queue.Queue()
        self.trim, self.trimmed = heap_trimmer(), 0.0
        self.company = True  # whether the last batch gathered more than its first request
        self.pending = 0  # requests queued or running
        self.jobs: dict[asyncio.Future, Request] = {}  # by their futures, the jobs not yet done
        self.lock = threading.Lock()
        self.threads = [threading.Thread(target=self.work, name=f"bertforge-batcher-{i}", daemon=True)
                        for i in range(workers)]
        for thread in self.threads:
            thread.start()

    def submit(self, rows: list) -> asyncio.Future:
        """A future of the forward results of `rows`, in their order; Overloaded when the queue is full."""
        with self.lock:
            if self.pending >= self.max_pending:
                raise Overloaded(f"{self.pending} requests are waiting already (--max-concurrent {self.max_pending})")
            self.pending += 1
        loop = asyncio.get_running_loop()
        job = Request(rows, loop.create_future(), loop)
        with self.lock:
            self.jobs[job.future] = job
        if rows:
            self.queue.put(job)
        else:  # nothing to run (a context without tokens)
            self.done(job)
        return job.future

    def drop(self, future: asyncio.Future):
        """Give up the request of `future` (from submit; its client went away): its rows that no batch has taken yet
        are never computed, and it stops counting as pending once a worker sees it."""
        with self.lock:
            job = self.jobs.get(future)
        if job is not None:
            job.dropped = True
        future.cancel()

    def close(self):
        """Stop the workers once the jobs queued so far are done (each stops at one end-of-work mark)."""
        for _ in self.threads:
            self.queue.put(None)
        for thread in self.threads:
            thread.join()

    def gather(self, first: Request) -> tuple[list[Request], bool]:
        """The first job and those queued after it, up to the token budget; and whether the end-of-work mark
        was seen. The wait ends when no request has come for `max_wait` (requests sent together, as clients
        answered by the same batch send their next ones, join one batch), and after ten such windows at most.
        After a batch that nobody joined, a first request does not wait at all: a lone client pays no window."""
        jobs, tokens = [first], first.tokens
        now = time.perf_counter()
        deadline, latest = now + (self.max_wait if self.company else 0.0), now + 10 * self.max_wait
        while tokens < self.max_tokens:
            try:
                job = self.queue.get(timeout=max(0.0, min(deadline, latest) - time.perf_counter()))
            except queue.Empty:
                break
            if job is None:
                return jobs, True
            jobs.append(job)
            tokens += job.tokens
            deadline = time.perf_counter() + self.max_wait
        self.company = len(jobs) > 1
        return jobs, False

    def work(self):
        stop = False
        while not stop:
            first = self.queue.get()
            if first is None:
                break
            jobs, stop = self.gather(first)
            self.run(jobs)
            if self.queue.empty():
                self.release_memory()

    def release_memory(self):
        """Hand the heap's free pages back to the system, at most once a second, between batches: batches of
        ever-changing shapes leave glibc's heap fragmented, and the resident size grew with the requests served
        (BENCHMARKS.md, "Serving")."""
        if self.trim is not None and time.monotonic() - self.trimmed >= 1.0:
            self.trim(0)
            self.trimmed = time.monotonic()

    def run(self, jobs: list[Request]):
        for job in jobs:
            if job.dropped:
                self.done(job)
        jobs = [job for job in jobs if not job.dropped]
        rows = [(job, i) for job in jobs for i in range(len(job.rows))]
        sizes = [row_sizes(job.rows) for job in jobs]  # lazy rows (windows) are made only when their batch runs
        lengths = [n for job_lengths, _ in sizes for n in job_lengths]
        widths = [w for _, job_widths in sizes for w in job_widths]
        for batch in plan_batches(lengths, None, self.max_tokens, widths, self.call_tokens):
            self.run_rows([(*rows[k], lengths[k], widths[k]) for k in batch])
        for job in jobs:  # those dropped while their batches ran
            if job.dropped:
                self.done(job)

    def run_rows(self, batch: list[tuple[Request, int, int, int]]):
        """One model batch of rows, each (request, row index, tokens, sequences), those of requests failed or
        dropped left out: each result recorded, a request answered with its last. Where the batch fails and holds
        rows of several requests, each request's rows run again alone, so that a failure (an input the model
        cannot take, or rows it cannot take together) fails the request it belongs to only, with its own error;
        a model failure fails requests, never the worker."""
        batch = [member for member in batch if not (member[0].failed or member[0].dropped)]
        if not batch:
            return
        try:
            results = run_batch(self.forward, [job.rows[i] for job, i, _, _ in batch], self.pad_id)
        except Exception as e:
            jobs = list({id(job): job for job, *_ in batch}.values())
            if len(jobs) == 1:
                jobs[0].failed = True
                self.done(jobs[0], e)
            else:
                for job in jobs:
                    self.run_rows([member for member in batch if member[0] is job])
            return
        if self.on_batch is not None:
            padded = max(n for _, _, n, _ in batch) * max(w for _, _, _, w in batch) * len(batch)
            self.on_batch(len(batch), padded)
        for (job, i, _, _), result in zip(batch, results):
            job.results[i] = result
            job.left -= 1
            if job.left == 0:
                self.done(job)

    def done(self, job: Request, error: BaseException | None = None):
        with self.lock:
            if job.closed:
                return
            job.closed = True
            self.pending -= 1
            del self.jobs[job.future]
        job.finish(error)
