"""Seeded generator of realistic memory texts for the benchmarks, and of queries with known targets.

Two kinds of memory, as agents store them:
- fixes (`search_codebase_memory`): a fix description of 100-600 characters (cause, change, verification,
  sometimes extra detail), an error type, file paths, and the symptoms the server would have seen (failing
  tests with their first assertion line), built from templates with random code identifiers;
- archival passages (`archival_memory_search`): 100-600 characters of decisions, conventions, runbook
  steps, incident notes and preferences, with 0-3 tags.

Everything is a pure function of (seed, kind, index): row i is the same whatever the store size, so a 1k
store is a prefix of a 10k one, and query j always names the same target. Nothing is written to disk here.

    python bench/dataset.py --kind fix --n 3 --seed 1      # look at a few rows
    python bench/dataset.py --kind query-fix --n 3 --size 1000
"""

from __future__ import annotations

import argparse
import json
import random
import string
import uuid
from dataclasses import asdict, dataclass, field
from datetime import datetime, timedelta, timezone

# ---------------------------------------------------------------------------------------------------------
# vocabulary

DOMAINS = (
    "billing invoice auth session cache scheduler parser config migration upload search notification "
    "payment inventory report export webhook queue tenant profile audit_log metrics pipeline ingest router "
    "template locale checkout cart shipment ledger pricing discount coupon subscription refund email sms "
    "oauth token permission role workspace project ticket comment attachment thumbnail feed timeline "
    "analytics dashboard alert incident deploy release feature_flag experiment quota rate_limit backup"
).split()
OBJECTS = (
    "entry record request response handler client builder policy manager registry loader serializer "
    "validator adapter worker buffer index snapshot cursor batch job task event payload header row column "
    "schema state context store provider resolver factory mapper filter formatter encoder decoder"
).split()
VERBS = (
    "parse load build validate resolve fetch render normalize merge apply flush encode decode compute "
    "schedule retry sync refresh split format collect dispatch persist hydrate serialize migrate compact"
).split()
FIELDS = (
    "tenant_id user_id created_at updated_at amount currency locale timezone email status priority "
    "retry_count page_size offset limit due_date expires_at checksum version region sku quantity"
).split()
SETTINGS = ("ALLOWED_ORIGINS", "SINK_NAMES", "FEATURE_FLAGS", "ADMIN_EMAILS", "TRUSTED_PROXIES",
            "CORS_HEADERS", "QUEUE_NAMES", "LOG_LEVELS", "RETRY_CODES", "EXCLUDED_PATHS")
LIBS = ("zoneinfo", "dateutil", "pydantic", "serde", "chrono", "tokio", "sqlalchemy", "requests", "axios",
        "lodash", "zod", "reqwest", "anyhow", "pytest", "jest", "httpx", "arrow", "numpy")

LANGUAGES = {
    "python": {
        "tool": "pytest", "ext": "py", "src": "src", "test": "tests/test_{m}.py", "runner": "python -m pytest -q",
        "errors": ("TypeError", "KeyError", "ValueError", "AttributeError", "IndexError", "AssertionError",
                   "ZeroDivisionError", "UnicodeDecodeError", "FileNotFoundError", "RecursionError",
                   "TimeoutError", "IntegrityError", "JSONDecodeError", "ModuleNotFoundError"),
    },
    "rust": {
        "tool": "cargo", "ext": "rs", "src": "src", "test": "tests/{m}.rs", "runner": "cargo test",
        "errors": ("E0502", "E0382", "E0308", "E0277", "E0499", "E0106", "E0597", "panic"),
    },
    "typescript": {
        "tool": "jest", "ext": "ts", "src": "src", "test": "src/__tests__/{m}.test.ts", "runner": "npx jest",
        "errors": ("TypeError", "ReferenceError", "RangeError", "TS2345", "TS2322", "TS2532",
                   "UnhandledPromiseRejection", "ECONNREFUSED", "ETIMEDOUT"),
    },
    "go": {
        "tool": "go", "ext": "go", "src": "internal", "test": "internal/{m}/{m}_test.go", "runner": "go test ./...",
        "errors": ("nil pointer dereference", "index out of range", "data race", "deadlock",
                   "context deadline exceeded", "EADDRINUSE"),
    },
}

ERROR_MESSAGES = {
    "TypeError": ("TypeError: unsupported operand type(s) for +: 'NoneType' and 'str'",
                  "TypeError: '{cls}' object is not subscriptable",
                  "TypeError: {fn}() missing 1 required positional argument: '{field}'",
                  "TypeError: Cannot read properties of undefined (reading '{field}')"),
    "KeyError": ("KeyError: '{field}'",),
    "ValueError": ("ValueError: invalid literal for int() with base 10: '{field}'",
                   "ValueError: time data '{field}' does not match format '%Y-%m-%d'"),
    "AttributeError": ("AttributeError: 'NoneType' object has no attribute '{field}'",
                       "AttributeError: '{cls}' object has no attribute '{fn}'"),
    "IndexError": ("IndexError: list index out of range",),
    "AssertionError": ("AssertionError: assert '{a}' == '{b}'", "AssertionError: assert {n} == {m}"),
    "ZeroDivisionError": ("ZeroDivisionError: division by zero",),
    "UnicodeDecodeError": ("UnicodeDecodeError: 'utf-8' codec can't decode byte 0xe9 in position {n}",),
    "FileNotFoundError": ("FileNotFoundError: [Errno 2] No such file or directory: '{path}'",),
    "RecursionError": ("RecursionError: maximum recursion depth exceeded in comparison",),
    "TimeoutError": ("TimeoutError: {fn} did not finish within {n} seconds",),
    "IntegrityError": ("sqlite3.IntegrityError: UNIQUE constraint failed: {a}.{field}",),
    "JSONDecodeError": ("json.decoder.JSONDecodeError: Expecting value: line 1 column {n} (char {m})",),
    "ModuleNotFoundError": ("ModuleNotFoundError: No module named '{a}'",),
    "E0502": ("error[E0502]: cannot borrow `{var}` as mutable because it is also borrowed as immutable",),
    "E0382": ("error[E0382]: borrow of moved value: `{var}`",),
    "E0308": ("error[E0308]: mismatched types: expected `{cls}`, found `Option<{cls}>`",),
    "E0277": ("error[E0277]: the trait bound `{cls}: Send` is not satisfied",),
    "E0499": ("error[E0499]: cannot borrow `{var}` as mutable more than once at a time",),
    "E0106": ("error[E0106]: missing lifetime specifier in `{fn}`",),
    "E0597": ("error[E0597]: `{var}` does not live long enough",),
    "panic": ("thread 'main' panicked at {path}:{n}: called `Option::unwrap()` on a `None` value",
              "thread 'tokio-runtime-worker' panicked at {path}:{n}: index out of bounds"),
    "ReferenceError": ("ReferenceError: {var} is not defined",),
    "RangeError": ("RangeError: Invalid time value", "RangeError: Maximum call stack size exceeded"),
    "TS2345": ("error TS2345: Argument of type 'string | undefined' is not assignable to parameter of type 'string'",),
    "TS2322": ("error TS2322: Type '{cls} | null' is not assignable to type '{cls}'",),
    "TS2532": ("error TS2532: Object is possibly 'undefined'",),
    "UnhandledPromiseRejection": ("UnhandledPromiseRejection: {fn} rejected with Error: {a} failed",),
    "ECONNREFUSED": ("Error: connect ECONNREFUSED 127.0.0.1:{n}",),
    "ETIMEDOUT": ("Error: ETIMEDOUT while calling {fn}",),
    "nil pointer dereference": ("panic: runtime error: invalid memory address or nil pointer dereference in {fn}",),
    "index out of range": ("panic: runtime error: index out of range [{n}] with length {m}",),
    "data race": ("WARNING: DATA RACE Write at {path}:{n} by goroutine {m}",),
    "deadlock": ("fatal error: all goroutines are asleep - deadlock!",),
    "context deadline exceeded": ("{fn}: context deadline exceeded",),
    "EADDRINUSE": ("listen tcp 127.0.0.1:{n}: bind: address already in use (EADDRINUSE)",),
}

CAUSES = (
    "{fn} assumed the {dom} {obj} always had a {field}, but imported rows leave it empty",
    "the {dom} {obj} was read before {verb}ing the {obj2}, so the first call saw stale state",
    "an off-by-one in the loop over {dom} {objs} dropped the last {obj} of every page",
    "the comma-separated {setting} value kept the space after each comma, so '{a}' never matched",
    "timezone-naive datetimes were compared with aware ones in {fn} around the {field} boundary",
    "the cache key built by {fn} omitted the {field}, so {dom} {objs} of different tenants collided",
    "{fn} mutated a shared default list, leaking {objs} between calls",
    "the retry loop in {fn} swallowed {err} and returned None instead of raising",
    "a borrowed reference to `{var}` outlived the mutable borrow taken in {fn}",
    "the pattern used by {fn} to match {field} was not anchored and accepted trailing garbage",
    "integer division truncated the {field} in {fn} for amounts under one unit",
    "the {setting} environment value was read as a string and compared against a list",
    "the lock on the {dom} {obj} was held across an await in {fn}, stalling every other worker",
    "two workers wrote {path} at once without a lock, interleaving their {objs}",
    "{fn} sorted {dom} {objs} by {field} as strings, so '10' came before '9'",
    "the {cls} returned by {fn} was moved into the closure and used again afterwards",
    "the migration renamed {field} but {fn} still selected the old column",
    "{fn} decoded the {dom} payload as latin-1 while the {obj} was sent as UTF-8",
    "the {dom} {obj} was cached forever because {fn} never looked at {field}",
    "an empty {dom} batch made {fn} divide by zero when computing the average {field}",
)
CHANGES = (
    "Guarded the {field} access in {fn} with an explicit None check and a default of {default}",
    "Moved the {verb} call ahead of the {obj2} lookup in {fn}",
    "Stripped whitespace and lower-cased each {setting} entry before comparing",
    "Cloned `{var}` before the loop so the immutable borrow ends before {fn} mutates it",
    "Replaced the mutable default argument of {fn} with None and a fresh list per call",
    "Converted both timestamps to UTC with {lib} before comparing them in {fn}",
    "Added the {field} to the cache key and bumped the key prefix so old entries expire",
    "Anchored the {field} pattern with ^ and $ and added a length limit",
    "Switched the {field} arithmetic in {fn} to Decimal with banker's rounding",
    "Parsed {setting} into a list once at start-up and validated every item",
    "Released the {obj} lock before awaiting {fn} and re-checked the state afterwards",
    "Wrapped the write to {path} in a file lock and an atomic rename",
    "Sorted by the numeric {field} with a key function instead of the string form",
    "Passed a reference to the {cls} into the closure instead of moving it",
    "Selected the renamed {field} column in {fn} and added a fallback for rows not yet migrated",
    "Decoded the {dom} payload as UTF-8 with errors='strict' and rejected invalid bytes with a 400",
    "Honoured {field} in {fn} and evicted expired {dom} {objs} on read",
    "Returned an empty result early from {fn} when the batch has no {objs}",
)
VERIFICATIONS = (
    "The {n} failing tests in {test} pass now.",
    "Added the regression test {testname} next to the existing {dom} tests.",
    "Checked with `{runner}`: all {m} tests pass.",
    "{testname} reproduced it first; it passes now and so do the other {m} tests.",
    "",
)
EXTRAS = (
    "The same {obj} shape is built in {fn2}, which got the same guard.",
    "Logged a warning with the {field} when the fallback is used, so bad data shows up in {dom} metrics.",
    "Left a comment at {path}:{n} explaining why the order matters.",
    "Did not touch the public {cls} API; only the internal {verb} path changed.",
    "Documented the {setting} format in the README under Configuration.",
    "Note: {lib} behaves differently on older versions; pinned it in the lockfile.",
    "The bug only showed with more than {n} {dom} {objs}, which is why CI missed it.",
)

PASSAGE_OPENERS = (
    "Decision ({date}): the {dom} service keeps {objs} in {store} and never in the request cache.",
    "Convention: every {dom} {obj} carries a {field}; handlers reject requests without it.",
    "Runbook, {dom} {obj} backlog: check the {queue} queue depth first, then the {fn} worker logs.",
    "Incident {date}: {dom} {objs} were duplicated for {n} minutes after a deploy of {fn}.",
    "The user prefers {lib} over hand-written {verb}ing for {dom} {objs} and wants short diffs.",
    "API note: `{fn}` returns {cls} objects sorted by {field}; callers must not re-sort them.",
    "Meeting {date}: we agreed to move {dom} {obj} {verb}ing behind the {flag} feature flag.",
    "Architecture: {dom} talks to {dom2} only through the {queue} queue; no direct database reads.",
)
PASSAGE_SENTENCES = (
    "The {field} column is indexed because the {dom} dashboard filters on it.",
    "Retries use exponential backoff starting at {n} ms, capped at {m} s.",
    "Tests for this live in {test} and run with `{runner}`.",
    "{fn} is the only place allowed to write {path}.",
    "Large {dom} exports are streamed in pages of {n} rows to keep memory flat.",
    "Owners: the {dom2} team reviews changes to {cls}.",
    "When {setting} is empty the service falls back to the defaults in {path}.",
    "The {queue} consumer acknowledges a message only after {fn} committed it.",
    "Timestamps are stored in UTC and rendered in the tenant's locale.",
    "We tried caching {dom} {objs} in-process, but invalidation across workers was unreliable.",
    "Secrets come from the environment; never from {path}.",
    "Rate limits are {n} requests per minute per tenant, enforced in {fn}.",
    "The old {fn2} endpoint stays until every client moved to {fn}.",
    "Schema changes go through a migration file and a backfill job, never by hand.",
)
TAGS = ("decision", "convention", "runbook", "incident", "preference", "api", "ops", "db", "frontend",
        "security", "meeting", "architecture")
QUERY_FIX_TEMPLATES = (
    "{message}",
    "{testname} fails: {message}",
    "{error_type} in {fn} while {verb}ing {dom} {objs}",
    "{message} ({test})",
    "{dom} {obj} {error_type} after {verb} in {fn}",
)
QUERY_PASSAGE_TEMPLATES = (
    "what did we decide about {dom} {objs}",
    "how is {fn} supposed to be used",
    "{dom} {obj} {field} convention",
    "runbook for the {queue} queue",
    "{dom} {obj} incident",
    "who owns {cls}",
)

BASE_TIME = datetime(2026, 1, 1, tzinfo=timezone.utc)


# ---------------------------------------------------------------------------------------------------------
# rows


@dataclass
class FixRow:
    """A fix memory as `store_fix_memory` would have stored it (plus what the server embeds)."""

    id: str
    fix_description: str
    error_type: str
    file_paths: list[str]
    outcome: str
    symptoms: list[str]
    project: str
    created_at: str
    ids: dict = field(default_factory=dict)  # the identifiers it was built from (for queries)

    @property
    def embedded_text(self) -> str:
        """The text the server embeds and indexes for a fix row (as stored by astra-mcp)."""
        return f"Error type: {self.error_type}\nFix: {self.fix_description}\nSymptoms:\n" + "\n".join(self.symptoms)


@dataclass
class PassageRow:
    """An archival passage as `archival_memory_insert` would have stored it."""

    id: str
    text: str
    tags: list[str]
    project: str
    created_at: str
    ids: dict = field(default_factory=dict)

    @property
    def embedded_text(self) -> str:
        """The text the server embeds and indexes for a passage (the passage itself)."""
        return self.text


@dataclass
class Query:
    """A search with the memory it was written from (`target_id`), for a sanity hit rate."""

    text: str
    target_id: str
    target_index: int


def _rng(seed: int, *parts) -> random.Random:
    """A random generator that depends only on the seed and the parts (string seeding is stable)."""
    return random.Random(":".join(str(p) for p in (seed, *parts)))


def _plural(word: str) -> str:
    """English plural of an object noun (`batch` -> `batches`, `entry` -> `entries`)."""
    if word.endswith(("ch", "sh", "x", "s")):
        return word + "es"
    if word.endswith("y"):
        return word[:-1] + "ies"
    return word + "s"


def _ident(rng: random.Random) -> dict:
    """Random but plausible code identifiers drawn together, so one row's texts agree with each other."""
    lang = rng.choice(list(LANGUAGES))
    spec = LANGUAGES[lang]
    dom, dom2 = rng.sample(DOMAINS, 2)
    obj, obj2 = rng.sample(OBJECTS, 2)
    verb = rng.choice(VERBS)
    fn = f"{verb}_{dom}_{obj}" if lang in ("python", "rust") else f"{verb}{dom.title().replace('_', '')}{obj.title()}"
    fn2 = f"{rng.choice(VERBS)}_{obj2}" if lang in ("python", "rust") else f"{rng.choice(VERBS)}{obj2.title()}"
    cls = f"{dom.title().replace('_', '')}{obj.title()}"
    module = f"{dom}_{obj}" if rng.random() < 0.5 else dom
    path = f"{spec['src']}/{module}.{spec['ext']}"
    return {
        "objs": _plural(obj), "tool": spec["tool"],
        "lang": lang, "dom": dom, "dom2": dom2, "obj": obj, "obj2": obj2, "verb": verb, "fn": fn, "fn2": fn2,
        "cls": cls, "var": _plural(obj) if rng.random() < 0.5 else f"{dom}_{obj}", "path": path,
        "module": module, "field": rng.choice(FIELDS), "setting": rng.choice(SETTINGS), "lib": rng.choice(LIBS),
        "test": spec["test"].format(m=module), "testname": f"test_{verb}_{obj}_{rng.choice(FIELDS)}",
        "runner": spec["runner"], "n": rng.randint(2, 900), "m": rng.randint(3, 400),
        "a": rng.choice(DOMAINS), "b": rng.choice(DOMAINS), "default": rng.choice(("0", "''", "[]", "None", "UTC")),
        "queue": f"{dom}-{rng.choice(('events', 'jobs', 'outbox', 'retries'))}",
        "flag": f"{dom}_{rng.choice(('v2', 'async', 'batching', 'strict'))}",
        "store": rng.choice(("Postgres", "Redis", "S3", "SQLite", "LanceDB")),
        "date": (BASE_TIME + timedelta(days=rng.randint(0, 300))).strftime("%Y-%m-%d"),
    }


def _fill(template: str, ids: dict) -> str:
    """Formats a sentence template, capitalising its first word unless that word is an identifier."""
    text = template.format(**ids)
    return text[:1].upper() + text[1:] if text and not template.startswith("{") else text


def _fields(template: str) -> list[str]:
    """The identifier names a template uses."""
    return [name for _, name, _, _ in string.Formatter().parse(template) if name]


def _query(rng: random.Random, templates: tuple[str, ...], ids: dict, text: str) -> str:
    """A query from the first template (in random order) whose identifiers all occur in the target's
    text, so every query has a findable target; the last template is the fallback."""
    order = rng.sample(templates, len(templates))
    for template in order:
        if all(str(ids[name]) in text for name in _fields(template)):
            return template.format(**ids)
    return order[-1].format(**ids)


def _fit(parts: list[str], extras: list[str], target_len: int, lo: int = 100, hi: int = 600) -> str:
    """Joins sentences, adding extras until near `target_len`, and keeps the result within [lo, hi]."""
    text = " ".join(p for p in parts if p)
    for extra in extras:
        if len(text) >= target_len:
            break
        if len(text) + 1 + len(extra) <= hi:
            text = f"{text} {extra}"
    if len(text) > hi:
        cut = text[:hi].rsplit(" ", 1)[0].rstrip(",;:")
        text = cut if cut.endswith(".") else cut + "."
    while len(text) < lo:
        text += " Verified locally before storing."
    return text


def _time(rng: random.Random) -> str:
    """A creation time within 2026, RFC 3339 with microseconds, as the store writes it."""
    t = BASE_TIME + timedelta(seconds=rng.randint(0, 330 * 86400), microseconds=rng.randint(0, 999999))
    return t.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def fix_row(seed: int, i: int) -> FixRow:
    """Fix memory number `i` of the dataset `seed`."""
    rng = _rng(seed, "fix", i)
    ids = _ident(rng)
    error_type = rng.choice(LANGUAGES[ids["lang"]]["errors"])
    ids["error_type"] = error_type
    ids["err"] = error_type
    ids["message"] = rng.choice(ERROR_MESSAGES[error_type]).format(**ids)
    cause = _fill(rng.choice(CAUSES), ids)
    change = _fill(rng.choice(CHANGES), ids)
    verification = _fill(rng.choice(VERIFICATIONS), ids)
    extras = [_fill(e, ids) for e in rng.sample(EXTRAS, len(EXTRAS))]
    description = _fit([f"{cause}.", f"{change}.", verification], extras, rng.randint(100, 600))
    symptoms = [f"FAILED {ids['test']}::{ids['testname']} - {ids['message']}"]
    for _ in range(rng.randint(0, 2)):
        symptoms.append(f"FAILED {ids['test']}::test_{rng.choice(VERBS)}_{ids['obj']} - {ids['message']}")
    files = [ids["path"]] + ([ids["test"]] if rng.random() < 0.6 else [])
    n_tests = rng.randint(3, 120)
    outcome = f"{ids['tool']} passed with exit code 0 ({n_tests} passed)"
    return FixRow(
        id=str(uuid.UUID(int=rng.getrandbits(128), version=4)),
        fix_description=description,
        error_type=error_type,
        file_paths=files,
        outcome=outcome,
        symptoms=symptoms,
        project=f"proj-{rng.randint(1, 12)}",
        created_at=_time(rng),
        ids=ids,
    )


def passage_row(seed: int, i: int) -> PassageRow:
    """Archival passage number `i` of the dataset `seed`."""
    rng = _rng(seed, "passage", i)
    ids = _ident(rng)
    opener = _fill(rng.choice(PASSAGE_OPENERS), ids)
    rest = [_fill(s, ids) for s in rng.sample(PASSAGE_SENTENCES, len(PASSAGE_SENTENCES))]
    text = _fit([opener], rest, rng.randint(100, 600))
    tags = sorted(rng.sample(TAGS, rng.randint(0, 3)))
    return PassageRow(
        id=str(uuid.UUID(int=rng.getrandbits(128), version=4)),
        text=text,
        tags=tags,
        project=f"proj-{rng.randint(1, 12)}",
        created_at=_time(rng),
        ids=ids,
    )


def fix_queries(seed: int, size: int, count: int, salt: str = "") -> list[Query]:
    """`count` failure-symptom queries, each written from a random fix among the first `size`."""
    out = []
    for j in range(count):
        rng = _rng(seed, "query-fix", salt, size, j)
        target = rng.randrange(size)
        row = fix_row(seed, target)
        out.append(Query(_query(rng, QUERY_FIX_TEMPLATES, row.ids, row.embedded_text)[:2000], row.id, target))
    return out


def passage_queries(seed: int, size: int, count: int, salt: str = "") -> list[Query]:
    """`count` natural-language questions, each written from a random passage among the first `size`."""
    out = []
    for j in range(count):
        rng = _rng(seed, "query-passage", salt, size, j)
        target = rng.randrange(size)
        row = passage_row(seed, target)
        out.append(Query(_query(rng, QUERY_PASSAGE_TEMPLATES, row.ids, row.text), row.id, target))
    return out


def archival_queries(seed: int, size: int, count: int, salt: str = "") -> list[Query]:
    """`count` queries for archival passages among the first `size`, two kinds alternating: a question
    written from the passage (as `passage_queries`), and the passage's first 5-10 words (a prefix, as
    an agent recalls a note it half remembers). Used for the warm archival searches and for recall."""
    out = []
    for j in range(count):
        if j % 2 == 0:
            out += passage_queries(seed, size, 1, salt=f"{salt}:q{j}")
            continue
        rng = _rng(seed, "query-prefix", salt, size, j)
        target = rng.randrange(size)
        row = passage_row(seed, target)
        words = row.text.split()
        out.append(Query(" ".join(words[: rng.randint(5, 10)]), row.id, target))
    return out


def one_line(text: str) -> str:
    """A text on one line (newlines to spaces): `astra-mcp-dev bench` reads its texts one per line, so both
    sides of an embedding comparison get these."""
    return " ".join(text.split("\n"))


def embedding_texts(seed: int, count: int) -> list[str]:
    """A mix of fix and passage texts (what the server embeds), for the embedding throughput runs."""
    return [(fix_row(seed, i).embedded_text if i % 2 == 0 else passage_row(seed, i).text) for i in range(count)]


def main() -> None:
    """Prints a few generated rows or queries as JSON lines, to look at the data."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--kind", choices=("fix", "passage", "query-fix", "query-passage", "query-archival"),
                    default="fix")
    ap.add_argument("--n", type=int, default=5)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--size", type=int, default=1000, help="store size the queries target")
    args = ap.parse_args()
    if args.kind == "fix":
        items = [fix_row(args.seed, i) for i in range(args.n)]
    elif args.kind == "passage":
        items = [passage_row(args.seed, i) for i in range(args.n)]
    elif args.kind == "query-fix":
        items = fix_queries(args.seed, args.size, args.n)
    elif args.kind == "query-passage":
        items = passage_queries(args.seed, args.size, args.n)
    else:
        items = archival_queries(args.seed, args.size, args.n)
    for item in items:
        d = asdict(item)
        d.pop("ids", None)
        print(json.dumps(d))


if __name__ == "__main__":
    main()
