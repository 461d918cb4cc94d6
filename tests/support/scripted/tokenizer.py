"""The scripted server's stand-in tokenizer and the request it hands the scripted scheduler.

``ScriptedWordTokenizer``: runs of whitespace and of non-whitespace are tokens (reversible); its chat template
joins the messages' contents with newlines. ``ScriptedTokenizedRequest``: the fields of a tokenized request
upstream's batch path touches.

Invariant: ``decode(encode(text)) == text`` (ids are assigned on first sight, per tokenizer). Cost: a regex pass
per text; no SGLang import.
"""

from __future__ import annotations

import dataclasses
import re

EOS_TOKEN_ID = 2

TOKEN = re.compile(r"\s+|\S+")


class ScriptedWordTokenizer:
    """Stand-in tokenizer: runs of whitespace and of non-whitespace are tokens (reversible)."""

    chat_template = "scripted: message contents joined with newlines"
    bos_token_id = None
    eos_token_id = EOS_TOKEN_ID
    eos_token = "</s>"
    pad_token_id = 0
    additional_stop_token_ids = None

    def __init__(self):
        self._ids: dict[str, int] = {}
        self._pieces: list[str] = ["<pad>", "<s>", "</s>"]

    def encode(self, text: str, **_kwargs) -> list[int]:
        ids = []
        for piece in TOKEN.findall(text):
            if piece not in self._ids:
                self._ids[piece] = len(self._pieces)
                self._pieces.append(piece)
            ids.append(self._ids[piece])
        return ids

    def __call__(self, text, **kwargs):
        if isinstance(text, list):
            return {"input_ids": [self.encode(t) for t in text]}
        return {"input_ids": self.encode(text)}

    def decode(self, ids, **_kwargs) -> str:
        return "".join(self._pieces[i] for i in ids if i > 2)

    def convert_ids_to_tokens(self, ids):
        return [self._pieces[i] for i in ids]

    @staticmethod
    def render(messages) -> str:
        parts = []
        for message in messages:
            content = message.get("content") if isinstance(message, dict) else message.content
            if isinstance(content, list):
                content = "".join(p.get("text", "") for p in content if isinstance(p, dict))
            parts.append(content or "")
        return "\n".join(parts)

    def apply_chat_template(self, messages, tokenize=True, **_kwargs):
        text = self.render(messages)
        return self.encode(text) if tokenize else text


@dataclasses.dataclass
class ScriptedTokenizedRequest:
    """What the stand-in tokenizer hands the scripted scheduler (the fields upstream's batch path touches)."""

    rid: str
    input_text: str
    input_ids: list
    sampling_params: object  # upstream SamplingParams
    stream: bool
    time_stats: object = None
    mm_inputs: object = None
