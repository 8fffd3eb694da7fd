//! Unit tests of the transcript parsers, on the fixtures of `tests/fixtures/transcripts`.

use super::*;

const CLAUDE_CODE: &[u8] = include_bytes!("../../../tests/fixtures/transcripts/claude-code.jsonl");
const CODEX: &[u8] = include_bytes!("../../../tests/fixtures/transcripts/codex.jsonl");
const RESPONSES: &[u8] = include_bytes!("../../../tests/fixtures/transcripts/responses.jsonl");
/// Real files the pinned clients wrote (tests/clients: session 2 of the main job, scripted model).
const CODEX_REAL: &[u8] = include_bytes!("../../../tests/fixtures/transcripts/codex-0.169.0.jsonl");
const CLAUDE_CODE_REAL: &[u8] = include_bytes!("../../../tests/fixtures/transcripts/claude-code-2.1.328.jsonl");

const CLAUDE_SESSION: &str = "5c0f3e2a-8b7d-4e1f-9a6c-2d4b8e7f1a93";
const CODEX_SESSION: &str = "019a4f6e-7c21-7d30-b8a5-3e9f1c2d4a6b";

fn parse(bytes: &[u8]) -> ParsedTranscript {
    match parse_transcript(bytes) {
        Ok(parsed) => parsed,
        Err(error) => panic!("fixture must parse: {error}"),
    }
}

fn ts(raw: &str) -> Option<DateTime<Utc>> {
    Some(DateTime::parse_from_rfc3339(raw).expect("test timestamp").with_timezone(&Utc))
}

/// `(turn, key, role, text)` of every item.
fn summary(parsed: &ParsedTranscript) -> Vec<(u32, String, Role, String)> {
    parsed.items.iter().map(|item| (item.turn, item.source_key.clone(), item.role, item.text.clone())).collect()
}

fn row(turn: u32, key: &str, role: Role, text: &str) -> (u32, String, Role, String) {
    (turn, key.to_string(), role, text.to_string())
}

#[test]
fn claude_code_fixture() {
    let parsed = parse(CLAUDE_CODE);
    assert_eq!(parsed.format, TranscriptFormat::ClaudeCode);
    assert_eq!(parsed.skipped_lines, 0);
    let uuid = |n: u32| format!("0b6f1d3e-2c4a-4f5b-8e9d-1a2b3c4d5e{n:02}");
    assert_eq!(
        summary(&parsed),
        vec![
            row(0, &uuid(1), Role::User, "The test `parses_iso_dates` fails since yesterday, can you fix it?"),
            row(1, &uuid(4), Role::Assistant, "I'll run the failing test first to see the error."),
            row(
                2,
                &uuid(5),
                Role::Tool,
                r#"tool call Bash: {"command":"cargo test parses_iso_dates","description":"Run the failing test"}"#
            ),
            row(
                3,
                &uuid(6),
                Role::Tool,
                "tool result: running 1 test\ntest parse::tests::parses_iso_dates ... FAILED\n\n\
                 thread 'parse::tests::parses_iso_dates' panicked at src/parse.rs:41:9:\n\
                 assertion `left == right` failed\n  left: None\n right: Some(2025-11-03)"
            ),
            row(
                4,
                &uuid(7),
                Role::Tool,
                r#"tool call Read: {"file_path":"/home/dev/datekit/src/parse.rs","limit":12,"offset":30}"#
            ),
            row(
                5,
                &uuid(8),
                Role::Tool,
                "tool result: 30→pub fn parse_iso(s: &str) -> Option<NaiveDate> {\n    31→    \
                 NaiveDate::parse_from_str(s, \"%Y/%m/%d\").ok()\n    32→}"
            ),
            row(
                6,
                &uuid(11),
                Role::Assistant,
                "Fixed: `parse_iso` used the format `%Y/%m/%d`; ISO dates need `%Y-%m-%d`. The test passes now."
            ),
            row(7, &uuid(12), Role::User, "Thanks!"),
        ]
    );
    assert!(parsed.items.iter().all(|item| item.session_id.as_deref() == Some(CLAUDE_SESSION)));
    assert_eq!(parsed.items[0].timestamp, ts("2025-11-03T09:14:02.118Z"));
    assert_eq!(parsed.items[7].timestamp, ts("2025-11-03T09:15:02.310Z"));
}

#[test]
fn codex_fixture() {
    let parsed = parse(CODEX);
    assert_eq!(parsed.format, TranscriptFormat::Codex);
    assert_eq!(parsed.skipped_lines, 0);
    assert_eq!(
        summary(&parsed),
        vec![
            row(0, "line:5:0", Role::User, "Add a --verbose flag to the CLI"),
            row(
                1,
                "line:9:0",
                Role::Tool,
                concat!(
                    r#"tool call shell: {"command":["bash","-lc","rg -n 'struct Args' src"],"#,
                    r#""workdir":"/home/dev/datekit"}"#
                )
            ),
            row(
                2,
                "line:10:0",
                Role::Tool,
                concat!(
                    r#"tool result: {"output":"src/cli.rs:12:pub struct Args {\n","#,
                    r#""metadata":{"exit_code":0,"duration_seconds":0.1}}"#
                )
            ),
            row(
                3,
                "line:11:0",
                Role::Tool,
                "tool call apply_patch: *** Begin Patch\n*** Update File: src/cli.rs\n@@\n pub struct Args {\n\
                 +    /// Print every step.\n+    #[arg(long)]\n+    pub verbose: bool,\n*** End Patch"
            ),
            row(
                4,
                "line:12:0",
                Role::Tool,
                concat!(
                    r#"tool result: {"output":"Success. Updated the following files:\nM src/cli.rs\n","#,
                    r#""metadata":{"exit_code":0,"duration_seconds":0.0}}"#
                )
            ),
            row(5, "line:14:0", Role::Assistant, "Added a `--verbose` flag to `Args` in src/cli.rs."),
        ]
    );
    assert!(parsed.items.iter().all(|item| item.session_id.as_deref() == Some(CODEX_SESSION)));
    assert_eq!(parsed.items[0].timestamp, ts("2025-11-04T16:02:30.118Z"));
    assert_eq!(parsed.items[5].timestamp, ts("2025-11-04T16:02:45.508Z"));
}

#[test]
fn responses_fixture() {
    let parsed = parse(RESPONSES);
    assert_eq!(parsed.format, TranscriptFormat::Responses);
    assert_eq!(parsed.skipped_lines, 0);
    assert_eq!(
        summary(&parsed),
        vec![
            row(0, "line:3:0", Role::User, "What is the crate name in Cargo.toml?"),
            row(1, "line:5:0", Role::Tool, r#"tool call read_file: {"path":"Cargo.toml"}"#),
            row(
                2,
                "line:6:0",
                Role::Tool,
                "tool result: [package]\nname = \"datekit\"\nversion = \"0.2.0\"\nedition = \"2024\""
            ),
            row(3, "line:7:0", Role::Assistant, "The crate is called `datekit` (version 0.2.0)."),
            row(4, "line:8:0", Role::User, "Bump it to the next minor version."),
            row(5, "line:9:0", Role::Tool, r#"tool call bump_version: {"level":"minor","manifest":"Cargo.toml"}"#),
            row(6, "line:10:0", Role::Tool, "tool result: version is now 0.3.0"),
            row(7, "line:11:0", Role::Assistant, "Bumped `datekit` to 0.3.0."),
        ]
    );
    assert!(parsed.items.iter().all(|item| item.session_id.is_none() && item.timestamp.is_none()));
}

#[test]
fn detection_is_by_content() {
    for (bytes, format) in [
        (CLAUDE_CODE, TranscriptFormat::ClaudeCode),
        (CODEX, TranscriptFormat::Codex),
        (RESPONSES, TranscriptFormat::Responses),
        (&legacy_codex()[..], TranscriptFormat::Codex),
    ] {
        assert_eq!(detect_format(bytes).ok(), Some(format));
    }
    // Leading blank lines, garbage and lines of no known shape are looked past.
    let late = "\n\nnot json\n{\"unrelated\":true}\n{\"role\":\"user\",\"content\":\"hi\"}\n";
    assert_eq!(detect_format(late.as_bytes()).ok(), Some(TranscriptFormat::Responses));
}

#[test]
fn parsing_is_idempotent() {
    let legacy = legacy_codex();
    for bytes in [CLAUDE_CODE, CODEX, RESPONSES, &legacy[..]] {
        assert_eq!(parse(bytes), parse(bytes));
    }
}

#[test]
fn appending_lines_keeps_earlier_keys_and_turns() {
    let legacy = legacy_codex();
    for bytes in [CLAUDE_CODE, CODEX, RESPONSES, &legacy[..]] {
        let full = parse(bytes);
        let text = std::str::from_utf8(bytes).expect("fixtures are UTF-8");
        let lines: Vec<&str> = text.lines().collect();
        for cut in 1..lines.len() {
            let prefix = lines[..cut].join("\n") + "\n";
            let Ok(partial) = parse_transcript(prefix.as_bytes()) else { continue };
            assert_eq!(partial.items[..], full.items[..partial.items.len()], "prefix of {cut} lines");
        }
    }
}

#[test]
fn truncated_last_line_is_skipped_and_counted() {
    let complete = std::str::from_utf8(CLAUDE_CODE).expect("fixture is UTF-8");
    let last_start = complete.trim_end().rfind('\n').map_or(0, |index| index + 1);
    let being_written = &complete[..last_start + 40];
    let parsed = parse(being_written.as_bytes());
    assert_eq!(parsed.skipped_lines, 1);
    assert_eq!(parsed.items[..], parse(CLAUDE_CODE).items[..7]);
}

#[test]
fn garbage_line_is_skipped_and_counted() {
    let mut bytes = b"this is not json at all\n[1, 2]\n\"a string\"\n".to_vec();
    bytes.extend_from_slice(RESPONSES);
    bytes.extend_from_slice(b"{\"type\":\"message\",\"role\":\"user\",\"content\":\"unterminated\n\n");
    let parsed = parse(&bytes);
    assert_eq!(parsed.format, TranscriptFormat::Responses);
    assert_eq!(parsed.skipped_lines, 4);
    assert_eq!(parsed.items.len(), 8);
    assert_eq!(parsed.items[0].source_key, "line:6:0");
}

#[test]
fn invalid_utf8_is_replaced_not_fatal() {
    let mut bytes = b"{\"role\":\"user\",\"content\":\"caf".to_vec();
    bytes.extend_from_slice(&[0xff, 0xfe]);
    bytes.extend_from_slice(b" au lait\"}\n\xc3\x28garbage\n");
    let parsed = parse(&bytes);
    assert_eq!(parsed.skipped_lines, 1);
    assert_eq!(summary(&parsed), vec![row(0, "line:1:0", Role::User, "caf\u{fffd}\u{fffd} au lait")]);
    // Any bytes at all: no panic.
    let noise: Vec<u8> = (0..=255u8).cycle().take(4096).collect();
    let _ = parse_transcript(&noise);
    for format in TranscriptFormat::ALL {
        let _ = parse_as(format, &noise);
    }
}

/// `(role, start of text)` of each item must appear in this order among the parsed items.
fn assert_in_order(parsed: &ParsedTranscript, want: &[(Role, &str)]) {
    let mut items = parsed.items.iter();
    for (role, start) in want {
        assert!(
            items.any(|item| item.role == *role && item.text.starts_with(start)),
            "no {role:?} item starting {start:?} (in order) among {:#?}",
            summary(parsed)
        );
    }
}

#[test]
fn real_codex_session_file_of_the_pinned_version() {
    let parsed = parse(CODEX_REAL);
    assert_eq!(parsed.format, TranscriptFormat::Codex);
    assert_eq!(parsed.skipped_lines, 0);
    assert_in_order(
        &parsed,
        &[
            (Role::User, "Fix the failing tests."),
            (Role::Tool, "tool call tool_search: {"),
            (Role::Tool, "tool call exec_command: {\"cmd\":"),
            (Role::Tool, "tool result: Chunk ID: "),
            (
                Role::Tool,
                "tool call mcp__astra.search_codebase_memory: {\"error_type\":null,\"query\":\"AssertionError: assert",
            ),
            // Codex passes on the result's structuredContent as JSON
            (Role::Tool, "tool result: Wall time: "),
            (Role::Assistant, "Found a remembered fix for this failure."),
        ],
    );
    assert!(
        parsed.items.iter().any(|item| item.text.contains("{\"matches\":[{\"rank\":1,")),
        "{:#?}",
        summary(&parsed)
    );
    // the harness's own texts (AGENTS.md, environment context, skills) are not turns
    assert!(parsed.items.iter().all(|item| !item.text.contains("<environment_context>")));
    let session = parsed.items[0].session_id.clone().expect("a session id");
    assert!(parsed.items.iter().all(|item| item.session_id.as_deref() == Some(session.as_str())));
}

#[test]
fn real_claude_code_session_file_of_the_pinned_version() {
    let parsed = parse(CLAUDE_CODE_REAL);
    assert_eq!(parsed.format, TranscriptFormat::ClaudeCode);
    assert_eq!(parsed.skipped_lines, 0);
    assert_in_order(
        &parsed,
        &[
            (Role::User, "Fix the failing tests."),
            (Role::Tool, "tool call ToolSearch: {\"query\":\"select:"),
            (Role::Tool, "tool call Bash: {\"command\":"),
            (Role::Tool, "tool result: "),
            (
                Role::Tool,
                "tool call mcp__astra__search_codebase_memory: {\"error_type\":null,\"query\":\"AssertionError: assert",
            ),
            // Claude Code passes on the result's structuredContent as JSON
            (Role::Tool, "tool result: {\"matches\":[{\"rank\":1,"),
            (Role::Assistant, "Found a remembered fix for this failure."),
        ],
    );
    // the request records, attachments and snapshots this version also writes are not turns
    assert!(parsed.items.iter().all(|item| !item.text.contains("<system-reminder>")), "{:#?}", summary(&parsed));
    let session = parsed.items[0].session_id.clone().expect("a session id");
    assert!(parsed.items.iter().all(|item| item.session_id.as_deref() == Some(session.as_str())));
}

#[test]
fn every_prefix_of_every_fixture_parses_without_panic() {
    for bytes in [CLAUDE_CODE, CODEX, RESPONSES] {
        for cut in (0..=bytes.len()).step_by(5) {
            let prefix = &bytes[..cut];
            if let Ok(parsed) = parse_transcript(prefix) {
                assert!(parsed.items.iter().enumerate().all(|(turn, item)| item.turn as usize == turn));
            }
            for format in TranscriptFormat::ALL {
                let _ = parse_as(format, prefix);
            }
        }
    }
}

#[test]
fn unrecognized_input_names_the_supported_formats() {
    for input in ["", "\n \n", "hello\nworld\n", "{\"foo\":1}\n{\"bar\":[2]}\n"] {
        let Err(error) = parse_transcript(input.as_bytes()) else { panic!("{input:?} must not be recognized") };
        let message = error.to_string();
        assert!(message.starts_with("unrecognized transcript format: "), "{message}");
        for name in ["claude-code", "codex", "responses"] {
            assert!(message.contains(name), "{message}");
        }
    }
    let Err(FormatError::Unrecognized { hint }) = parse_transcript(b"{\"foo\":1}\n") else { panic!("unrecognized") };
    assert!(hint.contains("[foo]"), "{hint}");
}

/// A rollout in the older layout: bare session meta first, bare items, `record_type` state lines.
fn legacy_codex() -> Vec<u8> {
    let lines = [
        serde_json::json!({"id": "5973b6c0-94b8-487b-a530-2aeb6098ae0e", "timestamp": "2025-05-07T17:24:21.123Z",
            "instructions": null}),
        serde_json::json!({"record_type": "state"}),
        serde_json::json!({"type": "message", "role": "user",
            "content": [{"type": "input_text", "text": "<user_instructions>\nBe terse.\n</user_instructions>"}]}),
        serde_json::json!({"type": "message", "role": "user",
            "content": [{"type": "input_text", "text": "list the files"}]}),
        serde_json::json!({"type": "local_shell_call", "id": "lsh_1", "call_id": "call_1", "status": "completed",
            "action": {"type": "exec", "command": ["ls", "-a"], "timeout_ms": null, "working_directory": null,
                "env": null, "user": null}}),
        serde_json::json!({"type": "function_call_output", "call_id": "call_1",
            "output": {"content": ".\n..\nsrc\n", "success": true}}),
        serde_json::json!({"record_type": "state", "previous_response_id": "resp_1"}),
        serde_json::json!({"type": "message", "role": "assistant",
            "content": [{"type": "output_text", "text": "There is one directory, `src`."}]}),
    ];
    lines.iter().map(|line| format!("{line}\n")).collect::<String>().into_bytes()
}

#[test]
fn legacy_codex_layout() {
    let parsed = parse(&legacy_codex());
    assert_eq!(parsed.format, TranscriptFormat::Codex);
    assert_eq!(
        summary(&parsed),
        vec![
            row(0, "line:4:0", Role::User, "list the files"),
            row(1, "line:5:0", Role::Tool, r#"tool call local_shell: ["ls","-a"]"#),
            row(2, "line:6:0", Role::Tool, "tool result: .\n..\nsrc"),
            row(3, "line:8:0", Role::Assistant, "There is one directory, `src`."),
        ]
    );
    let session = Some("5973b6c0-94b8-487b-a530-2aeb6098ae0e");
    assert!(parsed.items.iter().all(|item| item.session_id.as_deref() == session && item.timestamp.is_none()));
}

#[test]
fn claude_code_mixed_blocks_get_sub_keys_and_repeated_uuids_are_dropped() {
    let line = serde_json::json!({"type": "assistant", "uuid": "u-1", "sessionId": "s-1",
        "timestamp": "2025-01-01T00:00:00Z", "message": {"role": "assistant", "content": [
            {"type": "thinking", "thinking": "hm"},
            {"type": "text", "text": "Listing."},
            {"type": "tool_use", "id": "t1", "name": "Bash", "input": {"command": "ls"}},
            {"type": "tool_use", "id": "t2", "name": "Bash", "input": {"command": "pwd"}}]}});
    let user = serde_json::json!({"type": "user", "uuid": "u-2", "sessionId": "s-1",
        "message": {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "t1", "content": [{"type": "text", "text": "a"},
                {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "AA=="}}]},
            {"type": "text", "text": "<system-reminder>ignore</system-reminder>"},
            {"type": "text", "text": "and also check b"}]}});
    let input = format!("{line}\n{user}\n{line}\n");
    let parsed = parse(input.as_bytes());
    assert_eq!(
        summary(&parsed),
        vec![
            row(0, "u-1", Role::Assistant, "Listing."),
            row(1, "u-1:1", Role::Tool, r#"tool call Bash: {"command":"ls"}"#),
            row(2, "u-1:2", Role::Tool, r#"tool call Bash: {"command":"pwd"}"#),
            row(3, "u-2", Role::Tool, "tool result: a\n[image]"),
            row(4, "u-2:1", Role::User, "and also check b"),
        ]
    );
}

#[test]
fn claude_code_sidechains_are_skipped_unless_the_whole_file_is_a_sub_agent() {
    let main = std::str::from_utf8(CLAUDE_CODE).expect("fixture is UTF-8");
    assert!(!parse(CLAUDE_CODE).items.iter().any(|item| item.text.contains("other callers")));
    // The sidechain line alone, as the first conversation line of an `agent-<id>.jsonl` file.
    let sidechain = main.lines().find(|line| line.contains("\"isSidechain\":true")).expect("sidechain line");
    let agent_file = format!("{sidechain}\n");
    let parsed = parse(agent_file.as_bytes());
    assert_eq!(
        summary(&parsed),
        vec![row(
            0,
            "0b6f1d3e-2c4a-4f5b-8e9d-1a2b3c4d5e09",
            Role::Assistant,
            "Searching for other callers of parse_iso."
        )]
    );
}

#[test]
fn long_tool_results_are_truncated() {
    let long = "é".repeat(TOOL_TEXT_MAX_CHARS + 500);
    let line = serde_json::json!({"type": "function_call_output", "call_id": "c", "output": long}).to_string();
    let parsed = parse(format!("{line}\n").as_bytes());
    let body = parsed.items[0].text.strip_prefix("tool result: ").expect("tool result prefix");
    assert_eq!(body.chars().count(), TOOL_TEXT_MAX_CHARS);
    assert!(body.ends_with('…'));
    assert_eq!(truncate_chars("abc", 3), "abc");
    assert_eq!(truncate_chars("abcd", 3), "ab…");
}

#[test]
fn forced_format_ignores_other_shapes() {
    let parsed = parse_as(TranscriptFormat::Responses, CLAUDE_CODE);
    assert_eq!((parsed.format, parsed.items.len(), parsed.skipped_lines), (TranscriptFormat::Responses, 0, 0));
    assert_eq!(parse_as(TranscriptFormat::Codex, CODEX), parse(CODEX));
}

#[test]
fn names_round_trip() {
    for format in TranscriptFormat::ALL {
        assert_eq!(TranscriptFormat::from_name(format.name()), Some(format));
        assert_eq!(serde_json::to_value(format).ok(), Some(Value::String(format.name().to_string())));
    }
    assert_eq!([Role::User, Role::Assistant, Role::Tool].map(Role::as_str), ["user", "assistant", "tool"]);
}
