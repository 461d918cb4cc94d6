"""Where the GSM8K splits come from, and their integrity.

Lookup order for the directory holding ``test.jsonl`` and ``train.jsonl``:
``--data-dir``, then ``$SGLANG_OVERLAY_GSM8K_DIR``, then the cache
(``~/.cache/sglang-overlay/gsm8k``, under ``$XDG_CACHE_HOME`` when set), then a
download of the public ``openai/grade-school-math`` files (MIT; the LICENSE is
saved beside them) into the cache. Offline with nothing found: a clear error
naming ``--data-dir``. A directory that was named explicitly but lacks the files
is an error, never a silent fall-through. When a ``SHA256SUMS`` file lies beside
the splits (the shared copy has one; a download writes one after checking the
published hashes) the files are checked against it, so a truncated or edited copy
is refused before a run; the summary records the test split's SHA-256 either way.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
from dataclasses import dataclass
from pathlib import Path

from sglang_overlay_gsm8k.scoring import GoldAnswerError, gold_answer
from sglang_overlay.core.lockfile import sha256_file

ENV_DIR = "SGLANG_OVERLAY_GSM8K_DIR"
SPLITS = ("test.jsonl", "train.jsonl")
SOURCE = "https://raw.githubusercontent.com/openai/grade-school-math/master"
URLS = {
    "test.jsonl": f"{SOURCE}/grade_school_math/data/test.jsonl",
    "train.jsonl": f"{SOURCE}/grade_school_math/data/train.jsonl",
    "LICENSE": f"{SOURCE}/LICENSE",
}
# The public files as published (1,319 and 7,473 problems).
KNOWN_SHA256 = {
    "test.jsonl": "3730d312f6e3440559ace48831e51066acaca737f6eabec99bccb9e4b3c39d14",
    "train.jsonl": "17f347dc51477c50d4efb83959dbb7c56297aba886e5544ee2aaed3024813465",
}
TEST_SIZE = 1319


class DataError(RuntimeError):
    """The dataset cannot be found, fetched or read."""


@dataclass(frozen=True)
class Problem:
    index: int  # position in its split (0-based); the question id
    question: str
    answer: str  # the full worked answer, ending in "#### N"


def cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "sglang-overlay" / "gsm8k"


def _has_splits(path: Path) -> bool:
    return all((path / name).is_file() for name in SPLITS)


def _expected_hashes(directory: Path) -> dict[str, str]:
    sums = directory / "SHA256SUMS"
    out = {}
    if sums.is_file():
        for line in sums.read_text().splitlines():
            parts = line.split()
            if len(parts) == 2:
                out[parts[1].lstrip("*")] = parts[0]
    return out


def verify(directory: Path) -> None:
    """Refuse split files whose SHA-256 differs from the one in ``SHA256SUMS`` (when there is one)."""
    expected = _expected_hashes(directory)
    for name in SPLITS:
        want = expected.get(name)
        if want is None:
            continue
        got = sha256_file(directory / name)
        if got != want:
            raise DataError(f"{directory / name}: sha256 {got} is not the expected {want} "
                            "(truncated or modified copy?); delete it or point --data-dir at a good copy")


def download(dest: Path, client=None, timeout_s: float = 60.0) -> Path:
    """Fetch test/train/LICENSE from the public repository into ``dest`` (atomically per file)."""
    import httpx

    dest.mkdir(parents=True, exist_ok=True)
    own_client = client is None
    client = client or httpx.Client(timeout=timeout_s, follow_redirects=True)
    try:
        for name, url in URLS.items():
            response = client.get(url)
            response.raise_for_status()
            body = response.content
            if name in KNOWN_SHA256 and hashlib.sha256(body).hexdigest() != KNOWN_SHA256[name]:
                raise DataError(f"downloaded {url} does not have the expected sha256 {KNOWN_SHA256[name]}")
            tmp = dest / f".{name}.part"
            tmp.write_bytes(body)
            tmp.replace(dest / name)
        (dest / "SHA256SUMS").write_text("".join(f"{h}  {n}\n" for n, h in KNOWN_SHA256.items()))
    finally:
        if own_client:
            client.close()
    return dest


def locate(data_dir: str | None = None, allow_download: bool = True, client=None) -> Path:
    """The directory holding both splits; see the module docstring for the order."""
    if data_dir:
        path = Path(data_dir).expanduser()
        if not _has_splits(path):
            raise DataError(f"--data-dir {path}: expected {' and '.join(SPLITS)} there")
        return path
    env = os.environ.get(ENV_DIR)
    if env:
        path = Path(env).expanduser()
        if not _has_splits(path):
            raise DataError(f"${ENV_DIR}={env}: expected {' and '.join(SPLITS)} there")
        return path
    cached = cache_dir()
    if _has_splits(cached):
        return cached
    why = "downloads disabled (--no-download)"
    if allow_download:
        try:
            return download(cached, client=client)
        except Exception as exc:  # offline, DNS, proxy, HTTP error: all end in the same advice
            why = f"download from {SOURCE} failed: {exc}"
    raise DataError(
        f"GSM8K data not found: pass --data-dir DIR (a directory with {' and '.join(SPLITS)}), "
        f"or set ${ENV_DIR}, or put the files in {cached}; {why}"
    )


def read_split(path: Path) -> list[Problem]:
    problems = []
    with open(path, encoding="utf-8") as fh:
        for lineno, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
                problem = Problem(len(problems), row["question"], row["answer"])
                gold_answer(problem.answer)
            except (json.JSONDecodeError, KeyError, TypeError, GoldAnswerError) as exc:
                raise DataError(f"{path}:{lineno}: not a GSM8K record: {exc}") from exc
            problems.append(problem)
    if not problems:
        raise DataError(f"{path}: no records")
    return problems


def load(data_dir: str | None = None, allow_download: bool = True, check: bool = True) -> tuple[Path, list[Problem], list[Problem]]:
    """(directory, test problems, train problems)."""
    directory = locate(data_dir, allow_download=allow_download)
    if check:
        verify(directory)
    return directory, read_split(directory / "test.jsonl"), read_split(directory / "train.jsonl")


def select(test: list[Problem], num_questions: int | None = None, sample: int | None = None,
           seed: int = 0) -> list[Problem]:
    """The first ``num_questions``, or a ``sample`` drawn with ``seed`` (in index order), or all."""
    if num_questions is not None and sample is not None:
        raise ValueError("--num-questions and --sample are exclusive")
    n = num_questions if num_questions is not None else sample
    if n is not None and not 1 <= n <= len(test):
        raise ValueError(f"asked for {n} questions; the test split has {len(test)}")
    if sample is not None:
        return [test[i] for i in sorted(random.Random(seed).sample(range(len(test)), sample))]
    return list(test[:n]) if n is not None else list(test)
