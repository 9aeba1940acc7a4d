"""`dflash-extract --data` run as a user runs it, in a fresh interpreter: a conversation dataset in dataset mode exits 0
with a cache whose manifest records the mode; a bad row exits 2 with one line naming file and row, nothing written."""
import json, os, subprocess, sys
from pathlib import Path
import pytest
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast
import dflash_nb
from dflash_nb.cache import read_manifest
from dflash_nb.target import tiny_target

ROOT = Path(dflash_nb.__file__).parent.parent
CHAT = ("{% for m in messages %}{% if m['role'] == 'assistant' %}<bot> {{ m['content'] }} <eos> {% else %}<user> "
        "{{ m['content'] }} {% endif %}{% endfor %}{% if add_generation_prompt %}<bot> {% endif %}")


def run(args: list) -> subprocess.CompletedProcess:
    code = "import sys; from dflash_nb.extract import extract_main; sys.exit(extract_main(sys.argv[1:]))"
    env = os.environ | {"PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    return subprocess.run([sys.executable, "-c", code, *map(str, args)], capture_output=True, text=True, env=env,
                          timeout=900)


@pytest.fixture(scope="module")
def target_dir(tmp_path_factory):
    "A tiny target saved with a word-level tokenizer that has a chat template (assistant turns end with <eos>)."
    d = tmp_path_factory.mktemp("target") / "tq3"
    tiny_target("qwen3", seed=1).model.save_pretrained(d)
    t = Tokenizer(models.WordLevel({w: i for i, w in enumerate(["<unk>", "<eos>", "<user>", "<bot>", "hi", "there"])},
                                   unk_token="<unk>"))
    t.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    PreTrainedTokenizerFast(tokenizer_object=t, eos_token="<eos>", unk_token="<unk>", chat_template=CHAT).save_pretrained(d)
    return d


def conversations(path: Path, answers: list) -> Path:
    rows = [{"id": f"c{i}", "messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": a}]}
            for i, a in enumerate(answers)]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_data_in_dataset_mode_exits_0(target_dir, tmp_path):
    data = conversations(tmp_path / "convs.jsonl", ["hi there", "there"])
    r = run(["--target", target_dir, "--data", data, "--responses", "dataset", "--out", tmp_path / "out", "--taps", "1",
             "--device", "cpu"])
    assert r.returncode == 0, r.stderr
    assert f"data: {data} (messages, responses dataset): 2 rows -> 2 samples; 0 bad, 0 truncated, 0 dropped" in r.stdout
    m = read_manifest(tmp_path / "out" / "cache")
    assert (m["responses"], m["data"]["format"], m["data"]["train_turns"]) == ("dataset", "messages", "all")


def test_bad_row_exits_2_before_anything_is_written(target_dir, tmp_path):
    data = conversations(tmp_path / "convs.jsonl", ["hi", 7])
    r = run(["--target", target_dir, "--data", data, "--out", tmp_path / "out", "--device", "cpu"])
    assert r.returncode == 2
    assert r.stderr.strip().splitlines() == [f"dflash-extract: error: {data} row 2: 'messages'[1]['content'] is 7; "
                                             "expected a string (text-only conversations)."]
    assert not (tmp_path / "out").exists()
