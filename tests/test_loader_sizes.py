"""Huge or broken sizes in a checkpoint are refused before anything is allocated (issue 24 item 6):
the config's shapes are compared with the safetensors headers before the model is built, sizes
are bounded, and deep JSON, huge ints, NUL bytes in a shard name and a config.json that links to
itself are each one CheckpointError naming the file and the field."""
from __future__ import annotations

import json
import os

import pytest
import torch

import kvlab.compute.loader as loader
from kvlab.compute.checkpoint_checks import MAX_DIM, check_tensor_shapes, parse_json
from kvlab.compute.config import CheckpointError, LlamaConfig

from test_loader import broken, good, raises, set_config  # noqa: F401  (good: the fixture)


@pytest.fixture
def no_build(monkeypatch):
    """Building a model is a test failure: every check here must come first."""
    def refuse(cfg):
        raise AssertionError(f"the model was built for {cfg}")
    monkeypatch.setattr(loader, "Llama", refuse)


@pytest.mark.parametrize("changes, file, field, match", [
    (dict(vocab_size=10**9), "model.safetensors", "lm_head.weight", "vs config (1000000000, 64)"),
    (dict(num_hidden_layers=10**6), "config.json", "num_hidden_layers", "needs 9,000,003 tensors"),
    (dict(hidden_size=2**20), "model.safetensors", None, "mismatched shapes"),
    (dict(num_attention_heads=2**40, num_key_value_heads=2**40, head_dim=16), "config.json", "num_attention_heads",
     f"larger than {MAX_DIM:,}"),
    (dict(intermediate_size=2**40), "config.json", "intermediate_size", "larger than"),
    (dict(max_position_embeddings=10**15), "config.json", "max_position_embeddings", "larger than"),
])
def test_a_huge_config_is_refused_against_the_headers_before_the_model_is_built(good, tmp_path, no_build, changes,
                                                                                file, field, match):
    folder = broken(good, tmp_path)
    set_config(folder, **changes)
    err = raises(folder, file, field, match)
    assert len(str(err)) < 1500, "at most a few tensors are listed"


def test_a_huge_config_names_the_shard_that_holds_the_tensor(good, tmp_path, no_build):
    folder = broken(good, tmp_path, "sharded")
    set_config(folder, vocab_size=10**9)
    index = json.loads((folder / "model.safetensors.index.json").read_text())
    raises(folder, index["weight_map"]["lm_head.weight"], "lm_head.weight", "vs config (1000000000, 64)")
    set_config(folder, num_hidden_layers=10**6)
    raises(folder, "config.json", "num_hidden_layers")


def test_a_config_nested_100000_deep_is_one_error(good, tmp_path):
    folder = broken(good, tmp_path)
    (folder / "config.json").write_text('{"rope_scaling": ' + "[" * 100_000 + "]" * 100_000 + "}")
    raises(folder, "config.json", "line 1 column 100017", "nested 100,001 levels deep")


@pytest.mark.parametrize("digits", [30, 4_000, 5_000])
def test_a_long_int_names_its_key(good, tmp_path, digits):
    """A 5,000-digit int is past Python's int-from-text limit (a ValueError inside json); 4,000 is not."""
    folder = broken(good, tmp_path)
    cfg = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps(dict(cfg, vocab_size=0)).replace(
        '"vocab_size": 0', '"vocab_size": ' + "9" * digits))
    raises(folder, "config.json", "vocab_size", f"{digits:,}-digit int")
    (folder / "config.json").write_text(json.dumps(dict(cfg, rope_scaling={"rope_type": "linear", "factor": 0})).replace(
        '"factor": 0', '"factor": -' + "1" * digits))
    raises(folder, "config.json", "rope_scaling.factor")


def test_a_shard_name_with_a_nul_byte_is_refused(good, tmp_path):
    folder = broken(good, tmp_path, "sharded")
    path = folder / "model.safetensors.index.json"
    index = json.loads(path.read_text())
    index["weight_map"]["model.norm.weight"] = "model-00001\x00-of-00003.safetensors"
    path.write_text(json.dumps(index))
    raises(folder, "model.safetensors.index.json", "weight_map['model.norm.weight']", "NUL byte")


def test_a_config_that_links_to_itself_is_refused(good, tmp_path):
    folder = broken(good, tmp_path)
    (folder / "config.json").unlink()
    os.symlink("config.json", folder / "config.json")
    raises(folder, "config.json", match="cannot be resolved")


def test_an_oversized_json_file_is_refused_unread(good, tmp_path, monkeypatch):
    monkeypatch.setattr(loader, "MAX_JSON_BYTES", 100)
    raises(broken(good, tmp_path), "config.json", match="a JSON file of a checkpoint is at most 100")


def test_build_model_compares_shapes_before_building(no_build):
    """The GGUF path (build_model with tensors in memory) is guarded the same way."""
    cfg = LlamaConfig(vocab_size=10**9, hidden_size=64, num_attention_heads=4, num_key_value_heads=2,
                      intermediate_size=96, num_hidden_layers=1)
    tensors = {"model.embed_tokens.weight": torch.zeros(300, 64)}
    with pytest.raises(CheckpointError, match="num_hidden_layers=1 needs|missing tensors") as e:
        loader.build_model(cfg, tensors, file_of=lambda field: "x.gguf")
    assert e.value.file == "x.gguf"


def test_the_checks_alone():
    with pytest.raises(CheckpointError, match="num_hidden_layers=1,000,000 needs 9,000,002 tensors"):
        check_tensor_shapes(LlamaConfig(num_hidden_layers=10**6), {})
    with pytest.raises(CheckpointError, match="hidden_size=a 1,001-digit int is larger") as e:
        check_tensor_shapes(LlamaConfig(hidden_size=4 * 10**1000, head_dim=32), {})
    assert e.value.field == "hidden_size"
    assert parse_json('{"a": [1, {"b": 12345678901234567890}]}', "f.json") == {"a": [1, {"b": 12345678901234567890}]}
    with pytest.raises(CheckpointError, match=r"a\[1\]\.b is a 21-digit int") as e:
        parse_json('{"a": [1, {"b": 123456789012345678901}]}', "f.json")
    assert (e.value.file, e.value.field) == ("f.json", "a[1].b")
    deep = '{"x": "' + "[" * 5000 + '",\n "y": ' + "[" * 100_000 + "]" * 100_000 + "}"  # brackets in strings do not count
    with pytest.raises(CheckpointError, match=r"nested 100,001 levels deep \(at line 2 column 100006\)"):
        parse_json(deep, "f.json")
