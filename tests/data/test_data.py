"""Datasets: readers on files the tests write, name resolution, errors, streams, the data config."""

from __future__ import annotations

import ast
import dataclasses
import json
import re
import operator

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from jaxdebate.data import (
    DATA_ENV_VAR,
    DataConfig,
    Item,
    ItemStream,
    arithmetic_items,
    epoch_order,
    load_items,
    read_jsonl,
    split_holdout,
    write_jsonl,
)
from jaxdebate.data import sources
from jaxdebate.errors import ConfigError, DataError


def write_lines(path, records):
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in records), encoding="utf-8")
    return path


MATH_ROWS = [
    {"problem": "What is $1+1$?", "solution": "We add: $\\boxed{2}$.", "answer": "2",
     "subject": "Prealgebra", "level": 1, "unique_id": "test/prealgebra/1.json"},
    {"problem": "Simplify $\\frac{2}{4}$.", "solution": "$\\boxed{\\frac12}$", "answer": "\\frac{1}{2}",
     "subject": "Algebra", "level": 2, "unique_id": "test/algebra/7.json"},
]
GSM_ROWS = [
    {"question": "Tom has 3 apples and buys 4. How many?", "answer": "3+4=<<3+4=7>>7\n#### 7"},
    {"question": "A car costs $1,250 more than 1,000. Price?", "answer": "1000+1250=2250\n#### 2,250"},
]


# -- readers ---------------------------------------------------------------------------------------

def test_math500_reader_maps_fields_to_item_and_meta(tmp_path):
    items = read_jsonl(write_lines(tmp_path / "m.jsonl", MATH_ROWS))
    assert [it.id for it in items] == ["test/prealgebra/1.json", "test/algebra/7.json"]
    assert items[1].problem == "Simplify $\\frac{2}{4}$." and items[1].answer == "\\frac{1}{2}"
    assert items[1].env == "math"
    assert items[1].meta == {"subject": "Algebra", "level": 2, "unique_id": "test/algebra/7.json",
                             "solution": "$\\boxed{\\frac12}$"}


def test_gsm8k_reader_takes_the_number_after_hashes_without_commas(tmp_path):
    items = read_jsonl(write_lines(tmp_path / "gsm8k_test.jsonl", GSM_ROWS))
    assert [it.answer for it in items] == ["7", "2250"]
    assert [it.id for it in items] == ["gsm8k_test/0", "gsm8k_test/1"]
    assert items[0].meta == {"index": 0, "solution": "3+4=<<3+4=7>>7"}
    assert items[1].problem == GSM_ROWS[1]["question"]


def test_platinum_reader_keeps_indices(tmp_path):
    rows = [dict(GSM_ROWS[0], platinum_index=0, gsm8k_test_index=0, answer_revised_vs_gsm8k=False),
            dict(GSM_ROWS[1], platinum_index=1, gsm8k_test_index=5, answer_revised_vs_gsm8k=True)]
    items = read_jsonl(write_lines(tmp_path / "plat.jsonl", rows), prefix="gsm8k_platinum")
    assert [it.id for it in items] == ["gsm8k_platinum/0", "gsm8k_platinum/1"]
    assert items[1].answer == "2250"
    assert items[1].meta["gsm8k_test_index"] == 5 and items[1].meta["answer_revised_vs_gsm8k"] is True


def test_items_format_round_trips(tmp_path):
    original = [Item("a/1", "P1", "3", "math_debate", {"k": [1, 2]}), Item("a/2", "P2", "\\pi", "math")]
    back = read_jsonl(write_jsonl(original, tmp_path / "own.jsonl"))
    assert back == original
    assert dataclasses.asdict(back[0])["meta"] == {"k": [1, 2]}


def test_explicit_format_overrides_detection(tmp_path):
    path = write_lines(tmp_path / "x.jsonl", [{"problem": "p", "answer": "1", "solution": "s"}])
    assert read_jsonl(path)[0].meta == {"solution": "s"}  # detected as MATH-500
    assert read_jsonl(path, fmt="items")[0].meta == {}
    with pytest.raises(DataError, match=r"x\.jsonl:1: missing field 'question'"):
        read_jsonl(path, fmt="gsm8k")
    with pytest.raises(DataError, match="unknown dataset format 'csv'"):
        read_jsonl(path, fmt="csv")


@pytest.mark.parametrize(
    "lines, message",
    [
        ([MATH_ROWS[0], "{not json", MATH_ROWS[1]], r"bad\.jsonl:2: malformed JSON line"),
        ([MATH_ROWS[0], "", "[1, 2]"], r"bad\.jsonl:3: expected a JSON object, got list"),
        ([GSM_ROWS[0], {"question": "q", "answer": "no final line"}], r"bad\.jsonl:2: GSM8K answer has no '####'"),
        ([MATH_ROWS[0], {"problem": "p", "solution": "s", "answer": "  "}], r"bad\.jsonl:2: field 'answer' is empty"),
        ([{"foo": 1}], r"bad\.jsonl:1: cannot tell the dataset format from fields \['foo'\]"),
        ([MATH_ROWS[0], {"question": "q", "answer": "#### 3"}], r"bad\.jsonl:2: missing field 'problem'"),
        ([MATH_ROWS[0], MATH_ROWS[1], MATH_ROWS[0]],
         r"bad\.jsonl:3: duplicate id '.+' \(first at .*bad\.jsonl:1\)"),
    ],
)
def test_malformed_lines_name_file_and_line(tmp_path, lines, message):
    with pytest.raises(DataError, match=message):
        read_jsonl(write_lines(tmp_path / "bad.jsonl", lines))


def test_empty_missing_and_unreadable_sources(tmp_path):
    (tmp_path / "empty.jsonl").write_text("\n\n")
    with pytest.raises(DataError, match="holds no records"):
        read_jsonl(tmp_path / "empty.jsonl")
    with pytest.raises(DataError, match="dataset file not found"):
        load_items(str(tmp_path / "missing.jsonl"))
    with pytest.raises(DataError, match="is a directory"):
        read_jsonl(tmp_path)
    (tmp_path / "latin1.jsonl").write_bytes(json.dumps(MATH_ROWS[0]).encode() + b"\n\xff\xfe\n")
    with pytest.raises(DataError, match="not UTF-8"):
        read_jsonl(tmp_path / "latin1.jsonl")
    with pytest.raises(DataError, match="unknown dataset 'mathh500': use one of math500, gsm8k_train"):
        load_items("mathh500")


def test_a_non_utf8_byte_is_reported_on_its_own_line(tmp_path):
    """Issue 14 item 6: the decoder reads ahead, so the error used to name line 1 for line 3's byte."""
    good, other = json.dumps(MATH_ROWS[0]).encode(), json.dumps(MATH_ROWS[1]).encode()
    path = tmp_path / "latin1.jsonl"
    path.write_bytes(good + b"\n" + other + b"\n" + b'{"problem": "caf\xe9", "answer": "1"}\n' + good + b"\n")
    with pytest.raises(DataError, match=r"latin1\.jsonl:3: not UTF-8 text \(byte 0xe9 at column 17\)$"):
        read_jsonl(path)
    path.write_bytes(good + b"\r\n\r\n" + other + b"\r\n\xff\n")  # CRLF and a blank line counted alike
    with pytest.raises(DataError, match=r"latin1\.jsonl:4: not UTF-8 text \(byte 0xff at column 1\)$"):
        read_jsonl(path)
    path.write_bytes("{\"problem\": \"café ½\", \"answer\": \"1\"}\n".encode())
    assert read_jsonl(path)[0].problem == "café ½"  # real UTF-8 still reads


def test_json_nested_too_deeply_is_a_data_error_with_file_and_line(tmp_path):
    """Issue 14 item 5: a line nested 100k brackets deep raised a raw RecursionError."""
    path = tmp_path / "deep.jsonl"
    for deep in ("[" * 100_000 + "]" * 100_000, '{"a": ' * 100_000 + "1" + "}" * 100_000):
        path.write_text(json.dumps(MATH_ROWS[0]) + "\n" + deep + "\n", encoding="utf-8")
        with pytest.raises(DataError, match=r"deep\.jsonl:2: JSON nested too deeply to read$"):
            read_jsonl(path)


def test_item_validation():
    with pytest.raises(DataError, match="empty answer"):
        Item("x", "problem", " ")
    with pytest.raises(DataError, match="Item.problem must be a string"):
        Item("x", None, "1")  # type: ignore[arg-type]
    item = Item("x", "p", "1", meta={"a": 1})
    assert item.with_env("math_debate").env == "math_debate" and item.env == "math"
    assert hash(item) == hash(Item("x", "p", "1", meta={"b": 2}))


# -- names, resolution order, options -----------------------------------------------------------

def test_named_dataset_prefers_the_env_var_directory(tmp_path, monkeypatch):
    write_lines(tmp_path / "math500.jsonl", MATH_ROWS)
    monkeypatch.setenv(DATA_ENV_VAR, str(tmp_path))
    items = load_items("math500")
    assert [it.id for it in items] == ["test/prealgebra/1.json", "test/algebra/7.json"]


def test_missing_named_dataset_says_how_to_point_at_a_file(tmp_path, monkeypatch):
    monkeypatch.setenv(DATA_ENV_VAR, str(tmp_path))
    monkeypatch.setattr(sources, "repo_shared_data_dir", lambda: tmp_path / "absent")
    with pytest.raises(DataError) as info:
        load_items("gsm8k_platinum")
    message = str(info.value)
    assert "gsm8k_platinum_test.jsonl" in message and DATA_ENV_VAR in message
    assert str(tmp_path / "gsm8k_platinum_test.jsonl") in message
    assert "HF hub" in message  # datasets missing here: says how to install it; offline: says the hub failed


def test_env_override_and_limit(tmp_path):
    items = load_items("arithmetic:n=10", env="math_debate", limit=4)
    assert len(items) == 4 and {it.env for it in items} == {"math_debate"}
    with pytest.raises(DataError, match="limit must be a positive integer"):
        load_items("arithmetic", limit=0)
    with pytest.raises(DataError, match="option 'k=3'"):
        load_items("arithmetic:k=3")


def _evaluate(expression: str) -> int:
    ops = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul}

    def walk(node):
        if isinstance(node, ast.BinOp):
            return ops[type(node.op)](walk(node.left), walk(node.right))
        assert isinstance(node, ast.Constant) and isinstance(node.value, int)
        return node.value

    return walk(ast.parse(expression.replace("\\times", "*"), mode="eval").body)


def test_arithmetic_builtin_is_deterministic_and_correct():
    items = load_items("arithmetic")
    assert len(items) == 64 and items == arithmetic_items(64, 0)
    assert arithmetic_items(8, seed=1) != arithmetic_items(8, seed=0)
    assert len({it.id for it in items}) == 64
    for it in items:
        assert int(it.answer) == _evaluate(it.meta["expression"])
        assert it.problem == f"Compute ${it.meta['expression']}$."


@pytest.mark.parametrize("level", [1, 2, 3, 4, 5])
def test_arithmetic_levels_are_distinct_correct_and_graded(level):
    n = 64 if level == 1 else 200
    items = load_items(f"arithmetic:level={level},n={n},seed=3")
    assert items == load_items(f"arithmetic:level={level},n={n},seed=3")  # deterministic
    assert len(items) == n and len({it.problem for it in items}) == n  # distinct problems
    for it in items:
        assert it.meta["level"] == level and it.id.startswith(f"arithmetic/L{level}/3/")
        assert int(it.answer) == _evaluate(it.meta["expression"])
        assert it.problem == f"Compute ${it.meta['expression']}$."
        operands = [int(x) for x in re.findall(r"\d+", it.meta["expression"])]
        assert all(2 <= x <= 99 for x in operands)
    if level == 1:
        assert all(len(re.findall(r"\d+", it.meta["expression"])) == 2 and "+" in it.meta["expression"]
                   for it in items)


def test_arithmetic_level_mixes_take_equal_shares_and_refuse_skew():
    items = load_items("arithmetic:level=1..3,n=150")
    counts = {level: sum(it.meta["level"] == level for it in items) for level in (1, 2, 3)}
    assert counts == {1: 50, 2: 50, 3: 50}
    assert [it.meta["level"] for it in items[:12]] != sorted(it.meta["level"] for it in items[:12])  # shuffled
    assert {it.meta["level"] for it in load_items("arithmetic:level=2+4,n=10")} == {2, 4}
    with pytest.raises(DataError, match="level 1 has 64 distinct problems, fewer than the 67"):
        load_items("arithmetic:level=1..3,n=200")
    for spec, message in [("arithmetic:level=0..2", "levels must lie in 1..5"),
                          ("arithmetic:level=a", "must be K, A..B"),
                          ("arithmetic:lvl=2", "expected n=INT, seed=INT, level=K|A..B or slice")]:
        with pytest.raises(DataError, match=message):
            load_items(spec)


def test_arithmetic_slices_of_one_spec_are_disjoint():
    spec = "arithmetic:level=2..3,n=400,seed=21"
    whole = load_items(spec)
    train, held_out = load_items(spec + ",slice=0:100"), load_items(spec + ",slice=100:400")
    assert train == whole[:100] and held_out == whole[100:]
    assert not {it.problem for it in train} & {it.problem for it in held_out}
    for bad, message in [(",slice=5", "must be A:B"), (",slice=10:5", "0 <= A < B <= n=400"),
                         (",slice=0:401", "0 <= A < B <= n=400")]:
        with pytest.raises(DataError, match=message):
            load_items(spec + bad)


def test_arithmetic_templates_select_distinct_problems_in_equal_shares():
    """``templates=`` keeps only the named templates: equal shares, distinct and correct problems,
    deterministic in (n, seed, templates), disjoint slices; level items carry their template too."""
    from jaxdebate.data.builtin import TEMPLATES

    spec = "arithmetic:templates=2+1/2-1/1x1/2x1,n=202,seed=5"
    items = load_items(spec)
    assert items == load_items(spec) and items != load_items(spec.replace("seed=5", "seed=6"))
    assert len({it.problem for it in items}) == 202
    counts = {t: sum(it.meta["template"] == t for it in items) for t in ("2+1", "2-1", "1x1", "2x1")}
    assert counts == {"2+1": 51, "2-1": 51, "1x1": 50, "2x1": 50}
    for it in items:
        assert int(it.answer) == _evaluate(it.meta["expression"])
        assert it.id.startswith(f"arithmetic/T{it.meta['template']}/5/")
        assert it.meta["level"] == TEMPLATES[it.meta["template"]][0]
        digits = [len(x) for x in re.findall(r"\d+", it.meta["expression"])]
        assert digits == [int(c) for c in it.meta["template"] if c.isdigit()]
    train, held_out = load_items(spec + ",slice=0:100"), load_items(spec + ",slice=100:202")
    assert not {it.problem for it in train} & {it.problem for it in held_out}
    assert all(it.meta["template"] in ("2+2", "2-2", "1x1") for it in load_items("arithmetic:level=3,n=60"))
    for bad, message in [("arithmetic:templates=2+1/3x3", r"unknown: 3x3"),
                         ("arithmetic:templates=2+1/2+1", "must be distinct names"),
                         ("arithmetic:templates=1+1,n=65", "template 1\\+1 has 64 distinct problems"),
                         ("arithmetic:templates=1+1,level=2", "not both")]:
        with pytest.raises(DataError, match=message):
            load_items(bad)


# -- stream ------------------------------------------------------------------------------------------

def test_stream_epochs_are_seeded_permutations():
    items = arithmetic_items(10)
    stream = ItemStream(items, batch_size=5, seed=3)
    epoch0 = stream.next_batch() + stream.next_batch()
    epoch1 = stream.next_batch() + stream.next_batch()
    assert sorted(it.id for it in epoch0) == sorted(it.id for it in items)
    assert sorted(it.id for it in epoch1) == sorted(it.id for it in items)
    assert epoch0 != epoch1  # reshuffled
    assert [it.id for it in epoch1] == [items[i].id for i in epoch_order(10, 3, 1)]
    assert stream.state() == {"epoch": 1, "position": 10, "seed": 3, "num_items": 10}
    assert [it.id for it in ItemStream(items, 5, seed=3).next_batch()] == [it.id for it in epoch0[:5]]


@settings(max_examples=40, deadline=None)
@given(n=st.integers(1, 12), batch=st.integers(1, 15), seed=st.integers(0, 2**31), steps=st.integers(0, 9))
def test_restored_stream_yields_the_same_batches(n, batch, seed, steps):
    items = arithmetic_items(n)
    original = ItemStream(items, batch, seed)
    for _ in range(steps):
        original.next_batch()
    state = json.loads(json.dumps(original.state()))  # survives a plain-JSON checkpoint
    restored = ItemStream(items, batch, seed)
    restored.restore(state)
    for _ in range(3):
        assert restored.next_batch() == original.next_batch()


def test_stream_errors():
    items = arithmetic_items(4)
    with pytest.raises(DataError, match="at least one item"):
        ItemStream([], 2, 0)
    with pytest.raises(DataError, match="batch_size must be a positive integer"):
        ItemStream(items, 0, 0)
    with pytest.raises(DataError, match="saved for 5 items but this stream has 4"):
        ItemStream(items, 2, 0).restore({"epoch": 0, "position": 1, "num_items": 5})
    with pytest.raises(DataError, match="integer 'epoch' and 'position'"):
        ItemStream(items, 2, 0).restore({"epoch": 0})
    with pytest.raises(DataError, match="out of range"):
        ItemStream(items, 2, 0).restore({"epoch": 0, "position": 9})


def test_split_holdout_is_seeded_and_disjoint():
    items = arithmetic_items(20)
    train, held = split_holdout(items, 5, seed=1)
    assert len(train) == 15 and len(held) == 5
    assert {it.id for it in train} | {it.id for it in held} == {it.id for it in items}
    assert not {it.id for it in train} & {it.id for it in held}
    assert split_holdout(items, 5, seed=1) == (train, held)
    assert split_holdout(items, 5, seed=2)[1] != held
    with pytest.raises(DataError, match="cannot hold out 20 of 20"):
        split_holdout(items, 20, seed=0)


# -- config --------------------------------------------------------------------------------------------

def test_data_config_defaults_and_load():
    cfg = DataConfig()
    assert cfg.train == "math500" and cfg.env_name_remap == {"math": "math_debate"}
    assert dataclasses.asdict(cfg)["env_name_remap"] == {"math": "math_debate"}
    train, val = DataConfig(train="arithmetic:n=30", validation_size=6).load()
    assert len(train) == 24 and len(val) == 6
    train, val = DataConfig(train="arithmetic:n=30", validation="arithmetic:n=50,seed=9", validation_size=7).load()
    assert len(train) == 30 and len(val) == 7 and val[0].id.startswith("arithmetic/9/")
    train, val = DataConfig(train="arithmetic:n=30", limit=10, validation_size=0).load()
    assert len(train) == 10 and val == []
    with pytest.raises(DataError, match="validation_size=40 leaves no training items"):
        DataConfig(train="arithmetic:n=30", validation_size=40).load()


def test_held_out_sets_that_share_problems_with_training_are_refused(tmp_path):
    spec = "arithmetic:level=2..3,n=400,seed=21"
    same = DataConfig(train=spec, validation=spec, validation_size=5)
    with pytest.raises(DataError, match=r"data\.validation shares 5 of its 5 problems with data\.train \(first: item"):
        same.load()
    # whitespace does not hide a copy; a disjoint slice of the same spec is fine
    (tmp_path / "copy.jsonl").write_text("\n".join(json.dumps(
        {"id": f"copy/{i}", "problem": "  " + it.problem.replace(" ", "  ") + "\n", "answer": it.answer})
        for i, it in enumerate(load_items(spec + ",slice=390:400"))) + "\n")
    copied = DataConfig(train=spec, validation=str(tmp_path / "copy.jsonl"), validation_size=10)
    with pytest.raises(DataError, match=r"shares 10 of its 10 problems.*item 'copy/0'"):
        copied.load()
    train, val = DataConfig(train=spec + ",slice=0:100", validation=spec + ",slice=100:400", validation_size=7).load()
    assert len(val) == 7
    disjoint = DataConfig(train=spec + ",slice=0:100", transfer=spec + ",slice=100:110")
    assert len(disjoint.load_transfer(train)) == 10
    with pytest.raises(DataError, match=r"data\.transfer shares 3 of its 3 problems"):
        DataConfig(train=spec, transfer=spec + ",slice=0:3").load_transfer(load_items(spec))


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"train": ""}, r"data\.train"),
        ({"validation_size": -1}, r"data\.validation_size"),
        ({"limit": 0}, r"data\.limit"),
        ({"format": "csv"}, r"data\.format"),
        ({"env_name_remap": ["math"]}, r"data\.env_name_remap"),
        ({"env_name_remap": {"math": ""}}, r"data\.env_name_remap"),
        ({"validation_env": " "}, r"data\.validation_env"),
    ],
)
def test_data_config_validation_names_the_field(kwargs, message):
    with pytest.raises(ConfigError, match=message):
        DataConfig(**kwargs)


@pytest.mark.parametrize(
    "kwargs", [{"env_name_remap": {"math": "chess"}}, {"validation_env": "chess"}],
)
def test_unregistered_environments_are_rejected_by_the_experiment_config(kwargs):
    """The data layer cannot see the environment registry (it lives above it, in debate/); the root
    config checks every environment the data section routes to before any compute."""
    from jaxdebate.config import Config

    with pytest.raises(ConfigError, match=r"data\.env_name_remap / data\.validation_env\(s\) / data\.transfer_env: environment\(s\) \[.chess.\]"):
        Config(data=DataConfig(**kwargs))
