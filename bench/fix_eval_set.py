"""Builds the fix-retrieval evaluation set that `astra-mcp-dev eval fixes` runs (src/eval/fix_eval_set.json).

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

Those are the `symptom` queries. Identifier queries (`"<identifier>"` alone and `"<error type>
<identifier>"`) ask for the one stored fix that holds a token.

Paraphrase queries (kind `paraphrase`, PARAPHRASE_CAUSES) describe a bug as a later agent or a user would,
in other words: a symptom that shares no content word with the fix it should find, neither with its error
type, its description nor the failing test line its session saw (nor with the labels the product adds to
the stored text), so only the meaning can find it ("'ｊｏｈｎ' ... and 'john' end up as two separate people
at signup" for a fix that NFKC-normalises usernames). Beside each target fix is a distractor: a fix of an
unrelated bug whose stored text shares exactly one content word with the symptom, an incidental word held
by at most MAX_SHARED_WORD_FIXES fixes of the set (`signup`, in a fix about a slow confirmation mail). That
is the case where a keyword score normalised by the query's best match gives the one shared word full
credit and the wrong fix can come first. Each paraphrase cause stores its target and its distractor (no
identifier, so no identifier query) and asks two wordings. Content words are the lower-cased runs of
letters and digits, also split at case changes as the fixes' index splits identifiers, less English
function words (FUNCTION_WORDS), single characters and digits-only runs, compared by a crude stem
(`word_forms`, `stem`, `same_word`); building the set fails, naming the cause, when a wording breaks either
rule or its incidental word is not rare.

The split is by cause, every third cause held out: the causes of the held-out split are never looked at
while tuning the fusion (its weights were chosen on `tune` alone; `astra-mcp-dev eval fixes` reports both).

Deterministic: the same seed gives the same file; the paraphrase causes draw from their own generator
(SEED + 1), so the other fixes and queries are what they were before paraphrases were added. Run from the
repository root:

    python3 bench/fix_eval_set.py            # rewrites src/eval/fix_eval_set.json
    python3 bench/fix_eval_set.py --check    # exits 1 when the file differs from what the script makes

`--vector-report` (with the bench venv's Python: numpy, onnxruntime, tokenizers, and the MiniLM model)
also embeds every fix and paraphrase query as the product does and reports, per split, how often the
sentence embedding alone ranks the target first (it did for 0.925 of the 120 paraphrase queries among the
345 fixes when they were written: 0.950 tune, 0.875 held-out; hit@3 1.0), and lists the queries whose
target is not among its first 3. It checks that the set is answerable by meaning; it is never part of the
default run or of the tests.
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


# --- paraphrase causes
# A later agent describes the same bug in its own words: `query` holds two wordings that share no content
# word (`shared_words`) with the target fix's stored text (error type, fix, `seen`), and `distractor` is a
# fix of an unrelated bug whose stored text shares exactly one content word, `shared` (incidental, rare in
# the set), with each wording. `{pkg}` is the package. These fixes hold no identifier.
PARAPHRASE_CAUSES = [
    dict(id="email-markup-escape", error="AssertionError", files=["{pkg}/notifications/render.py"],
         fix="Escape user-supplied values with html.escape() before interpolating them into the HTML email "
             "template (or turn on autoescaping in the Jinja environment).",
         seen="tests/test_notifications.py::test_display_name_is_escaped: AssertionError: assert '<b>' not in rendered_body",
         query=["XSS in our outgoing mails: a nickname containing <script> lands unsanitised in the message markup",
                "XSS via a nickname: <script>alert(1)</script> executes inside the welcome mail we send out"],
         shared="script",
         distractor=dict(error="ValueError", files=["{pkg}/deploy/upload.py"],
                         fix="Convert CRLF line endings to LF before splitting an uploaded shell script into lines; the "
                             "carriage return broke the shebang check.",
                         seen="tests/test_deploy_upload.py::test_windows_line_endings: ValueError: bad interpreter '/bin/sh\\r'")),
    dict(id="fullwidth-username-nfkc", error="AssertionError", files=["{pkg}/accounts/forms.py"],
         fix="Normalise usernames with Unicode NFKC (unicodedata.normalize) and casefold() before the uniqueness lookup, "
             "so that compatibility variants map to plain ASCII.",
         seen="tests/test_accounts.py::test_username_compatibility_variants_collide: AssertionError: assert 2 == 1",
         query=["'ｊｏｈｎ' entered with wide East Asian keyboard characters and 'john' end up as two separate people at signup",
                "at signup someone grabbed 'ａｄｍｉｎ' in wide East Asian letters although the ordinary 'admin' already existed"],
         shared="signup",
         distractor=dict(error="TimeoutError", files=["{pkg}/accounts/welcome.py"],
                         fix="Send the signup confirmation message from a background job instead of inside the request; "
                             "the SMTP relay sometimes took 40 s to respond.",
                         seen="tests/test_welcome.py::test_signup_returns_quickly: TimeoutError: request exceeded 10 s")),
    dict(id="backoff-jitter", error="AssertionError", files=["{pkg}/http/retry.py"],
         fix="Add random jitter to the exponential backoff (sleep uniform(0, base * 2**attempt)) so clients that failed "
             "together do not retry in lockstep.",
         seen="tests/test_retry.py::test_backoff_delays_are_spread: AssertionError: all 50 clients slept exactly 2.0 s",
         query=["reconnection storms after an outage: every instance waits the identical pause before trying again",
                "after an outage every instance tries again after the same pause, so the recovering server is flooded in synchronized waves"],
         shared="outage",
         distractor=dict(error="AssertionError", files=["{pkg}/status/page.py"],
                         fix="Show the scheduled maintenance banner from the status feed's start time in UTC; the outage "
                             "notice appeared a day late for Pacific visitors.",
                         seen="tests/test_status_page.py::test_banner_visible_at_start: AssertionError: banner hidden")),
    dict(id="n-plus-one-orders", error="AssertionError", files=["{pkg}/orders/views.py"],
         fix="Load the customer and line items with select_related/prefetch_related in the order list queryset; the "
             "template issued one SQL query per row.",
         seen="tests/test_orders_view.py::test_order_list_query_count: AssertionError: 203 queries executed, expected at most 4",
         query=["the purchases page gets slower in proportion to how many entries it shows; the database log has hundreds of nearly identical lookups",
                "the sales dashboard fires one more postgres lookup for every entry it shows, hundreds per page visit"],
         shared="hundreds",
         distractor=dict(error="AssertionError", files=["{pkg}/reports/format.py"],
                         fix="Format large totals with thousands separators using format(n, ',') instead of plain str(); "
                             "hundreds and thousands were unreadable.",
                         seen="tests/test_reports_format.py::test_total_grouping: AssertionError: '1234567' != '1,234,567'")),
    dict(id="download-path-traversal", error="AssertionError", files=["{pkg}/files/download.py"],
         fix="Resolve the requested path with os.path.realpath and reject it unless it stays under MEDIA_ROOT; '../' "
             "segments let callers read arbitrary files (directory traversal).",
         seen="tests/test_download.py::test_dotdot_rejected: AssertionError: '../../secret.key' outside MEDIA_ROOT was served",
         query=["a pentester fetched /etc/passwd through our sharing link by climbing up the folder tree",
                "pentester report: dot-dot sequences in the sharing endpoint allow anyone to fetch private server config outside the uploads folder"],
         shared="pentester",
         distractor=dict(error="AssertionError", files=["{pkg}/compliance/calendar.py"],
                         fix="Schedule the yearly pentester visit in the compliance calendar.",
                         seen="tests/test_compliance.py::test_pentester_visit_yearly: AssertionError: no visit planned")),
    dict(id="mutable-default-argument", error="AssertionError", files=["{pkg}/cart/builder.py"],
         fix="Replace the mutable default argument items=[] with None and create a new list inside the function; the one "
             "list was shared by every call.",
         seen="tests/test_cart_builder.py::test_new_cart_is_empty: AssertionError: second cart starts with the first cart's ['sku-1']",
         query=["noticed over the weekend: a freshly opened basket already holds products the previous shopper picked",
                "since the weekend, goods leak from one customer's basket into the next customer's"],
         shared="weekend",
         distractor=dict(error="AssertionError", files=["{pkg}/billing/due.py"],
                         fix="Skip weekend days when computing payment due dates.",
                         seen="tests/test_due_dates.py::test_saturday_rolls_to_monday: AssertionError: due on a Saturday")),
    dict(id="bigint-json-ids", error="AssertionError", files=["{pkg}/api/serializers.py"],
         fix="Serialize 64-bit snowflake IDs as strings in the JSON API; JS numbers are IEEE doubles and lose precision "
             "above 2**53.",
         seen="tests/test_serializers.py::test_large_id_is_string: AssertionError: id 9007199254740993 became 9007199254740992 after JSON.parse",
         query=["the web client opens the wrong record: 1234567890123456789 arrives as 1234567890123456800 in the browser",
                "in the browser, clicking a huge numeric entry opens its neighbour: the 19-digit key comes out slightly different after decoding"],
         shared="browser",
         distractor=dict(error="AssertionError", files=["{pkg}/static/build.py"],
                         fix="Add content hashes to the bundled asset filenames so the browser cache is busted on "
                             "every deploy.",
                         seen="tests/test_build.py::test_asset_names_hashed: AssertionError: 'app.js' has no hash")),
    dict(id="sigterm-graceful-shutdown", error="AssertionError", files=["{pkg}/worker/main.py"],
         fix="Install a SIGTERM handler that sets a stop flag, let the worker finish the job in progress, then exit; the "
             "default handler killed it mid-job.",
         seen="tests/test_worker_shutdown.py::test_sigterm_finishes_current_job: AssertionError: job left in state 'running'",
         query=["every rolling deploy leaves half-processed tasks behind because kubernetes terminates the pod while they are in flight",
                "rolling restarts abandon work midway; the daemon quits immediately rather than completing what it was doing"],
         shared="rolling",
         distractor=dict(error="AssertionError", files=["{pkg}/analytics/rolling.py"],
                         fix="Compute the rolling seven-day average over calendar days, not rows, so gaps in the data "
                             "don't shorten the window.",
                         seen="tests/test_rolling.py::test_window_spans_calendar_days: AssertionError: window covered 9 days")),
    dict(id="atomic-state-write", error="JSONDecodeError", files=["{pkg}/state/store.py"],
         fix="Save the settings file atomically: write a temporary file next to it, fsync, then os.replace() it over "
             "the original, so a crash or a concurrent writer never leaves a truncated or empty JSON document.",
         seen="tests/test_settings_file.py::test_interrupted_save_keeps_previous_copy: JSONDecodeError: Expecting value: line 1 column 1 (char 0)",
         query=["occasionally our preferences on disk come back blank or cut off when two processes persist them simultaneously",
                "when two processes persist preferences to disk simultaneously, the result is sometimes blank and the app can't parse it"],
         shared="disk",
         distractor=dict(error="AssertionError", files=["{pkg}/ops/health.py"],
                         fix="Report free disk space from shutil.disk_usage of the data volume rather than the root mount in "
                             "the health endpoint.",
                         seen="tests/test_health.py::test_reports_data_volume: AssertionError: assert 'free_bytes' in body")),
    dict(id="locale-aware-sort", error="AssertionError", files=["{pkg}/directory/listing.py"],
         fix="Sort names with a locale collation key (PyICU Collator or locale.strxfrm) instead of plain code-point order, "
             "so accented and lower-case entries sit in alphabetical position.",
         seen="tests/test_listing.py::test_names_in_alphabetical_order: AssertionError: ['Zoë', 'Émile', 'ada'] != ['ada', 'Émile', 'Zoë']",
         query=["surnames with diacritics like 'Élodie' are arranged after 'Zack' in the A-Z staff roster",
                "people whose surname begins with an umlaut or a small letter get pushed to the end of the A-Z roster"],
         shared="roster",
         distractor=dict(error="IntegrityError", files=["{pkg}/shifts/models.py"],
                         fix="Allow the same employee on two shifts of the roster in different weeks by adding the week to "
                             "the unique constraint.",
                         seen="tests/test_shifts.py::test_same_employee_next_week: IntegrityError: UNIQUE constraint failed: shift.employee_id")),
    dict(id="installment-cent-remainder", error="AssertionError", files=["{pkg}/billing/plans.py"],
         fix="Allocate the leftover cents of an installment split to the first payments (divmod on integer cents) so the "
             "parts always add up to the order total.",
         seen="tests/test_plans.py::test_three_installments_sum_to_total: AssertionError: 3 installments of 3333 cents sum to 9999, one cent short of 10000",
         query=["customers paying 100 dollars in 3 monthly chunks are charged 99.99 overall",
                "dividing a purchase into three pay-later portions charges 33.33 dollars thrice and a penny disappears"],
         shared="dollars",
         distractor=dict(error="AssertionError", files=["{pkg}/pricing/display.py"],
                         fix="Show prices in the visitor's currency symbol from the account settings; Canadian visitors saw "
                             "US dollars.",
                         seen="tests/test_pricing_display.py::test_cad_symbol: AssertionError: '$' != 'CA$'")),
    dict(id="user-local-today", error="AssertionError", files=["{pkg}/tasks/due.py"],
         fix="Compute 'today' in the user's time zone (datetime.now(ZoneInfo(user.tz)).date()) instead of date.today() "
             "on the UTC server.",
         seen="tests/test_due.py::test_due_today_for_user_ahead_of_utc: AssertionError: assert 'overdue' == 'due today' for a user in Australia",
         query=["reminders tell folks in Sydney their chores are late every morning until the afternoon",
                "reminders say a deadline is tomorrow while for the person in New Zealand it is already the deadline day"],
         shared="reminders",
         distractor=dict(error="AssertionError", files=["{pkg}/notifications/digest.py"],
                         fix="Deduplicate reminders in the weekly digest by event id; recurring events were listed once per "
                             "occurrence.",
                         seen="tests/test_digest.py::test_recurring_event_once: AssertionError: assert 4 == 1")),
    dict(id="keyset-pagination", error="AssertionError", files=["{pkg}/feed/pagination.py"],
         fix="Page the feed with a keyset cursor (WHERE (created_at, id) < last seen) instead of OFFSET, which skipped or "
             "repeated rows when new ones were inserted between requests.",
         seen="tests/test_feed_pagination.py::test_no_duplicates_with_concurrent_inserts: AssertionError: post 42 appeared on page 1 and page 2",
         query=["scrolling down the timeline shows the same story twice whenever somebody publishes meanwhile",
                "infinite scroll never shows some stories when fresh content arrives midway through the listing"],
         shared="story",
         distractor=dict(error="AttributeError", files=["{pkg}/cms/preview.py"],
                         fix="Guard the preview renderer against drafts without a hero image; story previews crashed on "
                             "image.url.",
                         seen="tests/test_preview.py::test_draft_without_image: AttributeError: 'NoneType' object has no attribute 'url'")),
    dict(id="charset-from-content-type", error="AssertionError", files=["{pkg}/scraper/fetch.py"],
         fix="Decode fetched pages with the charset declared in the Content-Type header (falling back to chardet) instead "
             "of assuming UTF-8 for everything.",
         seen="tests/test_fetch.py::test_latin1_page_decoded: AssertionError: 'CafÃ©' != 'Café'",
         query=["accented words scraped from a French site show up as garbage like 'Ã©' in our index",
                "mojibake in crawled French articles from older websites that aren't Unicode"],
         shared="french",
         distractor=dict(error="AssertionError", files=["{pkg}/i18n/dates.py"],
                         fix="Format dates with babel using the visitor's locale; French readers saw English month "
                             "names.",
                         seen="tests/test_dates.py::test_month_name_localized: AssertionError: 'March' != 'mars'")),
    dict(id="csv-formula-injection", error="AssertionError", files=["{pkg}/exports/csv_writer.py"],
         fix="Prefix cells that begin with =, +, - or @ with a single quote in exported CSV files so spreadsheet "
             "programs treat them as text, not formulas (CSV injection).",
         seen="tests/test_csv_writer.py::test_formula_cells_neutralised: AssertionError: assert '=HYPERLINK(...)' == \"'=HYPERLINK(...)\"",
         query=["opening our downloaded report in LibreOffice evaluated a customer's company name that began with an equals sign as a calculation",
                "a LibreOffice sheet we generated launched calc.exe on a support agent's machine: an account field started with '='"],
         shared="libreoffice",
         distractor=dict(error="AssertionError", files=["{pkg}/docs/convert.py"],
                         fix="Give each headless LibreOffice run its own temporary profile directory; parallel .docx to "
                             "PDF conversions locked the shared profile.",
                         seen="tests/test_docx_convert.py::test_parallel_conversions: AssertionError: 2 of 4 conversions produced no PDF")),
    dict(id="cache-stampede", error="AssertionError", files=["{pkg}/cache/recompute.py"],
         fix="Guard recomputation of an expired cache entry with a per-key lock (or serve the stale value while one worker "
             "refreshes) to stop a stampede (dogpile) of identical rebuilds.",
         seen="tests/test_recompute.py::test_single_rebuild_on_expiry: AssertionError: 64 concurrent callers rebuilt the hot entry at once, overloading the DB",
         query=["every hour on the dot the database CPU spikes as dozens of requests recalculate the memoised leaderboard together",
                "when the memoised leaderboard lapses, every request redoes it simultaneously and the database CPU spikes"],
         shared="cpu",
         distractor=dict(error="AssertionError", files=["{pkg}/media/affinity.py"],
                         fix="Pin the image-resize workers to two CPU cores so they don't starve the web process.",
                         seen="tests/test_affinity.py::test_resize_workers_pinned: AssertionError: affinity {{0, 1, 2, 3}}")),
    dict(id="float-equality", error="AssertionError", files=["{pkg}/geometry/shapes.py"],
         fix="Compare floating-point results with math.isclose() and a tolerance instead of ==; 0.1 + 0.2 is not "
             "exactly 0.3.",
         seen="tests/test_shapes.py::test_triangle_is_right_angled: AssertionError: assert 0.30000000000000004 == 0.3",
         query=["physics engine: a rectangle with sides 0.1 and 0.2 is reported as not matching the expected area of 0.3",
                "in our physics engine, adding 0.1 and 0.2 gives something that fails an equality check against 0.3"],
         shared="physics",
         distractor=dict(error="AssertionError", files=["{pkg}/sim/loop.py"],
                         fix="Use a fixed timestep accumulator in the physics loop so simulation speed no longer depends on "
                             "the frame rate.",
                         seen="tests/test_loop.py::test_speed_independent_of_fps: AssertionError: 12.0 != 6.0")),
    dict(id="regex-backtracking", error="TimeoutError", files=["{pkg}/validators/email.py"],
         fix="Rewrite the email validation regex without nested quantifiers ((a+)+ style) to avoid catastrophic "
             "backtracking (ReDoS), and cap the input length.",
         seen="tests/test_validators.py::test_long_invalid_address_is_fast: TimeoutError: validation took 30 s",
         query=["the contact form freezes the host when someone pastes thousands of 'a' letters followed by an exclamation mark: pattern matching goes exponential",
                "submitting an enormous bogus contact string pins a CPU core at 100% for minutes inside the pattern matcher"],
         shared="contact",
         distractor=dict(error="AssertionError", files=["{pkg}/crm/merge.py"],
                         fix="Merge duplicate contact records by keeping the newest phone number instead of the first "
                             "one found.",
                         seen="tests/test_merge.py::test_keeps_newest_phone: AssertionError: '555-0100' != '555-0199'")),
    dict(id="like-wildcard-escape", error="AssertionError", files=["{pkg}/search/filters.py"],
         fix="Escape % and _ in the user's search term before building the SQL LIKE pattern (with ESCAPE '\\'), so they "
             "match literally instead of acting as wildcards.",
         seen="tests/test_filters.py::test_percent_sign_matched_literally: AssertionError: 57 results, expected 2",
         query=["the catalogue lookup treats '%' and an underscore as special, so '100%' finds every product",
                "an underscore in the catalogue lookup behaves as a placeholder for any character, so every item comes back"],
         shared="underscore",
         distractor=dict(error="AssertionError", files=["{pkg}/docs/generator.py"],
                         fix="Strip the leading underscore from private attribute names in the API docs generator.",
                         seen="tests/test_docs_gen.py::test_private_names_hidden: AssertionError: '_secret' documented")),
    dict(id="open-redirect-next", error="AssertionError", files=["{pkg}/auth/views.py"],
         fix="Only follow the ?next= parameter after login when url_has_allowed_host_and_scheme() accepts it; absolute "
             "URLs to other hosts are replaced by the home page.",
         seen="tests/test_auth_views.py::test_next_to_external_host_ignored: AssertionError: redirected to https://evil.example/",
         query=["phishing emails used our sign-in link to send victims onto a lookalike site once they authenticated",
                "phishing: attackers craft a logon address that forwards victims to a foreign domain once credentials are entered"],
         shared="victims",
         distractor=dict(error="AssertionError", files=["{pkg}/courts/export.py"],
                         fix="Anonymise crime victims' names in the court records export.",
                         seen="tests/test_court_export.py::test_victim_names_masked: AssertionError: full name exported")),
    dict(id="session-rotation-login", error="AssertionError", files=["{pkg}/auth/session.py"],
         fix="Rotate the session identifier on successful login (cycle_key / regenerate) so a pre-set session cookie "
             "cannot be reused by an attacker to hijack the account.",
         seen="tests/test_session.py::test_sid_changes_after_login: AssertionError: session key unchanged",
         query=["someone who planted a token on a shared computer before the victim signed in can act as them afterwards",
                "fixation: a tracking token handed out before sign-in keeps being valid after the person authenticates"],
         shared="token",
         distractor=dict(error="KeyError", files=["{pkg}/integrations/github.py"],
                         fix="Read the GitHub token from the GH_TOKEN variable as the gh CLI does; the integration only "
                             "looked at GITHUB_API_TOKEN.",
                         seen="tests/test_github.py::test_token_from_gh_env: KeyError: 'GITHUB_API_TOKEN'")),
    dict(id="constant-time-compare", error="AssertionError", files=["{pkg}/webhooks/verify.py"],
         fix="Compare the HMAC signature with hmac.compare_digest() instead of ==, which leaked through its timing how many "
             "leading bytes matched.",
         seen="tests/test_verify.py::test_uses_constant_time_comparison: AssertionError: == used on the signature, a timing side channel",
         query=["an auditor measured response latency and could guess the secret MAC one character per attempt",
                "security audit: our callback authenticity check short-circuits on the first differing octet, so latency reveals the expected value"],
         shared="latency",
         distractor=dict(error="AssertionError", files=["{pkg}/metrics/middleware.py"],
                         fix="Record request latency in milliseconds in the metrics middleware; histograms got seconds and "
                             "every bucket was empty.",
                         seen="tests/test_metrics_mw.py::test_latency_buckets_filled: AssertionError: assert 0 == 120")),
    dict(id="bcrypt-72-bytes", error="AssertionError", files=["{pkg}/auth/passwords.py"],
         fix="Pre-hash passwords with SHA-256 (base64-encoded) before bcrypt, which silently truncates input beyond "
             "72 bytes.",
         seen="tests/test_passwords.py::test_long_passphrases_differ: AssertionError: second password accepted",
         query=["any lengthy secret phrase that starts like mine unlocks my account too",
                "anything entered after roughly the seventieth character of a lengthy login secret is ignored"],
         shared="lengthy",
         distractor=dict(error="AssertionError", files=["{pkg}/ui/tables.py"],
                         fix="Wrap lengthy cell values in the back-office table with CSS word-break instead of letting them widen "
                             "the page.",
                         seen="tests/test_tables.py::test_cells_wrap: AssertionError: table wider than viewport")),
    dict(id="jwt-clock-leeway", error="ImmatureSignatureError", files=["{pkg}/auth/tokens.py"],
         fix="Pass leeway=30 to jwt.decode so tokens issued by a server whose clock runs slightly ahead are not rejected as "
             "not yet valid.",
         seen="tests/test_tokens.py::test_iat_slightly_in_future: ImmatureSignatureError: The token is not yet valid (iat), issuer clock 2 s ahead",
         query=["right after sign-in, credentials are bounced as premature for a few seconds because the identity provider's time drifts forward",
                "bearer credentials minted on a machine whose system time is a little fast get bounced at first, then work a moment later"],
         shared="bounced",
         distractor=dict(error="AssertionError", files=["{pkg}/mail/bounces.py"],
                         fix="Mark an address undeliverable after three hard bounced deliveries, not after a single "
                             "soft one.",
                         seen="tests/test_mail_bounces.py::test_soft_failure_keeps_address: AssertionError: address disabled")),
    dict(id="anniversary-leap-day", error="ValueError", files=["{pkg}/subscriptions/renewal.py"],
         fix="Compute the yearly renewal with dateutil.relativedelta(years=1), which clamps February 29 to February 28, "
             "instead of date.replace(year=...).",
         seen="tests/test_renewal.py::test_leap_day_subscription_renews: ValueError: day is out of range for month",
         query=["members who joined on the 29th of Feb crash the nightly annual charge run",
                "the nightly plan-extension task blows up for accounts opened on 29/02/2024"],
         shared="nightly",
         distractor=dict(error="AssertionError", files=["{pkg}/backups/schedule.py"],
                         fix="Keep seven nightly backup snapshots and prune older ones by creation time rather than "
                             "by name.",
                         seen="tests/test_backup_schedule.py::test_prune_keeps_latest: AssertionError: newest snapshot deleted")),
    dict(id="epoch-millis-seconds", error="ValueError", files=["{pkg}/ingest/events.py"],
         fix="Divide the client's Date.now() value by 1000 before datetime.fromtimestamp(); it is in milliseconds, "
             "not seconds.",
         seen="tests/test_ingest_events.py::test_client_timestamp_parsed: ValueError: year 54321 is out of range",
         query=["activity times sent by our javascript widget land millennia ahead because the backend takes a ms epoch for whole units",
                "our javascript widget sends ms-since-epoch, which the backend reads as whole units, so activity shows up millennia ahead"],
         shared="javascript",
         distractor=dict(error="AssertionError", files=["{pkg}/static/bundle.py"],
                         fix="Minify the javascript bundle only in production builds so stack frames in development keep "
                             "line numbers.",
                         seen="tests/test_bundle.py::test_dev_build_not_minified: AssertionError: bundle.min.js produced in dev")),
    dict(id="pipe-deadlock", error="TimeoutError", files=["{pkg}/tools/runner.py"],
         fix="Read the child's output with Popen.communicate() instead of wait() followed by stdout.read(); a full stderr "
             "pipe buffer blocked the subprocess forever.",
         seen="tests/test_runner.py::test_verbose_child_completes: TimeoutError: child process stuck after writing 70 KB to stderr",
         query=["a chatty external program spawned from Python stops making progress once it has printed a lot of diagnostics",
                "launching a chatty external command from Python hangs for good once it has printed a lot of diagnostics"],
         shared="diagnostics",
         distractor=dict(error="AssertionError", files=["{pkg}/lint/report.py"],
                         fix="Sort lint diagnostics by file and line before writing them so the report is stable across "
                             "invocations.",
                         seen="tests/test_lint_report.py::test_stable_order: AssertionError: order differs")),
    dict(id="shell-injection-filename", error="AssertionError", files=["{pkg}/media/convert.py"],
         fix="Call ffmpeg with an argument list and shell=False instead of an f-string passed to the shell; quoting broke "
             "on spaces and ';' ran extra commands.",
         seen="tests/test_convert.py::test_filename_with_semicolon: AssertionError: /tmp/pwned was created",
         query=["uploading a video named 'clip; rm -rf ~' wiped someone's home folder on the transcoding box",
                "movies whose titles contain blanks or ampersands fail to transcode, and one executed an unexpected program"],
         shared="transcoding",
         distractor=dict(error="AssertionError", files=["{pkg}/media/queue.py"],
                         fix="Give transcoding jobs their own worker pool so preview generation is not starved behind long "
                             "encodes.",
                         seen="tests/test_media_queue.py::test_previews_not_starved: AssertionError: preview waited 600 s")),
    dict(id="secret-file-newline", error="AssertionError", files=["{pkg}/config/secrets.py"],
         fix="Strip the trailing newline when reading the API key from the mounted secret file; the '\\n' made every "
             "remote call fail authorization.",
         seen="tests/test_secrets.py::test_key_file_trailing_newline: AssertionError: 'sk-live-abc\\n' != 'sk-live-abc'",
         query=["credentials loaded from the Docker volume are rejected with 401, yet pasting the same value by hand works; an invisible character sits at its end",
                "the provider says unauthorized because a line break sneaks onto the end of the password we load inside Docker"],
         shared="docker",
         distractor=dict(error="AssertionError", files=["{pkg}/ops/image.py"],
                         fix="Pin the Docker base image by digest so rebuilding an old tag produces the same layers.",
                         seen="tests/test_image.py::test_base_pinned: AssertionError: 'python:3.12-slim' is not pinned")),
    dict(id="exif-orientation", error="AssertionError", files=["{pkg}/images/thumbnails.py"],
         fix="Apply ImageOps.exif_transpose() before resizing uploaded photos so the EXIF orientation tag is honoured.",
         seen="tests/test_images.py::test_portrait_photo_upright: AssertionError: size (400, 300) != (300, 400)",
         query=["pictures taken on an iPhone appear rotated 90 degrees sideways in the gallery",
                "selfies from iPhones show up lying on their side after we shrink them for thumbnails"],
         shared="iphone",
         distractor=dict(error="AssertionError", files=["{pkg}/static/forms.py"],
                         fix="Give form inputs a 16px font size so Safari on iPhone stops zooming into the field on "
                             "focus.",
                         seen="tests/test_forms_css.py::test_input_font_size: AssertionError: '14px' < '16px'")),
    dict(id="cors-preflight", error="AssertionError", files=["{pkg}/api/middleware.py"],
         fix="Answer OPTIONS preflight requests with Access-Control-Allow-Methods and Allow-Headers before authentication "
             "runs; the 401 made the real call fail client-side.",
         seen="tests/test_middleware.py::test_preflight_is_answered: AssertionError: assert 401 == 204 for OPTIONS from another origin",
         query=["Chrome blocks every cross-domain PUT from our single-page app: the CORS pre-check gets 401 because it carries no login",
                "Chrome refuses our single-page app's cross-domain PUTs: the CORS pre-check is met with 401 as if it needed a login"],
         shared="chrome",
         distractor=dict(error="AssertionError", files=["{pkg}/pdf/render.py"],
                         fix="Launch headless Chrome with --no-sandbox inside the container; PDF rendering exited "
                             "immediately.",
                         seen="tests/test_pdf.py::test_statement_renders: AssertionError: chromium exited with code 1")),
    dict(id="samesite-cookie", error="AssertionError", files=["{pkg}/auth/cookies.py"],
         fix="Set SameSite=None; Secure on the session cookie so it is sent in the cross-site iframe the partner portal "
             "embeds us in.",
         seen="tests/test_cookies.py::test_session_cookie_samesite_none: AssertionError: 'Lax' != 'None'",
         query=["in Firefox, within a third-party widget hosted by a reseller, people are signed out on every click",
                "Safari and Firefox forget our login state when the app is shown inside another company's intranet"],
         shared="firefox",
         distractor=dict(error="AssertionError", files=["{pkg}/static/fonts.py"],
                         fix="Serve web fonts with the font/woff2 MIME type; Firefox refused them when served as "
                             "plain text.",
                         seen="tests/test_fonts.py::test_woff2_mime: AssertionError: 'text/plain' != 'font/woff2'")),
    dict(id="redirect-drops-post-body", error="AssertionError", files=["{pkg}/routes.py"],
         fix="Register the route both with and without the trailing slash (or redirect with 308): user agents follow a 301 redirect "
             "with GET, so the POST body was dropped.",
         seen="tests/test_routes.py::test_post_without_slash_keeps_body: AssertionError: handler received method GET",
         query=["API clients writing to /checkout without the closing '/' see their payload vanish: the 301 turns the write into a read",
                "sending the form to /checkout without the final '/' goes through a 301 and the submitted fields never arrive"],
         shared="checkout",
         distractor=dict(error="AssertionError", files=["{pkg}/shop/coupons.py"],
                         fix="Apply percentage coupons to the subtotal before delivery fees at checkout, not after.",
                         seen="tests/test_coupons.py::test_percent_off_excludes_delivery: AssertionError: 9.0 != 8.0")),
    dict(id="average-integer-division", error="AssertionError", files=["{pkg}/reviews/stats.py"],
         fix="Use true division (/) for the average rating; floor division (//) truncated 4.6 to 4.",
         seen="tests/test_review_stats.py::test_average_keeps_fraction: AssertionError: assert 4 == 4.6",
         query=["restaurant listings with mostly five-star feedback show a mean of exactly 4 stars, never 4.5",
                "the score shown under each restaurant is always a whole number, chopping off what comes after the point"],
         shared="restaurant",
         distractor=dict(error="KeyError", files=["{pkg}/places/hours.py"],
                         fix="Treat a restaurant without opening hours for a weekday as closed instead of raising.",
                         seen="tests/test_hours.py::test_closed_on_monday: KeyError: 'mon'")),
    dict(id="chunking-drops-remainder", error="AssertionError", files=["{pkg}/exports/batches.py"],
         fix="Iterate with range(0, len(rows), size) so the final partial batch is included; the loop stopped at "
             "len(rows) // size * size.",
         seen="tests/test_batches.py::test_partial_batch_exported: AssertionError: exported 1000 of 1037 rows, the leftover 37 were lost",
         query=["the overnight dump leaves out the last few dozen records whenever the total isn't a multiple of a thousand",
                "the warehouse dump always misses the trailing records that don't fill a whole chunk of a thousand"],
         shared="dump",
         distractor=dict(error="AssertionError", files=["{pkg}/db/backup.py"],
                         fix="Pass --no-owner to pg_dump so restoring into a managed database does not fail on role "
                             "ownership.",
                         seen="tests/test_backup.py::test_restore_without_roles: AssertionError: ERROR: role \"app\" does not exist")),
    dict(id="dict-changed-during-iteration", error="RuntimeError", files=["{pkg}/sessions/cleanup.py"],
         fix="Iterate over list(sessions.items()) when deleting expired entries; removing keys from the dict while looping "
             "over it raises.",
         seen="tests/test_cleanup.py::test_expired_sessions_removed: RuntimeError: dictionary changed size during iteration",
         query=["the housekeeping thread crashes whenever it purges stale logins from the in-memory table",
                "housekeeping blows up as it purges old logins from a mapping it is walking at the same time"],
         shared="housekeeping",
         distractor=dict(error="AssertionError", files=["{pkg}/ops/chunks.py"],
                         fix="Schedule the housekeeping of temporary upload chunks hourly instead of only at startup.",
                         seen="tests/test_ops_chunks.py::test_chunks_cleared_hourly: AssertionError: 48 chunks remain")),
    dict(id="deep-recursion-replies", error="RecursionError", files=["{pkg}/comments/tree.py"],
         fix="Walk the comment tree with an explicit stack instead of recursion; very deep reply chains exceeded the "
             "interpreter's recursion limit.",
         seen="tests/test_comment_tree.py::test_long_reply_chain: RecursionError: maximum recursion depth exceeded",
         query=["a forum discussion in which two people answered each other two thousand times in a row now crashes whenever it is opened",
                "nesting answers under answers a few thousand levels down makes the forum page crash the server"],
         shared="thousand",
         distractor=dict(error="AssertionError", files=["{pkg}/ui/badges.py"],
                         fix="Format counts over a thousand as '1.2k' in the sidebar badges.",
                         seen="tests/test_badges.py::test_compact_count: AssertionError: '1200' != '1.2k'")),
    dict(id="asyncio-blocking-call", error="AssertionError", files=["{pkg}/api/handlers.py"],
         fix="Replace the blocking requests.get() inside the async handler with httpx.AsyncClient (or run it in a thread "
             "executor) so the event loop keeps serving other requests.",
         seen="tests/test_handlers.py::test_concurrent_requests_overlap: AssertionError: 10 requests took 10.2 s, expected < 2 s",
         query=["one slow upstream stalls the whole uvicorn service; every endpoint waits until that single outbound HTTP call finishes, nothing proceeds in parallel",
                "under load our uvicorn app answers visitors strictly one after another, as if the coroutines were serialized behind a synchronous fetch to the upstream"],
         shared="upstream",
         distractor=dict(error="AssertionError", files=["vendor/UPSTREAM.py"],
                         fix="Pin the upstream git remote of the vendored library to a tag so submodule bumps are "
                             "reproducible.",
                         seen="tests/test_vendor.py::test_upstream_pinned: AssertionError: 'main' is not a tag")),
    dict(id="asyncio-task-gc", error="AssertionError", files=["{pkg}/notifications/dispatch.py"],
         fix="Keep a reference to background tasks from asyncio.create_task() in a set until they finish; unreferenced "
             "tasks were collected by the GC before running.",
         seen="tests/test_dispatch.py::test_fire_and_forget_delivered: AssertionError: 0 of 20 notifications delivered",
         query=["occasionally some push alerts we spawn without awaiting simply never arrive, and nothing is logged",
                "alerts sent from coroutines we launch without holding on to them silently disappear"],
         shared="alerts",
         distractor=dict(error="AssertionError", files=["{pkg}/monitoring/rules.py"],
                         fix="Fire storage alerts at 90% usage instead of 99%, which left no time to react.",
                         seen="tests/test_rules.py::test_threshold_ninety: AssertionError: no alert at 92%")),
    dict(id="sqlite-locked", error="OperationalError", files=["{pkg}/db/engine.py"],
         fix="Enable WAL journal mode and a busy_timeout on the SQLite connection so concurrent writers wait instead of "
             "failing immediately.",
         seen="tests/test_engine.py::test_parallel_writes: OperationalError: database is locked",
         query=["our embedded single-file DB throws when a second cron process saves at the same moment; it should queue instead",
                "the local file-based DB refuses updates from a second cron process rather than queueing them"],
         shared="cron",
         distractor=dict(error="AssertionError", files=["{pkg}/scheduler/parse.py"],
                         fix="Support the '@weekly' shortcut in cron expressions by expanding it to '0 0 * * 0'.",
                         seen="tests/test_parse.py::test_weekly_shortcut: AssertionError: unsupported expression '@weekly'")),
    dict(id="float-nan-json", error="ValueError", files=["{pkg}/api/metrics.py"],
         fix="Replace NaN and infinity with None before json.dumps (and dump with allow_nan=False to catch the rest), "
             "since NaN is not valid JSON.",
         seen="tests/test_metrics_api.py::test_empty_series_serializes: ValueError: Out of range float values are not JSON compliant",
         query=["an average over zero samples serialises as a bare not-a-number that the chart's parser rejects",
                "the dashboard's chart parser rejects our response because an average over zero samples comes through as a bare not-a-number literal"],
         shared="parser",
         distractor=dict(error="AssertionError", files=["{pkg}/config/parser.py"],
                         fix="Accept dates with a trailing 'Z' in the config parser.",
                         seen="tests/test_config_parser.py::test_utc_suffix: AssertionError: '2024-01-01T00:00:00Z' not accepted")),
    dict(id="version-string-sort", error="AssertionError", files=["{pkg}/releases/latest.py"],
         fix="Compare release numbers with packaging.version.Version instead of plain string comparison, where '1.10' "
             "sorts before '1.9'.",
         seen="tests/test_latest.py::test_picks_highest_release: AssertionError: '1.9.0' != '1.10.0'",
         query=["the updater keeps offering v2.9 to people who already installed v2.10",
                "the updater's 'newest build' badge points at 2.9 even though 2.10 exists"],
         shared="updater",
         distractor=dict(error="PermissionError", files=["{pkg}/updater/install.py"],
                         fix="Download the updater's new binary next to the old one and rename it over, instead of writing "
                             "into Program Files.",
                         seen="tests/test_self_update.py::test_replace_in_user_dir: PermissionError: [Errno 13] Permission denied: 'C:\\\\Program Files\\\\app.exe'")),
    dict(id="email-header-newline", error="AssertionError", files=["{pkg}/contact/send.py"],
         fix="Strip CR and LF characters from user-supplied values before using them as the mail Subject, to stop header "
             "injection.",
         seen="tests/test_contact_send.py::test_subject_with_crlf: AssertionError: unexpected 'Bcc' header in message",
         query=["spammers abuse our feedback page by sneaking line breaks into the topic field to add hidden recipients",
                "spammers paste a line break into the title box of our feedback page to slip blind-copy recipients into the notification we dispatch"],
         shared="feedback",
         distractor=dict(error="AssertionError", files=["{pkg}/lessons/prompts.py"],
                         fix="Ask for feedback after the third completed lesson, not the first.",
                         seen="tests/test_prompts.py::test_feedback_prompt_timing: AssertionError: prompt after lesson 1")),
    dict(id="leading-zero-postcodes", error="AssertionError", files=["{pkg}/exports/xlsx.py"],
         fix="Write postal codes and phone numbers as text cells (number_format '@') in the XLSX export so spreadsheet "
             "apps keep their leading zeros.",
         seen="tests/test_xlsx.py::test_zip_code_stays_text: AssertionError: 2134 != '02134'",
         query=["mailing addresses in New Jersey lose their initial 0 in the downloaded sheet",
                "the mailing-list workbook mangles dialling prefixes like 0044 into 44"],
         shared="mailing",
         distractor=dict(error="AssertionError", files=["{pkg}/newsletter/unsubscribe.py"],
                         fix="Remove people from every mailing segment when they unsubscribe, not just the one the link "
                             "came from.",
                         seen="tests/test_unsubscribe.py::test_all_segments_cleared: AssertionError: still subscribed to 'weekly'")),
    dict(id="content-disposition-utf8", error="UnicodeEncodeError", files=["{pkg}/files/responses.py"],
         fix="Send non-ASCII download names with the RFC 5987 filename*=UTF-8'' parameter (percent-encoded) in "
             "Content-Disposition, keeping an ASCII fallback.",
         seen="tests/test_responses.py::test_cyrillic_file_name: UnicodeEncodeError: 'latin-1' codec can't encode characters in position 22-27",
         query=["grabbing documents titled 'отчёт.pdf' crashes the endpoint, while English-titled ones save fine",
                "documents whose titles are in Greek or Chinese can't be fetched; the server falls over building the reply"],
         shared="documents",
         distractor=dict(error="AssertionError", files=["{pkg}/search/index.py"],
                         fix="Reindex documents after bulk edits so search no longer shows stale snippets.",
                         seen="tests/test_search_index.py::test_bulk_edit_reindexed: AssertionError: snippet outdated")),
    dict(id="thread-future-exceptions", error="AssertionError", files=["{pkg}/jobs/parallel.py"],
         fix="Call future.result() on every future returned by ThreadPoolExecutor.submit() so exceptions raised in "
             "worker threads propagate instead of being silently lost.",
         seen="tests/test_parallel.py::test_failure_in_worker_is_reported: AssertionError: DID NOT RAISE ValueError; the run reported success",
         query=["when a job in our multithreaded batch helper blows up, nobody is told and the batch is marked green",
                "jobs handed to our multithreaded batch helper blow up unnoticed, and the batch is marked green"],
         shared="green",
         distractor=dict(error="AssertionError", files=["{pkg}/ui/theme.py"],
                         fix="Use a darker green for success badges to meet the WCAG contrast ratio.",
                         seen="tests/test_theme.py::test_badge_contrast: AssertionError: contrast 2.9 < 4.5")),
    dict(id="lost-update-inventory", error="AssertionError", files=["{pkg}/inventory/stock.py"],
         fix="Decrement stock with an atomic UPDATE ... SET quantity = quantity - 1 (F expression) or SELECT FOR UPDATE, "
             "instead of read-modify-save in application code.",
         seen="tests/test_stock.py::test_parallel_orders_decrement_once_each: AssertionError: stock 8, expected 0 (lost update under concurrent purchases)",
         query=["we sold twelve units of an item we only had ten of during the flash sale; simultaneous buyers overwrite each other's inventory change",
                "two buyers hitting 'buy' at the same moment during a flash promotion are both accepted and the shelf count ends up wrong, a race"],
         shared="flash",
         distractor=dict(error="AssertionError", files=["{pkg}/web/messages.py"],
                         fix="Clear flash messages after they are rendered once so the notice doesn't repeat on the "
                             "next page.",
                         seen="tests/test_messages.py::test_flash_shown_once: AssertionError: notice shown twice")),
    dict(id="idempotency-key-charge", error="AssertionError", files=["{pkg}/payments/charge.py"],
         fix="Send an idempotency key derived from the order id with every charge request so a retried or repeated submit "
             "is not billed twice by the payment provider.",
         seen="tests/test_charge.py::test_double_submit_single_charge: AssertionError: 2 charges created",
         query=["impatient shoppers who hammer the Pay button get their card debited two times",
                "a flaky connection while purchasing leads to duplicate transactions on the customer's card statement"],
         shared="card",
         distractor=dict(error="AssertionError", files=["{pkg}/profile/cards.py"],
                         fix="Mask all but the last four digits of saved card numbers in the profile page.",
                         seen="tests/test_cards.py::test_number_masked: AssertionError: '4242424242424242' visible")),
    dict(id="webhook-raw-body", error="AssertionError", files=["{pkg}/webhooks/stripe.py"],
         fix="Verify the webhook signature against the raw request bytes (request.body) instead of the re-serialised "
             "parsed JSON, whose key order and spacing differ.",
         seen="tests/test_stripe_webhook.py::test_valid_signature_accepted: AssertionError: genuine event rejected, signature computed over re-encoded JSON",
         query=["inbound payment callbacks are refused as forged because we hash a reformatted copy of the payload instead of what arrived",
                "callbacks from the payment processor fail the authenticity step because we hash a reformatted copy of the inbound payload"],
         shared="inbound",
         distractor=dict(error="AssertionError", files=["{pkg}/support/inbox.py"],
                         fix="Thread inbound support emails by the In-Reply-To header rather than by subject.",
                         seen="tests/test_inbox.py::test_reply_joins_ticket: AssertionError: new ticket opened")),
    dict(id="ca-certificates-container", error="SSLCertVerificationError", files=["Dockerfile", "{pkg}/http/client.py"],
         fix="Install the ca-certificates package in the slim image and point REQUESTS_CA_BUNDLE at the system bundle; "
             "the container had no trusted roots.",
         seen="tests/test_client.py::test_https_call: SSLCertVerificationError: certificate verify failed: unable to get local issuer certificate",
         query=["outbound TLS connections to any secure site work on my laptop but break inside our Alpine build: the server's chain can't be validated",
                "in production every TLS handshake with remote endpoints is refused in Alpine because our build knows no authorities"],
         shared="alpine",
         distractor=dict(error="ImportError", files=["requirements.txt"],
                         fix="Switch the base image from Alpine to Debian slim; prebuilt numpy wheels need glibc.",
                         seen="tests/test_import.py::test_numpy_available: ImportError: Error loading shared library libgfortran.so.5")),
    dict(id="broken-pipe-pager", error="BrokenPipeError", files=["{pkg}/cli/main.py"],
         fix="Catch BrokenPipeError around stdout writes (and restore the default SIGPIPE handling) so the command exits "
             "quietly when the reader closes early.",
         seen="tests/test_cli_main.py::test_piped_to_head: BrokenPipeError: [Errno 32] Broken pipe",
         query=["an ugly traceback appears when the program our tool's output is fed to, like less, quits before reading everything",
                "our utility spews an ugly stack trace whenever its output is truncated by another program in a shell chain"],
         shared="ugly",
         distractor=dict(error="AssertionError", files=["{pkg}/cli/render.py"],
                         fix="Fall back to ASCII box characters when the terminal isn't UTF-8, instead of emitting ugly "
                             "replacement glyphs.",
                         seen="tests/test_render.py::test_ascii_fallback: AssertionError: '?' in table border")),
    dict(id="ansi-colors-not-tty", error="AssertionError", files=["{pkg}/cli/colors.py"],
         fix="Emit ANSI color codes only when sys.stdout.isatty() and NO_COLOR is unset, so redirected output stays "
             "plain text.",
         seen="tests/test_colors.py::test_no_escape_codes_when_redirected: AssertionError: '\\x1b[32mOK\\x1b[0m' != 'OK'",
         query=["CI build logs are full of junk like ^[[1;31m around every status word, the colouring meant for terminals",
                "piping the tool into a file leaves weird bracket junk where the colouring used to be"],
         shared="junk",
         distractor=dict(error="AssertionError", files=["{pkg}/mail/tickets.py"],
                         fix="Drop junk-folder replies in the ticket importer instead of opening tickets for them.",
                         seen="tests/test_ticket_importer.py::test_spam_reply_ignored: AssertionError: ticket created")),
    dict(id="exit-status-on-failure", error="AssertionError", files=["{pkg}/cli/migrate.py"],
         fix="Return a non-zero exit status (sys.exit(1)) when any migration fails, instead of printing the failure and "
             "ending normally.",
         seen="tests/test_migrations_main.py::test_failed_migration_exit_status: AssertionError: assert 0 == 1, a broken migration still ended with exit code 0",
         query=["Jenkins keeps deploying after the schema upgrade crashed, because the upgrade tool still reports success to the shell",
                "Jenkins can't detect that the schema upgrade command crashed, since it always reports success to the shell"],
         shared="shell",
         distractor=dict(error="AssertionError", files=["README.md"],
                         fix="Quote the branch name in the release shell snippet of the README.",
                         seen="tests/test_readme.py::test_snippet_quotes_branch: AssertionError: unquoted $BRANCH")),
    dict(id="decimal-comma-input", error="ValueError", files=["{pkg}/forms/amounts.py"],
         fix="Parse amounts with babel.numbers.parse_decimal using the user's locale so '3,50' is read as 3.5 rather than "
             "rejected by float().",
         seen="tests/test_amounts.py::test_german_decimal_separator: ValueError: could not convert string to float: '3,50'",
         query=["visitors from Munich can't put sums like 12,99 into the donation box",
                "Europeans who write the cents after a comma see 'not a valid sum' on the donation form"],
         shared="donation",
         distractor=dict(error="AssertionError", files=["{pkg}/donations/receipts.py"],
                         fix="Issue the yearly donation receipt in the donor's name even when a spouse paid.",
                         seen="tests/test_receipts.py::test_receipt_named_after_donor: AssertionError: 'J. Doe' != 'Jane Doe'")),
    dict(id="emoji-utf8mb4", error="OperationalError", files=["{pkg}/db/mysql.py"],
         fix="Switch the MySQL connection charset and the table collation to utf8mb4; the 3-byte utf8 charset cannot store "
             "4-byte code points.",
         seen="tests/test_mysql.py::test_store_emoji_comment: OperationalError: (1366, \"Incorrect string value: '\\\\xF0\\\\x9F\\\\x98\\\\x80' for column 'body'\")",
         query=["posts containing smileys like 😀 or 🎉 fail to persist, plain text saves fine",
                "our MariaDB rejects smileys and other astral-plane symbols in user posts"],
         shared="posts",
         distractor=dict(error="AssertionError", files=["{pkg}/blog/sitemap.py"],
                         fix="Paginate the blog posts sitemap at 50,000 URLs per file as the protocol requires.",
                         seen="tests/test_sitemap.py::test_split_at_limit: AssertionError: 60000 URLs in one sitemap")),
    dict(id="case-sensitive-import-linux", error="ModuleNotFoundError", files=["{pkg}/reports/__init__.py"],
         fix="Rename Reports.py to reports.py to match the import; macOS filesystems are case-insensitive, so the "
             "wrong capitalisation only broke on the Linux runners.",
         seen="tests/test_reports_import.py::test_import_reports: ModuleNotFoundError: No module named 'app.reports'",
         query=["works on every developer's laptop, yet the Ubuntu pipeline can't find a package whose filename starts with an uppercase letter",
                "Python loads a package on laptops but says it's missing on Ubuntu, because its filename has an uppercase first letter"],
         shared="ubuntu",
         distractor=dict(error="AssertionError", files=["{pkg}/ops/base.py"],
                         fix="Pin the Ubuntu base to the LTS release so apt does not pull a newer libssl mid-cycle.",
                         seen="tests/test_base_pin.py::test_lts_pinned: AssertionError: 'ubuntu:latest' not allowed")),
    dict(id="concat-cache-key-collision", error="AssertionError", files=["{pkg}/cache/keys.py"],
         fix="Build cache keys from a tuple (or a delimiter-joined string) of their parts; plain concatenation made "
             "('1', '23') and ('12', '3') the same key.",
         seen="tests/test_cache_keys.py::test_distinct_parts_distinct_keys: AssertionError: tenant 12 saw tenant 1's report",
         query=["memoised statistics leak between customers 1 and 12 because the lookup identifiers are glued together without a separator",
                "customer 1 gets customer 12's memoised statistics: '1'+'23' and '12'+'3' produce one identical lookup"],
         shared="statistics",
         distractor=dict(error="AssertionError", files=["{pkg}/workspaces/permissions.py"],
                         fix="Show the statistics tab only to workspace owners.",
                         seen="tests/test_permissions.py::test_stats_tab_owner_only: AssertionError: member sees the tab")),
    dict(id="cron-duplicate-replicas", error="AssertionError", files=["{pkg}/scheduler/jobs.py"],
         fix="Take a Postgres advisory lock (pg_try_advisory_lock) before running the scheduled job, so only one of the "
             "replicas executes it.",
         seen="tests/test_scheduler_jobs.py::test_job_runs_once_across_instances: AssertionError: summary email sent 3 times",
         query=["the periodic routine duplicates: each container of the horizontally scaled service fires it",
                "now that the app is deployed on several nodes, every one of them performs the midnight routine, so customers get duplicates"],
         shared="routine",
         distractor=dict(error="AssertionError", files=["{pkg}/health/uptime.py"],
                         fix="Exclude the routine maintenance window from the uptime calculation.",
                         seen="tests/test_uptime.py::test_maintenance_excluded: AssertionError: 99.1 != 99.9")),
    dict(id="replica-read-after-write", error="AssertionError", files=["{pkg}/db/routing.py"],
         fix="Route reads to the primary database for a few seconds after a write in the same request or session, because "
             "the read replica lags behind and answers with stale data.",
         seen="tests/test_routing.py::test_edit_visible_after_update: AssertionError: old value returned",
         query=["right after hitting save, the settings page shows what I had before; a refresh later it's correct (we use a follower DB)",
                "changes people make to their profile seem to revert for a moment and then reappear on refresh, follower delay?"],
         shared="refresh",
         distractor=dict(error="AssertionError", files=["{pkg}/calendar/holidays.py"],
                         fix="Refresh the public holiday calendar from the government feed once a year, not at every "
                             "boot.",
                         seen="tests/test_holidays.py::test_feed_fetched_yearly: AssertionError: fetched 365 times")),
    dict(id="forked-workers-same-random", error="AssertionError", files=["{pkg}/worker/pool.py"],
         fix="Reseed the random generator in each child after fork (or use secrets/os.urandom), since forked workers "
             "inherited the same PRNG state.",
         seen="tests/test_pool.py::test_children_draw_different_values: AssertionError: 4 workers produced identical sequences",
         query=["raffle tickets drawn by chance in separate gunicorn processes repeat each other exactly",
                "raffle numbers drawn by chance in each gunicorn process repeat its siblings' numbers exactly"],
         shared="raffle",
         distractor=dict(error="AssertionError", files=["{pkg}/promo/raffle.py"],
                         fix="Exclude staff accounts from the raffle entrant export.",
                         seen="tests/test_raffle.py::test_staff_excluded: AssertionError: 'ops@corp' in entrants")),
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


def embedded_text(fx: dict) -> str:
    """The text the product embeds and indexes for a fix, labels included (src/memory/fixes.rs
    `embedded_text`, without its length cap, which these fixes stay under)."""
    return "Error type: %s\nFix: %s\nSymptoms:\n%s" % (fx["error_type"], fx["fix_description"], "\n".join(fx["symptoms"]))


# --- content words of the paraphrase check
# English function words, dropped from the content words (`tokens` above, which approximates the full-text
# index for the identifier queries, keeps the short STOP_WORDS list so that those queries stay as they were).
FUNCTION_WORDS = STOP_WORDS | set("""
    i me my mine myself we us our ours ourselves you your yours yourself he him his himself she her hers herself
    it its itself they them theirs themselves who whom whose which what whatever whoever this those someone
    somebody anyone anybody anything everyone everybody everything nothing nobody something
    am was were been being have has had having do does did doing done can could may might must shall should would
    don doesn didn isn aren wasn weren haven hasn hadn won wouldn shouldn couldn cannot ll re ve
    about above across after against along among around before behind below beneath beside besides between beyond
    down during except from inside near off onto out outside over past per since through throughout till toward
    towards under until up upon via within without
    nor so yet because although though while whereas whether unless than
    each every either neither some any all both few many much more most other another own same several
    when where why how here now still only just also even ever never always often again already instead too very
    quite rather else once soon yes like
    one two three four five six seven eight nine ten etc eg ie vs
""".split())

# The parts of an ASCII word at its case changes (`UnicodeDecodeError` gives `Unicode`, `Decode`, `Error`;
# `HTTPHeader` gives `HTTP`, `Header`), as the fixes' code analyzer splits identifiers.
_CAMEL = re.compile(r"[A-Z]+(?=[A-Z][a-z])|[A-Z]?[a-z0-9]+|[A-Z0-9]+")


def word_forms(text: str) -> list[tuple[str, set[str]]]:
    """Each word of `text` (a run of letters and digits, lower-cased) with its content forms: itself and its
    parts at case changes, less function words, single characters and digits only; words with no content
    form are left out."""
    out = []
    for run in re.split(r"[\W_]+", text):
        parts = _CAMEL.findall(run) if run.isascii() else []
        forms = {w.lower() for w in {run, *(parts if len(parts) > 1 else [])}}
        forms = {w for w in forms if len(w) > 1 and not w.isdigit() and w not in FUNCTION_WORDS}
        if forms:
            out.append((run.lower(), forms))
    return out


def content_words(text: str) -> set[str]:
    """The content forms of all words of `text`."""
    return {w for _, forms in word_forms(text) for w in forms}


def stem(word: str) -> str:
    """A crude stem: one of the endings `ies` (→ y), `ing`, `ed`, `es`, `s`, `ly` stripped when at least three
    characters stay, then a doubled last consonant undoubled and a last `e` dropped (at four characters or
    more), so `users`/`user`, `escaped`/`escape`/`escaping`, `stopped`/`stop`, `queries`/`query` meet."""
    if word.endswith("ies") and len(word) > 4:
        word = word[:-3] + "y"
    else:
        for ending in ("ing", "ed", "es", "s", "ly"):
            if word.endswith(ending) and len(word) - len(ending) >= 3:
                word = word[: -len(ending)]
                break
    if len(word) > 3 and word[-1] == word[-2] and word[-1] not in "aeiouls":
        word = word[:-1]
    if len(word) > 3 and word.endswith("e"):
        word = word[:-1]
    return word


def same_word(a: str, b: str) -> bool:
    """Two stems are one content word when equal, or when one begins the other and is 5 or more characters
    long (`normaliz`/`normalization`, `encod`/`encoder`): stricter than the index, which does not stem."""
    short, long_ = sorted((a, b), key=len)
    return a == b or (len(short) >= 5 and long_.startswith(short))


def shared_words(query: str, text: str) -> list[str]:
    """The words of `query` one of whose content forms `text` holds too (by stem)."""
    theirs = {stem(w) for w in content_words(text)}
    return sorted({run for run, forms in word_forms(query) if any(same_word(stem(f), t) for f in forms for t in theirs)})


def identifier_queries(fixes: list[dict]) -> list[dict]:
    """The fix's identifier alone, and after the error type, for each fix with an identifier one of whose
    tokens occurs in no other stored fix (tokens as the full-text index sees them, approximately: split on
    non-alphanumerics, lower case, stop words dropped, a plural `s` dropped). Fixes without an identifier
    (the paraphrase causes') get none."""
    holders: dict[str, set[str]] = {}
    for fx in fixes:
        for token in tokens(stored_text(fx)):
            holders.setdefault(token, set()).add(fx["id"])
    queries = []
    for fx in fixes:
        if not fx["identifier"] or not any(holders.get(t) == {fx["id"]} for t in tokens(fx["identifier"])):
            continue
        for text in (fx["identifier"], f"{fx['error_type']} {fx['identifier']}"):
            queries.append({"kind": "identifier", "split": fx["split"], "target": fx["id"],
                            "project": "any", "query": text})
    return queries


# The incidental word a paraphrase query shares with its distractor is held, spelt as in the query, by at
# most this many stored fixes: rare, so that BM25 weighs it.
MAX_SHARED_WORD_FIXES = 3


def paraphrases() -> tuple[list[dict], list[dict]]:
    """The fixes (each cause's target, then its distractor) and the `paraphrase` queries of
    PARAPHRASE_CAUSES, drawn from their own generator so the other causes' draws stay as they were.

    Raises AssertionError, naming the cause, when a query shares a content word with its target fix, or
    shares anything but its cause's one incidental word with the distractor."""
    rng = random.Random(SEED + 1)
    fixes, queries = [], []
    for c_index, cause in enumerate(PARAPHRASE_CAUSES):
        split = "held_out" if c_index % HELD_OUT_EVERY == HELD_OUT_EVERY - 1 else "tune"
        pkg = rng.choice(["app", "core", "service", "backend", "api"])
        project, other, elsewhere = rng.sample(PROJECTS, 3)
        fmt = lambda s: s.format(pkg=pkg)  # noqa: E731
        for fix_id, c, proj in ((f"{cause['id']}-0", cause, project),
                                (f"{cause['id']}-distractor", cause["distractor"], elsewhere)):
            fixes.append({
                "id": fix_id,
                "cause": fix_id if c is cause["distractor"] else cause["id"],
                "split": split,
                "project": proj,
                "error_type": c["error"],
                "fix_description": fmt(c["fix"]),
                "file_paths": [fmt(p) for p in c["files"]],
                "symptoms": [fmt(c["seen"])],
                "identifier": "",
            })
        target, distractor = fixes[-2], fixes[-1]
        if len(cause["query"]) != 2:
            raise AssertionError(f"paraphrase cause {cause['id']}: two query wordings expected")
        for wording in cause["query"]:
            common = shared_words(wording, embedded_text(target))
            if common:
                raise AssertionError(f"paraphrase cause {cause['id']}: query {wording!r} shares {common} with its fix")
            common = shared_words(wording, embedded_text(distractor))
            if len(common) != 1 or not same_word(stem(common[0]), stem(cause["shared"])):
                raise AssertionError(f"paraphrase cause {cause['id']}: query {wording!r} shares {common} with its "
                                     f"distractor, not just {cause['shared']!r}")
            queries.append({"kind": "paraphrase", "split": split, "target": target["id"],
                            "project": other, "query": wording})
    return fixes, queries


def check_shared_words_rare(fixes: list[dict], queries: list[dict]) -> None:
    """The word each paraphrase query shares with its distractor, as the query spells it (the full-text index
    does not stem), is held by at most MAX_SHARED_WORD_FIXES stored fixes."""
    words = [content_words(embedded_text(fx)) for fx in fixes]
    by_id = {fx["id"]: fx for fx in fixes}
    for q in queries:
        if q["kind"] != "paraphrase":
            continue
        distractor = by_id[q["target"].rsplit("-", 1)[0] + "-distractor"]
        for word in shared_words(q["query"], embedded_text(distractor)):
            held = sum(word in w for w in words)
            if held > MAX_SHARED_WORD_FIXES:
                raise AssertionError(f"paraphrase query {q['query']!r}: {word!r} is in {held} stored fixes")


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
    # the paraphrase fixes (no identifier, their own random draws) come after, and must not take from an
    # identifier query the token only its fix held
    paraphrase_fixes, paraphrase_queries = paraphrases()
    identifier = identifier_queries(fixes)
    if identifier_queries(fixes + paraphrase_fixes) != identifier:
        lost = {q["target"] for q in identifier if q not in identifier_queries(fixes + paraphrase_fixes)}
        idents = [fx["identifier"] for fx in fixes if fx["id"] in lost]
        holders = {fx["id"]: sorted(tokens(stored_text(fx)) & tokens(" ".join(idents))) for fx in paraphrase_fixes
                   if tokens(stored_text(fx)) & tokens(" ".join(idents))}
        raise AssertionError(f"paraphrase fixes hold the tokens of identifiers {idents}: {holders}")
    queries += identifier
    fixes += paraphrase_fixes
    queries += paraphrase_queries
    check_shared_words_rare(fixes, queries)
    ids = [fx["id"] for fx in fixes]
    if len(set(ids)) != len(ids):
        raise AssertionError("two fixes share an id")
    return {
        "about": "Generated by bench/fix_eval_set.py (seed %d); do not edit by hand." % SEED,
        "fixes": fixes,
        "queries": queries,
    }


def vector_report(data: dict, model_dir: Path) -> None:
    """Sentence-embedding check of the paraphrase queries: every fix's embedded text and every paraphrase
    query embedded with bench/embedder.py (the product's model, run as the product runs it); per split the
    share of queries whose target is the nearest fix by cosine (vector hit@1), hit@3 and MRR over 10, and
    the queries whose target is not among the first 3, with what is. Needs numpy, onnxruntime and
    tokenizers (the bench venv)."""
    import numpy as np

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from embedder import OnnxEmbedder

    embedder = OnnxEmbedder(model_dir, threads=1)
    fixes = data["fixes"]
    queries = [q for q in data["queries"] if q["kind"] == "paraphrase"]
    fix_vectors = embedder.embed_many([embedded_text(fx) for fx in fixes])
    query_vectors = embedder.embed_many([q["query"] for q in queries])
    ids = [fx["id"] for fx in fixes]
    order = np.argsort(-(query_vectors @ fix_vectors.T), axis=1)
    sums: dict[str, list[float]] = {}
    misses = []
    for q, ranked in zip(queries, order):
        ranked_ids = [ids[i] for i in ranked[:10]]
        position = ranked_ids.index(q["target"]) if q["target"] in ranked_ids else None
        distractor = q["target"].rsplit("-", 1)[0] + "-distractor"
        s = sums.setdefault(q["split"], [0, 0.0, 0.0, 0.0])
        s[0] += 1
        s[1] += position == 0
        s[2] += position is not None and position < 3
        s[3] += 0.0 if position is None else 1.0 / (position + 1)
        if position is None or position >= 3:
            near = ", ".join(("*" if i == distractor else "") + i for i in ranked_ids[:3])
            misses.append(f"- [{q['split']}] {q['query']}\n  target {q['target']} at "
                          f"{'>10' if position is None else position + 1}; first: {near}")
    total = [sum(s[k] for s in sums.values()) for k in range(4)]
    print("vector only, paraphrase queries (%d fixes):" % len(fixes))
    for name, s in [*sorted(sums.items()), ("all", total)]:
        print(f"  {name:<9} n={s[0]:>3}  hit@1 {s[1] / s[0]:.3f}  hit@3 {s[2] / s[0]:.3f}  MRR {s[3] / s[0]:.3f}")
    print(f"{len(misses)} paraphrase queries whose target is not in the first 3 (* = its distractor):")
    for line in misses:
        print(line)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--check", action="store_true", help="exit 1 when the file is not what the script makes")
    parser.add_argument("--vector-report", action="store_true",
                        help="also embed the set and report how well the sentence embedding alone finds the targets "
                             "of the paraphrase queries (needs the bench venv: numpy, onnxruntime, tokenizers)")
    parser.add_argument("--model-dir", type=Path, default=Path.home() / ".cache/astra-mcp/models/all-MiniLM-L6-v2-int8",
                        help="the MiniLM model directory for --vector-report (model.onnx, tokenizer.json)")
    args = parser.parse_args()
    data = build()
    text = json.dumps(data, indent=1, ensure_ascii=False) + "\n"
    if args.check:
        same = OUT.exists() and OUT.read_text() == text
        print(f"{OUT}: {'up to date' if same else 'differs from bench/fix_eval_set.py'}")
        if args.vector_report:
            vector_report(data, args.model_dir)
        return 0 if same else 1
    OUT.write_text(text)
    by: dict[tuple[str, str], int] = {}
    for q in data["queries"]:
        by[(q["split"], q["kind"])] = by.get((q["split"], q["kind"]), 0) + 1
    print(f"wrote {OUT}: {len(data['fixes'])} fixes, {len(data['queries'])} queries")
    for (split, kind), n in sorted(by.items()):
        print(f"  {split:<9} {kind:<11} {n:>4}")
    if args.vector_report:
        vector_report(data, args.model_dir)
    return 0


if __name__ == "__main__":
    sys.exit(main())
