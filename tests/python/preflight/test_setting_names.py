"""A preflight fix that names a Hydra key owned by a ``VLGRPO_*`` setting names that setting too.

The reference is the registry file itself, read here with the csv module (not vlgrpo.environment): the
setting whose ``hydra`` column lists the key for the recipe's owner.
"""

from __future__ import annotations

import csv
import pathlib

from vlgrpo.preflight.report import ERROR, Finding, Report, Where
from vlgrpo.preflight.setting_names import name_settings

TSV = pathlib.Path(__file__).resolve().parents[3] / "python" / "src" / "vlgrpo" / "environment.tsv"
FA = ["python3", "-m", "verl.experimental.fully_async_policy.fully_async_main"]
VO = ["python3", "-m", "verl.trainer.main_ppo"]


def _owner_of(key: str, owner: str) -> list[str]:
    lines = [ln for ln in TSV.read_text().splitlines() if ln and not ln.startswith("#") and not ln.startswith("name\t")]
    return [
        r[0]
        for r in csv.reader(lines, delimiter="\t", quoting=csv.QUOTE_NONE)
        if r[2] == "setting" and owner in r[1].split(",") and key in r[6].split(";")
    ]


def _report(*findings: Finding) -> Report:
    rep = Report()
    for f in findings:
        rep.add(f)
    return rep


def test_data_finding_names_the_prompt_length_setting():
    f = Finding(
        "data.over-budget",
        ERROR,
        "row 0 is 183 tokens",
        Where(file="train.parquet", row=0),
        "",
        "raise data.max_prompt_length to at least 183",
    )
    name_settings(_report(f), FA)
    want = _owner_of("data.max_prompt_length", "fa")
    assert want == ["VLGRPO_MAX_PROMPT_LENGTH"]
    assert f.fix == "raise data.max_prompt_length to at least 183"  # the fix itself is unchanged
    assert f.setting == "VLGRPO_MAX_PROMPT_LENGTH sets data.max_prompt_length"
    assert f.line().endswith(
        "-- fix: raise data.max_prompt_length to at least 183 -- setting: "
        "VLGRPO_MAX_PROMPT_LENGTH sets data.max_prompt_length"
    )
    assert f.as_dict()["setting"] == f.setting


def test_where_key_and_plus_prefixed_keys_count():
    f = Finding(
        "rules.x",
        ERROR,
        "too small",
        Where(key="actor_rollout_ref.rollout.max_model_len"),
        "",
        "set +actor_rollout_ref.rollout.max_model_len=10240",
    )
    name_settings(_report(f), FA)
    (name,) = _owner_of("actor_rollout_ref.rollout.max_model_len", "fa")
    assert f.setting == f"{name} sets actor_rollout_ref.rollout.max_model_len"


def test_veomni_recipe_uses_its_own_rows():
    key = "data.max_prompt_length"
    f = Finding("data.over-budget", ERROR, "x", Where(), "", f"raise {key} to 2000")
    name_settings(_report(f), VO)
    assert f.setting == f"{_owner_of(key, 'vo')[0]} sets {key}"


def test_fixed_keys_and_fixes_that_name_a_setting_are_left_alone():
    fixed = Finding(
        "rules.image-patch-size", ERROR, "x", Where(key="data.image_patch_size"), "", "data.image_patch_size=16"
    )
    named = Finding("rules.y", ERROR, "x", Where(key="data.max_prompt_length"), "", "set VLGRPO_MAX_PROMPT_LENGTH=4096")
    plain = Finding("rules.z", ERROR, "x", Where(), "", "mount the model folder")
    name_settings(_report(fixed, named, plain), FA)
    assert _owner_of("data.image_patch_size", "fa") == []
    assert (fixed.setting, named.setting, plain.setting) == ("", "", "")
    assert "setting:" not in fixed.line()


def test_keys_in_the_fix_win_over_the_location():
    f = Finding(
        "data.image-exceeds-budget",
        ERROR,
        "x",
        Where(key="data.train_files"),
        "",
        "downscale those images, drop the rows, or raise data.max_prompt_length",
    )
    name_settings(_report(f), FA)
    assert f.setting == "VLGRPO_MAX_PROMPT_LENGTH sets data.max_prompt_length"
