"""Observations as chat turns (task.episode.observation_role=user): the observation tokens are the chat
template's own rendering of the conversation, masked out of the loss; the sampled ids are kept; the
end-of-turn token (EOS) hands a code_feedback attempt to the tests instead of ending the episode."""

from __future__ import annotations

import pytest

from reasoning_rl.envs import EpisodeConfig
from reasoning_rl.envs.chat import ChatObservationError, chat_observation, observation_tokens
from reasoning_rl.envs.episode import EpisodeEngine
from reasoning_rl.rollouts.sampling import SamplingConfig
from reasoning_rl.tasks import Example
from tests.reasoning_rl.conftest import compose_train

from .conftest import ScriptedEngine, build_bpe_tokenizer

# SmolLM2-135M-Instruct's template (ChatML with a default system message), as its GGUF file holds it.
CHATML = ("{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
          "{{ '<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n' }}"
          "{% endif %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}"
          "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}")
QUESTION = "Write a function add(a, b) that returns a + b."
TESTS = ["assert add(1, 2) == 3", "assert add(0, 0) == 0"]
WRONG = "```python\ndef add(a, b):\n    return a - b\n```"
RIGHT = "```python\ndef add(a, b):\n    return a + b\n```\n"
FEEDBACK = "# 1 of 2 tests passed\n# test 1: add(1, 2) returned -1, expected 3\n"


@pytest.fixture(scope="module")
def chat_tokenizer():
    """A small byte-level BPE whose EOS is ChatML's end of turn, with SmolLM2's chat template."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=400, special_tokens=["<|im_end|>", "<|im_start|>", "<pad>", "<unk>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator([QUESTION + WRONG + RIGHT + FEEDBACK + "user\nassistant\nsystem\n"] * 50, trainer)
    out = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|im_end|>", pad_token="<pad>", unk_token="<unk>",
                                  additional_special_tokens=["<|im_start|>"])
    out.chat_template = CHATML
    return out


def render(tokenizer, messages, generation_prompt=True) -> str:
    return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=generation_prompt)


def feedback_episode(tokenizer, turns, role="user", max_turns=3):
    prompt = render(tokenizer, [{"role": "user", "content": QUESTION}])
    example = Example(id="mbpp/1", prompt=prompt, reference=None, fields={"test_list": TESTS, "test_setup_code": ""})
    engine = ScriptedEngine(tokenizer, turns)
    options = {"stop": "```\n", "instruction": "Fix it."}
    episodes = EpisodeEngine(engine, tokenizer, "code_feedback",
                             EpisodeConfig(max_turns=max_turns, max_tokens=2000, observation_role=role,
                                           options=options), [example])
    [[c]] = episodes.generate([prompt], 1, SamplingConfig(max_new_tokens=200), seed=0)
    return prompt, engine, c


def test_the_observation_is_the_templates_turn_between_two_assistant_turns(chat_tokenizer):
    # What the template puts after an assistant message's content, for a user message "O":
    assert chat_observation(chat_tokenizer, "O") == "<|im_end|>\n<|im_start|>user\nO<|im_end|>\n<|im_start|>assistant\n"
    # The policy sampled the end-of-turn token itself: the observation starts after it.
    assert chat_observation(chat_tokenizer, "O", turn_ended=True) == "\n<|im_start|>user\nO<|im_end|>\n<|im_start|>assistant\n"
    # A tool message is whatever the template makes of that role (ChatML: a turn named tool).
    assert chat_observation(chat_tokenizer, "O", "tool") == "<|im_end|>\n<|im_start|>tool\nO<|im_end|>\n<|im_start|>assistant\n"
    # inline: the text itself; nothing to say appends nothing.
    assert observation_tokens(chat_tokenizer, "\n8\n```\n", "inline", [5])[0] == "\n8\n```\n"
    assert observation_tokens(chat_tokenizer, "", "user", [5]) == ("", [])


def test_an_attempt_ended_by_eos_is_tested_and_the_feedback_is_a_user_turn(chat_tokenizer):
    prompt, engine, c = feedback_episode(chat_tokenizer, [WRONG + "<eos>", RIGHT])
    s0, s1 = engine.sampled
    eos = chat_tokenizer.eos_token_id
    # Attempt 1 ended with <|im_end|> (sampled, trained on); the environment ran it instead of ending the episode.
    assert s0[-1] == eos and c.turns[0].tool == "error"
    # The whole context is the template's rendering of the conversation, attempt 2 continuing the new turn.
    observation = FEEDBACK + "Fix it.\n"
    conversation = [{"role": "user", "content": QUESTION}, {"role": "assistant", "content": WRONG},
                    {"role": "user", "content": observation}]
    ids = chat_tokenizer(prompt, add_special_tokens=False)["input_ids"] + c.token_ids
    assert chat_tokenizer.decode(ids) == render(chat_tokenizer, conversation) + RIGHT
    # The observation tokens are the template's own tokens of that turn (its text tokenized as the template
    # renders it), every one masked out; the sampled ids are the engine's, unchanged.
    obs = c.token_ids[len(s0):len(c.token_ids) - len(s1)]
    assert obs == chat_tokenizer(render(chat_tokenizer, conversation), add_special_tokens=False)["input_ids"][-len(obs):]
    assert c.turns[1].text == "\n<|im_start|>user\n" + observation + "<|im_end|>\n<|im_start|>assistant\n"
    assert c.token_ids[:len(s0)] == s0 and c.token_ids[-len(s1):] == s1
    assert c.loss_mask == [1] * len(s0) + [0] * len(obs) + [1] * len(s1)
    assert engine.contexts[1] == chat_tokenizer(prompt, add_special_tokens=False)["input_ids"] + s0 + obs
    # Attempt 2 passed: the environment ended the episode, and the verifier scores attempt 2 alone.
    assert c.finish_reason == "stop" and c.text == RIGHT and c.turns[2].tool == "ok"


def test_an_attempt_ended_by_its_stop_marker_gets_the_end_of_turn_from_the_template(chat_tokenizer):
    wrong = WRONG + "\n"  # the closing fence and its newline: the stop marker, not EOS
    prompt, engine, c = feedback_episode(chat_tokenizer, [wrong, RIGHT])
    s0, s1 = engine.sampled
    assert s0[-1] != chat_tokenizer.eos_token_id
    obs = c.token_ids[len(s0):len(c.token_ids) - len(s1)]
    assert obs[0] == chat_tokenizer.eos_token_id and c.loss_mask[len(s0)] == 0  # <|im_end|> is context here
    conversation = [{"role": "user", "content": QUESTION}, {"role": "assistant", "content": wrong},
                    {"role": "user", "content": FEEDBACK + "Fix it.\n"}]
    ids = chat_tokenizer(prompt, add_special_tokens=False)["input_ids"] + c.token_ids
    assert chat_tokenizer.decode(ids) == render(chat_tokenizer, conversation) + RIGHT


def test_eos_still_ends_the_episode_inline_and_for_a_final_answer(chat_tokenizer):
    # inline (the tiny model's format): an EOS-ended attempt is the final one, not run.
    _, engine, c = feedback_episode(chat_tokenizer, [WRONG + "<eos>", RIGHT], role="inline")
    assert len(engine.sampled) == 1 and c.finish_reason == "stop" and c.turns[0].tool == "none"
    # python_tool with chat turns: a turn ended by EOS is the answer (python_tool does not answer a turn end);
    # its ```output stop marker hands the code over, and the output comes back as a user turn.
    prompt = render(chat_tokenizer, [{"role": "user", "content": "What is 20 - 4 * 3?"}])
    engine = ScriptedEngine(chat_tokenizer, ["```python\nprint(20 - 4 * 3)\n```\n```output", "It is 8.<eos>"])
    episodes = EpisodeEngine(engine, chat_tokenizer, "python_tool",
                             EpisodeConfig(max_turns=3, max_tokens=2000, observation_role="user"))
    [[c]] = episodes.generate([prompt], 1, SamplingConfig(max_new_tokens=200), seed=0)
    assert len(engine.sampled) == 2 and c.finish_reason == "stop" and c.token_ids[-1] == chat_tokenizer.eos_token_id
    assert c.turns[1].text == "<|im_end|>\n<|im_start|>user\n\n8\n```\n<|im_end|>\n<|im_start|>assistant\n"


def test_the_last_attempt_ended_by_eos_is_run_and_a_failure_ends_at_the_turn_limit(chat_tokenizer):
    _, engine, c = feedback_episode(chat_tokenizer, [WRONG + "<eos>"], max_turns=2)
    assert len(engine.sampled) == 2 and c.finish_reason == "length"
    assert [t.role for t in c.turns] == ["sampled", "observation", "sampled"] and c.turns[2].tool == "error"


def test_a_tokenizer_without_a_chat_template_is_refused_with_what_to_do():
    with pytest.raises(ChatObservationError, match="observation_role=inline"):
        chat_observation(build_bpe_tokenizer(), "O")
    assert EpisodeConfig(observation_role="assistant").problems() == [
        "task.episode.observation_role='assistant' is unknown; choose one of inline, user, tool"]


def _train_config(overrides):
    from reasoning_rl.cli import to_train_config
    from reasoning_rl.config_store import register_configs

    register_configs()
    return to_train_config(compose_train(overrides))


def test_the_real_model_presets_compose_and_validate():
    from reasoning_rl.config_checks import ConfigError
    from reasoning_rl.envs.registry import check_options
    from reasoning_rl.validation import validate

    gsm = _train_config(["task=gsm8k_tool", "model=smollm2-135m"])
    validate(gsm)
    assert (gsm.task.name, gsm.task.env, gsm.task.episode.observation_role) == ("gsm8k_tool", "python_tool", "inline")
    assert gsm.task.use_chat_template and gsm.rollout.max_new_tokens == 256
    mbpp = _train_config(["task=mbpp_feedback", "model=smollm2-135m"])
    validate(mbpp)
    assert (mbpp.task.env, mbpp.task.episode.observation_role, mbpp.task.episode.max_turns) == (
        "code_feedback", "user", 3)
    assert mbpp.task.episode.options["stop"] == "```\n"
    check_options("code_feedback", dict(mbpp.task.episode.options))  # every option is the environment's
    # Chat turns after a raw prompt are refused before the run starts.
    with pytest.raises(ConfigError, match=r"task\.use_chat_template=true"):
        validate(_train_config(["task=mbpp_feedback", "task.use_chat_template=false"]))
    with pytest.raises(ConfigError, match="observation_role='system' is unknown"):
        validate(_train_config(["task=mbpp_feedback", "task.episode.observation_role=system"]))


def test_the_worked_example_of_the_gsm8k_tool_prompt_is_what_python_tool_answers():
    from reasoning_rl.envs.python_tool import PythonTool
    from reasoning_rl.tasks import get_definition

    template = get_definition("gsm8k_tool").prompt_template
    example = template.split("Example.\n", 1)[1].split("\n\nProblem: {question}", 1)[0]
    code_turn, rest = example.split("```output", 1)
    step = PythonTool(timeout=2).step(code_turn.split("\n", 1)[1])
    assert step.tool == "ok" and rest.startswith(step.observation)  # "\n8\n```\n", then the boxed answer
    assert "\\boxed{{8}}" in rest
