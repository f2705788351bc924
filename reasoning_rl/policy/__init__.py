"""How a policy runs: loading a model, the runtimes that compute its forward, and the sampling engines.

- `loading`: model and tokenizer loading (Hugging Face names, local folders, GGUF files, the tiny model).
- `gguf_cache`: converting a GGUF file once into a Hugging Face folder.
- `lean`: the lean Llama/Qwen2 forward used for sampling and for training log-probs on the CPU.
- `lm_head`: the chunked fp32 LM head (log-probs and entropy without a full-vocabulary tensor).
- `logprobs`: completion log-probs of a policy, on whichever runtime the run chose.
- `vllm`: the vLLM engines (training rollouts and evaluation).

docs/models.md says what each runtime needs and how a new model family is added.
"""
