"""The CLI: invalid configs fail before any compute with a message naming the field; --print-config
and --dry-run; `python -m jaxdebate.launch` as a real process."""

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from jaxdebate.data.sources import DATASETS, candidate_files
from jaxdebate.launch import EXIT_CONFIG, EXIT_ERROR, EXIT_OK, main

ROOT = Path(__file__).resolve().parents[1]


def test_invalid_override_fails_before_compute_naming_the_field(tmp_path, capsys):
    workdir = tmp_path / "run"
    for override, named in [("loss.beta=-1", "loss.beta"), ("training.bogus=1", "training.bogus"),
                            ("training.generations_per_prompt=3", "n_rollouts_per_prompt"),
                            ("sampler.top_p=2", "sampler.top_p")]:
        assert main(["--config", "configs/coma.py", "--workdir", str(workdir), "--set", override]) == EXIT_CONFIG
        assert named in capsys.readouterr().err
    assert not workdir.exists()


def test_print_config_and_positional_overrides(capsys):
    assert main(["--config", "configs/coma.py", "--print-config", "loss.beta=0.05"]) == EXIT_OK
    printed = json.loads(capsys.readouterr().out)
    assert printed["shaping"] == {"strategy": "coma_advantage", "params": {"n_rollouts_per_prompt": 4},
                                  "credit": "turn", "discount": 1.0}
    assert printed["loss"]["beta"] == 0.05


@pytest.mark.skipif(not any(p.is_file() for p in candidate_files(DATASETS["math500"])),
                    reason="MATH-500 file not available locally")
def test_dry_run_resolves_math500(capsys):
    assert main(["--config", "configs/coma.py", "--dry-run"]) == EXIT_OK
    assert "450 training items, 50 validation items" in capsys.readouterr().out


def test_missing_dataset_is_a_clear_error(tmp_path, capsys):
    missing = tmp_path / "nope.jsonl"
    assert main(["--config", "configs/coma.py", "--dry-run", "--set", f"data.train={missing}"]) == EXIT_ERROR
    err = capsys.readouterr().err
    assert str(missing) in err and "Traceback" not in err


def test_module_entry_point_runs_as_a_process():
    start = time.time()
    out = subprocess.run([sys.executable, "-m", "jaxdebate.launch", "--config", "configs/coma.py",
                          "--set", "optimizer.end_lr=1"], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == EXIT_CONFIG
    assert "optimizer.end_lr" in out.stderr and "Traceback" not in out.stderr
    assert time.time() - start < 60  # fails before loading any model


def test_vllm_backend_without_a_server_falls_back_or_fails_before_compute(tmp_path, capsys):
    from jaxdebate.configlib import load_config
    from jaxdebate.sampling.factory import choose_backend

    absent = f"sampler.vllm.python={tmp_path / 'no-venv' / 'bin' / 'python'}"
    config = load_config("configs/coma.py", [absent])
    assert config.sampler.backend == "vllm" and config.sampler.fallback == "jax"
    assert choose_backend(config.sampler)[0] == "jax"
    assert "install_vllm.sh" in capsys.readouterr().err  # the fallback is announced, not silent

    reachable = load_config("configs/coma.py", [absent, "sampler.vllm.url=http://127.0.0.1:1"])
    assert choose_backend(reachable.sampler)[0] == "vllm"  # a given URL counts as reachable

    workdir = tmp_path / "run"
    assert main(["--config", "configs/coma.py", "--workdir", str(workdir), "--set", absent,
                 "sampler.fallback=error"]) == EXIT_CONFIG
    err = capsys.readouterr().err
    assert "sampler.fallback" in err and "install_vllm.sh" in err
    assert not workdir.exists()


# -- issue 14 item 5: unusable inputs are one line and exit 2 (config) or 1 (data), before any model load


def test_a_workdir_that_is_a_file_is_a_config_error(tmp_path, capsys):
    afile = tmp_path / "afile"
    afile.write_text("not a directory")
    for args in (["--dry-run", "--workdir", str(afile / "sub")], ["--dry-run", "--workdir", str(afile)],
                 ["--workdir", str(afile)], ["--workdir", str(afile / "sub" / "deeper")]):
        assert main(["--config", "configs/smoke.py", *args]) == EXIT_CONFIG, args
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and str(afile) in err and "not a directory" in err, err
    assert afile.read_text() == "not a directory"
    link = tmp_path / "link"
    link.symlink_to(tmp_path / "nowhere")
    assert main(["--config", "configs/smoke.py", "--dry-run", "--workdir", str(link)]) == EXIT_CONFIG
    assert capsys.readouterr().err == f"config error: --workdir {link} is a dangling symbolic link\n"


def _main_unprivileged(args: list[str]) -> tuple[int, str]:
    """(exit status, stderr) of ``main(args)``; run as nobody in a forked child when we are root,
    since root may write into any directory (the venv's interpreter is not reachable by nobody)."""
    import contextlib
    import io
    import os

    if os.geteuid() != 0:
        buf = io.StringIO()
        with contextlib.redirect_stderr(buf):
            return main(args), buf.getvalue()
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: drop root, run the real CLI entry point, report, exit
        code = 99
        try:
            os.close(read_end)
            os.setgid(65534)
            os.setuid(65534)
            buf = io.StringIO()
            with contextlib.redirect_stderr(buf):
                code = main(args)
            os.write(write_end, buf.getvalue().encode())
        finally:
            os._exit(code)
    os.close(write_end)
    import signal

    deadline = time.monotonic() + 120  # a fork of a multithreaded process could hang: never wait forever
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        if time.monotonic() > deadline:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            pytest.fail("the unprivileged child did not finish within 120 s")
        time.sleep(0.05)
    with os.fdopen(read_end, "rb") as f:  # its few lines fit the pipe's buffer
        err = f.read().decode()
    return os.waitstatus_to_exitcode(status), err


def test_a_read_only_workdir_fails_before_any_model_load():
    """A real read-only directory: the launcher refuses it before loading anything."""
    import shutil
    import tempfile

    base = Path(tempfile.mkdtemp(prefix="jaxdebate-ro-", dir="/tmp"))  # traversable by nobody
    try:
        base.chmod(0o755)
        readonly = base / "ro"
        readonly.mkdir()
        readonly.chmod(0o555)
        for workdir in (readonly, readonly / "run"):
            for extra in (["--dry-run"], []):
                code, err = _main_unprivileged(["--config", "configs/smoke.py", "--workdir", str(workdir), *extra])
                assert code == EXIT_CONFIG, err
                assert err == f"config error: --workdir {workdir} " + (
                    "is not writable\n" if workdir == readonly else f"cannot be created: {readonly} is not writable\n")
        assert list(readonly.iterdir()) == []
    finally:
        shutil.rmtree(base)


@pytest.mark.parametrize("body, message", [
    ("def get_config():\n    raise RuntimeError('no such cluster')\n",
     r"get_config\(\) of .*bad\.py raised RuntimeError: no such cluster$"),
    ("def get_config():\n    return {'loss': {'beta': 0.1}}\n",
     r"get_config\(\) of .*bad\.py must return Config, got dict$"),
    ("def get_config():\n    return None\n", r"get_config\(\) of .*bad\.py must return Config, got NoneType$"),
])
def test_a_broken_get_config_is_a_config_error(tmp_path, capsys, body, message):
    (tmp_path / "bad.py").write_text(body)
    for extra in ([], ["--print-config"], ["--dry-run"]):
        assert main(["--config", str(tmp_path / "bad.py"), "--workdir", str(tmp_path / "run"), *extra]) == EXIT_CONFIG
        err = capsys.readouterr().err.strip()
        assert "\n" not in err and re.search(message, err), err
    assert not (tmp_path / "run").exists()


def test_deeply_nested_jsonl_is_a_data_error_naming_file_and_line(tmp_path, capsys):
    data = tmp_path / "deep.jsonl"
    data.write_text(json.dumps({"problem": "1+1", "answer": "2"}) + "\n" + "[" * 100_000 + "]" * 100_000 + "\n")
    assert main(["--config", "configs/smoke.py", "--dry-run", "--set", f"data.train={data}"]) == EXIT_ERROR
    err = capsys.readouterr().err
    assert err == f"error: {data}:2: JSON nested too deeply to read\n"


# -- issue 14 item 7: non-finite floats are refused, and --print-config prints standard JSON only


@pytest.mark.parametrize("override, field", [
    ("optimizer.peak_lr=Infinity", "optimizer.peak_lr"), ("optimizer.peak_lr=1e400", "optimizer.peak_lr"),
    ("loss.beta=Infinity", "loss.beta"), ("loss.beta=NaN", "loss.beta"),
    ("optimizer.grad_clip=1e999", "optimizer.grad_clip"),
    ("sampler.vllm.request_timeout_s=Infinity", "sampler.vllm.request_timeout_s"),
    ("shaping.params.alpha=Infinity", "shaping.params.alpha"),
])
def test_non_finite_floats_are_refused_naming_the_field(capsys, override, field):
    config = "configs/reward_mixing.py" if override.startswith("shaping") else "configs/coma.py"
    assert main(["--config", config, "--print-config", "--set", override]) == EXIT_CONFIG
    captured = capsys.readouterr()
    assert captured.out == "" and field in captured.err and "Traceback" not in captured.err, captured.err
    assert "must be a finite number" in captured.err  # one type check for sections and strategy params


def test_format_config_never_writes_non_standard_json():
    import dataclasses

    from jaxdebate.configlib import format_config
    from jaxdebate.errors import ConfigError

    @dataclasses.dataclass(frozen=True)
    class Free:  # a free-form mapping that no annotation checks
        extra: dict

    with pytest.raises(ConfigError, match=r"^extra\.a\[1\] must be a finite number"):
        format_config(Free({"a": [1.0, float("inf")]}))
    assert json.loads(format_config(Free({"a": [1.0, 2]}))) == {"extra": {"a": [1.0, 2]}}


# -- issue 14 item 3: a prompt that cannot fit is reported up front (file:line), not at the step that draws it


def _data_with_oversized_items(tmp_path) -> Path:
    data = tmp_path / "big.jsonl"
    rows = [{"problem": f"What is {i} + {i}?", "answer": str(2 * i)} for i in range(8)]
    rows[2] = {"problem": "word " * 400_000, "answer": "5"}  # 2 MB: judged from a prefix
    rows[5] = {"problem": "x " * 3000, "answer": "5"}  # tokenised whole
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return data


def test_oversized_prompts_fail_the_dry_run_naming_file_and_line(tmp_path, capsys):
    data = _data_with_oversized_items(tmp_path)
    args = ["--config", "configs/smoke.py", "--dry-run", "--set", f"data.train={data}", "data.validation_size=0"]
    assert main(args) == EXIT_ERROR
    err = capsys.readouterr().err
    assert "2 item(s) have a round-1 prompt over the budget of 304 tokens" in err
    assert re.search(rf"{re.escape(str(data))}:3 \(item 'big/2'\): at least \d+ tokens", err), err
    assert re.search(rf"{re.escape(str(data))}:6 \(item 'big/5'\): 30\d\d tokens", err), err


def test_an_item_in_an_unregistered_environment_fails_the_dry_run_naming_file_and_line(tmp_path, capsys):
    data = tmp_path / "envs.jsonl"
    data.write_text(json.dumps({"problem": "1+1?", "answer": "2"}) + "\n"
                    + json.dumps({"problem": "2+2?", "answer": "4", "env": "chess"}) + "\n")
    args = ["--config", "configs/smoke.py", "--dry-run", "--set", f"data.train={data}", "data.validation_size=0"]
    assert main(args) == EXIT_ERROR
    # other tests in this process may have registered environments of their own after these two
    assert re.fullmatch(rf"error: {re.escape(str(data))}:2 \(item 'envs/1'\): environment 'chess' is not "
                        r"registered; registered: math, math_debate(, \w+)*\n", capsys.readouterr().err)


def test_oversized_prompts_stop_training_before_the_model_loads(tmp_path, capsys):
    data = _data_with_oversized_items(tmp_path)
    workdir = tmp_path / "run"
    start = time.monotonic()
    code = main(["--config", "configs/smoke.py", "--workdir", str(workdir),
                 "--set", f"data.train={data}", "data.validation_size=0"])
    assert code == EXIT_ERROR
    assert f"{data}:6 (item 'big/5')" in capsys.readouterr().err
    assert not (workdir / "checkpoints").exists() and not (workdir / "metrics.jsonl").exists()
    assert time.monotonic() - start < 30


def test_first_prompt_lengths_are_exact_or_a_lower_bound():
    from jaxdebate.config import Config
    from jaxdebate.data.items import Item
    from jaxdebate.debate.envs import envs_for
    from jaxdebate.debate.fitting import first_prompt_lengths
    from jaxdebate.model import load_tokenizer

    tok = load_tokenizer("tiny")
    items = [Item(f"i{k}", text, "1") for k, text in
             enumerate(["Compute $2+3$.", "é " * 200, "long " * 150, "word " * 40_000, "x" * 5_000_000])]
    envs = envs_for(items, Config().debate)
    exact = [len(tok.encode_chat(env.first_messages(it))) for env, it in zip(envs[:4], items[:4])]
    got = first_prompt_lengths(envs, items, tok, budget=100)
    assert got[0] is None and exact[0] <= 100
    assert got[1] == (exact[1], True) and got[2] == (exact[2], True)
    n, is_exact = got[3]
    assert not is_exact and 100 < n <= exact[3]
    # a 5 MB line without whitespace is judged from a bounded prefix too (tokenised whole, it took GBs)
    n, is_exact = got[4]
    assert not is_exact and n > 100


def test_deterministic_gpu_ops_reach_xla_flags_and_a_contradiction_is_refused(monkeypatch, capsys):
    from jaxdebate.config import Config
    from jaxdebate.configlib import load_config
    from jaxdebate.errors import ConfigError
    from jaxdebate.launch import set_xla_flags

    on = load_config("configs/coma.py", [], expected=Config)
    off = load_config("configs/coma.py", ["launch.deterministic_gpu_ops=false"], expected=Config)
    env = {"XLA_FLAGS": "--xla_force_host_platform_device_count=2"}
    set_xla_flags(on, env)  # added after the user's own flags, which are kept
    assert env["XLA_FLAGS"] == "--xla_force_host_platform_device_count=2 --xla_gpu_deterministic_ops=true"
    set_xla_flags(on, env)  # already there and agreeing: unchanged
    assert env["XLA_FLAGS"].count("deterministic") == 1
    env = {}
    set_xla_flags(off, env)
    assert env["XLA_FLAGS"] == "--xla_gpu_deterministic_ops=false"
    with pytest.raises(ConfigError, match="launch.deterministic_gpu_ops=True"):
        set_xla_flags(on, {"XLA_FLAGS": "--xla_gpu_deterministic_ops=false"})
    with pytest.raises(ConfigError, match="launch.deterministic_gpu_ops=False"):
        set_xla_flags(off, {"XLA_FLAGS": "--xla_gpu_deterministic_ops"})  # a bare boolean flag means true

    # through the CLI: refused before any compute, the field named; monkeypatch restores XLA_FLAGS
    monkeypatch.setenv("XLA_FLAGS", "--xla_gpu_deterministic_ops=false")
    assert main(["--config", "configs/coma.py", "--dry-run"]) == EXIT_CONFIG
    assert "launch.deterministic_gpu_ops" in capsys.readouterr().err


@pytest.mark.parametrize("given, expected", [(None, 0.5), ("2", 2.0)])
def test_compilation_cache_keeps_sub_second_programs_unless_the_environment_says(tmp_path, given, expected):
    """JAX caches only programs that took >= 1 s to compile: a small run's many shorter ones were compiled
    anew by every launch. The launcher lowers that to CACHE_MIN_COMPILE_S; an explicit setting wins."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("JAX_")}
    env["JAXDEBATE_CACHE"] = str(tmp_path / "cache")
    if given is not None:
        env["JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS"] = given
    probe = ("import jax; from jaxdebate.launch import enable_compilation_cache; enable_compilation_cache(); "
             "print(jax.config.jax_persistent_cache_min_compile_time_secs, jax.config.jax_compilation_cache_dir)")
    out = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    seconds, directory = out.stdout.split()
    assert float(seconds) == expected and directory == str(tmp_path / "cache" / "xla")
