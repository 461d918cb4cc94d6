"""AROUND ``TokenizerManager._handle_abort_finish_reason`` (sglang < 0.5.23, where only listed codes, an
``HTTPStatus`` or 400/500/503, are errors): normalize, then treat every error status as upstream treats 500/503.

Job: release the request state and raise ``HTTPException`` (non-streaming) for every error status; 400 keeps
upstream's ValueError path. Invariant: the finish reason is normalized once, in place; request state and a
LoRA reference are released once. Cost: one dict read for a non-abort output.
"""

from __future__ import annotations

from http import HTTPStatus

from sglang_overlay.patches.openai_abort_status.status import normalize_finish_reason

__all__ = ["handle_abort_finish_reason"]


# --- LoRA: exactly one release per request (issue 12) -----------------------------------------------
def _lora_release_owed(manager, out: dict, state) -> bool:
    """Whether this finished abort still holds its LoRA reference.

    Upstream 0.5.20 has two producers of a finished output. ``_handle_batch_output`` releases
    the reference itself when the request finishes, and its meta_info always carries
    ``prompt_tokens``; the scheduler's abort echo (``_handle_abort_req``: timeouts, aborts in
    the waiting queue) builds its output without ``prompt_tokens`` and releases nothing, so
    the reference is released here for every abort status that path brings (upstream's own
    500/503 branch releases it again after ``_handle_batch_output``: a double release).
    """
    return bool(manager.enable_lora and state.obj.lora_path) and "prompt_tokens" not in out["meta_info"]


# --- end LoRA ---------------------------------------------------------------------------------------


async def handle_abort_finish_reason(original, self, out: dict, state, is_stream: bool):
    """AROUND ``TokenizerManager._handle_abort_finish_reason``: normalize, then treat every
    error status like upstream treats 500/503 (400 keeps upstream's ValueError path)."""
    finish_reason = out["meta_info"]["finish_reason"]
    if finish_reason.get("type") != "abort":
        return await original(self, out, state, is_stream)
    status = normalize_finish_reason(finish_reason)
    # --- LoRA: exactly one release per request, for every status (issue 12) ---------------------
    if _lora_release_owed(self, out, state):
        await self.lora_registry.release(state.obj.lora_id)
    # --- end LoRA ---------------------------------------------------------------------------------
    if status is None or status == HTTPStatus.BAD_REQUEST:
        return await original(self, out, state, is_stream)

    # Upstream's 500/503 branch, for every error status: release the state, then raise or yield
    # (the LoRA reference was settled above).
    if state.obj.rid in self.rid_to_state:
        del self.rid_to_state[state.obj.rid]
    if not is_stream:
        from fastapi import HTTPException

        raise HTTPException(status_code=int(status), detail=finish_reason["message"])
    return out
