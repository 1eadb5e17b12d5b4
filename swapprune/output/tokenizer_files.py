"""Tokenizer files that load with ``AutoTokenizer`` in transformers 4.x as well as 5.x.

transformers 5 writes ``"tokenizer_class": "TokenizersBackend"`` for a tokenizer
that is a plain ``tokenizers`` model (every GGUF-converted one, the tiny test
ones). transformers 4 has no class of that name, and its ``AutoTokenizer``
fails on the file: "Tokenizer class TokenizersBackend does not exist". Both
have ``PreTrainedTokenizerFast`` (in 5.x an alias of ``TokenizersBackend``),
which reads the same ``tokenizer.json``; tools pinned to 4.x (optimum's ONNX
export, for one) then load the checkpoint's tokenizer too.
"""

from __future__ import annotations

import json
from pathlib import Path

#: Class names only transformers 5 knows -> the class both 4.x and 5.x load them as.
PORTABLE = {"TokenizersBackend": "PreTrainedTokenizerFast"}


def portable_tokenizer_config(directory: str | Path) -> tuple[str, str] | None:
    """Rewrite ``tokenizer_config.json``'s class to one both majors have; ``(old, new)`` or
    ``None`` when nothing needed to change."""
    path = Path(directory) / "tokenizer_config.json"
    if not path.is_file():
        return None
    data = json.loads(path.read_text(encoding="utf-8"))
    old = data.get("tokenizer_class")
    if old not in PORTABLE:
        return None
    data["tokenizer_class"] = PORTABLE[old]
    path.write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    return old, PORTABLE[old]


def save_tokenizer(tokenizer, directory: str | Path) -> None:
    """``tokenizer.save_pretrained(directory)``, with a class name both majors load."""
    tokenizer.save_pretrained(directory)
    portable_tokenizer_config(directory)
