"""Planning a sweep: strategy configs × seeds expanded into validated run specs, in seed blocks whose
order is drawn from the seed. Pure of side effects: nothing here starts a process or touches a workdir."""

from __future__ import annotations

import dataclasses
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from jaxdebate.configlib import apply_overrides, load_config, to_dict
from jaxdebate.errors import ConfigError
from jaxdebate.shaping import config_names

REPO_ROOT = Path(__file__).resolve().parent.parent
ORDERS = ("blocked", "configs")
_ORDER_STREAM = 20271125  # separates the block-order draws from every other use of a training seed


def default_configs(family: Path | None = None) -> list[Path]:
    """The strategy configs of a config family directory (default: ``configs/``): one file per
    registered strategy. A family that lacks one is a ConfigError naming the missing files (a
    comparison silently missing an arm is not the comparison asked for); name the files to run
    fewer."""
    family = REPO_ROOT / "configs" if family is None else Path(family)
    names = config_names()
    missing = [f"{name}.py" for name in names if not (family / f"{name}.py").is_file()]
    if missing:
        raise ConfigError(f"{family} lacks the strategy config(s) {', '.join(missing)} (one per registered "
                          f"strategy: {', '.join(names)}); add them, or pass the config files to run instead "
                          f"of the directory")
    return [family / f"{name}.py" for name in names]


def expand_configs(configs: Sequence[str | Path] | None) -> list[Path]:
    """Config files as given, a directory standing for its family's strategy configs (so
    ``--configs configs/arithmetic`` runs the five strategies, not the shared ``base.py``)."""
    if not configs:
        return default_configs()
    out: list[Path] = []
    for c in map(Path, configs):
        out.extend(default_configs(c) if c.is_dir() else [c])
    return out


@dataclasses.dataclass(frozen=True)
class RunSpec:
    """One run of the sweep: which config file, which seed, which overrides, where."""

    name: str
    strategy: str
    config_path: str
    seed: int
    overrides: tuple[str, ...]
    workdir: str
    launch: dict[str, Any]

    def command(self, python: str | None = None) -> list[str]:
        cmd = [python or sys.executable, "-m", "jaxdebate.launch", "--config", self.config_path,
               "--workdir", self.workdir]
        for item in self.overrides:
            cmd += ["--set", item]
        return cmd


def _shaping_overrides(config: Any) -> list[str]:
    shaping = to_dict(config)["shaping"]
    return [f"shaping.strategy={shaping['strategy']}", f"shaping.params={json.dumps(shaping['params'])}"]


def plan_runs(
    sweep_dir: str | Path,
    configs: Sequence[str | Path] | None = None,
    seeds: Sequence[int] = (42,),
    *,
    base: str | Path | None = None,
    overrides: Sequence[str] = (),
    launch_overrides: Sequence[str] = (),
    order: str = "blocked",
) -> list[RunSpec]:
    """Expand configs × seeds into run specs, validating every resulting config before anything runs.

    With ``base``, each run uses the base config file with the strategy config's shaping section.
    ``launch_overrides`` (``partition=gpu_8``, ``time_limit_minutes=60``…) change the launch section.
    ``order="blocked"`` (the default) runs seed blocks one after another, each block's configs in an
    order drawn from its seed (:func:`block_order`), so that a stopped sweep leaves whole blocks and no
    arm always runs first (on a warmer cache, a quieter machine); ``"configs"`` runs every seed of one
    config before the next.
    """
    if order not in ORDERS:
        raise ConfigError(f"unknown sweep order {order!r} (choose from {', '.join(ORDERS)})")
    configs = expand_configs(configs)
    if not seeds:
        raise ConfigError("the sweep needs at least one seed")
    if len(set(seeds)) != len(seeds):
        raise ConfigError(f"seeds must be distinct, got {list(seeds)}")
    stems = [c.stem for c in configs]
    if len(set(stems)) != len(stems):
        raise ConfigError(f"config file names must be distinct (they name the runs): {stems}")
    sweep_dir = Path(sweep_dir).resolve()
    launch_sets = [f"launch.{item}" for item in launch_overrides]
    runs = []
    for path in configs:
        strategy_cfg = load_config(path)
        for seed in seeds:
            extra = [*overrides, f"training.seed={seed}", *launch_sets]
            if base is not None:
                config_path = Path(base)
                extra = _shaping_overrides(strategy_cfg) + extra
            else:
                config_path = path
            # Validate now: a bad override fails the whole sweep before any run starts.
            config = apply_overrides(load_config(config_path), extra)
            name = f"{path.stem}-seed{seed}"
            runs.append(
                RunSpec(
                    name=name,
                    strategy=path.stem,
                    config_path=str(config_path.resolve()),
                    seed=seed,
                    overrides=tuple(extra),
                    workdir=str(sweep_dir / name),
                    launch=to_dict(config.launch),
                )
            )
    if order == "blocked":
        by_seed = {seed: [r for r in runs if r.seed == seed] for seed in seeds}
        runs = [by_seed[seed][i] for seed in seeds for i in block_order(seed, len(configs))]
    return runs


def block_order(seed: int, n: int) -> list[int]:
    """The order in which a seed block runs its ``n`` configs: a permutation drawn from the seed alone
    (the same on every machine and every re-launch)."""
    return [int(i) for i in np.random.default_rng([seed, _ORDER_STREAM]).permutation(n)]
