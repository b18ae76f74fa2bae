"""Which SGLang servers the trainer refuses, from what `/server_info` and `/model_info` report."""

from __future__ import annotations

import pytest

from adapters.sglang.refusals import (
    RULE_NAMES,
    ServerFacts,
    UnsupportedServer,
    refuse,
    server_facts,
    update_refusals,
)

CLEAN = {"tp_size": 2, "pp_size": 1, "dp_size": 1, "weight_cache_mode": "off", "quantization": None}
LLAMA = {"model_type": "llama", "architectures": ["LlamaForCausalLM"]}


def _rules(server: dict, model: dict = LLAMA, waived: tuple[str, ...] = ()) -> list[str]:
    return [r.rule for r in update_refusals(server_facts({**CLEAN, **server}, model), waived)]


def test_a_plain_dense_server_is_accepted() -> None:
    assert _rules({}) == []
    assert server_facts(CLEAN, LLAMA).tp_size == 2


@pytest.mark.parametrize(
    ("server", "model", "rule"),
    [
        ({"dp_size": 2}, LLAMA, "data_parallel"),
        ({"pp_size": 2}, LLAMA, "pipeline_parallel"),
        ({"weight_cache_mode": "client"}, LLAMA, "weight_cache"),
        ({"enable_paged_experts": True}, LLAMA, "paged_experts"),
        ({"enable_nvidia_megakernel": True}, LLAMA, "nvidia_megakernel"),
        ({"enable_amd_monokernel": True}, LLAMA, "amd_monokernel"),
        ({"enable_dsa_fused_indexer": True}, {"architectures": ["DeepseekV32ForCausalLM"]}, "dsa_fused_indexer"),
        ({}, {"model_type": "deepseek_v41"}, "mhc_splits"),
        ({"quantization": "fp8"}, LLAMA, "hopper_block_fp8_bf16"),
    ],
)
def test_each_rule_fires_on_what_the_server_reports(server: dict, model: dict, rule: str) -> None:
    assert _rules(server, model) == [rule]


def test_the_dsa_indexer_rule_needs_both_the_flag_and_a_dsa_model() -> None:
    assert _rules({"enable_dsa_fused_indexer": True}) == []
    assert _rules({"enable_dsa_fused_indexer": None}, {"architectures": ["DeepseekV32ForCausalLM"]}) == []


def test_qwen35_fp8_names_both_fp8_caches_and_waivers_are_by_name() -> None:
    qwen = {"model_type": "qwen3_5_moe"}
    assert _rules({"quantization": "fp8"}, qwen) == ["hopper_block_fp8_bf16", "qwen35_packed_fp8_in_proj"]
    assert _rules({"quantization": "fp8"}, qwen, waived=("hopper_block_fp8_bf16",)) == ["qwen35_packed_fp8_in_proj"]


def test_flag_rules_cannot_be_waived_and_unknown_names_are_refused() -> None:
    facts = ServerFacts(tp_size=1, dp_size=2)
    with pytest.raises(ValueError, match=r"\['data_parallel'\] are read from the server's own flags"):
        update_refusals(facts, ["data_parallel"])
    with pytest.raises(ValueError, match="unknown SGLang refusal rule"):
        update_refusals(facts, ["mhc"])
    assert "mhc_splits" in RULE_NAMES


def test_a_server_without_tp_size_is_not_taken_for_sglang() -> None:
    with pytest.raises(ValueError, match="lacks 'tp_size'"):
        server_facts({"world_size": 1}, {})


def test_refuse_names_the_server_and_every_reason() -> None:
    refusals = update_refusals(server_facts({**CLEAN, "dp_size": 2, "quantization": "fp8"}, LLAMA))
    with pytest.raises(UnsupportedServer) as caught:
        refuse("http://sgl:30000", refusals)
    text = str(caught.value)
    assert text.startswith("http://sgl:30000: SGLang server cannot take online weight updates")
    assert "dp_size=2" in text and "SGLANG_OPT_HOPPER_BLOCK_FP8_BF16=0" in text and "'hopper_block_fp8_bf16'" in text
    refuse("http://sgl:30000", ())  # nothing to refuse: no error
