"""Rows from JSONL, Parquet or a `datasets` directory into `Example`s, with field mapping.

Each row is validated where it is read, so a bad row is reported with its file, row and field,
and either stops the run (`on_bad_row=error`) or is skipped and counted (`skip`). A row longer
than `data.max_row_bytes` is a bad row found before it is parsed: a JSONL line is read in
bounded pieces and skipped to its end, never held whole.
"""

from __future__ import annotations

import json
import logging
import math
from decimal import Decimal
from pathlib import Path
from typing import Any, Iterator

from rlvr.config import DataConfig, DataSourceConfig
from rlvr.data.errors import JSONL_SUFFIXES, DataError, Example

log = logging.getLogger(__name__)


DEFAULT_MAX_ROW_BYTES = DataConfig.max_row_bytes  # the config's default, for calls without one
_SKIP_CHUNK = 1 << 20  # the piece an over-long line is skipped by


def _too_long(source: str, row: int, size: str, max_row_bytes: int) -> DataError:
    return DataError(source, row, None, f"the row holds {size} bytes, over data.max_row_bytes="
                                        f"{max_row_bytes}; raise it if such rows are meant")


def bounded_lines(f: Any, max_row_bytes: int) -> Iterator[bytes | int]:
    """Each line of the binary file `f`, or for a line over `max_row_bytes` its length,
    counted while it is skipped in bounded pieces."""
    while True:
        raw = f.readline(max_row_bytes + 1)
        if not raw:
            return
        if len(raw) <= max_row_bytes or raw.endswith(b"\n"):  # its newline is no content
            yield raw
            continue
        size = len(raw)
        while not raw.endswith(b"\n"):
            raw = f.readline(_SKIP_CHUNK)
            if not raw:
                break
            size += len(raw)
        yield size


def iter_jsonl(path: Path, max_row_bytes: int = DEFAULT_MAX_ROW_BYTES
               ) -> Iterator[tuple[int, Any]]:
    """(row index, parsed object or a DataError for that row); the index is the line's, from
    0, blank lines counted (a blank line yields nothing), so line = index + 1."""
    with open(path, "rb") as f:
        for row, raw in enumerate(bounded_lines(f, max_row_bytes)):
            if isinstance(raw, int):
                yield row, _too_long(str(path), row, f"{raw:,}", max_row_bytes)
                continue
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as e:
                yield row, DataError(str(path), row, None, f"undecodable bytes ({e.reason} at "
                                                           f"byte {e.start})")
                continue
            if not line.strip():
                continue
            try:
                yield row, json.loads(line)
            except json.JSONDecodeError as e:
                yield row, DataError(str(path), row, None, f"invalid JSON: {e.msg}")
            except RecursionError:  # `[[[[...` a few hundred kB deep: a bad row, not a crash
                yield row, DataError(str(path), row, None, "invalid JSON: nested too deeply")


_PARQUET_BATCH_ROWS = 64  # rows converted to Python at a time


def iter_parquet(path: Path, max_row_bytes: int = DEFAULT_MAX_ROW_BYTES
                 ) -> Iterator[tuple[int, Any]]:
    """(row index, row or a DataError), a batch of rows read at a time, so a reader that stops
    (`max_rows`) reads no further. A compressed file of kilobytes can hold gigabytes: a row
    group whose values, uncompressed (its metadata says), average over `max_row_bytes` a row
    holds a row over it, and is refused whole, unread."""
    import pyarrow.parquet as pq

    file = pq.ParquetFile(path)
    first = 0
    for group in range(file.num_row_groups):
        meta = file.metadata.row_group(group)
        rows, size = meta.num_rows, meta.total_byte_size
        if size > max(rows, 1) * max_row_bytes:
            for row in range(first, first + rows):
                yield row, _too_long(str(path), row, f"about {size // max(rows, 1):,} (its row "
                                     f"group's {size:,} bytes uncompressed over {rows} rows)",
                                     max_row_bytes)
        else:
            for batch in file.iter_batches(batch_size=_PARQUET_BATCH_ROWS, row_groups=[group]):
                yield from _bounded(enumerate(batch.to_pylist(), first), str(path),
                                    max_row_bytes)
                first += batch.num_rows
            continue
        first += rows


def _bounded(rows: Iterator[tuple[int, Any]], source: str, max_row_bytes: int
             ) -> Iterator[tuple[int, Any]]:
    """Rows of a columnar source, one over `max_row_bytes` (its text and bytes values counted)
    replaced by a DataError."""
    for row, value in rows:
        size = _value_bytes(value, max_row_bytes)
        yield row, (_too_long(source, row, f"over {size - 1:,}", max_row_bytes)
                    if size > max_row_bytes else value)


def _value_bytes(value: Any, limit: int) -> int:
    """About the bytes a row's values hold (strings by characters), counted up to `limit + 1`."""
    total, stack = 0, [value]
    while stack and total <= limit:
        item = stack.pop()
        if isinstance(item, (str, bytes)):
            total += len(item)
        elif isinstance(item, dict):
            stack.extend(item.values())
        elif isinstance(item, (list, tuple)):
            stack.extend(item)
        else:
            total += 8
    return min(total, limit + 1)


# The only `datasets` builders an `hf:` directory may use: they parse rows and run no code.
# (webdataset, for one, torch.loads the .pth members of a tar; a README's `configs` can point
# data_files outside the directory.)
HF_DIR_BUILDERS = {".jsonl": "json", ".json": "json", ".parquet": "parquet", ".arrow": "arrow",
                   ".csv": "csv"}


def _local_hf_files(directory: Path, name: str, split: str) -> tuple[str, list[str]]:
    """The builder and the files of `split` in an `hf:` directory, found by `datasets`' own
    file-name rules but never from its README, each a regular file inside the directory whose
    suffix names one of `HF_DIR_BUILDERS`; a DataError naming the directory otherwise."""
    from datasets.data_files import DataFilesDict, get_data_patterns

    try:
        found = DataFilesDict.from_patterns(get_data_patterns(str(directory)),
                                            base_path=str(directory))
    except Exception as e:  # datasets' EmptyDatasetError and its kin
        raise DataError(name, None, None, f"no data files found ({e})") from None
    if split not in found:
        raise DataError(name, None, None, f"no '{split}' split (it has {sorted(found)})")
    root, files, builders = directory.resolve(), [str(f) for f in found[split]], set()
    for file in files:
        path = Path(file)
        if path.is_symlink() or not path.is_file() or root not in path.resolve().parents:
            raise DataError(name, None, None, f"{file} is not a regular file inside it")
        builder = HF_DIR_BUILDERS.get(path.suffix.lower())
        if builder is None:
            raise DataError(name, None, None, f"{path.name}: an hf: directory holds only "
                            f"{'/'.join(HF_DIR_BUILDERS)} files (no other `datasets` builder "
                            "is run)")
        builders.add(builder)
    if len(builders) > 1:
        raise DataError(name, None, None, f"the '{split}' split mixes {sorted(builders)} files")
    return builders.pop(), files


def _subset_directory(directory: Path, name: str, subset: str | None) -> Path:
    """The directory of `subset` inside a local `hf:` directory (a hub snapshot keeps each
    configuration's files in a subdirectory of its name: openai/gsm8k's `main/`), or the
    directory itself for no subset; a DataError naming the subsets there otherwise. The
    README's `configs:` is not read (see HF_DIR_BUILDERS)."""
    if subset is None:
        return directory
    found = directory / subset
    if (Path(subset).name != subset or subset in (".", "..") or found.is_symlink()
            or not found.is_dir()):
        there = sorted(p.name for p in directory.iterdir()
                       if p.is_dir() and not p.is_symlink() and not p.name.startswith("."))
        raise DataError(name, None, None, f"no subset '{subset}': a local hf: directory keeps "
                        f"a subset in a subdirectory of its name (it has {there or 'none'})")
    return found


def iter_datasets(name: str, split: str, max_row_bytes: int = DEFAULT_MAX_ROW_BYTES,
                  subset: str | None = None, revision: str | None = None
                  ) -> Iterator[tuple[int, Any]]:
    """Rows of a `datasets` directory or an `hf:` source: a local directory's files (of its
    `subset`), or a hub id from the `datasets` cache by config name `subset` and `revision`."""
    try:
        import datasets
    except ImportError as e:
        raise DataError(name, None, None, "reading it needs the `datasets` package") from e
    if name.startswith("hf:") and Path(name[3:]).is_dir():
        if revision is not None:
            raise DataError(name, None, None, f"revision={revision!r}: a local directory holds "
                            "one revision; a revision is for a hub id read from the cache")
        directory = _subset_directory(Path(name[3:]), name, subset)
        builder, data_files = _local_hf_files(directory, name, split)
        data = datasets.load_dataset(builder, data_files={split: data_files}, split=split)
    elif name.startswith("hf:"):
        data = datasets.load_dataset(name[3:], name=subset, revision=revision, split=split)
    else:
        data = datasets.load_from_disk(name)
        if isinstance(data, datasets.DatasetDict):
            data = data[split]
    yield from _bounded(enumerate(data), name, max_row_bytes)


def _messages(row: dict, src: DataSourceConfig, where: tuple[str, int]) -> tuple[dict, ...]:
    if src.messages_field in row and row[src.messages_field] is not None:
        messages = row[src.messages_field]
        field = src.messages_field
        if not isinstance(messages, list):
            raise DataError(*where, field, f"expected a list of messages, got "
                                           f"{type(messages).__name__}")
        if not messages:
            raise DataError(*where, field, "empty list of messages")
        for m in messages:
            if not (isinstance(m, dict) and isinstance(m.get("role"), str)
                    and isinstance(m.get("content"), str)):
                raise DataError(*where, field, "each message needs string 'role' and 'content'")
        return tuple({"role": m["role"], "content": m["content"]} for m in messages)
    prompt = row.get(src.prompt_field)
    if prompt is None:
        raise DataError(*where, src.messages_field, f"missing (and no '{src.prompt_field}')")
    if not isinstance(prompt, str) or not prompt.strip():
        raise DataError(*where, src.prompt_field, "expected a non-empty string")
    return ({"role": "user", "content": prompt},)


def _ground_truth(row: dict, src: DataSourceConfig, where: tuple[str, int]) -> str:
    """The row's ground truth as the text verifiers read: a string as is, a number as written
    in plain digits, a list as JSON (only verifiers that take a list get one: `_check_list`)."""
    value = row.get(src.ground_truth_field)
    if value is None:
        raise DataError(*where, src.ground_truth_field, "missing")
    if isinstance(value, bool) or not isinstance(value, (str, int, float, list)):
        raise DataError(*where, src.ground_truth_field,
                        f"expected a string, number or list, got {type(value).__name__}")
    if isinstance(value, list):
        return json.dumps(value)
    if isinstance(value, float):
        if not math.isfinite(value):  # JSON's NaN/Infinity: no verifier can equal it
            raise DataError(*where, src.ground_truth_field, f"{value} is not a finite number")
        return plain_number(value)
    return str(value)


def plain_number(value: float) -> str:
    """`value` in positional digits, never an exponent: str(1e16) is "1e+16", which `gsm8k`
    read as 16 and `math` as e + 16. repr is the shortest text that reads back as the same
    float, so 0.1 stays "0.1" (Decimal(0.1) would spell out its binary error), 5e-05 gives
    "0.00005" and 1e16 "10000000000000000"; 3.0 stays "3.0"."""
    return format(Decimal(repr(value)), "f")


# rlvr's verifiers whose docs define a JSON-list ground truth: `ifeval` (its constraints),
# `string_f1` (its labels), `code` (its tests). Every other verifier of rlvr reads one answer
# and would read a list's JSON text as one: `gsm8k` took ["3", "4"] as 4, `math` paid
# \boxed{3, 4}, `string_matcher` ran the labels together and paid none of them.
LIST_GROUND_TRUTH_VERIFIERS = frozenset({"ifeval", "string_f1", "code"})


def _takes_list(name: str) -> bool:
    """Whether verifier `name` (canonical) may get a list ground truth: the verifiers above,
    and verifiers written outside rlvr ('module:function' or registered by a user's module),
    whose own code says what the list's JSON text means."""
    from rlvr.rewards.registry import VERIFIERS

    if name in LIST_GROUND_TRUTH_VERIFIERS or ":" in name:
        return True
    entry = VERIFIERS.get(name)
    return entry is not None and not entry.score.__module__.startswith("rlvr.")


def _check_list(row: dict, verifiers: tuple[str, ...], src: DataSourceConfig,
                where: tuple[str, int]) -> None:
    if not isinstance(row.get(src.ground_truth_field), list):
        return
    for name in verifiers:
        if not _takes_list(name):
            raise DataError(*where, src.ground_truth_field,
                            f"a list, but the '{name}' verifier reads one answer, not a list "
                            f"(lists are for {', '.join(sorted(LIST_GROUND_TRUTH_VERIFIERS))}): "
                            "give the one answer as a string or number")


def _verifiers(row: dict, src: DataSourceConfig, where: tuple[str, int]) -> tuple[str, ...]:
    from rlvr.rewards import is_known_verifier
    from rlvr.rewards.registry import canonical_name

    value = row.get(src.verifier_field, src.verifier)
    if value is None:
        raise DataError(*where, src.verifier_field, "missing, and the source sets no verifier")
    names = (value,) if isinstance(value, str) else tuple(value) if isinstance(value, list) else ()
    if not names or not all(isinstance(n, str) for n in names):
        raise DataError(*where, src.verifier_field, f"expected a verifier name or list of names, "
                                                    f"got {value!r:.80}")
    for n in names:
        if not is_known_verifier(n):
            raise DataError(*where, src.verifier_field, f"unknown verifier '{n}'")
    return tuple(canonical_name(n) for n in names)  # "GSM8K" is stored as "gsm8k"


def row_to_example(row: Any, src: DataSourceConfig, source: str, index: int) -> Example:
    where = (source, index)
    if not isinstance(row, dict):
        raise DataError(source, index, None, f"expected an object, got {type(row).__name__}")
    example = Example(id=f"{src.name}/{index}", messages=_messages(row, src, where),
                      ground_truth=_ground_truth(row, src, where),
                      verifiers=_verifiers(row, src, where), source=src.name,
                      metadata_json=_metadata(row, src, where))
    _check_list(row, example.verifiers, src, where)
    _check_ground_truth(example, src, where)
    return example


def _metadata(row: dict, src: DataSourceConfig, where: tuple[str, int]) -> str:
    """The row's metadata as JSON text ("" for none): the fields `src.metadata_fields` lists,
    or every field the example is not made of, without values JSON cannot hold (a Parquet
    timestamp, bytes), which a row need not be refused for when nobody asked for them."""
    if src.metadata_fields is None:
        taken = {src.messages_field, src.prompt_field, src.ground_truth_field, src.verifier_field}
        fields = {k: v for k, v in row.items() if k not in taken}
        try:
            return json.dumps(fields) if fields else ""
        except (TypeError, ValueError):
            fields = {k: v for k, v in fields.items() if _holds_json(v)}
            return json.dumps(fields) if fields else ""
    for name in src.metadata_fields:
        if name not in row:
            raise DataError(*where, name, "missing (metadata_fields lists it)")
        if not _holds_json(row[name]):
            raise DataError(*where, name, f"a {type(row[name]).__name__} cannot be metadata: "
                                          "JSON cannot hold it")
    fields = {name: row[name] for name in src.metadata_fields}
    return json.dumps(fields) if fields else ""


def _holds_json(value: Any) -> bool:
    try:
        json.dumps(value)
    except (TypeError, ValueError):
        return False
    return True


def _check_ground_truth(example: Example, src: DataSourceConfig, where: tuple[str, int]) -> None:
    from rlvr.rewards.registry import ground_truth_check

    for name in example.verifiers:
        check = ground_truth_check(name)
        if check is None:
            continue
        try:
            check(example.ground_truth)
        except ValueError as e:
            raise DataError(*where, src.ground_truth_field,
                            f"the '{name}' verifier cannot use it: {e}") from None


def read_rows(src: DataSourceConfig, max_row_bytes: int = DEFAULT_MAX_ROW_BYTES
              ) -> Iterator[tuple[int, Any]]:
    path = Path(src.name)
    if src.name.startswith("hf:") or path.is_dir():
        return iter_datasets(src.name, src.split or "train", max_row_bytes, src.subset,
                             src.revision)
    if not path.exists():
        raise DataError(src.name, None, None, "no such file, directory or built-in dataset")
    if not path.is_file():  # a device or a pipe (/dev/zero) would be read forever
        raise DataError(src.name, None, None, "is not a regular file")
    if path.suffix in JSONL_SUFFIXES:
        return iter_jsonl(path, max_row_bytes)
    if path.suffix == ".parquet":
        return iter_parquet(path, max_row_bytes)
    raise DataError(src.name, None, None, "unknown format (use .jsonl, .parquet or a "
                                          "`datasets` directory)")


def load_file_source(src: DataSourceConfig, on_bad_row: str,
                     max_row_bytes: int = DEFAULT_MAX_ROW_BYTES) -> tuple[list[Example], int]:
    examples: list[Example] = []
    bad = 0
    for index, row in read_rows(src, max_row_bytes):
        if src.max_rows is not None and len(examples) >= src.max_rows:
            break
        try:
            if isinstance(row, DataError):
                raise row
            examples.append(row_to_example(row, src, src.name, index))
        except DataError as e:
            if on_bad_row == "error":
                raise
            bad += 1
            log.warning("skipping bad row: %s", e)
    return examples, bad
