"""The console entry points of dflash_nb.extract (`dflash-extract`, `dflash-import`) run as a user runs them: in a
fresh interpreter, the way the console script calls them (`sys.exit(main())`). Success exits 0 with no traceback or result
dump on stderr (library warnings may appear); a bad input exits 1 with one line naming the problem and no traceback.
"""
import json, os, re, subprocess, sys
from pathlib import Path
import pytest, torch
import dflash_nb
from dflash_nb.cache import HiddenStateCache
from dflash_nb.extract import extract_samples, generate_responses
from dflash_nb.target import tiny_target

ROOT = Path(dflash_nb.__file__).parent.parent


def run(main: str, args: list[str]) -> subprocess.CompletedProcess:
    "Run `<main>` (`dflash_nb.extract`'s, `import_main`: `dflash_nb.legacy`'s) as its console script does, in a fresh interpreter."
    module = "legacy" if main == "import_main" else "extract"
    code = f"import sys; from dflash_nb.{module} import {main}; sys.exit({main}(sys.argv[1:]))"
    env = os.environ | {"PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    return subprocess.run([sys.executable, "-c", code, *map(str, args)], capture_output=True, text=True, env=env, timeout=900)


def noise_free(stderr: str) -> list[str]:
    "stderr's lines that are not progress bars (tqdm redraws a bar with carriage returns)."
    parts = re.split(r"[\r\n]+", stderr)
    return [p for p in parts if p.strip() and not re.search(r"\d+%\||\d+it \[|it/s\]|s/it\]|prompt/s\]|shard/s\]", p)]


@pytest.fixture(scope="module")
def target_dir(tmp_path_factory):
    d = tmp_path_factory.mktemp("target")
    tiny_target("qwen3", seed=1).model.save_pretrained(d / "tq3")
    return d / "tq3"


def test_extract_exits_0_on_success(target_dir, tmp_path):
    pf = tmp_path / "prompts.jsonl"
    pf.write_text("\n".join(json.dumps({"id": f"p{i}", "prompt": list(range(3 + i, 8 + i))}) for i in range(3)))
    r = run("extract_main", ["--target", target_dir, "--prompts", pf, "--out", tmp_path / "out", "--taps", "1", "3",
                             "--max-new-tokens", "4", "--device", "cpu"])
    assert r.returncode == 0, r.stderr
    assert not any("Traceback" in l or str(tmp_path / "out") in l for l in noise_free(r.stderr)), r.stderr   # no result dump
    assert r.stdout.startswith(f"cache: {tmp_path / 'out' / 'cache'} (3 samples")
    assert len(HiddenStateCache(tmp_path / "out")) == 3


def test_extract_exits_2_on_bad_input(target_dir, tmp_path):
    r = run("extract_main", ["--target", target_dir, "--prompts", tmp_path / "none.jsonl", "--out", tmp_path / "out"])
    assert r.returncode == 2
    assert r.stderr.strip().splitlines() == [f"dflash-extract: error: No prompt file at {tmp_path / 'none.jsonl'}: "
                                             'give a JSON-lines file of {"id", "prompt"} rows.']


def test_import_exit_codes(target_dir, tmp_path):
    tq3 = tiny_target("qwen3", seed=1)
    H, src = tq3.hidden_size, tmp_path / "legacy"
    src.mkdir()
    for i, s in enumerate(generate_responses(tq3, [[5, 6, 7], [1, 2, 3, 4]], max_new_tokens=4)):
        rec = extract_samples(tq3, [s], [1, 2, 3, 5], dtype=torch.float32)[0]
        torch.save({"input_ids": rec["input_ids"][None], "aux_hidden": rec["taps"][None, :, :3 * H],
                    "last_hidden": rec["taps"][None, :, 3 * H:]}, src / f"data_{i}.pt")
    ok = run("import_main", ["--src", src, "--out", tmp_path / "c", "--aux-layers", 1, 2, 3, "--last-hidden", "tap",
                             "--last-layer", 5, "--target", target_dir, "--check", 1])
    assert ok.returncode == 0, ok.stderr
    assert not any("Traceback" in l or str(tmp_path / "c") in l for l in noise_free(ok.stderr)), ok.stderr
    assert ok.stdout.splitlines()[0] == f"cache: {tmp_path / 'c'} (2 samples, taps [1, 2, 3, 5], target {tq3.config_hash})"
    bad = run("import_main", ["--src", src, "--out", tmp_path / "d", "--aux-layers", 1, 2, 3, "--last-hidden", "tap"])
    assert bad.returncode == 2
    assert bad.stderr.strip().splitlines() == ["dflash-import: error: last_hidden='tap' needs last_layer_id: "
                                               "the decoder layer whose output last_hidden is."]
    usage = run("import_main", ["--src", src])
    assert usage.returncode == 2 and "the following arguments are required" in usage.stderr
