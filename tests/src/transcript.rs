//! Shell transcripts in Markdown (```` ```console ```` blocks) run against a
//! real broker and compared with the output they document.
//!
//! A transcript is a ```` ```console ```` block: each `$ ` line is a command
//! (a line ending in `\` continues on the next), the lines after it up to
//! the next `$ ` its expected output (stdout and stderr together). Every
//! block of one document runs in order in one `sh` session, in a scratch
//! directory, so a variable or file one command sets is there for the next.
//! Commands reach the test broker where they name `localhost:7700` or
//! `127.0.0.1:7700`, and `lockctl` finds it through `LOCKBROKER_URL`.
//!
//! In expected output `[..]` stands for anything within a line and a line
//! `...` for any number of lines (as in `trycmd`); everything else must be
//! exactly what the command printed, less trailing blank lines.
//!
//! A block that is not to be run says why on the line before it:
//! `<!-- transcript: not run: needs Docker -->`. A block of another kind
//! with `$ ` lines, or with a `curl` to the broker, that says nothing fails
//! [`check_blocks`]: every request the docs show is either tested or
//! marked.
//!
//! `TRANSCRIPTS=print` prints every command's actual output;
//! `TRANSCRIPTS=overwrite` writes it into the document where it differs,
//! with tokens, fences, times and ids replaced by `[..]`.

use std::io::Read;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The marker that keeps a block out of the run, followed by the reason.
pub const NOT_RUN: &str = "<!-- transcript: not run: ";

/// How long one document's transcripts may take in all.
const DOCUMENT_TIMEOUT: Duration = Duration::from_secs(120);

/// The repository's root, where README.md and docs/ are.
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("tests/ sits in the repository")
        .to_path_buf()
}

/// README.md and every docs/*.md, relative to the repository root.
pub fn documents() -> Vec<String> {
    let mut docs: Vec<String> = std::fs::read_dir(repo_root().join("docs"))
        .expect("docs/")
        .map(|entry| {
            entry
                .expect("docs entry")
                .file_name()
                .into_string()
                .expect("utf-8 name")
        })
        .filter(|name| name.ends_with(".md"))
        .map(|name| format!("docs/{name}"))
        .collect();
    docs.sort();
    docs.insert(0, "README.md".to_owned());
    docs
}

/// One fenced block of a Markdown file.
#[derive(Debug)]
pub struct Block {
    /// 1-based line of the opening fence.
    pub line: usize,
    /// The info string after the opening fence.
    pub info: String,
    /// The reason given by a [`NOT_RUN`] marker on the line before.
    pub not_run: Option<String>,
    /// The lines between the fences, as 0-based line indexes and text.
    pub body: Vec<(usize, String)>,
}

impl Block {
    fn is_console(&self) -> bool {
        self.info.split_whitespace().next() == Some("console")
    }
}

/// Every fenced block of `text`.
pub fn blocks(text: &str) -> Vec<Block> {
    let lines: Vec<&str> = text.lines().collect();
    let mut blocks = Vec::new();
    let mut index = 0;
    while index < lines.len() {
        let Some(info) = lines[index].strip_prefix("```") else {
            index += 1;
            continue;
        };
        let not_run = index
            .checked_sub(1)
            .and_then(|before| lines[before].trim().strip_prefix(NOT_RUN))
            .map(|rest| rest.trim_end_matches("-->").trim().to_owned());
        let mut block = Block {
            line: index + 1,
            info: info.trim().to_owned(),
            not_run,
            body: Vec::new(),
        };
        index += 1;
        while index < lines.len() && lines[index].trim() != "```" {
            block.body.push((index, lines[index].to_owned()));
            index += 1;
        }
        index += 1;
        blocks.push(block);
    }
    blocks
}

/// What is wrong with the blocks of `document` (named `file`): a block that
/// looks like a transcript but is not marked `console`, a request to the
/// broker that is neither a transcript nor marked not run, a marker without
/// a reason, a transcript with output before its first command.
pub fn check_blocks(file: &str, document: &str) -> Vec<String> {
    let mut problems = Vec::new();
    for block in blocks(document) {
        let at = format!("{file}:{}", block.line);
        if let Some(reason) = &block.not_run {
            if reason.is_empty() {
                problems.push(format!("{at}: a block not run must say why"));
            }
            continue;
        }
        if block.is_console() {
            if let Some((_, first)) = block.body.iter().find(|(_, l)| !l.trim().is_empty()) {
                if !first.starts_with("$ ") {
                    problems.push(format!("{at}: a transcript starts with a `$ ` command"));
                }
            }
            continue;
        }
        if block.body.iter().any(|(_, line)| line.starts_with("$ ")) {
            problems.push(format!(
                "{at}: has `$ ` commands: make it a ```console transcript, or mark it `{NOT_RUN}why -->`"
            ));
        } else if block
            .body
            .iter()
            .any(|(_, line)| line.contains("curl ") && line.contains(":7700"))
        {
            problems.push(format!(
                "{at}: sends a request to the broker: show it as a ```console transcript, or mark it `{NOT_RUN}why -->`"
            ));
        }
    }
    problems
}

/// One command of a transcript and the output it documents.
#[derive(Debug)]
pub struct Step {
    /// 1-based line of the `$ ` line.
    pub line: usize,
    /// The command as documented, continuation lines joined by newlines.
    pub command: String,
    /// The documented output lines, trailing blank lines left off.
    pub expected: Vec<String>,
    /// The 0-based line range of the documented output in the file.
    pub output_lines: std::ops::Range<usize>,
}

/// The commands of every transcript of `document` that is run, in order.
pub fn steps(document: &str) -> Vec<Step> {
    let mut steps: Vec<Step> = Vec::new();
    for block in blocks(document) {
        if !block.is_console() || block.not_run.is_some() {
            continue;
        }
        let mut body = block.body.iter().peekable();
        while let Some((index, line)) = body.next() {
            let Some(command) = line.strip_prefix("$ ") else {
                // Output lines are gathered below; these precede any command.
                continue;
            };
            let mut command = command.to_owned();
            while command.ends_with('\\') {
                match body.next() {
                    Some((_, more)) => {
                        command.push('\n');
                        command.push_str(more);
                    }
                    None => break,
                }
            }
            let start = body.peek().map_or(index + 1, |(next, _)| *next);
            let mut expected = Vec::new();
            let mut end = start;
            while let Some((next, output)) = body.peek() {
                if output.starts_with("$ ") {
                    break;
                }
                expected.push(output.clone());
                end = next + 1;
                body.next();
            }
            while expected.last().is_some_and(|l| l.trim().is_empty()) {
                expected.pop();
                end -= 1;
            }
            steps.push(Step {
                line: index + 1,
                command,
                expected,
                output_lines: start..end.max(start),
            });
        }
    }
    steps
}

/// Whether `actual` is what the `expected` line documents, `[..]` standing
/// for anything within the line.
pub fn line_matches(expected: &str, actual: &str) -> bool {
    let parts: Vec<&str> = expected.split("[..]").collect();
    if parts.len() == 1 {
        return expected == actual;
    }
    let (first, last) = (parts[0], parts[parts.len() - 1]);
    let Some(mut rest) = actual.strip_prefix(first) else {
        return false;
    };
    for middle in &parts[1..parts.len() - 1] {
        match rest.find(middle) {
            Some(at) => rest = &rest[at + middle.len()..],
            None => return false,
        }
    }
    rest.ends_with(last)
}

/// Whether the `actual` lines are what the `expected` ones document, a line
/// `...` standing for any number of lines.
pub fn output_matches(expected: &[String], actual: &[String]) -> bool {
    match expected.split_first() {
        None => actual.is_empty(),
        Some((dots, rest)) if dots == "..." => {
            (0..=actual.len()).any(|skip| output_matches(rest, &actual[skip..]))
        }
        Some((line, rest)) => actual
            .split_first()
            .is_some_and(|(got, more)| line_matches(line, got) && output_matches(rest, more)),
    }
}

/// One command's outcome.
#[derive(Debug)]
pub struct Outcome {
    /// The step run.
    pub step: Step,
    /// What it printed, trailing blank lines left off.
    pub actual: Vec<String>,
}

impl Outcome {
    /// Whether it printed what the document says.
    pub fn passed(&self) -> bool {
        output_matches(&self.step.expected, &self.actual)
    }
}

/// Runs `steps` in one `sh` session in `dir`, against the broker at `base`
/// (`http://127.0.0.1:<port>`), with `bin` first on the `PATH`.
pub fn run(steps: Vec<Step>, base: &str, bin: &Path, dir: &Path) -> Vec<Outcome> {
    let address = base.trim_start_matches("http://");
    let marker = format!("--transcript-step-{}-", std::process::id());
    let mut script = String::from("exec 2>&1\n");
    for (number, step) in steps.iter().enumerate() {
        let command = step
            .command
            .replace("localhost:7700", address)
            .replace("127.0.0.1:7700", address);
        script.push_str(&command);
        script.push_str(&format!("\nprintf '\\n%s\\n' '{marker}{number}'\n"));
    }
    let path = std::env::var_os("PATH").unwrap_or_default();
    let mut paths = vec![bin.to_path_buf()];
    paths.extend(std::env::split_paths(&path));
    let mut command = Command::new("sh");
    command
        .arg("-c")
        .arg(&script)
        .current_dir(dir)
        .env("PATH", std::env::join_paths(paths).expect("PATH"))
        .env("LOCKBROKER_URL", base)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .process_group(0);
    for (key, _) in std::env::vars() {
        if key.starts_with("LOCKBROKER_") && key != "LOCKBROKER_URL" {
            command.env_remove(key);
        }
    }
    let mut child = command.spawn().expect("start sh");
    let mut stdout = child.stdout.take().expect("stdout");
    let reader = std::thread::spawn(move || {
        let mut text = Vec::new();
        let _ = stdout.read_to_end(&mut text);
        text
    });
    let deadline = Instant::now() + DOCUMENT_TIMEOUT;
    while child.try_wait().expect("wait sh").is_none() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    // Background jobs a transcript left running (and the session itself,
    // past the deadline) end with it, so the output closes.
    let _ = Command::new("kill")
        .args(["-KILL", "--", &format!("-{}", child.id())])
        .stderr(Stdio::null())
        .status();
    let _ = child.wait();
    let output = String::from_utf8_lossy(&reader.join().expect("reader")).into_owned();
    let output = output.replace(address, "127.0.0.1:7700");

    let mut segments = Vec::new();
    let mut rest = output.as_str();
    for number in 0..steps.len() {
        let end = format!("\n{marker}{number}\n");
        match rest.find(&end) {
            Some(at) => {
                segments.push(rest[..at].to_owned());
                rest = &rest[at + end.len()..];
            }
            None => {
                segments.push(format!(
                    "{rest}\n(the session ended here, timed out or exited)"
                ));
                rest = "";
            }
        }
    }
    steps
        .into_iter()
        .zip(segments)
        .map(|(step, segment)| {
            let mut actual: Vec<String> = segment
                .lines()
                .map(|line| line.trim_end_matches('\r').to_owned())
                .collect();
            while actual.last().is_some_and(|l| l.trim().is_empty()) {
                actual.pop();
            }
            Outcome { step, actual }
        })
        .collect()
}

/// The failure report of `outcomes` for `file`: each command whose output
/// differs, with the documented and the actual output line by line.
pub fn report(file: &str, outcomes: &[Outcome]) -> Option<String> {
    let failed: Vec<&Outcome> = outcomes.iter().filter(|o| !o.passed()).collect();
    if failed.is_empty() {
        return None;
    }
    let mut text = format!(
        "{} of {} commands in {file} printed other than documented \
         (TRANSCRIPTS=overwrite writes the actual output into the file):\n",
        failed.len(),
        outcomes.len()
    );
    for outcome in failed {
        text.push_str(&format!(
            "\n{file}:{}: $ {}\n",
            outcome.step.line, outcome.step.command
        ));
        let rows = outcome.step.expected.len().max(outcome.actual.len());
        for row in 0..rows {
            let expected = outcome.step.expected.get(row);
            let actual = outcome.actual.get(row);
            let same = matches!((expected, actual), (Some(e), Some(a)) if line_matches(e, a));
            let mark = if same { ' ' } else { '!' };
            text.push_str(&format!(
                "  {mark} documented: {}\n  {mark} actual:     {}\n",
                expected.map_or("(no line)", String::as_str),
                actual.map_or("(no line)", String::as_str)
            ));
        }
    }
    Some(text)
}

/// `line` with what differs between runs (tokens, fences, times, ids,
/// request ids, dates) replaced by `[..]`: what overwrite mode writes.
pub fn redact(line: &str) -> String {
    const JSON_FIELDS: &[&str] = &[
        "token",
        "fence",
        "expires_at_ms",
        "expires_in_ms",
        "available_in_ms",
        "validity_ms",
    ];
    let mut line = line.to_owned();
    for field in JSON_FIELDS {
        let key = format!("\"{field}\":");
        let mut from = 0;
        while let Some(at) = line[from..].find(&key) {
            let start = from + at + key.len();
            let value = &line[start..];
            let (quoted, len) = if let Some(inner) = value.strip_prefix('"') {
                (true, inner.find('"').map_or(0, |end| end + 2))
            } else {
                (
                    false,
                    value
                        .find(|c: char| !c.is_ascii_digit())
                        .unwrap_or(value.len()),
                )
            };
            if len > 0 {
                let replacement = if quoted { "\"[..]\"" } else { "[..]" };
                line.replace_range(start..start + len, replacement);
                from = start + replacement.len();
            } else {
                from = start;
            }
        }
    }
    for header in ["id: ", "x-request-id: ", "date: ", "Last-Event-ID: "] {
        if line.starts_with(header) {
            return format!("{header}[..]");
        }
    }
    // lockctl watch starts each line with the time it arrived.
    if let Some(time) = line.get(..24) {
        if time.as_bytes()[4] == b'-' && time.ends_with('Z') {
            return format!("[..]{}", &line[24..]);
        }
    }
    line
}

/// Writes the actual outputs of the `outcomes` that differ into `path`,
/// keeping documented lines that still match.
pub fn overwrite(path: &Path, outcomes: &[Outcome]) {
    let text = std::fs::read_to_string(path).expect("read document");
    let mut lines: Vec<String> = text.lines().map(str::to_owned).collect();
    for outcome in outcomes.iter().rev().filter(|o| !o.passed()) {
        let step = &outcome.step;
        let written: Vec<String> = if step.expected.len() == outcome.actual.len() {
            step.expected
                .iter()
                .zip(&outcome.actual)
                .map(|(e, a)| {
                    if line_matches(e, a) {
                        e.clone()
                    } else {
                        redact(a)
                    }
                })
                .collect()
        } else {
            outcome.actual.iter().map(|a| redact(a)).collect()
        };
        lines.splice(step.output_lines.clone(), written);
    }
    let mut text = lines.join("\n");
    text.push('\n');
    std::fs::write(path, text).expect("write document");
}
