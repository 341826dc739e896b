"""The same model code on a 1-device and a 2-device mesh (2 host CPU devices, in a subprocess because
XLA_FLAGS must be set before jax is imported)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

from jaxdebate.errors import ConfigError

SCRIPT = textwrap.dedent(
    """
    import json
    import jax, jax.numpy as jnp, numpy as np
    from jaxdebate.model import load, logits, token_logprobs, make_mesh, shard_params, shard_batch

    assert jax.device_count() == 2, jax.devices()
    params, config = load("tiny:layers=2,hidden=64,heads=4,kv_heads=2,vocab=2048,seed=4")
    rng = np.random.RandomState(0)
    ids = rng.randint(0, 2048, (4, 12)).astype(np.int32)
    mask = np.ones((4, 12), bool); mask[1, :5] = False; mask[3, :2] = False
    grad = jax.jit(jax.grad(lambda p, i, m: token_logprobs(p, config, i, m).sum()))

    def run(n, fsdp):
        mesh = make_mesh(n)
        p = shard_params(params, mesh, fsdp=fsdp)
        i, m = shard_batch((ids, mask), mesh)
        out = logits(p, config, i, m)
        g = grad(p, i, m) if fsdp or n == 1 else None  # gradients: checked on the FSDP mesh
        specs = sorted({str(x.sharding.spec) for x in jax.tree.leaves(p)})
        return np.asarray(out), jax.tree.map(np.asarray, g), str(out.sharding.spec), specs, len(out.devices())

    base, gbase, _, _, ndev1 = run(1, False)
    result = {"devices1": ndev1}
    for fsdp in (False, True):
        out, g, spec, specs, ndev = run(2, fsdp)
        key = "fsdp" if fsdp else "replicated"
        result[key] = {
            "logit_diff": float(np.abs(out - base).max()),
            "grad_diff": None if g is None else max(
                float(np.abs(a - b).max()) for a, b in zip(jax.tree.leaves(g), jax.tree.leaves(gbase))),
            "out_spec": spec, "param_specs": specs, "devices": ndev,
        }
    print("RESULT" + json.dumps(result))
    """
)


def test_one_and_two_device_meshes_agree():
    env = dict(os.environ, XLA_FLAGS="--xla_force_host_platform_device_count=2", JAX_PLATFORMS="cpu")
    proc = subprocess.run([sys.executable, "-c", SCRIPT], env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(proc.stdout.split("RESULT", 1)[1])
    assert result["devices1"] == 1
    for key in ("replicated", "fsdp"):
        r = result[key]
        assert r["devices"] == 2
        assert "data" in r["out_spec"]  # the batch really is split over the two devices
        assert r["logit_diff"] < 1e-5, r
    assert result["fsdp"]["grad_diff"] < 1e-5, result
    assert result["replicated"]["param_specs"] == ["P()"]
    assert any("data" in s for s in result["fsdp"]["param_specs"])


def test_mesh_errors_are_clear():
    import numpy as np

    from jaxdebate.model import make_mesh, shard_batch

    with pytest.raises(ConfigError, match="num_devices=99"):
        make_mesh(99)
    mesh = make_mesh(1)
    out = shard_batch({"ids": np.zeros((3, 4), np.int32)}, mesh)
    assert out["ids"].shape == (3, 4)
