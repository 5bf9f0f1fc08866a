"""Notes on the defaults that decide an answer (scenario/defaults.py): a Llama-3-8B read from its
config.json alone, as a new user writes it, is told which sequence, attention and accounting it
got and which key sets each; a key given silences its note; --json carries the same lines."""

from __future__ import annotations

from tests.conftest import ROOT, run_zerosim

LLAMA3 = ROOT / "tests/fixtures/hf/llama3__Meta-Llama-3-8B.json"


def scenario(tmp_path, training: str = "") -> str:
    path = tmp_path / "llama3.toml"
    path.write_text(f'[model]\nhf_config = "{LLAMA3}"\n\n[cluster]\ngpu = "H100-80GB"\n'
                    f'nodes = 8\n\n[training]\nzero_stage = 3\nmicro_batch = 2\n{training}')
    return str(path)


def notes(shown) -> list[str]:
    return [line.removeprefix("zerosim: note: ") for line in shown.stderr.splitlines()
            if line.startswith("zerosim: note: ")]


def test_a_config_alone_is_told_its_sequence_attention_and_accounting(tmp_path):
    shown = run_zerosim("memory", scenario(tmp_path), "--json")
    assert shown.code == 0
    said = notes(shown)
    assert len(said) == 3
    assert said[0].startswith("training.seq_len = 8192 comes from the config's position limit "
                              "(max_position_embeddings")
    assert said[1].startswith("training.flash_attention = false (the default)")
    assert "H100-80GB" in said[1]
    assert said[2].startswith("training.framework = 'zero' (the default)")
    assert shown.json["notes"] == said
    simulated = run_zerosim("simulate", scenario(tmp_path), "--stage", "3", "--json")
    assert simulated.json[0]["default_notes"] == said


def test_each_key_given_silences_its_note(tmp_path):
    given = "seq_len = 4096\nflash_attention = true\nframework = 'fsdp2'\n"
    said_false = notes(run_zerosim("memory", scenario(tmp_path, "flash_attention = false\n")))
    assert not any(n.startswith("training.flash_attention") for n in said_false)  # said: no note
    shown = run_zerosim("memory", scenario(tmp_path, given), "--json")
    assert notes(shown) == [] and "notes" not in shown.json
    for key, value in (("seq_len", "4096"), ("flash_attention", "true"),
                       ("framework", "'fsdp2'")):
        said = notes(run_zerosim("memory", scenario(tmp_path, f"{key} = {value}\n")))
        assert len(said) == 2 and not any(n.startswith(f"training.{key} ") for n in said)


def test_deepspeed_named_without_its_bucket_is_told_deepspeeds(tmp_path):
    base = "seq_len = 4096\nflash_attention = true\nframework = 'deepspeed'\n"
    said = notes(run_zerosim("memory", scenario(tmp_path, base)))
    assert said == ["training.reduce_bucket_MiB = 25 (zerosim's default) where deepspeed's "
                    "reduce bucket defaults to 500,000,000 elements (953.674 MiB in 16 bits): set "
                    "it, or read your ds_config with --deepspeed"]
    assert notes(run_zerosim("memory", scenario(tmp_path, base + "reduce_bucket_MiB = 500\n"))) \
        == []


def test_a_bare_parameter_count_has_no_shape_to_default():
    shown = run_zerosim("memory", ROOT / "scenarios/zero_paper_7b5_64gpu.toml")
    assert notes(shown) == []


def test_the_bucket_note_holds_for_a_table_of_every_stage(tmp_path):
    """The tables show stages 1-3 whatever training.zero_stage says (review: none at stage 0)."""
    base = "seq_len = 4096\nflash_attention = true\nframework = 'deepspeed'\n"
    path = scenario(tmp_path, base).replace("zero_stage = 3", "zero_stage = 0")
    text = open(path).read().replace("zero_stage = 3", "zero_stage = 0")
    open(path, "w").write(text)
    said = notes(run_zerosim("memory", path))
    assert len(said) == 1 and said[0].startswith("training.reduce_bucket_MiB = 25")
