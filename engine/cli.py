"""`safeshare deid`, `safeshare hierarchy`: the engine's commands.

Bad input exits 2 with one line naming file, field and problem; a refused result (no solution) exits 1; nothing is
written unless the whole run succeeded.
"""
from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from safeshare.exitcodes import EXIT_BAD_INPUT, EXIT_FAILED, EXIT_OK, EXIT_REFUSED

from .errors import InputError

if TYPE_CHECKING:
    from .manifest import Manifest


def _summary(manifest: "Manifest") -> str:
    lines = [
        f"dataset               {manifest.dataset}",
        f"transformation        " + ", ".join(f"{k}={v}" for k, v in manifest.transformation.items()),
        f"optimized for         {manifest.optimized_for} (optimum proven: "
        f"{'yes' if manifest.optimal else 'no, ' + str(manifest.search_stopped or 'stopped early')})",
        "quality               " + ", ".join(f"{k}={v:.6f}" for k, v in manifest.quality.items()),
        f"records               {manifest.records} ({manifest.suppressed_records} suppressed)",
        f"checked               {manifest.checked_transformations} of {manifest.lattice_size} transformations "
        f"({manifest.algorithm})",
        f"seconds               {manifest.seconds:.3f}",
    ]
    if manifest.gate is not None:
        gate = manifest.gate
        lines.append(f"gate                  {'passed' if gate.passed else 'REFUSED: ' + '; '.join(gate.reasons)}")
    return "\n".join(lines)


def run_deid(args: argparse.Namespace) -> int:
    from .deid import NoSolutionError, check_output, deidentify, write_release
    from .parallel.p4 import P4ClusterError
    from .policy import load_policy
    from .sitegate import load_site_gate, site_folder

    try:
        if args.dataset:
            from .parallel.release import deidentify_dataset

            policy = load_policy(args.policy)
            manifest = deidentify_dataset(policy, args.out, args.partitions, args.scheduler,
                                          progress=None if not args.quiet else False,
                                          site=load_site_gate(site_folder(args.site)), time_limit=args.time_limit)
        else:
            check_output(args.out)   # before the search: a run that cannot write its output should not start
            policy = load_policy(args.policy)
            site = load_site_gate(site_folder(args.site))
            result = deidentify(policy, progress=None if not args.quiet else False, time_limit=args.time_limit,
                                site=site, memory_mb=args.memory_mb, partitions=args.partitions,
                                scheduler=args.scheduler)
            manifest = write_release(result, args.out)
    except InputError as exc:
        print(f"safeshare deid: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except NoSolutionError as exc:
        print(f"safeshare deid: refused: {exc}", file=sys.stderr)
        return EXIT_REFUSED
    except P4ClusterError as exc:
        print(f"safeshare deid: failed: {exc}; nothing was written", file=sys.stderr)
        return EXIT_FAILED
    if args.json:
        print(json.dumps(manifest.document(), indent=2))
    else:
        print(_summary(manifest))
        files = "data/part-*.parquet" if manifest.is_dataset else "data.csv, data.parquet"
        print(f"written to            {Path(args.out)}/ ({files}, manifest.json, report.html)")
    return EXIT_REFUSED if manifest.gate is not None and not manifest.gate.passed else EXIT_OK


def run_hierarchy(args: argparse.Namespace) -> int:
    from .policy import load_policy
    from .table import read_table, resolve_hierarchy

    try:
        policy = load_policy(args.policy)
        if args.attribute not in policy.quasi_identifiers:
            raise InputError(policy.source, f"attributes.{args.attribute}", "not a quasi-identifying attribute")
        frame, _ = read_table(policy)
        if args.attribute not in frame.columns:
            raise InputError(policy.source, f"attributes.{args.attribute}", "no such column in the input")
        hierarchy = resolve_hierarchy(policy, args.attribute, frame[args.attribute].to_numpy())
        _check_output_file(args.out)
        try:
            hierarchy.to_csv(args.out)
        except OSError as exc:
            raise InputError(None, "--out", f"{args.out}: cannot write ({exc.strerror or exc})") from None
    except InputError as exc:
        print(f"safeshare hierarchy: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    print(f"{args.out}: {len(hierarchy)} values, {hierarchy.levels} levels")
    return EXIT_OK


def _check_output_file(out: str) -> None:
    from .atomic import check_output_file

    check_output_file(out, "--out", "CSV")


def _positive(kind: type) -> Callable[[str], float]:
    """argparse type: a finite number above 0 (a zero or infinite limit would switch the limit off)."""
    def parse(text: str) -> float:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
        if not (value > 0 and value != float("inf")):
            raise argparse.ArgumentTypeError(f"must be a finite number above 0, got {text!r}")
        return value
    return parse


def run_risk(args: argparse.Namespace) -> int:
    from .analysis import analyse, check_html_target, format_analysis, render_risk_html
    from .atomic import write_text
    from .policy import load_policy

    try:
        if args.html is not None:
            check_html_target(args.html)   # before the analysis: a page that cannot be written should fail fast
        report = analyse(load_policy(args.policy), loglinear=args.loglinear, top=args.top)
        if args.html is not None:
            try:
                write_text(args.html, render_risk_html(report))   # temporary file, then one rename
            except OSError as exc:
                raise InputError(None, "--html", f"{args.html}: cannot write ({exc.strerror or exc})") from None
    except InputError as exc:
        print(f"safeshare risk: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    print(json.dumps(report, indent=2) if args.json else format_analysis(report))
    if args.html is not None and not args.json:
        print(f"\nwritten to         {args.html}")
    return EXIT_OK


def run_release(args: argparse.Namespace) -> int:
    from safeshare.signing import KeyFileError

    from .bundle import SEAL, BundleError, name_release, seal_release

    try:
        folder, releases = Path(args.folder), Path(args.to)
        if args.name and (folder / SEAL).is_file() and folder.resolve().is_relative_to(releases.resolve()):
            target = folder   # a bundle sealed before: only (re)name it (name_release verifies it)
        else:
            target = seal_release(args.folder, args.to, signing_key=args.signing_key, trust=args.trust,
                                  policy=args.policy)
        if args.name:
            name_release(args.to, args.name, target, trust=args.trust, signing_key=args.signing_key)
    except (KeyFileError, InputError) as exc:   # InputError: the site's gate.yaml or the --policy file is unusable
        print(f"safeshare release: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except BundleError as exc:
        print(f"safeshare release: refused: {exc}", file=sys.stderr)
        return EXIT_REFUSED
    print(target)
    return EXIT_OK


def run_verify(args: argparse.Namespace) -> int:
    from safeshare.signing import KeyFileError, TrustStore
    from safeshare.sitefolder import site_trust

    from .bundle import BundleError, check_bundle, parse_release_ref

    try:
        trust_path = site_trust(args.trust, args.site)  # never from where the bundle lies
        trust = TrustStore.load(trust_path)
        release = parse_release_ref(args.release) if args.release is not None else None
    except (KeyFileError, BundleError) as exc:
        print(f"safeshare verify-release: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    try:
        verified = check_bundle(args.folder, trust, release)
    except BundleError as exc:
        print(f"safeshare verify-release: refused: {exc}", file=sys.stderr)
        return EXIT_REFUSED
    manifest, signature = verified.manifest, verified.seal["signature"]
    print(f"{args.folder}: sealed release {manifest.dataset}/{verified.seal['release']} verifies (data sha256 "
          f"{manifest.data_sha256}; signed by release key {verified.key.key_id} at {signature['signed_at']}, trusted "
          f"in {trust_path})")
    return EXIT_OK


def register(subparsers: argparse._SubParsersAction) -> None:
    deid = subparsers.add_parser(
        "deid", help="de-identify a table under a dataset policy and write a release bundle",
        description="Search the generalization lattice for the transformation of best quality that satisfies the "
                    "policy's privacy models, apply it, and write data.csv, data.parquet, manifest.json and "
                    "report.html. Exit 0 on success, 1 when refused (no solution or gate failed), 2 on bad input, "
                    "3 when a P4 run's Dask cluster failed (nothing is written). The policy's input: is a CSV, "
                    "Parquet, Stata, SAS or Excel file, or a PostgreSQL or SQLite database (url: with table: or "
                    "one read-only query:, run in a read-only transaction); a database password is read from the "
                    "environment variable (password_env:) or the owner-only file (password_file:) the policy names, "
                    "never from the URL, and manifest.json records what was read without it.")
    deid.add_argument("policy", help="dataset policy (YAML)")
    deid.add_argument("--out", required=True, help="output folder for the release bundle")
    deid.add_argument("--json", action="store_true", help="print manifest.json instead of a summary")
    deid.add_argument("--time-limit", type=_positive(float), default=None, metavar="SECONDS",
                      help="stop the search after this long and use the best solution so far (default: the policy's "
                           "search.time_limit_seconds, 600); the manifest then says optimal: false")
    deid.add_argument("--memory-mb", type=_positive(int), default=None, metavar="MB",
                      help="stop the search once it has grown the process by this much and use the best solution so "
                           "far (default: the policy's search.memory_mb, 1024); a quarter of it bounds the class cache")
    deid.add_argument("--site", metavar="SITE", default=None,
                      help="site folder whose gate.yaml is the floor of the release gate (default: $SAFESHARE_SITE, "
                           "else /var/lib/safeshare if it exists; without a gate.yaml the built-in floor applies: "
                           "|PU|/|SU| <= 0.25 in USA, California and Los Angeles under Dankar's rule). The site's "
                           "estimator(s) always decide; estimators the policy's gate names are added, and the gate "
                           "holds for the strictest")
    deid.add_argument("--partitions", type=_positive(int), default=None, metavar="P",
                      help="P4 partitioned anonymization with P partitions (overrides the policy's "
                           "search.parallel.partitions): each anonymized in parallel, harmonized, checked when merged")
    deid.add_argument("--scheduler", default=None, metavar="ADDRESS",
                      help="where P4 runs: local (a Dask cluster with a process per core, the default), none (this "
                           "process), or a Dask scheduler such as tcp://host:8786")
    deid.add_argument("--dataset", action="store_true",
                      help="for tables larger than one process: P4 whose workers read the input (Parquet or CSV) in "
                           "chunks and write the release as data/part-NNNNN.parquet; the driver holds summaries only "
                           "(no data.csv; gate.require and research subsets are refused)")
    deid.add_argument("--quiet", action="store_true", help="no progress bar")
    deid.set_defaults(func=run_deid)

    hierarchy = subparsers.add_parser(
        "hierarchy", help="write the hierarchy of one attribute (from a file or a builder) as ARX-style CSV",
        description="Resolve the hierarchy a policy gives an attribute (a CSV file or a builder applied to the "
                    "data) and write it as `;`-separated CSV, one row per original value.")
    hierarchy.add_argument("policy", help="dataset policy (YAML)")
    hierarchy.add_argument("attribute", help="quasi-identifying attribute")
    hierarchy.add_argument("--out", required=True, help="CSV file to write")
    hierarchy.set_defaults(func=run_hierarchy)

    risk = subparsers.add_parser(
        "risk", help="analyse the re-identification risk of a policy's input table as it is",
        description="Class-size histogram, sample uniques, prosecutor risk profile and every population model's "
                    "estimate (Pitman, Zayatz, SNB, Dankar's rule, calibrated), with what the calibration benchmark "
                    "found about each at that sampling fraction, for every configured population, and for each "
                    "attribute declared sensitive its attribute disclosure (per class distinct values, entropy and "
                    "distance to the table's distribution; share of records in classes failing l-diversity for "
                    "l = 2, 3, 5 and t-closeness for t = 0.1, 0.2, 0.5), each record's re-identification risk "
                    "(negative-binomial model of Benedetti and Franconi, Skinner and Shlomo's log-linear Poisson "
                    "model: expected re-identifications, tau1, tau2, the riskiest records, a histogram), "
                    "on the input without any transformation "
                    "(any input kind safeshare deid reads). From Python without a policy file: "
                    "engine.risk_report(frame, quasi_identifiers=[...], population=...).")
    risk.add_argument("policy", help="dataset policy (YAML)")
    risk.add_argument("--json", action="store_true", help="print JSON with stable field names")
    risk.add_argument("--html", metavar="FILE", default=None,
                      help="also write the figures as a self-contained HTML page with plots (written atomically)")
    risk.add_argument("--loglinear", choices=("main", "two_way", "none"), default="main",
                      help="per-record risk: the Skinner-Shlomo log-linear model's terms (main effects, every "
                           "two-way interaction: fitted on the full table, at most 5 million cells; none)")
    risk.add_argument("--top", type=_positive(int), default=10, metavar="N",
                      help="per-record risk: how many of the riskiest classes to list (default 10)")
    risk.set_defaults(func=run_risk)

    release = subparsers.add_parser(
        "release", help="seal and sign a deid output folder into the releases store, only if its gate passed",
        description="Verify a `safeshare deid` output (file hashes, data sha256, gate verdict), copy it into "
                    "RELEASES/<dataset>/<id>/ and write seal.json: the manifest's SHA-256 signed with the site's "
                    "release key (Ed25519). The gate verdict in the manifest is not trusted: the release gate is "
                    "evaluated again on the released data file(s) (classes over the quasi-identifiers, sample "
                    "uniques, population uniqueness per population under every estimator that decides), with the "
                    "manifest's policy gate tightened to the gate of the site that releases (RELEASES/../gate.yaml, "
                    "else the built-in floor), and every risk figure the manifest records must match that "
                    "recomputation. Which columns are released and which are quasi-identifiers is not taken from "
                    "the manifest (its writer could drop a raw quasi-identifier from 'transformation' or add a "
                    "column): with --policy they are the dataset policy's (its sha256 must be the manifest's "
                    "policy_sha256; its quasi-identifiers form the classes; the data must hold exactly its "
                    "quasi-identifying, sensitive and insensitive attributes, no identifying one; its gate is the "
                    "policy gate); without --policy every released column must be a quasi-identifier the manifest's "
                    "'transformation' names (so every column is gated), and an output releasing a sensitive or "
                    "insensitive attribute is refused. Default key and trust store: those of the site whose "
                    "releases folder "
                    "RELEASES is, i.e. RELEASES/../keys/release-signing.key (created 0600 in a 0700 folder on first "
                    "use, like `safeshare site init`) and RELEASES/../trust.json (the key's public half is added "
                    "there on creation; RELEASES as given with --to, links not followed). The sealed copy must "
                    "verify against the trust store before it is renamed into place. Its seal names the dataset and "
                    "id it is sealed as, and consumers refuse it anywhere but RELEASES/<dataset>/<id>; they take the "
                    "trust store from the site (--site, $SAFESHARE_SITE, /var/lib/safeshare) or --trust, never from "
                    "the releases folder."
                    " Exit 1 with the reasons when the gate does not pass on the data, the manifest's "
                    "figures differ from the data's, the columns are not the policy's (or, without --policy, not "
                    "all quasi-identifiers), or anything does not verify (nothing is written); 2 for an unusable "
                    "key, trust file, site gate or policy file.",
    )
    release.add_argument("folder", help="output folder of safeshare deid (with --name, also a bundle already "
                                        "sealed in RELEASES: it is only named)")
    release.add_argument("--to", required=True, metavar="RELEASES", help="root folder of sealed releases "
                                                                          "(SITE/releases)")
    release.add_argument("--name", help="also name the release (RELEASES/NAME, what recipient policies' `release:` "
                                        "refers to); moves an existing name to this bundle. The binding is signed "
                                        "with the release key (RELEASES/NAME.name.json, its signature kept in the "
                                        "key's ledger): consumers refuse a name whose link points elsewhere than "
                                        "its signed record says, or that has no record (named before; name it "
                                        "again: safeshare release RELEASES/<dataset>/<id> --to RELEASES --name "
                                        "NAME)")
    release.add_argument("--policy", metavar="POLICY.yaml", help="the dataset policy the output was made with (the "
                         "custodian's file, not one from the output folder; its sha256 must be the manifest's "
                         "policy_sha256): the released columns and the quasi-identifiers the gate groups on are "
                         "taken from it, and its gate tightens the site's. Without it every released column must be a "
                         "quasi-identifier the manifest names; needed to release sensitive or insensitive "
                         "attributes")
    release.add_argument("--signing-key", metavar="FILE", help="Ed25519 private key (PEM, mode 0600) to sign with "
                         "(default RELEASES/../keys/release-signing.key, created on first use)")
    release.add_argument("--trust", metavar="FILE", help="trust store the sealed bundle must verify against "
                         "(default RELEASES/../trust.json, RELEASES as given with --to)")
    release.set_defaults(func=run_release)

    verify = subparsers.add_parser(
        "verify-release", help="check a sealed release bundle as its consumers do (signature, seal, hashes, gate)",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="""\
Check a sealed release bundle as the app, provisioning and `safeshare up` do: the seal
is signed (Ed25519) by a key the trust store trusts for releases (a retired key only
for the signatures recorded when it was retired, whatever date a signature claims),
the seal names the release the folder is, the seal matches the manifest, the manifest
matches every file, and the gate passed.

Exit 0 when all of that holds; 1 when refused (unsigned, a key the site does not
trust, a signature that does not match, a retired key's new signature, a bundle under
another release's name, any changed byte, a file the manifest does not list, a failed
gate); 2 when no trust store is
named or it cannot be used.

What it proves, and against whom:
  - a READER of the folder: the bundle holds no secret that lets anyone sign (the
    private key is in SITE/keys, never next to a release), so reading a bundle gives
    no way to make a forged one verify.
  - a WRITER of the folder (the releases store or the bundle): any change is refused:
    edited data, manifest or seal, a hand-written seal, a failed gate marked as passed,
    raw data with every hash recomputed, a bundle signed by a key of the writer's own
    with a trust.json of theirs next to it (or a release name pointing at one), a
    genuine bundle copied under another release's id or dataset, a release name
    re-pointed at another genuine bundle, a file added to a genuine bundle
    (everything in the folder enters the enclave). A writer cannot re-sign without
    the private release key. This holds as long as the key
    (SITE/keys/release-signing.key, 0600, the custodian's user) and SITE/trust.json
    (written only by the custodian) are out of the writer's reach, and the verifier
    is told the site (or its trust.json) by whoever runs it.
  - someone who kept a copy of a RETIRED release key: what it signs after the
    rotation is refused, whatever signing time it writes (`safeshare custodian key
    rotate` records the seals the old key had signed in trust.json). Not what such a
    copy sealed into SITE/releases BEFORE the rotation: the rotation records every
    seal it finds there, so review SITE/releases before rotating a leaked key.
  - NOT against someone who holds the custodian's release signing key or can write
    trust.json: they can sign, or trust a key of theirs for, anything.

Trust store: --trust FILE, else SITE/trust.json of the site named by --site, else
$SAFESHARE_SITE, else /var/lib/safeshare (if it exists); with none of them it
refuses (exit 2). Never a trust.json near the bundle: a writer of the releases
folder could put one there (or point a release name at a folder that has one).

Where it lies: the seal names the bundle's dataset and id, and the folder must be
<dataset>/<id> or the release given with --release; a genuine bundle copied under
another release's name is refused. A release name (RELEASES/<name>, a link made by
`safeshare release --name`) is the release its signed name record
RELEASES/<name>.name.json says: a name whose link a writer of the releases folder
re-pointed at another genuine bundle, or a name without a record (named before names
were signed: name it again with `safeshare release RELEASES/<dataset>/<id> --to
RELEASES --name <name>`), is refused; so is an older record of the name restored with
its old link, where the release key's ledger (SITE/keys, the custodian's) can be read.""")
    verify.add_argument("folder", help="a sealed release folder (RELEASES/<dataset>/<id>, or a release name)")
    verify.add_argument("--trust", metavar="FILE", help="the trust store to verify against (default: SITE/trust.json "
                                                        "of --site)")
    verify.add_argument("--site", metavar="SITE", default=None,
                        help="the site whose trust.json decides (default: $SAFESHARE_SITE, else /var/lib/safeshare "
                             "if it exists)")
    verify.add_argument("--release", metavar="DATASET/ID", default=None,
                        help="the release the folder must hold (default: the folder's own <dataset>/<id>; needed "
                             "for a folder such as a container's /release mount)")
    verify.set_defaults(func=run_verify)
