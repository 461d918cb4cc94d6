"""GSM8K runner: where the data comes from (no network), its integrity checks, which questions run, and the
prompts built from them. Everything runs on the committed fixture (tests/data/gsm8k); only the checks of the
full published files themselves need the full splits (requires_full_gsm8k)."""

import json
import shutil

import httpx
import pytest

from sglang_overlay_gsm8k import data, prompts
from sglang_overlay_gsm8k.scoring import extract_prediction, gold_answer
from tests.gsm8k.full_splits import needs_full_gsm8k
from tests.support.env import GSM8K_DIR, full_gsm8k_dir


@pytest.fixture(scope="module")
def splits():
    loaded = data.load(str(GSM8K_DIR), allow_download=False)
    return loaded.test, loaded.train


@pytest.fixture
def no_env(monkeypatch, tmp_path):
    monkeypatch.delenv(data.ENV_DIR, raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    return tmp_path


def _sums(directory, hashes):
    (directory / "SHA256SUMS").write_text("".join(f"{h}  {name}\n" for name, h in hashes.items()))


def _copy(dst, src=GSM8K_DIR, with_sums=True):
    """A copy of the splits in ``src`` (with a SHA256SUMS of their own hashes unless told otherwise)."""
    dst.mkdir(parents=True)
    for name in ("test.jsonl", "train.jsonl", "LICENSE"):
        shutil.copy(src / name, dst / name)
    if with_sums:
        _sums(dst, {name: data.sha256_file(dst / name) for name in data.SPLITS})
    return dst


def _fake_published_cache(no_env):
    """The runner's cache holding the fixture under the published hashes' names: what a truncated download
    or an edited cache looks like (the real published files are 5 MB; the fixture stands in for them)."""
    cache = _copy(data.cache_dir(), with_sums=False)
    _sums(cache, data.KNOWN_SHA256)
    return cache


def test_the_fixture_loads_and_is_named_as_the_fixture(splits):
    test, train = splits
    loaded = data.load(str(GSM8K_DIR), allow_download=False)
    assert (len(test), len(train)) == (60, 400)
    assert [p.index for p in test[:3]] == [0, 1, 2]
    assert loaded.source == data.FIXTURE and not (GSM8K_DIR / "SHA256SUMS").exists()
    assert loaded.test_sha256 == data.FIXTURE_SHA256["test.jsonl"] == data.sha256_file(GSM8K_DIR / "test.jsonl")


@needs_full_gsm8k("checks the published sha256 of the full files, and that the fixture is their first lines")
def test_full_splits_are_the_published_files_and_the_fixture_is_their_prefix():
    full = full_gsm8k_dir()
    loaded = data.load(str(full), allow_download=False)
    assert (len(loaded.test), len(loaded.train)) == (data.TEST_SIZE, 7473)
    assert loaded.source == data.PUBLISHED and loaded.test_sha256 == data.KNOWN_SHA256["test.jsonl"]
    for name in data.SPLITS:
        fixture_lines = (GSM8K_DIR / name).read_text(encoding="utf-8").splitlines(keepends=True)
        full_lines = (full / name).read_text(encoding="utf-8").splitlines(keepends=True)
        assert full_lines[: len(fixture_lines)] == fixture_lines
    if (full / "SHA256SUMS").is_file():
        assert data._expected_hashes(full) == data.KNOWN_SHA256  # the shared SHA256SUMS is the published one


def test_sources_own_sums_and_unverified(tmp_path):
    custom = tmp_path / "custom"
    custom.mkdir()
    rows = [{"question": "What is 2+2?", "answer": "2+2=4\n#### 4"}]
    for name in data.SPLITS:
        (custom / name).write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert data.load(str(custom), allow_download=False).source == data.UNVERIFIED
    _sums(custom, {name: data.sha256_file(custom / name) for name in data.SPLITS})
    assert data.load(str(custom), allow_download=False).source == data.OWN_SUMS
    # the fixture stays the fixture with sums of its own beside it
    assert data.load(str(_copy(tmp_path / "fx")), allow_download=False).source == data.FIXTURE


def test_lookup_order_flag_then_env_then_cache(no_env, monkeypatch):
    cache = _copy(data.cache_dir())
    assert data.locate(None, allow_download=False) == cache
    env_copy = _copy(no_env / "env")
    monkeypatch.setenv(data.ENV_DIR, str(env_copy))
    assert data.locate(None, allow_download=False) == env_copy
    assert data.locate(str(GSM8K_DIR), allow_download=False) == GSM8K_DIR


def test_named_directory_without_files_is_an_error_not_a_fallthrough(no_env, monkeypatch):
    _copy(data.cache_dir())  # a good cache must not mask the bad flag or env var
    with pytest.raises(data.DataError, match="--data-dir"):
        data.locate(str(no_env / "empty"), allow_download=False)
    monkeypatch.setenv(data.ENV_DIR, str(no_env / "nowhere"))
    with pytest.raises(data.DataError, match=data.ENV_DIR):
        data.locate(None, allow_download=False)


def test_offline_with_nothing_found_names_the_flag(no_env):
    with pytest.raises(data.DataError, match="--data-dir") as info:
        data.locate(None, allow_download=False)
    assert "--no-download" in str(info.value)

    def refuse(request):  # what an offline machine does to the download
        raise httpx.ConnectError("no network", request=request)

    with httpx.Client(transport=httpx.MockTransport(refuse)) as client:
        with pytest.raises(data.DataError, match="--data-dir") as info:
            data.locate(None, client=client)
    assert "download from https://raw.githubusercontent.com/openai/grade-school-math" in str(info.value)
    assert not list(data.cache_dir().glob("*.jsonl"))  # nothing half-written


def _serving(directory):
    """An httpx transport that serves ``directory``'s files at the public URLs (a stand-in for GitHub)."""
    by_url = {url: directory / name for name, url in data.URLS.items()}

    def handler(request):
        path = by_url.get(str(request.url))
        return httpx.Response(200, content=path.read_bytes()) if path else httpx.Response(404)

    return httpx.MockTransport(handler)


def test_a_download_that_is_not_the_published_files_leaves_nothing(no_env):
    with httpx.Client(transport=_serving(GSM8K_DIR)) as client:
        with pytest.raises(data.DataError, match="expected sha256") as info:
            data.locate(None, client=client)
    assert "download from" in str(info.value)
    assert not list(data.cache_dir().glob("*.jsonl")) and not (data.cache_dir() / "SHA256SUMS").exists()


@needs_full_gsm8k("a download is accepted only with the published sha256, which only the full files have")
def test_a_download_of_the_published_files_fills_the_cache_with_its_sums(no_env):
    with httpx.Client(transport=_serving(full_gsm8k_dir())) as client:
        assert data.locate(None, client=client) == data.cache_dir()
    loaded = data.load(None, allow_download=False)
    assert loaded.directory == data.cache_dir() and loaded.source == data.PUBLISHED
    assert data._expected_hashes(data.cache_dir()) == data.KNOWN_SHA256
    assert (data.cache_dir() / "LICENSE").read_bytes() == (full_gsm8k_dir() / "LICENSE").read_bytes()


def test_modified_copy_is_refused(tmp_path):
    copy = _copy(tmp_path / "d")
    with open(copy / "test.jsonl", "a") as fh:
        fh.write(json.dumps({"question": "1+1?", "answer": "2\n#### 2"}) + "\n")
    with pytest.raises(data.DataError, match="sha256"):
        data.load(str(copy), allow_download=False)


def test_the_fixture_under_published_sums_is_refused(tmp_path):
    """A copy whose SHA256SUMS claims the published files must be them: the fixture is not let through."""
    copy = _copy(tmp_path / "d", with_sums=False)
    _sums(copy, data.KNOWN_SHA256)
    with pytest.raises(data.DataError, match=data.KNOWN_SHA256["test.jsonl"]):
        data.load(str(copy), allow_download=False)


def test_sums_that_leave_a_split_unchecked_are_refused(tmp_path):
    copy = _copy(tmp_path / "d", with_sums=False)
    (copy / "SHA256SUMS").write_text(f"{data.sha256_file(copy / 'test.jsonl')}  test.jsonl\n")
    with pytest.raises(data.DataError, match="lists no sha256 for train.jsonl"):
        data.load(str(copy), allow_download=False)


@pytest.mark.parametrize("how", ["lookup", "named"])
def test_the_cache_must_hold_the_published_files(no_env, how):
    """The cache is the runner's copy of the published files: anything else there is refused, with or
    without a SHA256SUMS beside it, found by the lookup or named with --data-dir."""
    cache = _fake_published_cache(no_env)
    arg = None if how == "lookup" else str(cache)
    with pytest.raises(data.DataError, match="sha256"):
        data.load(arg, allow_download=False)
    (cache / "SHA256SUMS").unlink()
    with pytest.raises(data.DataError, match="holds only the published"):
        data.load(arg, allow_download=False)


def test_custom_set_without_sums_loads_and_bad_lines_name_their_place(tmp_path):
    d = tmp_path / "custom"
    d.mkdir()
    rows = [{"question": "What is 2+2?", "answer": "2+2=4\n#### 4"}]
    (d / "test.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (d / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    test = data.load(str(d), allow_download=False).test
    assert gold_answer(test[0].answer) == 4
    (d / "train.jsonl").write_text(json.dumps(rows[0]) + "\n" + '{"question": "no answer"}\n')
    with pytest.raises(data.DataError, match=r"train.jsonl:2"):
        data.load(str(d), allow_download=False)


def test_selection(splits):
    test, _ = splits
    n = len(test)
    assert [p.index for p in data.select(test, num_questions=50)] == list(range(50))
    assert len(data.select(test)) == n
    a = data.select(test, sample=20, seed=7)
    assert [p.index for p in a] == [p.index for p in data.select(test, sample=20, seed=7)]
    assert [p.index for p in a] != [p.index for p in data.select(test, sample=20, seed=8)]
    assert len({p.index for p in a}) == 20 and [p.index for p in a] == sorted(p.index for p in a)
    for bad in (dict(num_questions=0), dict(num_questions=n + 1), dict(sample=n + 1)):
        with pytest.raises(ValueError, match=f"the test split has {n}"):
            data.select(test, **bad)
    with pytest.raises(ValueError, match="exclusive"):
        data.select(test, num_questions=5, sample=5)


def test_completion_prompt_has_k_train_shots_then_the_question(splits):
    test, train = splits
    prefix = prompts.few_shot_prefix(train[:5])
    prompt = prompts.completion_prompt(prefix, test[10])
    assert prompt.count("Question: ") == 6
    assert prompt.endswith(f"Question: {test[10].question}\nAnswer:")
    blocks = prompt.split("\n\n")
    assert len(blocks) >= 6
    for shot in train[:5]:
        assert f"Question: {shot.question}\nAnswer: {shot.answer}\n\n" in prompt
    assert not any(p.question in prefix for p in test)  # no test question leaks into the shots
    # every shot ends with its gold "#### N", the format the model should copy
    for shot in train[:5]:
        assert extract_prediction(shot.answer)[0] == gold_answer(shot.answer)
    assert prompts.completion_prompt(prompts.few_shot_prefix([]), test[0]) == f"Question: {test[0].question}\nAnswer:"
    assert all(stop not in shot.answer for stop in prompts.STOP for shot in train[:5])


def test_chat_turns(splits):
    test, train = splits
    msgs = prompts.chat_messages(train[:3], test[4], system="Solve step by step.")
    assert [m["role"] for m in msgs] == ["system"] + ["user", "assistant"] * 3 + ["user"]
    assert msgs[-1]["content"] == f"Question: {test[4].question}"
    assert msgs[2]["content"] == train[0].answer
    assert prompts.chat_messages([], test[0]) == [{"role": "user", "content": f"Question: {test[0].question}"}]
