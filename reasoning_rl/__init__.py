"""reasoning-rl: GRPO and friends for verifiable-reward reasoning (math and code)."""

__version__ = "0.1.0"
