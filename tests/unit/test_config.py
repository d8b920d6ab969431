"""The configuration's accessors: each parses its kind of setting and names the key when it cannot."""

import dask
import pytest

from zarr_dask_gpu import config


def test_every_default_reads_through_its_kinds_accessor():
    read = {
        "bytes": lambda k, s: config.maybe_nbytes(k) if s.optional else config.nbytes(k),
        "duration": lambda k, s: config.maybe_seconds(k) if s.optional else config.seconds(k),
        "int": lambda k, s: config.maybe_integer(k) if s.optional else config.integer(k),
        "bool": lambda k, s: config.flag(k),
        "choice": lambda k, s: config.choice(k),
    }
    for key, setting in config.SETTINGS.items():
        read[setting.kind](key, setting)
        assert setting.kind != "choice" or setting.default in setting.choices, key


@pytest.mark.parametrize(
    "key,value,expected",
    [
        ("coalesce-gap", "2MiB", 2 << 20),
        ("coalesce-gap", 4096, 4096),
        ("join-wait", "25ms", 0.025),
        ("join-wait", None, None),
        ("io-retry-delay", 1, 1.0),
        ("read-slots", "3", 3),
        ("verify-checksums", False, False),
    ],
)
def test_accessors_parse_their_kind(key, value, expected):
    kind = config.SETTINGS[key].kind
    get = {
        "bytes": config.nbytes,
        "duration": config.maybe_seconds if config.SETTINGS[key].optional else config.seconds,
        "int": config.integer,
        "bool": config.flag,
    }[kind]
    with dask.config.set({f"zarr_dask_gpu.{key}": value}):
        assert get(key) == expected


@pytest.mark.parametrize(
    "key,value,get",
    [
        ("coalesce-gap", "lots", config.nbytes),
        ("coalesce-gap", None, config.nbytes),  # not a setting that may be None
        ("join-wait", "soon", config.maybe_seconds),
        ("read-slots", True, config.integer),
        ("read-slots", 2.5, config.integer),
        ("verify-checksums", "yes", config.flag),
        ("remote-io", "ftp", config.choice),
    ],
)
def test_a_value_not_of_its_kind_raises_naming_the_key(key, value, get):
    with (
        dask.config.set({f"zarr_dask_gpu.{key}": value}),
        pytest.raises(ValueError, match=f"zarr_dask_gpu.{key}"),
    ):
        get(key)


def test_a_renamed_key_is_still_read_under_its_former_name():
    import warnings

    import dask

    with dask.config.set({"zarr_dask_gpu.coalesce-tasks": 5}), warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        assert config.integer("join-tasks") == 5
    assert any("coalesce-tasks is now zarr_dask_gpu.join-tasks" in str(w.message) for w in seen)
    assert config.integer("join-tasks") == config.DEFAULTS["join-tasks"]
    keys = set(config.DEFAULTS)
    assert set(config.RENAMED.values()) <= keys and not set(config.RENAMED) & keys


def test_every_key_the_package_reads_is_a_setting():
    """The package reads settings through config's accessors with literal keys (the GPU modules'
    among them, which this machine may not import): each must be a row of SETTINGS."""
    import ast
    from pathlib import Path

    accessors = {"get", "nbytes", "maybe_nbytes", "seconds", "maybe_seconds", "integer", "maybe_integer"}
    accessors |= {"flag", "choice"}
    read = set()
    for path in (Path(config.__file__).parent).rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and isinstance(node.func.value, ast.Name)
                and node.func.value.id == "config"
                and node.func.attr in accessors
                and node.args
                and isinstance(node.args[0], ast.Constant)
            ):
                read.add(node.args[0].value)
    assert len(read) > 20 and read <= set(config.SETTINGS), read - set(config.SETTINGS)


def test_a_task_reads_its_settings_once_as_it_begins(tmp_path):
    """Inside a read task every setting is the value it had when the task began: a change made
    meanwhile (here, by a phase listener on the task's thread) reaches the tasks after it."""
    import numpy as np
    import zarr

    from zarr_dask_gpu import from_zarr_gpu, phases

    zarr.create_array(tmp_path / "a.zarr", shape=(8,), chunks=(4,), dtype="i4")[...] = np.arange(8)
    seen = []

    def listener(span: phases.Span) -> None:
        if span.name == phases.Phase.PLAN:
            with dask.config.set({"zarr_dask_gpu.cpu-threads": 7}):
                seen.append(config.integer("cpu-threads"))

    x = from_zarr_gpu(tmp_path / "a.zarr", chunks=8, device="cpu")
    with dask.config.set({"zarr_dask_gpu.cpu-threads": 2}), phases.listening(listener):
        np.testing.assert_array_equal(x.compute(scheduler="sync"), np.arange(8))
    assert seen == [2]
    with config.for_task(), dask.config.set({"zarr_dask_gpu.cpu-threads": 7}):
        assert config.integer("cpu-threads") == config.DEFAULTS["cpu-threads"]
    with dask.config.set({"zarr_dask_gpu.cpu-threads": 7}):  # outside a task: as configured now
        assert config.integer("cpu-threads") == 7
