"""Checks of a model directory as untrusted input, before and after transformers reads it: the
files it reads are regular files inside the directory and of a sane size, each JSON file among
them a JSON object (tokenizer.json: a file the tokenizers library opens), the weights'
safetensors headers and shard index are well formed and name only files in it, the config is
a JSON object whose layer count and embedding shape match those headers (read without the
weights), every weight the model needs was loaded from the file, and the tokenizer has an
end-of-sequence token the model can embed. Each failure is a ConfigError naming the directory
or file. This module loads nothing itself: `rlvr.models` calls it around its loads.
"""

from __future__ import annotations

import json
import os
import re
import stat
from pathlib import Path

from rlvr.config import ConfigError
from rlvr.models.safetensors_header import read_safetensors_header

# transformers reads this instead of a single model.safetensors: weight name -> shard file.
INDEX_NAME = "model.safetensors.index.json"
# The files rlvr or transformers reads from a model, tokenizer or adapter directory.
_READ_NAMES = {"config.json", "generation_config.json", "special_tokens_map.json",
               "added_tokens.json", "chat_template.json", "chat_template.jinja", "vocab.json",
               "merges.txt", INDEX_NAME}
_READ_PREFIXES = ("tokenizer", "adapter_", "chat_template")
_READ_SUFFIXES = (".safetensors", ".jinja")
# The tokenizer's own file: megabytes, parsed by the tokenizers library (`check_tokenizer_file`).
TOKENIZER_FILE = "tokenizer.json"
# transformers 5 also reads every template in this subdirectory.
_TEMPLATE_SUBDIR = "additional_chat_templates"
# Files that are parsed whole into memory (everything but the weights, which are mapped).
# SmolLM2's tokenizer.json is 3.4 MiB, Qwen's about 11 MiB.
MAX_TEXT_BYTES = 64 << 20


def _is_read(name: str) -> bool:
    return (name in _READ_NAMES or name.startswith(_READ_PREFIXES)
            or name.endswith(_READ_SUFFIXES))


def _inside(target: Path, directory: Path) -> bool:
    # A Hugging Face hub snapshot (<repo>/snapshots/<rev>/) links each file to <repo>/blobs/:
    # that layout is transformers' own cache, so a link into its blobs is allowed too.
    roots = [directory]
    if directory.parent.name == "snapshots":
        roots.append(directory.parent.parent / "blobs")
    return any(target == root or root in target.parents for root in roots)


def check_model_dir_files(model_dir: str) -> None:
    """Every file of `model_dir` that rlvr or transformers reads is a regular file (not a FIFO,
    which hangs a read, nor a device: /dev/zero reads until memory runs out), resolves inside
    the directory (a link to a file outside would be read, and copied into the run's
    checkpoints), and, unless it is weights, is at most MAX_TEXT_BYTES; each `*.json` but
    tokenizer.json is a JSON object (`read_json_object`: transformers' own json.load of a deeply
    nested one raised RecursionError, of a list AttributeError or TypeError). These are KiB
    (a slow tokenizer's vocab.json aside); tokenizer.json, megabytes, is checked only where the
    tokenizer loads (`check_tokenizer_file`), not on each of a run's half-dozen calls here.
    ConfigError naming the file. A path that is not a local directory (a hub id) is left to
    transformers."""
    directory = Path(model_dir)
    if not directory.is_dir():
        return
    real_dir = directory.resolve()
    entries = [p for p in directory.iterdir() if _is_read(p.name)]
    templates = directory / _TEMPLATE_SUBDIR
    if templates.is_dir():
        entries += list(templates.iterdir())
    for path in entries:
        try:
            target = path.resolve(strict=True)
            status = os.stat(target)
        except (OSError, RuntimeError) as e:  # a dangling link, a link loop
            raise ConfigError(f"{path}: cannot be read as a model file: {e}") from e
        if not _inside(target, real_dir):
            raise ConfigError(f"{path} links to {target}, outside the model directory "
                              f"{directory}: copy the file in instead")
        if not stat.S_ISREG(status.st_mode):
            raise ConfigError(f"{path} is not a regular file (a FIFO, device or directory)")
        if not path.name.endswith(".safetensors") and status.st_size > MAX_TEXT_BYTES:
            raise ConfigError(f"{path} is {status.st_size} bytes, more than the "
                              f"{MAX_TEXT_BYTES} a "
                              "model's config or tokenizer file may be")
        if path.name.endswith(".json") and path.name != TOKENIZER_FILE:
            read_json_object(path)


def check_tokenizer_file(model_dir: str) -> None:
    """tokenizer.json, where `model_dir` has one, is a tokenizer the tokenizers library builds:
    JSON, an object, nested at most 128 deep (the library's parser's limit; deeper, it failed
    inside transformers with an Exception, and past about 1,000 levels transformers' json.load
    with RecursionError), with a model of a known kind. ConfigError naming the file. Parsing
    it adds about a quarter to the tokenizer's load (70 ms for SmolLM2's 3.4 MiB), so only
    `load_tokenizer` calls this; run `check_model_dir_files` first (a FIFO would hang here)."""
    from tokenizers import Tokenizer

    path = Path(model_dir) / TOKENIZER_FILE
    if not path.is_file():
        return
    try:
        Tokenizer.from_file(str(path))
    except Exception as e:  # the library raises a bare Exception for every malformed file
        raise ConfigError(f"{path} is not a tokenizer the tokenizers library opens: "
                          f"{str(e)[:200]}") from None


def read_json_object(path: Path, max_bytes: int | None = None) -> dict:
    """The JSON object in the file `path` (a model's config.json, an adapter's config);
    ConfigError naming it where it is over `max_bytes`, not JSON, or not a JSON object."""
    if max_bytes is not None and (not path.is_file() or path.stat().st_size > max_bytes):
        raise ConfigError(f"{path} is not a regular file of at most {max_bytes} bytes")
    try:
        value = json.loads(path.read_text(encoding="utf-8"))  # as transformers reads it
    # UnicodeDecodeError and JSONDecodeError are ValueErrors; RecursionError: arrays nested deeply
    except (OSError, ValueError, RecursionError) as e:
        raise ConfigError(f"{path} is not valid JSON: {e}") from e
    if not isinstance(value, dict):
        raise ConfigError(f"{path} holds a JSON {type(value).__name__}, not a JSON object")
    return value


def read_model_config(model_dir: str) -> dict | None:
    """config.json of `model_dir` as a dict, or None where there is none (a hub id, an
    adapter); ConfigError where it is not JSON or not a JSON object."""
    path = Path(model_dir) / "config.json"
    return read_json_object(path) if path.is_file() else None


def text_config(config: dict) -> dict:
    """The language model's part of a model config: a multimodal model's `text_config`, else
    the config itself."""
    text = config.get("text_config")
    return text if isinstance(text, dict) else config


def is_positive_int(value: object) -> bool:
    """An int above 0, and not a bool (JSON's true would pass as 1)."""
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


def _weight_files(model_dir: str) -> list[Path]:
    return sorted(p for p in Path(model_dir).glob("*.safetensors")
                  if not p.name.startswith("adapter_"))


def check_weight_files(model_dir: str) -> dict[str, dict[str, dict]]:
    """Each weights file of `model_dir` is one the safetensors library opens, with no tensor
    named twice (`read_safetensors_header`: the header alone), and the shard index, where there
    is one, maps tensor names to safetensors files directly in the directory (transformers
    joins each name to the directory, so `../x.safetensors` or an absolute path was read from
    outside it), each present and holding every tensor the index places in it. ConfigError
    naming the file; before any of them is loaded, so none fails inside transformers. Returns
    each weights file's header by file name (`check_config_against_weights` reads them)."""
    headers = {p.name: read_safetensors_header(p) for p in _weight_files(model_dir)}
    path = Path(model_dir) / INDEX_NAME
    if not path.is_file():
        return headers
    index = read_json_object(path, MAX_TEXT_BYTES)
    weight_map = index.get("weight_map")
    if not isinstance(weight_map, dict) or not all(isinstance(v, str)
                                                   for v in weight_map.values()):
        raise ConfigError(f"{path}: weight_map is not a JSON object of tensor name -> file name")
    if not isinstance(index.get("metadata"), dict):  # transformers adds its own keys to it
        raise ConfigError(f"{path}: metadata is not a JSON object")
    tensors_of: dict[str, list[str]] = {}
    for tensor, shard in weight_map.items():
        tensors_of.setdefault(shard, []).append(tensor)
    for shard, tensors in sorted(tensors_of.items()):
        # A bare name: check_model_dir_files has vetted every *.safetensors in the directory.
        if Path(shard).name != shard or not shard.endswith(".safetensors"):
            raise ConfigError(f"{path}: {shard!r} is not the name of a safetensors file in "
                              f"{model_dir}")
        if not (Path(model_dir) / shard).is_file():
            raise ConfigError(f"{path} names the shard {shard}, which {model_dir} does not hold")
        held = headers.get(shard) or read_safetensors_header(Path(model_dir) / shard)
        absent = [t for t in tensors if t not in held]
        if absent:
            raise ConfigError(f"{path} places tensors in {shard} that it does not hold: "
                              f"{', '.join(t[:80] for t in absent[:3])}"
                              f"{f' and {len(absent) - 3} more' if len(absent) > 3 else ''}")
    return headers


_LAYER_INDEX = re.compile(r"(?:^|\.)(?:layers|h|blocks|layer)\.(\d+)\.")
_EMBEDDING_KEYS = ("embed_tokens.weight", "wte.weight", "word_embeddings.weight")


def _int_field(config: dict, keys: tuple[str, ...]) -> tuple[str, int] | None:
    for key in keys:
        value = config.get(key)
        if value is not None:
            if not is_positive_int(value):
                raise ConfigError(f"{key}={value!r} is not a positive integer")
            return key, value
    return None


def check_config_against_weights(model_dir: str, headers: dict[str, dict[str, dict]]) -> None:
    """The sizes config.json gives match the weights' headers, before transformers builds
    modules of those sizes (num_hidden_layers=100000 built layers for minutes): the layer count
    is one more than the highest `layers.N.` index in the weights, and the token embedding is
    vocab_size x hidden_size, from the weights files' `headers` (`check_weight_files`).
    ConfigError naming config.json."""
    config = read_model_config(model_dir)
    if config is None or not headers:
        return  # transformers says what is missing
    config_path = Path(model_dir) / "config.json"
    text = text_config(config)
    shapes: dict[str, list] = {}
    for header in headers.values():
        for name, entry in header.items():
            if isinstance(entry, dict) and isinstance(entry.get("shape"), list):
                shapes[name] = entry["shape"]
    try:
        layers = _int_field(text, ("num_hidden_layers", "n_layer", "num_layers"))
        vocab = _int_field(text, ("vocab_size",))
        width = _int_field(text, ("hidden_size", "n_embd", "d_model"))
    except ConfigError as e:
        raise ConfigError(f"{config_path}: {e}") from None
    indices = [int(m.group(1)) for name in shapes if (m := _LAYER_INDEX.search(name))]
    if layers is not None and indices and layers[1] != max(indices) + 1:
        raise ConfigError(f"{config_path}: {layers[0]}={layers[1]}, but the weights in "
                          f"{model_dir} hold {max(indices) + 1} layers")
    embedding = next((name for name in shapes if name.endswith(_EMBEDDING_KEYS)), None)
    if embedding is None or vocab is None:
        return
    rows, *rest = shapes[embedding] or [None]
    widths = {width[1]} if width else set()
    widths |= {text[k] for k in ("word_embed_proj_dim", "embedding_size") if k in text}
    if rows != vocab[1] or (widths and (len(rest) != 1 or rest[0] not in widths)):
        raise ConfigError(f"{config_path}: vocab_size={vocab[1]}"
                          + (f", {width[0]}={width[1]}" if width else "")
                          + f", but the weights' {embedding} has shape {shapes[embedding]}")


def check_loading_info(model_dir: str, info: dict, tied: bool) -> None:
    """Every weight the model has came from the file, and every weight in the file went into
    the model: transformers initialises a missing one at random and only logs it (a config
    naming more layers than the file holds, renamed keys, the wrong model_type). A tied
    `lm_head.weight` may be absent: it is the embedding. ConfigError naming a few keys."""
    missing = [k for k in info.get("missing_keys", ()) if not (tied and k == "lm_head.weight")]
    problems = [(what, sorted(map(str, keys))) for what, keys in (
        ("missing from the weights", missing),
        ("in the weights but not the model", info.get("unexpected_keys", ())),
        ("of a different shape than the config says", info.get("mismatched_keys", ())),
        ("not loadable", info.get("error_msgs", ())))
        if keys]
    if problems:
        said = "; ".join(f"{len(keys)} {what} ({', '.join(k[:80] for k in keys[:3])}"
                         f"{', ...' if len(keys) > 3 else ''})" for what, keys in problems)
        raise ConfigError(f"{model_dir}: its weights do not match its config.json: {said}")


def check_tokenizer_tokens(tokenizer, model_dir: str) -> None:
    """The tokenizer ends sequences and fits the model: an eos token that is set, not empty and
    not whitespace, with an id, and no more tokens than config.json's vocab_size (the
    embedding's rows; a larger id fails mid-run with IndexError). ConfigError naming the file."""
    where = Path(model_dir) / "tokenizer_config.json"
    eos = tokenizer.eos_token
    if not isinstance(eos, str) or not eos.strip() or tokenizer.eos_token_id is None:
        raise ConfigError(f"{where}: eos_token={eos!r} is not a usable end-of-sequence token "
                          "(set, not empty, not whitespace, in the vocabulary)")
    config = read_model_config(model_dir)
    if config is None:
        return
    vocab = text_config(config).get("vocab_size")
    if isinstance(vocab, int) and not isinstance(vocab, bool) and len(tokenizer) > vocab:
        raise ConfigError(f"{where}: the tokenizer has {len(tokenizer)} tokens, more than "
                          f"vocab_size={vocab} in {Path(model_dir) / 'config.json'}")
