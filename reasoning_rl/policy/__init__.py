"""How a policy runs: loading a model, the runtimes that compute its forward, and the sampling engines.

- `loading`: model and tokenizer loading (Hugging Face names, local folders, GGUF files, the tiny model).
- `gguf_cache`: converting a GGUF file once into a Hugging Face folder.
- `runtime`: `model.runtime` (auto | hf | lean), decided once at start-up with its reason.
- `runtime_check`: the start-up equality check of the chosen runtime against transformers' modules.
- `lean/`: the lean Llama/Qwen2 forward, by job: `support` (what it computes exactly), `layers`,
  `decoder` (sampling), `training` (the training forward).
- `lm_head`: the chunked fp32 LM head (log-probs and entropy without a full-vocabulary tensor).
- `logprobs`: completion log-probs of a policy, on whichever runtime the run chose.
- `engines`: the hf and native sampling engines on the trainer's model, and `make_engine`.
- `vllm/`: the vLLM engines (training rollouts and evaluation).

docs/models.md says what each runtime needs and how a new model family is added.
"""
