"""C01: the preflight's ``mm-limits`` check. On vLLM 0.13.0 (the images'; assumed when vLLM is not installed)
any setting that lets video inputs through is an error naming both advisories; the image limit must hold the
largest image count of a data row (the shipped Geometry3K sample: one image per row)."""

from __future__ import annotations

from types import SimpleNamespace

from preflight_helpers import set_override

from vlgrpo.preflight import run_preflight
from vlgrpo.preflight.mm_limits import KEY, check_mm_limits
from vlgrpo.preflight.report import Report


def _codes(report, code):
    return [f for f in report.findings if f.code == code]


def test_recipe_limits_pass_and_count_one_image_per_geo3k_row(clean_fixed_report):
    r = clean_fixed_report
    assert not _codes(r, "rules.video-enabled") and not _codes(r, "rules.image-limit")
    assert r.summary["mm_limits"]["video"] == 0 and r.summary["mm_limits"]["image"] == 1
    assert r.summary["mm_limits"]["max_images_per_row"] == 1


def _with_limit(argv, value):
    """argv without the recipe's limit_mm_per_prompt override, plus ``+KEY=value`` when value is given."""
    out = [a for a in argv if "limit_mm_per_prompt" not in a]
    return out + [f"+{KEY}={value}"] if value is not None else out


def test_video_reenabled_is_refused_naming_both_advisories(fixed_argv):
    for value in (None, "{image:1,video:1}", "{image:1}"):
        report = run_preflight(_with_limit(fixed_argv, value), check_data=False)
        hits = _codes(report, "rules.video-enabled")
        assert hits and report.exit_code == 2, (value, [f.line() for f in report.findings])
        assert "CVE-2026-22778" in hits[0].why and "CVE-2026-34755" in hits[0].why
        assert "GHSA-pq5c-rjhq-qp7p" in hits[0].why and "video:0" in hits[0].fix


def test_limit_images_drops_video_zero_as_verl_does(fixed_argv):
    report = run_preflight(set_override(fixed_argv, "+actor_rollout_ref.rollout.limit_images", "1"), check_data=False)
    hits = _codes(report, "rules.video-enabled")
    assert hits and "limit_images" in hits[0].why and hits[0].where.key == "actor_rollout_ref.rollout.limit_images"


def test_image_limit_below_the_data_is_refused(fixed_argv):
    report = run_preflight(_with_limit(fixed_argv, "{image:0,video:0}"))
    hits = _codes(report, "rules.image-limit")
    assert hits and "has 1 images, the limit is 0" in hits[0].what, [f.line() for f in report.findings]


def test_a_vllm_outside_both_ranges_may_take_video():
    work = SimpleNamespace(actor_rollout_ref=SimpleNamespace(rollout={"engine_kwargs": {"vllm": {}}}))
    work.actor_rollout_ref.rollout = _Cfg({"engine_kwargs": {"vllm": {}}})
    loc = _Loc()
    for version, refused in (("0.13.0", True), ("0.14.1", True), ("0.18.9", True), ("0.19.0", False)):
        report = Report()
        check_mm_limits(work, report, loc, 1, version=version)
        assert bool(_codes(report, "rules.video-enabled")) is refused, version


class _Cfg(dict):
    def __getattr__(self, name):
        return self[name]


class _Loc:
    def where(self, key, **extra):
        from vlgrpo.preflight.report import Where

        return Where(key=key, **extra)
