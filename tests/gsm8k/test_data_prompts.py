"""GSM8K runner: where the data comes from (no network), which questions run, and the prompts built from them."""

import json
import shutil

import httpx
import pytest

from sglang_overlay_gsm8k import data, prompts
from sglang_overlay_gsm8k.scoring import extract_prediction, gold_answer
from tests.conftest import GSM8K_DIR


@pytest.fixture(scope="module")
def splits():
    _, test, train = data.load(str(GSM8K_DIR), allow_download=False)
    return test, train


@pytest.fixture
def no_env(monkeypatch, tmp_path):
    monkeypatch.delenv(data.ENV_DIR, raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    return tmp_path


def _copy(dst, with_sums=True):
    dst.mkdir(parents=True)
    for name in ("test.jsonl", "train.jsonl", "LICENSE") + (("SHA256SUMS",) if with_sums else ()):
        shutil.copy(GSM8K_DIR / name, dst / name)
    return dst


def test_shared_copy_loads_verified(splits):
    test, train = splits
    assert (len(test), len(train)) == (data.TEST_SIZE, 7473)
    assert [p.index for p in test[:3]] == [0, 1, 2]
    assert data._expected_hashes(GSM8K_DIR) == data.KNOWN_SHA256  # the shared SHA256SUMS is the published one


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


def test_modified_copy_is_refused(tmp_path):
    copy = _copy(tmp_path / "d")
    with open(copy / "test.jsonl", "a") as fh:
        fh.write(json.dumps({"question": "1+1?", "answer": "2\n#### 2"}) + "\n")
    with pytest.raises(data.DataError, match="sha256"):
        data.load(str(copy), allow_download=False)


def test_custom_set_without_sums_loads_and_bad_lines_name_their_place(tmp_path):
    d = tmp_path / "custom"
    d.mkdir()
    rows = [{"question": "What is 2+2?", "answer": "2+2=4\n#### 4"}]
    (d / "test.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (d / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    _, test, _ = data.load(str(d), allow_download=False)
    assert gold_answer(test[0].answer) == 4
    (d / "train.jsonl").write_text(json.dumps(rows[0]) + "\n" + '{"question": "no answer"}\n')
    with pytest.raises(data.DataError, match=r"train.jsonl:2"):
        data.load(str(d), allow_download=False)


def test_selection(splits):
    test, _ = splits
    assert [p.index for p in data.select(test, num_questions=50)] == list(range(50))
    assert len(data.select(test)) == 1319
    a = data.select(test, sample=200, seed=7)
    assert [p.index for p in a] == [p.index for p in data.select(test, sample=200, seed=7)]
    assert [p.index for p in a] != [p.index for p in data.select(test, sample=200, seed=8)]
    assert len({p.index for p in a}) == 200 and [p.index for p in a] == sorted(p.index for p in a)
    for bad in (dict(num_questions=0), dict(num_questions=1320), dict(sample=5000)):
        with pytest.raises(ValueError):
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
    assert not any(p.question in prefix for p in test[:100])  # no test question leaks into the shots
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
