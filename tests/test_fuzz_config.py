"""Fuzz the config and run-config validators: any input either builds or fails with the documented ValueError.
No test has a deadline or hypothesis's too_slow health check: a busy machine must not fail them."""
import json, math
from dataclasses import fields
import pytest
from hypothesis import example, given, settings, strategies as st, HealthCheck
from dflash_nb.config import DFlashConfig, FUSIONS, LAYER_TYPES
from dflash_nb.config import TrainConfig
from dflash_nb.hub import config_from_hub, config_to_hub

ints = st.one_of(st.integers(-3, 70), st.sampled_from([0, 1, 2, 16, 64, 248320]))
values = st.one_of(ints, st.text(max_size=5), st.none(), st.floats(allow_nan=True), st.lists(ints, max_size=4))


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(hidden=ints, layers=st.integers(-1, 6), heads=ints, kv=ints, head_dim=ints, vocab=ints, block=ints,
       n_target=ints, mask=ints, taps=st.one_of(st.none(), st.lists(st.one_of(ints, st.text(max_size=2)), max_size=6)),
       types=st.one_of(st.none(), st.lists(st.sampled_from(LAYER_TYPES + ("linear_attention", "")), max_size=6)),
       window=st.one_of(st.none(), ints), fusion=st.sampled_from(FUSIONS + ("concat", "")))
@example(hidden=1, layers=1, heads=1, kv=1, head_dim=5, vocab=1, block=2, n_target=8, mask=0, taps=None, types=None,
         window=None, fusion="fused")   # an odd head_dim once escaped as transformers' own validation error
def test_dflash_config_builds_or_raises_value_error(hidden, layers, heads, kv, head_dim, vocab, block, n_target, mask,
                                                    taps, types, window, fusion):
    kw = dict(hidden_size=hidden, num_hidden_layers=layers, num_attention_heads=heads, num_key_value_heads=kv,
              head_dim=head_dim, vocab_size=vocab, block_size=block, num_target_layers=n_target, mask_token_id=mask,
              target_layer_ids=taps, layer_types=types, sliding_window=window, fusion=fusion)
    try: c = DFlashConfig(**kw)
    except ValueError as e:
        assert str(e)
        return
    assert config_from_hub(json.loads(json.dumps(config_to_hub(c)))) == c


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.dictionaries(st.sampled_from([f.name for f in fields(TrainConfig)]), st.one_of(values, st.booleans(), st.dictionaries(st.text(max_size=3), ints)), max_size=6))
def test_train_config_validates_or_raises_value_error(kw):
    try: TrainConfig(**kw).validate()
    except ValueError as e:
        assert str(e)


@pytest.mark.parametrize("bad, msg", [(dict(num_key_value_heads=0), "must be an integer >= 1"), (dict(hidden_size=0), "must be an integer >= 1"),
                                      (dict(target_layer_ids=["1", 16]), "integers"), (dict(head_dim=-2), "must be an integer >= 1")])
def test_dimension_errors_are_clear(bad, msg):
    with pytest.raises(ValueError, match=msg): DFlashConfig(**bad)


NUMERIC = {"lr": st.sampled_from([-1.0, 0.0, 1e-9, 3e-3, 1.0, 5.0]), "warmup": st.sampled_from([-0.1, 0.0, 0.5, 1.0, 1.5, 50.0]),
           "grad_clip": st.sampled_from([-1.0, 0.0, 1e-6, 1.0]), "weight_decay": st.sampled_from([-0.1, 0.0, 0.1, 2.0]),
           "steps": st.sampled_from([-3, 0, 1, 2]), "max_len": st.sampled_from([-20, 0, 5, 12]),
           "noise_std": st.sampled_from([-0.1, 0.0, 0.3, 20.0]), "streak": st.sampled_from([-1.0, 0.0, 1.0]),
           "gamma": st.sampled_from([-1.0, 0.0, 0.5, 7.0]), "num_anchors": st.sampled_from([0, 1, 3]),
           "bucket_batches": st.sampled_from([0, 1, 4]), "optimizer": st.sampled_from(["adamw", "muon", "sgd"])}


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(st.fixed_dictionaries({}, optional=NUMERIC))
def test_train_config_is_refused_in_one_line_or_trains_finite(tmp_path, tiny_cache, kw):
    "Drawn settings are either refused (one line naming the field) or train two steps with a finite loss."
    from dflash_nb.testing import tiny_drafter
    from dflash_nb.train import train, read_metrics
    from dflash_nb.testing import tiny_hybrid
    base = dict(drafter=tiny_drafter(), loss_chunk=3, batch_size=2, log_every=1, progress=False, device="cpu",
                steps=2, out_dir=str(tmp_path / f"run-{abs(hash(str(kw)))}"))
    cfg = TrainConfig(**(base | kw))
    try: cfg.validate()
    except ValueError as e:
        assert "\n" not in str(e) and "=" in str(e), str(e)
        return
    if cfg.steps == 0: cfg = TrainConfig(**(base | kw | {"steps": 0, "epochs": 1}))
    train(cfg, target=tiny_hybrid(), data=tiny_cache)
    assert all(math.isfinite(r["loss"]) for r in read_metrics(cfg.out_dir))
