"""A VLM's tokens for one page made into its EngineResult: the same rules for every VLM engine
(`vlm` on transformers, `vllm`): end tokens, degenerate output, loops cut, the cap reached."""

from __future__ import annotations

from typing import Optional

from app.engines.repetition import cut_loop
from app.schemas import EngineResult

# One token this many times in a row is no text (a NaN's argmax, an overflowed row).
SAME_TOKEN_RUN = 32
DEGENERATE_NOTE = "the model wrote one token over and over or its scores were not numbers: the output is not text"
LOOP_NOTE = "a repetition loop was cut from the output"


def same_token_run(tokens: list[int], run: int = SAME_TOKEN_RUN) -> bool:
    return len(tokens) >= run and len(set(tokens[-run:])) == 1


def generated_tokens(tokens: list[int], stops: set, pad_token_id) -> int:
    """Tokens the model generated for one page of a batch: up to and including its first end token.
    A row that ended early is padded to the batch's longest; those pads were never generated."""
    for position, token in enumerate(tokens):
        if token in stops:
            return position + 1
    if pad_token_id is not None and pad_token_id not in stops:
        while tokens and tokens[-1] == pad_token_id:
            tokens = tokens[:-1]
    return len(tokens)


def page_result(family, tokens: list[int], max_new_tokens: int, stopped_at: Optional[int] = None,
                non_finite: bool = False, timeout_s: Optional[float] = None) -> EngineResult:
    """`stopped_at`: where a loop guard stopped the page (what follows is padding); `non_finite`:
    its scores held NaN or +inf; `timeout_s`: the batch was ended at this wall-clock budget (a page
    that had not reached its end token then was cut there)."""
    if stopped_at is not None:
        tokens = tokens[:stopped_at]
    text, finish_reason = family.decode(tokens)
    generated = generated_tokens(tokens, family.eos_token_ids, family.tokenizer.pad_token_id)
    notes = []
    if non_finite or same_token_run(tokens[:generated]):
        text, finish_reason = "", "degenerate"
        notes.append(DEGENERATE_NOTE)
    else:
        text, looped = cut_loop(text)
        if stopped_at is not None or looped:
            notes.append(LOOP_NOTE)
            finish_reason = "repetition" if stopped_at is not None else finish_reason
        elif finish_reason == "length" and timeout_s is not None and generated < max_new_tokens:
            finish_reason = "timeout"
            notes.append(f"the output was cut when its batch passed vlm.page_timeout_s={timeout_s:g} s")
        elif finish_reason == "length":
            notes.append(f"the output was cut at max_new_tokens={max_new_tokens}")
    return EngineResult(markdown=text, finish_reason=finish_reason, valid=not notes, notes=notes,
                        generated_tokens=generated)
