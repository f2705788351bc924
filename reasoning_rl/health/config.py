"""``trainer.health``: which health rules run, which stop the run, and their thresholds."""

from __future__ import annotations

from dataclasses import dataclass, field

from reasoning_rl.health.rules import RULE_NAMES, RULES


@dataclass
class HealthConfig:
    """The health rules (reasoning_rl.health, docs/health.md) read every step's metrics."""

    enabled: bool = True
    """Check the rules every step (health.jsonl, the log, status.json's ``health``)."""
    preflight: bool = True
    """Before step 1, sample and score step 1's batch and warn about truncation, zero-variance groups,
    unscorable answers and prompts too long for the context (reasoning_rl.health.preflight)."""
    stop_on: list[str] = field(default_factory=lambda: ["non_finite"])
    """Rules whose firing stops the run: status ``failed`` with cause ``health:<rule>``, exit code 2."""
    disable: list[str] = field(default_factory=list)
    """Rules not checked."""
    thresholds: dict[str, float] = field(default_factory=lambda: {r.name: r.threshold for r in RULES})
    """Rule name -> threshold: every rule's, from the table reasoning_rl.health.rules.RULES (so the
    resolved config records them); ``trainer.health.thresholds.truncation=0.3`` changes one."""

    def problems(self, prefix: str = "trainer.health") -> list[str]:
        out = []
        for key, names in (("stop_on", self.stop_on), ("disable", self.disable), ("thresholds", self.thresholds)):
            unknown = [n for n in names if n not in RULE_NAMES]
            if unknown:
                out.append(f"{prefix}.{key} names unknown rules {unknown}; the rules are {', '.join(RULE_NAMES)}")
        both = sorted(set(self.stop_on) & set(self.disable))
        if both:
            out.append(f"{prefix}.stop_on and {prefix}.disable both name {both}: a disabled rule cannot stop the run")
        return out
