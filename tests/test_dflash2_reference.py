"""A DFlash 2 checkpoint written here from the public contract loads, drafts and evaluates as the contract says.

The checkpoint (`config.json` and `model.safetensors`) is written by hand with `safetensors.torch.save_file`, every
tensor named and shaped as the public DFlash 2 checkpoints are (the layout vLLM's and SGLang's DFlash 2 models read),
with random float32 values large enough that
the drafter is neither the identity (as DFlash 2's modules start) nor uniform, and with a non-default RoPE theta,
output multiplier and softcap. The reference below is written from DFlash 2's published formulas alone: explicit
RMSNorm, rotate-half RoPE, GQA attention of the block over [context ; block], the grouped dynamic conv as its
per-row formula, the target head's top-K with the softcapped unary score, and the selector's greedy walk. It shares
no code with `dflash_nb.model`, `dflash2`, `drafting` or `evaluate`; only the test fixtures and `select_taps` (which
columns of the cache are which tap) come from the library.

Checked: the checkpoint loads and round-trips; our final hidden states and logits match the reference's within a
float32 rounding bound; our drafted tokens (selector on and off) equal the reference's at every anchor, with decision
margins far above the float32 differences (so equality is not luck at near-ties); and `offline_tau`'s chain τ,
per-slot acceptance and counts, histogram and rounds equal a reference replay over the whole cache, exactly. A random
drafter accepts almost nothing of the target's responses, so the replay also runs on "planted" responses, rewritten
from the reference's drafts so that rounds accept 0, 1, ..., B-1 drafts in turn; the drafter reads context taps, never
context tokens, so this changes only the anchors and the truth. The selector, the softcap and the multiplier each
change drafts on this checkpoint, so the equalities test them. Fixtures: the shared tiny target and cache of
`dflash_nb.testing` (`tiny_pair`)."""
import json
import math
from dataclasses import asdict
import pytest
import torch
from safetensors import safe_open
from safetensors.torch import save_file
from dflash_nb.cache import select_taps
from dflash_nb.evaluate import offline_tau
from dflash_nb.model import DFlashDraftModel
from dflash_nb.testing import assert_close, one_thread

H, V, MASK, TARGET_LAYERS, TAPS = 32, 96, 95, 8, [1, 3, 5]
LAYERS, HEADS, KV_HEADS, HEAD_DIM, INTER = 2, 4, 2, 8, 64
BLOCK, CONV_TAPS, GROUP, RANK, TOP_K = 5, 2, 8, 4, 5
THETA, EPS = 1000.0, 1e-6        # theta: not transformers' default 10000, so the config's value must be used
MULTIPLIER, SOFTCAP = 4.0, 1.5   # the unary score's tanh runs in its curved part (raw logits here are ~0.3), so
                                 # both change drafts; with 0.5 and 3.0 the softcap would be linear to rounding


def hub_config() -> dict:
    "The checkpoint's config.json, laid out as the published DFlash 2 configs are."
    return {"architectures": ["DFlash2DraftModel"], "model_type": "qwen3", "dtype": "float32", "attention_bias": False,
            "is_causal": False, "hidden_act": "silu", "hidden_size": H, "intermediate_size": INTER,
            "num_hidden_layers": LAYERS, "num_attention_heads": HEADS, "num_key_value_heads": KV_HEADS,
            "head_dim": HEAD_DIM, "rms_norm_eps": EPS, "vocab_size": V, "max_position_embeddings": 4096,
            "num_target_layers": TARGET_LAYERS, "layer_types": ["full_attention"] * LAYERS,
            "rope_parameters": {"rope_theta": THETA, "rope_type": "default"}, "tie_word_embeddings": False,
            "dflash_config": {"block_size": BLOCK, "mask_token_id": MASK, "target_layer_ids": TAPS,
                              "conv_kernel_size": CONV_TAPS, "conv_group_size": GROUP, "selector_rank": RANK,
                              "selector_top_k": TOP_K, "output_multiplier": MULTIPLIER,
                              "final_logit_softcapping": SOFTCAP}}


def hub_tensors(seed: int = 0) -> dict:
    "Every tensor of a DFlash 2 checkpoint (no `model.` prefix, codebooks without `.weight`), random float32."
    g = torch.Generator().manual_seed(seed)
    rand = lambda *shape, std: torch.randn(*shape, generator=g) * std
    near_one = lambda n: 1 + rand(n, std=0.1)
    def conv():                          # [side, tap, channel]: tap 0 near 1; the projection's rows side-major
        base = rand(2, CONV_TAPS, H, std=0.5)
        base[:, 0] += 1
        return {"base_kernel": base, "kernel_projection.weight": rand(2 * CONV_TAPS * H // GROUP, H, std=0.1)}
    t = {"fc.weight": rand(H, len(TAPS) * H, std=0.2), "hidden_norm.weight": near_one(H), "norm.weight": near_one(H)}
    for n in range(LAYERS):
        p = f"layers.{n}."
        t |= {p + "input_layernorm.weight": near_one(H), p + "post_attention_layernorm.weight": near_one(H)}
        for name, rows, cols in (("q_proj", HEADS * HEAD_DIM, H), ("k_proj", KV_HEADS * HEAD_DIM, H),
                                 ("v_proj", KV_HEADS * HEAD_DIM, H), ("o_proj", H, HEADS * HEAD_DIM)):
            t[f"{p}self_attn.{name}.weight"] = rand(rows, cols, std=0.2)
        t |= {p + "self_attn.q_norm.weight": near_one(HEAD_DIM), p + "self_attn.k_norm.weight": near_one(HEAD_DIM)}
        t |= {p + "mlp.gate_proj.weight": rand(INTER, H, std=0.2), p + "mlp.up_proj.weight": rand(INTER, H, std=0.2),
              p + "mlp.down_proj.weight": rand(H, INTER, std=0.2)}
        t |= {f"{p}{m}.{k}": v for m in ("attention_conv", "mlp_conv") for k, v in conv().items()}
    # hidden projection std 0.01: transition scores (~±0.3) and unary scores (top-K spread ~0.3) both matter
    return t | {"candidate_selector.hidden_projection.weight": rand(RANK, H, std=0.01),
                "candidate_selector.predecessor_codebook": rand(V, RANK, std=1.0),
                "candidate_selector.successor_codebook": rand(V, RANK, std=1.0)}


def write_checkpoint(path) -> dict:
    "Write the hand-made checkpoint into directory `path`; its tensors."
    path.mkdir(parents=True, exist_ok=True)
    tensors = hub_tensors()
    (path / "config.json").write_text(json.dumps(hub_config(), indent=2))
    save_file(tensors, str(path / "model.safetensors"), metadata={"format": "pt"})
    return tensors


def read_tensors(path) -> dict:
    "The tensors of `path`/model.safetensors, read with safetensors itself."
    with safe_open(str(path / "model.safetensors"), framework="pt") as f: return {k: f.get_tensor(k) for k in f.keys()}


# The reference: DFlash 2's forward from its formulas, one block at a time, in float32.

def rms_norm(x, w):
    "x · rsqrt(mean(x²) + eps) · w over the last dim."
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + EPS) * w


def rope(x, pos):
    "Rotate-half (neox) RoPE of `x` [heads, n, d] at integer positions `pos` [n], inv_freq = θ^(-2i/d)."
    d = x.shape[-1]
    angle = pos[:, None].double() * THETA ** (-torch.arange(0, d, 2).double() / d)
    cos, sin = torch.cat([angle, angle], -1).cos().float(), torch.cat([angle, angle], -1).sin().float()
    return x * cos + torch.cat([-x[..., d // 2:], x[..., :d // 2]], -1) * sin


def heads(x, n):
    "Rows [tokens, n·d] as [n, tokens, d]."
    return x.view(x.shape[0], n, HEAD_DIM).transpose(0, 1)


def conv_side(y, base, delta):
    "out[i, c] = Σ_t 𝟙[i ≥ t] (base[t, c] + delta[i, t, c // S]) · y[i - t, c], rows i of one block."
    out = torch.zeros_like(y)
    for i in range(y.shape[0]):
        for t in range(CONV_TAPS):
            if i - t >= 0: out[i] += (base[t] + delta[i, t].repeat_interleave(GROUP)) * y[i - t]
    return out


class Reference:
    "The contract's drafter over checkpoint tensors `w`, the target's embeddings `emb` and head `head` [V, H]."
    def __init__(self, w: dict, emb: torch.Tensor, head: torch.Tensor, multiplier=MULTIPLIER, softcap=SOFTCAP):
        self.w, self.emb, self.head, self.multiplier, self.softcap = w, emb, head, multiplier, softcap

    def context(self, taps):
        "c_j = RMSNorm_hidden(fc(F_j)) for fc taps [p, 3H]."
        return rms_norm(taps @ self.w["fc.weight"].T, self.w["hidden_norm.weight"])

    def keys(self, l, x, pos, n):
        "RoPE(k_norm(x W_k)) and x W_v of layer `l`, [kv_heads, n, d]; or with n=HEADS the queries RoPE(q_norm(x W_q))."
        w, p = self.w, f"layers.{l}.self_attn."
        if n == HEADS: return rope(rms_norm(heads(x @ w[p + "q_proj.weight"].T, n), w[p + "q_norm.weight"]), pos)
        k = rope(rms_norm(heads(x @ w[p + "k_proj.weight"].T, n), w[p + "k_norm.weight"]), pos)
        return k, heads(x @ w[p + "v_proj.weight"].T, n)

    def attention(self, l, a, ctx, pos):
        "o_proj of the block's queries over [context K/V ; block K/V], no mask (is_causal false), GQA."
        (kc, vc), (kb, vb) = self.keys(l, ctx, torch.arange(len(ctx)), KV_HEADS), self.keys(l, a, pos, KV_HEADS)
        q, k, v = self.keys(l, a, pos, HEADS), torch.cat([kc, kb], 1), torch.cat([vc, vb], 1)
        k, v = (t.repeat_interleave(HEADS // KV_HEADS, 0) for t in (k, v))     # query head h reads kv head h // 2
        out = ((q @ k.transpose(1, 2)) / math.sqrt(HEAD_DIM)).softmax(-1) @ v
        return out.transpose(0, 1).reshape(len(a), -1) @ self.w[f"layers.{l}.self_attn.o_proj.weight"].T

    def wrapped(self, module, f, a):
        "Sublayer `f` between the two sides of conv `module`; both sides' kernels come from the normed input `a`."
        base = self.w[module + ".base_kernel"]
        d = (a @ self.w[module + ".kernel_projection.weight"].T).view(len(a), 2, CONV_TAPS, H // GROUP)
        return conv_side(f(conv_side(a, base[0], d[:, 0])), base[1], d[:, 1])

    def mlp(self, l, x):
        "down(silu(gate x) ⊙ up x)."
        p = f"layers.{l}.mlp."
        gate, up = x @ self.w[p + "gate_proj.weight"].T, x @ self.w[p + "up_proj.weight"].T
        return (torch.nn.functional.silu(gate) * up) @ self.w[p + "down_proj.weight"].T

    def hidden(self, taps, anchor_token: int, p: int):
        "Final-normed states z [B, H] of the block anchored at position `p` with fc taps [T, 3H] (context j < p)."
        ctx, pos, w = self.context(taps[:p]), torch.arange(p, p + BLOCK), self.w
        h = self.emb[torch.tensor([anchor_token] + [MASK] * (BLOCK - 1))] * 1.0     # input_embedding_scale 1
        for l in range(LAYERS):
            a = rms_norm(h, w[f"layers.{l}.input_layernorm.weight"])
            h = h + self.wrapped(f"layers.{l}.attention_conv", lambda x: self.attention(l, x, ctx, pos), a)
            m = rms_norm(h, w[f"layers.{l}.post_attention_layernorm.weight"])
            h = h + self.wrapped(f"layers.{l}.mlp_conv", lambda x: self.mlp(l, x), m)
        return rms_norm(h, w["norm.weight"])

    def scores(self, z, anchor_token: int, selector: bool = True):
        "Greedy walk over slot states z [B-1, H]: (drafts, each slot's scores: selector row [K], else logits [V])."
        logits = z @ self.head.T
        if not selector: return logits.argmax(-1).tolist(), list(logits)
        raw, ids = logits.topk(TOP_K, -1)
        unary = self.softcap * torch.tanh(raw * self.multiplier / self.softcap)     # float32 throughout
        gate = z @ self.w["candidate_selector.hidden_projection.weight"].T                  # [B-1, r]
        A, Q = self.w["candidate_selector.predecessor_codebook"], self.w["candidate_selector.successor_codebook"]
        prev, out, rows = anchor_token, [], []
        for k in range(len(z)):            # S_k(a, b) = u_k[b] + Σ_r A[a, r] p_k[r] Q[b, r], a the chosen predecessor
            score = unary[k] + (A[prev] * gate[k] * Q[ids[k]]).sum(-1)
            prev = int(ids[k, score.argmax()])
            out.append(prev)
            rows.append(score)
        return out, rows

    def drafts(self, z, anchor_token: int, selector: bool = True) -> list[int]:
        "Greedy drafts of slot states z [B-1, H]: the selector's walk from the anchor, else each slot's argmax."
        return self.scores(z, anchor_token, selector)[0]


class Sample:
    "One sequence: its tokens, response start, fc taps [1, 3, 5]; the reference's blocks, memoised by (anchor, token)."
    def __init__(self, ref: Reference, ids: torch.Tensor, taps: torch.Tensor, start: int, memo: dict | None = None):
        self.ref, self.ids, self.taps, self.start, self._z = ref, ids, taps, start, {} if memo is None else memo

    @classmethod
    def from_cache(cls, ref: Reference, r: dict, tap_ids: list):
        "Cache row `r` (taps `tap_ids`): it starts at the first response token, as `offline_tau` does."
        return cls(ref, r["input_ids"], select_taps(r["taps"], tap_ids, TAPS, H), int(torch.nonzero(r["loss_mask"])[0]))

    def with_ids(self, ids: torch.Tensor):
        "The same taps and start under other tokens (the drafter reads context taps, never context tokens)."
        return Sample(self.ref, ids, self.taps, self.start, self._z)

    def hidden(self, p: int):
        "The reference's final-normed block [B, H] at anchor `p`."
        key = (p, int(self.ids[p]))
        if key not in self._z: self._z[key] = self.ref.hidden(self.taps, key[1], p)
        return self._z[key]

    def drafts_at(self, p: int, selector: bool) -> list[int]:
        "The reference's drafts of the block at anchor `p`."
        return self.ref.drafts(self.hidden(p)[1:], int(self.ids[p]), selector)

    def anchors(self) -> range: return range(self.start, len(self.ids))


def replay_rounds(s: Sample, selector: bool) -> list[tuple[int, int]]:
    "Rounds (accepted, checkable) of `s` from its start: draft at p, accept the leading drafts equal to ids[p+1:p+B]."
    rounds, p, T = [], s.start, len(s.ids)
    while p < T - 1:
        truth, drafts = s.ids[p + 1:p + BLOCK].tolist(), s.drafts_at(p, selector)
        n = next((k for k, (d, t) in enumerate(zip(drafts, truth)) if d != t), len(truth))
        rounds.append((n, len(truth)))
        p += n + 1
    return rounds


def planted(s: Sample, selector: bool) -> Sample:
    "`s` with its response rewritten so that round r of the reference replay accepts r mod B drafts (less at the end)."
    ids, p, r = s.ids.clone(), s.start, 0
    t = s.with_ids(ids)
    while p < len(ids) - 1:
        d, n = t.drafts_at(p, selector), min(r % BLOCK, len(ids) - 1 - p)
        ids[p + 1:p + 1 + n] = torch.tensor(d[:n], dtype=ids.dtype)
        if n < BLOCK - 1 and p + 1 + n < len(ids): ids[p + 1 + n] = (d[n] + 1) % V    # the first wrong draft
        p, r = p + n + 1, r + 1
    return t


def summary(per_prompt: list) -> dict:
    "τ, per-slot cumulative and conditional acceptance, τ histogram and rounds of chain rounds [prompt][round]."
    flat = [r for rs in per_prompt for r in rs]
    count = lambda f: [sum(1 for n, c in flat if f(n, c, k)) for k in range(1, BLOCK)]
    checkable, accepted = count(lambda n, c, k: c >= k), count(lambda n, c, k: n >= k)
    reached = count(lambda n, c, k: n >= k - 1 and c >= k)     # slots 1..k-1 right and slot k checkable
    return {"tau": sum(n + 1 for n, _ in flat) / len(flat),
            "tau_per_prompt": [sum(n + 1 for n, _ in rs) / len(rs) for rs in per_prompt],
            "acc_cum": [a / max(1, c) for a, c in zip(accepted, checkable)],
            "acc_cond": [a / max(1, r) for a, r in zip(accepted, reached)],
            "histogram": [sum(1 for n, _ in flat if n + 1 == t) for t in range(1, BLOCK + 1)],
            "rounds": [[n + 1 for n, _ in rs] for rs in per_prompt],
            "counts": {"checkable": checkable, "accepted": accepted, "reached": reached}}


class Retokened:
    "A view of cache `data` whose samples carry the tokens `ids` [sample] (taps and everything else as stored)."
    def __init__(self, data, ids: list): self.data, self.ids = data, ids
    def __getattr__(self, k): return getattr(self.data, k)
    def __len__(self): return len(self.data)
    def __getitem__(self, i): return dict(self.data[i], input_ids=self.ids[i])


def decision_slack(s: Sample, p: int, h: torch.Tensor, selector: bool) -> tuple[float, float]:
    """(smallest gap between the best and the runner-up reference score at anchor `p`, largest change of a score
    when the reference's states give way to states `h` [B, H]): a decision can flip only where the gap is under twice
    the change."""
    ref_rows = s.ref.scores(s.hidden(p)[1:], int(s.ids[p]), selector)[1]
    our_rows = s.ref.scores(h[1:], int(s.ids[p]), selector)[1]
    gap = min(float(r.topk(2).values.diff().abs()) for r in ref_rows)
    return gap, max(float((a - b).abs().max()) for a, b in zip(ref_rows, our_rows))


# Fixtures.

@pytest.fixture(scope="module", autouse=True)
def _one_thread():
    "Tiny tensors: one torch thread is faster, and stays fast on a busy machine."
    with one_thread(): yield


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory):
    "(checkpoint directory, the tensors written there)."
    path = tmp_path_factory.mktemp("dflash2") / "hand-made"
    return path, write_checkpoint(path)


@pytest.fixture(scope="module")
def drafter(ckpt, tiny_pair):
    "The hand-made checkpoint, loaded onto the tiny target."
    return DFlashDraftModel.from_pretrained(ckpt[0], target_model=tiny_pair.target.model).eval()


@pytest.fixture(scope="module")
def reference(ckpt, tiny_pair) -> Reference:
    "The reference drafter over the written tensors and the tiny target's embeddings and head."
    m = tiny_pair.target.model
    return Reference(ckpt[1], m.get_input_embeddings().weight.detach().float(),
                     m.get_output_embeddings().weight.detach().float())


@pytest.fixture(scope="module")
def samples(reference, tiny_pair) -> list:
    "Every sample of the tiny cache (all have response tokens), the target's greedy responses."
    cache = tiny_pair.cache
    return [Sample.from_cache(reference, cache[i], cache.tap_ids) for i in range(len(cache))]


@pytest.fixture(scope="module")
def sequences(samples, tiny_pair):
    "{(tokens, selector): (cache view, samples)}: the greedy responses, and responses planted for each draft rule."
    out = {("responses", sel): (tiny_pair.cache, samples) for sel in (True, False)}
    for sel in (True, False):
        ts = [planted(s, sel) for s in samples]
        out[("planted", sel)] = (Retokened(tiny_pair.cache, [t.ids for t in ts]), ts)
    return out


# Tests.

def test_checkpoint_loads_with_contract_fields(drafter):
    "Every field of config.json is read as the contract means it (`dflash_config` first)."
    c = drafter.config
    assert c.kind == "dflash2" and c.fusion == "fused" and c.fc_layer_ids == TAPS
    assert (c.block_size, c.mask_token_id, c.num_target_layers) == (BLOCK, MASK, TARGET_LAYERS)
    assert (c.conv_kernel_size, c.conv_group_size, c.selector_rank, c.selector_top_k) == (CONV_TAPS, GROUP, RANK, TOP_K)
    assert (c.output_multiplier, c.final_logit_softcapping, c.input_embedding_scale) == (MULTIPLIER, SOFTCAP, 1.0)
    assert (c.rope_theta, c.block_causal, c.layer_types) == (THETA, [False] * LAYERS, ["full_attention"] * LAYERS)


def contract_causality(cfg: dict) -> list[bool]:
    "Each layer's in-block causality by the contract's rule: `is_causal` if given, else causal iff sliding."
    types = cfg.get("layer_types") or ["full_attention"] * cfg["num_hidden_layers"]
    return [cfg["is_causal"] if "is_causal" in cfg else t == "sliding_attention" for t in types]


def test_tensors_round_trip(drafter, ckpt, tmp_path, tiny_pair):
    "Loaded tensors are the written ones; saving and reloading keeps every tensor and DFlash 2 field."
    path, written = ckpt
    own = {k: v for k, v in drafter.state_dict().items() if not k.startswith(("embed_tokens.", "lm_head."))}
    assert own.keys() == written.keys() and all(torch.equal(own[k], written[k]) for k in written)
    drafter.save_pretrained(tmp_path / "again")
    again = read_tensors(tmp_path / "again")
    assert again.keys() == written.keys() and all(torch.equal(again[k], written[k]) for k in written)
    saved = json.loads((tmp_path / "again" / "config.json").read_text())
    assert saved["architectures"] == ["DFlash2DraftModel"] and saved["rope_parameters"]["rope_theta"] == THETA
    assert contract_causality(saved) == [False] * LAYERS
    assert {k: saved["dflash_config"][k] for k in hub_config()["dflash_config"]} == hub_config()["dflash_config"]
    reloaded = DFlashDraftModel.from_pretrained(tmp_path / "again", target_model=tiny_pair.target.model)
    assert reloaded.config == drafter.config


def hidden_terms() -> int:
    "Terms summed along the longest path to a final state: fc, then per layer the projections, attention and MLP."
    ctx = 40                       # keys: the context (responses are under 35 tokens) and the block
    return len(TAPS) * H + LAYERS * (4 * H + HEADS * HEAD_DIM + ctx + BLOCK + INTER + 2 * CONV_TAPS)


@pytest.mark.parametrize("which", [0, 3, 7])
def test_hidden_states_and_logits_match_reference(drafter, samples, which):
    "Final-normed states of blocks at several anchors (training path) and their logits (inference path)."
    s = samples[which]
    anchors = torch.tensor([s.start, s.start + 3, len(s.ids) - 2, len(s.ids) - 1])
    with torch.no_grad(): ours = drafter(s.ids[None], s.taps[None], anchors[None], hidden=True)[0]
    want = torch.stack([s.hidden(int(p)) for p in anchors])
    assert_close(ours, want, terms=hidden_terms())
    head = drafter.lm_head.weight.float()
    for p in anchors.tolist():
        with torch.no_grad(): logits = drafter.draft_logits(s.ids[p:p + 1], drafter.extend_context(s.taps[None, :p]))
        z = s.hidden(p)          # an error δ in z moves a logit by at most Σ_c |W_vc| δ
        assert_close(logits[0], z @ head.T, terms=hidden_terms() + H,
                     magnitude=float(z.abs().max() * head.abs().sum(1).max()))


@pytest.mark.parametrize("selector", [True, False], ids=["selector", "argmax"])
def test_drafted_tokens_equal_reference(drafter, samples, selector):
    "Every anchor of every response: our drafts from our states equal the reference's from its own states."
    model, slack = drafter if selector else drafter.without_selector(), []
    for s in samples:
        anchors = torch.tensor(s.anchors())
        with torch.no_grad():
            h = drafter(s.ids[None], s.taps[None], anchors[None], hidden=True)[0]
            ours = model.draft_tokens(h[:, 1:], s.ids[anchors])
        assert ours.tolist() == [s.drafts_at(p, selector) for p in s.anchors()]
        slack += [decision_slack(s, p, hp, selector) for p, hp in zip(s.anchors(), h)]
    gap, moved = min(g for g, _ in slack), max(m for _, m in slack)
    assert gap > 10 * moved, f"a decision rests on a near-tie: gap {gap:.3g}, float32 differences {moved:.3g}"


def test_planted_rounds_accept_as_planted(sequences):
    "The planted responses make the reference replay accept 0, 1, ..., B-1 drafts in turn: every slot is exercised."
    for sel in (True, False):
        for s in sequences[("planted", sel)][1]:
            got = [n for n, _ in replay_rounds(s, sel)]
            assert got[:-1] == [r % BLOCK for r in range(len(got) - 1)]


@pytest.mark.parametrize("tokens", ["responses", "planted"])
@pytest.mark.parametrize("selector", [True, False], ids=["selector", "argmax"])
def test_offline_tau_equals_reference_replay(drafter, sequences, tokens, selector):
    "Chain τ, per-slot acceptance and counts, histogram and rounds of the batched `offline_tau` equal the reference's."
    cache, seqs = sequences[(tokens, selector)]
    model = drafter if selector else drafter.without_selector()
    got = asdict(offline_tau(model, cache, budgets=()))
    want = summary([replay_rounds(s, selector) for s in seqs])
    assert {k: got[k] for k in want} == want


def test_selector_softcap_and_multiplier_change_drafts(samples, reference):
    "The walk differs from the argmax at some slots, and so do walks with the softcap or the multiplier off."
    z = [(s.hidden(p)[1:], int(s.ids[p])) for s in samples for p in s.anchors()]
    walk = lambda ref, sel=True: [t for h, a in z for t in ref.drafts(h, a, sel)]
    on = walk(reference)
    differ = lambda other: sum(a != b for a, b in zip(on, other))
    assert 0 < differ(walk(reference, False)) < len(on)
    assert differ(walk(Reference(reference.w, reference.emb, reference.head, softcap=1e9))) > 0
    assert differ(walk(Reference(reference.w, reference.emb, reference.head, multiplier=1.0))) > 0


def test_selector_changes_tau_on_its_planted_responses(sequences):
    "On responses planted for the selector's walk, the argmax accepts less: τ tells the two rules apart."
    _, seqs = sequences[("planted", True)]
    on, off = (summary([replay_rounds(s, sel) for s in seqs])["tau"] for sel in (True, False))
    assert on > off
