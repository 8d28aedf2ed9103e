//! The curl and lockctl transcripts of README.md and docs/*.md, run against
//! a real broker: each command must print what the document shows, with
//! only the parts marked `[..]` free to differ ([`lockbroker_tests::transcript`]).

use lockbroker_tests::transcript::{self, check_blocks, documents, repo_root};
use lockbroker_tests::{lockctl_binary, RedisServer, TestApp};

/// The documents whose transcripts run, each in a test of its own below.
const RUN: &[&str] = &[
    "README.md",
    "docs/election.md",
    "docs/multi-lock.md",
    "docs/semaphores.md",
    "docs/sessions.md",
];

/// Runs every transcript of `file` in one shell session against a broker of
/// its own, and fails with each command whose output differs.
async fn runs_as_documented(file: &str) {
    let redis = RedisServer::start();
    let app = TestApp::spawn(&redis).await;
    let path = repo_root().join(file);
    let text = std::fs::read_to_string(&path).expect("read document");
    let steps = transcript::steps(&text);
    assert!(!steps.is_empty(), "{file} has no transcript to run");
    let dir = std::env::temp_dir().join(format!(
        "transcript-{}-{}",
        std::process::id(),
        file.replace('/', "-")
    ));
    std::fs::create_dir_all(&dir).expect("scratch dir");
    let bin = lockctl_binary().parent().expect("target dir").to_path_buf();
    let base = app.base.clone();
    let run_dir = dir.clone();
    let outcomes =
        tokio::task::spawn_blocking(move || transcript::run(steps, &base, &bin, &run_dir))
            .await
            .expect("join");
    let _ = std::fs::remove_dir_all(&dir);

    match std::env::var("TRANSCRIPTS").as_deref() {
        Ok("print") => {
            for outcome in &outcomes {
                println!("{file}:{}: $ {}", outcome.step.line, outcome.step.command);
                for line in &outcome.actual {
                    println!("{line}");
                }
            }
        }
        Ok("overwrite") => transcript::overwrite(&path, &outcomes),
        _ => {}
    }
    if let Some(report) = transcript::report(file, &outcomes) {
        panic!("{report}");
    }
}

#[tokio::test]
async fn readme_runs_as_documented() {
    runs_as_documented("README.md").await;
}

#[tokio::test]
async fn election_doc_runs_as_documented() {
    runs_as_documented("docs/election.md").await;
}

#[tokio::test]
async fn multi_lock_doc_runs_as_documented() {
    runs_as_documented("docs/multi-lock.md").await;
}

#[tokio::test]
async fn sessions_doc_runs_as_documented() {
    runs_as_documented("docs/sessions.md").await;
}

#[tokio::test]
async fn semaphores_doc_runs_as_documented() {
    runs_as_documented("docs/semaphores.md").await;
}

#[test]
fn every_transcript_is_run_or_says_why_not() {
    let mut problems = Vec::new();
    for file in documents() {
        let text = std::fs::read_to_string(repo_root().join(&file)).expect("read document");
        problems.extend(check_blocks(&file, &text));
        let has_steps = !transcript::steps(&text).is_empty();
        if has_steps && !RUN.contains(&file.as_str()) {
            problems.push(format!(
                "{file}: has transcripts but no test runs them: add it to RUN in tests/api/transcripts.rs"
            ));
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn a_marked_part_matches_anything_within_a_line_and_dots_any_lines() {
    let lines = |text: &str| text.lines().map(str::to_owned).collect::<Vec<_>>();
    assert!(transcript::line_matches(
        r#"{"token":"[..]","fence":[..]}"#,
        r#"{"token":"ab12","fence":17}"#
    ));
    assert!(transcript::line_matches("[..]", ""));
    assert!(!transcript::line_matches(
        r#"{"fence":[..],"owner":"a"}"#,
        r#"{"fence":17,"owner":"b"}"#
    ));
    assert!(!transcript::line_matches("exact", "exact "));
    assert!(transcript::output_matches(
        &lines("a\n...\nd"),
        &lines("a\nb\nc\nd")
    ));
    assert!(transcript::output_matches(
        &lines("a\n...\nd"),
        &lines("a\nd")
    ));
    assert!(!transcript::output_matches(
        &lines("a\nd"),
        &lines("a\nb\nd")
    ));
    assert!(!transcript::output_matches(&lines("a\nb"), &lines("a")));
}

#[test]
fn a_document_is_read_into_commands_and_their_output() {
    let text = "intro\n\n```console\n$ echo one \\\n  two\none two\n$ true\n$ printf 'x\\n\\n'\nx\n\n```\n\n<!-- transcript: not run: needs Docker -->\n```console\n$ docker ps\n```\n";
    let steps = transcript::steps(text);
    assert_eq!(steps.len(), 3, "{steps:?}");
    assert_eq!(steps[0].command, "echo one \\\n  two");
    assert_eq!(steps[0].expected, ["one two"]);
    assert_eq!(steps[0].line, 4);
    assert!(steps[1].expected.is_empty());
    assert_eq!(steps[2].expected, ["x"]);
    assert!(check_blocks("t.md", text).is_empty());
    let unmarked = "```sh\ncurl -s localhost:7700/v1/locks/x\n```\n```text\n$ ls\n```\n";
    assert_eq!(check_blocks("t.md", unmarked).len(), 2);
}

#[test]
fn overwrite_mode_marks_what_differs_between_runs() {
    assert_eq!(
        transcript::redact(
            r#"{"name":"a","token":"9c8f","fence":17,"expires_in_ms":29998,"owner":"w"}"#
        ),
        r#"{"name":"a","token":"[..]","fence":[..],"expires_in_ms":[..],"owner":"w"}"#
    );
    assert_eq!(transcript::redact("id: 1796198400000042"), "id: [..]");
    assert_eq!(
        transcript::redact("2026-12-02T08:05:15.845Z state nightly held=true"),
        "[..] state nightly held=true"
    );
}
