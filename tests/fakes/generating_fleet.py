"""Fake servers that keep taking generate requests while a weight sync runs over them.

`GeneratingFleet` wraps `FakeSyncServer`s: `fleet.server(fake)` is the `WeightSyncServer` a sync
drives. Before and after every control call on any server, the fleet sends one generate request
to every server, as a rollout loop that keeps submitting would: a paused server holds it (vLLM's
`/pause mode=keep`), an unpaused one answers it from its model. Each observation is recorded as a
`Snapshot` (who was paused, who answered), and every control call as `(url, method)` in `calls`,
so a test can check the order of the handshake per server, how many servers were ever paused at
once, and that the unpaused ones kept answering with an intact model.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence

import attrs

from application.ports.weight_sync import TransferInit
from domain.tensors import TensorSpec
from tests.fakes.fake_sync import FakeSyncServer


@attrs.frozen
class Snapshot:
    paused: frozenset[str]
    answered: frozenset[str]
    broken: frozenset[str]  # answered from a model that is not intact (must never happen)


class GeneratingFleet:
    def __init__(self, fakes: Sequence[FakeSyncServer]) -> None:
        self.fakes = tuple(fakes)
        self.snapshots: list[Snapshot] = []
        self.calls: list[tuple[str, str]] = []
        self._lock = threading.Lock()

    def server(self, fake: FakeSyncServer) -> FleetServer:
        return FleetServer(fake, self)

    @property
    def max_paused(self) -> int:
        return max((len(s.paused) for s in self.snapshots), default=0)

    def calls_of(self, url: str) -> list[str]:
        return [method for who, method in self.calls if who == url]

    def generate_everywhere(self) -> None:
        """One generate request to every server: held by the paused ones, answered by the others."""
        with self._lock:
            paused = frozenset(f.url for f in self.fakes if f.paused)
            serving = [f for f in self.fakes if not f.paused]
            broken = frozenset(f.url for f in serving if f.model != "intact")
            self.snapshots.append(Snapshot(paused, frozenset(f.url for f in serving), broken))

    def observe(self, url: str, method: str, call: Callable[[], object]) -> object:
        with self._lock:
            self.calls.append((url, method))
        self.generate_everywhere()
        try:
            return call()
        finally:
            self.generate_everywhere()


class FleetServer:
    """`WeightSyncServer` over one fake of the fleet; every call is observed by the fleet."""

    def __init__(self, fake: FakeSyncServer, fleet: GeneratingFleet) -> None:
        self.fake = fake
        self._fleet = fleet

    @property
    def url(self) -> str:
        return self.fake.url

    def world_size(self) -> int:
        return self._fleet.observe(self.url, "world_size", self.fake.world_size)

    def init_weight_transfer(self, init: TransferInit, rank_offset: int) -> None:
        self._fleet.observe(self.url, "init_weight_transfer", lambda: self.fake.init_weight_transfer(init, rank_offset))

    def pause(self) -> None:
        self._fleet.observe(self.url, "pause", self.fake.pause)

    def start_weight_update(self) -> None:
        self._fleet.observe(self.url, "start_weight_update", self.fake.start_weight_update)

    def update_weights(self, specs: Sequence[TensorSpec]) -> None:
        self._fleet.observe(self.url, "update_weights", lambda: self.fake.update_weights(specs))

    def finish_weight_update(self, weight_version: int) -> None:
        self._fleet.observe(self.url, "finish_weight_update", lambda: self.fake.finish_weight_update(weight_version))

    def reset_prefix_cache(self) -> None:
        self._fleet.observe(self.url, "reset_prefix_cache", self.fake.reset_prefix_cache)

    def resume(self) -> None:
        self._fleet.observe(self.url, "resume", self.fake.resume)

    def weight_version(self) -> int | None:
        return self._fleet.observe(self.url, "weight_version", self.fake.weight_version)
