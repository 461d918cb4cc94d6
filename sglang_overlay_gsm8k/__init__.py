"""The GSM8K accuracy runner, a component of its own (``sglang-overlay gsm8k``, ``scripts/gsm8k_eval.py``).

Entry point: ``sglang_overlay_gsm8k.cli.main``. It shares nothing with the plugin but
the version string: the plugin that SGLang loads in every process never imports
this package, and this package's extra dependencies (httpx, tqdm, matplotlib: the
``gsm8k`` extra, see ``extra``) are not the plugin's. Importing this package costs
nothing (no submodule is imported here).

- ``cli``: the command line, the run and the verdict.
- ``extra``: the extra's packages, and the install advice when one is missing.
- ``data``: find, verify, or download the GSM8K test/train splits.
- ``scoring``: gold and predicted answers, numeric comparison.
- ``prompts``: the few-shot completion prompt and chat turns.
- ``client``: the concurrent OpenAI-compatible client (retries, streaming, give-up).
- ``report``: statistics, summary JSON, JSONL, Markdown, PNGs, baseline gating.
"""
