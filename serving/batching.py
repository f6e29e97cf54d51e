"""Batched in-process generation for a transformers model (LocalPolicy, MultiAdapterModel,
training.sampler.TransformersSampler).

Concurrent episodes each ask for one completion at a time. On CPU a small model's decode step costs about the same
for 1 row as for 8 (bench/engine.py's roofline: the step is per-step overhead, not matmuls), so `BatchGenerator`
decodes the requests that are waiting together, continuously: one worker thread takes the oldest request, gathers
others of the same group (same adapter) that arrive within a short window, prefills each prompt on its own and decodes
the rows together; between two decode steps it admits the requests of that group that arrived meanwhile (up to
`max_batch` rows), and a row that hits an eos token or its own token limit leaves at once and is answered at once, so
its caller plays its env turn and comes back while the others decode. Requests of another group wait until the batch
drains (a batch stops admitting once one waits), unless the generator mixes groups (`adapter_of`, given by
MultiAdapterModel, and a model serving.fast_forward takes): then one batch holds every group's rows, each with its
own adapter. Caches that cannot be joined (a sliding window) are decoded row by row.

Prefills and decode steps go through serving.fast_forward when the model is one it takes (Qwen2/Qwen3, in eval mode):
the same ops as the model's own forward, logits equal to the bit, without transformers' and PEFT's per-call machinery
(docs/experiments/engine.md); `fast=False` calls the model.

The batch's cache is one slot buffer per layer (`_Running`): every row ends at a shared write column (its context
left-padded with masked zeros), a step writes its tokens in place, a row that arrives is written into a free slot and
a row that leaves gives its slot to the last row (one row copied, never the whole cache); each finished row's cache is
kept, and the episode's next turn, whose context extends it, prefills only the new tokens (`_PrefixStore`).

Every row samples from its own `torch.Generator` seeded by the request, so a row's tokens do not depend on which other
rows shared its batch (up to float rounding of differently shaped matmuls); the global RNG is never touched. Sampling
is temperature sampling, then the optional top-k / top-p filters, for every row of a step in one batched computation,
the draw an exponential race per row (the draw torch.multinomial makes, from the same generator); temperature 0 is
greedy.

The window adapts: the worker waits (up to `window_s`) only while fewer requests have arrived than the last batch had,
i.e. while the callers it just answered may still come back. A lone caller therefore never waits.

Cancelling a request's future (`asyncio.wrap_future` does it when the awaiting task is cancelled: a client gone, a
time limit) drops the request: still queued, it is never decoded; already in a batch, its row leaves the batch at the
next decode step and its future ends with `CancelledError`. `cancelled` counts both.
"""

from __future__ import annotations

import contextlib
import functools
import queue
import threading
import time
import weakref
from collections.abc import Callable, Hashable, Iterator
from concurrent.futures import CancelledError, Future
from contextlib import AbstractContextManager as ContextManager
from dataclasses import dataclass, field
from typing import Any

from gapforge.serving.fast_forward import FastForward, attention_windows, rows_of


@dataclass
class Decoded:
    ids: list[int]  # the sampled ids (the eos token included when one was produced)
    logprobs: list[float]  # each id's log-probability under the distribution it was drawn from (logits / temperature)


class _Pending(Future):  # type: ignore[type-arg]
    """A request's future. `cancel()` of a request already being decoded cannot cancel the future (it runs), so it
    marks the request abandoned: the worker drops its row at the next step and ends the future with CancelledError."""

    def __init__(self) -> None:
        super().__init__()
        self.abandoned = False

    def cancel(self) -> bool:
        if super().cancel():
            return True
        if not self.done():
            self.abandoned = True
        return False


@dataclass
class _Request:
    ids: list[int]
    temperature: float
    max_new_tokens: int
    seed: int
    group: Hashable
    future: _Pending = field(default_factory=_Pending)


def _request(ids: list[int], temperature: float, max_new_tokens: int, seed: int, group: Hashable) -> _Request:
    if not ids:
        raise ValueError("empty prompt")
    if max_new_tokens < 1:
        raise ValueError(f"max_new_tokens must be >= 1, got {max_new_tokens}")
    return _Request(list(ids), float(temperature), int(max_new_tokens), int(seed), group)


class _LoadGate:
    """Loading a model vs decoding with another one in the same process.

    transformers 5 builds a model under process-wide state (the meta device, the tied-weights bookkeeping):
    two policies built at once on two threads of an evaluation worker came out with an untied, freshly
    initialized lm_head ("lm_head.weight | MISSING"), and a decode on a third thread meanwhile failed with
    "Tensor.item() cannot be called on meta tensors". Batches share the gate; a load (`model_loading()`)
    waits for the batches in flight, holds off new ones and other loads, and is let in before new batches."""

    def __init__(self) -> None:
        self.cond = threading.Condition()
        self.batches = 0
        self.loading = False
        self.waiting = 0  # loads waiting: new batches wait behind them

    @contextlib.contextmanager
    def decoding(self) -> Iterator[None]:
        with self.cond:
            self.cond.wait_for(lambda: not self.loading and not self.waiting)
            self.batches += 1
        try:
            yield
        finally:
            with self.cond:
                self.batches -= 1
                self.cond.notify_all()

    @contextlib.contextmanager
    def load(self) -> Iterator[None]:
        with self.cond:
            self.waiting += 1
            self.cond.wait_for(lambda: not self.loading and not self.batches)
            self.waiting -= 1
            self.loading = True
        try:
            yield
        finally:
            with self.cond:
                self.loading = False
                self.cond.notify_all()


_GATE = _LoadGate()


def model_loading() -> ContextManager[None]:
    """Hold while building a model (from_pretrained, PEFT adapters) in a process that may be decoding with
    another on other threads (executor/processes.py's workers build the policies of an evaluation played at once)."""
    return _GATE.load()


_LANE_THREADS: list[int | None] = [None]  # set_lane_threads; None: the process's count from before the first call
_DEFAULT_THREADS: list[int | None] = [None]


def set_lane_threads(threads: int | None) -> None:
    """Torch intra-op threads of every generator worker thread in this process, from its next batch on
    (None: the count the calling thread had at the first call, i.e. the process's own).

    torch.set_num_threads sets the calling thread's own count (OpenMP keeps one per thread; it also becomes
    the count threads started later begin with), and the decoding runs on the lanes' own threads, so a
    process sharing its CPU with others says so here: with one training process busy on one of 2 cores, a
    GRPO readiness check decoding on 2 threads took 145 s, and 52 s on 1 (each parallel op waits at a
    barrier for the thread that is not scheduled)."""
    if threads is not None and threads < 1:
        raise ValueError(f"threads must be >= 1 or None, got {threads}")
    if _DEFAULT_THREADS[0] is None:  # before any lane was lowered: a lane started later may begin lowered
        import torch

        _DEFAULT_THREADS[0] = torch.get_num_threads()
    _LANE_THREADS[0] = threads


def lanes_only() -> None:
    """From now on this process's parallel torch ops run on the generator lanes: called from the main thread, it
    keeps that thread at 1 intra-op thread and gives the lanes the count it had (the default `set_lane_threads` keeps).

    A thread that runs one parallel op keeps an OpenMP team of its own, and once the main thread's team and a lane's
    outnumber the cores, libgomp's threads sleep between parallel regions instead of spinning: every op of a decode step
    then waits for a wake-up. A lane decoded shop episodes 1.5x slower after one parallel op on the main thread, and the
    demo's routed evaluation took 60 s instead of 37 s for the same episodes (the router's gate runs on the main thread;
    docs/experiments/engine.md, section 8). A team stays once made, so this is called before a process's first
    parallel op: where the run's stages open (gapforge.stages.open_stages: the driver's gate is fitted and encodes on
    its main thread) and where a process builds a decoding model (serving.local.Generation: `gapforge serve`, the
    worker processes). What the main thread still computes (a gate's forward on a first message, its fit) is small."""
    if threading.current_thread() is not threading.main_thread():
        return
    import torch

    if _DEFAULT_THREADS[0] is None:
        _DEFAULT_THREADS[0] = torch.get_num_threads()
    if torch.get_num_threads() != 1:
        torch.set_num_threads(1)


class _Lane:
    """One worker thread and its queue. It holds the generator only weakly, so a generator (and the
    model it points at) that nobody uses any more is freed, and its lane stops (weakref.finalize)."""

    def __init__(self, generator: BatchGenerator) -> None:
        self.ref = weakref.ref(generator)
        self.queue: queue.Queue[_Request | None] = queue.Queue()
        self.backlog: list[_Request] = []  # taken from the queue, waiting for their group's turn
        self.last = 1  # size of the previous batch: how many callers may come back
        self.stopping = False  # a close() sentinel was taken while admitting into a running batch
        self.own_threads = 1  # torch's count on the lane's thread when it started (set there)
        self.mixing = False  # the batch being formed or decoded takes rows of every group (BatchGenerator.mixes)
        self.thread = threading.Thread(target=self.run, name="gapforge-batch-generator", daemon=True)

    def run(self) -> None:
        import torch

        self.own_threads = torch.get_num_threads()
        while True:
            batch = self.next_batch()
            if batch is None:
                return
            generator = self.ref()
            if generator is None:  # freed while requests were queued: nobody can be answered by it
                for r in batch:
                    r.future.set_exception(RuntimeError("the generator was closed"))
                return
            self.apply_threads()
            taken = list(batch)  # every request this batch holds, the ones admitted while it decodes too
            key = None if self.mixing else batch[0].group  # None: rows of every group (adapter) decode together
            try:
                generator._decode(
                    batch, admit=functools.partial(self.admit_into, taken, key), finish=_answer, mixing=self.mixing
                )
            except BaseException as e:  # noqa: BLE001 - every caller still waiting gets the error
                for r in taken:
                    if not r.future.done():
                        r.future.set_exception(e)
            else:
                generator.batch_sizes.append(len(taken))
                for r in taken:  # a row dropped before its first step (its caller left while it waited for the lock)
                    if not r.future.done():
                        r.future.set_exception(CancelledError())
            if self.stopping:
                self.queue.put(None)  # a close() seen while admitting: answer the backlog, then stop
                self.stopping = False
            del generator

    def apply_threads(self) -> None:
        """This lane thread's torch threads as `set_lane_threads` last said (its own count by default)."""
        import torch

        threads = _LANE_THREADS[0] or _DEFAULT_THREADS[0] or self.own_threads
        if torch.get_num_threads() != threads:
            torch.set_num_threads(threads)

    def admit_into(self, taken: list[_Request], key: Hashable, room: int) -> list[_Request]:
        """Between two decode steps, on the lane's thread: `set_lane_threads` applied (a batch that keeps admitting
        may decode for a whole evaluation), then `more(key, room)`, each also added to `taken` (the batch's requests,
        answered or failed together)."""
        self.apply_threads()
        more = self.more(key, room)
        taken.extend(more)
        return more

    def _fits(self, r: _Request, key: Hashable) -> bool:
        return self.mixing or r.group == key

    def more(self, key: Hashable, room: int) -> list[_Request]:
        """Requests of the batch's group (any group when it mixes them, the oldest first) waiting now (never blocks), at
        most `room`, for a batch that is decoding. None while a request of another group waits (the batch drains and
        that group goes next), someone waits for the model (`exclusive`, a model load) or the lane is stopping."""
        generator = self.ref()
        wanted = generator is not None and generator.exclusive_waiting > 0
        del generator
        if room <= 0 or self.stopping or wanted or _GATE.waiting or any(not self._fits(r, key) for r in self.backlog):
            return []
        taken, self.backlog = self.backlog[:room], self.backlog[room:]  # mixing: the backlog fits, and it is older
        while len(taken) < room:
            try:
                item = self.queue.get_nowait()
            except queue.Empty:
                break
            if item is None:
                self.stopping = True
                break
            if not self._fits(item, key):
                self.backlog.append(item)
                break
            taken.append(item)
        return self.started(taken)

    def started(self, requests: list[_Request]) -> list[_Request]:
        """The requests whose callers still wait, marked running (a cancelled one is dropped and counted)."""
        live = [r for r in requests if r.future.set_running_or_notify_cancel()]
        generator = self.ref()
        if generator is not None:
            generator.cancelled["waiting"] += len(requests) - len(live)
        return live

    def next_batch(self) -> list[_Request] | None:
        while True:
            if not self.backlog:
                first = self.queue.get()
                if first is None:
                    return None
                self.backlog.append(first)
            generator = self.ref()
            max_batch, window_s = (generator.max_batch, generator.window_s) if generator is not None else (1, 0.0)
            try:
                self.mixing = generator is not None and generator.mixes()
            except Exception:  # noqa: BLE001 - the lane must not die here (its callers would wait forever): one group a batch
                self.mixing = False
            del generator
            group = self.backlog[0].group
            batch = [r for r in self.backlog if self._fits(r, group)][:max_batch]
            self.backlog = [r for r in self.backlog if not any(r is b for b in batch)]
            deadline = time.monotonic() + window_s
            stopping = False
            while len(batch) < max_batch:
                wait = deadline - time.monotonic() if len(batch) < self.last else 0.0
                try:
                    item = self.queue.get(timeout=wait) if wait > 0 else self.queue.get_nowait()
                except queue.Empty:
                    break
                if item is None:
                    stopping = True
                    break
                (batch if self._fits(item, group) else self.backlog).append(item)
            if stopping:
                self.queue.put(None)  # answer this batch (and the backlog) first, then stop
            batch = self.started(batch)
            if batch:
                self.last = len(batch)
                return batch


Admit = Callable[[int], list[_Request]]  # room -> requests that join a decoding batch
Finish = Callable[[_Request, Decoded], None]  # a row that ended, handed over at once


def _answer(r: _Request, out: Decoded) -> None:
    """Resolve an ended row's future: its tokens, or CancelledError when its caller is gone."""
    if r.future.done():
        return
    if r.future.abandoned:
        r.future.set_exception(CancelledError())
    else:
        r.future.set_result(out.ids)


class _Running:
    """The rows of one decoding batch, in cache order, on slot buffers that rows enter and leave without the others
    being copied: each layer's keys/values live in a buffer of (slots, heads, columns, dim); every row ends at the
    shared write column `pos` (its real tokens are columns begin..pos-1, the ones before it masked). A row that ends
    gives its slot to the last row (one row copied); a row that arrives is written into the next free slot, the
    others shifted right only when it is longer than `pos` (with `MARGIN` columns to spare, so the next longer
    one rarely shifts them again); when every row begins far right, they are shifted left (`compact`). Beside the
    cache: each row's last position, its generator, what it sampled, its next logits."""

    MARGIN = 128

    def __init__(self, owner: BatchGenerator, *, joined: bool) -> None:
        self.owner, self.joined = owner, joined
        self.rows: list[_Request] = []
        self.outs: list[Decoded] = []
        self.gens: list[Any] = []
        self.starts: list[int] = []  # each row's first real column
        self.cache: Any = None
        self.pos = 0  # the write column: every row's context ends just before it
        self.attention: Any = None  # only for a cache that cannot be joined (one row, decoded as it came)
        self.last: Any = None
        self.logits: Any = None

    def join(self, rows: list[_Request], prefilled: list[Any]) -> None:
        """Add prefilled rows: each written into a free slot, right-aligned at the write column."""
        import torch

        positions = torch.tensor([[len(r.ids) - 1] for r in rows])
        logits = torch.cat([o.logits for o in prefilled])
        room = max(r.max_new_tokens for r in rows) + 1
        if not self.joined:  # one row on a cache that cannot be padded (a sliding window): decoded as it came
            self.cache = prefilled[0].past_key_values
            self.attention = torch.ones((1, len(rows[0].ids)), dtype=torch.long)
        else:
            longest = max(len(r.ids) for r in rows)
            if self.cache is None:
                self._allocate(
                    prefilled[0], slots=max(self.owner.max_batch, len(rows)), columns=longest + room + self.MARGIN
                )
                self.pos = longest
            elif longest > self.pos:
                self._shift(longest - self.pos + self.MARGIN)
            self._fit(len(self.rows) + len(rows), self.pos + room)
            for k, (r, o) in enumerate(zip(rows, prefilled)):
                slot, begin = len(self.rows) + k, self.pos - len(r.ids)
                for layer, part in zip(self.cache.layers, o.past_key_values.layers):
                    layer._k[slot, :, begin : self.pos] = part.keys[0]
                    layer._v[slot, :, begin : self.pos] = part.values[0]
            for layer in self.cache.layers:
                layer.n, layer.length = len(self.rows) + len(rows), self.pos
                layer._views()
            self.starts += [self.pos - len(r.ids) for r in rows]
        self.last = positions if not self.rows else torch.cat([self.last, positions])
        self.logits = logits if not self.rows else torch.cat([self.logits, logits])
        self.rows += rows
        self.outs += [Decoded([], []) for _ in rows]
        self.gens += [torch.Generator().manual_seed(r.seed) for r in rows]

    def select(self, keep: list[int]) -> list[int]:
        """Only rows `keep` (cache positions) stay: each leaving row's slot goes to the row now last. Returns the
        rows' old positions in their new order (what the step sampled for them must follow it)."""
        import torch

        if len(keep) == len(self.rows):
            return list(range(len(self.rows)))
        if not keep:
            self.rows, self.outs, self.gens, self.starts = [], [], [], []
            self.cache = self.attention = self.last = self.logits = None
            return []
        order = list(range(len(self.rows)))
        kept = set(keep)
        for j in sorted((j for j in order if j not in kept), reverse=True):
            end = len(order) - 1
            if j != end and self.joined:
                for layer in self.cache.layers:
                    layer._k[j, :, : self.pos] = layer._k[end, :, : self.pos]
                    layer._v[j, :, : self.pos] = layer._v[end, :, : self.pos]
            order[j] = order[end]
            order.pop()
        self.rows, self.outs, self.gens, self.starts = (
            [xs[i] for i in order] for xs in (self.rows, self.outs, self.gens, self.starts)
        )
        index = torch.tensor(order)
        self.last, self.logits = self.last[index], self.logits[index]
        if self.joined:
            for layer in self.cache.layers:
                layer.n = len(order)
                layer._views()
            if min(self.starts) >= max(256, self.pos // 2):
                self._shift(-min(self.starts))
        else:
            self.attention = self.attention[index]
        return order

    def forward(self, tokens: Any) -> None:
        """One decode step: every row's sampled token in (written at the write column), its next logits out."""
        import torch

        self.last = self.last + 1
        fast, adapter_of = self.owner.fast_now, self.owner.mixing_now
        padded = None  # the columns each row attends (joined rows left-padded), None when no row is padded
        if self.joined and any(self.starts):
            padded = torch.arange(self.pos + 1)[None, :] >= torch.tensor(self.starts)[:, None]
        if fast is not None and self.joined:  # no padding: no mask (transformers drops an all-ones one)
            mix = rows_of([adapter_of(r.group) for r in self.rows]) if adapter_of is not None else None
            mask = None if padded is None else padded[:, None, None, :]
            windows = None if padded is None else attention_windows(self.starts, self.cache.layers[0].dtype)
            self.logits = fast.decode(tokens, self.last, self.cache.layers, mask, mix, windows)
        else:
            if not self.joined:
                self.attention = attention = torch.cat(
                    [self.attention, torch.ones((len(self.rows), 1), dtype=torch.long)], dim=1
                )
            else:
                attention = (
                    torch.ones((len(self.rows), self.pos + 1), dtype=torch.long) if padded is None else padded.long()
                )
            self.logits = self.owner.model(
                input_ids=tokens,
                attention_mask=attention,
                position_ids=self.last,
                past_key_values=self.cache,
                use_cache=True,
                logits_to_keep=1,
            ).logits
        self.pos += 1

    def _allocate(self, first: Any, *, slots: int, columns: int) -> None:
        from transformers import DynamicCache

        parts = first.past_key_values.layers
        self.cache = DynamicCache(ddp_cache_data=[(p.keys[:, :, :0], p.values[:, :, :0]) for p in parts])
        self.cache.layers = [_slot_layer(p.keys, slots, columns) for p in parts]

    def _fit(self, slots: int, columns: int) -> None:
        """Grow every layer's buffers (doubling) to hold `slots` rows and `columns` columns."""
        for layer in self.cache.layers:
            layer.grow(slots, columns)

    def _shift(self, by: int) -> None:
        """Move every row `by` columns right (more room before the write column) or left (`by` < 0: drop dead columns)."""
        self._fit(len(self.rows), self.pos + by + 1)
        for layer in self.cache.layers:
            layer.shift(by, self.pos)
        self.pos += by
        self.starts = [s + by for s in self.starts]


class BatchGenerator:
    """A worker thread that decodes waiting requests as batches; `submit()` is thread-safe.

    `top_k` / `top_p` (None = off) filter each sampled row after the temperature, as
    `transformers`' generate does; logprobs are then those of the filtered distribution. `fast`: prefill and decode
    through serving.fast_forward when it takes the model (else the model's own forward). `adapter_of(group)`: the
    adapter (None: the base) a group's requests use; given, groups share batches when the fast forward applies."""

    def __init__(
        self,
        model: Any,
        *,
        eos_ids: set[int],
        lock: threading.Lock | None = None,
        select: Callable[[Hashable], ContextManager[Any]] | None = None,
        max_batch: int = 64,
        window_s: float = 0.05,
        top_k: int | None = None,
        top_p: float | None = None,
        prefix_bytes: int = 256 * 2**20,
        fast: bool = True,
        adapter_of: Callable[[Hashable], str | None] | None = None,
    ) -> None:
        if max_batch < 1:
            raise ValueError(f"max_batch must be >= 1, got {max_batch}")
        self.model = model
        self.eos_ids = set(eos_ids)
        self.lock = lock or threading.Lock()  # held for each batch (others may share the model under it)
        self.select = select or (lambda group: contextlib.nullcontext())  # e.g. activate an adapter
        self.max_batch = max_batch
        self.window_s = window_s
        self.top_k = top_k if top_k else None
        self.top_p = top_p if top_p is not None and top_p < 1.0 else None
        self.batch_sizes: list[int] = []  # every batch run by the worker (rows it held, the admitted ones too)
        self.step_rows: list[int] = []  # the rows of every decode step, in order (for tests and benches)
        self.prefixes = _PrefixStore(prefix_bytes)  # finished rows' caches: the next turn prefills only what is new
        self.prefill_tokens = [0, 0]  # [prefilled, reused from a kept prefix] (for tests and benches)
        self.cancelled = {"waiting": 0, "decoding": 0}  # requests dropped because their caller cancelled
        self.fast = fast
        self.fast_now: Any = None  # the batch being decoded: its FastForward bound to its adapter (None: model(...))
        self.adapter_of = adapter_of  # group -> adapter name (None: the base): groups may share a batch (`mixes`)
        self.mixing_now: Callable[[Hashable], str | None] | None = None  # the batch mixes groups: adapter_of
        self._mixes: tuple[tuple[int, int, bool], bool] | None = None
        self.exclusive_waiting = 0  # callers waiting in `exclusive()`: the running batch stops admitting
        self._lane: _Lane | None = None
        self._start = threading.Lock()

    def submit(
        self, ids: list[int], *, temperature: float, max_new_tokens: int, seed: int, group: Hashable = None
    ) -> Future[list[int]]:
        """Queue one prompt; the future resolves to the new token ids (eos included when one was produced)."""
        request = _request(ids, temperature, max_new_tokens, seed, group)
        with self._start:  # a lane is started and fed under one lock, so close() never strands a request
            if self._lane is None or not self._lane.thread.is_alive():
                self._lane = _Lane(self)
                self._lane.thread.start()
                weakref.finalize(self, self._lane.queue.put, None)  # freed generator -> its lane stops
            self._lane.queue.put(request)
        return request.future

    def run_batch(
        self,
        prompts: list[list[int]],
        *,
        seeds: list[int],
        temperature: float,
        max_new_tokens: int,
        group: Hashable = None,
    ) -> list[Decoded]:
        """Decode these prompts as one batch on the calling thread (what the worker does with a batch)."""
        if len(seeds) != len(prompts) or not prompts:
            raise ValueError("run_batch needs one seed per prompt")
        return self._decode([_request(p, temperature, max_new_tokens, s, group) for p, s in zip(prompts, seeds)])

    def forget_prefixes(self) -> None:
        """Drop every kept prefix: call it after changing the model's weights. `check` catches in-place writes
        that bump a tensor's version counter and added parameters, but not fused optimizers (torch's fused
        AdamW leaves the counters as they were) nor `.data` swaps; TransformersSampler sidesteps this by
        building a new generator for every GRPO step and evaluation."""
        with self.lock:
            self.prefixes.clear()

    def close(self) -> None:
        """Stop the worker once the requests already queued are answered (a later submit starts a new one)."""
        with self._start:
            lane, self._lane = self._lane, None
            if lane is not None:
                lane.queue.put(None)  # each lane has its own queue: a new lane never takes this sentinel
        if lane is not None and lane.thread is not threading.current_thread():
            lane.thread.join()

    def _decode(
        self,
        batch: list[_Request],
        *,
        admit: Admit | None = None,
        finish: Finish | None = None,
        mixing: bool | None = None,
    ) -> list[Decoded]:
        """Prefill the prompts (`_prefill`), from a kept prefix when there is one, then decode the rows together on one joined cache, or
        row by row when the model's cache layers cannot be joined (e.g. a sliding window). With `admit`, requests that
        arrive while the batch decodes join it between two steps (`admit(room)` returns them); with `finish`, each
        row is handed over the moment it ends, so its caller goes on while the others decode."""
        import torch

        groups = list(dict.fromkeys(r.group for r in batch))
        mixing = len(groups) > 1 if mixing is None else mixing
        decoded: dict[int, Decoded] | None = None
        with (
            _GATE.decoding(),
            self.lock,
            contextlib.nullcontext() if mixing else self.select(groups[0]),
            torch.no_grad(),
        ):
            self.prefixes.check(self.model)  # (no_grad: the model may be trained next)
            self.fast_now = self._fast_forward()
            if mixing and (self.fast_now is None or self.adapter_of is None):
                self.fast_now = None  # formed to mix, and the model cannot (any more): group by group, below
            else:
                self.mixing_now = self.adapter_of if mixing else None
                decoded = self._decode_rows(batch, admit, finish)
        if decoded is None:
            done = {}
            for g in groups:
                rows = [r for r in batch if r.group == g]
                done |= {id(r): d for r, d in zip(rows, self._decode(rows, finish=finish, mixing=False))}
            return [done[id(r)] for r in batch]
        return [decoded.get(id(r), Decoded([], [])) for r in batch]

    def _decode_rows(self, batch: list[_Request], admit: Admit | None, finish: Finish | None) -> dict[int, Decoded]:
        """`_decode`'s work, under the lock, with the batch's forward chosen."""
        rows = [r for r in batch if not r.future.abandoned]  # a caller gone while the batch waited for the lock
        self.cancelled["waiting"] += len(batch) - len(rows)
        outs = self._prefill(rows)
        if rows and _joinable(outs[0].past_key_values):
            return self._continue(rows, outs, admit=admit, finish=finish)
        # a sliding window: each row decoded as it came
        return {k: v for r, o in zip(rows, outs) for k, v in self._continue([r], [o], finish=finish).items()}

    def _prefill(self, rows: list[_Request]) -> list[Any]:
        """Each prompt's cache and last logits: from the longest kept prefix of the same group (a finished row of an
        earlier turn of the same episode, whose context this one extends), else from scratch. Through the fast forward
        all in one forward (serving.fast_forward), else one prompt at a time (a padded batch would cost more than the
        rows alone: the padding and a full attention mask)."""
        import torch
        from transformers import DynamicCache

        found = [self.prefixes.longest(r.group, r.ids) for r in rows]
        for r, (_, start) in zip(rows, found):
            self.prefill_tokens[0] += len(r.ids) - start
            self.prefill_tokens[1] += start
        if self.fast_now is not None:
            adapters = [self.mixing_now(r.group) for r in rows] if self.mixing_now is not None else None
            return self.fast_now.prefill(
                [(r.ids[start:], kept, start) for r, (kept, start) in zip(rows, found)], adapters
            )
        outs = []
        for r, (kept, start) in zip(rows, found):
            cache = DynamicCache(ddp_cache_data=[(k[:, :, :start], v[:, :, :start]) for k, v in kept]) if kept else None
            outs.append(
                self.model(
                    input_ids=torch.tensor([r.ids[start:]]), past_key_values=cache, use_cache=True, logits_to_keep=1
                )
            )
        return outs

    def mixes(self) -> bool:
        """Whether rows of different groups decode in one batch, each with its own adapter (`adapter_of` set and the
        fast forward takes the model): then no group waits for another's batch to drain."""
        if self.adapter_of is None or not self.fast:
            return False
        # an adapter loaded meanwhile (MultiAdapterModel.load_adapter) changes the module tree under the lock
        with self.lock:
            model = self.model
            version = (id(model), sum(1 for _ in model.parameters()), model.training)
            if self._mixes is None or self._mixes[0] != version:
                fast = FastForward.of(model)
                self._mixes = (version, fast is not None and fast.usable())
            return self._mixes[1]

    @contextlib.contextmanager
    def exclusive(self) -> Iterator[None]:
        """The model to oneself (its lock), between two decode steps: while this waits, a running batch admits no one,
        so it drains and lets go even when requests keep arriving (MultiAdapterModel's router forward, adapter loads)."""
        with self._start:
            self.exclusive_waiting += 1
        try:
            with self.lock:
                yield
        finally:
            with self._start:
                self.exclusive_waiting -= 1

    def _fast_forward(self) -> Any:
        """The model's FastForward bound to the batch's adapter, when it has one and is in eval mode (else None)."""
        fast = FastForward.of(self.model) if self.fast else None
        if fast is None or not fast.usable():
            return None
        fast.bind()
        return fast

    def _continue(
        self, batch: list[_Request], prefilled: list[Any], *, admit: Admit | None = None, finish: Finish | None = None
    ) -> dict[int, Decoded]:
        """Sample every row from its prefill logits until its eos or token limit, on one cache whose rows are
        left-padded with masked zeros to the longest context; rows that end leave it at once (`finish`), rows that
        `admit` brings join it between two steps (prefilled, the cache widened when they are longer)."""
        import torch

        running = _Running(self, joined=len(batch) > 1 or _joinable(prefilled[0].past_key_values))
        running.join(batch, prefilled)
        results: dict[int, Decoded] = {}
        while True:
            if admit is not None and running.joined:
                more = admit(self.max_batch - len(running.rows))
                if more:
                    running.join(more, self._prefill(more))
            if not running.rows:
                return results
            self.step_rows.append(len(running.rows))
            tokens, logprobs = self._sample(running.logits[:, -1].float(), running.rows, running.gens)
            chosen, keep = [], []
            for j, r in enumerate(running.rows):
                out = running.outs[j]
                if r.future.abandoned:  # its caller is gone: the row leaves now, nothing of it is kept
                    self.cancelled["decoding"] += 1
                    results[id(r)] = out
                    if finish is not None:
                        finish(r, out)
                    continue
                out.ids.append(tokens[j])
                out.logprobs.append(logprobs[j])
                if tokens[j] not in self.eos_ids and len(out.ids) < r.max_new_tokens:
                    chosen.append(tokens[j])
                    keep.append(j)
                    continue
                if running.joined:  # its cache holds its prompt and every sampled token but the last
                    self._keep_row(r, out, running.cache, j, running.starts[j])
                results[id(r)] = out
                if finish is not None:
                    finish(r, out)
            order = running.select(keep)
            if not order:
                continue  # every row ended: admit what waits, or return
            sampled = dict(zip(keep, chosen))
            running.forward(torch.tensor([[sampled[j]] for j in order]))

    def _keep_row(self, r: _Request, out: Decoded, cache: Any, row: int, start: int) -> None:
        """Keep row `row`'s cache (its prompt and the sampled tokens fed back, from `start`: without the left padding)."""
        fed = len(out.ids) - 1  # the last sampled token was never fed back
        if fed < 0 or not self.prefixes.budget:
            return
        lo, hi = start, start + len(r.ids) + fed
        kept = [(layer.keys[row : row + 1, :, lo:hi], layer.values[row : row + 1, :, lo:hi]) for layer in cache.layers]
        self.prefixes.put(r.group, r.ids + out.ids[:fed], kept)

    def _sample(self, step: Any, rows: list[_Request], gens: list[Any]) -> tuple[list[int], list[float]]:
        """Every row's next token and its logprob, from one step's logits (rows, vocab), in a few batched ops: a
        greedy row (temperature 0) takes the argmax; a sampled row divides by its temperature, is filtered (`_filtered`)
        and draws by an exponential race from its own generator (argmax of p / Exp(1): the draw torch.multinomial makes
        for one sample, with the same generator use, so the tokens are the ones it would sample), so its tokens depend
        on its seed alone."""
        import torch

        temps = torch.tensor([r.temperature for r in rows])
        greedy = temps <= 0
        logps = torch.log_softmax(self._filtered(step / torch.where(greedy, 1.0, temps)[:, None]), dim=-1)
        if bool(greedy.any()):
            logps = torch.where(greedy[:, None], torch.log_softmax(step, dim=-1), logps)
        probs = logps.exp()
        race = torch.stack([torch.empty(probs.shape[-1]).exponential_(1, generator=g) for g in gens])
        tokens = torch.where(greedy, logps.argmax(-1), (probs / race).argmax(-1))
        return tokens.tolist(), logps.gather(1, tokens[:, None])[:, 0].tolist()

    def _filtered(self, scaled: Any) -> Any:
        """top-k, then top-p (nucleus) on temperature-scaled logits (rows, vocab): the rest set to -inf."""
        import torch

        if self.top_k is not None and self.top_k < scaled.shape[-1]:
            kth = torch.topk(scaled, self.top_k, dim=-1).values[:, -1:]
            scaled = scaled.masked_fill(scaled < kth, float("-inf"))
        if self.top_p is not None:
            ordered, order = torch.sort(scaled, descending=True, dim=-1)
            probs = torch.softmax(ordered, dim=-1)
            drop = probs.cumsum(-1) - probs >= self.top_p  # keep the smallest prefix reaching top_p
            scaled = scaled.masked_fill(torch.zeros_like(drop).scatter(-1, order, drop), float("-inf"))
        return scaled


class _PrefixStore:
    """Finished rows' KV caches, by group (an adapter's cache is its own), up to `budget` bytes, least
    recently used first out. A multi-turn episode's next context is its last context, the sampled
    tokens and what the env said: prefilling only the new part saves most of a turn's prefill (on the
    tiny policy, prefill was 60% of a held-out evaluation's model time; bench/decode.py). The weights
    must not change under a kept cache. Whoever changes them calls BatchGenerator.forget_prefixes();
    `check` is a guard on top, best effort: it drops everything when parameters were added (an
    adapter loaded) or an in-place write bumped a version counter (a fused optimizer step does not)."""

    MIN_REUSE = 16  # shorter shared prefixes (a bare chat header) are not worth a lookup

    def __init__(self, budget: int) -> None:
        self.budget = max(0, int(budget))
        self.entries: dict[int, _Kept] = {}  # insertion order = recency
        self.size = 0
        self.weights: tuple[int, int] | None = None
        self._next = 0

    def check(self, model: Any) -> None:
        if not self.budget:
            return
        params = list(model.parameters())
        version = (len(params), sum(p._version for p in params))  # an adapter loaded, or any weight written
        if version != self.weights:
            self.clear()
            self.weights = version

    def clear(self) -> None:
        self.entries.clear()
        self.size = 0

    def longest(self, group: Hashable, ids: list[int]) -> tuple[list[tuple[Any, Any]] | None, int]:
        """The kept cache sharing the longest prefix with `ids` (leaving at least one token to prefill)."""
        import numpy as np

        best, best_len = None, 0
        want = np.asarray(ids[:-1], dtype=np.int64)
        for key, kept in self.entries.items():
            if kept.group == group and (common := _common_prefix(kept.ids, want)) > best_len:
                best, best_len = key, common
        if best is None or best_len < self.MIN_REUSE:
            return None, 0
        self.entries[best] = entry = self.entries.pop(best)  # most recently used
        return entry.tensors, best_len

    def put(self, group: Hashable, ids: list[int], views: list[tuple[Any, Any]]) -> None:
        """Keep a copy of `views` (one row's keys/values per layer, covering `ids`) if it fits the budget."""
        import numpy as np

        kept = np.asarray(ids, dtype=np.int64)
        for key in [
            k for k, e in self.entries.items() if e.group == group and _common_prefix(e.ids, kept) == len(e.ids)
        ]:
            self._drop(key)  # an earlier turn of the same episode: this one extends it
        nbytes = sum(k.nbytes + v.nbytes for k, v in views)
        if nbytes > self.budget:
            return
        self.entries[self._next] = _Kept(group, kept, [(k.clone(), v.clone()) for k, v in views], nbytes)
        self._next += 1
        self.size += nbytes
        while self.size > self.budget:
            self._drop(next(iter(self.entries)))

    def _drop(self, key: int) -> None:
        self.size -= self.entries.pop(key).nbytes


@dataclass
class _Kept:
    group: Hashable
    ids: Any  # int64 array of the token ids the cache covers
    tensors: list[tuple[Any, Any]]  # per layer: keys, values of shape (1, heads, len(ids), dim)
    nbytes: int


def _common_prefix(a: Any, b: Any) -> int:
    """Length of the common prefix of two int arrays (one vectorized compare)."""
    n = min(len(a), len(b))
    same = a[:n] == b[:n]
    return n if same.all() else int(same.argmin())


def _joinable(cache: Any) -> bool:
    """Only plain full-attention layers can be left-padded and joined (not a sliding window)."""
    return all(type(layer).__name__ == "DynamicLayer" for layer in cache.layers)


def _reserve(cache: Any, room: int) -> None:
    """Turn a prefilled cache's layers into slot layers with room for `room` more tokens (bench/engine.py's
    roofline and the tests decode over a cache built this way, as the engine's batches do)."""
    layers = []
    for layer in cache.layers:
        slot = _slot_layer(layer.keys, layer.keys.shape[0], layer.keys.shape[-2] + room)
        slot.n = layer.keys.shape[0]
        slot.update(layer.keys, layer.values)
        layers.append(slot)
    cache.layers = layers


@functools.cache
def _slot_layer_class() -> type:
    from transformers.cache_utils import DynamicLayer

    class SlotLayer(DynamicLayer):
        """A cache layer over slot buffers (`_Running`) with spare columns: `update` writes the new positions in
        place, so a decode step reads the cache but does not copy it (transformers' own layer re-copies its whole
        cache at every step: torch.cat, a quarter of a step at 16 rows x 600 tokens, bench/decode.py). Only the
        first `n` slots take part in a forward."""

        def __init__(self, like: Any, slots: int, columns: int) -> None:
            super().__init__()
            self.dtype, self.device, self.is_initialized = like.dtype, like.device, True
            self.length, self.n = 0, 0
            shape = (slots, like.shape[1], columns, like.shape[-1])
            self._k, self._v = like.new_zeros(shape), like.new_zeros(shape)
            self._views()

        def _views(self) -> None:
            self.keys, self.values = self._k[: self.n, :, : self.length], self._v[: self.n, :, : self.length]

        def update(self, key_states: Any, value_states: Any, *args: Any, **kwargs: Any) -> tuple[Any, Any]:
            new = key_states.shape[-2]
            self.grow(self.n, self.length + new)
            self._k[: self.n, :, self.length : self.length + new] = key_states
            self._v[: self.n, :, self.length : self.length + new] = value_states
            self.length += new
            self._views()
            return self.keys, self.values

        def grow(self, slots: int, columns: int) -> None:
            have_s, have_c = self._k.shape[0], self._k.shape[2]
            if slots <= have_s and columns <= have_c:
                return
            shape = (
                max(slots, have_s if slots <= have_s else 2 * have_s),
                self._k.shape[1],
                max(columns, have_c if columns <= have_c else 2 * have_c),
                self._k.shape[-1],
            )
            for name in ("_k", "_v"):
                old = getattr(self, name)
                buffer = old.new_zeros(shape)
                buffer[:have_s, :, :have_c] = old
                setattr(self, name, buffer)
            self._views()

        def shift(self, by: int, pos: int) -> None:
            """Columns 0..pos-1 of the live slots move `by` columns (right: zeros come in first)."""
            for buffer in (self._k, self._v):
                rows = buffer[: self.n]
                moved = rows[:, :, max(0, -by) : pos].clone()
                rows[:, :, max(0, by) : max(0, by) + moved.shape[2]] = moved
                if by > 0:
                    rows[:, :, :by] = 0
            self.length = pos + by
            self._views()

        def _unsupported(self, *args: Any, **kwargs: Any) -> None:
            raise NotImplementedError("a slot cache only grows, shifts and takes rows through _Running")

        # these would replace or zero keys/values behind the buffers' back: nothing here calls them (no beam search,
        # no offloading)
        crop = reset = reorder_cache = batch_repeat_interleave = batch_select_indices = offload = prefetch = (
            lazy_initialization
        ) = _unsupported

    return SlotLayer


def _slot_layer(like: Any, slots: int, columns: int) -> Any:
    return _slot_layer_class()(like, slots, columns)


def eos_ids_of(model: Any, tokenizer: Any) -> set[int]:
    """The ids generation stops at: the model's generation config's eos ids, else the tokenizer's."""
    configured = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
    ids = configured if isinstance(configured, list) else [configured]
    found = {int(i) for i in ids if i is not None}
    if tokenizer.eos_token_id is not None:
        found.add(int(tokenizer.eos_token_id))
    return found
