"""Every way a checkpoint folder can be wrong raises the loader's one error type, CheckpointError,
naming the file and the field; no file outside the folder is read (issue 14 item 1)."""
from __future__ import annotations

import json
import os
import pickle
import shutil

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from kvlab.compute.config import CheckpointError, LlamaConfig
from kvlab.compute.loader import load_pretrained
from kvlab.compute.tokenizer import load_tokenizer

from test_model import HF_CONFIG, random_hf_tensors, write_checkpoint


@pytest.fixture(scope="module")
def good(tmp_path_factory):
    """A valid single-file checkpoint and a valid 3-shard one, copied by each test that breaks one."""
    root = tmp_path_factory.mktemp("good")
    write_checkpoint(root / "single")
    write_checkpoint(root / "sharded", shards=3)
    return root


def broken(good, tmp_path, which="single"):
    shutil.copytree(good / which, tmp_path / "ckpt", symlinks=True)
    return tmp_path / "ckpt"


def raises(folder, file, field=None, match=None) -> CheckpointError:
    with pytest.raises(CheckpointError) as e:
        load_pretrained(folder)
    err = e.value
    assert err.file is not None and os.path.basename(err.file) == file, (err.file, str(err))
    assert err.file in str(err)
    if field is not None:
        assert err.field == field, (err.field, str(err))
        assert field.split("[")[0] in str(err), str(err)
    if match is not None:
        assert match in str(err), str(err)
    return err


def set_config(folder, **changes):
    cfg = dict(HF_CONFIG, **changes)
    (folder / "config.json").write_text(json.dumps(cfg))


# ---- config.json -------------------------------------------------------------------------------

@pytest.mark.parametrize("text,match", [
    ("{not json", "not valid JSON"),
    ("", "not valid JSON"),
    ("[1, 2, 3]", "JSON object, got list"),
    ('"a string"', "JSON object, got str"),
])
def test_config_that_is_not_a_json_object(good, tmp_path, text, match):
    folder = broken(good, tmp_path)
    (folder / "config.json").write_text(text)
    raises(folder, "config.json", match=match)


def test_config_that_is_not_utf8(good, tmp_path):
    folder = broken(good, tmp_path)
    (folder / "config.json").write_bytes(b"\xff\xfe{}")
    raises(folder, "config.json", match="cannot be read")


@pytest.mark.parametrize("field,value,match", [
    ("num_key_value_heads", 0, "num_key_value_heads=0 must be an int >= 1"),
    ("num_key_value_heads", 3, "num_key_value_heads=3"),
    ("hidden_size", "128", "hidden_size='128' must be an int >= 1 (got str)"),
    ("hidden_size", 65, "not a multiple of num_attention_heads"),
    ("vocab_size", -1, "vocab_size=-1"),
    ("num_hidden_layers", True, "num_hidden_layers=True"),
    ("intermediate_size", 96.0, "intermediate_size=96.0"),
    ("max_position_embeddings", 0, "max_position_embeddings=0"),
    ("rms_norm_eps", -1, "rms_norm_eps=-1"),
    ("rms_norm_eps", float("nan"), "rms_norm_eps=nan"),
    ("rope_theta", 0, "rope_theta=0"),
    ("rope_scaling", "abc", "rope_scaling='abc'"),
    ("eos_token_id", [], "eos_token_id=[]"),
    ("eos_token_id", 300, "eos_token_id=300"),
    ("bos_token_id", -1, "bos_token_id=-1"),
    ("tie_word_embeddings", "yes", "tie_word_embeddings='yes'"),
    ("head_dim", 15, "head_dim=15"),
    ("hidden_act", "gelu", "hidden_act='gelu'"),
    ("attention_bias", True, "attention_bias=True"),
    ("mlp_bias", True, "mlp_bias=True"),
    ("torch_dtype", "int8", "torch_dtype='int8'"),
    ("model_type", "gpt2", "gpt2"),
    ("sliding_window", 64, "sliding_window=64"),
    ("quantization_config", {"quant_method": "gptq"}, "quantized"),
    ("partial_rotary_factor", 0.5, "partial_rotary_factor=0.5"),
])
def test_bad_config_values_name_the_file_and_the_field(good, tmp_path, field, value, match):
    folder = broken(good, tmp_path)
    set_config(folder, **{field: value})
    raises(folder, "config.json", field, match)


@pytest.mark.parametrize("rope_scaling,field", [
    ({"rope_type": "yarn", "factor": 2.0}, "rope_scaling.rope_type"),
    ({"type": "dynamic", "factor": 2.0}, "rope_scaling.rope_type"),
    ({"rope_type": "linear"}, "rope_scaling.factor"),
    ({"rope_type": "linear", "factor": "2"}, "rope_scaling.factor"),
    ({"rope_type": "linear", "factor": -2.0}, "rope_scaling.factor"),
    ({"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0},
     "rope_scaling.original_max_position_embeddings"),
    ({"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 4.0, "high_freq_factor": 4.0,
      "original_max_position_embeddings": 8192}, "rope_scaling.high_freq_factor"),
])
def test_rope_scaling_kvlab_cannot_honour_is_refused(good, tmp_path, rope_scaling, field):
    folder = broken(good, tmp_path)
    set_config(folder, rope_scaling=rope_scaling)
    raises(folder, "config.json", field)


def test_rope_parameters_layout_is_read_and_checked(good, tmp_path):
    folder = broken(good, tmp_path)
    cfg = {k: v for k, v in HF_CONFIG.items() if k not in ("rope_theta", "rope_scaling")}
    rp = {"rope_theta": 5e5, "rope_type": "linear", "factor": 2.0}
    (folder / "config.json").write_text(json.dumps(dict(cfg, rope_parameters=rp)))
    model, _ = load_pretrained(folder)
    c = model.config
    assert (c.rope_theta, c.rope_scaling) == (5e5, {"rope_type": "linear", "factor": 2.0})
    assert c.rope_source == "rope_parameters"
    for bad, field in [("abc", "rope_parameters"), ({"rope_theta": 5e5, "rope_type": "yarn", "factor": 2.0},
                                                    "rope_parameters.rope_type"),
                       ({"full_attention": {"rope_theta": 1e4}}, "rope_parameters")]:
        (folder / "config.json").write_text(json.dumps(dict(cfg, rope_parameters=bad)))
        raises(folder, "config.json", field)
    # both layouts present and disagreeing: refused, naming the top-level key
    (folder / "config.json").write_text(json.dumps(dict(cfg, rope_parameters=rp, rope_theta=1e4)))
    raises(folder, "config.json", "rope_theta", "disagrees")
    (folder / "config.json").write_text(json.dumps(dict(cfg, rope_parameters=rp, rope_theta=5e5,
                                                       rope_scaling={"type": "linear", "factor": 2.0})))
    assert load_pretrained(folder)[0].config.rope_source == "rope_parameters"     # agreeing: fine


def test_config_says_which_rope_layout_it_used():
    assert LlamaConfig.from_dict({"rope_theta": 5e5}).rope_source == "rope_theta"
    assert LlamaConfig.from_dict({}).rope_source == "default"
    new = LlamaConfig.from_dict({"rope_parameters": {"rope_theta": 5e5, "rope_type": "default"}, "dtype": "bfloat16"})
    assert (new.rope_source, new.rope_theta, new.rope_scaling) == ("rope_parameters", 5e5, None)
    assert new.torch_dtype == "bfloat16"
    assert LlamaConfig.from_dict(new.to_dict()) == new and "rope_source" not in new.to_dict()


JSON = st.recursive(st.none() | st.booleans() | st.integers(-10**20, 10**20) | st.floats() | st.text(max_size=8),
                    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
                    max_leaves=6)
KEYS = sorted(set(HF_CONFIG) | {"rope_parameters", "sliding_window", "head_dim", "dtype", "quantization_config",
                                "partial_rotary_factor", "type", "rope_type", "factor"})


@given(changes=st.dictionaries(st.sampled_from(KEYS), JSON, max_size=3),
       rope=st.dictionaries(st.sampled_from(["rope_type", "type", "factor", "rope_theta", "low_freq_factor",
                                             "high_freq_factor", "original_max_position_embeddings"]),
                            JSON | st.sampled_from(["linear", "llama3", "default"]), max_size=5))
def test_any_json_values_give_a_config_or_a_checkpoint_error(changes, rope):
    for d in (dict(HF_CONFIG, **changes), dict(HF_CONFIG, rope_scaling=rope), dict(HF_CONFIG, rope_parameters=rope)):
        try:
            cfg = LlamaConfig.from_dict(d, file="c/config.json")
        except CheckpointError as e:
            assert e.file == "c/config.json" and e.field, str(e)
        else:
            again = LlamaConfig.from_dict(cfg.to_dict()).to_dict()          # (as JSON: NaN == NaN there)
            assert json.dumps(again, sort_keys=True) == json.dumps(cfg.to_dict(), sort_keys=True)


# ---- weights -----------------------------------------------------------------------------------

def test_truncated_and_random_safetensors(good, tmp_path):
    folder = broken(good, tmp_path)
    data = (folder / "model.safetensors").read_bytes()
    for bad in (data[: len(data) // 2], data[:5], os.urandom(4096), b""):
        (folder / "model.safetensors").write_bytes(bad)
        raises(folder, "model.safetensors", match="not a readable safetensors file")


def test_a_corrupt_shard_is_named(good, tmp_path):
    folder = broken(good, tmp_path, "sharded")
    (folder / "model-00002-of-00003.safetensors").write_bytes(b"\x00" * 100)
    raises(folder, "model-00002-of-00003.safetensors")


@pytest.mark.parametrize("index,field", [
    ({"metadata": {}}, "weight_map"),
    ({"weight_map": {}}, "weight_map"),
    ({"weight_map": ["model-00001-of-00003.safetensors"]}, "weight_map"),
    ([], "weight_map"),
    ({"weight_map": {"model.norm.weight": 7}}, "weight_map['model.norm.weight']"),
])
def test_index_without_a_usable_weight_map(good, tmp_path, index, field):
    folder = broken(good, tmp_path, "sharded")
    (folder / "model.safetensors.index.json").write_text(json.dumps(index))
    raises(folder, "model.safetensors.index.json", field)


def test_index_that_is_not_json_or_lists_a_tensor_its_shard_lacks(good, tmp_path):
    folder = broken(good, tmp_path, "sharded")
    path = folder / "model.safetensors.index.json"
    index = json.loads(path.read_text())
    path.write_text("{")
    raises(folder, "model.safetensors.index.json", match="not valid JSON")
    wm = index["weight_map"]
    wm["model.norm.weight"] = next(s for s in set(wm.values()) if s != wm["model.norm.weight"])
    path.write_text(json.dumps(index))
    raises(folder, wm["model.norm.weight"], "model.norm.weight", "listed in")


def test_quantized_or_integer_tensors_are_refused(good, tmp_path):
    folder = tmp_path / "ckpt"
    t = random_hf_tensors(HF_CONFIG)
    t["model.layers.0.mlp.up_proj.weight"] = t["model.layers.0.mlp.up_proj.weight"].to(torch.int8)
    write_checkpoint(folder, tensors=t)
    raises(folder, "model.safetensors", "model.layers.0.mlp.up_proj.weight", "int8")


def test_a_mis_shaped_tensor_names_the_shard_that_holds_it(tmp_path):
    t = random_hf_tensors(HF_CONFIG)
    t["model.layers.1.self_attn.k_proj.weight"] = torch.zeros(16, 64)
    write_checkpoint(tmp_path / "c", tensors=t, shards=3)
    index = json.loads((tmp_path / "c" / "model.safetensors.index.json").read_text())
    shard = index["weight_map"]["model.layers.1.self_attn.k_proj.weight"]
    raises(tmp_path / "c", shard, "model.layers.1.self_attn.k_proj.weight", "(16, 64)")
    del t["model.norm.weight"]                                    # missing: named against the index
    t["model.layers.1.self_attn.k_proj.weight"] = torch.zeros(32, 64)
    shutil.rmtree(tmp_path / "c")
    write_checkpoint(tmp_path / "c", tensors=t, shards=3)
    raises(tmp_path / "c", "model.safetensors.index.json", "model.norm.weight", "missing")


# ---- tokenizer.json ----------------------------------------------------------------------------

@pytest.mark.parametrize("content", [b"{", b'{"model": 3}', b"\x00\x01\x02", b"[]"])
def test_corrupt_tokenizer_json(good, tmp_path, content):
    folder = broken(good, tmp_path)
    (folder / "tokenizer.json").write_bytes(content)
    raises(folder, "tokenizer.json", match="not a readable tokenizer.json")


def test_load_tokenizer_alone_raises_the_same_type(tmp_path):
    with pytest.raises(CheckpointError, match="no such tokenizer file"):
        load_tokenizer(tmp_path)
    (tmp_path / "tokenizer.json").write_text("nope")
    with pytest.raises(CheckpointError, match="tokenizer.json"):
        load_tokenizer(tmp_path / "tokenizer.json")


# ---- the folder and paths outside it -----------------------------------------------------------

def test_missing_folder_or_a_file_in_its_place(tmp_path):
    raises(tmp_path / "nope", "nope", match="does not exist")
    (tmp_path / "file").write_text("x")
    raises(tmp_path / "file", "file", match="not a folder")


def test_a_symlink_out_of_the_folder_is_refused(good, tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    for name in ("model.safetensors", "config.json", "tokenizer.json"):
        folder = tmp_path / f"ckpt_{name}"
        shutil.copytree(good / "single", folder)
        shutil.copy(folder / name, outside / name)
        (folder / name).unlink()
        (folder / name).symlink_to(outside / name)
        raises(folder, name, match="outside the checkpoint folder")


@pytest.mark.parametrize("shard", ["../../x.safetensors", "../outside.safetensors", "/etc/passwd",
                                   "sub/../../outside.safetensors", "link.safetensors"])
def test_shard_paths_that_leave_the_folder_are_refused(good, tmp_path, shard):
    folder = broken(good, tmp_path, "sharded")
    (tmp_path / "outside.safetensors").write_bytes((folder / "model-00001-of-00003.safetensors").read_bytes())
    (folder / "link.safetensors").symlink_to(tmp_path / "outside.safetensors")
    path = folder / "model.safetensors.index.json"
    index = json.loads(path.read_text())
    first = sorted(index["weight_map"])[0]
    index["weight_map"][first] = shard
    path.write_text(json.dumps(index))
    err = raises(folder, "model.safetensors.index.json", f"weight_map[{first!r}]")
    assert "absolute path" in str(err) or "outside the checkpoint folder" in str(err)


def test_symlinks_and_subfolders_inside_the_folder_are_fine(good, tmp_path):
    folder = broken(good, tmp_path, "sharded")
    (folder / "weights").mkdir()
    path = folder / "model.safetensors.index.json"
    index = json.loads(path.read_text())
    for shard in set(index["weight_map"].values()):
        (folder / shard).rename(folder / "weights" / shard)
        (folder / shard).symlink_to(folder / "weights" / shard)          # a link inside the folder
    model, _ = load_pretrained(folder)
    reference, _ = load_pretrained(good / "sharded")
    assert all(torch.equal(a, b) for a, b in zip(model.state_dict().values(), reference.state_dict().values()))
    index["weight_map"] = {k: ("weights/" + v if k.startswith("model.layers.0") else v)
                           for k, v in index["weight_map"].items()}
    path.write_text(json.dumps(index))
    load_pretrained(folder)
    linked = tmp_path / "linked_folder"                                  # the folder itself may be a link
    linked.symlink_to(folder)
    load_pretrained(linked)


def test_a_hub_cache_snapshot_may_link_into_its_own_blobs(good, tmp_path):
    """huggingface_hub's cache keeps files in models--org--name/blobs and links them from
    snapshots/<rev>/; that layout loads, a link elsewhere from a snapshot still does not."""
    repo = tmp_path / "hub" / "models--org--tiny"
    snap, blobs = repo / "snapshots" / "abc123", repo / "blobs"
    snap.mkdir(parents=True)
    blobs.mkdir()
    for f in (good / "single").iterdir():
        shutil.copy(f, blobs / f"sha-{f.name}")
        (snap / f.name).symlink_to(os.path.relpath(blobs / f"sha-{f.name}", snap))
    load_pretrained(snap)
    (snap / "model.safetensors").unlink()
    shutil.copy(blobs / "sha-model.safetensors", tmp_path / "elsewhere.safetensors")
    (snap / "model.safetensors").symlink_to(tmp_path / "elsewhere.safetensors")
    raises(snap, "model.safetensors", match="outside the checkpoint folder")


# ---- the error type ----------------------------------------------------------------------------

def test_checkpoint_error_carries_file_and_field_and_pickles():
    e = CheckpointError("num_key_value_heads=0 must be an int >= 1", file="/c/config.json", field="num_key_value_heads")
    assert str(e) == "/c/config.json: num_key_value_heads=0 must be an int >= 1" and isinstance(e, ValueError)
    e2 = pickle.loads(pickle.dumps(e))
    assert (str(e2), e2.file, e2.field, e2.message) == (str(e), e.file, e.field, e.message)
    assert e.with_file("/other") is e
    assert CheckpointError("x", field="f").with_file("/a/config.json").file == "/a/config.json"


def test_the_model_loads_without_the_tokenizers_package(monkeypatch):
    """The lent GPU machine has torch and triton but not `tokenizers`: the model and the benches
    (bench/gpu_check.sh) must still run; load_bundled warns and returns no tokenizer."""
    import sys
    import warnings
    from pathlib import Path

    from kvlab.compute.loader import load_bundled

    monkeypatch.setitem(sys.modules, "tokenizers", None)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model, tok = load_bundled()
    assert tok is None and any("tokenizer.json: not loaded" in str(w.message) for w in caught)
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
    from bench_decode import SyntheticTokenizer

    ids = SyntheticTokenizer(model.config.vocab_size).encode("ab ab")
    assert ids[:2] == ids[3:] and all(0 < i < model.config.vocab_size for i in ids)
