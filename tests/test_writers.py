"""Every writer under every fault: the list of writers is complete, and each listed file's
write, failed at its first, a middle or its last byte, or refused, or interrupted by
SIGTERM, ends the command with one line, no traceback, nothing that looks finished and
no staging left.

The faults are real where the kernel can give them to an unprivileged test: the file-size
limit (``RLIMIT_FSIZE``, set when the target file is opened, at 0 bytes, half its size or
near its end: one byte short for files of fixed size, 5% short for JSON and text, whose
timing fields change their size from run to run). A full disk (``ENOSPC``), a refusal (``EACCES``, as a read-only
directory gives; a root process is never refused by permissions, so it is raised) and
SIGTERM are raised at the target's opening, through an audit hook on ``open`` (and, for
the files safetensors writes from Rust, at its ``save_file``).
"""

from __future__ import annotations

import ast
import errno
import fnmatch
import os
import resource
import signal
import sys
from contextlib import contextmanager
from pathlib import Path

import pytest
from tiny_models import save_tiny

from swapprune.output import writers

PACKAGE = Path(writers.__file__).resolve().parents[1]

# -- the list is complete ----------------------------------------------------------------
WRITE_CALLS = {
    "write_text", "write_bytes", "save_file", "savefig", "save_pretrained", "tofile",
    "write_tensors_to_file", "write_header_to_file", "write_kv_data_to_file", "fdopen",
    "mkstemp", "mkdtemp", "NamedTemporaryFile", "TemporaryDirectory",
}  # fmt: skip


def _writes_mode(call: ast.Call) -> bool:
    modes = [a for a in call.args[1:2]] + [
        k.value for k in call.keywords if k.arg in ("mode", "flags")
    ]
    for m in modes:
        if isinstance(m, ast.Constant) and isinstance(m.value, str) and set(m.value) & set("wax+"):
            return True
        if any(n in ast.dump(m) for n in ("O_WRONLY", "O_RDWR", "O_CREAT")):
            return True
    return False


def write_sites(source: str, module: str) -> list[tuple[str, int]]:
    """``(module:function, line)`` of every write call in ``source``."""
    found: list[tuple[str, int]] = []
    stack: list[str] = []

    def visit(node: ast.AST) -> None:
        named = isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
        if named:
            stack.append(node.name)  # type: ignore[attr-defined]
        if isinstance(node, ast.Call):
            fn = node.func
            name = fn.attr if isinstance(fn, ast.Attribute) else getattr(fn, "id", None)
            owner = getattr(fn.value, "id", None) if isinstance(fn, ast.Attribute) else None
            if (
                (name == "open" and _writes_mode(node))
                or name in WRITE_CALLS
                or (name == "save" and owner in ("np", "numpy", "torch"))
            ):
                found.append((f"{module}:{'.'.join(stack)}", node.lineno))
        for child in ast.iter_child_nodes(node):
            visit(child)
        if named:
            stack.pop()

    visit(ast.parse(source))
    return found


def package_write_sites() -> dict[str, list[str]]:
    sites: dict[str, list[str]] = {}
    for f in sorted(PACKAGE.rglob("*.py")):
        module = ".".join(f.relative_to(PACKAGE.parent).with_suffix("").parts)
        module = module.removesuffix(".__init__")
        for site, line in write_sites(f.read_text(), module):
            sites.setdefault(site, []).append(f"{f.relative_to(PACKAGE.parent)}:{line}")
    return sites


def test_every_write_in_the_package_is_on_the_writers_list():
    found = package_write_sites()
    unlisted = {s: where for s, where in found.items() if s not in writers.sites()}
    assert not unlisted, f"writes outside swapprune.output.writers.WRITERS: {unlisted}"
    stale = writers.sites() - set(found)
    assert not stale, f"listed writers that write nothing (remove them): {stale}"


def test_the_scan_finds_a_new_writer():
    source = (
        "import json\n"
        "def report(path, data):\n"
        "    with open(path, 'w') as f:\n"
        "        json.dump(data, f)\n"
        "class Saver:\n"
        "    def save(self, fig, p):\n"
        "        fig.savefig(p)\n"
        "def reads(path):\n"
        "    return open(path).read(), open(path, 'rb').read()\n"
        "def arrays(a, p):\n"
        "    np.save(p, a)\n"
    )
    sites = [s for s, _ in write_sites(source, "m")]
    assert sites == ["m:report", "m:Saver.save", "m:arrays"]


# -- the one line -----------------------------------------------------------------------
@pytest.mark.parametrize(
    "error, words",
    [
        (OSError(errno.ENOSPC, "No space left on device"), "no space left to write"),
        (OSError(getattr(errno, "EDQUOT", 122), "Disk quota exceeded"), "no space left to write"),
        (OSError(errno.EFBIG, "File too large"), "file-size limit"),
        (OSError(errno.EACCES, "Permission denied"), "permission denied"),
        (OSError(errno.EROFS, "Read-only file system"), "a read-only file system"),
        (
            RuntimeError("Error while serializing: IoError(Os { code: 28, kind: StorageFull })"),
            "no space",
        ),
        (OSError("30081024 requested and 18694848 written"), "stopped after 18.7 MB"),
    ],
)
def test_each_refused_write_is_one_line_naming_the_path(error, words, tmp_path):
    assert writers.is_write_error(error)
    e = writers.write_error(tmp_path / "model.gguf", error, needs=30_000_000)
    assert isinstance(e, writers.WriteFailed) and words in str(e) and "\n" not in str(e)
    assert str(tmp_path / "model.gguf") in str(e)


def test_other_errors_are_not_write_errors():
    assert not writers.is_write_error(OSError(errno.ENOENT, "No such file"))
    assert not writers.is_write_error(ValueError("28 windows requested"))
    assert not writers.is_write_error(writers.WriteFailed("already a line"))


def test_sizes_in_words():
    got = [writers.size(n) for n in (0, 999, 1000, 30_081_024, 999_949_999, 2.5e9, 1.5e12, 2e15)]
    assert got == [
        "0 bytes", "999 bytes", "1.0 KB", "30.1 MB", "999.9 MB", "2.5 GB", "1.5 TB", "2000.0 TB"
    ]  # fmt: skip


def test_each_refused_write_says_exactly_why(tmp_path, monkeypatch):
    import shutil
    from collections import namedtuple

    usage = namedtuple("usage", "total used free")
    monkeypatch.setattr(shutil, "disk_usage", lambda p: usage(0, 0, 1_500_000))
    monkeypatch.setattr(writers, "file_size_limit", lambda: 20_480_000)
    f = tmp_path / "model.gguf"
    say = lambda e, needs=None: str(writers.write_error(f, e, needs))  # noqa: E731
    assert say(OSError(errno.ENOSPC, "full"), 30_000_000) == (
        f"no space left to write {f}: it needs about 30.0 MB, 1.5 MB free there"
    )
    assert say(OSError(errno.ENOSPC, "full")) == (
        f"no space left to write {f}: the write was cut short, 1.5 MB free there"
    )
    assert say(OSError(errno.EFBIG, "too large")) == (
        f"cannot write {f}: a file exceeds this process's file-size limit of 20.5 MB "
        "(ulimit -f); the write was cut short"
    )
    assert say(OSError("30081024 requested and 18694848 written")) == (
        f"cannot write {f}: a file exceeds this process's file-size limit of 20.5 MB "
        "(ulimit -f); a write of 30.1 MB stopped after 18.7 MB"
    )
    assert say(OSError(errno.EACCES, "no")) == (
        f"cannot write {f}: permission denied; choose a directory you can write to"
    )
    assert say(OSError(errno.EPERM, "no")).endswith(
        ": permission denied; choose a directory you can write to"
    )
    assert say(OSError(errno.EROFS, "ro")) == (
        f"cannot write {f}: a read-only file system; choose a directory you can write to"
    )
    # numpy's short write without a file-size limit is a full disk
    monkeypatch.setattr(writers, "file_size_limit", lambda: None)
    assert say(OSError("100 requested and 40 written")) == (
        f"no space left to write {f}: a write of 100 bytes stopped after 40 bytes, 1.5 MB free there"
    )
    assert say(OSError(errno.EFBIG, "too large")) == (
        f"cannot write {f}: a file exceeds this process's file-size limit (ulimit -f); "
        "the write was cut short"
    )
    # a directory is its own place; no free space known: nothing said of it
    monkeypatch.setattr(shutil, "disk_usage", lambda p: (_ for _ in ()).throw(OSError("gone")))
    assert (
        say(OSError(errno.ENOSPC, "full")) == f"no space left to write {f}: the write was cut short"
    )
    seen = []
    monkeypatch.setattr(shutil, "disk_usage", lambda p: seen.append(p) or usage(0, 0, 0))
    writers.write_error(tmp_path, OSError(errno.ENOSPC, "full"))
    writers.write_error(f, OSError(errno.ENOSPC, "full"))
    assert seen == [tmp_path, tmp_path]


def test_errno_is_read_from_messages_without_one():
    assert writers.is_write_error(RuntimeError("IoError(Os { code: 28, kind: StorageFull })"))
    assert writers.is_write_error(RuntimeError("failed: os error 27"))  # EFBIG
    assert not writers.is_write_error(RuntimeError("os error 2"))  # ENOENT
    assert not writers.is_write_error(RuntimeError("100 requested and 40 written"))  # not OSError
    assert writers.is_write_error(OSError(errno.EDQUOT, "quota"))


def test_the_file_size_limit_as_this_process_has_it(monkeypatch):
    monkeypatch.setattr(resource, "getrlimit", lambda which: (20_480_000, resource.RLIM_INFINITY))
    assert writers.file_size_limit() == 20_480_000
    asked = []
    monkeypatch.setattr(
        resource, "getrlimit", lambda which: asked.append(which) or (resource.RLIM_INFINITY,) * 2
    )
    assert writers.file_size_limit() is None and asked == [resource.RLIMIT_FSIZE]


def test_a_refusal_inside_staging_is_said_with_its_final_place(tmp_path):
    stage, final = tmp_path / ".stage-x", tmp_path / "out"
    with pytest.raises(writers.WriteFailed) as e:
        with writers.refused_as_line(final, inside=stage):
            raise writers.WriteFailed(f"no space left to write {stage}/model.safetensors")
    assert str(e.value) == f"no space left to write {final}/model.safetensors"
    with pytest.raises(writers.WriteFailed) as e:
        with writers.refused_as_line(final, inside=tmp_path / "elsewhere"):
            raise writers.WriteFailed(f"no space left to write {stage}/a")
    assert str(e.value) == f"no space left to write {stage}/a"
    with pytest.raises(writers.WriteFailed) as e:
        with writers.refused_as_line(final, needs=2000):
            raise OSError(errno.EACCES, "denied")
    assert str(e.value).startswith(f"cannot write {final}: permission denied")
    with pytest.raises(KeyError):
        with writers.refused_as_line(final):
            raise KeyError("not a write")


# -- the harness ------------------------------------------------------------------------
class Fault:
    """What the armed hook does when the target file is opened for writing."""

    def __init__(self, target: str, kind: str, at: str = "first", size: int = 0):
        self.target, self.kind, self.at, self.size = target, kind, at, size
        self.fired = False

    def matches(self, path) -> bool:
        name = Path(os.fsdecode(path)).name
        return fnmatch.fnmatch(name, self.target) or name.startswith(f".{self.target}.")

    def last_byte(self) -> int:
        """One byte short for files of fixed size (weights, GGUF, plots); 5% short for the
        JSON and text files, whose timing fields make their size vary from run to run."""
        if self.target.endswith((".safetensors", ".gguf", ".png")):
            return max(self.size - 1, 0)
        return int(self.size * 0.95)

    def fire(self, path) -> None:
        if self.fired or not self.matches(path):
            return
        self.fired = True
        if self.kind == "EFBIG":
            limit = {"first": 0, "middle": self.size // 2, "last": self.last_byte()}[self.at]
            resource.setrlimit(resource.RLIMIT_FSIZE, (limit, resource.RLIM_INFINITY))
        elif self.kind == "SIGTERM":
            signal.raise_signal(signal.SIGTERM)
        else:
            code = getattr(errno, self.kind)
            raise OSError(code, os.strerror(code), os.fsdecode(path))


ARMED: list[Fault] = []


def _audit(event: str, args) -> None:
    if event != "open" or not ARMED:
        return
    path, mode, flags = args
    writing = (isinstance(mode, str) and bool(set(mode) & set("wax+"))) or (
        isinstance(flags, int) and flags & (os.O_WRONLY | os.O_RDWR | os.O_CREAT)
    )
    if writing and isinstance(path, (str, bytes, os.PathLike)):
        ARMED[-1].fire(path)


sys.addaudithook(_audit)  # inert unless a fault is armed (audit hooks cannot be removed)


@contextmanager
def armed(fault: Fault, monkeypatch):
    import safetensors.torch
    import transformers.modeling_utils as mu

    real = safetensors.torch.save_file

    def save_file(tensors, filename, *a, **k):  # written from Rust: no audit event
        fault.fire(filename)
        return real(tensors, filename, *a, **k)

    monkeypatch.setattr(safetensors.torch, "save_file", save_file)
    if hasattr(mu, "safe_save_file"):
        monkeypatch.setattr(mu, "safe_save_file", save_file)
    before = resource.getrlimit(resource.RLIMIT_FSIZE)
    ARMED.append(fault)
    try:
        yield fault
    finally:
        ARMED.clear()
        resource.setrlimit(resource.RLIMIT_FSIZE, before)


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return str(save_tiny("llama", tmp_path_factory.mktemp("m") / "tiny"))


@pytest.fixture(scope="module")
def gguf_file(tmp_path_factory):
    from tiny_gguf import write_tiny_gguf

    return str(write_tiny_gguf(tmp_path_factory.mktemp("g") / "tiny.gguf"))


SMALL = ["--prompts", "4", "--tokens", "16", "--no-progress"]
PRUNE = ["--budget", "1", "--protocol", "interchange", "--no-certify", "--heldout-prompts", "4",
         "--heldout-tokens", "16", "--cost-windows", "4", "--cost-no-generative"]  # fmt: skip

#: command -> (argv builder, the files its fault cases target). ``{m}``: the model, ``{o}``:
#: the output.
COMMANDS = {
    "prune": (
        ["prune", "--model", "{m}", *SMALL, *PRUNE, "--gguf", "off", "--output", "{o}"],
        ["scores.json", "plan.json", "metrics.json", "provenance.json", "config.yaml",
         "README.md", "mergekit.yaml", "model.safetensors", "config.json", "tokenizer_config.json"],
    ),
    "prune-gguf": (
        ["prune", "--model", "{g}", *SMALL, *PRUNE, "--gguf", "on", "--output", "{o}"],
        ["model.safetensors", "model.gguf"],  # the conversion cache's entry, then the GGUF
    ),
    "prune-patch": (
        ["prune", "--model", "{m}", *SMALL, *PRUNE, "--gguf", "off", "--patch", "linear",
         "--patch-prompts", "4", "--patch-tokens", "16", "--output", "{o}"],
        ["patch.safetensors"],
    ),
    "score": (["score", "--model", "{m}", *SMALL, "--output", "{o}"], ["{o}"]),
    "compare": (
        ["compare", "--model", "{m}", *SMALL, "--budgets", "1", "--criteria", "interchange",
         "--no-generative", "--limit", "4", "--words", "200", "--max-length", "64",
         "--output", "{o}"],
        ["results.json", "results.md", "cost_vs_budget.png"],
    ),
    "landscape": (
        ["landscape", "--model", "{m}", "--budget", "1", "--rounds", "4x16", "--refine", "4x32",
         "--top-k", "2", "--criteria", "bi", "--no-progress", "--output", "{o}"],
        ["landscape.json", "landscape.png"],
    ),
    "eval": (
        ["eval", "--model", "{m}", "--tasks", "wikitext2_ppl", "--limit", "4", "--words", "200",
         "--max-length", "64", "--no-progress", "--output", "{o}"],
        ["{o}"],
    ),
    "validate": (
        ["validate", "--model", "{m}", *SMALL, "--criteria", "bi", "--output", "{o}"],
        ["validity.json", "validity.md", "validity.png"],
    ),
    "recipe": (  # prune, LoRA heal, int8 (optimum-quanto), eval after each step
        ["run", "{r}", "--no-progress", "--set", "model.name={m}", "--set", "export.output={o}"],
        ["healed.json", "quanto_qmap.json"],
    ),
}  # fmt: skip
RECIPE = """
calibration: {prompts: 4, tokens: 16}
prune: {budget: 1, protocol: interchange, certify: false}
heal: {rank: 2, alpha: 4, steps: 2, batch_size: 2, prompts: 8, tokens: 16, heldout: 2}
quantize: {scheme: int8}
eval: {tasks: [wikitext2_ppl], words: 200, max_length: 64, limit: 4}
export: {gguf: "off"}
"""
FAULTS = [("EFBIG", "first"), ("EFBIG", "middle"), ("EFBIG", "last"), ("ENOSPC", "first"),
          ("EACCES", "first"), ("SIGTERM", "first")]  # fmt: skip


def _argv(command: str, model_dir: str, gguf_file: str, out: Path) -> list[str]:
    argv, _ = COMMANDS[command]
    recipe = out.parent / "recipe.yaml"
    if command == "recipe":
        recipe.write_text(RECIPE)
    return [a.format(m=model_dir, g=gguf_file, o=out, r=recipe) for a in argv]


def _output(command: str) -> str:
    return {"score": "s.json", "eval": "e.json"}.get(command, "out")


def _leftovers(parent: Path) -> list[str]:
    """Staging, temporary files and locks (a cache keeps a lock beside each entry, as a
    clean run does: compare's cells, the GGUF conversion)."""
    return sorted(
        p.name for p in parent.rglob("*")
        if ".partial-" in p.name or ".old-" in p.name or p.name.endswith(".tmp")
        or (p.name.endswith(".lock") and "cache" not in p.relative_to(parent).parts)
    )  # fmt: skip


@pytest.fixture(scope="module")
def sizes(model_dir, gguf_file, tmp_path_factory):
    """Each target file's size in a clean run (the middle and last byte of its write)."""
    from swapprune.cli import main

    found: dict[tuple[str, str], int] = {}
    for command, (_, targets) in COMMANDS.items():
        parent = tmp_path_factory.mktemp(command)
        out = parent / _output(command)
        os.environ["SWAPPRUNE_CACHE"] = str(parent / "cache")  # a GGUF is converted afresh
        try:
            assert main(_argv(command, model_dir, gguf_file, out)) == 0, command
        finally:
            del os.environ["SWAPPRUNE_CACHE"]
        for target in targets:
            name = Path(target.format(o=out)).name
            hits = [out] if out.is_file() else sorted(parent.rglob(name))
            assert hits, (command, name)
            # the first file of that name a run writes is the largest (the cache's entry)
            found[command, name] = max(h.stat().st_size for h in hits)
    return found


def run_case(
    command, target, kind, at, model_dir, gguf_file, parent: Path, sizes, monkeypatch, capsys
):
    """One fault case; returns (status, stderr's last line, stderr)."""
    from swapprune.cli import main

    out = parent / _output(command)
    name = Path(target.format(o=out)).name
    fault = Fault(name, kind, at, sizes[command, name])
    monkeypatch.setenv("SWAPPRUNE_CACHE", str(parent / "cache"))  # a GGUF is converted afresh
    capsys.readouterr()
    with armed(fault, monkeypatch):
        status = main(_argv(command, model_dir, gguf_file, out))
    err = capsys.readouterr().err
    assert fault.fired, f"{command}: {name} was never opened for writing"
    lines = [x for x in err.strip().splitlines() if x.strip()]
    return status, (lines[-1] if lines else ""), err, out


def _cases(every: bool):
    rows = []
    for command, (_, targets) in COMMANDS.items():
        for i, target in enumerate(targets):
            faults = FAULTS if every else [FAULTS[(i + len(rows)) % len(FAULTS)]]
            rows += [(command, target, kind, at) for kind, at in faults]
    return rows


def check_case(command, status, last, err, out, parent, kind):
    assert "Traceback" not in err, err[-3000:]
    if kind == "SIGTERM":
        assert status == 143 and last.startswith("swapprune: terminated (SIGTERM)"), last
    else:
        assert status == 2 and last.startswith("swapprune: error: "), (status, last)
        words = {
            "EFBIG": "file-size limit",
            "ENOSPC": "no space left",
            "EACCES": "permission denied",
        }
        assert words[kind] in last, last
    assert _leftovers(parent) == [], _leftovers(parent)
    if not out.exists():
        return True
    # What a command keeps is named in its line, and is what the same command resumes from.
    if command == "compare":
        assert "cache" in last and {p.name for p in out.iterdir()} <= {"cache", "scores.json"}
    elif command == "score":
        assert str(out) in last and "resumes" in last, last
    elif command == "landscape":  # its directory, empty, or with the state it resumes from
        assert {p.name for p in out.iterdir()} <= {"landscape.json"}, list(out.iterdir())
        if (out / "landscape.json").exists():
            assert str(out / "landscape.json") in last and "resumes" in last, last
    else:
        pytest.fail(f"{command} left {out} after a failed write")
    return True


@pytest.mark.parametrize("command, target, kind, at", _cases(every=False))
def test_a_fault_in_each_writer_is_one_line(
    command, target, kind, at, model_dir, gguf_file, sizes, tmp_path, monkeypatch, capsys
):
    status, last, err, out = run_case(
        command, target, kind, at, model_dir, gguf_file, tmp_path, sizes, monkeypatch, capsys
    )
    assert check_case(command, status, last, err, out, tmp_path, kind)


@pytest.mark.slow  # every fault in every writer: minutes; CI runs it in the slow step
@pytest.mark.parametrize("command, target, kind, at", _cases(every=True))
def test_every_fault_in_every_writer_is_one_line(
    command, target, kind, at, model_dir, gguf_file, sizes, tmp_path, monkeypatch, capsys
):
    status, last, err, out = run_case(
        command, target, kind, at, model_dir, gguf_file, tmp_path, sizes, monkeypatch, capsys
    )
    assert check_case(command, status, last, err, out, tmp_path, kind)
