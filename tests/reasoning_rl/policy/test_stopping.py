"""The native engine finishes a row at its stop string inside the decode loop (policy.stopping.StopWatch):
the completions equal decoding on and cutting afterwards (token ids, text, log-probs, finish reasons), the
other rows draw the same samples, and the loop ends sooner."""

import dataclasses

import pytest
import torch

from reasoning_rl.policy.engines import NativeEngine
from reasoning_rl.policy.loading import build_char_tokenizer, build_tiny_model
from reasoning_rl.policy.runtime import decide_runtime, set_runtime
from reasoning_rl.rollouts.sampling import SamplingConfig, cut_at_stop
from reasoning_rl.settings.model import TinyModelConfig
from tests.reasoning_rl.envs.conftest import build_bpe_tokenizer
from tests.reasoning_rl.envs.test_episode_cache import assert_same_episodes, ragged_env, run  # noqa: F401 (a fixture)

PROMPTS = ["What is 3 + 4? Answer: ", "What is 13 + 14? Answer: ", "1+2="]
SHAPE = dict(hidden_size=32, num_layers=2, num_heads=2, intermediate_size=64)


def _tiny(runtime="lean", tokenizer=None):
    model, tok = build_tiny_model(TinyModelConfig(**SHAPE), tokenizer=tokenizer)
    set_runtime(model, decide_runtime(model, runtime, training=False))
    return model.eval(), tok


def _fields(completions):
    return [(c.token_ids, c.text, c.finish_reason, c.logprobs, c.prompt_token_ids) for c in completions]


def _cut_afterwards(completion, stops, tok):
    """What the engine returned before the loop knew stop strings: the row decoded to EOS or the length
    limit, then cut at the first stop string (HFEngine._finish)."""
    ids, text, stopped = cut_at_stop(completion.token_ids, completion.text, stops, tok)
    return (ids, text, "stop" if stopped else completion.finish_reason, completion.logprobs[:len(ids)],
            completion.prompt_token_ids)


@pytest.mark.parametrize("runtime, lean", [("lean", True), ("hf", False)], ids=["lean", "modules"])
@pytest.mark.parametrize("sampling", [SamplingConfig(max_new_tokens=40, temperature=1.0),
                                      SamplingConfig(max_new_tokens=40, temperature=0.8, top_k=20),
                                      SamplingConfig(max_new_tokens=40, temperature=1.3, top_p=0.9)],
                         ids=["t1", "t0.8-k20", "t1.3-p0.9"])  # greedy: the scripted tests below
@pytest.mark.parametrize("batch_size", [64, 4], ids=["one-batch", "three-batches"])
def test_rows_stopped_in_the_loop_equal_rows_cut_afterwards(runtime, lean, sampling, batch_size):
    model, tok = _tiny(runtime)
    # Rows decoded to the end: a stop string that never occurs seeds the batches as a stopping call does.
    never = dataclasses.replace(sampling, stop=["\x00"])
    unstopped = [c for g in NativeEngine(model, tok, batch_size, lean).generate(PROMPTS, 4, never, seed=7)
                 for c in g]
    # Stop strings taken from each unstopped row's own text at a different place (row r at 3 + 2r), so
    # rows stop at different points, every one by token 27 of 40; every third is two characters: two tokens.
    stops = sorted({c.text[3 + 2 * r:5 + 2 * r - (r % 3 > 0)] for r, c in enumerate(unstopped)} - {""})
    stopping = dataclasses.replace(sampling, stop=stops)
    on, off = NativeEngine(model, tok, batch_size, lean), NativeEngine(model, tok, batch_size, lean, stop_in_loop=False)
    in_loop = [c for g in on.generate(PROMPTS, 4, stopping, seed=7) for c in g]
    after = [c for g in off.generate(PROMPTS, 4, stopping, seed=7) for c in g]
    assert _fields(in_loop) == _fields(after)
    # ... and equal the rows sampled without stop strings, cut afterwards: the same draws, same samples.
    assert _fields(in_loop) == [_cut_afterwards(c, stops, tok) for c in unstopped]
    # The workload is what the test claims: rows stopped at different points, before the loop's end.
    stopped = [c.num_tokens for c in in_loop if c.finish_reason == "stop" and c.token_ids[-1] != tok.eos_token_id]
    assert len(set(stopped)) >= 3 and min(stopped) < sampling.max_new_tokens // 2
    assert on.decode_steps < off.decode_steps and on.decoded_tokens < off.decoded_tokens


def test_without_stop_strings_nothing_changes():
    model, tok = _tiny()
    sampling = SamplingConfig(max_new_tokens=20)
    on, off = NativeEngine(model, tok), NativeEngine(model, tok, stop_in_loop=False)
    a = [c for g in on.generate(PROMPTS, 3, sampling, seed=1) for c in g]
    b = [c for g in off.generate(PROMPTS, 3, sampling, seed=1) for c in g]
    assert _fields(a) == _fields(b) and on.decode_steps == off.decode_steps


class Scripted(torch.nn.Module):
    """A policy whose greedy decoding emits row r's script (token ids), then ``filler`` forever; counts
    its forward calls (the prefill and every decode step)."""

    def __init__(self, model, scripts, filler):
        super().__init__()
        self.model, self.config, self.scripts, self.filler, self.calls = model, model.config, scripts, filler, 0

    def forward(self, input_ids, cache=None, **kwargs):
        out = self.model(input_ids=input_ids, cache=cache, **kwargs)
        t, self.calls = self.calls, self.calls + 1
        logits = torch.full_like(out.logits, -1e9)
        for r, script in enumerate(self.scripts):
            logits[r, -1, script[t] if t < len(script) else self.filler] = 0.0
        out.logits = logits
        return out


def _scripted_run(tok, scripts, filler, stops, max_new_tokens=30, stop_in_loop=True):
    """Each script decoded greedily by the native engine (module path) with ``stops``; the completions
    and the forward calls it took."""
    model, _ = build_tiny_model(TinyModelConfig(**SHAPE), tokenizer=tok)
    policy = Scripted(model.eval(), scripts, filler)
    engine = NativeEngine(policy, tok, stop_in_loop=stop_in_loop)
    prompt = tok("q: ", add_special_tokens=False)["input_ids"]
    out = engine.generate_from_ids([prompt] * len(scripts), SamplingConfig(max_new_tokens=max_new_tokens,
                                                                           do_sample=False, stop=stops))
    return out, policy.calls


def _ids(tok, text):
    return tok(text, add_special_tokens=False)["input_ids"]


def _check(tok, scripts, filler, stops, want_texts, want_tokens, want_calls):
    """In the loop: the texts and token counts worked out by hand, ``want_calls`` forward calls; and the
    same completions as the engine without the in-loop stop, which ran all 30 steps."""
    out, calls = _scripted_run(tok, scripts, filler, stops)
    ref, ref_calls = _scripted_run(tok, scripts, filler, stops, stop_in_loop=False)
    assert _fields(out) == _fields(ref)
    assert [c.text for c in out] == want_texts
    assert [c.num_tokens for c in out] == want_tokens
    assert [c.token_ids for c in out] == [s[:n] for s, n in zip(scripts, want_tokens)]
    assert (calls, ref_calls) == (want_calls, 30)
    return out


def test_char_tokens_stop_strings_of_one_and_of_many_tokens_and_eos():
    tok = build_char_tokenizer()
    z = _ids(tok, "z")[0]
    scripts = [_ids(tok, "ab\nzz"), _ids(tok, "abcd```output\nxx"), [*_ids(tok, "zzzzzz"), tok.eos_token_id]]
    out = _check(tok, scripts, z, ["\n", "```output"],
                 # "\n" is token 2 (3 kept); "```output" ends at token 12 (4 + 3 + 6 = 13 kept); EOS at token 6
                 want_texts=["ab", "abcd", "zzzzzz"], want_tokens=[3, 13, 7],
                 want_calls=13)  # the prefill (token 0) and 12 steps: the slowest row settles at token 12
    assert [c.finish_reason for c in out] == ["stop"] * 3


def test_a_stop_string_that_begins_before_the_one_found_first():
    # stops "b" and "abc". Row 0 "xabc": at "xab", "b" is found but "ab" may still become "abc", which
    # begins earlier: not settled; at "xabc" the cut is 1. Row 1 "xabz": settled at "xabz", cut at 2.
    # cut_at_stop keeps the shortest prefix that holds a stop string past the cut: "xab" (3 tokens) both.
    tok = build_char_tokenizer()
    _check(tok, [_ids(tok, "xabc"), _ids(tok, "xabz")], _ids(tok, "z")[0], ["b", "abc"],
           want_texts=["x", "xa"], want_tokens=[3, 3], want_calls=4)


def test_bpe_a_stop_string_across_two_tokens_and_one_inside_a_token():
    tok = build_bpe_tokenizer()
    # row 0: "```" and "output" are one token each: "```output" completes at token 7 (x, ' ', =, ' ', 1,
    # \n, ```, output), cut before it. Row 1: "put" is inside the token "output" (token 5): cut inside it.
    scripts = [_ids(tok, "x = 1\n```output\n56088\n"), _ids(tok, "print(1)\noutput\n")]
    out = _check(tok, scripts, _ids(tok, "z")[0], ["```output", "put"],
                 want_texts=["x = 1\n", "print(1)\nout"], want_tokens=[8, 6], want_calls=8)
    assert tok.decode(out[1].token_ids) == "print(1)\noutput"  # the token that holds the stop string is kept


def test_bpe_a_row_waits_for_an_incomplete_character():
    # "€" is three byte tokens: "zab" + its first bytes decodes to "zab\ufffd". stops "b" and "ab€":
    # at "zab" "ab" may become "ab€" (not settled); at "zab\ufffd" the character is not complete (not
    # settled: taken as it looks, "b" at 2 would cut "za"); at "zab€" (token 5) the cut is 1: text "z",
    # and cut_at_stop keeps "zab" (the first prefix holding a stop string past the cut). Row 1 stops at once.
    tok = build_bpe_tokenizer()
    scripts = [_ids(tok, "zab€zz"), _ids(tok, "xb")]
    assert [tok.decode(scripts[0][:k]) for k in (3, 4, 5, 6)] == ["zab", "zab\ufffd", "zab\ufffd", "zab€"]
    _check(tok, scripts, _ids(tok, "z")[0], ["b", "ab€"], want_texts=["z", "x"], want_tokens=[3, 2], want_calls=6)


def test_tokens_that_decode_to_nothing_widen_the_window():
    # "a", 20 sampled <pad> tokens (no text), "b": the stop string "ab" ends 22 tokens after it began; the
    # watch's window (2 + 4 tokens) is widened until it holds enough characters, and the row stops there.
    tok = build_char_tokenizer()
    script = _ids(tok, "a") + [tok.pad_token_id] * 20 + _ids(tok, "b")
    _check(tok, [script], _ids(tok, "z")[0], ["ab"], want_texts=[""], want_tokens=[22], want_calls=22)


def test_a_tokenizer_that_cleans_up_spaces_changes_the_text_before_the_row_stops():
    # clean_up_tokenization_spaces turns " ." into "." on decode: "xa " holds the stop string "a ", but
    # once "." follows it is gone ("xa.yyy"). The watch waits 8 characters past a stop string on such a
    # tokenizer: row 0 never stops (as when cut afterwards), row 1 ("xa yyy...") is cut at "x".
    tok = build_char_tokenizer()
    tok.clean_up_tokenization_spaces = True
    scripts = [_ids(tok, "xa .yyy"), _ids(tok, "xa yyy")]
    out, _ = _scripted_run(tok, scripts, _ids(tok, "y")[0], ["a "])
    ref, _ = _scripted_run(tok, scripts, _ids(tok, "y")[0], ["a "], stop_in_loop=False)
    assert _fields(out) == _fields(ref)
    assert out[0].text == "xa." + "y" * 26 and out[0].finish_reason == "length"
    assert out[1].text == "x" and out[1].num_tokens == 3


@pytest.mark.numerics
@pytest.mark.parametrize("cache", [True, False], ids=["kv-cache", "recompute"])
def test_episodes_are_the_same_with_the_stop_in_the_loop(ragged_env, cache):  # noqa: F811 (the fixture)
    # Multi-turn episodes: every turn ends at a stop string (a letter or digit), through
    # generate_from_ids, with and without the key/value cache carried across turns.
    model, tok = _tiny()
    sampling = SamplingConfig(max_new_tokens=10, temperature=1.2, top_k=40)
    on, off = NativeEngine(model, tok, batch_size=4), NativeEngine(model, tok, batch_size=4, stop_in_loop=False)
    assert_same_episodes(run(on, ragged_env, cache, sampling), run(off, ragged_env, cache, sampling), model.config)
    assert on.decode_steps < off.decode_steps


def test_without_stop_strings_one_random_stream_runs_through_the_batches():
    """Calls without stop strings sample what they sampled before the in-loop stop existed: batch 2
    continues batch 1's stream (as two unseeded calls after one seed do), so runs measured then
    (code_synthetic, the default run) give the same tokens."""
    model, tok = _tiny()
    sampling = SamplingConfig(max_new_tokens=12, temperature=1.0)
    engine = NativeEngine(model, tok, batch_size=4)
    one_call = [c for g in engine.generate(PROMPTS[:2], 4, sampling, seed=3) for c in g]  # 2 batches of 4
    torch.manual_seed(3)
    first = [c for g in engine.generate(PROMPTS[:1], 4, sampling, seed=None) for c in g]
    second = [c for g in engine.generate(PROMPTS[1:2], 4, sampling, seed=None) for c in g]
    assert _fields(one_call) == _fields(first + second)
