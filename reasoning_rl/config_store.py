"""The schemas registered with Hydra's ConfigStore: the run's (``reasoning_rl.config.TrainConfig``) and
each registered algorithm's settings class, so a typo in an override or a wrong type fails at
composition time with the key's name."""

from __future__ import annotations

from hydra.core.config_store import ConfigStore

from reasoning_rl.algo.registry import get_algorithm, list_algorithms
from reasoning_rl.config import TrainConfig
from reasoning_rl.settings.algo import AlgoConfig


def register_configs() -> None:
    """Register the schemas with Hydra's ConfigStore.

    ``train_schema`` (the primary config's first default) types every group but ``algo``,
    which it leaves at the base ``AlgoConfig`` so that any algorithm's settings can merge
    into it; each algorithm's dataclass is stored as ``algo/<name>_schema``, and its YAML
    file lists that first (``conf/algo/grpo.yaml``), so ``algo.*`` is typed too."""
    store = ConfigStore.instance()
    store.store(name="train_schema", node=TrainConfig(algo=AlgoConfig()))
    for name in list_algorithms():
        store.store(group="algo", name=f"{name}_schema", node=get_algorithm(name).config_class)
