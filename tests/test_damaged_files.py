"""Damaged files, drawn (issue 49): for each reader of a user's file, a copy damaged in one of the ways files get
damaged (truncated, a part duplicated, two parts swapped, a number made NaN, a tensor's dtype relabelled) is either
read, or refused with a refused-input error (`cli.REFUSED`: ValueError, OSError, YAMLError) whose message names the
file or its directory. Never a KeyError, TypeError, IndexError or any other traceback, whatever the damage.
Hypothesis replays a fixed set of draws here (tests/conftest.py); `HYPOTHESIS_PROFILE=explore` draws new ones."""
import json, re, shutil, tempfile
from pathlib import Path
import pytest, torch, yaml
from hypothesis import HealthCheck, given, settings, strategies as st
from dflash_nb.cli import REFUSED
from dflash_nb.cache import CacheLayout, HiddenStateCache
from dflash_nb.config import load_train_config
from dflash_nb.conversations import ConversationFile, shipped_conversations
from dflash_nb.extract import extract_to_cache, read_prompt_file, read_responses
from dflash_nb.model import DFlashDraftModel
from dflash_nb.target import load_target_heads, tiny_target
from dflash_nb.testing import tiny_drafter
from dflash_nb.config import DFlashConfig
from dflash_nb.train import read_metrics

_tmp = tempfile.TemporaryDirectory()
ROOT = Path(_tmp.name)


def _fixtures() -> dict:
    "{kind: (directory, file to damage, read)} of one good file of each kind."
    t = tiny_target("qwen3", num_layers=4, hidden_size=16, vocab_size=64, seed=1)
    t.model.save_pretrained(ROOT / "target")
    cache = extract_to_cache(t, [{"input_ids": torch.arange(5 + i), "loss_mask": torch.ones(5 + i, dtype=torch.long)}
                                 for i in range(3)], ROOT / "cache", CacheLayout([1, 2], samples_per_shard=2))
    dc = DFlashConfig(hidden_size=16, num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=1, head_dim=8,
                      intermediate_size=32, vocab_size=64, block_size=4, num_target_layers=4, mask_token_id=63,
                      target_layer_ids=[1, 2])
    DFlashDraftModel(dc).save_pretrained(ROOT / "drafter")
    (ROOT / "run").mkdir()
    (ROOT / "run" / "metrics.jsonl").write_text("".join(json.dumps({"step": s, "loss": 1.0 / s, "lr": 1e-3}) + "\n"
                                                        for s in range(1, 5)))
    (ROOT / "prompts.jsonl").write_text("".join(json.dumps({"id": f"p{i}", "prompt": f"def f{i}(x):"}) + "\n"
                                                for i in range(4)))
    (ROOT / "responses.jsonl").write_text("".join(json.dumps({"id": f"p{i}", "input_ids": [1, 2, 3, 4 + i],
                                                              "loss_mask": [0, 0, 1, 1]}) + "\n" for i in range(3)))
    shutil.copy(shipped_conversations(), ROOT / "chats.jsonl")
    (ROOT / "train.yaml").write_text(yaml.safe_dump({"cache": str(cache), "lr": 1e-3, "steps": 4,
                                                     "drafter": tiny_drafter()}))
    def read_all(c): return [c[i] for i in range(len(c))]
    return {
        "drafter config": (ROOT / "drafter", "config.json", lambda d: DFlashDraftModel.from_pretrained(d)),
        "drafter weights": (ROOT / "drafter", "model.safetensors", lambda d: DFlashDraftModel.from_pretrained(d)),
        "cache shard": (cache, "shard-00000.safetensors", lambda d: read_all(HiddenStateCache(d, verify=True))),
        "cache manifest": (cache, "manifest.json", lambda d: read_all(HiddenStateCache(d))),
        "target config": (ROOT / "target", "config.json", lambda d: load_target_heads(d)),
        "target weights": (ROOT / "target", "model.safetensors", lambda d: load_target_heads(d)),
        "metrics": (ROOT / "run", "metrics.jsonl", lambda d: read_metrics(d)),
        "prompts": (ROOT, "prompts.jsonl", lambda d: read_prompt_file(d / "prompts.jsonl")),
        "responses": (ROOT, "responses.jsonl", lambda d: read_responses(d / "responses.jsonl")),
        "conversations": (ROOT, "chats.jsonl", lambda d: list(ConversationFile(d / "chats.jsonl"))),
        "train config": (ROOT, "train.yaml", lambda d: load_train_config(d / "train.yaml")),
    }


FIXTURES = _fixtures()
NUMBER = re.compile(rb"(?<![\w.\"])-?\d+\.?\d*(?:[eE][-+]?\d+)?(?![\w\"])")


def damage(data: bytes, kind: str, a: float, b: float, c: float) -> bytes:
    "`data` damaged in way `kind`, at places drawn as fractions `a`, `b`, `c` of its length."
    n = len(data)
    i, j = sorted((int(a * n), int(b * n)))
    if kind == "truncated": return data[:i]
    if kind == "duplicated": return data[:j] + data[i:j] + data[j:]
    if kind == "swapped":
        k = i + (j - i) // 2
        return data[:i] + data[k:j] + data[i:k] + data[j:]
    if kind == "nan":
        numbers = list(NUMBER.finditer(data[:min(n, 1 << 16)]))    # a safetensors header, or a whole text file
        if not numbers: return data
        m = numbers[int(c * len(numbers)) % len(numbers)]
        return data[:m.start()] + b"NaN" + data[m.end():]
    if kind == "dtype":
        for old, new in ((b'"F32"', b'"BF16"'), (b'"F32"', b'"I64"'), (b'"I64"', b'"F32"')):
            if old in data: return data.replace(old, new, 1 + int(c * 3))
        return data
    raise AssertionError(kind)


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(kind=st.sampled_from(["truncated", "duplicated", "swapped", "nan", "dtype"]),
       a=st.floats(0, 1), b=st.floats(0, 1), c=st.floats(0, 1))
@pytest.mark.parametrize("reader", sorted(FIXTURES))
def test_a_damaged_file_is_read_or_refused_in_one_line(reader, kind, a, b, c):
    directory, name, read = FIXTURES[reader]
    with tempfile.TemporaryDirectory() as d:
        copy = Path(shutil.copytree(directory, Path(d) / directory.name))
        f = copy / name
        f.write_bytes(damage(f.read_bytes(), kind, a, b, c))
        try: read(copy)
        except REFUSED as e:
            msg = str(e)
            assert msg and "\n" not in msg.strip(), msg
            assert name in msg or copy.name in msg or str(copy) in msg, (reader, kind, msg)
