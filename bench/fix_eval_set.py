"""Builds the fix-retrieval evaluation set that `astra-mcp eval fixes` runs (src/eval/fix_eval_set.json).

A store of confirmed fixes as agents leave them, and for each fix a query as a later agent would search:
the failing tests and assertion lines that `run_tests` reports in *another* project that hit the same
cause. The query is worded apart from the fix: another test name, another assertion, none of the fix's
sentences. The set is made of look-alike groups, the cases where retrieval goes wrong:

- one cause, many instances that differ only in an identifier (a config key, an error code, a field, a
  module), some by one character (`retry_limit` / `retry_limits`, `E4102` / `E4120`): only the identifier
  tells them apart, which a sentence embedding barely sees;
- families of causes with the same error type in the same file (`settings.py`, `AssertionError`), which
  share most of their words: only the meaning of the symptom tells them apart;
- every cause has two wordings of its fix and two of its symptoms, used in turn.

The split is by cause: the causes of the held-out split are never looked at while tuning the fusion (its
weights were chosen on `tune` alone; `astra-mcp eval fixes` reports both). Identifier queries
(`"<identifier>"` alone and `"<error type> <identifier>"`) ask for the one stored fix that holds a token.

Deterministic: the same seed gives the same file. Run from the repository root:

    python3 bench/fix_eval_set.py            # rewrites src/eval/fix_eval_set.json
    python3 bench/fix_eval_set.py --check    # exits 1 when the file differs from what the script makes
"""

from __future__ import annotations

import argparse
import json
import random
import re
import sys
from pathlib import Path

OUT = Path(__file__).resolve().parent.parent / "src" / "eval" / "fix_eval_set.json"
SEED = 20261203
INSTANCES = 9  # fixes per cause
HELD_OUT_EVERY = 3  # every third cause (in the order below) is held out

# Identifier pools: each cause draws INSTANCES identifiers from one pool; neighbours differ by one
# character where the pool has such pairs.
POOLS = {
    "key": ["ALLOWED_ORIGINS", "ALLOWED_ORIGIN", "TRUSTED_HOSTS", "TRUSTED_HOST", "CORS_DOMAINS", "ADMIN_EMAILS",
            "SINK_NAMES", "QUEUE_NAMES", "FEATURE_FLAGS", "EXCLUDED_PATHS", "RETRY_CODES", "PROXY_LIST"],
    "setting": ["retry_limit", "retry_limits", "page_size", "page_sizes", "batch_size", "pool_size",
                "max_workers", "max_worker", "timeout_ms", "timeouts_ms", "cache_ttl", "lock_ttl"],
    "code": ["E4102", "E4120", "E4012", "E1021", "E1012", "E2203", "E2230", "E3301", "E3310", "E5005",
             "E5050", "E7001"],
    "field": ["tenant_id", "tenant_ids", "user_id", "owner_id", "created_at", "created_on", "due_date",
              "due_at", "expires_at", "expired_at", "amount_cents", "amount_cent"],
    "module": ["billing", "billings", "invoices", "invoice", "shipping", "shipment", "ledger", "ledgers",
               "payouts", "payout", "refunds", "refund"],
    "header": ["X-Request-Id", "X-Request-ID", "X-Tenant-Id", "X-Trace-Id", "X-Api-Key", "X-Api-Keys",
               "X-Forwarded-For", "X-Forwarded-Host", "X-Real-Ip", "X-Client-Id", "X-Client-Ids",
               "X-Correlation-Id"],
    "tz": ["Europe/Berlin", "Europe/Bern", "America/New_York", "America/Chicago", "Asia/Tokyo", "Asia/Seoul",
           "Australia/Sydney", "Australia/Perth", "Europe/Paris", "Europe/Prague", "Africa/Cairo",
           "Africa/Accra"],
    "queue": ["emails-high", "emails-low", "webhooks-out", "webhooks-in", "exports-daily", "exports-weekly",
              "thumbnails", "thumbnail", "digest-am", "digest-pm", "audit-sync", "audit-async"],
}

PROJECTS = ["storefront", "payroll", "helpdesk", "atlas-api", "warehouse", "crm-lite", "fleet", "kiosk",
            "newsroom", "clinic", "tutor", "ledgerly", "booking", "forum", "gateway", "mailer"]

# A cause: error type, files, two wordings of the fix, the symptom the fixing session saw, and two
# wordings of a later project's symptom (the query). `{x}` is the identifier, `{x_lower}` / `{x_snake}`
# forms of it, `{pkg}` the package.
CAUSES = [
    # --- settings.py / AssertionError family
    dict(id="env-list-whitespace", pool="key", error="AssertionError", files=["{pkg}/settings.py"],
         fix=["Split the comma-separated {x} environment value and strip the whitespace around each entry; "
              "'a, b' used to yield ' b' with a leading space.",
              "The {x} list is read from env by splitting on commas; entries kept the blank after each comma. "
              "Now every item is trimmed before it is compared."],
         seen="tests/test_settings.py::test_{x_lower}_lists_every_entry: AssertionError: assert ' two.example' == 'two.example'",
         query=["tests/test_config.py::test_second_{x_lower}_entry_accepted: AssertionError: assert 'b.example' in ['a.example', ' b.example']",
                "tests/test_env.py::test_{x_lower}_parsed: AssertionError: second item of {x} has a leading space"]),
    dict(id="env-bool-string", pool="key", error="AssertionError", files=["{pkg}/settings.py"],
         fix=["Parse the {x} toggle with an explicit truthy set ('1', 'true', 'yes'); bool('false') is True so "
              "the feature could never be switched off.",
              "{x} came from os.environ as a string and was passed to bool(), which is True for any non-empty "
              "text. Compare against the accepted true words instead."],
         seen="tests/test_settings.py::test_{x_lower}_can_be_disabled: AssertionError: assert True is False",
         query=["tests/test_flags.py::test_{x_lower}_off_when_env_says_false: AssertionError: expected disabled, got enabled",
                "tests/test_toggle.py::test_{x_lower}_false_string: AssertionError: assert settings.{x} == False"]),
    dict(id="env-int-default", pool="setting", error="TypeError", files=["{pkg}/settings.py"],
         fix=["Convert {x} from the environment with int() before it is used in arithmetic; when the variable "
              "is set it arrived as a str and `{x} * 2` repeated the text.",
              "The default for {x} was an int but the env override was a string; cast the override to int so both "
              "paths give the same type."],
         seen="tests/test_settings.py::test_{x_lower}_from_env: TypeError: unsupported operand type(s) for +: 'int' and 'str'",
         query=["tests/test_limits.py::test_{x_lower}_override: TypeError: can only concatenate str (not \"int\") to str",
                "tests/test_runtime.py::test_{x_lower}_env_value_is_number: TypeError: '<' not supported between instances of 'str' and 'int'"]),
    dict(id="setting-name-typo", pool="setting", error="AttributeError", files=["{pkg}/settings.py"],
         fix=["The code read settings.{x} but the settings object defines it under another spelling; use the "
              "declared name everywhere and add it to the settings schema.",
              "Rename the lookup to the attribute the Settings class declares ({x}); the misspelt attribute only "
              "existed in the docs."],
         seen="tests/test_settings.py::test_{x_lower}_is_exposed: AttributeError: 'Settings' object has no attribute '{x}'",
         query=["tests/test_app.py::test_boot_reads_{x_lower}: AttributeError: 'Settings' object has no attribute '{x}'",
                "tests/test_startup.py::test_{x_lower}_used_at_startup: AttributeError: module settings has no attribute {x}"]),
    # --- error codes in an API layer
    dict(id="error-code-mapping", pool="code", error="AssertionError", files=["{pkg}/errors.py", "{pkg}/api.py"],
         fix=["Map error code {x} to HTTP 409 Conflict in the error table; it fell through to the generic 500 "
              "handler.",
              "The api's exception table had no entry for {x}, so clients saw an internal error. Added it with "
              "status 409 and its message."],
         seen="tests/test_api.py::test_{x_lower}_is_conflict: AssertionError: assert 500 == 409",
         query=["tests/test_errors.py::test_{x_lower}_status: AssertionError: expected status 409 for {x}, got 500",
                "tests/test_http.py::test_duplicate_returns_{x_lower}: AssertionError: response.status_code 500 != 409"]),
    dict(id="error-code-retryable", pool="code", error="AssertionError", files=["{pkg}/errors.py", "{pkg}/retry.py"],
         fix=["Mark {x} as retryable in the retry policy: it is a transient lock timeout, and the worker gave "
              "up on the first attempt.",
              "The retry decorator only retried network errors; {x} (temporary lock contention) now counts as "
              "transient and is retried with backoff."],
         seen="tests/test_retry.py::test_{x_lower}_is_retried: AssertionError: assert 1 == 3",
         query=["tests/test_worker.py::test_transient_{x_lower}_retried: AssertionError: job attempted once, expected 3 attempts",
                "tests/test_policy.py::test_policy_retries_{x_lower}: AssertionError: {x} not in RETRYABLE"]),
    # --- fields in serializers
    dict(id="field-missing-serializer", pool="field", error="KeyError", files=["{pkg}/serializers.py"],
         fix=["Include {x} in the serializer's field list; the API response dropped it, so clients that "
              "index the payload by it crashed.",
              "The output schema omitted {x}: add it to the serialized fields and to the response model."],
         seen="tests/test_serializers.py::test_{x_lower}_in_payload: KeyError: '{x}'",
         query=["tests/test_api_payload.py::test_payload_has_{x_lower}: KeyError: '{x}'",
                "tests/test_export.py::test_export_row_{x_lower}: KeyError: '{x}'"]),
    dict(id="field-null-ordering", pool="field", error="TypeError", files=["{pkg}/queries.py"],
         fix=["Sort by {x} with nulls last using a key that maps None to a sentinel; comparing None with a "
              "value raised in Python 3.",
              "Rows without {x} broke the ordering: the sort key now puts missing values at the end instead of "
              "comparing None to real values."],
         seen="tests/test_queries.py::test_sort_by_{x_lower}: TypeError: '<' not supported between instances of 'NoneType' and 'datetime'",
         query=["tests/test_listing.py::test_listing_orders_{x_lower}_with_gaps: TypeError: '<' not supported between instances of 'NoneType' and 'int'",
                "tests/test_report.py::test_report_sorted_on_{x_lower}: TypeError: unorderable types NoneType and str"]),
    dict(id="field-decimal-rounding", pool="field", error="AssertionError", files=["{pkg}/money.py"],
         fix=["Round {x} with Decimal and ROUND_HALF_UP instead of float round(); banker's rounding turned 2.675 "
              "into 2.67.",
              "Money in {x} went through binary floats. Keep it as Decimal end to end and quantize half-up to two "
              "places."],
         seen="tests/test_money.py::test_{x_lower}_rounds_half_up: AssertionError: assert Decimal('2.67') == Decimal('2.68')",
         query=["tests/test_invoice_totals.py::test_total_{x_lower}_cents: AssertionError: 10.004999 rounded to 10.0 instead of 10.01",
                "tests/test_checkout.py::test_{x_lower}_half_cent: AssertionError: assert 0.67 == 0.68"]),
    # --- modules / imports
    dict(id="circular-import", pool="module", error="ImportError", files=["{pkg}/{x}/__init__.py", "{pkg}/{x}/models.py"],
         fix=["Break the circular import between {x}.models and {x}.services by importing the service inside "
              "the function that needs it.",
              "{x}/__init__ imported models, which imported services, which imported the package again. Moved "
              "the import to call time."],
         seen="tests/test_{x_lower}.py::test_import: ImportError: cannot import name 'Service' from partially initialized module '{x}.services' (most likely due to a circular import)",
         query=["tests/test_boot.py::test_{x_lower}_loads: ImportError: cannot import name 'Model' from partially initialized module '{x}.models'",
                "tests/test_plugins.py::test_register_{x_lower}: ImportError: circular import while importing {x}"]),
    dict(id="module-missing-init", pool="module", error="ModuleNotFoundError", files=["{pkg}/{x}/__init__.py"],
         fix=["Add the missing __init__.py to the {x} package so it is importable outside the source tree "
              "(the wheel left it out).",
              "The {x} directory was a namespace package by accident; packaging skipped it. Added __init__.py and "
              "listed the package in setup."],
         seen="tests/test_packaging.py::test_{x_lower}_importable: ModuleNotFoundError: No module named '{pkg}.{x}'",
         query=["tests/test_install.py::test_installed_wheel_has_{x_lower}: ModuleNotFoundError: No module named '{pkg}.{x}'",
                "tests/test_cli.py::test_cli_imports_{x_lower}: ModuleNotFoundError: No module named '{x}'"]),
    # --- headers
    dict(id="header-case", pool="header", error="AssertionError", files=["{pkg}/middleware.py"],
         fix=["Look up the {x} header case-insensitively; the middleware compared the exact spelling, and proxies "
              "lowercase header names.",
              "HTTP header names are case-insensitive (RFC 9110): read {x} through the case-folding headers "
              "mapping instead of a plain dict."],
         seen="tests/test_middleware.py::test_reads_{x_lower}_any_case: AssertionError: assert None == 'abc-123'",
         query=["tests/test_proxy.py::test_lowercase_{x_lower}_accepted: AssertionError: header {x} not found when sent lowercased",
                "tests/test_tracing.py::test_{x_lower}_propagated: AssertionError: assert request_id is not None"]),
    dict(id="header-strip-forwarded", pool="header", error="AssertionError", files=["{pkg}/middleware.py"],
         fix=["Take only the first entry of {x} and strip it: behind two proxies the header holds a "
              "comma-separated chain.",
              "{x} may carry several comma-separated values; the code used the whole string as one. Split it and "
              "use the client's (first) value."],
         seen="tests/test_middleware.py::test_{x_lower}_chain: AssertionError: assert '1.2.3.4, 10.0.0.1' == '1.2.3.4'",
         query=["tests/test_client_ip.py::test_first_hop_of_{x_lower}: AssertionError: got '203.0.113.9, 10.1.1.1' expected '203.0.113.9'",
                "tests/test_rate.py::test_rate_key_uses_{x_lower}: AssertionError: rate bucket named after the full proxy chain"]),
    # --- time zones
    dict(id="tz-naive-compare", pool="tz", error="TypeError", files=["{pkg}/scheduling.py"],
         fix=["Attach the {x} zone with zoneinfo before comparing; naive and aware datetimes cannot be compared.",
              "Schedules stored naive local times for {x}. Localize them with ZoneInfo('{x}') so they compare with "
              "the aware UTC now()."],
         seen="tests/test_scheduling.py::test_{x_lower}_slot_is_future: TypeError: can't compare offset-naive and offset-aware datetimes",
         query=["tests/test_calendar.py::test_meeting_in_{x_lower}: TypeError: can't subtract offset-naive and offset-aware datetimes",
                "tests/test_reminders.py::test_{x_lower}_reminder_due: TypeError: can't compare offset-naive and offset-aware datetimes"]),
    dict(id="tz-dst-shift", pool="tz", error="AssertionError", files=["{pkg}/scheduling.py"],
         fix=["Add days in {x} local time and convert to UTC afterwards: adding 24h in UTC moved the daily job by an "
              "hour across the DST change.",
              "Daily recurrences for {x} were computed in UTC, so after daylight saving ended they ran an hour "
              "early. Do the calendar arithmetic in the local zone."],
         seen="tests/test_scheduling.py::test_{x_lower}_daily_across_dst: AssertionError: assert 8 == 9",
         query=["tests/test_jobs.py::test_{x_lower}_nightly_job_hour_after_clock_change: AssertionError: job ran at 01:00 instead of 02:00",
                "tests/test_recurrence.py::test_weekly_{x_lower}_dst: AssertionError: expected 09:00 local, got 10:00"]),
    # --- queues
    dict(id="queue-ack-late", pool="queue", error="AssertionError", files=["{pkg}/worker.py"],
         fix=["Acknowledge messages of the {x} queue only after the handler succeeded; acking on receipt lost the "
              "message when the handler crashed.",
              "The {x} consumer acked before processing. Move the ack after the handler and nack on exceptions so "
              "the broker redelivers."],
         seen="tests/test_worker.py::test_{x_lower}_redelivered_after_crash: AssertionError: assert 0 == 1",
         query=["tests/test_consumer.py::test_{x_lower}_message_not_lost_on_error: AssertionError: message missing after handler raised",
                "tests/test_broker.py::test_{x_lower}_requeue: AssertionError: expected redelivery count 1, got 0"]),
    dict(id="queue-name-prefix", pool="queue", error="KeyError", files=["{pkg}/worker.py", "{pkg}/settings.py"],
         fix=["Resolve the {x} queue through the environment prefix (staging-/prod-) like the producers do; the "
              "worker looked up the bare name.",
              "Producers publish to '<env>-{x}' but the worker registry keyed handlers by '{x}'. Both sides now use "
              "queue_name() which adds the prefix."],
         seen="tests/test_worker.py::test_{x_lower}_handler_registered: KeyError: 'staging-{x}'",
         query=["tests/test_routing.py::test_route_{x_lower}: KeyError: 'prod-{x}'",
                "tests/test_dispatch.py::test_dispatch_{x_lower}_in_staging: KeyError: no handler for 'staging-{x}'"]),
    # --- settings fields at the db layer
    dict(id="migration-default", pool="field", error="IntegrityError", files=["{pkg}/migrations/0042_add_{x}.py"],
         fix=["Give the new {x} column a server default in the migration; existing rows made the NOT NULL "
              "constraint fail.",
              "The migration added {x} as NOT NULL without a default, which fails on a table with rows. Add a "
              "default, backfill, then tighten."],
         seen="tests/test_migrations.py::test_upgrade_adds_{x_lower}: IntegrityError: NOT NULL constraint failed: orders.{x}",
         query=["tests/test_upgrade.py::test_migrate_existing_rows_{x_lower}: IntegrityError: column \"{x}\" contains null values",
                "tests/test_db.py::test_{x_lower}_not_null_on_old_rows: IntegrityError: NOT NULL constraint failed: accounts.{x}"]),
    dict(id="unique-case-insensitive", pool="field", error="AssertionError", files=["{pkg}/models.py"],
         fix=["Make the uniqueness check on {x} case-insensitive (compare lower()); two rows differing only in "
              "case were both accepted.",
              "Normalize {x} to lower case before the unique lookup and add a functional unique index on lower({x})."],
         seen="tests/test_models.py::test_{x_lower}_unique_ignoring_case: AssertionError: assert 2 == 1",
         query=["tests/test_signup.py::test_duplicate_{x_lower}_different_case_rejected: AssertionError: second row was saved",
                "tests/test_dedupe.py::test_{x_lower}_dedupes_upper_and_lower: AssertionError: expected 1 record, found 2"]),
    # --- settings numeric limits
    dict(id="off-by-one-limit", pool="setting", error="AssertionError", files=["{pkg}/pagination.py"],
         fix=["Use <= when checking {x}: the last allowed value was rejected because the check used <.",
              "The {x} bound is inclusive per the spec; the comparison excluded the maximum. Changed < to <=."],
         seen="tests/test_pagination.py::test_{x_lower}_maximum_allowed: AssertionError: assert 400 == 200",
         query=["tests/test_limits.py::test_{x_lower}_at_the_limit: AssertionError: request at the maximum {x} was refused",
                "tests/test_validation.py::test_boundary_{x_lower}: AssertionError: assert False is True"]),
    dict(id="cache-key-missing-part", pool="setting", error="AssertionError", files=["{pkg}/cache.py"],
         fix=["Include {x} in the cache key; responses computed with one value were served for another.",
              "The memoized result ignored the {x} argument, so the second call returned the first call's value. "
              "Add it to the key tuple."],
         seen="tests/test_cache.py::test_{x_lower}_changes_key: AssertionError: assert [1, 2] == [1, 2, 3, 4]",
         query=["tests/test_memo.py::test_different_{x_lower}_not_shared: AssertionError: cached result reused across {x} values",
                "tests/test_views.py::test_listing_respects_{x_lower}: AssertionError: stale page returned"]),
    # --- encoding / io
    dict(id="csv-bom", pool="module", error="KeyError", files=["{pkg}/{x}/importer.py"],
         fix=["Open the {x} CSV import with encoding='utf-8-sig' so the byte-order mark does not end up in the "
              "first column's name.",
              "Excel writes a BOM; the {x} importer read the header as '\\ufeffid'. Decode with utf-8-sig."],
         seen="tests/test_{x_lower}_import.py::test_reads_excel_export: KeyError: 'id'",
         query=["tests/test_upload.py::test_{x_lower}_csv_from_excel: KeyError: 'sku'",
                "tests/test_ingest.py::test_{x_lower}_first_column: KeyError: 'name' (header was '\\ufeffname')"]),
    dict(id="file-handle-leak", pool="module", error="ResourceWarning", files=["{pkg}/{x}/storage.py"],
         fix=["Close the files the {x} storage opens by using a with block; under load the worker ran out of "
              "file descriptors.",
              "{x}.storage.read() returned open(path).read() without closing. Use a context manager."],
         seen="tests/test_{x_lower}_storage.py::test_no_leak: ResourceWarning: unclosed file <_io.TextIOWrapper name='/tmp/x'>",
         query=["tests/test_stress.py::test_{x_lower}_many_reads: OSError: [Errno 24] Too many open files",
                "tests/test_{x_lower}.py::test_read_closes: ResourceWarning: unclosed file"]),
    # --- concurrency
    dict(id="race-counter", pool="queue", error="AssertionError", files=["{pkg}/metrics.py"],
         fix=["Guard the {x} counter with a lock (or use an atomic increment): concurrent workers lost updates.",
              "Increments of the {x} metric were read-modify-write without synchronisation; wrap them in a "
              "threading.Lock."],
         seen="tests/test_metrics.py::test_{x_lower}_counter_threads: AssertionError: assert 9874 == 10000",
         query=["tests/test_concurrency.py::test_parallel_{x_lower}_count: AssertionError: expected 4000 events counted, got 3921",
                "tests/test_stats.py::test_{x_lower}_total_under_load: AssertionError: lost increments"]),
    dict(id="timeout-units", pool="setting", error="TimeoutError", files=["{pkg}/client.py"],
         fix=["Pass {x} to the HTTP client in seconds, not milliseconds; 5000 was read as 5000 s and a hung "
              "server blocked the test.",
              "The client library takes seconds but {x} is configured in ms: divide by 1000 before passing it."],
         seen="tests/test_client.py::test_{x_lower}_applies: TimeoutError: test exceeded 30 s",
         query=["tests/test_http_client.py::test_slow_server_{x_lower}: TimeoutError: read did not time out after 2 s",
                "tests/test_upstream.py::test_{x_lower}_in_seconds: Failed: Timeout >30.0s"]),
]


def forms(x: str) -> dict[str, str]:
    lower = x.lower().replace("-", "_").replace("/", "_")
    return {"x": x, "x_lower": lower}


STOP_WORDS = set("a an and are as at be but by for if in into is it no not of on or such that the their then "
                 "there these they this to was will with".split())


def tokens(text: str) -> set[str]:
    out = set()
    for t in re.split(r"[^0-9A-Za-z]+", text.lower()):
        if t and t not in STOP_WORDS:
            out.add(t[:-1] if len(t) > 3 and t.endswith("s") else t)
    return out


def stored_text(fx: dict) -> str:
    """What a fix row indexes (src/memory/fixes.rs `embedded_text`): error type, fix, symptoms."""
    return "\n".join([fx["error_type"], fx["fix_description"], *fx["symptoms"]])


def build() -> dict:
    rng = random.Random(SEED)
    fixes, queries = [], []
    for c_index, cause in enumerate(CAUSES):
        split = "held_out" if c_index % HELD_OUT_EVERY == HELD_OUT_EVERY - 1 else "tune"
        pool = list(POOLS[cause["pool"]])
        # neighbours in the pool differ by one character: keep the pool's order, start at a random offset
        start = rng.randrange(len(pool))
        picked = [pool[(start + i) % len(pool)] for i in range(INSTANCES)]
        for i, ident in enumerate(picked):
            f = forms(ident)
            pkg = rng.choice(["app", "core", "service", "backend", "api"])
            project, other = rng.sample(PROJECTS, 2)
            fmt = lambda s: s.format(pkg=pkg, **f)  # noqa: E731
            fix_id = f"{cause['id']}-{i}"
            fixes.append({
                "id": fix_id,
                "cause": cause["id"],
                "split": split,
                "project": project,
                "error_type": cause["error"],
                "fix_description": fmt(cause["fix"][i % 2]),
                "file_paths": [fmt(p) for p in cause["files"]],
                "symptoms": [fmt(cause["seen"])],
                "identifier": ident,
            })
            queries.append({
                "kind": "symptom",
                "split": split,
                "target": fix_id,
                "project": other,
                "query": fmt(cause["query"][(i + 1) % 2]),
            })
    # identifier queries: the fix's identifier alone, and after the error type, where one of its tokens
    # occurs in no other stored fix (tokens as the full-text index sees them, approximately: split on
    # non-alphanumerics, lower case, stop words dropped, a plural `s` dropped)
    holders: dict[str, set[str]] = {}
    for fx in fixes:
        for token in tokens(stored_text(fx)):
            holders.setdefault(token, set()).add(fx["id"])
    for fx in fixes:
        if not any(holders.get(t) == {fx["id"]} for t in tokens(fx["identifier"])):
            continue
        for text in (fx["identifier"], f"{fx['error_type']} {fx['identifier']}"):
            queries.append({"kind": "identifier", "split": fx["split"], "target": fx["id"],
                            "project": "any", "query": text})
    return {
        "about": "Generated by bench/fix_eval_set.py (seed %d); do not edit by hand." % SEED,
        "fixes": fixes,
        "queries": queries,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--check", action="store_true", help="exit 1 when the file is not what the script makes")
    args = parser.parse_args()
    text = json.dumps(build(), indent=1, ensure_ascii=False) + "\n"
    if args.check:
        same = OUT.exists() and OUT.read_text() == text
        print(f"{OUT}: {'up to date' if same else 'differs from bench/fix_eval_set.py'}")
        return 0 if same else 1
    OUT.write_text(text)
    data = json.loads(text)
    by = {}
    for q in data["queries"]:
        by[(q["split"], q["kind"])] = by.get((q["split"], q["kind"]), 0) + 1
    print(f"wrote {OUT}: {len(data['fixes'])} fixes, queries {by}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
