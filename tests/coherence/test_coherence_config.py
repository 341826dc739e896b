"""The coherence config: files, overrides, round trip."""

import json
from pathlib import Path

import pytest

from jaxdebate.coherence.config import CoherenceConfig
from jaxdebate.configlib import from_dict, load_config, to_dict
from jaxdebate.errors import ConfigError

ROOT = Path(__file__).resolve().parents[2]


def test_config_files_load_with_overrides_and_round_trip():
    cfg = load_config(ROOT / "configs" / "coherence.py")
    assert (cfg.dpo.learning_rate, cfg.dpo.epochs, cfg.dpo.batch_size, cfg.dpo.grad_accumulation) == (5e-5, 3, 2, 2)
    assert cfg.model.source == "smollm2" and cfg.data.train == "gsm8k_train" and cfg.data.eval == "gsm8k_platinum"
    assert len(cfg.collect.arms) == 11 and cfg.pairs.quality_gap == 0.01
    smoke = load_config(ROOT / "configs" / "coherence_smoke.py", ["dpo.beta=0.2", "lora.targets=['q_proj']"])
    assert smoke.model.source == "tiny" and smoke.dpo.beta == 0.2 and smoke.lora.targets == ("q_proj",)
    plain = json.loads(json.dumps(to_dict(smoke)))
    assert from_dict(CoherenceConfig, plain) == smoke


@pytest.mark.parametrize("override, field", [
    ("dpo.learning_rate=0", "dpo.learning_rate"),
    ("lora.targets=['attn']", "lora.targets"),
    ("pairs.quality_gap=-1", "pairs.quality_gap"),
    ("data.n_questions=0", "data.n_questions"),
    ("collect.questions_per_batch=0", "collect.questions_per_batch"),
    ("dpo.epochs=two", "dpo.epochs"),
    ("dpo.nonsense=1", "dpo.nonsense"),
    ("model.dot_dtype=bfloat16", "model.dot_dtype must be 'compute' when a LoRA adapter is trained"),
])
def test_bad_overrides_name_the_field(override, field):
    with pytest.raises(ConfigError, match=field.replace(".", r"\.")):
        load_config(ROOT / "configs" / "coherence.py", [override])


def test_arms_must_include_the_probes():
    cfg = CoherenceConfig()
    arms = [a for a in to_dict(cfg)["collect"]["arms"] if a["role"] != "A_prime"]
    with pytest.raises(ConfigError, match="A_prime"):
        from_dict(CoherenceConfig, {**to_dict(cfg), "collect": {"arms": arms}})


def test_eval_dir_is_one_name_inside_the_workdir_and_configs_load():
    from jaxdebate.coherence.config import CoherenceConfig
    from jaxdebate.configlib import apply_overrides, load_config
    from jaxdebate.errors import ConfigError

    assert apply_overrides(CoherenceConfig(), ["eval.dir=eval_gsm8k_platinum"]).eval.dir == "eval_gsm8k_platinum"
    for bad in ("../out", "a/b", "..", ""):
        with pytest.raises(ConfigError, match="eval.dir"):
            apply_overrides(CoherenceConfig(), [f"eval.dir={bad!r}"])
    cpu = load_config("configs/coherence_cpu.py", [], expected=CoherenceConfig)
    assert cpu.protocol == "answer_line" and cpu.data.train.endswith("slice=0:100")
    assert cpu.data.eval.endswith("slice=100:400")


def test_v2_config_and_its_variants_differ_only_where_they_say():
    """configs/coherence_v2.py (issue 28): every variant shares the collection and the split, and
    differs from the dpo variant only in the fields its overrides name."""
    base = load_config(ROOT / "configs" / "coherence_v2.py")  # puts the configs package on sys.path
    from configs.coherence_v2 import VARIANTS

    def flat(d, prefix=""):
        out = {}
        for k, v in d.items():
            out.update(flat(v, f"{prefix}{k}.") if isinstance(v, dict) else {f"{prefix}{k}": v})
        return out

    assert base.collect.canonical_twins and base.pairs.source == "canonical" and base.dpo.early_stopping
    assert base.data.n_questions == 500 and base.pairs.heldout_fraction == 0.2  # 400 training questions
    assert base.pairs.gap_noise_z == 2.0 and base.collect.rollouts.endswith("rollouts.jsonl")
    # the same backend and precision on every CPU kind
    assert base.sampler.backend == "jax" and base.sampler.jax.dtype == "model" and base.model.dtype == "float32"
    assert {"dpo", "sft", "rpo", "dpo-correctness", "dpo-coherence", "dpo-beta0.3", "dpo-1epoch", "dpo-3epochs"} <= set(VARIANTS)
    for name, overrides in VARIANTS.items():
        cfg = load_config(ROOT / "configs" / "coherence_v2.py", [f"variant={name}", *overrides])
        changed = {k for k, v in flat(to_dict(cfg)).items() if flat(to_dict(base))[k] != v}
        assert changed <= {"variant"} | {o.split("=")[0] for o in overrides}, (name, changed)
    smoke = load_config(ROOT / "configs" / "coherence_v2_smoke.py")
    assert smoke.model.source == "tiny" and smoke.pairs.source == "canonical" and smoke.dpo.early_stopping


def test_the_cli_refuses_a_training_config_before_touching_the_workdir(tmp_path, capsys):
    from jaxdebate.coherence.__main__ import main

    workdir = tmp_path / "run"
    assert main(["pairs", "--config", str(ROOT / "configs" / "coma.py"), "--workdir", str(workdir)]) == 2
    err = capsys.readouterr().err
    assert "configs/coma.py must return CoherenceConfig, got Config" in err and not workdir.exists()
