"""The experiment config: the five strategy configs differ only in shaping (every pair, full trees),
the seeds' values (DESIGN §7), overrides, validation errors that name the field, serialisation."""

import dataclasses
import itertools
import json

import pytest

from jaxdebate.config import Config
from jaxdebate.configlib import apply_overrides, from_dict, load_config, to_dict
from jaxdebate.errors import ConfigError

STRATEGY_FILES = {
    "identity": ("identity", {}),
    "difference_rewards": ("difference_rewards", {}),
    "potential_based": ("potential_based", {"gamma": 0.99, "potential_type": "debate_length"}),
    "coma": ("coma_advantage", {"n_rollouts_per_prompt": 4}),
    "reward_mixing": ("reward_mixing", {"alpha": 0.5}),
}


FAMILIES = {"seeds": "configs", "arithmetic": "configs/arithmetic"}


def _family(directory):
    return {name: load_config(f"{directory}/{name}.py") for name in STRATEGY_FILES}


@pytest.fixture(scope="module")
def configs():
    return _family(FAMILIES["seeds"])


@pytest.fixture(scope="module", params=list(FAMILIES))
def family(request):
    """Each experiment family's five strategy configs."""
    return _family(FAMILIES[request.param])


def _leaves(tree, path=()):
    """Every (path, value) leaf of a nested dict/list tree (empty containers are leaves too)."""
    if isinstance(tree, dict) and tree:
        for key, value in tree.items():
            yield from _leaves(value, path + (str(key),))
    elif isinstance(tree, list) and tree:
        for i, value in enumerate(tree):
            yield from _leaves(value, path + (f"[{i}]",))
    else:
        yield path, tree


def test_configs_differ_only_in_reward_shaping(family):
    trees = {name: dict(_leaves(to_dict(c))) for name, c in family.items()}
    for a, b in itertools.combinations(trees, 2):
        paths = set(trees[a]) | set(trees[b])
        differing = sorted(p for p in paths if trees[a].get(p, "<absent>") != trees[b].get(p, "<absent>"))
        assert differing, f"{a} and {b} are identical"
        outside = [".".join(p) for p in differing if p[:2] not in (("shaping", "strategy"), ("shaping", "params"))]
        assert not outside, f"{a} vs {b} differ outside the shaping strategy and its params: {outside}"
    # and every non-shaping leaf is present in all five (nothing missing on one side)
    non_shaping = [{p for p in t if p[0] != "shaping"} for t in trees.values()]
    assert all(s == non_shaping[0] for s in non_shaping) and len(non_shaping[0]) > 60


def test_strategy_specific_params(family):
    for name, (strategy, params) in STRATEGY_FILES.items():
        assert family[name].shaping.strategy == strategy
        if family[name].shaping.credit == "return":  # the arithmetic family: PBRS on the agreement potential
            params = dict(params, potential_type="agreement") if name == "potential_based" else params
            assert family[name].shaping.discount == params.get("gamma", family[name].shaping.discount)
        assert dict(family[name].shaping.params) == params


def test_every_family_file_is_named_for_its_registered_strategy(family):
    """Sweeps and analysis take the strategy list from the registry (issue 15 item 2): the files of a
    family are exactly its registered strategies' config names, in registry (DESIGN) order."""
    from jaxdebate.shaping import STRATEGIES, config_names
    from jaxdebate.sweep_plan import default_configs

    assert config_names()[:5] == tuple(STRATEGY_FILES)  # the built-ins first (tests may register more)
    for name, config in family.items():
        assert STRATEGIES[config.shaping.strategy].config_name == name
    for directory in FAMILIES.values():
        assert [p.stem for p in default_configs(directory)] == list(STRATEGY_FILES)


def test_seed_values_in_every_config(configs):
    for config in configs.values():
        t, o = config.training, config.optimizer
        assert config.model.source == "smollm2"
        assert config.launch.training_devices == 1 and config.launch.sampling_devices == 1
        assert config.launch.partition == "gpu_1" and config.launch.priority == "dev-low"
        assert config.debate.max_sequence_length == 2048
        assert (t.train_batch_size, t.eval_batch_size, t.total_train_steps) == (2, 2, 15)
        assert o.peak_lr == o.end_lr == 3e-6
        assert config.loss.beta == 0.03
        assert t.generations_per_prompt == 4
        assert (t.export_every_steps, t.hard_update_ref_every_steps, t.seed) == (5, 5, 42)
        assert o.n_gradient_accumulation_steps == 1
        assert (t.validation_every_steps, t.checkpoint_every_steps) == (15, 15)
        assert config.checkpoint.n_last_ckpts_to_keep == 2
        assert config.data.env_name_remap == {"math": "math_debate"}
        assert config.data.train == "math500"
        assert config.logging.wandb_project == "multiagent-debate-rl"


def test_n_rollouts_consistency(configs):
    coma = configs["coma"]
    assert coma.shaping.params["n_rollouts_per_prompt"] == coma.training.generations_per_prompt == 4
    with pytest.raises(ConfigError, match="n_rollouts_per_prompt"):
        apply_overrides(coma, ["training.generations_per_prompt=8"])
    both = apply_overrides(coma, ["training.generations_per_prompt=8", "shaping.params.n_rollouts_per_prompt=8"])
    assert both.training.generations_per_prompt == 8


def test_overrides_and_errors_name_the_field(configs):
    base = configs["reward_mixing"]
    c = apply_overrides(base, [
        "loss.beta=0.05", "shaping.params.alpha=0.3", "optimizer.peak_lr=1e-7", "optimizer.end_lr=1e-7",
        "data.env_name_remap={'math': 'math'}", "logging.run_name=abc", "loss.clip_eps_high=None",
        "model.source=tiny:layers=1", "sampler.backend=vllm", "logging.wandb=true", "sampler.jax.dtype=bfloat16",
    ])
    assert (c.loss.beta, c.shaping.params["alpha"], c.optimizer.peak_lr) == (0.05, 0.3, 1e-7)
    assert c.data.env_name_remap == {"math": "math"} and c.model.source == "tiny:layers=1"
    assert c.sampler.backend == "vllm" and c.logging.wandb is True and c.sampler.jax.dtype == "bfloat16"
    cases = {
        "sampler.jax.dtype=float16": "sampler.jax.dtype",
        "sampler.jax.max_batch=0": "sampler.jax.max_batch",
        "loss.betta=1": "loss.betta",
        "loss.beta=-1": "loss.beta",
        "loss.estimator=ppo": "loss.estimator",
        "training.total_train_steps=1.5": "training.total_train_steps",
        "training.seed=-1": "training.seed",
        "shaping.params.alpha=2": "alpha",
        "shaping.params.gamma=0.9": "gamma",
        "shaping.strategy=nope": "nope",
        "debate.num_agents=0": "debate.num_agents",
        "sampler.max_new_tokens=4096": "sampler.max_new_tokens",
        "nosection.x=1": "nosection",
        "loss=1": "loss",
        "model.dot_dtype=float16": "model.dot_dtype",
    }
    for override, named in cases.items():
        with pytest.raises(ConfigError, match=named.replace(".", r"\.")):
            apply_overrides(base, [override])
    with pytest.raises(ConfigError, match="section.field=value"):
        apply_overrides(base, ["loss.beta"])
    # bf16 matmul operands: only for a full-fine-tuning fp32 learner; bf16 gradient operands: any fp32 learner
    assert apply_overrides(base, ["model.dot_dtype=bfloat16"]).model.dot_dtype == "bfloat16"
    assert apply_overrides(base, ["model.dot_dtype=bfloat16_grads", "model.lora.rank=8"]).model.lora.rank == 8
    with pytest.raises(ConfigError, match=r"model\.dot_dtype must be 'compute' with model\.dtype=bfloat16"):
        apply_overrides(base, ["model.dot_dtype=bfloat16_grads", "model.dtype=bfloat16"])
    for others in (["model.dtype=bfloat16"], ["model.lora.rank=8"]):
        with pytest.raises(ConfigError, match=r"model\.dot_dtype must be 'compute' (with model\.dtype|when a LoRA)"):
            apply_overrides(base, ["model.dot_dtype=bfloat16", *others])


def test_round_trip_through_json(configs, family):
    for config in [*configs.values(), *family.values()]:
        data = json.loads(json.dumps(to_dict(config)))
        assert from_dict(Config, data) == config
    data = to_dict(configs["identity"])
    data["loss"]["bogus"] = 1
    with pytest.raises(ConfigError, match="loss.bogus"):
        from_dict(Config, data)


def test_load_config_from_any_file(tmp_path):
    path = tmp_path / "mine.py"
    path.write_text(
        "from jaxdebate.config import Config, TrainingConfig\n"
        "def get_config():\n    return Config(training=TrainingConfig(total_train_steps=3))\n"
    )
    assert load_config(path, ["training.seed=7"]).training.seed == 7
    (tmp_path / "broken.py").write_text("def get_config(:\n")
    with pytest.raises(ConfigError, match="broken.py"):
        load_config(tmp_path / "broken.py")
    with pytest.raises(ConfigError, match="not found"):
        load_config(tmp_path / "missing.py")
    (tmp_path / "noget.py").write_text("x = 1\n")
    with pytest.raises(ConfigError, match="get_config"):
        load_config(tmp_path / "noget.py")


def test_smoke_config_is_small():
    smoke = load_config("configs/smoke.py")
    assert smoke.model.source.startswith("tiny")
    assert smoke.data.train.startswith("arithmetic")
    assert smoke.training.total_train_steps <= 6 and smoke.sampler.max_new_tokens <= 32


def test_arithmetic_family_is_the_seeds_experiment_at_cpu_scale():
    """The family keeps the seeds' debate shape and loss, and changes only what its base documents:
    graded data with a disjoint held-out split, the answer_line protocol, sizes."""
    seeds, arith = load_config("configs/identity.py"), load_config("configs/arithmetic/identity.py")
    assert (arith.debate.num_agents, arith.debate.num_rounds) == (3, 2)
    assert arith.training.generations_per_prompt == seeds.training.generations_per_prompt == 4
    assert arith.model.source == seeds.model.source
    # the loss is the seeds' but for the documented credit-assignment settings (base.py's docstring)
    assert arith.loss == dataclasses.replace(seeds.loss, grouping="agent_round", filter_truncated=False,
                                             truncated_as_wrong=True)
    assert (arith.shaping.credit, arith.shaping.discount) == ("return", 0.99) and seeds.shaping.credit == "turn"
    assert arith.debate.extraction == "number" and arith.debate.example_problem
    assert seeds.debate.extraction == "marked" and seeds.debate.example_problem is None  # seeds untouched
    assert arith.training.validate_at_start and arith.training.total_train_steps % arith.training.validation_every_steps == 0
    assert arith.data.validation_envs == {"single": "math", "debate": "math_debate"} and arith.data.transfer
    train, held_out = arith.data.load()
    assert len(held_out) >= 300 and not {it.problem for it in train} & {it.problem for it in held_out}


def test_precision_pilot_arms_differ_from_the_family_only_in_precision(tmp_path):
    """results/arithmetic-precision/PROTOCOL.md: ``fp32`` is the family's identity run as committed, and
    ``bf16_pair`` changes the server's dtype and the learner's dot dtype and nothing else."""
    from jaxdebate.sweep_plan import plan_runs

    identity = load_config("configs/arithmetic/identity.py")
    fp32 = load_config("configs/arithmetic/precision/fp32.py")
    pair = load_config("configs/arithmetic/precision/bf16_pair.py")
    assert fp32 == identity
    assert (pair.model.dot_dtype, pair.sampler.vllm.dtype) == ("bfloat16", "bfloat16")
    assert pair == dataclasses.replace(
        identity, model=dataclasses.replace(identity.model, dot_dtype="bfloat16"),
        sampler=dataclasses.replace(identity.sampler, vllm=dataclasses.replace(identity.sampler.vllm, dtype="bfloat16")))
    runs = plan_runs(tmp_path, ["configs/arithmetic/precision/fp32.py", "configs/arithmetic/precision/bf16_pair.py"],
                     seeds=[2000, 2001])
    assert sorted(r.name for r in runs) == ["bf16_pair-seed2000", "bf16_pair-seed2001", "fp32-seed2000", "fp32-seed2001"]
