"""Fuzz the cache manifest: whatever a damaged or hand-edited manifest.json holds, opening the cache either works or
fails with the documented errors (ValueError, incl. CacheShardError, or FileNotFoundError) — never a KeyError/TypeError.
No test has a deadline or hypothesis's too_slow health check: a busy machine must not fail them."""
import json, shutil, tempfile
from pathlib import Path
import torch
from hypothesis import given, settings, strategies as st, HealthCheck
from dflash_nb.target import tiny_target
from dflash_nb.cache import HiddenStateCache, CacheLayout
from dflash_nb.extract import extract_to_cache

_tmp = tempfile.TemporaryDirectory()
BASE = extract_to_cache(tiny_target("qwen3", num_layers=4, hidden_size=16, vocab_size=64),
                        [{"input_ids": torch.arange(5 + i), "loss_mask": torch.ones(5 + i, dtype=torch.long)} for i in range(3)],
                        Path(_tmp.name) / "base", CacheLayout([1, 2], samples_per_shard=2))
GOOD = json.loads((BASE / "manifest.json").read_text())
junk = st.one_of(st.none(), st.booleans(), st.integers(-5, 10**6), st.floats(allow_nan=True), st.text(max_size=8),
                 st.lists(st.integers(-3, 50), max_size=4), st.dictionaries(st.text(max_size=4), st.integers(), max_size=2))
top_keys = st.sampled_from(sorted(GOOD))
shard_keys = st.sampled_from(sorted(GOOD["shards"][0]))


def open_with(manifest_text: str):
    d = Path(tempfile.mkdtemp())
    try:
        shutil.copytree(BASE, d / "c"); (d / "c" / "manifest.json").write_text(manifest_text)
        try: HiddenStateCache(d / "c")
        except (ValueError, FileNotFoundError) as e: assert str(e)
    finally: shutil.rmtree(d)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(edits=st.lists(st.tuples(st.booleans(), top_keys, shard_keys, st.booleans(), junk), min_size=1, max_size=3))
def test_damaged_manifest_fields_give_documented_errors(edits):
    m = json.loads(json.dumps(GOOD))
    for in_shard, k, sk, delete, value in edits:
        shards = m.get("shards")
        in_shard = in_shard and isinstance(shards, list) and shards and isinstance(shards[0], dict)   # an earlier edit may have replaced them
        target, key = (shards[0], sk) if in_shard else (m, k)
        if delete: target.pop(key, None)
        else: target[key] = value
    open_with(json.dumps(m))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cut=st.integers(0, len(json.dumps(GOOD)) - 1))
def test_truncated_manifest_gives_documented_error(cut):
    open_with(json.dumps(GOOD)[:cut])
