"""AROUND ``TokenizerManager._handle_abort_finish_reason`` (sglang >= 0.5.23, which treats every code in
400-599 as an error and releases LoRA once itself): normalize the abort's status code, then upstream decides.

Job: upstream compares the raw code (``"503"`` raises ``TypeError``) and its streaming handlers test
``isinstance(code, HTTPStatus)``, which a msgpack-delivered int fails; after normalization both read it right.
Invariant: nothing of upstream's branch is repeated (no release, no ``rid_to_state`` edit).
Cost: one dict read for a non-abort output.
"""

from __future__ import annotations

from sglang_overlay.patches.openai_abort_status.status import normalize_finish_reason

__all__ = ["normalize_then_upstream"]


async def normalize_then_upstream(original, self, out: dict, state, is_stream: bool):
    """AROUND ``TokenizerManager._handle_abort_finish_reason`` on sglang >= 0.5.23: normalize an abort's
    status code in place, then upstream decides.

    0.5.23 treats every code in 400-599 as an error and releases LoRA once (``_release_lora_once``), but
    compares the raw code (``"503"`` raises ``TypeError`` there) and its streaming handlers test
    ``isinstance(code, HTTPStatus)``, which a msgpack-delivered int fails. After normalization the code
    is an ``HTTPStatus`` or ``None``, so both read it right; nothing else of upstream's branch is
    repeated here (no release, no ``rid_to_state`` edit). Cost: one dict read for a non-abort output."""
    finish_reason = out["meta_info"]["finish_reason"]
    if finish_reason.get("type") == "abort":
        normalize_finish_reason(finish_reason)
    return await original(self, out, state, is_stream)
