"""Fuzz the config and run-config validators: any input either builds or fails with the documented ValueError.
No test has a deadline or hypothesis's too_slow health check: a busy machine must not fail them."""
import json
from dataclasses import fields
import pytest
from hypothesis import example, given, settings, strategies as st, HealthCheck
from dflash_nb.config import DFlashConfig, FUSIONS, LAYER_TYPES
from dflash_nb.config import TrainConfig

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
    assert DFlashConfig.from_hub_dict(json.loads(json.dumps(c.to_hub_dict()))) == c


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
