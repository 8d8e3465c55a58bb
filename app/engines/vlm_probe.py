"""The warm-up's memory probe for the `vlm` engine: does a batch of budget pages fit?

Measures what serving does: `max_concurrent_batches` batches at once, each with a KV cache
as long as the prompt plus `max_new_tokens` (app/engines/warmup_probe.py searches the sizes).
"""

from __future__ import annotations

import concurrent.futures

from PIL import Image

from app.engines.vlm_device import free_device_memory, is_out_of_memory


def fits(engine, page: Image.Image, size: int) -> bool:
    """True when `max_concurrent_batches` batches of `size` pages ran without running out of memory."""
    out_of_memory = False
    try:
        with concurrent.futures.ThreadPoolExecutor(engine._concurrency) as pool:
            for done in [pool.submit(kv_bound_forward, engine, [page] * size) for _ in range(engine._concurrency)]:
                done.result()
    except Exception as exc:
        if not is_out_of_memory(exc):
            raise
        out_of_memory = True
    free_device_memory(engine._device)  # outside the except block: the failed frames are gone
    return not out_of_memory


def kv_bound_forward(engine, images: list[Image.Image]) -> int:
    """One forward over the prompt extended by max_new_tokens pad tokens, keeping the cache:
    its memory bounds generation's from above (the full-length KV cache, and prefill
    activations over more tokens than any decoding step), at a fraction of the time.
    Returns the length of the cache the model kept."""
    import torch

    inputs = engine.model_inputs(images)
    extra = engine._options.max_new_tokens
    ids, mask = inputs["input_ids"], inputs["attention_mask"]
    pad = torch.full((ids.shape[0], extra), engine._family.tokenizer.pad_token_id or 0, dtype=ids.dtype,
                     device=ids.device)
    inputs["input_ids"] = torch.cat([ids, pad], dim=1)
    inputs["attention_mask"] = torch.cat([mask, torch.ones_like(pad, dtype=mask.dtype)], dim=1)
    if "mm_token_type_ids" in inputs:  # the pads are text
        types = inputs["mm_token_type_ids"]
        inputs["mm_token_type_ids"] = torch.cat([types, torch.zeros_like(pad, dtype=types.dtype)], dim=1)
    with torch.inference_mode():
        try:
            output = engine._model(**inputs, use_cache=True, logits_to_keep=1)
        except TypeError:  # a model without logits_to_keep: full logits, a larger (still upper) bound
            output = engine._model(**inputs, use_cache=True)
    return output.past_key_values.get_seq_length()
