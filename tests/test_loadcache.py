"""The cache of the loaded knowledge base and rule set (expert/_loadcache.py, issue 20): an Expert built from it
diagnoses exactly as one built from the files; an edited rule, a corrupted or foreign entry, DAM_NO_CACHE=1 and a
cache directory that cannot be written all fall back to loading the files, never to an error or a stale rule."""

from __future__ import annotations

import os
import pickle
import shutil
import stat
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

import expert
from expert import _loadcache
from expert._resources import data_dir
from expert.kb.knowledge import KnowledgeBase

FACTS = {"hardware": "h100-sxm", "dtype": "bf16", "gpu_util": 0.45, "data_wait_s": 0.12, "step_time_s": 0.3}
ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A private user cache directory for this test; the entries land in <it>/dam-expert."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    monkeypatch.delenv("DAM_NO_CACHE", raising=False)
    return tmp_path / "xdg" / "dam-expert"


@pytest.fixture
def rules(tmp_path: Path) -> Path:
    """A copy of the bundled rules, free to edit."""
    return Path(shutil.copytree(data_dir("rules"), tmp_path / "rules"))


def _entries(directory: Path) -> list[Path]:
    return sorted(directory.glob("rules-*.pickle")) if directory.is_dir() else []


def _no_loading(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make loading the YAML files fail, so a test can tell an Expert came from the cache."""

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("the files were loaded, not the cache")

    monkeypatch.setattr(KnowledgeBase, "load", classmethod(refuse))


def test_an_expert_from_the_cache_diagnoses_exactly_as_one_from_the_files(
        cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fresh = expert.Expert(engine="pure")
    assert len(_entries(cache)) == 1
    with monkeypatch.context() as m:
        _no_loading(m)
        cached = expert.Expert(engine="pure")
    assert cached.kb is not fresh.kb and cached.ruleset.kb is cached.kb
    assert sorted(cached.ruleset.rules) == sorted(fresh.ruleset.rules)
    assert cached.diagnose(FACTS).to_json() == fresh.diagnose(FACTS).to_json()
    for name in ("llm_decode_batch1", "data_starved_training"):
        obs = dict(expert.Expert(engine="pure").observations(_example(name)).values())
        assert cached.diagnose(obs).to_json() == fresh.diagnose(obs).to_json()


def _example(name: str) -> dict[str, object]:
    from expert.observations.file import read_observation_file

    return dict(read_observation_file(data_dir("examples") / f"{name}.yaml").observations)


def test_an_edited_rule_is_loaded_again_not_taken_from_the_cache(cache: Path, rules: Path) -> None:
    before = expert.Expert(rules_dirs=[rules], engine="pure")
    rule_id, loaded = next((rule_id, lr) for rule_id, lr in before.ruleset.rules.items()
                           if lr.path.read_text(encoding="utf-8").count(lr.rule.title) == 1)
    text = loaded.path.read_text(encoding="utf-8")
    loaded.path.write_text(text.replace(loaded.rule.title, loaded.rule.title + " (edited)"), encoding="utf-8")
    after = expert.Expert(rules_dirs=[rules], engine="pure")
    assert after.ruleset.rules[rule_id].rule.title == loaded.rule.title + " (edited)"
    assert len(_entries(cache)) == 2  # one entry per content; the old one stays until pruned


NEW_RULE = """schema_version: 1
rules:
  - id: test-cache-new-rule
    title: A rule added after the cache was written
    source: "tests/test_loadcache.py"
    rationale: A new file in a rules directory must be seen at once.
    severity: info
    when: {fact: gpu_util, lt: 0.5}
    then:
      finding: {id: test_cache_new_finding, message: "added"}
"""


def test_a_new_rule_file_is_seen(cache: Path, rules: Path) -> None:
    assert "test-cache-new-rule" not in expert.Expert(rules_dirs=[rules], engine="pure").ruleset.rules
    (rules / "zz_new.yaml").write_text(NEW_RULE, encoding="utf-8")
    assert "test-cache-new-rule" in expert.Expert(rules_dirs=[rules], engine="pure").ruleset.rules
    (rules / "zz_new.yaml").unlink()
    assert "test-cache-new-rule" not in expert.Expert(rules_dirs=[rules], engine="pure").ruleset.rules


@pytest.mark.parametrize("content", [b"", b"not a pickle at all", b"\x80\x05K\x01.", None])
def test_a_corrupted_entry_is_ignored_and_written_anew(cache: Path, content: bytes | None) -> None:
    reference = expert.Expert(engine="pure").diagnose(FACTS).to_json()
    (entry,) = _entries(cache)
    if content is None:  # a valid pickle of something else under the right name
        content = pickle.dumps(("another key", {"not": "a knowledge base"}, None))
    entry.write_bytes(content)
    assert expert.Expert(engine="pure").diagnose(FACTS).to_json() == reference
    assert entry.stat().st_size > 1000  # rewritten with the real entry
    assert expert.Expert(engine="pure").diagnose(FACTS).to_json() == reference


def test_a_truncated_entry_is_ignored(cache: Path) -> None:
    reference = expert.Expert(engine="pure").diagnose(FACTS).to_json()
    (entry,) = _entries(cache)
    entry.write_bytes(entry.read_bytes()[: entry.stat().st_size // 2])
    assert expert.Expert(engine="pure").diagnose(FACTS).to_json() == reference


def test_dam_no_cache_turns_it_off(cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DAM_NO_CACHE", "1")
    expert.Expert(engine="pure")
    assert _entries(cache) == []
    monkeypatch.delenv("DAM_NO_CACHE")
    expert.Expert(engine="pure")
    assert len(_entries(cache)) == 1
    monkeypatch.setenv("DAM_NO_CACHE", "1")
    with monkeypatch.context() as m:  # an entry exists, but is not read
        m.setattr(_loadcache, "_read", lambda *a: pytest.fail("the cache was read under DAM_NO_CACHE=1"))
        expert.Expert(engine="pure")
    monkeypatch.setenv("DAM_NO_CACHE", "0")  # "0" and "" mean on
    assert _loadcache.disabled() is False


def test_a_cache_directory_that_cannot_be_made_is_no_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    monkeypatch.setenv("XDG_CACHE_HOME", str(blocker))
    monkeypatch.delenv("DAM_NO_CACHE", raising=False)
    assert expert.Expert(engine="pure").diagnose(FACTS).bottleneck == "input"
    assert blocker.read_text() == "not a directory"


def test_no_home_and_no_xdg_is_no_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    monkeypatch.delenv("HOME", raising=False)
    monkeypatch.delenv("DAM_NO_CACHE", raising=False)
    assert _loadcache.cache_dir() is None
    assert expert.Expert(engine="pure").diagnose(FACTS).bottleneck == "input"


def test_a_relative_xdg_cache_home_is_ignored(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", "relative/cache")
    monkeypatch.setenv("HOME", str(tmp_path))
    assert _loadcache.cache_dir() == tmp_path / ".cache" / "dam-expert"


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() == 0,
                    reason="root writes into read-only directories; the unwritable case is tested above")
def test_a_read_only_cache_directory_is_read_and_never_written(cache: Path, rules: Path) -> None:
    expert.Expert(engine="pure")
    cache.chmod(0o500)
    try:
        _ = expert.Expert(engine="pure")  # read from the read-only directory
        expert.Expert(rules_dirs=[rules], engine="pure")  # a miss: nothing can be stored, and that is fine
        assert len(_entries(cache)) == 1
    finally:
        cache.chmod(0o700)


def test_a_read_only_cache_directory_works(cache: Path, rules: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """As above, for any user: every write fails as on a read-only file system."""
    reference = expert.Expert(engine="pure").diagnose(FACTS).to_json()

    def read_only(*args: object, **kwargs: object) -> None:
        raise OSError(30, "Read-only file system")

    monkeypatch.setattr(tempfile, "mkstemp", read_only)
    with monkeypatch.context() as m:
        _no_loading(m)
        assert expert.Expert(engine="pure").diagnose(FACTS).to_json() == reference  # the entry is still read
    (rules / "input.yaml").write_text((rules / "input.yaml").read_text(encoding="utf-8") + "\n", encoding="utf-8")
    assert expert.Expert(rules_dirs=[rules], engine="pure").diagnose(FACTS).to_json() == reference
    assert len(_entries(cache)) == 1
    assert not list(cache.glob(".tmp-*"))


@pytest.mark.skipif(not hasattr(os, "getuid"), reason="POSIX ownership and modes")
def test_an_entry_others_may_write_is_not_read(cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    expert.Expert(engine="pure")
    (entry,) = _entries(cache)
    for target, mode in ((entry, 0o666), (cache, 0o777)):
        target.chmod(mode)
        with monkeypatch.context() as m:
            m.setattr(pickle, "load", lambda f, t=target, mo=mode: pytest.fail(f"read an entry with {t} mode {mo:o}"))
            expert.Expert(engine="pure")
        target.chmod(0o600 if target == entry else 0o700)
    assert stat.S_IMODE(entry.stat().st_mode) == 0o600


def test_the_key_follows_the_package_code(cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    package = tmp_path / "pkg"
    package.mkdir()
    module = package / "m.py"
    module.write_text("x = 1\n")
    monkeypatch.setattr(_loadcache, "_PACKAGE", package)
    dirs = (data_dir("knowledge_base"), [data_dir("rules")])
    first = _loadcache.cache_key(*dirs)
    assert _loadcache.cache_key(*dirs) == first
    module.write_text("x = 22\n")
    assert _loadcache.cache_key(*dirs) != first
    assert _loadcache.cache_key(data_dir("knowledge_base"), [tmp_path / "missing"]) is None


def test_old_entries_are_pruned(cache: Path, rules: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_loadcache, "KEEP", 2)
    target = rules / "input.yaml"
    for i in range(4):
        target.write_text(target.read_text(encoding="utf-8") + f"\n# edit {i}\n", encoding="utf-8")
        expert.Expert(rules_dirs=[rules], engine="pure")
    assert len(_entries(cache)) == 2


def test_invalid_rules_raise_as_without_a_cache_and_store_nothing(cache: Path, rules: Path) -> None:
    (rules / "input.yaml").write_text("rules: [{id: broken}]\n", encoding="utf-8")
    with pytest.raises(expert.KnowledgeBaseError) as cached:
        expert.Expert(rules_dirs=[rules], engine="pure")
    os.environ["DAM_NO_CACHE"] = "1"
    try:
        with pytest.raises(expert.KnowledgeBaseError) as uncached:
            expert.Expert(rules_dirs=[rules], engine="pure")
    finally:
        del os.environ["DAM_NO_CACHE"]
    assert str(cached.value) == str(uncached.value)
    assert _entries(cache) == []


def test_the_cli_output_is_the_same_with_and_without_the_cache(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "XDG_CACHE_HOME": str(tmp_path)}
    env.pop("DAM_NO_CACHE", None)
    cmd = [sys.executable, str(ROOT / "cli.py"), "diagnose", "--example", "data_starved_training", "--format",
           "json"]
    outputs = [subprocess.run(cmd, capture_output=True, text=True, env=e, check=True, timeout=120).stdout
               for e in (env, env, {**env, "DAM_NO_CACHE": "1"})]
    assert outputs[0] == outputs[1] == outputs[2]
    assert len(_entries(tmp_path / "dam-expert")) == 1


# ---- bundled examples, parsed (`_loadcache.bundled_yaml`) -----------------------------------------------------------


def _examples(directory: Path) -> list[Path]:
    return sorted(directory.glob("example-*.pickle")) if directory.is_dir() else []


def test_a_bundled_example_from_the_cache_is_what_the_file_parses_to(cache: Path, tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    from expert import _yaml
    from expert._resources import examples_dir

    paths = sorted(examples_dir().glob("*.yaml"))
    parsed = [_yaml.load_yaml(path) for path in paths]
    assert [_loadcache.bundled_yaml(path) for path in paths] == parsed  # parsed, and stored
    assert len(_examples(cache)) == len(paths)
    with monkeypatch.context() as m:
        def refuse(path: Path) -> None:
            raise AssertionError("parsed, not read from the cache")

        m.setattr(_yaml, "load_yaml", refuse)
        assert [_loadcache.bundled_yaml(path) for path in paths] == parsed  # from the cache: load_yaml would raise
    # an edited file is parsed again (its bytes are in the key), and a corrupted entry is ignored
    copy = tmp_path / "edited.yaml"
    copy.write_text("description: one\nobservations: {gpu_util: 0.5}\n")
    assert _loadcache.bundled_yaml(copy)["description"] == "one"
    copy.write_text("description: two\nobservations: {gpu_util: 0.5}\n")
    assert _loadcache.bundled_yaml(copy)["description"] == "two"
    for entry in _examples(cache):
        entry.write_bytes(b"not a pickle")
    assert _loadcache.bundled_yaml(copy)["description"] == "two"


def test_a_bundled_example_without_the_cache_is_parsed(cache: Path, tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    from expert.errors import KnowledgeBaseError

    monkeypatch.setenv("DAM_NO_CACHE", "1")
    path = tmp_path / "x.yaml"
    path.write_text("gpu_util: 0.5\n")
    assert _loadcache.bundled_yaml(path) == {"gpu_util": 0.5}
    assert not _examples(cache)
    monkeypatch.delenv("DAM_NO_CACHE")
    path.write_text("gpu_util: 0.5\ngpu_util: 0.6\n")  # errors as load_yaml raises them, and nothing stored
    with pytest.raises(KnowledgeBaseError, match="duplicate key"):
        _loadcache.bundled_yaml(path)
    assert not _examples(cache)


def test_dam_diagnose_example_reads_no_yaml_once_cached(cache: Path) -> None:
    """The second cold `dam diagnose --example` imports no PyYAML: the example and the rules come from the cache."""
    code = ("import contextlib, io, sys\nfrom expert.commands import main\n"
            "with contextlib.redirect_stdout(io.StringIO()):\n"
            "    assert main(['diagnose', '--example', 'data_starved_training']) == 0\n"
            "print('yaml' in sys.modules)\n")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    runs = [subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=ROOT,
                           check=True).stdout.split()[-1] for _ in range(2)]
    assert runs == ["True", "False"]
