"""The self-check behind --verify N: rerun a fixed-seed sample of rows through the exact path.

The scan keeps a reservoir of N counted rows (seeded, so the same dataset gives the same choice);
afterwards each is rerun with the images decoded and the model's real image processor, and any row
whose image tokens or sequence length differ becomes a VLM901 finding.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field, replace

from vlmlint.engine import Scanner
from vlmlint.records import Finding, ImageError, RowOutcome
from vlmlint.rules.internal import CountDisagreement

SEED = 20241130


@dataclass
class Verifier:
    size: int
    seen: int = 0
    chosen: list[RowOutcome] = field(default_factory=list)
    _random: random.Random = field(default_factory=lambda: random.Random(SEED))
    skipped: str | None = None  # why the recheck could not run (the exact path needs torchvision here)

    def offer(self, outcome: RowOutcome) -> None:
        """Reservoir sampling over the rows that got counts."""
        if self.size <= 0 or outcome.result.seq_len is None:
            return
        self.seen += 1
        if len(self.chosen) < self.size:
            self.chosen.append(outcome.complete())  # a parallel scan may have left a headline Sample
        else:
            slot = self._random.randrange(self.seen)
            if slot < self.size:
                self.chosen[slot] = outcome.complete()

    def run(self, scanner: Scanner) -> tuple[int, list[tuple[RowOutcome, Finding]]]:
        """Recount the chosen rows exactly; returns (rows checked, disagreements as findings)."""
        if not self.chosen:
            return 0, []
        self.skipped = scanner.model.exact_unavailable
        if self.skipped is not None:
            return 0, []  # said on the summary, never a disagreement
        exact = Scanner(replace(scanner.config, exact=True), model=scanner.model)
        rule = CountDisagreement()
        chosen = sorted(self.chosen, key=lambda o: (o.result.sample.source, o.result.sample.index))
        disagreements = []
        for fast, precise in zip(chosen, exact.scan_samples(o.result.sample for o in chosen), strict=True):
            a, b = fast.result, precise.result
            if any(ref.dropped for ref in a.sample.images):
                continue  # its embedded bytes were not kept (engine.KEEP_EMBEDDED_BYTES): nothing to recount
            if any(info.error_code == ImageError.BOMB for info in b.images):
                continue  # the exact path never decodes it (above bomb_pixels): VLM202's, not a disagreement
            if (a.seq_len, a.image_tokens) != (b.seq_len, b.image_tokens):
                message = (
                    f"header path: seq {a.seq_len} (img {a.image_tokens}); "
                    f"real image processor: seq {b.seq_len} (img {b.image_tokens})"
                )
                disagreements.append(
                    (fast, rule.finding(a, message, "rerun with --exact and report this model"))
                )
        return len(chosen), disagreements
