"""Rules about the training signal a row carries."""

from __future__ import annotations

from collections.abc import Iterator

from vlmlint.records import Finding, Role, RowResult, Severity
from vlmlint.rules.base import Rule, RuleContext, listed


class NothingToTrain(Rule):
    """The row has no assistant turn, or every assistant turn is empty: it adds no training signal.

    **Why** Under assistant-only loss (the default of LLaMA-Factory, TRL's `assistant_only_loss`,
    most VLM recipes) only the assistant's tokens are labels. Without an answer every label is
    masked: the row costs a forward pass (and its image tokens) for a zero loss, or yields NaN loss
    when the whole batch is masked. A caption row's assistant turn is its caption, so an empty
    caption is such a row.

    **Example** `{"image": "a.jpg", "conversations": [{"from": "human", "value": "<image>\\nDescribe
    this."}]}` (no answer), or `{"file_name": "a.jpg", "text": "  "}` (a blank caption).

    **Fix** Write the answer (or caption) into the assistant turn, or remove the row.
    """

    code = "VLM407"
    name = "nothing-to-train"
    severity = Severity.WARNING

    def check(self, row: RowResult, context: RuleContext) -> Iterator[Finding]:
        sample = row.sample
        if sample.problems or sample.pretokenized is not None or not sample.messages:
            return  # unusable rows are reported elsewhere; pre-tokenized rows carry their own labels
        answers = [
            position for position, message in enumerate(sample.messages) if message.role is Role.ASSISTANT
        ]
        if not answers:
            yield self.finding(
                row,
                f"no assistant turn among the row's {len(sample.messages)} turn(s): nothing to train on "
                "under assistant-only loss",
                "add the assistant's answer after the last user turn, or remove the row",
            )
            return
        for position in answers:
            if any(part.text.strip() for part in sample.messages[position].parts if not part.is_image):
                return
        if sample.layout == "captions":
            what, fix = "the caption is empty or missing", "write the caption, or remove the row"
        else:
            turns = listed([str(p) for p in answers])
            what = f"every assistant turn ({turns}) is empty or whitespace"
            fix = f"write the answer in assistant turn {answers[-1]}, or remove the row"
        yield self.finding(row, f"{what}: nothing to train on under assistant-only loss", fix)
