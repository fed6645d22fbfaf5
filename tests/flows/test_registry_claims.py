"""The registry's claims under real concurrency: two processes on one SQLite file.

Two processes ('spawn', so nothing is shared but the file) are released together by a
barrier and race to claim the same 30 keys: each key goes to exactly one of them. A
released claim can be taken again, and only its owner can release it. The registry
itself is opened by both processes at once on a fresh file, as two flow runs started
together on a new output root do.
"""

from __future__ import annotations

import multiprocessing as mp
import queue
import time
import traceback

import pytest
import sqlalchemy as sa

from flows.registry import claims_table, open_registry

N_KEYS = 30
KEYS = [f"{k:064x}" for k in range(1, N_KEYS + 1)]  # like the layers' SHA-256
REF = "f" * 64
PARAMS = "e" * 64
OWNERS = ("flow-run-a", "flow-run-b")
TIMEOUT_S = 180


def _claim_worker(url: str, barrier, owner: str, rounds: list[tuple[str, bool]], results) -> None:
    """Per round (reference, reversed order): wait for the other process, claim every key."""
    try:
        registry = open_registry(url)
        for ref, backwards in rounds:
            keys = KEYS[::-1] if backwards else KEYS
            barrier.wait(timeout=TIMEOUT_S)
            won = [key for key in keys if registry.claim(key, ref, PARAMS, owner)]
            results.put((owner, ref, won, None))
        registry.close()
    except BaseException:  # noqa: BLE001 - reported to the parent
        results.put((owner, None, None, traceback.format_exc()))


def _open_worker(directory: str, barrier, owner: str, n_files: int, results) -> None:
    """Open a fresh registry file together with the other process, ``n_files`` times."""
    errors = []
    for i in range(n_files):
        barrier.wait(timeout=TIMEOUT_S)
        try:
            open_registry(f"sqlite:///{directory}/fresh-{i}.sqlite").close()
        except Exception as exc:  # noqa: BLE001 - counted
            errors.append(f"file {i}: {type(exc).__name__}: {str(exc).splitlines()[0]}")
    results.put((owner, errors))


class _Pair:
    """Two spawned processes running ``target``, started together, and their results.

    Keeps the barrier and the queue referenced while the children unpickle them.
    """

    def __init__(self, target, args_of) -> None:
        ctx = mp.get_context("spawn")
        self.barrier, self.results = ctx.Barrier(len(OWNERS)), ctx.Queue()
        self.procs = [ctx.Process(target=target, args=args_of(self.barrier, owner, self.results), daemon=True)
                      for owner in OWNERS]
        for p in self.procs:
            p.start()

    def get(self):
        """The next result; RuntimeError when a process died or nothing came in time."""
        deadline = time.monotonic() + TIMEOUT_S
        while time.monotonic() < deadline:
            try:
                return self.results.get(timeout=0.5)
            except queue.Empty:
                if any(p.exitcode not in (None, 0) for p in self.procs):
                    raise RuntimeError(f"a process died: exit codes {[p.exitcode for p in self.procs]}") from None
        raise RuntimeError("a process reported nothing in time")

    def finish(self) -> None:
        for p in self.procs:
            p.join(timeout=60)
        for p in self.procs:
            if p.is_alive():  # only the processes this test started
                p.terminate()
                p.join(timeout=10)
        if any(p.exitcode != 0 for p in self.procs):
            raise RuntimeError(f"exit codes {[p.exitcode for p in self.procs]}")


def _claims(url: str, ref: str) -> dict[str, str]:
    """key -> owner of every claim on this reference, read straight from the table."""
    engine = sa.create_engine(url)
    try:
        with engine.connect() as conn:
            rows = conn.execute(sa.select(claims_table.c.key, claims_table.c.owner)).all()
    finally:
        engine.dispose()
    out = {}
    for key, owner in rows:
        pred, r, _ = key.split(":")
        if r == ref:
            out[pred] = owner
    return out


@pytest.fixture(scope="module")
def raced(tmp_path_factory):
    """Two rounds on a registry created beforehand: both processes claim the keys in
    the same order (every key contended), then in opposite orders (they meet midway)."""
    url = f"sqlite:///{tmp_path_factory.mktemp('registry') / 'r.sqlite'}"
    open_registry(url).close()
    rounds = [("1" * 64, False), ("2" * 64, None)]  # None: process b goes backwards

    def args_of(barrier, owner, results):
        mine = [(ref, owner == OWNERS[1] if backwards is None else backwards) for ref, backwards in rounds]
        return url, barrier, owner, mine, results

    pair = _Pair(_claim_worker, args_of)
    won: dict[str, dict[str, list[str]]] = {}
    try:
        for _ in range(len(OWNERS) * len(rounds)):
            owner, ref, keys, error = pair.get()
            assert error is None, error
            won.setdefault(ref, {})[owner] = keys
    finally:
        pair.finish()
    return url, won


@pytest.mark.parametrize("round_", [0, 1], ids=["same-order", "opposite-orders"])
def test_every_key_is_won_by_exactly_one_process(raced, round_):
    url, won = raced
    ref = ("1" * 64, "2" * 64)[round_]
    a, b = won[ref][OWNERS[0]], won[ref][OWNERS[1]]
    assert not set(a) & set(b)
    assert sorted(a + b) == sorted(KEYS)
    assert len(a) == len(set(a)) and len(b) == len(set(b))
    # The table agrees: one row per key, owned by the process that was told it won.
    claims = _claims(url, ref)
    assert claims == {**{k: OWNERS[0] for k in a}, **{k: OWNERS[1] for k in b}}


def test_a_claimed_key_is_refused_to_everyone_else(raced):
    url, won = raced
    ref = "1" * 64
    with open_registry(url) as registry:
        for owner, keys in won[ref].items():
            for key in keys[:3]:
                assert not registry.claim(key, ref, PARAMS, "a-third-flow-run")
                assert not registry.claim(key, ref, PARAMS, owner)  # not twice, even by its owner


def test_only_the_owner_can_release(raced):
    url, won = raced
    ref = "2" * 64
    (winner, keys), (loser, _) = sorted(won[ref].items(), key=lambda item: -len(item[1]))
    key = keys[0]
    with open_registry(url) as registry:
        registry.release(key, ref, PARAMS, loser)  # not its claim: nothing happens
        registry.release(key, ref, PARAMS, "nobody")
        assert _claims(url, ref)[key] == winner
        assert not registry.claim(key, ref, PARAMS, loser)
        registry.release(key, ref, PARAMS, winner)
        assert key not in _claims(url, ref)
        # Released: another flow run can take it now, and then holds it.
        assert registry.claim(key, ref, PARAMS, loser)
        assert _claims(url, ref)[key] == loser
        assert not registry.claim(key, ref, PARAMS, winner)
        # The other claims are untouched.
        assert len(_claims(url, ref)) == N_KEYS
        # Releasing a key nobody holds is harmless.
        registry.release("0" * 64, ref, PARAMS, winner)
        assert len(_claims(url, ref)) == N_KEYS


def test_two_processes_can_open_a_fresh_registry_together(tmp_path):
    n_files = 12
    pair = _Pair(_open_worker, lambda barrier, owner, results: (str(tmp_path), barrier, owner, n_files, results))
    try:
        reports = dict(pair.get() for _ in OWNERS)
    finally:
        pair.finish()
    errors = [e for owner in OWNERS for e in reports[owner]]
    # Only the known race is expected here (anything else is a real failure, not an AssertionError).
    unexpected = [e for e in errors if "OperationalError" not in e or "already exists" not in e]
    if unexpected:
        raise RuntimeError(f"unexpected errors opening fresh registries: {unexpected[:3]}")
    # Every file ends up a working registry either way.
    for i in range(n_files):
        with open_registry(f"sqlite:///{tmp_path}/fresh-{i}.sqlite") as registry:
            if not (registry.runs() == [] and registry.claim("a", "b", "c", "owner")):
                raise RuntimeError(f"fresh-{i}.sqlite is not a working registry")
    assert not errors, f"{len(errors)} of {2 * n_files} opens failed, e.g. {errors[0]}"
