"""Datasets (MATH-500, GSM8K, GSM8K-Platinum, a built-in arithmetic set) as one ``Item`` record,
with deterministic, resumable batching."""

from jaxdebate.data.builtin import arithmetic_items
from jaxdebate.data.config import DataConfig
from jaxdebate.data.items import Item, write_jsonl
from jaxdebate.data.readers import FORMATS, gsm8k_gold, read_jsonl
from jaxdebate.data.sources import DATA_ENV_VAR, DATASETS, load_items
from jaxdebate.data.stream import ItemStream, epoch_order, split_holdout

__all__ = [
    "DATASETS",
    "DATA_ENV_VAR",
    "FORMATS",
    "DataConfig",
    "Item",
    "ItemStream",
    "arithmetic_items",
    "epoch_order",
    "gsm8k_gold",
    "load_items",
    "read_jsonl",
    "split_holdout",
    "write_jsonl",
]
