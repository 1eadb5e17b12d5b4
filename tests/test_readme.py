"""The README's Python snippets run as printed (on a tiny model), and the API stops cleanly.

Each ``python`` block of the README's "From Python" section is run as it stands, with
the demo model's name replaced by a tiny saved model, in a fresh working directory.
"""

import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from tiny_models import save_tiny

from swapprune.engine import threads

README = Path(__file__).resolve().parents[1] / "README.md"


def python_snippets() -> list[str]:
    """The ``python`` code blocks of the README's "From Python" section."""
    text = README.read_text(encoding="utf-8")
    section = text.split("## From Python", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```python\n(.*?)```", section, flags=re.DOTALL)


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return str(save_tiny("llama", tmp_path_factory.mktemp("m") / "tiny"))


def test_the_section_has_the_snippets():
    snippets = python_snippets()
    assert len(snippets) == 2
    assert all('"smollm2-135m"' in code for code in snippets)  # what the test replaces


@pytest.mark.parametrize("index", [0, 1])
def test_each_python_snippet_of_the_readme_runs(index, model_dir, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(threads, "CHOICE", None)  # the call's own thread choice, undone after
    code = python_snippets()[index].replace('"smollm2-135m"', repr(model_dir))
    exec(compile(code, f"README.md python block {index + 1}", "exec"), {"__name__": "readme"})
    out = capsys.readouterr().out
    # say=print: the [estimate] lines before the work, then the stage lines
    assert "[estimate]" in out and "[select] done" in out, out
    if index == 0:
        assert (tmp_path / "smol-28L" / "plan.json").is_file()
        assert "[load] done" in out and "[cost] done" in out
    assert threads.CHOICE is not None  # the call made the thread choice, as a command does


@pytest.mark.parametrize("where", ["stages.load", "sequence.cut"])
def test_ctrl_c_in_the_api_is_one_line_not_a_traceback(where, model_dir, tmp_path):
    """A KeyboardInterrupt inside a call leaves it as one line, not a traceback, and the
    interpreter exits as for any Ctrl-C: before the load, and after it with torch._dynamo
    imported (whose exit hook would otherwise turn the status into 1)."""
    script = textwrap.dedent(
        f"""
        import torch._dynamo  # as transformers.masking_utils imports it in some releases
        import swapprune
        from swapprune.config import ExportConfig, ModelConfig, RunConfig, SelectConfig
        from swapprune.pipeline import sequence, stages

        def stop(*args, **kwargs):
            raise KeyboardInterrupt  # as Ctrl-C would, inside the run

        {where} = stop
        swapprune.run(RunConfig(model=ModelConfig(name={model_dir!r}),
                                prune=SelectConfig(budget=1, certify=False),
                                export=ExportConfig(output="out")), progress=False)
        """
    )
    (tmp_path / "stop.py").write_text(script)
    done = subprocess.run(
        [sys.executable, "stop.py"], cwd=tmp_path, capture_output=True, text=True, timeout=300
    )
    # An uncaught Ctrl-C exits by SIGINT: 130 from a shell, -2 from subprocess
    assert done.returncode in (130, -2), done
    err = done.stderr.strip().splitlines()
    assert err == [
        "swapprune: interrupted during swapprune.run(); partial files removed, nothing was written"
    ], done.stderr
    assert not (tmp_path / "out").exists()
