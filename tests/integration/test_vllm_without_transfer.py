"""A vLLM server started WITHOUT a weight-transfer backend: weight calls fail with a clear error.

This starts a second real server (tiny random Llama, 1-2 minutes of CPU on a small machine), so
it only runs when `RLSETUP_TEST_SECOND_SERVER=1`; otherwise it is skipped with that reason.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from adapters.vllm.errors import ServerError
from adapters.vllm.http_server import VllmHttpServer
from adapters.vllm.server_process import VllmServerProcess
from application.ports.weight_sync import TransferInit

pytestmark = [
    pytest.mark.integration,
    pytest.mark.timeout(900),
    pytest.mark.skipif(
        os.environ.get("RLSETUP_TEST_SECOND_SERVER") != "1",
        reason="starts a second vLLM server; set RLSETUP_TEST_SECOND_SERVER=1",
    ),
]


def _tiny_model(folder: Path, tokenizer_from: Path) -> Path:
    import torch
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    tokenizer = AutoTokenizer.from_pretrained(tokenizer_from)
    config = LlamaConfig(
        vocab_size=len(tokenizer), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
        num_attention_heads=2, num_key_value_heads=1, head_dim=32, max_position_embeddings=512,
        tie_word_embeddings=True,
    )
    torch.manual_seed(0)
    LlamaForCausalLM(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def test_weight_calls_without_backend_name_server_and_endpoint(
    tmp_path: Path, vllm_model_path: Path, vllm_python_path: Path, port_factory
) -> None:
    model = _tiny_model(tmp_path / "tiny", vllm_model_path)
    process = VllmServerProcess(
        python=vllm_python_path, model_path=model, port=port_factory(), max_model_len=256,
        log_path=tmp_path / "server.log", weight_transfer_backend=None, startup_timeout_s=600,
    )
    with process:
        server = VllmHttpServer(process.url, timeout=60)
        init = TransferInit(master_address="127.0.0.1", master_port=port_factory(), rank_offset=1, world_size=2)
        with pytest.raises(ServerError) as caught:
            server.init_weight_transfer(init, rank_offset=1)
        assert process.url in str(caught.value) and "/init_weight_transfer_engine" in str(caught.value)
        with pytest.raises(ServerError, match="/start_weight_update"):
            server.start_weight_update()
        server.close()
    assert "Weight transfer not configured" in process.log_path.read_text()
