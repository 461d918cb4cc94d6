"""Where the GSM8K splits come from, and their integrity.

Lookup order for the directory holding ``test.jsonl`` and ``train.jsonl``:
``--data-dir``, then ``$SGLANG_OVERLAY_GSM8K_DIR``, then the cache
(``~/.cache/sglang-overlay/gsm8k``, under ``$XDG_CACHE_HOME`` when set), then a
download of the public ``openai/grade-school-math`` files (MIT; the LICENSE is
saved beside them) into the cache. Offline with nothing found: a clear error
naming ``--data-dir``. A directory that was named explicitly but lacks the files
is an error, never a silent fall-through.

Integrity (``verify``), decided before any request is sent:

- a ``SHA256SUMS`` beside the splits must list both and match both (the shared
  copy has one; a download writes one after checking the published hashes);
- the cache is the runner's copy of the published files, so it must hold exactly
  them (``KNOWN_SHA256``) whether or not its ``SHA256SUMS`` survived;
- any other directory is accepted and named by what it is: ``published`` (the
  public files), ``fixture`` (sglang-overlay's committed test excerpt, the first
  60 test / 400 train lines unchanged), ``SHA256SUMS`` (its own sums matched) or
  ``unverified`` (a custom set without sums). The summary records that name and
  the test split's SHA-256, so a baseline from other data is noted.

Cost: one SHA-256 pass over both files (about 5 MB for the full splits, some ms),
then one JSON parse per line.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

from sglang_overlay_gsm8k.scoring import GoldAnswerError, gold_answer

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
# sglang-overlay's committed fixture (tests/data/gsm8k): the first 60 test / 400 train lines of the public files.
FIXTURE_SHA256 = {
    "test.jsonl": "4a665a79d70d7d83f14400fdb75f421e201ce1ae8ec94fa87157e5a3feae75aa",
    "train.jsonl": "2be6fd98da24d03023c1fbcf78d674753821c1a630764e78e156bf842c113a1b",
}
TEST_SIZE = 1319
# What verify() says about a directory, strongest first.
PUBLISHED, FIXTURE, OWN_SUMS, UNVERIFIED = "published", "fixture", "SHA256SUMS", "unverified"


class DataError(RuntimeError):
    """The dataset cannot be found, fetched or read."""


@dataclass(frozen=True)
class Problem:
    index: int  # position in its split (0-based); the question id
    question: str
    answer: str  # the full worked answer, ending in "#### N"


class Dataset(NamedTuple):
    directory: Path
    test: list[Problem]
    train: list[Problem]
    source: str  # PUBLISHED, FIXTURE, OWN_SUMS or UNVERIFIED
    test_sha256: str


def cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "sglang-overlay" / "gsm8k"


def sha256_file(path: Path) -> str:
    with open(path, "rb") as fh:
        return hashlib.file_digest(fh, "sha256").hexdigest()


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


def _refuse(path: Path, got: str, want: str, why: str) -> DataError:
    return DataError(
        f"{path}: sha256 {got} is not the expected {want} ({why}); delete it or point --data-dir at a good copy"
    )


def verify(directory: Path, *, published_only: bool = False) -> tuple[str, dict[str, str]]:
    """(source, sha256 per split) for the splits in ``directory``; DataError when they fail a check.

    ``published_only``: the directory is the runner's cache and must hold the published files."""
    got = {name: sha256_file(directory / name) for name in SPLITS}
    has_sums = (directory / "SHA256SUMS").is_file()
    if has_sums:
        expected = _expected_hashes(directory)
        unlisted = [name for name in SPLITS if name not in expected]
        if unlisted:
            raise DataError(
                f"{directory / 'SHA256SUMS'} lists no sha256 for {' or '.join(unlisted)}: "
                "a sums file that checks only part of the data is refused; fix or delete it"
            )
        for name in SPLITS:
            if got[name] != expected[name]:
                raise _refuse(directory / name, got[name], expected[name], "truncated or modified copy?")
    if got == KNOWN_SHA256:
        return PUBLISHED, got
    if published_only:
        name = next(n for n in SPLITS if got[n] != KNOWN_SHA256[n])
        raise _refuse(
            directory / name,
            got[name],
            KNOWN_SHA256[name],
            "the runner's cache holds only the published openai/grade-school-math files",
        )
    if got == FIXTURE_SHA256:
        return FIXTURE, got
    return (OWN_SUMS if has_sums else UNVERIFIED), got


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


def load(data_dir: str | None = None, allow_download: bool = True) -> Dataset:
    """Locate, verify and read both splits (the cache must hold the published files)."""
    directory = locate(data_dir, allow_download=allow_download)
    is_cache = directory.resolve() == cache_dir().resolve()
    source, hashes = verify(directory, published_only=is_cache)
    return Dataset(
        directory,
        read_split(directory / "test.jsonl"),
        read_split(directory / "train.jsonl"),
        source,
        hashes["test.jsonl"],
    )


def select(
    test: list[Problem], num_questions: int | None = None, sample: int | None = None, seed: int = 0
) -> list[Problem]:
    """The first ``num_questions``, or a ``sample`` drawn with ``seed`` (in index order), or all."""
    if num_questions is not None and sample is not None:
        raise ValueError("--num-questions and --sample are exclusive")
    n = num_questions if num_questions is not None else sample
    if n is not None and not 1 <= n <= len(test):
        raise ValueError(f"asked for {n} questions; the test split has {len(test)}")
    if sample is not None:
        return [test[i] for i in sorted(random.Random(seed).sample(range(len(test)), sample))]
    return list(test[:n]) if n is not None else list(test)
