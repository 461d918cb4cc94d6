"""The GSM8K accuracy runner's parts (entry point: ``sglang_overlay_gsm8k.cli.main``).

- ``data``: find, verify, or download the GSM8K test/train splits.
- ``scoring``: gold and predicted answers, numeric comparison.
- ``prompts``: the few-shot completion prompt and chat turns.
- ``client``: the concurrent OpenAI-compatible client (retries, streaming, give-up).
- ``report``: statistics, summary JSON, JSONL, Markdown, PNGs, baseline gating.
"""
