"""Validation as the experiment needs it (issue 24 item 2): the held-out items single-agent and as a
debate, the transfer set at the start and the end, per-item rows per validation, and step 0 computed
once and reused by a second run that would compute the same."""

from __future__ import annotations

import numpy as np

from jaxdebate import validation_files
from jaxdebate.checkpoint import load_policy
from jaxdebate.debate import Grader
from jaxdebate.launch import EXIT_OK, main
from jaxdebate.metrics import read_metrics
from jaxdebate.rl import validation_plan
from jaxdebate.sampling.factory import make_sampler

OVERRIDES = [
    "training.total_train_steps=2", "training.validation_every_steps=1", "training.validate_at_start=true",
    "training.checkpoint_every_steps=0", "training.train_batch_size=1", "sampler.max_new_tokens=8",
    "data.validation_size=3", "data.validation_envs={'single': 'math', 'debate': 'math_debate'}",
    "data.transfer=arithmetic:level=1,n=2,seed=3", "logging.progress_bar=false",
]

STEP_0_ONLY = ["training.validation_every_steps=0"]  # validate_at_start still validates step 0


def _rows(workdir, step):
    """The rows as the analysis reads them: each must hold validation_files.ROW_FIELDS."""
    return validation_files.read(workdir / "validation" / f"step_{step}.jsonl")


def test_every_validation_writes_item_rows_and_step_0_is_reused(tmp_path, monkeypatch):
    monkeypatch.setenv("JAXDEBATE_CACHE", str(tmp_path / "cache"))
    first, second = tmp_path / "a", tmp_path / "b"
    assert main(["--config", "configs/smoke.py", "--workdir", str(first), "--set", *OVERRIDES]) == EXIT_OK

    records = {r["step"]: r for r in read_metrics(first / "metrics.jsonl") if "val/single/accuracy" in r}
    assert sorted(records) == [0, 1, 2]
    for step, record in records.items():
        rows = _rows(first, step)
        kinds = sorted({(r["set"], r["mode"]) for r in rows})
        ends = step in (0, 2)  # the transfer set at the start and the end only
        assert kinds == sorted([("heldout", "debate"), ("heldout", "single")] + ([("transfer", "transfer")] if ends else []))
        assert ("val/transfer/accuracy" in record) == ends
        debate = [r for r in rows if r["mode"] == "debate"]
        single = [r for r in rows if r["mode"] == "single"]
        assert len(debate) == len(single) == 3 and [r["id"] for r in debate] == [r["id"] for r in single]
        assert all(len(r["answers"]) == 3 and len(r["answers"][0]) == 2 for r in debate)  # 3 agents x 2 rounds
        assert all(len(r["answers"]) == 1 and len(r["answers"][0]) == 1 for r in single)
        # the rows and the logged metrics are one computation
        assert np.mean([r["correct_final"] for r in debate]) == record["val/debate/accuracy/debate"]
        assert np.mean([r["correct"][0][0] for r in single]) == record["val/single/accuracy"]
        # one agent, one round: its breakdown names agent 0 and round 0 only, no NaN for agents it lacks
        assert record["val/single/accuracy/agent_0"] == record["val/single/accuracy/round_0"] == record["val/single/accuracy"]
        assert not any(k.startswith(("val/single/accuracy/agent_1", "val/single/accuracy/round_1")) for k in record)
        assert {"val/debate/accuracy/agent_2", "val/debate/accuracy/round_1"} <= record.keys()
        # an unanswered debate is one whose row has no answer; a turn without a number, one without its own
        assert np.mean([r["answer"] is None for r in debate]) == record["val/debate/no_answer_fraction/debate"]
        assert np.mean([a is None for r in debate for agent in r["answers"] for a in agent]) == \
            record["val/debate/no_answer_fraction"]
        assert np.mean([r["answers"][0][0] is None for r in single]) == record["val/single/no_answer_fraction"]
        # the debate's greedy first round asks the single-agent prompts: answered from the step's memo
        assert record["val/reused_completions"] == len(single)
        assert [r["answers"][0][0] for r in debate] == [r["answers"][0][0] for r in single]
    assert "val/cached" not in records[0]

    # a second run of the same model, items, protocol and code reuses step 0 instead of recomputing it,
    # under another training seed too: greedy decoding of the base weights does not depend on it (this run
    # and the next are about step 0 only: no validation after their one step, which the key does not hold)
    assert main(["--config", "configs/smoke.py", "--workdir", str(second), "--set", *OVERRIDES,
                 "training.total_train_steps=1", "training.seed=7", *STEP_0_ONLY]) == EXIT_OK
    again = next(r for r in read_metrics(second / "metrics.jsonl") if r["step"] == 0)
    assert again["val/cached"] == 1.0 and "time/validation" not in again
    assert _rows(second, 0) == _rows(first, 0)
    assert {k: v for k, v in again.items() if k.startswith("val/") and k != "val/cached"} == \
        {k: v for k, v in records[0].items() if k.startswith("val/")}
    # ...and what the cache gave that seed is what computing it afresh gives
    fresh = tmp_path / "c"
    assert main(["--config", "configs/smoke.py", "--workdir", str(fresh), "--set", *OVERRIDES,
                 "training.total_train_steps=1", "training.seed=7", *STEP_0_ONLY,
                 "training.reuse_initial_validation=false"]) == EXIT_OK
    assert _rows(fresh, 0) == _rows(first, 0)

    # a validation outside the run (the noise-floor script, bench/validation.py) of its last checkpoint
    # decodes as the run did: the same greedy answers on the held-out items, no transfer set, no cache
    params, llama, tokenizer, config = load_policy(first)
    _, val_items = config.data.load()
    with Grader() as grader, make_sampler(config.sampler, params, llama, tokenizer, workdir=tmp_path / "offline",
                                          max_total_len=config.debate.max_sequence_length,
                                          seed=config.training.seed) as sampler:
        metrics, rows = validation_plan.run_offline(config, sampler, tokenizer, grader, val_items,
                                                    tmp_path / "offline")
    last = {(r["mode"], r["id"]): r["answers"] for r in _rows(first, 2) if r["set"] == "heldout"}
    assert {(r["mode"], r["id"]): r["answers"] for r in rows} == last
    assert "val/cached" not in metrics and metrics["val/debate/accuracy/debate"] == records[2]["val/debate/accuracy/debate"]
    assert (tmp_path / "offline" / "validation" / "step_3.jsonl").is_file()


def test_the_step_0_key_holds_the_seed_only_where_it_can_change_step_0():
    import dataclasses

    from configs.smoke import get_config
    from jaxdebate.config import Config

    def key(config: Config, seed: int) -> str:
        config = dataclasses.replace(config, training=dataclasses.replace(config.training, seed=seed))
        return validation_plan.initial_key(config, [], "JaxSampler")

    greedy = get_config()
    assert key(greedy, 1) == key(greedy, 2)
    sampled = dataclasses.replace(greedy, sampler=dataclasses.replace(greedy.sampler, eval_temperature=0.5))
    assert key(sampled, 1) != key(sampled, 2)
    lora = dataclasses.replace(greedy, model=dataclasses.replace(
        greedy.model, lora=dataclasses.replace(greedy.model.lora, rank=4)))
    assert key(lora, 1) != key(lora, 2)
    # the learner's bf16 matmul operands never reach the sampler that validates
    dots = dataclasses.replace(greedy, model=dataclasses.replace(greedy.model, dot_dtype="bfloat16"))
    assert key(dots, 1) == key(greedy, 1)


def test_evaluation_decoding_is_greedy_without_a_nucleus_cut():
    from jaxdebate.sampling.config import SamplerConfig

    s = SamplerConfig(temperature=0.7, top_p=0.9, max_new_tokens=48, eval_temperature=0.0)
    train, evaluation = s.sampling_params(), s.sampling_params(evaluation=True)
    assert (train.temperature, train.top_p, train.max_tokens) == (0.7, 0.9, 48)
    assert (evaluation.temperature, evaluation.top_p, evaluation.max_tokens) == (0.0, 1.0, 48)


def test_the_step_0_key_holds_what_decides_the_bits_besides_the_config():
    """A cached step 0 is reused only where it would decode the same: not across AVX2 and AVX-512
    CPUs, nor under other XLA options (both move fp32's last bits); unrelated variables do not matter."""
    from configs.smoke import get_config

    class JaxSampler:
        pass

    def key(environ, flags=("avx512f", "avx512_bf16", "sse4_2")):
        identity = validation_plan.sampler_identity(JaxSampler(), environ, flags)
        return validation_plan.initial_key(get_config(), [], identity)

    base = key({"XLA_FLAGS": "--xla_force_host_platform_device_count=1", "HOME": "/a"})
    assert key({"XLA_FLAGS": "--xla_force_host_platform_device_count=1", "HOME": "/b"}) == base
    assert key({"XLA_FLAGS": "--xla_force_host_platform_device_count=1 "
                             "--xla_cpu_experimental_ynn_fusion_type=individual_dot,eltwise"}) != base
    assert key({}) != base
    assert key({"XLA_FLAGS": "--xla_force_host_platform_device_count=1"}, flags=("sse4_2", "avx2")) != base
    assert key({"XLA_FLAGS": "--xla_force_host_platform_device_count=1"}, flags=("avx512_bf16", "avx512f")) == base
