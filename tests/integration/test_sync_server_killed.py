"""Killing the vLLM server in the middle of `/update_weights`: the trainer's sync fails loudly, in time.

A server of its own (tiny random Llama, SmolLM2 tokenizer, gloo backend) is started for this test.
The real `SyncWeights` pushes the model in several chunks through a `GlooTransport`; a wrapper
around that transport (composition, the real one still sends) waits until the server is inside
the second chunk's `/update_weights` (blocked in the collective, waiting for our bytes), then
SIGKILLs the server's whole process group, then lets the broadcast go out to the dead peer.
The sync must raise `WeightSyncError` naming the server within the configured timeout plus a few
seconds, and leave the server marked DEAD (so the next sync refuses instead of hanging).
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
from pathlib import Path

import pytest

from adapters.transport.gloo_transport import GlooTransport
from adapters.vllm.http_server import VllmHttpServer
from adapters.vllm.server_process import VllmServerProcess
from adapters.weights.gather import ModelWeightSource
from application.ports.weight_sync import TransferInit, WeightChunk
from application.sync_report import SyncTarget, WeightSyncError
from application.sync_weights import SyncWeights
from domain.sync_protocol import ServerState

pytestmark = [pytest.mark.integration, pytest.mark.timeout(900)]

SYNC_TIMEOUT_S = 30.0
GRACE_S = 5.0  # "plus a few seconds"
KILL_AT_CHUNK = 1  # the second chunk: the first one went through
IN_UPDATE_WAIT_S = 2.0  # the HTTP /update_weights is in the server (blocked in recv) by then


def tiny_llama(folder: Path, tokenizer_from: Path):
    import torch
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    tokenizer = AutoTokenizer.from_pretrained(tokenizer_from)
    config = LlamaConfig(
        vocab_size=len(tokenizer), hidden_size=64, intermediate_size=128, num_hidden_layers=4,
        num_attention_heads=2, num_key_value_heads=1, head_dim=32, max_position_embeddings=512,
        tie_word_embeddings=True,
    )
    torch.manual_seed(0)
    model = LlamaForCausalLM(config)
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return model


def kill_group(process: VllmServerProcess) -> None:
    """SIGKILL the server and its engine processes at once (a crash, not a graceful stop)."""
    pid = process._process.pid  # noqa: SLF001 - the launcher has no public pid; stop() is graceful
    os.killpg(pid, signal.SIGKILL)


class KillingTransport:
    """The real transport, except that before the broadcast of chunk `at` it kills the server."""

    def __init__(self, inner: GlooTransport, process: VllmServerProcess, at: int) -> None:
        self._inner, self._process, self._at = inner, process, at
        self._count = 0
        self.killed_at: float | None = None

    def open(self, init: TransferInit, timeout: float, abort: threading.Event | None = None) -> None:
        self._inner.open(init, timeout, abort)

    def broadcast(self, chunk: WeightChunk, timeout: float) -> None:
        if self._count == self._at:
            time.sleep(IN_UPDATE_WAIT_S)  # SyncWeights started this chunk's /update_weights already
            kill_group(self._process)
            self.killed_at = time.monotonic()
        self._count += 1
        self._inner.broadcast(chunk, timeout)

    def close(self) -> None:
        self._inner.close()


def test_server_killed_during_update_weights_fails_loudly_in_time(
    tmp_path: Path, vllm_model_path: Path, vllm_python_path: Path, port_factory
) -> None:
    model = tiny_llama(tmp_path / "tiny", vllm_model_path)
    process = VllmServerProcess(
        python=vllm_python_path, model_path=tmp_path / "tiny", port=port_factory(), max_model_len=256,
        log_path=tmp_path / "server.log", weight_transfer_backend="gloo", startup_timeout_s=600,
    )
    with process:
        server = VllmHttpServer(process.url, timeout=SYNC_TIMEOUT_S)
        transport = KillingTransport(GlooTransport(), process, KILL_AT_CHUNK)
        init = TransferInit(master_address="127.0.0.1", master_port=port_factory(), rank_offset=1, world_size=0,
                            packed_buffer_size_bytes=1024**2)
        sync = SyncWeights([SyncTarget(server, transport, init)], ModelWeightSource(model, dtype="float32"),
                           timeout=SYNC_TIMEOUT_S, chunk_bytes=2 * 1024**2)  # the 12 MB embedding alone, then layers
        sync.connect()
        with pytest.raises(WeightSyncError) as caught:
            sync.sync(1)
        failed_after = time.monotonic() - transport.killed_at
        print(f"\n[killed] sync failed {failed_after:.2f}s after the kill: {caught.value}")
        gone_by = time.monotonic() + 10.0  # a SIGKILLed process is reaped a moment later
        while process.is_running() and time.monotonic() < gone_by:
            time.sleep(0.1)
        assert not process.is_running(), "the server survived SIGKILL"
    message = str(caught.value)
    assert transport.killed_at is not None, "the server was never killed: the model fit one chunk"
    assert failed_after < SYNC_TIMEOUT_S + GRACE_S
    assert process.url in message and caught.value.server == process.url
    assert caught.value.step.name in {"UPDATE", "BROADCAST"}
    assert sync.states[process.url] is ServerState.DEAD
    with pytest.raises(WeightSyncError, match="DEAD"):  # the next sync refuses at once, nothing hangs
        sync.sync(2)
    with contextlib.suppress(WeightSyncError):  # the aborted group: release our TCPStore port
        sync.close()
    server.close()
