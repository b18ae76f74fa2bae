"""`check --sync` and the training-time verifier against the shared real vLLM CPU server.

- `check_sync(config)` on a config naming the shared server: one full sync of SmolLM2-135M over
  gloo, then the version and probe log-probs verified; exit 0 and an "ok" row.
- `PromptLogprobVerifier` behind `VerifyingPublisher` with the real `TorchPolicy`, `SyncWeights`,
  `GlooTransport` and `ModelWeightSource`: a trainer whose weights moved is caught as a mismatch
  until the next verified publish, which passes. The server ends with the original weights.
- Against the session's second server (`reasoning_vllm`, started without the weight-transfer
  backend) the check fails naming the server and the endpoint, and exits 1.
"""

from __future__ import annotations

from pathlib import Path

import attrs
import pytest
import torch

from adapters.learner.policy import TorchPolicy
from adapters.transport.gloo_transport import GlooTransport
from adapters.vllm.http_server import VllmHttpServer
from adapters.weights.gather import ModelWeightSource
from application.sync_weights import SyncWeights
from application.verified_publisher import VerifyingPublisher
from domain.config import RunConfig
from infrastructure import wiring
from infrastructure.sync_check import check_sync
from infrastructure.sync_verification import build_verifier

pytestmark = [pytest.mark.integration, pytest.mark.timeout(900)]


def config_for(url: str, model_path: Path, group_port: int, out: Path) -> RunConfig:
    config = RunConfig()
    return attrs.evolve(
        config,
        model=attrs.evolve(config.model, name_or_path=str(model_path), dtype="float32"),
        training=attrs.evolve(config.training, rollout_server_url=url, weight_sync_timeout=300.0),
        grpo=attrs.evolve(config.grpo, output_dir=str(out), vllm_group_port=group_port),
    )


def test_check_sync_passes_against_the_demo_server(running_vllm, port_factory, tmp_path: Path, capsys) -> None:
    config = config_for(running_vllm.url, running_vllm.model_path, port_factory(), tmp_path)
    code = check_sync(config)
    out, err = capsys.readouterr()
    print(out)
    assert code == 0, err
    [header, row] = [line for line in out.splitlines() if line.startswith(("server", running_vllm.url))]
    assert header.split()[:2] == ["server", "world"]
    cells = row.split()
    assert cells[0] == running_vllm.url and cells[-1] == "ok"
    assert float(cells[2]) > 0 and float(cells[3]) > 0 and float(cells[4]) <= 1e-3


def test_verifier_catches_a_stale_server_and_verified_publishes_pass(running_vllm, port_factory, tmp_path) -> None:
    config = config_for(running_vllm.url, running_vllm.model_path, port_factory(), tmp_path)
    policy = TorchPolicy(running_vllm.model_path, config.grpo, dtype="float32")
    server = VllmHttpServer(running_vllm.url, timeout=120.0, transfer_timeout=300.0)
    targets = wiring.sync_targets([running_vllm.url], config, lambda _url: server, GlooTransport)
    sync = SyncWeights(targets, ModelWeightSource(policy.model, dtype="float32"), timeout=300.0,
                       chunk_bytes=wiring.CHUNK_BYTES)
    verifier = build_verifier(config, running_vllm.model_path, policy, targets)
    publisher = VerifyingPublisher(sync, verifier, every_n_syncs=1)
    original = {name: p.detach().clone() for name, p in policy.model.named_parameters()}
    sync.connect()
    try:
        base = max(sync.versions.values()) or 0
        publisher.publish(base + 1)  # original weights: verified inside publish
        assert publisher.last_verification is not None and publisher.last_verification.ok

        gen = torch.Generator().manual_seed(1)
        with torch.no_grad():
            for param in policy.model.parameters():  # in place: tied lm_head stays tied
                param.add_(torch.randn(param.shape, generator=gen) * 0.2 * param.std())
        stale = verifier.verify(base + 1)
        [check] = stale.servers
        assert check.version_ok and not check.logprobs_ok and check.max_logprob_diff > 0.05
        assert running_vllm.url in check.describe()

        publisher.publish(base + 2)  # the moved weights reach the server: verified again
        assert publisher.last_verification.ok
        print(f"\n[verify] stale diff {check.max_logprob_diff:.3f}, after sync "
              f"{publisher.last_verification.servers[0].max_logprob_diff:.2e}")
    finally:
        with torch.no_grad():
            for name, param in policy.model.named_parameters():
                param.copy_(original[name])
        publisher.publish((max(sync.versions.values()) or 0) + 1)  # leave the shared server as found
        sync.close()
        server.close()


def test_check_sync_fails_clearly_without_the_backend(reasoning_vllm, vllm_model_path, port_factory, tmp_path, capsys) -> None:
    """The session's second server runs no weight-transfer backend: the check names it and exits 1."""
    code = check_sync(config_for(reasoning_vllm.url, vllm_model_path, port_factory(), tmp_path))
    err = capsys.readouterr().err
    print(err)
    assert code == 1
    assert reasoning_vllm.url in err and "/server_info" in err and "/init_weight_transfer_engine" in err
