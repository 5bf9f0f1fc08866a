"""hf_config by model id, read offline from a Hugging Face cache the test builds as
huggingface_hub lays it out (https://huggingface.co/docs/hub/local-cache): refs/{revision}
holding a commit, snapshots/{commit}/config.json; $HF_HUB_CACHE before $HF_HOME/hub before
~/.cache/huggingface/hub; a path that exists beside the scenario wins; a model or file the
cache lacks is one line naming where it looked and how to get it."""

from __future__ import annotations

import shutil

import pytest

from zerosim.errors import InputError
from zerosim.scenario.load import build_scenario

from tests.conftest import ROOT, assert_one_line_error, run_zerosim

HF = ROOT / "tests/fixtures/hf"
MISTRAL = HF / "mistral__Mistral-7B-v0.1.json"
GEMMA = HF / "gemma__gemma-2b-it.json"
COMMIT = "26bca36bde8333b5d7f72e9ed20ccda6a618af24"  # any 40 hex digits: a snapshot's name
OTHER = "0" * 40


def cache_with(root, repo="models--mistralai--Mistral-7B-v0.1", refs=None, snapshots=None):
    """A cache under `root`: refs {revision: commit}, snapshots {commit: config file or None}."""
    folder = root / repo
    for revision, commit in (refs or {"main": COMMIT}).items():
        (folder / "refs").mkdir(parents=True, exist_ok=True)
        (folder / "refs" / revision).write_text(commit)  # huggingface_hub writes no newline
    for commit, source in (snapshots or {COMMIT: MISTRAL}).items():
        (folder / "snapshots" / commit).mkdir(parents=True, exist_ok=True)
        if source is not None:
            shutil.copy(source, folder / "snapshots" / commit / "config.json")
    return root


@pytest.fixture
def env(monkeypatch, tmp_path):
    """No cache variable set and a home of the test's own, so no real cache is ever read."""
    for name in ("HF_HUB_CACHE", "HF_HOME"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    return monkeypatch


def load(hf_config, base_dir):
    tables = {"model": {"hf_config": hf_config}, "training": {"seq_len": 1024}}
    return build_scenario(tables, base_dir=base_dir).model


def test_a_model_id_reads_through_refs_main_in_hf_hub_cache(env, tmp_path):
    env.setenv("HF_HUB_CACHE", str(cache_with(tmp_path / "hub")))
    env.setenv("HF_HOME", str(tmp_path / "elsewhere"))  # HF_HUB_CACHE takes priority
    model = load("mistralai/Mistral-7B-v0.1", tmp_path / "scenarios")
    assert (model.layers, model.hidden, model.kv_heads, model.sliding_window) == (
        32, 4096, 8, 4096)
    assert model.name == "mistralai/Mistral-7B-v0.1"  # the file names none; a hash would be
    assert model.hf_config == "mistralai/Mistral-7B-v0.1"  # what the user wrote is kept


def test_hf_home_and_then_the_home_cache(env, tmp_path):
    cache_with(tmp_path / "hfhome" / "hub")
    env.setenv("HF_HOME", str(tmp_path / "hfhome"))
    assert load("mistralai/Mistral-7B-v0.1", tmp_path).layers == 32
    env.delenv("HF_HOME")
    cache_with(tmp_path / "home" / ".cache" / "huggingface" / "hub",
               snapshots={COMMIT: GEMMA})
    assert load("mistralai/Mistral-7B-v0.1", tmp_path).layers == 18  # gemma-2b's, this cache


def test_a_revision_by_ref_or_by_commit(env, tmp_path):
    env.setenv("HF_HUB_CACHE", str(cache_with(
        tmp_path / "hub", refs={"main": COMMIT, "v2": OTHER},
        snapshots={COMMIT: MISTRAL, OTHER: GEMMA})))
    assert load("mistralai/Mistral-7B-v0.1@v2", tmp_path).layers == 18
    assert load(f"mistralai/Mistral-7B-v0.1@{COMMIT}", tmp_path).layers == 32
    assert load("mistralai/Mistral-7B-v0.1@main", tmp_path).layers == 32


def test_a_model_without_an_organisation(env, tmp_path):
    env.setenv("HF_HUB_CACHE", str(cache_with(tmp_path / "hub", repo="models--gpt2",
                                              snapshots={COMMIT: HF / "gpt2__gpt2.json"})))
    assert load("gpt2", tmp_path).hidden == 768


def test_a_path_beside_the_scenario_wins_over_the_cache(env, tmp_path):
    env.setenv("HF_HUB_CACHE", str(cache_with(tmp_path / "hub")))
    local = tmp_path / "scenarios" / "mistralai" / "Mistral-7B-v0.1"
    local.mkdir(parents=True)
    shutil.copy(GEMMA, local / "config.json")
    assert load("mistralai/Mistral-7B-v0.1", tmp_path / "scenarios").layers == 18


def test_a_model_the_cache_lacks_is_one_line_naming_where_and_how(env, tmp_path):
    hub = cache_with(tmp_path / "hub")
    env.setenv("HF_HUB_CACHE", str(hub))
    with pytest.raises(InputError) as error:
        load("google/gemma-2-9b", tmp_path)
    text = str(error.value)
    assert "\n" not in text
    for fragment in (f"no file {tmp_path / 'google/gemma-2-9b'}", str(hub),
                     "models--google--gemma-2-9b/refs/main",
                     "huggingface-cli download google/gemma-2-9b config.json"):
        assert fragment in text, (fragment, text)
    with pytest.raises(InputError, match="refs/v9.*--revision v9"):
        load("mistralai/Mistral-7B-v0.1@v9", tmp_path)


def test_a_snapshot_without_config_json_is_one_line(env, tmp_path):
    env.setenv("HF_HUB_CACHE", str(cache_with(tmp_path / "hub", snapshots={COMMIT: None})))
    with pytest.raises(InputError, match=f"snapshot .*{COMMIT} has no config.json: get it "
                                         f"with `huggingface-cli download"):
        load("mistralai/Mistral-7B-v0.1", tmp_path)


def test_a_damaged_ref_is_one_line(env, tmp_path):
    env.setenv("HF_HUB_CACHE", str(cache_with(tmp_path / "hub", refs={"main": "not a hash"})))
    with pytest.raises(InputError, match="refs/main holds 'not a hash', not a commit hash"):
        load("mistralai/Mistral-7B-v0.1", tmp_path)


def test_a_missing_json_path_is_reported_as_a_path(env, tmp_path):
    with pytest.raises(InputError, match="hf_config not found: .*nowhere/config.json"):
        load("nowhere/config.json", tmp_path)


def test_the_command_line_reads_a_model_id_and_refuses_a_missing_one(env, tmp_path):
    env.setenv("HF_HUB_CACHE", str(cache_with(tmp_path / "hub")))
    env.chdir(tmp_path)
    scenario = ROOT / "scenarios/llama2_7b_hf_64gpu.toml"
    done = run_zerosim("memory", str(scenario), "--json", "--set",
                       "model.hf_config=mistralai/Mistral-7B-v0.1")
    assert done.code == 0, done.stderr
    assert '"mistralai/Mistral-7B-v0.1"' in done.stdout
    missing = run_zerosim("memory", str(scenario), "--set", "model.hf_config=org/absent")
    assert_one_line_error(missing, "models--org--absent/refs/main",
                          "huggingface-cli download org/absent config.json")
