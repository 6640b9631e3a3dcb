"""Patch ``fully_async.resume_pending_prompts``: a fully-async resume trains every prompt the saved run drew but had
not trained, once, before it draws new ones (field case C04 (b); the TODO verl added with PR #4199).

verl v0.8.0's ``FullyAsyncRollouter.save_checkpoint`` (``verl/experimental/fully_async_policy/fully_async_rollouter.py``)
saves only ``self.train_dataloader.state_dict()``: the position of the dataloader, which runs ahead of the trainer by
every prompt drawn and not yet trained -- up to 128 in ``pending_queue``, one in the feed's blocked ``put``, the
samples being generated (``active_tasks``) and those waiting in the ``MessageQueue``. After a restart those are never
trained, and ``load_checkpoint`` resets the prompt counter ``global_steps`` to ``N * required_samples * T + 1`` as if
they had been. The same save loses three more parts of the rollouter's state: the epoch (``_create_continuous_iterator``
counts from 0 again, so a resume in epoch 2 labels its samples epoch 0), the statistics counters
(``total_generated_samples``, ``dropped_stale_samples``, ``processed_sample_count`` start from 0), and the prompts
the queue dropped (the counter formula assumes none).

The patch keeps a ledger of every prompt the rollouter draws, by its row index in the training dataset (the dataset
is wrapped so each row carries it; the mark is taken off before the agent loop sees the batch). A draw leaves the
ledger's "outstanding" set when the ``MessageQueue`` acknowledged it (puts are serialised so that the ledger's order
is the queue's); the last acknowledged puts stay in a log as long as they can still be in the queue. When verl saves
(``train_dataloader.state_dict()``), the ledger asks the queue how many samples left it (``total_consumed`` +
``dropped_samples``: the trainer is blocked in ``save_checkpoint`` then, so nothing is consumed meanwhile) and writes
into ``data.pt``, next to the dataloader state: the prompts still in the queue plus the outstanding ones (epoch, row
index and verl's counter ``global_steps`` at the draw, in draw order), the next counter, the statistics as they will be
once those are trained, and the epoch. A resume feeds those rows first (through the same dataset and ``collate_fn``),
each with its own counter -- verl names a sample ``sample_{epoch}_{global_steps}`` and GRPO groups responses by the
``uid`` made from it, so a fresh counter could give a re-fed prompt the uid of one trained before the save -- then
continues the dataloader from the next counter, counting epochs from the saved one. Each prompt is trained once, and
sample names, uids and counters come out as in a run that was never stopped. A
``data.pt`` without the ledger (written without the patch) still loads; a line then says that up to
``max_required_samples`` + 130 drawn prompts were skipped (the C04 minimum). A ``data.pt`` with the ledger loads
with the patch off too: torchdata's ``StatefulDataLoader`` ignores the extra key.

Standard library at import (the registry imports this module at interpreter start).
"""

import collections
import contextvars
import sys

_ROLLOUTER = "verl.experimental.fully_async_policy.fully_async_rollouter"
_ACTOR = "FullyAsyncRollouter.__ray_metadata__.modified_class"  # the class Ray pickles for the rollouter actor

RECORD = {
    "id": "fully_async.resume_pending_prompts",
    "title": "a fully-async resume never trains the prompts drawn before the save (C04)",
    "summary": (
        "the fully-async rollouter saves only its dataloader position, which runs ahead of the trainer by every "
        "prompt drawn for queued or running samples (up to max_required_samples + 130; 39-45 % of geo3k at the recipe "
        "defaults): after a restart those prompts are never trained, and the epoch and counters restart; the "
        "checkpoint now records them (dataset row indices) and a resume feeds them first, each once"
    ),
    "upstream": "the TODO of verl PR #4199 in FullyAsyncRollouter.save_checkpoint (open in verl 0.8.0-0.9.1)",
    "applies_when": (
        "FullyAsyncRollouter.save_checkpoint saves train_dataloader.state_dict() and nothing of the queued or running "
        "samples (verl v0.8.0-0.9.1)"
    ),
    "targets": (
        (_ROLLOUTER, _ACTOR + "._create_dataloader"),
        (_ROLLOUTER, _ACTOR + "._create_continuous_iterator"),
        (_ROLLOUTER, _ACTOR + "._process_single_sample_streaming"),
        (_ROLLOUTER, _ACTOR + ".set_message_queue_client"),
    ),
    "detector": __name__ + ":is_faulty",
    "replacement": __name__ + ":make_replacement",
    "wraps": True,
    "verify": __name__ + ":verify",
    "recheck_after": (),
}

#: non-tensor key of a drawn batch: the dataset row index (set by :class:`IndexedDataset`), then the ledger's draw id
KEY = "__vlgrpo_draw__"
#: entry of the dataloader state dict (``data.pt``) holding the ledger
STATE_KEY = "vlgrpo_resume_pending_prompts"
FORMAT = 1
#: verl v0.8.0 FullyAsyncRollouter: pending_queue maxsize 128, + the feed's blocked put, + the processor's hand
_UNRECORDED = 130
_COUNTERS = ("total_generated_samples", "dropped_stale_samples", "processed_sample_count")
#: (ledger, draw id) of the sample whose _process_single_sample_streaming runs in this task
_CURRENT = contextvars.ContextVar("vlgrpo_resume_pending_prompts", default=None)


# ---- detector --------------------------------------------------------------------------------------------------


def _methods(source):
    import ast

    tree = ast.parse(source)
    cls = [n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "FullyAsyncRollouter"]
    if not cls:
        return {}
    return {n.name: n for n in cls[-1].body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}


def is_faulty(obj=None, rollouter_source=None):
    """``(faulty, reason)`` for the fully-async rollouter (the source of its module in ``rollouter_source``, else the
    imported module's; ``obj``, the target being checked, is not needed). Faulty when ``save_checkpoint`` saves
    ``train_dataloader.state_dict()`` and refers to none of ``pending_queue`` / ``active_tasks`` /
    ``message_queue_client``. Raises ``RuntimeError`` (the engine reports "failed") when the code this patch hooks
    into is not shaped as in verl v0.8.0."""
    import inspect

    from vlgrpo.patches.source import mentions

    if rollouter_source is None:
        module = sys.modules.get(_ROLLOUTER)
        if module is None or not hasattr(module, "FullyAsyncRollouter"):
            raise RuntimeError(f"{_ROLLOUTER}.FullyAsyncRollouter is not defined yet")
        rollouter_source = inspect.getsource(module)
    m = _methods(rollouter_source)
    save = m.get("save_checkpoint")
    if save is None:
        return False, "FullyAsyncRollouter has no save_checkpoint"
    if not mentions(save, attrs=("train_dataloader",)):
        return False, "FullyAsyncRollouter.save_checkpoint does not save the dataloader state"
    if mentions(save, attrs=("pending_queue", "active_tasks", "message_queue_client")):
        return False, "FullyAsyncRollouter.save_checkpoint records the queued and running samples"
    missing = [
        need
        for need, ok in (
            (
                "_feed_samples iterating self._create_continuous_iterator()",
                "_feed_samples" in m and mentions(m["_feed_samples"], attrs=("_create_continuous_iterator",)),
            ),
            (
                "_process_single_sample_streaming putting into self.message_queue_client",
                "_process_single_sample_streaming" in m
                and mentions(m["_process_single_sample_streaming"], attrs=("put_sample",)),
            ),
            (
                "__init__ passing the train dataset to self._create_dataloader",
                "__init__" in m and mentions(m["__init__"], attrs=("_create_dataloader",)),
            ),
        )
        if not ok
    ]
    if missing:
        raise RuntimeError(
            "save_checkpoint loses in-flight prompts, but the rollouter differs from verl v0.8.0 "
            f"where the ledger hooks in (missing: {'; '.join(missing)}); left unpatched"
        )
    return True, (
        f"save_checkpoint (line {save.lineno}) saves only the dataloader position: the prompts drawn for "
        "queued and running samples are skipped after a restart (verl PR #4199's TODO)"
    )


# ---- the ledger ------------------------------------------------------------------------------------------------


class IndexedDataset:
    """The training dataset with each row's index added under :data:`KEY` (``row[KEY] = i`` for ``dataset[i]``);
    everything else is the wrapped dataset's (attributes are looked up there). Picklable for DataLoader workers."""

    def __init__(self, dataset):
        self.dataset = dataset

    def __len__(self):
        return len(self.dataset)

    def __getitem__(self, index):
        row = dict(self.dataset[index])
        row[KEY] = int(index)
        return row

    def __getattr__(self, name):
        if name == "dataset":  # unpickling: __dict__ not restored yet
            raise AttributeError(name)
        return getattr(self.dataset, name)


class Ledger:
    """What the rollouter ``owner`` drew and where each draw is: outstanding (drawn, queue has not acknowledged it),
    in the put log (acknowledged; still in the queue unless consumed or dropped), or staged for re-feeding."""

    def __init__(self, owner, loader):
        self.owner, self.loader = owner, loader
        self.client = None  # verl's MessageQueueClient (set_message_queue_client)
        self.outstanding = {}  # draw id -> (epoch, row, counter): verl's global_steps when it drew the row
        self.put_log = collections.deque()  # (queue position, draw id, epoch, row, counter, accepted)
        self.put_count = 0
        self.refeed = collections.deque()  # (epoch, row, counter) staged by a resume, not drawn yet
        self.next_id, self.next_new, self.epoch, self.started = 0, None, 0, False
        self._lock = None

    # -- drawing (the rollouter's feed) --
    def iterate(self, inner):
        """Replacement of ``_create_continuous_iterator``: ``(epoch, batch)`` for the staged rows, then the dataloader
        ``inner`` from the saved epoch to ``trainer.total_epochs``. A staged row is fed with the counter it had in the
        saved run (verl names a sample ``sample_{epoch}_{global_steps}`` and its ``uid`` after that name, which
        groups a prompt's responses for GRPO: a new counter could repeat the name of a prompt trained before the
        save); new rows continue from the saved run's next counter."""
        self.started = True
        if self.next_new is None:
            self.next_new = self.owner.global_steps
        collate = inner.collate_fn
        while self.refeed:
            epoch, row, counter = self.refeed.popleft()
            self.owner.global_steps = counter
            yield epoch, self._draw(epoch, collate([inner.dataset[row]]), new=False)
        self.owner.global_steps = self.next_new
        total = self.owner.config.trainer.total_epochs
        for epoch in range(self.epoch, total):
            self.epoch = epoch
            for batch in inner:
                if self._capped():
                    return
                yield epoch, self._draw(epoch, batch, new=True)
        self.epoch = total  # every epoch drawn: a resume from here draws nothing new

    def _capped(self):
        """True when the next draw would get a counter past ``total_rollout_steps`` (verl's feed stops at it)."""
        cap = getattr(self.owner, "total_rollout_steps", None)
        return cap is not None and self.owner.global_steps > cap

    def _draw(self, epoch, batch, new):
        import numpy as np

        row, counter = int(batch[KEY][0]), int(self.owner.global_steps)  # verl's counter of this draw
        draw_id, self.next_id = self.next_id, self.next_id + 1
        self.outstanding[draw_id] = (epoch, row, counter)
        if new:
            self.next_new = counter + 1
        batch[KEY] = np.array([draw_id], dtype=object)
        return batch

    # -- the queue --
    def lock(self):
        import asyncio

        if self._lock is None:
            self._lock = asyncio.Lock()
        return self._lock

    def put_done(self, draw_id, accepted):
        epoch, row, counter = self.outstanding.pop(draw_id)
        self.put_log.append((self.put_count, draw_id, epoch, row, counter, bool(accepted)))
        self.put_count += 1
        keep = (getattr(self.owner, "max_queue_size", None) or 0) + 1  # the queue holds at most max_queue_size
        while keep > 1 and self.put_log and self.put_log[0][0] < self.put_count - keep:
            self.put_log.popleft()

    # -- saving and resuming --
    def snapshot(self):
        """The ledger entry of ``data.pt``. Asks the queue (a blocking Ray call) how many samples left it; the
        trainer waits for this save, so none leaves meanwhile."""
        stats = self.client.get_statistics_sync() if self.client is not None else None
        left = stats["total_consumed"] + stats["dropped_samples"] if stats else self.put_count
        queued = [e for e in self.put_log if e[0] >= left]
        pending = sorted(
            [list(x) for x in self.outstanding.values()]
            + [[e, r, c] for _, _, e, r, c, _ in queued]
            + [list(x) for x in self.refeed],
            key=lambda x: x[2],
        )  # draw order = counter order
        nxt = self.next_new if self.next_new is not None else self.owner.global_steps
        counters = {name: int(getattr(self.owner, name, 0) or 0) for name in _COUNTERS}
        counters["total_generated_samples"] -= sum(1 for e in queued if e[5])
        counters["dropped_stale_samples"] -= sum(1 for e in queued if not e[5])
        counters["processed_sample_count"] -= len(queued)
        return {
            "format": FORMAT,
            "dataset_rows": len(self.loader.dataset),
            "pending": pending,
            "global_steps": int(nxt),
            "epoch": self.epoch,
            "counters": counters,
        }

    def stage(self, saved):
        """Take a :meth:`snapshot` back (from ``data.pt`` at ``load_checkpoint``): rows to feed first, the counter,
        the statistics and the epoch. ``None`` (a ``data.pt`` written without the patch): say what may be lost."""
        from vlgrpo.patches import log

        owner = self.owner
        if saved is None:
            bound = (getattr(owner, "max_required_samples", None) or 0) + _UNRECORDED
            log.logger().warning(
                "vlgrpo: the checkpoint's data.pt has no record of the prompts drawn but not trained when it was "
                "saved (written without patch fully_async.resume_pending_prompts): up to %d prompts drawn before the "
                "save are skipped (field case C04)",
                bound,
            )
            return
        rows = len(self.loader.dataset)
        if saved.get("format") != FORMAT or saved.get("dataset_rows") != rows:
            raise ValueError(
                f"data.train_files: the checkpoint's prompt ledger was written for a training set of "
                f"{saved.get('dataset_rows')} rows (format {saved.get('format')}), this run has {rows}; the dataloader "
                "position and the prompts to re-feed refer to other rows. Fix: resume with the same data.train_files, "
                "or start fresh (trainer.resume_mode=disable, VLGRPO_RESUME_MODE=disable)"
            )
        self.refeed = collections.deque((int(e), int(r), int(c)) for e, r, c in saved["pending"])
        self.epoch, self.next_new = int(saved["epoch"]), int(saved["global_steps"])
        owner.global_steps = self.refeed[0][2] if self.refeed else self.next_new  # the counter of the first draw
        for name, value in saved.get("counters", {}).items():
            if name in _COUNTERS:
                setattr(owner, name, int(value))
        log.logger().warning(
            "vlgrpo: resuming the fully-async rollouter at prompt %d (epoch %d): %d prompts drawn "
            "but not trained before the save are fed first",
            owner.global_steps,
            self.epoch,
            len(self.refeed),
        )


class LedgerLoader:
    """``FullyAsyncRollouter.train_dataloader`` with the :class:`Ledger`: ``state_dict()`` adds the ledger entry,
    ``load_state_dict()`` takes it off and stages it; everything else is the wrapped ``StatefulDataLoader``'s."""

    def __init__(self, inner, owner):
        self.inner = inner
        self.vlgrpo_ledger = Ledger(owner, inner)

    def __len__(self):
        return len(self.inner)

    def __iter__(self):
        return iter(self.inner)

    def state_dict(self):
        state = self.inner.state_dict()
        state[STATE_KEY] = self.vlgrpo_ledger.snapshot()
        return state

    def load_state_dict(self, state):
        state = dict(state)
        saved = state.pop(STATE_KEY, None)
        self.inner.load_state_dict(state)
        self.vlgrpo_ledger.stage(saved)

    def __getattr__(self, name):
        if name in ("inner", "vlgrpo_ledger"):
            raise AttributeError(name)
        return getattr(self.inner, name)


class LedgerClient:
    """The rollouter's ``MessageQueueClient``: a sample put from ``_process_single_sample_streaming`` is serialised
    with the other such puts and recorded in the ledger once acknowledged; everything else is the client's."""

    def __init__(self, client, ledger):
        self.client, self.ledger = client, ledger

    async def put_sample(self, sample):
        current = _CURRENT.get()
        if current is None or current[0] is not self.ledger:
            return await self.client.put_sample(sample=sample)
        async with self.ledger.lock():
            accepted = await self.client.put_sample(sample=sample)
            self.ledger.put_done(current[1], accepted)
        return accepted

    def __getattr__(self, name):
        if name in ("client", "ledger"):
            raise AttributeError(name)
        return getattr(self.client, name)


def ledger_of(rollouter):
    """The :class:`Ledger` of ``rollouter`` (``None`` when its dataloader was not wrapped)."""
    return getattr(getattr(rollouter, "train_dataloader", None), "vlgrpo_ledger", None)


# ---- the replacements ------------------------------------------------------------------------------------------


def make_replacement(original):
    """The replacement of one target of :data:`RECORD`, chosen by the original's name."""
    name = getattr(original, "__name__", "")

    if name == "_create_dataloader":

        def _create_dataloader(self, train_dataset, *args, **kwargs):
            if train_dataset is None:  # verl would build it itself: nothing to index
                return original(self, train_dataset, *args, **kwargs)
            result = original(self, IndexedDataset(train_dataset), *args, **kwargs)
            self.train_dataloader = LedgerLoader(self.train_dataloader, self)
            return result

        wrapper = _create_dataloader
    elif name == "_create_continuous_iterator":

        def _create_continuous_iterator(self, *args, **kwargs):
            ledger = ledger_of(self)
            if ledger is None:
                yield from original(self, *args, **kwargs)
                return
            yield from ledger.iterate(self.train_dataloader.inner)

        wrapper = _create_continuous_iterator
    elif name == "_process_single_sample_streaming":

        async def _process_single_sample_streaming(self, rollout_sample, *args, **kwargs):
            ledger = ledger_of(self)
            batch = getattr(getattr(rollout_sample, "full_batch", None), "non_tensor_batch", None)
            mark = batch.pop(KEY, None) if batch is not None else None
            token = _CURRENT.set((ledger, int(mark[0])) if ledger is not None and mark is not None else None)
            try:
                return await original(self, rollout_sample, *args, **kwargs)
            finally:
                _CURRENT.reset(token)

        wrapper = _process_single_sample_streaming
    elif name == "set_message_queue_client":

        async def set_message_queue_client(self, message_queue_client, *args, **kwargs):
            ledger = ledger_of(self)
            if ledger is not None and message_queue_client is not None:
                ledger.client = message_queue_client
                message_queue_client = LedgerClient(message_queue_client, ledger)
            return await original(self, message_queue_client, *args, **kwargs)

        wrapper = set_message_queue_client
    else:
        raise TypeError(f"fully_async.resume_pending_prompts has no replacement for {name!r}")
    return wrapper


def _codes():
    codes = []
    for name in (
        "_create_dataloader",
        "_create_continuous_iterator",
        "_process_single_sample_streaming",
        "set_message_queue_client",
    ):

        def f(*a, **k):
            return None

        f.__name__ = name
        codes.append(make_replacement(f).__code__)
    return tuple(codes)


make_replacement.__vlgrpo_code__ = _codes()


# ---- verify ----------------------------------------------------------------------------------------------------


class _Queue:
    """verl's MessageQueue semantics in memory (FIFO, drops the oldest when full), for :func:`verify`."""

    def __init__(self, size):
        self.size, self.items, self.consumed, self.dropped = size, collections.deque(), 0, 0

    async def put_sample(self, sample):
        dropped = len(self.items) >= self.size
        if dropped:
            self.items.popleft()
            self.dropped += 1
        self.items.append(sample)
        return not dropped

    def get_statistics_sync(self):
        return {"total_consumed": self.consumed, "dropped_samples": self.dropped, "queue_size": len(self.items)}

    def take(self):
        self.consumed += 1
        return self.items.popleft()


def _verify_run(rows, loader_state, stop_after, trained):
    """Draw through a ledger over a real ``StatefulDataLoader``, put each draw, train (consume) FIFO; at
    ``stop_after`` trained samples save the state and return it (``None``: run to the end)."""
    import asyncio
    from types import SimpleNamespace

    import torch
    from torchdata.stateful_dataloader import StatefulDataLoader
    from torchdata.stateful_dataloader.sampler import RandomSampler

    generator = torch.Generator()
    generator.manual_seed(5)
    data = IndexedDataset([{"row": i} for i in range(rows)])
    inner = StatefulDataLoader(
        data,
        batch_size=1,
        sampler=RandomSampler(data, generator=generator),
        collate_fn=lambda items: {k: [it[k] for it in items] for k in items[0]},
    )
    owner = SimpleNamespace(
        global_steps=1,
        max_queue_size=4,
        max_required_samples=6,
        total_rollout_steps=2 * rows,
        config=SimpleNamespace(trainer=SimpleNamespace(total_epochs=2)),
        total_generated_samples=0,
        dropped_stale_samples=0,
        processed_sample_count=0,
    )
    loader = LedgerLoader(inner, owner)
    if loader_state is not None:
        loader.load_state_dict(loader_state)
    queue = _Queue(owner.max_queue_size)
    client = LedgerClient(queue, loader.vlgrpo_ledger)
    loader.vlgrpo_ledger.client = queue
    in_flight = collections.deque()

    async def put(batch):
        token = _CURRENT.set((loader.vlgrpo_ledger, int(batch.pop(KEY)[0])))
        try:
            await client.put_sample(batch["row"][0])
        finally:
            _CURRENT.reset(token)

    for _epoch, batch in loader.vlgrpo_ledger.iterate(inner):
        batch["row"] = [(batch["row"][0], _epoch, owner.global_steps)]  # verl names the sample by epoch and counter
        in_flight.append(batch)  # drawn; the second oldest draw finishes first (out of order)
        owner.global_steps += 1
        if len(in_flight) >= 3:
            first = in_flight.popleft()
            asyncio.run(put(in_flight.popleft()))
            asyncio.run(put(first))
        while len(queue.items) > 2:
            trained.append(queue.take())
            if len(trained) == stop_after:
                return loader.state_dict()
    for batch in in_flight:
        asyncio.run(put(batch))
    while queue.items:
        trained.append(queue.take())
    return None


def verify() -> None:
    """Twenty rows over two epochs through a ledger on a real ``StatefulDataLoader`` with a shuffling sampler: samples
    finish out of order, the queue holds a few; the run is stopped after 13 trained samples and resumed from the
    saved state. Every row is trained exactly twice in all (once per epoch), as without the stop, and the (epoch,
    counter) names of the samples are those of a run never stopped: 1..40, each once. Raises ``AssertionError``."""
    trained = []
    state = _verify_run(20, None, 13, trained)
    assert state is not None and STATE_KEY in state, state
    entry = state[STATE_KEY]
    assert entry["pending"] and entry["global_steps"] == 14 + len(entry["pending"]), entry
    _verify_run(20, state, None, trained)
    counts = collections.Counter(row for row, _, _ in trained)
    assert sorted(counts) == list(range(20)) and set(counts.values()) == {2}, counts
    names = sorted(counter for _, _, counter in trained)
    assert names == list(range(1, 41)), names
    assert all(epoch == (counter - 1) // 20 for _, epoch, counter in trained), trained
