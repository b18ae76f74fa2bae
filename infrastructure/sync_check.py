"""`rlsetup check CONFIG --sync`: one full weight sync to every configured server, then verify it.

Steps: resolve the model; take the configured server URLs, or start the embedded vLLM CPU server
when none is configured (as `rlsetup train` does; stopped at the end); ask each vLLM server which
weight-transfer backend it runs (`GET /server_info`: a server started without one fails here, by
name, instead of leaving the trainer's rendezvous waiting out its timeout); build the same
container as training (same sync targets, transport, weight source and policy); `connect()`, push
the configured model's current weights once as version `last + 1`, then verify each server with
`PromptLogprobVerifier` (its `/weight_info` version, and its prompt log-probs on a fixed probe
against the trainer's, within the dtype's tolerance: see `adapters.vllm.sync_verifier`).

Prints one row per server: url, world size, sync seconds (its pause to its resume), GB/s (tensor
bytes over those seconds), max log-prob diff, verdict. Exit 0 when every server passes, 1 with a
one-line reason per failing server otherwise. The check REPLACES the served weights with the
configured model's: do not point it at a server a training run is using.

The verifier is `infrastructure.sync_verification.build_verifier`, the one the container wires
behind `verify_sync_every_n_syncs`.
"""

from __future__ import annotations

import contextlib
import sys
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

import attrs
from dependency_injector import providers

from adapters.vllm.errors import ServerError, ServerStartError
from adapters.vllm.server_info import weight_transfer_backend
from application.ports.sync_verifier import ServerVerification, SyncVerifier
from application.sync_report import SyncReport, SyncTarget, WeightSyncError
from application.sync_weights import SyncWeights
from domain.config import RunConfig
from infrastructure import wiring
from infrastructure.bootstrap import servers_for
from infrastructure.container import EnvGRPOContainer
from infrastructure.logs import quiet_logging
from infrastructure.model_assets import resolve_model_path
from infrastructure.sync_verification import build_verifier


class SyncCheckError(RuntimeError):
    """A server cannot take part in a weight sync at all (named, with the endpoint that said so)."""


@attrs.frozen(kw_only=True)
class SyncCheckRow:
    url: str
    world_size: int
    seconds: float
    bytes: int
    verification: ServerVerification

    @property
    def gbps(self) -> float:
        return self.bytes / self.seconds / 1e9 if self.seconds > 0 else 0.0

    @property
    def verdict(self) -> str:
        return "ok" if self.verification.ok else "MISMATCH"


def require_transfer_backend(urls: Sequence[str], expected: str, timeout: float) -> None:
    """Every vLLM server must run the weight-transfer backend the trainer will open."""
    for url in urls:
        backend = weight_transfer_backend(url, timeout)
        if backend is None:
            raise SyncCheckError(
                f"{url} GET /server_info: the server was started without a weight-transfer backend "
                f"(weight_transfer_config is null), so POST /init_weight_transfer_engine cannot succeed; "
                f"restart it with --weight-transfer-config '{{\"backend\": \"{expected}\"}}'"
            )
        if backend != expected:
            raise SyncCheckError(
                f"{url} GET /server_info: the server's weight-transfer backend is {backend!r} but the config "
                f"opens {expected!r} (server.weight_transfer_backend)"
            )


def run_sync_check(sync: SyncWeights, targets: Sequence[SyncTarget], verifier: SyncVerifier) -> list[SyncCheckRow]:
    """connect, one sync as the next version, verify; the transfer groups are closed at the end."""
    try:
        sync.connect()
        version = 1 + max((v for v in sync.versions.values() if v is not None), default=0)
        report = sync.sync(version)
        verification = verifier.verify(version)
        worlds = {t.server.url: t.server.world_size() for t in targets}
    except BaseException:
        with contextlib.suppress(WeightSyncError):  # the first error says more than a failed close
            sync.close()
        raise
    sync.close()
    return rows_of(report, verification.servers, worlds)


def rows_of(report: SyncReport, checks: Sequence[ServerVerification], worlds: dict[str, int]) -> list[SyncCheckRow]:
    seconds = {s.url: s.seconds for s in report.servers}
    return [
        SyncCheckRow(url=c.url, world_size=worlds[c.url], seconds=seconds.get(c.url, report.seconds),
                     bytes=report.bytes, verification=c)
        for c in checks
    ]


def render_table(rows: Sequence[SyncCheckRow]) -> str:
    header = ("server", "world", "sync s", "GB/s", "max |dlogp|", "tolerance", "version", "verdict")
    lines = [header]
    for r in rows:
        v = r.verification
        diff = "-" if v.max_logprob_diff is None else f"{v.max_logprob_diff:.2e}"
        lines.append((r.url, str(r.world_size), f"{r.seconds:.2f}", f"{r.gbps:.3f}", diff, f"{v.tolerance:g}",
                      f"{v.reported_version}/{v.expected_version}", r.verdict))
    widths = [max(len(line[i]) for line in lines) for i in range(len(header))]
    return "\n".join("  ".join(cell.ljust(w) for cell, w in zip(line, widths)).rstrip() for line in lines)


@contextlib.contextmanager
def _servers(config: RunConfig, model_path: Path, log_dir: Path) -> Iterator[tuple[str, ...]]:
    if config.job == "online_grpo":
        from infrastructure.online_job import online_server

        with online_server(config, model_path, log_dir) as url:
            yield (url,)
        return
    with servers_for(config, model_path, log_dir) as urls:
        yield tuple(urls)


def _container(config: RunConfig, model_path: Path, urls: tuple[str, ...], out: Path) -> EnvGRPOContainer:
    container = EnvGRPOContainer(config=config, model_path=model_path, server_urls=urls, output_dir=out)
    if config.job == "online_grpo":  # the online job dials the trainer at its outgoing address
        from infrastructure.online_job import rendezvous_address

        container.sync_targets.override(providers.Singleton(
            wiring.sync_targets, urls, config, container.control_server.provider, container.transport.provider,
            rendezvous_address(urls[0]),
        ))
    return container


def check_sync(config: RunConfig) -> int:
    quiet_logging()
    model_path = resolve_model_path(config.model.name_or_path)
    out = Path(config.grpo.output_dir) / "sync_check" / time.strftime("%Y%m%d-%H%M%S")
    out.mkdir(parents=True, exist_ok=True)
    try:
        with _servers(config, model_path, out) as urls:
            if config.training.rollout_backend == "vllm":
                require_transfer_backend(urls, config.server.weight_transfer_backend, config.training.rollout_connection_timeout)
            container = _container(config, model_path, urls, out)
            targets = container.sync_targets()
            verifier = build_verifier(config, model_path, container.learner(), targets)
            print(f"syncing {config.model.name_or_path} ({config.model.dtype}) to {len(urls)} server(s); "
                  "this replaces their weights", file=sys.stderr)
            rows = run_sync_check(container.weight_sync(), targets, verifier)
    except (SyncCheckError, WeightSyncError, ServerError, ServerStartError) as error:
        print(f"sync check FAILED: {error}", file=sys.stderr)
        return 1
    print(render_table(rows))
    failed = [r.verification for r in rows if not r.verification.ok]
    for check in failed:
        print(f"sync check FAILED: {check.describe()}", file=sys.stderr)
    if not failed:
        print(f"sync check passed: {len(rows)} server(s) serve the trainer's weights")
    return 1 if failed else 0
