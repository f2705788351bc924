"""Rollouts: how completions are sampled (sampling), which prompts come next (prompt_sampler), and the
layers over an engine: a perturbed copy for the mismatch lab (inject) and a generator process running ahead
(async_engine)."""
