"""SITE/outputs.yaml: the site floor of the output rules, which a dataset policy may tighten and never relax; bad
files name the file, the key and the problem (exit code 2)."""
from __future__ import annotations

import json

import pytest

from engine.errors import InputError
from outputs.floor import effective_rules, load_floor, main, tighten
from outputs.rules import RULE_NAMES, RuleSet


def _site(tmp_path, text: str | None):
    site = tmp_path / "site"
    site.mkdir()
    if text is not None:
        (site / "outputs.yaml").write_text(text)
    return site


def test_defaults_are_acros_without_a_site_file(tmp_path):
    rules = load_floor(_site(tmp_path, None))
    assert rules.rules.model_dump() == {"safe_threshold": 10, "safe_dof_threshold": 10, "safe_nk_n": 2,
                                        "safe_nk_k": 0.90, "safe_pratio_p": 0.10, "zeros_are_disclosive": True,
                                        "safe_round_base": 5}
    assert set(rules.origin.values()) == {"default"} and rules.site_source is None


def test_site_numbers_are_recorded_with_their_origin(tmp_path):
    site = _site(tmp_path, "safe_threshold: 15\nzeros_are_disclosive: true\n")
    rules = load_floor(site)
    assert rules.safe_threshold == 15
    assert rules.origin["safe_threshold"] == "site" and rules.origin["safe_nk_k"] == "default"
    record = rules.record()
    assert record["site"]["source"] == str(site / "outputs.yaml") and len(record["site"]["sha256"]) == 64
    assert set(record["origin"]) == set(RULE_NAMES)


def test_a_policy_may_tighten(tmp_path):
    floor = load_floor(_site(tmp_path, "safe_threshold: 15\n"))
    rules = tighten(floor, {"safe_threshold": 20, "safe_nk_k": 0.8, "safe_pratio_p": 0.15, "safe_nk_n": 1,
                            "safe_dof_threshold": 10}, "policies/adult.yaml")
    assert (rules.safe_threshold, rules.safe_nk_k, rules.safe_pratio_p, rules.safe_nk_n) == (20, 0.8, 0.15, 1)
    assert rules.origin["safe_threshold"] == "policy" and rules.origin["safe_nk_k"] == "policy"
    assert rules.origin["safe_dof_threshold"] == "default"   # equal to the floor: the floor's origin stays
    assert rules.policy_source == "policies/adult.yaml"


@pytest.mark.parametrize("key, value", [("safe_threshold", 5), ("safe_dof_threshold", 9), ("safe_nk_n", 3),
                                        ("safe_nk_k", 0.95), ("safe_pratio_p", 0.05),
                                        ("zeros_are_disclosive", False), ("safe_round_base", 1)])
def test_a_policy_may_not_relax(tmp_path, key, value):
    floor = load_floor(_site(tmp_path, "safe_threshold: 10\n"))
    with pytest.raises(InputError) as info:
        tighten(floor, {key: value}, "policies/adult.yaml")
    assert info.value.file == "policies/adult.yaml" and info.value.field == f"outputs.{key}"
    assert "relax" in info.value.problem


def test_a_policy_may_not_relax_the_built_in_floor_either():
    with pytest.raises(InputError, match="built-in floor"):
        tighten(RuleSet(), {"safe_threshold": 3}, "p.yaml")


@pytest.mark.parametrize("text, key, problem", [
    ("safe_treshold: 10\n", "safe_treshold", "unknown key"),
    ("safe_threshold: '10'\n", "safe_threshold", "valid integer"),
    ("safe_threshold: true\n", "safe_threshold", "valid integer"),
    ("safe_nk_k: .nan\n", "safe_nk_k", "finite"),
    ("safe_nk_k: 1.5\n", "safe_nk_k", "less than or equal to 1"),
    ("safe_threshold: 0\n", "safe_threshold", "greater than or equal to 1"),
])
def test_bad_site_files_name_file_key_and_problem(tmp_path, capsys, text, key, problem):
    site = _site(tmp_path, text)
    with pytest.raises(InputError) as info:
        load_floor(site)
    assert info.value.file == str(site / "outputs.yaml") and info.value.field == key
    assert problem in info.value.problem
    assert main(["--site", str(site)]) == 2
    err = capsys.readouterr().err
    assert str(site / "outputs.yaml") in err and key in err


@pytest.mark.parametrize("text", ["- 1\n- 2\n", "safe_threshold: [\n"])
def test_site_file_that_is_not_a_mapping(tmp_path, text):
    with pytest.raises(InputError):
        load_floor(_site(tmp_path, text))


def test_policy_file_tightens_through_the_command(tmp_path, capsys):
    site = _site(tmp_path, "safe_threshold: 12\n")
    policy = tmp_path / "policy.yaml"
    policy.write_text("dataset: adult\noutputs:\n  safe_threshold: 20\n")
    assert main(["--site", str(site), "--policy", str(policy)]) == 0
    record = json.loads(capsys.readouterr().out)
    assert record["rules"]["safe_threshold"] == 20 and record["origin"]["safe_threshold"] == "policy"
    policy.write_text("outputs:\n  safe_threshold: 8\n")
    assert main(["--site", str(site), "--policy", str(policy)]) == 2
    assert "outputs.safe_threshold" in capsys.readouterr().err
    rules = effective_rules(site, None)
    assert rules.safe_threshold == 12


def test_named_site_that_is_not_a_folder(tmp_path):
    with pytest.raises(InputError, match="not a folder"):
        effective_rules(tmp_path / "nowhere")


def test_a_policy_number_of_the_wrong_type_is_bad_input():
    with pytest.raises(InputError) as info:
        tighten(RuleSet(), {"safe_threshold": True}, "p.yaml")
    assert info.value.field == "outputs.safe_threshold"
    with pytest.raises(InputError, match="unknown key"):
        tighten(RuleSet(), {"safe_thresold": 20}, "p.yaml")


def test_the_verdict_records_the_rules_and_their_origins(tmp_path):
    from outputs.checks import check_table
    from tests.outputs.microdata import count_stats
    site = _site(tmp_path, "safe_threshold: 12\n")
    rules = tighten(load_floor(site), {"safe_nk_k": 0.8}, "policy.yaml")
    record = check_table(count_stats([[11, 30], [30, 30]]), "crosstab", rules).to_dict()
    assert record["status"] == "fail"   # 11 < the site's 12
    assert record["rules"]["rules"]["safe_threshold"] == 12
    assert record["rules"]["origin"]["safe_threshold"] == "site" and record["rules"]["origin"]["safe_nk_k"] == "policy"
    assert record["rules"]["site"]["source"] == str(site / "outputs.yaml")
    assert record["rules"]["policy"] == "policy.yaml"
