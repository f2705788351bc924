"""The configuration schema, at the bottom of the house: one module per group of ``conf/train.yaml``
(``task``, ``model``, ``rollout``, ``trainer``, ``evaluation`` with ``warmstart``, and ``algo``'s common
settings), each a dataclass with a docstring per field. These modules import nothing from the project
but each other and the reward layer's settings (``rewards.specs``); ``tests/test_architecture.py`` holds
that. What is checked across groups lives in ``reasoning_rl.validation``; the run's whole schema is
``reasoning_rl.config.TrainConfig``."""
