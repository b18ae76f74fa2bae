"""Which SGLang servers can take an online weight update: a check over what the server reports.

SGLang 0.5.23 refuses `update_weights_from_distributed` at update time when a derived-weight cache
would keep serving the old weights (`model_executor/model_runner_components/weight_updater.py::
_unsupported_derived_weight_cache_error`, the model-owned `_derived_weight_cache_error`s, and
`_assert_weight_cache_inactive`), and asserts `dp_size == 1` (`tokenizer_control_mixin.py`).
The seed wants those families refused when the trainer is built, naming the loader's reason, not
after the first pause. `update_refusals` does that from `GET /server_info` (the resolved server
args, flat) and `GET /model_info` (`model_type`, `architectures`).

Two kinds of rule:
- read from server flags (dp/pp size, `--weight-cache-mode`, `--enable-paged-experts`, the
  megakernel/monokernel plugins): the server certainly refuses; these cannot be waived;
- gated by environment variables or hardware the server does not report (compensated mHC splits
  of DeepSeek-V4.1, Hopper block-FP8 BF16 caches, Qwen3.5 packed FP8 GDN in_proj, the gfx950 fused
  DSA indexer): refused on the model family that would build the cache by default; an operator who
  restarted the server with the variable named in the reason waives the rule by its name.
NemotronH's NVFP4 phase layout is opt-in (`SGLANG_OPT_SM120_NVFP4_PHASE_LAYOUT`, default off) and
the HPC-Ops bf16xfp32 GEMM is not visible in the server args: SGLang's own update-time error
(HTTP 400, surfaced by the adapter with its message) covers those.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from typing import Any

import attrs

DSA_ARCHITECTURES = frozenset({
    "DeepseekV3ForCausalLM", "DeepseekV32ForCausalLM", "DeepseekV3ForCausalLMNextN", "MistralLarge3ForCausalLM",
    "GlmMoeDsaForCausalLM", "GlmMoeDsaForCausalLMNextN", "LongcatFlashForCausalLM",
})


class UnsupportedServer(ValueError):
    """The server cannot take an online weight update; names the server and each loader reason."""


@attrs.frozen(kw_only=True)
class ServerFacts:
    """What the refusal rules read from `/server_info` and `/model_info`."""

    tp_size: int
    pp_size: int = 1
    dp_size: int = 1
    weight_cache_mode: str = "off"
    enable_paged_experts: bool = False
    enable_nvidia_megakernel: bool = False
    enable_amd_monokernel: bool = False
    enable_dsa_fused_indexer: bool | None = None
    quantization: str | None = None
    model_type: str | None = None
    architectures: tuple[str, ...] = attrs.field(default=(), converter=tuple)


def server_facts(server_info: Mapping[str, Any], model_info: Mapping[str, Any]) -> ServerFacts:
    """Pick the rule inputs; a server that does not report `tp_size` is not an SGLang server."""
    if "tp_size" not in server_info:
        raise ValueError(f"/server_info lacks 'tp_size' (is it an SGLang server?); keys: {sorted(server_info)[:20]}")
    fields = {a.name for a in attrs.fields(ServerFacts)} - {"model_type", "architectures"}
    picked = {name: server_info[name] for name in fields if server_info.get(name) is not None}
    return ServerFacts(
        **picked,
        model_type=model_info.get("model_type"),
        architectures=model_info.get("architectures") or (),
    )


@attrs.frozen
class Rule:
    name: str
    applies: Callable[[ServerFacts], bool]
    reason: Callable[[ServerFacts], str]
    waivable: bool


@attrs.frozen
class Refusal:
    rule: str
    reason: str
    waivable: bool

    def describe(self) -> str:
        waiver = f" (once the server runs that way, waive it: waived_refusals=['{self.rule}'])" if self.waivable else ""
        return f"[{self.rule}] {self.reason}{waiver}"


def _fp8(facts: ServerFacts) -> bool:
    return (facts.quantization or "").lower().startswith("fp8")


RULES: tuple[Rule, ...] = (
    Rule("data_parallel", lambda f: f.dp_size != 1, lambda f: (
        f"dp_size={f.dp_size}: SGLang asserts dp_size == 1 for update_weights_from_distributed ('data-parallel "
        "replicas are not supported for update weights from distributed'); run one replica per server and list "
        "each in rollout_server_configs"), waivable=False),
    Rule("pipeline_parallel", lambda f: f.pp_size != 1, lambda f: (
        f"pp_size={f.pp_size}: SGLang ranks the weight-update group as rank_offset + tp_rank, so pipeline stages "
        "would claim the same ranks"), waivable=False),
    Rule("weight_cache", lambda f: f.weight_cache_mode != "off", lambda f: (
        f"--weight-cache-mode {f.weight_cache_mode}: model weights are shared with the cache daemon via CUDA IPC; "
        "restart with --weight-cache-mode off to use online weight updates"), waivable=False),
    Rule("paged_experts", lambda f: f.enable_paged_experts, lambda f: (
        "Online weight updates are not supported with --enable-paged-experts: experts already on the GPU would "
        "keep the old weights"), waivable=False),
    Rule("nvidia_megakernel", lambda f: f.enable_nvidia_megakernel, lambda f: (
        "Online weight updates are not supported with --enable-nvidia-megakernel: captured kernels keep "
        "weight-derived state"), waivable=False),
    Rule("amd_monokernel", lambda f: f.enable_amd_monokernel, lambda f: (
        "Online weight updates are not supported with --enable-amd-monokernel: captured kernels retain weight "
        "copies"), waivable=False),
    Rule("dsa_fused_indexer",
         lambda f: f.enable_dsa_fused_indexer is True and bool(DSA_ARCHITECTURES.intersection(f.architectures)),
         lambda f: (
             "the gfx950 fused DSA indexer keeps one-time copies of k_norm (and of [wk ; weights_proj]); restart "
             "with --no-enable-dsa-fused-indexer to allow online updates (only gfx950 GPUs build it)"), waivable=True),
    Rule("mhc_splits", lambda f: f.model_type == "deepseek_v41", lambda f: (
        "compensated mHC weight splits are active by default for deepseek_v41 on Hopper/Blackwell: captured CUDA "
        "graphs retain these derived weights; restart with SGLANG_OPT_DEEPGEMM_HC_PRENORM=0"), waivable=True),
    Rule("hopper_block_fp8_bf16", _fp8, lambda f: (
        f"quantization={f.quantization}: on Hopper, block-FP8 layers keep BF16 weight caches that captured CUDA "
        "graphs retain; restart with SGLANG_OPT_HOPPER_BLOCK_FP8_BF16=0"), waivable=True),
    Rule("qwen35_packed_fp8_in_proj",
         lambda f: (f.model_type or "").startswith("qwen3_5") and _fp8(f),
         lambda f: (
             f"{f.model_type} with FP8 packs the GDN input projections into a derived buffer (AITER builds) that "
             "captured graphs retain; restart with SGLANG_QWEN35_PACKED_IN_PROJ=0"), waivable=True),
)
RULE_NAMES = frozenset(rule.name for rule in RULES)


def update_refusals(facts: ServerFacts, waived: Collection[str] = ()) -> tuple[Refusal, ...]:
    """Every rule that refuses this server, minus the waived ones (only env-gated rules can be)."""
    unknown = set(waived) - RULE_NAMES
    if unknown:
        raise ValueError(f"unknown SGLang refusal rule(s) to waive: {sorted(unknown)}; known: {sorted(RULE_NAMES)}")
    fixed = sorted(rule.name for rule in RULES if rule.name in waived and not rule.waivable)
    if fixed:
        raise ValueError(f"SGLang refusal rule(s) {fixed} are read from the server's own flags and cannot be waived")
    return tuple(
        Refusal(rule.name, rule.reason(facts), rule.waivable)
        for rule in RULES
        if rule.name not in waived and rule.applies(facts)
    )


def refuse(url: str, refusals: tuple[Refusal, ...]) -> None:
    """Raise `UnsupportedServer` naming the server and every reason, if there is any."""
    if refusals:
        reasons = "; ".join(r.describe() for r in refusals)
        raise UnsupportedServer(f"{url}: SGLang server cannot take online weight updates: {reasons}")
